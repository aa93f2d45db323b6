/*
 * model.h: the Llama 3 model on the CPU (the reference the GPU trainer is
 * checked against), and its layers, one file each in src/nn/ with the
 * forward and the backward side by side.
 *
 * Architecture (SPEC section 3): token embedding -> L x [RMSNorm -> q,k,v ->
 * RoPE -> causal grouped-query attention -> o -> residual -> RMSNorm ->
 * gate,up -> SwiGLU -> down -> residual] -> final RMSNorm -> untied LM head ->
 * cross-entropy. No biases. RMSNorm eps 1e-5, RoPE theta 500000 with the
 * rotate-half convention of HF LlamaForCausalLM.
 *
 * Every transformer-block linear layer (q, k, v, o, gate, up, down) runs
 * through the quantized linear layer (linear.h) with the run's recipe and a
 * distinct layer_id (block*7 + index in that order); the embedding, the
 * norms, attention's batched products and the LM head stay FP32.
 *
 * Library code: errors are returned (mx_fail), never printed.
 */
#ifndef MXLM_MODEL_H
#define MXLM_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/linear.h"
#include "mxlm/recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration ------------------------------------------------------ */

typedef struct {
    char name[32];
    int vocab;       /* V */
    int dim;         /* D (model width) */
    int n_layers;    /* L */
    int n_heads;     /* H (query heads); head_dim = D / H */
    int n_kv_heads;  /* KV (key/value heads, divides H) */
    int ffn;         /* F (SwiGLU hidden width) */
    int seq_len;     /* T (context length) */
    float rope_theta;
    float norm_eps;
} mx_model_config;

/* Presets: "tiny" (CPU-sized), "20m", "60m", "125m", "350m", "1b",
 * "llama3.1-8b". Names are non-embedding parameter counts (roughly). */
int mx_model_preset(const char* name, mx_model_config* c);
const char* const* mx_model_preset_names(void);
/* Checks the shape rules (D % H == 0, H % KV == 0, even head_dim, positive
 * sizes). The MXFP4 multiple-of-32 rules are the linear layer's to check. */
int mx_model_config_check(const mx_model_config* c);
int64_t mx_model_n_params(const mx_model_config* c);          /* all */
int64_t mx_model_n_params_nonembed(const mx_model_config* c); /* without embedding and head */
/* One line, e.g. "tiny: V 4096 D 128 L 4 H 4/2 F 384 T 128". */
void mx_model_config_describe(const mx_model_config* c, char* buf, size_t n);

/* ---- parameters ---------------------------------------------------------- */

/* The parameter tensors, in storage order; one contiguous allocation. */
enum {
    MX_P_EMBED = 0,   /* [V, D] */
    MX_P_ATTN_NORM,   /* [L, D] */
    MX_P_WQ,          /* [L, H*hd, D] */
    MX_P_WK,          /* [L, KV*hd, D] */
    MX_P_WV,          /* [L, KV*hd, D] */
    MX_P_WO,          /* [L, D, H*hd] */
    MX_P_FFN_NORM,    /* [L, D] */
    MX_P_WGATE,       /* [L, F, D] */
    MX_P_WUP,         /* [L, F, D] */
    MX_P_WDOWN,       /* [L, D, F] */
    MX_P_FINAL_NORM,  /* [D] */
    MX_P_HEAD,        /* [V, D] */
    MX_P_COUNT
};

typedef struct {
    const char* name;   /* "embed", "wq", ... */
    size_t offset;      /* in floats from the start of the allocation */
    size_t numel;       /* all layers together for per-layer tensors */
    int per_layer;      /* 1: [L, ...] */
    int rows, cols;     /* one layer's matrix shape (rows 1 for vectors) */
    int is_matrix;      /* weight decay applies */
} mx_param_info;

/* Offsets and shapes of every tensor; returns the total count of floats. */
size_t mx_param_layout(const mx_model_config* c, mx_param_info info[MX_P_COUNT]);

/* ZeRO-1 sharding over W data-parallel ranks: every tensor slice (one layer
 * of a per-layer tensor, or a whole tensor) is split into W equal parts; rank
 * R owns part R of each. An owned part: params/grads at `full`, its AdamW
 * moments at `shard` of the rank's packed arrays, n floats, weight decay or
 * not; `slice` = the start of its slice (rank q's part is at slice + q*n).
 * The parts come in layout order, so with W = 1 full == shard throughout. */
