/*
 * error.h: errors (src/util/error.c). Library functions return 0 (MX_OK) or a
 * negative mx_err and leave a message for mx_last_error(); they never exit or
 * print. Every header of the library that returns errors includes this one.
 */
#ifndef MXLM_ERROR_H
#define MXLM_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* MX_EUSAGE: an option's value the library finds wrong against what it reads (a checkpoint's step, the
 * validation set's size): a usage error, which the CLI reports with exit status 2. */
typedef enum { MX_OK = 0, MX_EINVAL = -1, MX_ENOMEM = -2, MX_EIO = -3, MX_EFORMAT = -4, MX_EUSAGE = -5 } mx_err;

/* The message of the last error on this thread. */
const char* mx_last_error(void);
/* Set the message (printf-style) and return `code`. */
int mx_fail(int code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
