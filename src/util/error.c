/* error.c: errors (error.h): the message of the last error, one per thread. */
#include "mxlm/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char g_err[512];

const char* mx_last_error(void) { return g_err[0] ? g_err : "no error"; }

int mx_fail(int code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return code;
}
