/* crashpoint.c: deterministic crash points for the kill-and-resume tests
 * (MXLM_TEST_CRASH="POINT@STEP[:ACTION]", see trainer.h). Unset: one getenv. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mxlm/trainer.h"

void mx_crash_point(const char* point, int64_t step) {
    const char* e = getenv("MXLM_TEST_CRASH");
    if (!e || !*e) return;
    const char* at = strchr(e, '@');
    if (!at || (size_t)(at - e) != strlen(point) || strncmp(e, point, (size_t)(at - e))) return;
    const char* rest = at + 1;
    if (*rest == '*') rest++;
    else {
        char* end = NULL;
        long long s = strtoll(rest, &end, 10);
        if (end == rest || s != step) return;
        rest = end;
    }
    if (!*rest || !strcmp(rest, ":kill")) {
        raise(SIGKILL);
    } else if (!strcmp(rest, ":pause")) {
        char msg[160];
        int k = snprintf(msg, sizeof msg, "mxlm: test crash point %s@%lld reached (pid %d), paused\n", point,
                         (long long)step, (int)getpid());
        if (k > 0 && write(2, msg, (size_t)k) < 0) { /* nothing to do */ }
        signal(SIGTERM, SIG_DFL); /* paused: a signal from outside ends it, as the tests expect (not the */
        signal(SIGINT, SIG_DFL);  /* trainer's graceful stop, which waits for a step boundary) */
        for (;;) pause();
    } else if (!strcmp(rest, ":term")) {
        raise(SIGTERM); /* a graceful stop at a known moment (the trainer's handler sets its flag) */
    } else if (!strcmp(rest, ":int")) {
        raise(SIGINT);
    } else if (!strncmp(rest, ":sleep=", 7)) {
        long ms = strtol(rest + 7, NULL, 10);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) { /* EINTR: sleep the rest */ }
    }
}
