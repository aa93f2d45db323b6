/* util.c: the shared helpers of util.h. */
#include "mxlm/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxlm/mx.h"

void mx_sb_printf(mx_sbuf* b, const char* fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { b->oom = 1; return; }
        if (b->s && (size_t)k < room) { b->n += (size_t)k; return; }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n <= (size_t)k) cap *= 2;
        char* t = realloc(b->s, cap);
        if (!t) { b->oom = 1; return; }
        b->s = t;
        b->cap = cap;
    }
}

int mx_mkdirs(const char* path) {
    char p[4096];
    if (!*path) return mx_fail(MX_EINVAL, "empty directory name");
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return mx_fail(MX_EINVAL, "path too long: %s", path);
    for (char* s = p + 1;; s++)
        if (*s == '/' || !*s) {
            const char c = *s;
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) return mx_fail(MX_EIO, "%s: cannot create: %s", p, strerror(errno));
            if (!c) break;
            *s = c;
        }
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return mx_fail(MX_EIO, "%s: not a directory", p);
    return MX_OK;
}

int mx_write_atomic(const char* path, const void* data, size_t n) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return mx_fail(MX_EINVAL, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return mx_fail(MX_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    const char* p = data;
    size_t done = 0;
    int err = 0;
    while (done < n && !err) {
        ssize_t k = write(fd, p + done, n - done);
        if (k < 0 && errno != EINTR) err = errno;
        if (k > 0) done += (size_t)k;
    }
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) { unlink(tmp); return mx_fail(MX_EIO, "%s: cannot write: %s", path, strerror(err)); }
    return MX_OK;
}

int mx_pread_all(int fd, void* dst, size_t n, uint64_t off) {
    unsigned char* p = dst;
    while (n) {
        size_t c = n > (1u << 30) ? (1u << 30) : n;
        ssize_t k = pread(fd, p, c, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

char* mx_read_text(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char* b = malloc(cap + 1);
    while (b) {
        size_t k = fread(b + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        char* t = realloc(b, cap * 2 + 1);
        if (!t) { free(b); b = NULL; errno = ENOMEM; break; }
        b = t;
        cap *= 2;
    }
    if (b && ferror(f)) { free(b); b = NULL; errno = EIO; }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}
