/* util.c: the shared helpers of util.h. */
#include "mxlm/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int mx_write_atomic(const char* path, const void* data, size_t n) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
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
