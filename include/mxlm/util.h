/*
 * util.h: small helpers shared by the library's file writers and readers
 * (src/util/util.c). Errors through mx_fail (error.h), nothing printed.
 */
#ifndef MXLM_UTIL_H
#define MXLM_UTIL_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "mxlm/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A growing string: start from {0}; after an allocation failure `oom` is set and later calls do
 * nothing. s is NUL-terminated when non-NULL; free(s) when done. */
typedef struct { char* s; size_t n, cap; int oom; } mx_sbuf;
void mx_sb_printf(mx_sbuf* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* An output file, the one way every writer of the project writes a file (issue 48, class 1):
 *   a new path or a regular file: a temporary file in the target's folder ("NAME.tmp.PID": never a
 *     "*.bin" name a shard glob picks up), fsync, rename onto the target, the folder fsync'ed; a
 *     reader sees the old file or the new one, never half;
 *   a symbolic link to a regular file: the same on the link's target (realpath), so the link stays a
 *     link;
 *   a device or a FIFO (or a link to one): written through, as a shell's '>' does (a FIFO without a
 *     reader is refused, not waited for);
 *   a directory, a socket or a dangling link: refused with the reason.
 * mx_out_open fills *o; mx_out_write keeps the first error; mx_out_sync fsyncs and closes;
 * mx_out_commit (syncing first when needed) renames; mx_out_abort removes the temporary. After
 * commit or abort, *o owns nothing. `what` names the file in messages ("checkpoint", "shard"). */
typedef struct {
    int fd, err;
    int direct;   /* written through: no temporary, no rename */
    int synced;   /* mx_out_sync done */
    char* target; /* the file renamed onto (the link's target for a link); malloc'ed */
    char* tmp;    /* the temporary (NULL when direct); malloc'ed */
} mx_outfile;
int mx_out_open(mx_outfile* o, const char* path);
/* The rules above without opening anything: *target (malloc'ed; the caller frees it) is the file to
 * replace, *direct = 1 for a device or a FIFO (write through `path` itself); an error for the refused. */
int mx_out_resolve(const char* path, char** target, int* direct);
void mx_out_write(mx_outfile* o, const void* data, size_t n);
int mx_out_sync(mx_outfile* o, const char* what);
int mx_out_commit(mx_outfile* o, const char* what);
void mx_out_abort(mx_outfile* o);

/* Write data[n] to `path` through an mx_outfile (above): atomically for a regular file. On failure
 * the temporary file is removed and `path` is untouched. */
int mx_write_atomic(const char* path, const void* data, size_t n);

/* The longest path mxlm takes from a user (the run configuration keeps paths in 1024-byte fields; the file
 * names it derives from them fit its buffers); the CLI refuses a longer one with exit 2. */
#define MX_PATH_LEN 1023

/* snprintf for a path (issue 48, class 4): MX_OK, or MX_EINVAL with "path too long (N bytes, more than
 * the M this takes): START..." when it does not fit in buf[n]. A path is never cut short silently. */
int mx_pathf(char* buf, size_t n, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int mx_vpathf(char* buf, size_t n, const char* fmt, va_list ap) __attribute__((format(printf, 3, 0)));

/* Every file mxlm reads is opened through these (issue 48, class 13): opened with O_NONBLOCK (a FIFO opens
 * at once instead of waiting for a writer forever), then fstat'ed: anything but a regular file (a FIFO, a
 * device, a directory, a socket; links are followed) is refused with "PATH: not a regular file (a FIFO)",
 * then the flag is cleared. mx_open_input: the fd, or -1 (-2: not a regular file) with the message
 * "PATH: cannot open WHAT: why"
 * (mx_last_error; errno set; `what` "checkpoint", "shard", ... or NULL); mx_fopen_input: the same as a FILE*
 * ("rb"). mx_check_input: the same check without keeping it open, for inputs checked before anything is
 * created (0 also when the path does not exist: the reader reports that). */
int mx_open_input(const char* path, const char* what);
FILE* mx_fopen_input(const char* path, const char* what);
int mx_check_input(const char* path, const char* what);

/* An exclusive lock (flock) on the file `path` (created, mode 0644), taken without waiting: 0 with *fd
 * holding it (closing *fd releases it), 1 when another process holds it (*fd -1), an error (mx_fail)
 * when the file cannot be made. mxlm train locks DIR/.lock, mxlm prep DIR/.NAME.lock of its outputs. */
int mx_lock_take(const char* path, int* fd);

/* Create a directory and its missing parents (mode 0755); an existing directory is fine, an
 * existing non-directory is an error. */
int mx_mkdirs(const char* path);

/* Read exactly n bytes at offset off (EINTR retried, in pieces of at most 1 GiB); -1 on a short
 * read or an error (errno set), 0 otherwise. */
int mx_pread_all(int fd, void* dst, size_t n, uint64_t off);

/* The whole file at path (opened with mx_fopen_input), NUL-terminated, malloc'ed (the caller frees it); NULL
 * on an error (errno set, the message in mx_last_error). */
char* mx_read_text(const char* path);

#ifdef __cplusplus
}
#endif
#endif