typedef struct {
    size_t full, shard, n, slice;
    int decay;
} mx_piece;
/* The parts of rank R (count: sum over tensors of the layers, at most
 * MX_P_COUNT * n_layers); *nshard = the rank's packed size. Error when a slice
 * does not split into W equal parts. */
int mx_shard_plan(const mx_model_config* c, int W, int R, mx_piece* out, int* n_pieces, size_t* nshard);
int mx_shard_plan_count(const mx_model_config* c);

/* Per-linear names and the layer_id rule. */
enum { MX_LIN_Q = 0, MX_LIN_K, MX_LIN_V, MX_LIN_O, MX_LIN_GATE, MX_LIN_UP, MX_LIN_DOWN, MX_LIN_PER_BLOCK };
const char* mx_linear_name(int j);
static inline uint32_t mx_linear_id(int block, int j) { return (uint32_t)(block * MX_LIN_PER_BLOCK + j); }

/* ---- the model ------------------------------------------------------------ */

/* mx_llama.act16: the GPU model's BF16 rounding points. FFN: the norm outputs xn1, xn2, the SwiGLU
 * product hid (the linears' inputs), gate, up (the Fprop outputs), dhid (down's Dgrad output) and the
 * SwiGLU gradients dgate, dup; ATTN (the GPU's act16 with the flash attention): q, k, v (Fprop
 * outputs) and q, k after RoPE, the attention output ao (o's input), dao (o's Dgrad output), dq, dk,
 * dv after the attention and dq, dk after RoPE. A BF16 GEMM rounds its inputs anyway (the inputs'
 * points change nothing there); an FP8 or MXFP4 one then quantizes the BF16 values, as the GPU does. */
enum { MX_ACT16_FFN = 1, MX_ACT16_ATTN = 2 };

typedef struct {
    mx_model_config cfg;
    mx_param_info info[MX_P_COUNT];
    size_t n_params;
    float* params;        /* [n_params] FP32 master weights */
    float* grads;         /* [n_params] */

    /* Precision: recipe for the blocks, bf16 for the first/last k blocks. */
    mx_recipe recipe;
    mx_recipe recipe_bf16;
    int bf16_first, bf16_last;
    uint64_t seed;        /* run seed (SR bits, rhN signs) */
    int head_bf16;        /* 1: the LM head's GEMMs take BF16-rounded operands (xnf, head, dlogits), FP32
                           * accumulation: what the GPU's tensor-core head computes; 0: FP32 */
    int act16;            /* MX_ACT16_* flags, where mx_act16_possible(recipe): round to BF16 where the GPU
                           * model (act16) stores BF16 (above); 0: FP32 */
    uint64_t step;        /* passed to the linear layers (set by the trainer) */
    int telemetry;        /* 1: linear layers accumulate SQNR/clipping stats */
    mx_linear_state* lstate; /* [L * 7] per linear: telemetry + FP8 amax history */

    /* Activations for a batch of B sequences of T tokens (N = B*T). */
    int B, T;
    float* acts;          /* one allocation, carved below */
    float *x;             /* [L+1, N, D] residual stream entering block l (x[L] = final) */
    float *xn1, *rstd1;   /* [L, N, D], [L, N]  attention RMSNorm out, 1/rms */
    float *q, *k, *v;     /* [L, N, H*hd], [L, N, KV*hd] x2  (q, k after RoPE) */
    float *att;           /* [L, B, H, T, T] softmax probabilities (causal) */
    float *ao;            /* [L, N, H*hd] attention output (before o) */
    float *xmid;          /* [L, N, D] after the attention residual */
    float *xn2, *rstd2;   /* [L, N, D], [L, N] */
    float *gate, *up, *hid; /* [L, N, F] x3; hid = silu(gate) * up */
    float *xnf, *rstdf;   /* [N, D], [N] final norm */
    float *logits;        /* [N, V] logits, then probabilities, then dlogits */
    float *losses;        /* [N] per-token cross-entropy */
    float *rope_cos, *rope_sin; /* [T, hd/2] */
    /* Backward scratch. */
    float *dx, *dxn, *dq, *dk, *dv, *dao, *dgate, *dup, *dhid, *dtmp; /* [N, *] */
    float *headT;         /* [D, V] transposed head (scratch for the head's backward) */
    float *scratchT;      /* [max(V,D), N] transposed operands for the head's gemms */
} mx_llama;

