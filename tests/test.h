/* test.h: a minimal test runner. Each TEST(name) registers itself; the runner
 * (tests/main.c) runs them all, or those whose name contains argv[1], and
 * ends with the line "N passed, N failed". */
#ifndef MXLM_TEST_H
#define MXLM_TEST_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "mxlm/model.h"

typedef void (*test_fn)(void);
void test_register(const char* name, const char* file, test_fn fn);
extern int test_failures; /* failures in the current test */
void test_fail_at(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Path of the built CLI (MXLM_BIN, default ./mxlm) and a scratch directory. */
const char* test_mxlm_bin(void);
const char* test_tmpdir(void);
/* Run a shell command line; return its exit status (-1 on signal). */
int test_sh(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* A whole file, malloc'ed with a NUL byte after its n bytes; NULL if it cannot be read. */
void* test_read_file(const char* path, size_t* n);
/* Write TMPDIR/<prefix>train.bin and <prefix>val.bin (llm.c shards, vocab 256): documents drawn
 * from 24 fixed random "sentences" of 12 tokens (a model learns them quickly), 255 = end of text.
 * Once per prefix per process; also sets OMP_WAIT_POLICY=passive for the CLI's child processes. */
/* Does TMPDIR/NAME.log contain `needle` (first 64 KiB)? */
int test_log_has(const char* name, const char* needle);
/* Values of `key` (as text) on the lines of TMPDIR/DIR/metrics.jsonl that have it and do not
 * contain `unless` (NULL: none); at most `max`; -1 if the file is missing. */
int test_metric_strings(const char* dir, const char* key, const char* unless, char vals[][32], int max);
void test_sentence_shards(const char* prefix, uint32_t seed, int64_t n_train, int64_t n_val);
/* TMP/NAME: n small JSON Lines documents ("document i: in the beginning was the word"), written now; its path. */
const char* test_docs_jsonl(const char* name, int n);
/* `mxlm prep --encoding tiny --quiet ARGS`, its output in TMP/LOG.log; the exit status. */
int test_prep(const char* log, const char* args);
/* x [R, C] uniform in [-0.5, 0.5) from a 64-bit LCG started at seed (every element i with i % every == 0
 * times spike), and xt [C, R] its transpose (NULL: not wanted). */
/* The tests' smallest model: the tiny preset cut to vocab 32, dim 32, 1 layer, 1 head, ffn 32, context 8, in
 * recipe `recipe` (seed 1): a, and b too when not NULL. 0 when it could not be made. */
int test_micro_llama(const char* recipe, mx_llama* a, mx_llama* b);
void test_lcg_matrix(float* x, float* xt, int R, int C, uint64_t seed, int every, float spike);

#define TEST(name)                                                              \
    static void test_##name(void);                                              \
    __attribute__((constructor)) static void test_reg_##name(void) {            \
        test_register(#name, __FILE__, test_##name);                            \
    }                                                                           \
    static void test_##name(void)

#define CHECK(cond)                                                             \
    do { if (!(cond)) test_fail_at(__FILE__, __LINE__, "CHECK(%s)", #cond); } while (0)
#define CHECKF(cond, ...)                                                       \
    do { if (!(cond)) test_fail_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CHECK_EQ_INT(a, b)                                                      \
    do { long long _a = (long long)(a), _b = (long long)(b);                    \
         if (_a != _b) test_fail_at(__FILE__, __LINE__, "%s = %lld, expected %s = %lld", #a, _a, #b, _b); } while (0)
#define CHECK_NEAR(a, b, tol)                                                   \
    do { double _a = (double)(a), _b = (double)(b), _t = (double)(tol);         \
         if (!(fabs(_a - _b) <= _t)) test_fail_at(__FILE__, __LINE__, "%s = %.9g, expected %.9g (tol %.3g)", #a, _a, _b, _t); } while (0)
/* Bit-identical floats (NaN == NaN). */
#define CHECK_SAME_F(a, b)                                                      \
    do { float _a = (a), _b = (b);                                              \
         if (!((_a == _b && !signbit(_a) == !signbit(_b)) || (_a != _a && _b != _b))) \
             test_fail_at(__FILE__, __LINE__, "%s = %.9g, expected %.9g", #a, (double)_a, (double)_b); } while (0)
/* Stop the current test if it has failed (avoid cascades). */
#define REQUIRE(cond)                                                           \
    do { if (!(cond)) { test_fail_at(__FILE__, __LINE__, "REQUIRE(%s)", #cond); return; } } while (0)
#endif
