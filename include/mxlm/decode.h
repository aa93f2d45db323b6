/*
 * decode.h: using a trained model on the CPU (src/nn/decode.c): an
 * incremental forward with a key/value cache, and a seeded sampler.
 *
 * mx_llama_decode feeds n new tokens at positions pos .. pos+n-1: they
 * attend to the cached keys/values of positions 0 .. pos-1 and to each
 * other (causal); their keys (after RoPE) and values are appended. Every
 * step is the one mx_llama_forward computes, in the same order: the block
 * linears through mx_linear_forward with the model's recipe per block, RoPE
 * from the same tables, the attention's dot products, softmax and weighted
 * sums term by term in the same order as src/nn/attention.c, the head in
 * FP32 (or BF16 operands when head_bf16). So the logits are BIT-IDENTICAL to
 * the full forward's for every recipe whose Fprop quantizes each token's row
 * on its own: fp32, bf16, MXFP4 with RNE on the activations, with or without
 * a (fixed or random-sign) Hadamard rotation - every named recipe except fp8
 * (per-tensor scale: here the scale is that of the tokens fed in one call)
 * and the -sr ones (the SR bits of an activation element are indexed by its
 * row in the call). tests/test_eval.c checks the identity.
 *
 * The cache is on the CPU here; the GPU twin (src/cuda/nn/decode.cu,
 * gpu_model.h: mxg_kv_create, mxg_llama_decode, mxg_generate) keeps it in
 * device memory.
 *
 * The sampler draws from Philox (mx_rand_u32(seed, MX_RNG_SAMPLE, 0, ...)),
 * counter-based: the same seed gives the same tokens on any machine and
 * thread count (the probabilities are exp() in double of float logits).
 *
 * Library code: errors are returned (mx_fail), never printed.
 */
#ifndef MXLM_DECODE_H
#define MXLM_DECODE_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const mx_llama* m;    /* weights, shape, recipe per block, seed, head_bf16 (read only) */
    int cap;              /* positions the cache holds (<= the model's context) */
    int pos;              /* positions filled */
    uint64_t step;        /* the linear layers' step (SR bits, rh=step signs); set from m->step */
    float* k;             /* [L, cap, KV*hd] keys after RoPE */
    float* v;             /* [L, cap, KV*hd] values */
    float *rope_cos, *rope_sin; /* [cap, hd/2] (mx_rope_tables) */
} mx_kv_cache;

int mx_kv_create(mx_kv_cache* c, const mx_llama* m, int cap);
void mx_kv_free(mx_kv_cache* c);
static inline void mx_kv_reset(mx_kv_cache* c) { c->pos = 0; }

/* Feed tokens [n] at positions c->pos .. c->pos+n-1 (c->pos + n <= c->cap).
 * all = 1: logits [n, V] of every new position; all = 0: logits [V] of the
 * last one only (the prompt's prefill). */
int mx_llama_decode(mx_kv_cache* c, const int32_t* tokens, int n, float* logits, int all);

typedef struct {
    double temperature;   /* 0: greedy (the first id of the largest logit) */
    int top_k;            /* 0: off; else only the k most likely ids */
    double top_p;         /* 1: off; else the smallest set of most likely ids whose probability is >= top_p */
    uint64_t seed;
} mx_sample_opts;

/* The next token from logits [V], the i-th draw of the seed's stream:
 * candidates ordered by logit (larger first, then smaller id), cut by top_k,
 * p ~ exp((z - zmax) / temperature) in double, cut by top_p, then the first
 * candidate whose cumulative probability exceeds u * total, u in [0, 1) from
 * two Philox words (53 bits). Refuses NaN logits. */
int mx_sample_pick(const float* logits, int V, const mx_sample_opts* o, uint64_t i, int32_t* id);

/* Prompt [n_prompt] (at least 1 token), then up to n_new sampled tokens into
 * out [n_new] (*n_out of them): generation stops after a token equal to
 * stop_id (kept in out; -1: no stop). Positions: n_prompt + n_new <= the
 * model's context. Draw i is the i-th generated token. */
int mx_generate(const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new, const mx_sample_opts* o,
                int32_t stop_id, int32_t* out, int* n_out);

/* What both devices share (the GPU's mxg_llama_decode and mxg_generate, gpu_model.h): the checks of a decode
 * call (n >= 1 tokens at pos within cap, every id in the vocabulary) and of a generation (a prompt, prompt +
 * new within the context), and mx_generate's loop over any decoder: decode(cache, tokens, n, logits, 0) feeds
 * tokens and writes the last position's logits [V] (host memory). */
int mx_decode_check(const mx_llama* m, int pos, int cap, const int32_t* tokens, int n);
int mx_generate_check(const mx_llama* m, int n_prompt, int n_new);
typedef int (*mx_decode_fn)(void* cache, const int32_t* tokens, int n, float* logits, int all);
int mx_generate_loop(const mx_llama* m, mx_decode_fn decode, void* cache, const int32_t* prompt, int n_prompt,
                     int n_new, const mx_sample_opts* o, int32_t stop_id, int32_t* out, int* n_out);

#ifdef __cplusplus
}
#endif
#endif
