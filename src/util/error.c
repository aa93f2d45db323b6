/* error.c: errors (error.h): the message of the last error, one per thread. */
#include "mxlm/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_err[512];

const char* mx_last_error(void) { return g_err[0] ? g_err : "no error"; }

/* Formatted apart, then copied: a message may wrap the last one (mx_fail(rc, "%s: %s", file, mx_last_error())),
 * whose text would otherwise be overwritten while it is read. */
int mx_fail(int code, const char* fmt, ...) {
    char buf[sizeof g_err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(g_err, buf, sizeof g_err);
    return code;
}
