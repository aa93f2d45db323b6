/* main.c: the test runner. Usage: tests/run [substring] */
#define _GNU_SOURCE
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { const char* name; const char* file; test_fn fn; } test_case;
static test_case g_tests[1024];
static int g_n;
int test_failures;

void test_register(const char* name, const char* file, test_fn fn) {
    if (g_n < 1024) g_tests[g_n++] = (test_case){name, file, fn};
}

void test_fail_at(const char* file, int line, const char* fmt, ...) {
    if (test_failures < 5) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "    %s:%d: ", file, line);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    } else if (test_failures == 5) fprintf(stderr, "    (more failures not shown)\n");
    test_failures++;
}

const char* test_mxlm_bin(void) {
    const char* b = getenv("MXLM_BIN");
    return b && *b ? b : "./mxlm";
}

static char g_tmp[256];
const char* test_tmpdir(void) {
    if (!g_tmp[0]) {
        snprintf(g_tmp, sizeof g_tmp, "%s/mxlm-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(g_tmp)) { perror("mkdtemp"); exit(2); }
    }
    return g_tmp;
}

int test_sh(const char* fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static int cmp_case(const void* a, const void* b) {
    const test_case *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char** argv) {
    const char* filter = argc > 1 ? argv[1] : NULL;
    qsort(g_tests, g_n, sizeof g_tests[0], cmp_case);
    int passed = 0, failed = 0;
    for (int i = 0; i < g_n; i++) {
        if (filter && !strstr(g_tests[i].name, filter) && !strstr(g_tests[i].file, filter)) continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        test_failures = 0;
        g_tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        const char* f = strrchr(g_tests[i].file, '/');
        printf("%s %s/%s (%.0f ms)\n", test_failures ? "FAIL" : "ok  ", f ? f + 1 : g_tests[i].file,
               g_tests[i].name, ms);
        fflush(stdout);
        if (test_failures) failed++; else passed++;
    }
    if (g_tmp[0]) test_sh("rm -rf '%s'", g_tmp);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
