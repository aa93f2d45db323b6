/*
 * util.h: small helpers shared by the library's file writers and readers
 * (src/util/util.c). Errors through mx_fail (error.h), nothing printed.
 */
#ifndef MXLM_UTIL_H
#define MXLM_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A growing string: start from {0}; after an allocation failure `oom` is set and later calls do
 * nothing. s is NUL-terminated when non-NULL; free(s) when done. */
typedef struct { char* s; size_t n, cap; int oom; } mx_sbuf;
void mx_sb_printf(mx_sbuf* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* Write data[n] to `path` atomically: a temporary file beside it (path.tmp.PID), fsync, rename.
 * On failure the temporary file is removed and `path` is untouched. */
int mx_write_atomic(const char* path, const void* data, size_t n);

/* Create a directory and its missing parents (mode 0755); an existing directory is fine, an
 * existing non-directory is an error. */
int mx_mkdirs(const char* path);

/* Read exactly n bytes at offset off (EINTR retried, in pieces of at most 1 GiB); -1 on a short
 * read or an error (errno set), 0 otherwise. */
int mx_pread_all(int fd, void* dst, size_t n, uint64_t off);

/* The whole file at path, NUL-terminated, malloc'ed (the caller frees it); NULL on an error (errno set). */
char* mx_read_text(const char* path);

#ifdef __cplusplus
}
#endif
#endif
