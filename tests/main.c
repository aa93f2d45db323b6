/* main.c: the test runner. Usage: tests/run [substring] */
#define _GNU_SOURCE
#include "test.h"
#include "mxlm/mx.h"
#include "mxlm/shard.h"

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

void* test_read_file(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    char* b = NULL;
    long sz = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (sz >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)sz + 1))) {
        if (fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); b = NULL; }
        else { b[sz] = 0; *n = (size_t)sz; }
    }
    fclose(f);
    return b;
}

int test_micro_llama(const char* recipe, mx_llama* a, mx_llama* b) {
    mx_model_config c;
    mx_model_preset("tiny", &c);
    c.vocab = 32; c.dim = 32; c.n_layers = 1; c.n_heads = 1; c.n_kv_heads = 1; c.ffn = 32; c.seq_len = 8;
    mx_recipe r;
    if (mx_recipe_parse(recipe, &r) || mx_llama_create(a, &c, &r, 0, 0, 1)) return 0;
    return !b || mx_llama_create(b, &c, &r, 0, 0, 1) == 0;
}

void test_lcg_matrix(float* x, float* xt, int R, int C, uint64_t s, int every, float spike) {
    for (int i = 0; i < R * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ((float)(s >> 40) / 16777216.0f - 0.5f) * (i % every == 0 ? spike : 1.0f);
    }
    for (int r = 0; xt && r < R; r++)
        for (int c = 0; c < C; c++) xt[c * R + r] = x[r * C + c];
}

int test_log_has(const char* name, const char* needle) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s.log", test_tmpdir(), name);
    FILE* f = fopen(p, "r");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    buf[k] = 0;
    fclose(f);
    return strstr(buf, needle) != NULL;
}

int test_metric_strings(const char* dir, const char* key, const char* unless, char vals[][32], int max) {
    char p[512], line[4096], pat[64];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", test_tmpdir(), dir);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    FILE* f = fopen(p, "r");
    if (!f) return -1;
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        char* s = strstr(line, pat);
        if (!s || (unless && strstr(line, unless))) continue;
        s += strlen(pat);
        size_t k = strcspn(s, ",}");
        snprintf(vals[n++], 32, "%.*s", (int)(k < 31 ? k : 31), s);
    }
    fclose(f);
    return n;
}

const char* test_docs_jsonl(const char* name, int n) {
    static char p[4][512]; /* (a few calls may stand in one argument list) */
    static int k = 0;
    char* q = p[k++ % 4];
    snprintf(q, sizeof p[0], "%s/%s", test_tmpdir(), name);
    test_sh("for i in $(seq 1 %d); do echo \"{\\\"text\\\":\\\"document $i: in the beginning was the word\\\"}\"; "
            "done > %s", n, q);
    return q;
}

int test_prep(const char* log, const char* args) {
    return test_sh("%s prep --encoding tiny --quiet %s > %s/%s.log 2>&1", test_mxlm_bin(), args, test_tmpdir(), log);
}

void test_sentence_shards(const char* prefix, uint32_t seed, int64_t n_train, int64_t n_val) {
    static struct { int used; char prefix[64]; } done[8];
    /* The CLI runs in child processes: let idle OpenMP threads sleep instead of
     * spinning, or a loaded 2-core machine makes every barrier cost a time slice. */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    int slot = -1;
    for (int i = 0; i < 8 && slot < 0; i++) {
        if (done[i].used && !strcmp(done[i].prefix, prefix)) return;
        if (!done[i].used) slot = i;
    }
    if (slot >= 0) { done[slot].used = 1; snprintf(done[slot].prefix, sizeof done[slot].prefix, "%s", prefix); }
    uint32_t s = seed;
    uint32_t sent[24][12];
    for (int i = 0; i < 24; i++)
        for (int j = 0; j < 12; j++) { s = s * 1664525u + 1013904223u; sent[i][j] = (s >> 8) % 255; }
    for (int f = 0; f < 2; f++) {
        int64_t n = f == 0 ? n_train : n_val;
        uint32_t* t = malloc(sizeof(uint32_t) * (size_t)n);
        if (!t) { fprintf(stderr, "test_sentence_shards: out of memory\n"); exit(2); }
        for (int64_t i = 0; i < n;) {
            s = s * 1664525u + 1013904223u;
            int k = (s >> 8) % 24;
            for (int j = 0; j < 12 && i < n; j++) t[i++] = sent[k][j];
            if (i < n && (s >> 20) % 4 == 0) t[i++] = 255; /* end of text */
        }
        char p[512];
        snprintf(p, sizeof p, "%s/%s%s.bin", test_tmpdir(), prefix, f == 0 ? "train" : "val");
        if (mx_shard_write(p, t, n, 1)) { fprintf(stderr, "test_sentence_shards: %s\n", mx_last_error()); exit(2); }
        free(t);
    }
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
    if (g_tmp[0] && !getenv("MXLM_TEST_KEEP")) test_sh("rm -rf '%s'", g_tmp); /* MXLM_TEST_KEEP=1: kept to look at */
    else if (g_tmp[0]) printf("test files kept in %s\n", g_tmp);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