/* Allocate parameters, gradients and linear states (weights uninitialised:
 * call mx_llama_init_weights). `recipe` is used for every block except the
 * first `bf16_first` and last `bf16_last`, which use "bf16". */
int mx_llama_create(mx_llama* m, const mx_model_config* cfg, const mx_recipe* recipe, int bf16_first,
                    int bf16_last, uint64_t seed);
void mx_llama_free(mx_llama* m);
/* Seeded init: matrices N(0, 0.02) (o and down scaled by 1/sqrt(2L)), norms 1.
 * Normals from mx_rand_u32(seed, MX_RNG_INIT, tensor index, element). */
void mx_llama_init_weights(mx_llama* m, uint64_t seed);
/* (Re)allocate activations for B x T (T <= cfg.seq_len). */
int mx_llama_alloc_acts(mx_llama* m, int B, int T);
/* Forward over tokens [B, T]; with targets [B, T] the mean cross-entropy goes
 * to *loss (and probabilities are kept for the backward). Targets must be in
 * [0, V). Returns 0 or a negative mx_err (also when a linear layer fails). */
int mx_llama_forward(mx_llama* m, const int32_t* tokens, const int32_t* targets, int B, int T, float* loss);
/* Backward of the last forward: grads += d(loss * grad_scale * N)/dparams,
 * i.e. each token's cross-entropy is weighted by grad_scale (use
 * 1/(N * accumulation steps) for the mean over a step's tokens). */
int mx_llama_backward(mx_llama* m, const int32_t* tokens, const int32_t* targets, float grad_scale);
void mx_llama_zero_grad(mx_llama* m);
/* The recipe of block l. */
const mx_recipe* mx_llama_block_recipe(const mx_llama* m, int l);

/* ---- layers (src/nn/<layer>.c); N = tokens ---------------------------------
 * Backward functions ACCUMULATE into parameter gradients; into input
 * gradients as stated. */

/* embedding.c: out[n] = table[tokens[n]]. */
void mx_embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D);
/* dtable[tokens[n]] += dout[n] (sequential over n: deterministic). */
void mx_embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D);

/* rmsnorm.c: out = x / sqrt(mean(x^2) + eps) * w; rstd[n] = 1/sqrt(...). */
void mx_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int D, float eps);
/* dx += ..., dw += ... (dw reduced over fixed chunks of tokens in order). */
void mx_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                         const float* rstd, int N, int D);

/* rope.c: tables cos/sin [T, hd/2] with inv_freq_i = theta^(-2i/hd). */
void mx_rope_tables(float* cos_t, float* sin_t, int T, int hd, float theta);
/* In place on x [B*T, nh*hd] (position = n % T): HF rotate-half,
 * y[i] = x[i] c - x[i+hd/2] s, y[i+hd/2] = x[i+hd/2] c + x[i] s. */
void mx_rope_forward(float* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd);
/* In place on the gradient (the transpose rotation). */
void mx_rope_backward(float* dx, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd);

/* attention.c: causal GQA softmax(q k^T / sqrt(hd)) v. q [N, H*hd],
 * k, v [N, KV*hd], out [N, H*hd], att [B, H, T, T] (probabilities, upper
 * triangle zero). Query head h reads KV head h / (H/KV). */
void mx_attention_forward(float* out, float* att, const float* q, const float* k, const float* v, int B, int T,
                          int H, int KV, int hd);
/* row[0..n) <- softmax(scale * row) (max subtracted; the sums in order): one attention row, the
 * training's (attention.c) and the decoder's (decode.c). */
void mx_softmax_scaled(float* row, int n, float scale);
/* dq, dk, dv are OVERWRITTEN. */
void mx_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att, const float* q,
                           const float* k, const float* v, int B, int T, int H, int KV, int hd);

/* swiglu.c: h = silu(gate) * up, silu(x) = x / (1 + e^-x). */
void mx_swiglu_forward(float* h, const float* gate, const float* up, size_t n);
/* dgate, dup OVERWRITTEN. */
void mx_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t n);

/* xent.c: in place logits [N, V] -> probabilities; losses[n] = -log p[target].
 * Returns the mean loss (summed in double, in order). */
float mx_xent_forward(float* logits, float* losses, const int32_t* targets, int N, int V);
/* In place probabilities -> dlogits = (p - onehot) * scale. */
void mx_xent_backward(float* probs, const int32_t* targets, int N, int V, float scale);

#ifdef __cplusplus
}
#endif
#endif
