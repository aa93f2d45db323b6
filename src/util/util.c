/* util.c: the shared helpers of util.h. */
#include "mxlm/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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

int mx_pathf(char* buf, size_t n, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int rc = mx_vpathf(buf, n, fmt, ap);
    va_end(ap);
    return rc;
}

int mx_vpathf(char* buf, size_t n, const char* fmt, va_list ap) {
    const int k = vsnprintf(buf, n, fmt, ap);
    if (k >= 0 && (size_t)k < n) return MX_OK;
    mx_fail(MX_EINVAL, "path too long (%d bytes, more than the %zu this takes): %.80s...", k, n ? n - 1 : 0, n ? buf : "");
    if (n) buf[0] = 0; /* never a cut path */
    return MX_EINVAL;
}

/* ---- input files (util.h: mx_open_input) ----------------------------------------------------- */

static const char* file_kind(mode_t m) {
    return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

static int input_fail(const char* path, const char* what, const char* why) {
    return mx_fail(MX_EIO, "%s: cannot open%s%s: %s", path, what ? " " : "", what ? what : "", why);
}

static int not_regular(const char* path, const char* what, mode_t m) {
    char why[128];
    snprintf(why, sizeof why, "not a regular file (%s): mxlm reads its inputs from files only", file_kind(m));
    input_fail(path, what, why);
    errno = EINVAL;
    return MX_EIO;
}

int mx_open_input(const char* path, const char* what) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        input_fail(path, what, strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    int bad = 0;
    if (fstat(fd, &st) != 0) bad = (input_fail(path, what, strerror(errno)), -1);
    else if (!S_ISREG(st.st_mode)) bad = (not_regular(path, what, st.st_mode), -2);
    if (bad) {
        const int e = errno;
        close(fd);
        errno = e;
        return bad;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE* mx_fopen_input(const char* path, const char* what) {
    int fd = mx_open_input(path, what);
    if (fd < 0) return NULL;
    FILE* f = fdopen(fd, "rb");
    if (!f) { input_fail(path, what, strerror(errno)); close(fd); }
    return f;
}

int mx_check_input(const char* path, const char* what) {
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return MX_OK;
    return not_regular(path, what, st.st_mode);
}

int mx_lock_take(const char* path, int* fd) {
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0) return mx_fail(MX_EIO, "%s: cannot create the lock file: %s", path, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0) return 0;
    const int e = errno;
    close(*fd);
    *fd = -1;
    if (e == EWOULDBLOCK) return 1;
    return mx_fail(MX_EIO, "%s: cannot lock: %s", path, strerror(e));
}

int mx_mkdirs(const char* path) {
    char p[4096];
    if (!*path) return mx_fail(MX_EINVAL, "empty directory name");
    if (mx_pathf(p, sizeof p, "%s", path)) return MX_EINVAL;
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

/* ---- output files (util.h: mx_outfile) ---------------------------------------------------- */

static int io_fail(int err, const char* path, const char* what, const char* how) {
    return mx_fail(MX_EIO, "%s: cannot write%s%s: %s", path, what ? " " : "", what ? what : "", how ? how : strerror(err));
}
static int out_fail(mx_outfile* o, int err, const char* path, const char* what, const char* how) {
    o->err = err;
    return io_fail(err, path, what, how);
}

int mx_out_resolve(const char* path, char** target, int* direct) {
    struct stat ls, st;
    *direct = 0;
    *target = NULL;
    if (lstat(path, &ls) != 0) {
        if (errno != ENOENT) return io_fail(errno, path, NULL, NULL);
        *target = strdup(path);
    } else if (stat(path, &st) != 0) {
        return io_fail(errno, path, NULL, "a symbolic link to nothing (remove it or point it at a file)");
    } else if (S_ISDIR(st.st_mode)) {
        return io_fail(EISDIR, path, NULL, "a directory, not a file");
    } else if (S_ISREG(st.st_mode)) {
        *target = S_ISLNK(ls.st_mode) ? realpath(path, NULL) : strdup(path);
        if (S_ISLNK(ls.st_mode) && !*target) return io_fail(errno, path, NULL, NULL);
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode)) {
        *target = strdup(path);
        *direct = 1;
    } else {
        return io_fail(EINVAL, path, NULL, "not a regular file, a device or a FIFO");
    }
    if (!*target) return io_fail(ENOMEM, path, NULL, NULL);
    return MX_OK;
}

/* Open a device or a FIFO to write through (a FIFO without a reader: ENXIO at once, not a hang). */
static int out_open_direct(mx_outfile* o) {
    o->fd = open(o->target, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (o->fd < 0)
        return out_fail(o, errno, o->target, NULL, errno == ENXIO ? "a FIFO that no process reads" : NULL);
    int fl = fcntl(o->fd, F_GETFL);
    if (fl != -1) fcntl(o->fd, F_SETFL, fl & ~O_NONBLOCK);
    return MX_OK;
}

int mx_out_open(mx_outfile* o, const char* path) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    int rc = mx_out_resolve(path, &o->target, &o->direct);
    if (rc) return rc;
    if (o->direct) {
        rc = out_open_direct(o);
        if (rc) { free(o->target); o->target = NULL; }
        return rc;
    }
    size_t n = strlen(o->target) + 32;
    o->tmp = malloc(n);
    if (!o->tmp) { free(o->target); o->target = NULL; return mx_fail(MX_ENOMEM, "out of memory"); }
    snprintf(o->tmp, n, "%s.tmp.%d", o->target, (int)getpid());
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        o->err = errno;
        rc = mx_fail(MX_EIO, "%s: cannot create: %s", o->tmp, strerror(o->err));
        free(o->tmp); free(o->target);
        o->tmp = o->target = NULL;
        return rc;
    }
    return MX_OK;
}

void mx_out_write(mx_outfile* o, const void* data, size_t n) {
    const char* p = data;
    while (n && !o->err) {
        ssize_t k = write(o->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno != EINTR) o->err = errno;
        if (k > 0) { p += k; n -= (size_t)k; }
    }
}

static void out_free(mx_outfile* o) {
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    free(o->tmp);
    free(o->target);
    o->tmp = o->target = NULL;
}

void mx_out_abort(mx_outfile* o) {
    if (o->tmp) unlink(o->tmp);
    out_free(o);
}

/* The first error (errno) of the writes, the fsync and the close. A device or a FIFO is not fsync'ed. */
static int out_sync_err(mx_outfile* o) {
    int err = o->err;
    if (!err && !o->direct && fsync(o->fd) != 0) err = errno;
    if (close(o->fd) != 0 && !err) err = errno;
    o->fd = -1;
    o->synced = 1;
    return err;
}

int mx_out_sync(mx_outfile* o, const char* what) {
    if (o->synced) return o->err ? MX_EIO : MX_OK;
    int err = out_sync_err(o);
    if (!err) return MX_OK;
    int rc = out_fail(o, err, o->target, what, NULL);
    mx_out_abort(o);
    return rc;
}

static void fsync_parent(const char* path) {
    const char* sl = strrchr(path, '/');
    char* dir = sl ? strndup(path, sl == path ? 1 : (size_t)(sl - path)) : strdup(".");
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    free(dir);
}

int mx_out_commit(mx_outfile* o, const char* what) {
    int rc = mx_out_sync(o, what);
    if (rc) return rc;
    if (!o->direct && rename(o->tmp, o->target) != 0) {
        rc = out_fail(o, errno, o->target, what, NULL);
        mx_out_abort(o);
        return rc;
    }
    if (!o->direct) fsync_parent(o->target);
    out_free(o);
    return MX_OK;
}

int mx_write_atomic(const char* path, const void* data, size_t n) {
    mx_outfile o;
    int rc = mx_out_open(&o, path);
    if (rc) return rc;
    mx_out_write(&o, data, n);
    return mx_out_commit(&o, NULL);
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
    FILE* f = mx_fopen_input(path, NULL);
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char* b = malloc(cap + 1);
    while (b) {
        size_t k = fread(b + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        char* t = realloc(b, cap * 2 + 1);
        if (!t) { free(b); b = NULL; mx_fail(MX_ENOMEM, "%s: out of memory", path); errno = ENOMEM; break; }
        b = t;
        cap *= 2;
    }
    if (b && ferror(f)) { free(b); b = NULL; mx_fail(MX_EIO, "%s: cannot read: %s", path, strerror(EIO)); errno = EIO; }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}
