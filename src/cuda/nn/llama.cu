/*
 * llama.cu: the Llama 3 model on the GPU, the twin of src/nn/llama.c, built
 * from the layer kernels of the files beside it (embedding.cu, rmsnorm.cu,
 * rope.cu, attention*.cu, swiglu.cu, xent.cu, ../train/adamw.cu), the
 * quantized linear layer of linear.cu, and the residual add (here, as in
 * llama.c). It reads top to bottom like llama.c; the differences:
 *   - the LM head and the loss run in row chunks (mxg_lm_head_xent), and the
 *     head's backward happens inside the forward of a training step;
 *   - attention keeps the log-sum-exp per query instead of the T x T
 *     probabilities (flash-style);
 *   - with `recompute` the RMSNorm outputs and the SwiGLU product are not
 *     kept per layer: the backward recomputes them (the same bits).
 *   - the residual adds happen in the o and down GEMMs' epilogues
 *     (mxg_linear_ctx.res: the same single rounding as llama.c's add).
 * Activations are FP32; the block linears follow the recipe (linear.cu). With
 * act16 (mxg_llama_create: by default the bf16 recipes, mxg_llama_act16_default)
 * BF16 storage: the tensors the linears read (a BF16 GEMM reads the same
 * values; a quantized one, fp8 or MXFP4, quantizes the BF16 ones), and the GEMM
 * outputs gate, up, dhid and, with the flash attention (att16), q, k, v, ao,
 * dao, dq, dk, dv, rounded to BF16 where llama.c's mx_llama.act16 rounds; the
 * residual stream stays FP32.
 * No floating-point atomics (except the telemetry sums, mxg_opstats, which the
 * training does not read): two runs give the same bytes.
 * Built with --fmad=false (mk/cuda.mk) for its one kernel, the residual add
 * mxg_add (from the former layers.cu, which had the flag; the model itself
 * adds in the GEMM epilogues now); the flag does not touch host code, and the
 * rest of this file is host code.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "mxlm/gpu_model.h"
#include "mxlm/gpu_switches.h"
#include "mxlm/linear_plan.h"

/* Telemetry entries per block linear (mxg_opstats): 6 operands ([gemm][a, b]: mxg_linear_ctx.tele), then 3
 * products ([gemm]: mxg_linear_ctx.gout); read into mx_linear_state.op and .out. */
enum { TELE_PER_LIN = 9 };

#define PAM_SLOTS 7 /* mxg_llama.pam's floats */
struct mxg_llama {
    mx_model_config cfg;
    mx_param_info info[MX_P_COUNT];
    size_t n_params;
    mx_recipe recipe, recipe_bf16;
    int bf16_first, bf16_last, exact, recompute, attn;
    int act16;                      /* BF16 storage (mxg_llama_create's act16): xn1, xn2, hid, gate, up, dhid,
                                       dgate, dup, and the linears' weights once per update (w16) */
    int att16;                      /* act16 with the flash attention: q, k, v, ao, dq, dk, dv, dao in BF16 too */
    int outer_scales;               /* mxg_linear_ctx.outer_scales (MXLM_GPU_OUTER, gpu_switches.h) */
    int outer_min;                  /* mxg_linear_ctx.outer_min (MXLM_GPU_OUTER=round:T) */
    int fuse_sw;                    /* on unless MXLM_GPU_FUSE_SWIGLU=0 (fuse_swiglu): the SwiGLU backward writes dgate's and
                                       dup's fast-path MXFP4 operands (swiglu_bwd_fused) into swq */
    uint64_t seed;
    int B, T;
    cudaStream_t st;
    /* device */
    float *params, *grads, *m, *v;  // [n_params] each
    float* acts;                    // one allocation, carved below
    float *x;                       // [L+1, N, D]
    float *xn1, *rstd1;             // [L or 1, N, D] (BF16 with act16), [L, N]
    float *q, *k, *v_;              // [L, N, QD], [L, N, KD] x2 (after RoPE)
    float *lse;                     // [L, B, H, T]
    float *ao;                      // [L, N, QD]
    float *xmid, *xn2, *rstd2;      // [L, N, D], [L or 1, N, D] (BF16 with act16), [L, N]
    float *gate, *up, *hid;         // [L, N, F] x2, [L or 1, N, F] (all BF16 with act16)
    float *xnf, *rstdf, *losses;    // [N, D], [N], [N]
    float *rope_cos, *rope_sin;     // [T, hd/2]
    float *dx, *dxn, *dq, *dk, *dv, *dao, *dgate, *dup, *dhid, *tmp; // [N, *]
    float *delta;                   // [B, H, T]
    float *chunk;                   // [Nc, V] LM-head logits chunk
    float *rms_ws;                  // rmsnorm backward partials
    float *dmean;                   // [4]
    float *attws;                   // [2, H, T, T] scores of one sequence (attn GEMM/TF32) or unused
    float *swq;                     // fuse_sw: dgate's and dup's E4M3 operands [4][N*F] bytes, their scales [4][N*F/128]
    double *ss_ws, *ss_out;         // sum of squares
    void* emb_ws;
    size_t emb_ws_bytes;
    int32_t *tok, *tgt;             // [N]
    int Nc;
    int head_bf16;                  /* LM head GEMMs on BF16 operands (tensor cores) */
    int head16_fresh;               /* head16 holds the current weights (cleared when they change) */
    uint16_t *head16, *xnf16;       // [V, D], [N, D] (the BF16 dlogits go over the FP32 logits chunk)
    uint16_t* x16;                  // [N, D]: a block input rounded to BF16 once for the linears sharing it
    uint16_t* w16;                  // act16 with BF16 GEMMs: the block linears' weights in BF16 (NULL otherwise), per kind at
    size_t w16_off[MX_LIN_PER_BLOCK]; //   w16_off[j] (all layers of linear j, as in params)
    int w16_fresh;                  /* w16 holds the current weights (cleared when they change) */
    /* wcache_on: the block linears' Fprop and Dgrad weight operands made once per update
     * (mxg_linear_weight_operands) into wq_buf, one mxg_wq a layer and linear (wq[l * MX_LIN_PER_BLOCK + j]) */
    uint8_t* wq_buf;
    mxg_wq* wq;
    int wq_fresh;                   /* wq holds the current weights' operands (cleared when they change) */
    unsigned* wamax;                /* wamax_on: the linears' |W| amax bits, [L * MX_LIN_PER_BLOCK] as wq, made by
                                       the update (mxg_span.amax: gshare's spans) for the FP8 casts of W */
    int wamax_fresh;                /* wamax holds the current weights' (set by that update, cleared with wq_fresh) */
    int gz_lazy;                    /* the linears' weight gradients are zero but not yet written (zero_grad):
                                       the next backward's Wgrad GEMMs overwrite them */
    /* Where the gradients are: gl[k * L + l] is slice l of kind k (slice 0 of a kind not per layer), in g->grads
     * (laid out as params) or, with gshare (mxg_llama_create_dist's share_grads, share_plan), the linears'
     * per-layer slices and the embedding's in activation memory, the rest in g->grads (a smaller buffer) */
    float** gl;
    int gshare;
    int64_t* gplan;                 /* gshare: share_plan's placement, [MX_P_COUNT * L] then its scratch [2 L] */
    int64_t shared_bytes;           /* gshare: the gradient bytes placed in activation memory */
    size_t grads_bytes;             /* g->grads' bytes */
    int glost;                      /* gshare: a forward wrote over the gradients of the last backward */
    mxg_span_table* spans;          /* gshare: the optimizer's table over the slices (spans_ready) */
    int spans_head16;               /*   with the BF16 head copy (head_bf16 when it was made) */
    mxg_linws* lin;
    mxg_opstats* tele;              // [L * 7 * 9] telemetry per block linear: [gemm][operand], then [gemm] products
    float* x8s;                     // [L * 4 * 8]: the FP8 scalars of each block's four linear inputs (mxg_linear_ctx.x8s:
                                    //   q/k/v's, o's, gate/up's, down's), then pam; unless MXLM_GPU_FP8_AMAX=0
    float* pam;                     // [PAM_SLOTS]: the amax of h (forward), dgate and dup (backward) made by the
                                    //   SwiGLU kernels, then of the norm output the next FP8 Fprop casts (q/k/v's, then gate/up's),
                                    //   then of the residual gradient dx the next FP8 Dgrad casts (down's, o's),
                                    //   then of att16's dq and dk made by the RoPE backward (q's and k's Dgrad)
    /* model_x8t_on: X^T's FP8 codes of each block's four linear inputs (as x8s), made by the training forward's casts
     * for the backward's Wgrads (mxg_linear_ctx.x8t), and whether each was (x8t_made: cleared by every forward) */
    uint8_t* x8t;
    size_t x8t_off[4];              //   input i of layer l at x8t + l * x8t_per + x8t_off[i]
    size_t x8t_per;
    int* x8t_made;                  //   [L * 4]
    int x8t_train;                  //   the forward under way is forward_backward's (an evaluation's makes none)
    int tele_on;
    int64_t bytes;                  // allocated
    /* data parallelism (mxg_llama_create_dist): ZeRO-1 over comm */
    mxg_comm* comm;                 // NULL: single GPU
    int W, R, sync, comm_pending;   // world, rank, reduce this micro-batch, reductions in flight
    size_t nshard;                  // floats of m and v (n_params without comm)
    mx_piece* pieces;              // [npieces] this rank's owned parts, packed in order
    int npieces;
    double* ss_parts;               // [npieces] per-part sums of squares (device)
    cudaStream_t cst;               // the gradient reductions
    cudaEvent_t ev_fire, ev_done;
};

/* ---- residual add: y = a + b (llama.c adds in its loop; one add, no product, so bit-identical) ---- */

namespace {
__global__ void k_add(float* y, const float* a, const float* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}
}  // namespace

extern "C" int mxg_add(float* y, const float* a, const float* b, size_t n, void* stream) {
    ARG_CHECK(n > 0, "mxg_add: empty");
    k_add<<<blocks_for(n, 256), 256, 0, MXG_STREAM(stream)>>>(y, a, b, n);
    CU_LAUNCHED();
    return MX_OK;
}

/* ---- step-time breakdown (MXLM_GPU_PROFILE=1) ------------------------------------------ */

int g_mxg_prof = 0;
int g_mxg_prof_gid = -1;
static long long g_prof_fused = 0; /* SwiGLU backwards that made their operands (swiglu_bwd_fused), per layer */
namespace {
const int kProfMax = 4096;
cudaEvent_t g_pev[2 * kProfMax];
int g_pcat[kProfMax], g_pgid[kProfMax], g_pn = 0, g_pev_made = 0;
double g_pms[PROF_N];
double g_pgms[2][3]; /* quantize (0) and GEMM (1) time of the linears by mx_gemm_id */
const char* k_prof_name[PROF_N] = {"quantize/rotate/transpose", "GEMMs (linears)", "attention", "LM head + loss",
                                   "norms, RoPE, SwiGLU, residual, embedding", "grad norm + AdamW"};

void prof_flush(void) {
    if (!g_pn) return;
    cudaEventSynchronize(g_pev[2 * (g_pn - 1) + 1]);
    for (int i = 0; i < g_pn; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, g_pev[2 * i], g_pev[2 * i + 1]) != cudaSuccess) continue;
        g_pms[g_pcat[i]] += ms;
        if (g_pgid[i] >= 0 && g_pgid[i] < 3 && (g_pcat[i] == PROF_QUANT || g_pcat[i] == PROF_GEMM))
            g_pgms[g_pcat[i] == PROF_GEMM][g_pgid[i]] += ms;
    }
    cudaGetLastError();
    g_pn = 0;
}
}  // namespace

void mxg_prof_mark(int cat, int begin, cudaStream_t st) {
    if (!g_pev_made) {
        for (int i = 0; i < 2 * kProfMax; i++) cudaEventCreate(&g_pev[i]);
        g_pev_made = 1;
    }
    if (begin) {
        if (g_pn == kProfMax) prof_flush();
        cudaEventRecord(g_pev[2 * g_pn], st);
        g_pcat[g_pn] = cat;
        g_pgid[g_pn] = g_mxg_prof_gid;
    } else {
        cudaEventRecord(g_pev[2 * g_pn + 1], st);
        g_pn++;
    }
}

/* Drop what was timed so far: the first optimizer step (its GEMM plans are made then, on the host,
 * while the events wait, and the step-0 evaluation come before it) is left out of the split. */
static int g_prof_from = 1;
static void prof_restart(int64_t next_step) {
    prof_flush();
    memset(g_pms, 0, sizeof g_pms);
    memset(g_pgms, 0, sizeof g_pgms);
    g_prof_from = (int)next_step;
}

extern "C" long long mxg_llama_fused_swiglu_calls(void) { return g_prof_fused; }

extern "C" int mxg_profile_report(char* buf, size_t n) {
    if (!g_mxg_prof) return 0;
    prof_flush();
    double tot = 0;
    for (int i = 0; i < PROF_N; i++) tot += g_pms[i];
    size_t k = (size_t)snprintf(buf, n, "GPU time by part (MXLM_GPU_PROFILE, from step %d, %.1f ms in all):",
                                g_prof_from, tot);
    for (int i = 0; i < PROF_N && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s %s %.1f ms (%.1f%%)", i ? ";" : "", k_prof_name[i], g_pms[i],
                              tot > 0 ? 100.0 * g_pms[i] / tot : 0.0);
    /* the linears' part of the first two, by GEMM (the rest of "quantize": outside the linears, e.g. the
     * BF16 copy of a block input made once for q/k/v) */
    static const char* const gname[3] = {"fprop", "dgrad", "wgrad"};
    if (k < n) k += (size_t)snprintf(buf + k, n - k, "\nGPU time of the linears by GEMM (quantize / GEMM):");
    for (int g = 0; g < 3 && k < n; g++)
        k += (size_t)snprintf(buf + k, n - k, "%s %s %.1f / %.1f ms", g ? ";" : "", gname[g], g_pgms[0][g],
                              g_pgms[1][g]);
    if (g_prof_fused && k < n)
        k += (size_t)snprintf(buf + k, n - k, "; SwiGLU backwards that made dgate's and dup's operands "
                                              "(MXLM_GPU_FUSE_SWIGLU): %lld", g_prof_fused);
    return 1;
}

namespace {

struct Part {
    float** p;
    size_t n;
};

size_t up16(size_t n) { return (n + 63) / 64 * 64; }

/* the attention implementations that keep one sequence's [H, T, T] scores in attws */
int uses_attws(int attn) { return attn == MXG_ATTN_GEMM || attn == MXG_ATTN_TF32; }

/* The activation buffers of a model for B x T, in one list (used for the
 * estimate and the allocation alike). */
int act_parts(mxg_llama* g, Part* parts, int B, int T) {
    const mx_model_config* c = &g->cfg;
    const size_t N = (size_t)B * T, D = c->dim, L = c->n_layers, F = c->ffn, H = c->n_heads;
    const size_t hd = D / H, QD = H * hd, KD = c->n_kv_heads * hd, V = c->vocab;
    const size_t Lr = g->recompute ? 1 : L;
    const size_t h = g->act16 ? 2 : 1, ha = g->att16 ? 2 : 1; /* BF16-only tensors take half the floats */
    Part p[] = {
        {&g->x, (L + 1) * N * D}, {&g->xn1, (Lr * N * D + h - 1) / h}, {&g->rstd1, L * N},
        {&g->q, (L * N * QD + ha - 1) / ha}, {&g->k, (L * N * KD + ha - 1) / ha}, {&g->v_, (L * N * KD + ha - 1) / ha},
        {&g->lse, L * B * H * T}, {&g->ao, (L * N * QD + ha - 1) / ha},
        {&g->xmid, L * N * D}, {&g->xn2, (Lr * N * D + h - 1) / h}, {&g->rstd2, L * N},
        {&g->gate, (L * N * F + h - 1) / h}, {&g->up, (L * N * F + h - 1) / h}, {&g->hid, (Lr * N * F + h - 1) / h},
        {&g->xnf, N * D}, {&g->rstdf, N}, {&g->losses, N},
        {&g->rope_cos, (size_t)T * hd / 2}, {&g->rope_sin, (size_t)T * hd / 2},
        {&g->dx, N * D}, {&g->dxn, N * D}, {&g->dq, (N * QD + ha - 1) / ha}, {&g->dk, (N * KD + ha - 1) / ha},
        {&g->dv, (N * KD + ha - 1) / ha}, {&g->dao, (N * QD + ha - 1) / ha}, {&g->dgate, (N * F + h - 1) / h}, {&g->dup, (N * F + h - 1) / h},
        {&g->dhid, (N * F + h - 1) / h}, {&g->tmp, N},
        {&g->delta, (size_t)B * H * T}, {&g->chunk, (size_t)g->Nc * V},
        {&g->rms_ws, mxg_rmsnorm_backward_workspace((int)N, (int)D)}, {&g->dmean, 4},
        {&g->attws, uses_attws(g->attn) ? mxg_attention_gemm_workspace(T, (int)H) : 1},
        {&g->swq, g->fuse_sw ? N * F + N * F / 32 : 1},
    };
    memcpy(parts, p, sizeof p);
    return (int)(sizeof p / sizeof p[0]);
}

/* On unless MXLM_GPU_FUSE_SWIGLU=0 (a test hook, gpu_switches.h): where the recipe quantizes the MLP's dY (dgate,
 * dup) in MXFP4 for Dgrad and Wgrad, the SwiGLU backward writes their fast-path operands instead of the FP32
 * tensors (mxg_quantize_swiglu_bwd, or with act16 mxg_quantize_swiglu_bwd_bf16 from the BF16 ones: the same
 * bytes; layers it cannot serve, telemetry steps, --gemm exact, fall back per call). */
int fuse_swiglu(const mx_recipe* r, const mxg_switches* sw) {
    return sw->fuse_swiglu && !mxg_linear_oow_probe() && mx_gemm_gpu_mxfp4(r, MX_DGRAD) && mx_gemm_gpu_mxfp4(r, MX_WGRAD);
}

/* The weights' GEMM operands made once per update and reused by every forward and backward until the next
 * (issue 16 item 4; off under MXLM_GPU_WCACHE=0, a test hook), for the recipes whose linears quantize W (fp8,
 * MXFP4: mxg_linear_weight_operands says which GEMMs take them) and not under the OUTER probe. */
int wcache_on(const mx_recipe* r, const mxg_switches* sw) {
    return sw->wcache && !mx_act16_applies(r) && !mxg_linear_oow_probe();
}

/* GEMM g of recipe r casts its operands to FP8 with one scale a tensor. */
bool fp8_per_tensor(const mx_recipe* r, mx_gemm_id g) {
    const mx_format_info* f = mx_format_get(r->g[g].fmt);
    return f && f->scale == MX_SCALE_TENSOR && f->elem == MX_ELEM_FP8;
}

/* With wcache_on, where Fprop's or Dgrad's W is cast to FP8 per tensor (and MXLM_GPU_FP8_AMAX is not 0): the
 * optimizer's update (with gshare: mxg_adamw_spans) makes each weight's amax as it writes it, so that the casts
 * need no amax pass over W. */
int wamax_on(const mx_recipe* r, const mxg_switches* sw) {
    return (fp8_per_tensor(r, MX_FPROP) || fp8_per_tensor(r, MX_DGRAD)) && sw->fp8_amax && wcache_on(r, sw);
}

/* With MXLM_GPU_FP8_XT=1 (and MXLM_GPU_FP8_AMAX not 0) and without recompute (whose point is memory), where Fprop
 * and Wgrad are FP8 per tensor: the training forward's FP8 casts of the linears' inputs write X^T's codes as well,
 * for the backward's Wgrads (one read of X fewer each: mxg_linear_ctx.x8t); L * (2 D + QD + F) bytes a token. */
int model_x8t_on(const mx_recipe* r, const mxg_switches* sw, int recompute) {
    return sw->fp8_amax && sw->fp8_xt && !recompute && fp8_per_tensor(r, MX_FPROP) && fp8_per_tensor(r, MX_WGRAD);
}

/* The X^T buffers' layout: off[i] of input i (q/k/v's, o's, gate/up's, down's) within a layer's, 16-byte aligned
 * starts; returns a layer's bytes. */
size_t x8t_layout(const mx_model_config* c, int N, size_t off[4]) {
    const size_t hd = c->dim / c->n_heads, w[4] = {(size_t)c->dim, c->n_heads * hd, (size_t)c->dim, (size_t)c->ffn};
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        off[i] = n;
        n += ((size_t)N * w[i] + 15) / 16 * 16;
    }
    return n;
}

int choose_nc(const mx_model_config* c, int N, int head_mi) {
    /* Rows per LM-head chunk: at most ~256 Mi logits (1 GiB of FP32; the BF16 dlogits go over them), the
     * chunks of equal size (a multiple of 8 rows). Fewer, larger chunks: dhead (FP32 [V, D]) is read
     * and written once per chunk, and the dxnf GEMM ([nc, D] outputs, K = V, no split-K) needs nc
     * large to fill the GPU (64 Mi logits per chunk had made the head 28% of a 1b step).
     * head_mi (MXLM_GPU_HEAD_MI, default 256): at most that many Mi logits (a memory / speed trade: 128 is
     * 0.5 GiB less at 1b). */
    const long mi = head_mi;
    long cap = (mi << 20) / c->vocab;
    if (cap < 8) cap = 8;
    long chunks = (N + cap - 1) / cap;
    long nc = (N + chunks - 1) / chunks;
    nc = (nc + 7) / 8 * 8;
    if (nc > cap) nc = cap / 8 * 8;
    if (nc < 8) nc = 8;
    return (int)nc;
}

size_t max_operand(const mx_model_config* c, int N) {
    const size_t D = c->dim, F = c->ffn, hd = D / c->n_heads, QD = c->n_heads * hd;
    size_t w = F > QD ? F : QD;
    if (D > w) w = D;
    size_t a = (size_t)N * w, b = F * D > QD * D ? F * D : QD * D;
    return a > b ? a : b;
}

/* The linear workspace's bytes for recipe r: mxg_linws_bytes, the OUTER path's operands where MXLM_GPU_OUTER=1 or round
 * (outer, MXG_OUTER_* bits) and a GEMM of r is MXFP4 on the fast path's kernels, and the FP32 buffer of the reference-form path
 * (linear.cu's block_gemm: NVFP4, MXFP8, dither; fq_room makes it with the workspace's capacity) when a GEMM
 * of r takes it. */
int64_t linws_bytes(const mx_recipe* r, const mx_model_config* c, int N, int outer) {
    const size_t m = max_operand(c, N), cap = (m + 127) / 128 * 128;
    int64_t b = (int64_t)mxg_linws_bytes(m, mx_act16_applies(r));
    int mx = 0;
    for (int g = 0; g < 3; g++) mx |= mx_gemm_gpu_mxfp4(r, (mx_gemm_id)g);
    if (mx && (outer & (MXG_OUTER_MXFP4 | MXG_OUTER_MXFP4_ROUND))) /* linear.cu's qo8, fo, and fl for the fix-up */
        b += 2 * (int64_t)(cap + (cap / 128 + 4) * 4 + ((outer & MXG_OUTER_MXFP4) ? cap / 32 : 0));
    for (int g = 0; g < 3; g++)
        if (mx_gemm_gpu_reference_form(r, (mx_gemm_id)g)) return b + (int64_t)cap * 4;
    return b;
}

/* The parameter kind of block linear j (MX_LIN_*). */
const int k_lin_kind[MX_LIN_PER_BLOCK] = {MX_P_WQ, MX_P_WK, MX_P_WV, MX_P_WO, MX_P_WGATE, MX_P_WUP, MX_P_WDOWN};
/* linear j's input among the block's four (x8s, x8t): q/k/v's, o's, gate/up's, down's */
const int k_lin_input[MX_LIN_PER_BLOCK] = {0, 0, 0, 1, 2, 2, 3};

/* wq_buf's bytes for L layers of the linears of info (linear j's weight [N, K] = its kind's rows x cols; each
 * entry's buffers 256-byte aligned), and with q the entries' buffers set from base. */
size_t wq_layout(const mx_param_info* info, int L, mxg_wq* q, uint8_t* base) {
    size_t b = 0;
    auto al = [](size_t x) { return (x + 255) / 256 * 256; };
    for (int l = 0; l < L; l++)
        for (int j = 0; j < MX_LIN_PER_BLOCK; j++) {
            const int N = info[k_lin_kind[j]].rows, K = info[k_lin_kind[j]].cols;
            const size_t n = (size_t)N * K, fs = mxg_linear_weight_fs(N, K) * 4;
            mxg_wq* e = q ? &q[(size_t)l * MX_LIN_PER_BLOCK + j] : NULL;
            for (int k = 0; k < 2; k++) {
                if (e) e->q8[k] = base + b;
                b = al(b + n);
                if (e) e->fs[k] = (float*)(base + b);
                b = al(b + fs);
            }
            if (e) e->sc = (float*)(base + b);
            b = al(b + 16 * 4);
        }
    return b;
}

/* act16's BF16 weight copy: linear j's layers at off[j]; returns the elements in all. */
size_t w16_layout(const mx_param_info* info, size_t off[MX_LIN_PER_BLOCK]) {
    size_t n = 0;
    for (int j = 0; j < MX_LIN_PER_BLOCK; j++) {
        off[j] = n;
        n += (info[k_lin_kind[j]].numel + 7) / 8 * 8; /* 16-byte aligned starts */
    }
    return n;
}

/* The block linear j whose weight parameter kind k is (k_lin_kind[j] == k), or -1. */
int lin_index(int k) {
    for (int j = 0; j < MX_LIN_PER_BLOCK; j++)
        if (k_lin_kind[j] == k) return j;
    return -1;
}

/* Is parameter kind k a block linear's weight? */
int lin_kind(int k) { return lin_index(k) >= 0; }

/* share_grads: the kinds whose gradient may live in activation memory (share_plan): the block linears' and the
 * embedding's. */
int shared_kind(int k) { return k == MX_P_EMBED || lin_kind(k); }

/* The slices of kind k in gl: one per layer of a per-layer kind, one otherwise; and their floats each. */
size_t n_slices(const mx_param_info* in, size_t L) { return in->per_layer ? L : 1; }
size_t slice_len(const mx_param_info* in, size_t L) { return in->numel / n_slices(in, L); }

size_t al256(size_t b) { return (b + 255) / 256 * 256; }

/* The byte offset of part `which` in the activation allocation (act_parts' order, up16 floats each). */
size_t part_offset(const Part* parts, int n, float* const* which) {
    size_t o = 0;
    for (int i = 0; i < n && parts[i].p != which; i++) o += up16(parts[i].n) * 4;
    return o;
}

/* Gradients in activation memory (share_grads: one micro-batch a step, one GPU). Block l's backward reads gate[l]
 * and up[l] for the last time in its SwiGLU backward and only then writes the weight gradients of its gate, up,
 * o, q, k and v linears: those go into gate[l] and up[l] (first fit, 256-byte aligned); down's, written before
 * the SwiGLU backward, into what is left of block l + 1's (whose backward is over; the last block's into the
 * buffer); the embedding's, written after every block, over the residual stream x. The rest (the norms, the
 * head, what does not fit) goes into the gradient buffer, each kind's slices in order. at[k * L + l]: the byte
 * offset of slice l of kind k in the activations (>= 0) or -1 - its byte offset in the buffer; used: scratch of 2
 * L. Returns the buffer's bytes; *hosted: the bytes placed in activations. */
size_t share_plan(const mx_model_config* c, const mx_param_info* info, int B, int T, int act16, size_t off_x,
                  size_t off_gate, size_t off_up, int64_t* at, int64_t* used, size_t* hosted) {
    const size_t N = (size_t)B * T, L = (size_t)c->n_layers, slot = N * (size_t)c->ffn * (act16 ? 2 : 4);
    size_t buf = 0;
    *hosted = 0;
    memset(used, 0, 2 * L * sizeof *used);
    auto in_buffer = [&](int k, size_t l, size_t bytes) {
        at[(size_t)k * L + l] = -1 - (int64_t)buf;
        buf = al256(buf + bytes);
    };
    auto put = [&](int k, size_t l, size_t hl) { /* into block hl's gate or up slot (hl == L: none) */
        const size_t bytes = slice_len(&info[k], L) * 4;
        for (int u = 0; hl < L && u < 2; u++) {
            const size_t base = (u ? off_up : off_gate) + hl * slot, pos = al256(base + (size_t)used[2 * hl + u]);
            if (pos + bytes <= base + slot) {
                at[(size_t)k * L + l] = (int64_t)pos;
                used[2 * hl + u] = (int64_t)(pos + bytes - base);
                *hosted += bytes;
                return;
            }
        }
        in_buffer(k, l, bytes);
    };
    static const int same[6] = {MX_P_WGATE, MX_P_WUP, MX_P_WO, MX_P_WQ, MX_P_WK, MX_P_WV};
    for (size_t l = 0; l < L; l++)
        for (int i = 0; i < 6; i++) put(same[i], l, l);
    for (size_t l = 0; l < L; l++) put(MX_P_WDOWN, l, l + 1);
    const size_t emb = info[MX_P_EMBED].numel * 4;
    if (emb <= (L + 1) * N * (size_t)c->dim * 4) {
        at[(size_t)MX_P_EMBED * L] = (int64_t)off_x;
        *hosted += emb;
    } else {
        in_buffer(MX_P_EMBED, 0, emb);
    }
    for (int k = 0; k < MX_P_COUNT; k++) {
        if (shared_kind(k)) continue;
        const size_t ns = n_slices(&info[k], L), bytes = slice_len(&info[k], L) * 4;
        for (size_t l = 0; l < ns; l++) at[(size_t)k * L + l] = -1 - (int64_t)(buf + l * bytes);
        buf = al256(buf + ns * bytes); /* the kind's slices in a row: one memset or copy for all */
    }
    return buf;
}

/* share_plan for model g's activation layout (parts: act_parts(g, ...)). */
size_t share_plan_of(const mxg_llama* g, const mx_param_info* info, const Part* parts, int n, int B, int T,
                     int64_t* at, size_t* hosted) {
    const size_t L = (size_t)g->cfg.n_layers;
    return share_plan(&g->cfg, info, B, T, g->act16, part_offset(parts, n, &g->x),
                      part_offset(parts, n, &g->gate), part_offset(parts, n, &g->up), at,
                      at + (size_t)MX_P_COUNT * L, hosted);
}

/* The BF16 copies the optimizer writes with the weights (act16's linear weights, the BF16 head), per kind
 * (NULL: none). */
void bf16_copies(const mxg_llama* g, uint16_t* copy[MX_P_COUNT]) {
    for (int k = 0; k < MX_P_COUNT; k++) copy[k] = NULL;
    for (int j = 0; g->w16 && j < MX_LIN_PER_BLOCK; j++) copy[k_lin_kind[j]] = g->w16 + g->w16_off[j];
    if (g->head_bf16) copy[MX_P_HEAD] = g->head16;
}

/* The model's act16 from the caller's: where the recipe's GEMMs read BF16 (mx_act16_possible), and for quantized
 * GEMMs not under the OUTER probe (it measures FP32 operands). */
int act16_on(int act16, const mx_recipe* r) {
    return act16 && mx_act16_possible(r) && (mx_act16_applies(r) || !mxg_linear_oow_probe());
}

/* act16 with BF16 GEMMs: the block linears' weights converted to BF16 once per update (w16). */
int w16_on(int act16, const mx_recipe* r) { return act16 && mx_act16_applies(r); }

}  // namespace

extern "C" void mxg_llama_estimate(const mx_model_config* cfg, const mx_recipe* recipe, int B, int T, int recompute,
                                   int act16, int attn, int share_grads, mxg_mem_estimate* e) {
    memset(e, 0, sizeof *e);
    mxg_llama g;
    memset(&g, 0, sizeof g);
    g.cfg = *cfg;
    g.recompute = recompute;
    g.act16 = act16_on(act16, recipe);
    g.attn = attn;
    g.att16 = g.act16 && attn == MXG_ATTN_FLASH;
    mxg_switches sw;
    mxg_switches_read(&sw); /* (a bad value: the defaults; mxg_llama_create refuses it) */
    g.fuse_sw = fuse_swiglu(recipe, &sw);
    g.Nc = choose_nc(cfg, B * T, sw.head_mi);
    mx_param_info info[MX_P_COUNT];
    size_t np = mx_param_layout(cfg, info);
    e->params = (int64_t)np * 4;
    e->grads = (int64_t)np * 4;
    e->adam = (int64_t)np * 8;
    Part parts[64];
    int n = act_parts(&g, parts, B, T);
    for (int i = 0; i < n; i++) e->acts += (int64_t)up16(parts[i].n) * 4;
    e->acts += 2 * (int64_t)B * T * cfg->dim * 2; /* BF16 head operand xnf16, x16 (the BF16 dlogits: over the logits) */
    const size_t L = (size_t)cfg->n_layers;
    int64_t* at = share_grads ? (int64_t*)malloc(((size_t)MX_P_COUNT + 2) * L * sizeof *at) : NULL;
    if (at) { /* the gradient buffer that share_plan leaves (the rest of the gradients is in activations) */
        size_t hosted = 0;
        e->grads = (int64_t)share_plan_of(&g, info, parts, n, B, T, at, &hosted);
        free(at);
    }
    if (w16_on(g.act16, recipe)) {
        size_t off[MX_LIN_PER_BLOCK];
        e->params += (int64_t)w16_layout(info, off) * 2; /* the linears' BF16 weights */
    }
    e->params += (int64_t)cfg->vocab * cfg->dim * 2;
    if (wcache_on(recipe, &sw)) e->params += (int64_t)wq_layout(info, cfg->n_layers, NULL, NULL); /* the weights' operands */
    const int N = B * T;
    size_t xoff[4];
    if (model_x8t_on(recipe, &sw, recompute)) e->acts += (int64_t)(L * x8t_layout(cfg, N, xoff)); /* X^T's codes */
    e->scratch = linws_bytes(recipe, cfg, N, sw.outer) + (int64_t)mxg_embedding_backward_workspace(N, cfg->vocab) +
                 (int64_t)mxg_sum_squares_workspace(np) * 8 + 64 + 2 * (int64_t)N * 4 + (64 << 20) /* cuBLASLt */;
    if (attn == MXG_ATTN_FLASH && !g.att16) /* the BF16 copies of q, k, v (and out, dout in the backward) */
        e->scratch += (int64_t)mxg_attention_flash_workspace(B, T, cfg->n_heads, cfg->n_kv_heads, cfg->dim / cfg->n_heads);
    e->total = e->params + e->grads + e->adam + e->acts + e->scratch;
}

#define DALLOC(ptr, sz, what)                                                                                   \
    do {                                                                                                           \
        size_t b_ = (sz);                                                                                       \
        if (cudaMalloc((void**)&(ptr), b_) != cudaSuccess) {                                                      \
            cudaGetLastError();                                                                                    \
            size_t fr_ = 0, tot_ = 0;                                                                              \
            cudaMemGetInfo(&fr_, &tot_);                                                                           \
            int rc_ = mx_fail(MX_ENOMEM,                                                                           \
                              "GPU out of memory: %s (%.1f MiB) for preset %s with batch %d x %d (%.1f MiB free of " \
                              "%.1f MiB); use a smaller --batch/--seq, --recompute, or another preset",            \
                              what, (double)b_ / 1048576.0, g->cfg.name, B, T, (double)fr_ / 1048576.0,            \
                              (double)tot_ / 1048576.0);                                                           \
            mxg_llama_free(g);                                                                                     \
            return rc_;                                                                                            \
        }                                                                                                          \
        g->bytes += (int64_t)b_;                                                                                   \
    } while (0)

/* This rank's parts of every tensor slice (ZeRO-1; mx_shard_plan). */
static int make_pieces(mxg_llama* g) {
    g->pieces = (mx_piece*)calloc((size_t)mx_shard_plan_count(&g->cfg), sizeof(mx_piece));
    if (!g->pieces) return mx_fail(MX_ENOMEM, "GPU model: out of host memory");
    return mx_shard_plan(&g->cfg, g->W, g->R, g->pieces, &g->npieces, &g->nshard);
}

/* The BF16 storage asked for by default (mxg_llama_create's act16; the trainer and `mxlm eval`): wherever it can
 * serve (mx_act16_possible: the BF16 recipes, whose GEMMs read the same numbers as from FP32 storage, and the FP8
 * and fast-path MXFP4 ones, whose quantizers then read the BF16 activations, as the CPU model with
 * mx_llama.act16; their GPU-vs-CPU curves pass with it). */
extern "C" int mxg_llama_act16_default(const mx_recipe* r) { return r && mx_act16_possible(r); }

extern "C" int mxg_llama_create(mxg_llama** out, const mx_model_config* cfg, const mx_recipe* recipe, int bf16_first,
                                int bf16_last, uint64_t seed, int B, int T, int exact, int recompute, int act16,
                                int attn) {
    return mxg_llama_create_dist(out, cfg, recipe, bf16_first, bf16_last, seed, B, T, exact, recompute, act16, attn,
                                 0, NULL);
}

extern "C" int mxg_llama_create_dist(mxg_llama** out, const mx_model_config* cfg, const mx_recipe* recipe,
                                     int bf16_first, int bf16_last, uint64_t seed, int B, int T, int exact,
                                     int recompute, int act16, int attn, int share_grads, mxg_comm* comm) {
    *out = NULL;
    int rc = mx_model_config_check(cfg);
    if (rc) return rc;
    if (B <= 0 || T <= 0 || T > cfg->seq_len)
        return mx_fail(MX_EINVAL, "model: batch %dx%d invalid (context %d)", B, T, cfg->seq_len);
    const int hd = cfg->dim / cfg->n_heads;
    if (hd % 32 || hd > 128) return mx_fail(MX_EINVAL, "GPU model: head dim %d must be a multiple of 32, <= 128", hd);
    mxg_switches sw;
    rc = mxg_switches_read(&sw);
    if (rc) return rc;
    g_mxg_prof = sw.profile;
    mxg_llama* g = (mxg_llama*)calloc(1, sizeof *g);
    if (!g) return mx_fail(MX_ENOMEM, "GPU model: out of host memory");
    g->cfg = *cfg;
    g->outer_scales = sw.outer;
    g->outer_min = sw.outer_min;
    g->n_params = mx_param_layout(cfg, g->info);
    g->recipe = *recipe;
    rc = mx_recipe_parse("bf16", &g->recipe_bf16);
    if (rc) { free(g); return rc; }
    g->bf16_first = bf16_first;
    g->bf16_last = bf16_last;
    g->seed = seed;
    g->exact = exact;
    g->recompute = recompute;
    g->act16 = act16_on(act16, recipe);
    /* (BF16 outputs: MXFP4's OUTER fix-up adds into an FP32 product, so act16 keeps MXFP4 on VEC128 scales) */
    if (g->act16) g->outer_scales &= ~MXG_OUTER_MXFP4;
    g->fuse_sw = fuse_swiglu(recipe, &sw);
    g->attn = attn;
    g->att16 = g->act16 && attn == MXG_ATTN_FLASH;
    g->B = B;
    g->T = T;
    const int N = B * T;
    g->Nc = choose_nc(cfg, N, sw.head_mi);
    if (cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        free(g);
        return mx_fail(MX_EIO, "GPU model: cannot create a CUDA stream (is a GPU present?)");
    }
    const size_t np = g->n_params;
    g->comm = comm;
    g->W = comm ? mxg_comm_world(comm) : 1;
    g->R = comm ? mxg_comm_rank(comm) : 0;
    g->nshard = np;
    if (comm) {
        rc = make_pieces(g);
        if (!rc && (cudaStreamCreateWithFlags(&g->cst, cudaStreamNonBlocking) != cudaSuccess ||
                    cudaEventCreateWithFlags(&g->ev_fire, cudaEventDisableTiming) != cudaSuccess ||
                    cudaEventCreateWithFlags(&g->ev_done, cudaEventDisableTiming) != cudaSuccess)) {
            cudaGetLastError();
            rc = mx_fail(MX_EIO, "GPU model: cannot create the reduction stream and events");
        }
        if (rc) { mxg_llama_free(g); return rc; }
    }
    DALLOC(g->params, np * 4, "FP32 master weights");
    DALLOC(g->m, g->nshard * 4, comm ? "AdamW first moments (this GPU's shard)" : "AdamW first moments");
    DALLOC(g->v, g->nshard * 4, comm ? "AdamW second moments (this GPU's shard)" : "AdamW second moments");
    if (comm) DALLOC(g->ss_parts, (size_t)g->npieces * 8, "gradient-norm parts");
    Part parts[64];
    int n = act_parts(g, parts, B, T);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += up16(parts[i].n);
    DALLOC(g->acts, total * 4, "activations");
    float* p = g->acts;
    for (int i = 0; i < n; i++) {
        *parts[i].p = p;
        p += up16(parts[i].n);
    }
    /* the gradients: laid out as the weights, or with share_grads (one GPU) partly in the activations */
    const size_t L = (size_t)cfg->n_layers;
    g->gshare = share_grads && !comm;
    g->gl = (float**)calloc((size_t)MX_P_COUNT * L, sizeof *g->gl);
    g->gplan = g->gshare ? (int64_t*)malloc(((size_t)MX_P_COUNT + 2) * L * sizeof *g->gplan) : NULL;
    if (!g->gl || (g->gshare && !g->gplan)) {
        mxg_llama_free(g);
        return mx_fail(MX_ENOMEM, "GPU model: out of host memory");
    }
    if (g->gshare) {
        size_t hosted = 0;
        g->grads_bytes = share_plan_of(g, g->info, parts, n, B, T, g->gplan, &hosted);
        g->shared_bytes = (int64_t)hosted;
        DALLOC(g->grads, g->grads_bytes, "gradients (those not in the activations' memory)");
    } else {
        g->grads_bytes = np * 4;
        DALLOC(g->grads, g->grads_bytes, "gradients");
    }
    for (int k = 0; k < MX_P_COUNT; k++) {
        const mx_param_info* in = &g->info[k];
        for (size_t l = 0; l < n_slices(in, L); l++) {
            const int64_t a = g->gshare ? g->gplan[(size_t)k * L + l] : 0;
            g->gl[(size_t)k * L + l] = !g->gshare ? g->grads + in->offset + l * slice_len(in, L)
                                       : (float*)(a >= 0 ? (char*)g->acts + a : (char*)g->grads + (-1 - a));
        }
    }
    g->emb_ws_bytes = mxg_embedding_backward_workspace(N, cfg->vocab);
    DALLOC(g->emb_ws, g->emb_ws_bytes, "embedding-backward workspace");
    /* (with gshare, the spans' chunks: each slice's from its own start, at most one more per slice) */
    const size_t ssn = mxg_sum_squares_workspace(np) + (g->gshare ? (size_t)MX_P_COUNT * L : 0);
    DALLOC(g->ss_ws, (ssn + 1) * 8, "gradient-norm workspace");
    g->ss_out = g->ss_ws + ssn;
    DALLOC(g->head16, (size_t)cfg->vocab * cfg->dim * 2, "BF16 LM head");
    DALLOC(g->xnf16, (size_t)N * cfg->dim * 2, "BF16 final-norm output");
    DALLOC(g->x16, (size_t)N * cfg->dim * 2, "BF16 block input");
    if (w16_on(g->act16, recipe))
        DALLOC(g->w16, w16_layout(g->info, g->w16_off) * 2, "BF16 copy of the block linears' weights");
    if (wcache_on(recipe, &sw)) {
        DALLOC(g->wq_buf, wq_layout(g->info, cfg->n_layers, NULL, NULL), "the linears' weight operands");
        g->wq = (mxg_wq*)calloc((size_t)cfg->n_layers * MX_LIN_PER_BLOCK, sizeof *g->wq);
        if (!g->wq) {
            mxg_llama_free(g);
            return mx_fail(MX_ENOMEM, "GPU model: out of host memory");
        }
        wq_layout(g->info, cfg->n_layers, g->wq, g->wq_buf);
    }
    if (g->gshare && wamax_on(recipe, &sw))
        DALLOC(g->wamax, (size_t)cfg->n_layers * MX_LIN_PER_BLOCK * sizeof(unsigned), "the linears' weight amax");
    if (model_x8t_on(recipe, &sw, recompute)) {
        g->x8t_per = x8t_layout(cfg, N, g->x8t_off);
        DALLOC(g->x8t, cfg->n_layers * g->x8t_per, "the linear inputs' transposed FP8 codes");
        g->x8t_made = (int*)calloc((size_t)cfg->n_layers * 4, sizeof(int));
        if (!g->x8t_made) {
            mxg_llama_free(g);
            return mx_fail(MX_ENOMEM, "GPU model: out of host memory");
        }
    }
    g->head_bf16 = mx_recipe_head_bf16(recipe, bf16_first, bf16_last); /* the trainer's --head auto, decided once */
    DALLOC(g->tele, (size_t)cfg->n_layers * MX_LIN_PER_BLOCK * TELE_PER_LIN * sizeof(mxg_opstats), "telemetry");
    if (sw.fp8_amax) {
        DALLOC(g->x8s, ((size_t)cfg->n_layers * 4 * 8 + PAM_SLOTS) * sizeof(float),
               "the FP8 scalars of the linears' inputs");
        g->pam = g->x8s + (size_t)cfg->n_layers * 4 * 8;
    }
    DALLOC(g->tok, (size_t)N * 4, "tokens");
    DALLOC(g->tgt, (size_t)N * 4, "targets");
    rc = mxg_linws_create(&g->lin, max_operand(cfg, N), mx_act16_applies(recipe)); /* BF16 GEMMs only: h[] only */
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s (preset %s, batch %d x %d)", mx_last_error(), cfg->name, B, T);
        mxg_llama_free(g);
        return mx_fail(rc, "%s", msg);
    }
    g->bytes += linws_bytes(recipe, cfg, N, g->outer_scales);
    CU_TRY(cudaMemset(g->params, 0, np * 4));
    CU_TRY(cudaMemset(g->tele, 0, (size_t)cfg->n_layers * MX_LIN_PER_BLOCK * TELE_PER_LIN * sizeof(mxg_opstats)));
    if (g->x8s) CU_TRY(cudaMemset(g->x8s, 0, ((size_t)cfg->n_layers * 4 * 8 + PAM_SLOTS) * sizeof(float)));
    CU_TRY(cudaMemset(g->grads, 0, g->grads_bytes));
    g->gz_lazy = g->gshare; /* with gshare the slices in activations are zeroed when first read or written */
    CU_TRY(cudaMemset(g->m, 0, g->nshard * 4));
    CU_TRY(cudaMemset(g->v, 0, g->nshard * 4));
    /* RoPE tables from the CPU reference */
    size_t nr = (size_t)T * hd / 2;
    float* hc = (float*)malloc(nr * 2 * sizeof(float));
    if (!hc) { mxg_llama_free(g); return mx_fail(MX_ENOMEM, "GPU model: out of host memory"); }
    mx_rope_tables(hc, hc + nr, T, hd, cfg->rope_theta);
    cudaError_t e1 = cudaMemcpy(g->rope_cos, hc, nr * 4, cudaMemcpyHostToDevice);
    cudaError_t e2 = cudaMemcpy(g->rope_sin, hc + nr, nr * 4, cudaMemcpyHostToDevice);
    free(hc);
    if (e1 != cudaSuccess || e2 != cudaSuccess) {
        mxg_llama_free(g);
        return mx_fail(MX_EIO, "GPU model: copying the RoPE tables failed");
    }
    *out = g;
    return MX_OK;
}

extern "C" void mxg_llama_free(mxg_llama* g) {
    if (!g) return;
    cudaFree(g->params); cudaFree(g->grads); cudaFree(g->m); cudaFree(g->v); cudaFree(g->acts);
    cudaFree(g->emb_ws); cudaFree(g->ss_ws); cudaFree(g->tok); cudaFree(g->tgt);
    cudaFree(g->head16); cudaFree(g->xnf16); cudaFree(g->x16); cudaFree(g->w16);
    cudaFree(g->wq_buf);
    free(g->wq);
    cudaFree(g->wamax);
    cudaFree(g->x8t);
    free(g->x8t_made);
    cudaFree(g->tele);
    cudaFree(g->x8s);
    mxg_linws_free(g->lin);
    cudaFree(g->ss_parts);
    mxg_span_table_free(g->spans);
    free(g->gl);
    free(g->gplan);
    if (g->st) cudaStreamDestroy(g->st);
    if (g->cst) cudaStreamDestroy(g->cst);
    if (g->ev_fire) cudaEventDestroy(g->ev_fire);
    if (g->ev_done) cudaEventDestroy(g->ev_done);
    free(g->pieces);
    free(g);
}

/* The weights changed: their BF16 copies are made again before the next use. */
static void weights_changed(mxg_llama* g) {
    g->head16_fresh = 0;
    g->w16_fresh = 0;
    g->wq_fresh = 0;
    g->wamax_fresh = 0;
}

extern "C" int mxg_llama_upload(mxg_llama* g, const float* params, const float* m, const float* v) {
    const size_t b = g->nshard * 4;
    weights_changed(g);
    CU_TRY(cudaMemcpy(g->params, params, g->n_params * 4, cudaMemcpyHostToDevice));
    if (m) CU_TRY(cudaMemcpy(g->m, m, b, cudaMemcpyHostToDevice)); else CU_TRY(cudaMemset(g->m, 0, b));
    if (v) CU_TRY(cudaMemcpy(g->v, v, b, cudaMemcpyHostToDevice)); else CU_TRY(cudaMemset(g->v, 0, b));
    return MX_OK;
}

extern "C" int mxg_llama_download(const mxg_llama* g, float* params, float* m, float* v) {
    const size_t b = g->nshard * 4;
    CU_TRY(cudaStreamSynchronize(g->st));
    if (params) CU_TRY(cudaMemcpy(params, g->params, g->n_params * 4, cudaMemcpyDeviceToHost));
    if (m) CU_TRY(cudaMemcpy(m, g->m, b, cudaMemcpyDeviceToHost));
    if (v) CU_TRY(cudaMemcpy(v, g->v, b, cudaMemcpyDeviceToHost));
    return MX_OK;
}

#define CHK(x) do { int rc_ = (x); if (rc_) return rc_; } while (0)

/* Slice l of kind k's gradient (slice 0 of a kind that is not per layer): gl. */
static inline float* GL(const mxg_llama* g, int k, size_t l) { return g->gl[(size_t)k * g->cfg.n_layers + l]; }

/* The kinds zero_grad leaves to the next backward (gz_lazy): the linears' weights, whose Wgrad GEMMs write them
 * (beta 0), and with gshare the embedding's too (zeroed just before its backward: a forward writes over it). */
static int lazy_kind(const mxg_llama* g, int k) { return g->gshare ? shared_kind(k) : lin_kind(k); }

/* Every slice of kind k zeroed (in g's stream). */
static int zero_kind(mxg_llama* g, int k) {
    const mx_param_info* in = &g->info[k];
    const size_t L = g->cfg.n_layers;
    if (!g->gshare) { /* laid out as params: one range */
        CU_TRY(cudaMemsetAsync(GL(g, k, 0), 0, in->numel * 4, g->st));
        return MX_OK;
    }
    for (size_t l = 0; l < n_slices(in, L); l++) CU_TRY(cudaMemsetAsync(GL(g, k, l), 0, slice_len(in, L) * 4, g->st));
    return MX_OK;
}

/* With gshare: the gradients of the last backward are gone once a forward has run. */
static int grads_readable(const mxg_llama* g) {
    if (g->gshare && g->glost)
        return mx_fail(MX_EINVAL, "GPU model: the gradients were overwritten by a forward pass since the backward that "
                                  "made them (they share memory with the activations: read them before the next "
                                  "forward, or create the model without share_grads)");
    return MX_OK;
}

/* The lazily zeroed gradients zeroed for real (a reader before the backward that would write them). */
static int grads_materialize(mxg_llama* g) {
    CHK(grads_readable(g));
    if (!g->gz_lazy) return MX_OK;
    for (int k = 0; k < MX_P_COUNT; k++)
        if (lazy_kind(g, k)) CHK(zero_kind(g, k));
    g->gz_lazy = 0;
    return MX_OK;
}

extern "C" int mxg_llama_download_grads(mxg_llama* g, float* grads) {
    CHK(grads_materialize(g));
    CU_TRY(cudaStreamSynchronize(g->st));
    if (!g->gshare) {
        CU_TRY(cudaMemcpy(grads, g->grads, g->n_params * 4, cudaMemcpyDeviceToHost));
        return MX_OK;
    }
    const size_t L = g->cfg.n_layers;
    for (int k = 0; k < MX_P_COUNT; k++) { /* slice by slice into the weights' layout */
        const mx_param_info* in = &g->info[k];
        const size_t len = slice_len(in, L);
        for (size_t l = 0; l < n_slices(in, L); l++)
            CU_TRY(cudaMemcpy(grads + in->offset + l * len, GL(g, k, l), len * 4, cudaMemcpyDeviceToHost));
    }
    return MX_OK;
}

extern "C" int mxg_llama_zero_grad(mxg_llama* g) {
    /* every kind but the lazy ones now (lazy_kind: the next backward writes them) */
    for (int k = 0; k < MX_P_COUNT; k++)
        if (!lazy_kind(g, k)) CHK(zero_kind(g, k));
    g->gz_lazy = 1;
    g->glost = 0;
    return MX_OK;
}

extern "C" int mxg_llama_poke(mxg_llama* g, int which, size_t offset, float value) {
    if (offset >= g->n_params) return mx_fail(MX_EINVAL, "GPU model: poke offset out of range");
    float* at = g->params + offset;
    if (!which) weights_changed(g);
    else {
        CHK(grads_materialize(g));
        int k = MX_P_COUNT - 1; /* the kind holding offset, then its slice */
        while (k > 0 && g->info[k].offset > offset) k--;
        const size_t len = slice_len(&g->info[k], g->cfg.n_layers), r = offset - g->info[k].offset;
        at = GL(g, k, r / len) + r % len;
    }
    CU_TRY(cudaStreamSynchronize(g->st));
    CU_TRY(cudaMemcpy(at, &value, 4, cudaMemcpyHostToDevice));
    return MX_OK;
}

extern "C" int64_t mxg_llama_shared_grad_bytes(const mxg_llama* g) { return g->gshare ? g->shared_bytes : -1; }

extern "C" int mxg_mem_info(int64_t* free_b, int64_t* total_b) {
    size_t f = 0, t = 0;
    CU_TRY(cudaMemGetInfo(&f, &t));
    *free_b = (int64_t)f;
    *total_b = (int64_t)t;
    return MX_OK;
}

extern "C" int64_t mxg_llama_device_bytes(const mxg_llama* g) { return g->bytes; }
extern "C" mxg_linws* mxg_llama_linws(mxg_llama* g) { return g->lin; }

/* ---- forward / backward ------------------------------------------------------------ */

#define P(t) (g->params + g->info[t].offset)

static const mx_recipe* block_recipe(const mxg_llama* g, int l) {
    if (l < g->bf16_first || l >= g->cfg.n_layers - g->bf16_last) return &g->recipe_bf16;
    return &g->recipe;
}

static mxg_linear_ctx lin_ctx(mxg_llama* g, int l, int j, uint64_t step) {
    mxg_linear_ctx c;
    c.recipe = block_recipe(g, l);
    c.seed = g->seed;
    c.step = step;
    c.layer_id = mx_linear_id(l, j);
    c.exact = g->exact;
    c.ws = g->lin;
    c.tele = g->tele_on ? g->tele + (size_t)c.layer_id * TELE_PER_LIN : NULL;
    c.gout = c.tele ? c.tele + 6 : NULL; /* the products' telemetry after the operands' */
    c.x16 = NULL;
    c.dy16 = NULL;
    c.w16 = NULL;
    if (g->w16) { /* this layer's slice of linear j's BF16 weights (act16: every block's GEMMs are BF16) */
        const size_t per = g->info[k_lin_kind[j]].numel / (size_t)g->cfg.n_layers;
        c.w16 = g->w16 + g->w16_off[j] + (size_t)l * per;
    }
    c.out16 = NULL;
    c.res = NULL;
    c.dw_first = g->gz_lazy; /* the first backward after zero_grad writes dW */
    c.x_same = 0;
    c.dyq = NULL;
    c.outer_scales = g->outer_scales;
    c.outer_min = g->outer_min;
    c.wq = g->wq && g->wq_fresh ? &g->wq[(size_t)l * MX_LIN_PER_BLOCK + j] : NULL;
    c.x8s = g->x8s ? g->x8s + ((size_t)l * 4 + k_lin_input[j]) * 8 : NULL;
    c.x_amax = c.dy_amax = NULL;
    c.x8t = NULL; /* (lin_fwd, lin_bwd: x8t_of) */
    c.x8t_made = NULL;
    return c;
}

/* Linear j's X^T codes of layer l in c (x8t, its flag), where the model keeps them. */
static void x8t_of(mxg_llama* g, int l, int j, mxg_linear_ctx* c) {
    if (!g->x8t) return;
    c->x8t = g->x8t + (size_t)l * g->x8t_per + g->x8t_off[k_lin_input[j]];
    c->x8t_made = &g->x8t_made[(size_t)l * 4 + k_lin_input[j]];
}

/* MXLM_GPU_WCACHE: the linears' weight operands made after an update, before the next forward reads them
 * (with the specs of `step`'s linears; a later step's spec that differs in a byte-relevant field, an SR seed or
 * a random rotation's, finds them unusable and quantizes W itself). */
static int refresh_wq(mxg_llama* g, uint64_t step) {
    if (!g->wq || g->wq_fresh) return MX_OK;
    if (g->tele_on) return MX_OK; /* a telemetry forward quantizes W itself (its operands' stats): made after it */
    PROF_B(PROF_QUANT, g->st);
    for (int l = 0; l < g->cfg.n_layers; l++)
        for (int j = 0; j < MX_LIN_PER_BLOCK; j++) {
            const mx_param_info* in = &g->info[k_lin_kind[j]];
            const int N = in->rows, K = in->cols;
            const mxg_linear_ctx c = lin_ctx(g, l, j, step); /* (c.wq NULL: not fresh) */
            const float* W = g->params + in->offset + (size_t)l * N * K;
            const size_t w = (size_t)l * MX_LIN_PER_BLOCK + j;
            const float* am = g->wamax && g->wamax_fresh ? (const float*)(g->wamax + w) : NULL; /* (its |W| bits) */
            CHK(mxg_linear_weight_operands(&c, W, N, K, am, &g->wq[w], g->st));
        }
    PROF_E(PROF_QUANT, g->st);
    g->wq_fresh = 1;
    return MX_OK;
}

/* act16: the linears' weights rounded to BF16 once per update (Fprop and Dgrad read them). */
static int refresh_w16(mxg_llama* g) {
    if (!g->w16 || g->w16_fresh) return MX_OK;
    PROF_B(PROF_QUANT, g->st);
    for (int j = 0; j < MX_LIN_PER_BLOCK; j++) {
        const mx_param_info* in = &g->info[k_lin_kind[j]];
        CHK(mxg_to_bf16(g->params + in->offset, in->numel, g->w16 + g->w16_off[j], g->st));
    }
    PROF_E(PROF_QUANT, g->st);
    g->w16_fresh = 1;
    return MX_OK;
}

/* X (the input of the linears q/k/v or gate/up of block l) rounded to BF16 once into g->x16 when the
 * block's recipe gives GEMM `gm` (Fprop or Wgrad) BF16 operands; NULL otherwise (each linear then
 * converts or quantizes X itself). With act16, X16 (X as stored, in BF16). */
static const uint16_t* shared_x16(mxg_llama* g, int l, mx_gemm_id gm, const float* X, const uint16_t* X16, size_t n,
                                  int* rc) {
    *rc = MX_OK;
    if (g->act16) return X16; /* stored in BF16 already */
    if (!mx_gemm_bf16_operands(block_recipe(g, l), gm)) return NULL;
    PROF_B(PROF_QUANT, g->st);
    *rc = mxg_to_bf16(X, n, g->x16, g->st);
    PROF_E(PROF_QUANT, g->st);
    return *rc ? NULL : g->x16;
}

/* Y = X W^T, or with res Y = res + X W^T (the residual in the GEMM's epilogue), or with y16 the product in
 * BF16 there instead of Y. */
static int lin_fwd(mxg_llama* g, int l, int j, uint64_t step, const float* X, const float* W, float* Y, int M, int K,
                   int N, const uint16_t* x16 = NULL, const float* res = NULL, uint16_t* y16 = NULL, int x_same = 0,
                   const float* x_amax = NULL) {
    mxg_linear_ctx c = lin_ctx(g, l, j, step);
    if (g->x8t_train) x8t_of(g, l, j, &c); /* the training forward's casts make X^T's codes for the backward */
    c.x16 = x16;
    c.x_amax = x_amax;
    c.res = res;
    c.out16 = y16;
    c.x_same = 1 + x_same; /* q/k/v and gate/up share X's fast-path MXFP4 operands and FP8 codes (the same bytes) */
    return mxg_linear_forward(&c, X, W, Y, M, K, N, g->st);
}

/* dx_acc 0: dX = its product (the first linear reading that input), 1: dX += (the others); dx16: dX
 * (dx_acc 0) in BF16 there instead. */
static int lin_bwd(mxg_llama* g, int l, int j, uint64_t step, const float* X, const float* W, const float* dY,
                   float* dX, float* dW, int M, int K, int N, int dx_acc, const uint16_t* x16 = NULL,
                   const uint16_t* dy16 = NULL, uint16_t* dx16 = NULL, const mxg_dyq* dyq = NULL,
                   const float* dy_amax = NULL) {
    mxg_linear_ctx c = lin_ctx(g, l, j, step);
    x8t_of(g, l, j, &c); /* Wgrad's X^T from the forward's, where it made them */
    c.x16 = x16;
    c.dy_amax = dy_amax;
    c.dy16 = dy16;
    c.dyq = dyq;
    c.out16 = dx16;
    c.x_same = 1 + (dx_acc != 0); /* the linears after the first reading X (dx_acc 1) */
    return mxg_linear_backward_acc(&c, X, W, dY, dX, dW, M, K, N, dx_acc, g->st);
}

/* fuse_sw: the SwiGLU backward of block l as dgate's and dup's Dgrad and Wgrad operands (dq[0] gate, dq[1]
 * up), made by mxg_quantize_swiglu_bwd (with act16 from dh16, gate16, up16: mxg_quantize_swiglu_bwd_bf16) with
 * the specs the linears would use; *done 0 (nothing made) where a linear would not take them (its recipe,
 * telemetry, the shape): the caller runs the plain backward. */
static int swiglu_bwd_fused(mxg_llama* g, int l, uint64_t step, const float* dh, const float* gate, const float* up,
                            const uint16_t* dh16, const uint16_t* gate16, const uint16_t* up16, mxg_dyq dq[2],
                            int* done) {
    const int N = g->B * g->T, F = g->cfg.ffn;
    const size_t nf = (size_t)N * F;
    static const int kind[2] = {MX_LIN_GATE, MX_LIN_UP};
    mxg_qout qo[2][2];
    const mxg_qspec* sp[2][2];
    const mxg_qout* op[2][2];
    *done = 0;
    for (int t = 0; t < 2; t++) {
        mxg_linear_ctx c = lin_ctx(g, l, kind[t], step);
        if (!mxg_linear_dy_specs(&c, N, F, dq[t].spec)) return MX_OK;
        for (int d = 0; d < 2; d++) {
            memset(&qo[t][d], 0, sizeof qo[t][d]);
            qo[t][d].e4m3 = (uint8_t*)g->swq + (size_t)(2 * t + d) * nf;
            qo[t][d].fscale = g->swq + nf + (size_t)(2 * t + d) * (nf / 128);
            qo[t][d].counters = mxg_linws_device_counters(g->lin);
            qo[t][d].fold = MXG_FOLD_VEC128;
            dq[t].e4m3[d] = qo[t][d].e4m3;
            dq[t].fscale[d] = qo[t][d].fscale;
            sp[t][d] = &dq[t].spec[d];
            op[t][d] = &qo[t][d];
        }
    }
    if (!mxg_quantize_swiglu_ok(N, F, sp, op)) return MX_OK;
    PROF_B(PROF_QUANT, g->st);
    const int rc = g->act16 ? mxg_quantize_swiglu_bwd_bf16(dh16, gate16, up16, N, F, sp, op, g->st)
                            : mxg_quantize_swiglu_bwd(dh, gate, up, N, F, sp, op, g->st);
    PROF_E(PROF_QUANT, g->st);
    *done = rc == MX_OK;
    g_prof_fused += *done;
    return rc;
}

/* A block's norm output (FP32 o32, or with act16 BF16 o16) and SwiGLU product (h32 / h16). */
/* am (NULL: none): the output's amax there as well (rms_amax) */
static int norm_out(mxg_llama* g, float* o32, uint16_t* o16, float* rstd, const float* x, const float* w,
                    float* am = NULL) {
    const int N = g->B * g->T, D = g->cfg.dim;
    const float eps = g->cfg.norm_eps;
    if (g->act16)
        return am ? mxg_rmsnorm_forward_bf16_amax(o16, rstd, x, w, N, D, eps, am, g->st)
                  : mxg_rmsnorm_forward_bf16(o16, rstd, x, w, N, D, eps, g->st);
    return am ? mxg_rmsnorm_forward_amax(o32, rstd, x, w, N, D, eps, am, g->st)
              : mxg_rmsnorm_forward(o32, rstd, x, w, N, D, eps, g->st);
}
static int swiglu_out(mxg_llama* g, float* h32, uint16_t* h16, const float* gate, const uint16_t* gate16,
                      const float* up, const uint16_t* up16, float* am = NULL) {
    const size_t n = (size_t)g->B * g->T * g->cfg.ffn;
    if (g->act16 && am) return mxg_swiglu_forward_bf16_amax(h16, gate16, up16, n, am, g->st); /* and h's amax */
    if (g->act16) return mxg_swiglu_forward_bf16(h16, gate16, up16, n, g->st); /* gate, up in BF16 too */
    return mxg_swiglu_forward(h32, gate, up, n, g->st);
}

/* Whether the SwiGLU kernels make the amax of their BF16 outputs (into g->pam) for an FP8 GEMM of block l
 * (MXLM_GPU_FP8_AMAX): GEMM gm of the block's recipe FP8 per-tensor, the storage BF16 and the outputs p0, p1 (n
 * values each) 16-byte vectors, as the _amax kernels need; otherwise the linear computes the amax itself. */
static bool swiglu_amax_on(const mxg_llama* g, int l, mx_gemm_id gm, const uint16_t* p0, const uint16_t* p1, size_t n) {
    return g->pam && g->act16 && mx_format_get(block_recipe(g, l)->g[gm].fmt)->scale == MX_SCALE_TENSOR && n % 8 == 0 &&
           !((uintptr_t)p0 & 15) && !((uintptr_t)p1 & 15);
}

/* Where the forward's norm kernels make their output's amax (pam[3], MXLM_GPU_FP8_AMAX) for the FP8 Fprop of q/k/v
 * and gate/up that casts it (block l's recipe FP8 per-tensor in Fprop); otherwise that linear computes it. */
static float* rms_amax(const mxg_llama* g, int l) {
    return g->pam && mx_format_get(block_recipe(g, l)->g[MX_FPROP].fmt)->scale == MX_SCALE_TENSOR ? g->pam + 3 : NULL;
}

/* Where the backward's norm kernels make the residual gradient's amax (pam[4], MXLM_GPU_FP8_AMAX) for the FP8 Dgrad
 * of block l's down or o that casts it (block l's recipe FP8 per-tensor in Dgrad); otherwise that linear computes
 * it. l < 0: none (the embedding's backward reads dx). */
static float* dx_amax(const mxg_llama* g, int l) {
    return l >= 0 && g->pam && mx_format_get(block_recipe(g, l)->g[MX_DGRAD].fmt)->scale == MX_SCALE_TENSOR ? g->pam + 4
                                                                                                            : NULL;
}

/* Where the RoPE backward makes att16's dq's or dk's amax (slot 0 or 1: pam[5 + slot], MXLM_GPU_FP8_AMAX) for block
 * l's FP8 Dgrad of q or k that casts it; otherwise that linear computes it. */
static float* rope_amax(const mxg_llama* g, int l, int slot) {
    return g->att16 && dx_amax(g, l) ? g->pam + 5 + slot : NULL;
}

/* dx += the RMSNorm backward's (mxg_rmsnorm_backward), and where am is given dx's amax there as well. */
static int norm_bwd(mxg_llama* g, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                    float* am) {
    const int N = g->B * g->T, D = g->cfg.dim;
    if (am) return mxg_rmsnorm_backward_amax(g->dx, dw, dout, x, w, rstd, N, D, g->rms_ws, am, g->st);
    return mxg_rmsnorm_backward(g->dx, dw, dout, x, w, rstd, N, D, g->rms_ws, g->st);
}

/* RoPE, attention forward and backward on the FP32 tensors or, att16, the BF16 ones (h). */
static int rope_fwd(mxg_llama* g, float* x, uint16_t* xh, int nh) {
    const int hd = g->cfg.dim / g->cfg.n_heads;
    if (g->att16) return mxg_rope_forward_bf16(xh, g->rope_cos, g->rope_sin, g->B, g->T, nh, hd, g->st);
    return mxg_rope_forward(x, g->rope_cos, g->rope_sin, g->B, g->T, nh, hd, g->st);
}
/* am (att16 only; NULL: none): the output's amax as well (mxg_rope_backward_bf16_amax). */
static int rope_bwd(mxg_llama* g, float* x, uint16_t* xh, int nh, float* am = NULL) {
    const int hd = g->cfg.dim / g->cfg.n_heads;
    if (g->att16 && am) return mxg_rope_backward_bf16_amax(xh, g->rope_cos, g->rope_sin, g->B, g->T, nh, hd, am, g->st);
    if (g->att16) return mxg_rope_backward_bf16(xh, g->rope_cos, g->rope_sin, g->B, g->T, nh, hd, g->st);
    return mxg_rope_backward(x, g->rope_cos, g->rope_sin, g->B, g->T, nh, hd, g->st);
}
struct AttnT { /* one layer's attention tensors: FP32, or with att16 BF16 (h) */
    float *q, *k, *v, *ao;
    uint16_t *qh, *kh, *vh, *aoh;
    float* lse;
};
static AttnT attn_tensors(mxg_llama* g, int l) {
    const size_t N = (size_t)g->B * g->T, hd = g->cfg.dim / g->cfg.n_heads;
    const size_t nq = N * g->cfg.n_heads * hd, nk = N * g->cfg.n_kv_heads * hd;
    AttnT a;
    memset(&a, 0, sizeof a);
    a.lse = g->lse + (size_t)l * g->B * g->cfg.n_heads * g->T;
    if (g->att16) {
        a.qh = (uint16_t*)g->q + l * nq;
        a.kh = (uint16_t*)g->k + l * nk;
        a.vh = (uint16_t*)g->v_ + l * nk;
        a.aoh = (uint16_t*)g->ao + l * nq;
    } else {
        a.q = g->q + l * nq;
        a.k = g->k + l * nk;
        a.v = g->v_ + l * nk;
        a.ao = g->ao + l * nq;
    }
    return a;
}
static int attn_fwd(mxg_llama* g, const AttnT* a) {
    const mx_model_config* c = &g->cfg;
    const int B = g->B, T = g->T, H = c->n_heads, KV = c->n_kv_heads, hd = c->dim / H;
    if (g->att16) return mxg_attention_forward_flash_bf16(a->aoh, a->lse, a->qh, a->kh, a->vh, B, T, H, KV, hd, g->st);
    if (g->attn == MXG_ATTN_FLASH) return mxg_attention_forward_flash(a->ao, a->lse, a->q, a->k, a->v, B, T, H, KV, hd, g->st);
    if (uses_attws(g->attn))
        return mxg_attention_forward_gemm(a->ao, a->lse, a->q, a->k, a->v, B, T, H, KV, hd, g->attws,
                                          g->attn == MXG_ATTN_TF32, g->st);
    return mxg_attention_forward(a->ao, a->lse, a->q, a->k, a->v, B, T, H, KV, hd, g->st);
}
/* dq, dk, dv from dao (g's buffers, BF16 with att16) */
static int attn_bwd(mxg_llama* g, const AttnT* a) {
    const mx_model_config* c = &g->cfg;
    const int B = g->B, T = g->T, H = c->n_heads, KV = c->n_kv_heads, hd = c->dim / H;
    if (g->att16)
        return mxg_attention_backward_flash_bf16((uint16_t*)g->dq, (uint16_t*)g->dk, (uint16_t*)g->dv, g->delta,
                                                 (const uint16_t*)g->dao, a->aoh, a->lse, a->qh, a->kh, a->vh, B, T, H,
                                                 KV, hd, g->st);
    if (g->attn == MXG_ATTN_FLASH)
        return mxg_attention_backward_flash(g->dq, g->dk, g->dv, g->delta, g->dao, a->ao, a->lse, a->q, a->k, a->v, B,
                                            T, H, KV, hd, g->st);
    if (uses_attws(g->attn))
        return mxg_attention_backward_gemm(g->dq, g->dk, g->dv, g->delta, g->dao, a->ao, a->lse, a->q, a->k, a->v, B,
                                           T, H, KV, hd, g->attws, g->attn == MXG_ATTN_TF32, g->st);
    return mxg_attention_backward(g->dq, g->dk, g->dv, g->delta, g->dao, a->ao, a->lse, a->q, a->k, a->v, B, T, H, KV,
                                  hd, g->st);
}

/* Embedding and blocks: x[L] (the final residual stream) from tokens already on the device. */
static int forward_blocks(mxg_llama* g, uint64_t step) {
    const mx_model_config* c = &g->cfg;
    const int B = g->B, T = g->T, N = B * T, D = c->dim, L = c->n_layers, F = c->ffn, H = c->n_heads;
    const int KV = c->n_kv_heads, hd = D / H, QD = H * hd, KD = KV * hd;
    const size_t ND = (size_t)N * D;
    cudaStream_t st = g->st;
    if (g->gshare && !g->gz_lazy) g->glost = 1; /* the gradients written since zero_grad: overwritten from here */
    if (g->x8t) memset(g->x8t_made, 0, (size_t)L * 4 * sizeof(int)); /* made again by this forward, or not at all */
    CHK(refresh_w16(g));
    CHK(refresh_wq(g, step));
    PROF_B(PROF_ELEM, st);
    CHK(mxg_embedding_forward(g->x, g->tok, P(MX_P_EMBED), N, D, st));
    PROF_E(PROF_ELEM, st);
    for (int l = 0; l < L; l++) {
        const size_t lr = g->recompute ? 0 : (size_t)l;
        float* x = g->x + (size_t)l * ND;                  /* [N, D] block input */
        float* xn1 = g->act16 ? NULL : g->xn1 + lr * ND;   /* [N, D] */
        uint16_t* xn1h = g->act16 ? (uint16_t*)g->xn1 + lr * ND : NULL;
        const AttnT a = attn_tensors(g, l);                /* q [N, QD], k, v [N, KD], ao [N, QD], lse [B, H, T] */
        float* xmid = g->xmid + (size_t)l * ND;            /* [N, D] */
        float* xn2 = g->act16 ? NULL : g->xn2 + lr * ND;   /* [N, D] */
        uint16_t* xn2h = g->act16 ? (uint16_t*)g->xn2 + lr * ND : NULL;
        float* gate = g->act16 ? NULL : g->gate + (size_t)l * N * F; /* [N, F] */
        uint16_t* gateh = g->act16 ? (uint16_t*)g->gate + (size_t)l * N * F : NULL;
        float* up = g->act16 ? NULL : g->up + (size_t)l * N * F;     /* [N, F] */
        uint16_t* uph = g->act16 ? (uint16_t*)g->up + (size_t)l * N * F : NULL;
        float* hid = g->act16 ? NULL : g->hid + lr * N * F; /* [N, F] */
        uint16_t* hidh = g->act16 ? (uint16_t*)g->hid + lr * N * F : NULL;
        float* xout = g->x + (size_t)(l + 1) * ND;         /* [N, D] */

        PROF_B(PROF_ELEM, st);
        float* nam = rms_amax(g, l); /* the norm outputs' amax for q's and gate's FP8 Fprop (k, v, up: their codes) */
        CHK(norm_out(g, xn1, xn1h, g->rstd1 + (size_t)l * N, x, P(MX_P_ATTN_NORM) + (size_t)l * D, nam));
        PROF_E(PROF_ELEM, st);
        int rc16;
        const uint16_t* x16 = shared_x16(g, l, MX_FPROP, xn1, xn1h, ND, &rc16);
        CHK(rc16);
        CHK(lin_fwd(g, l, MX_LIN_Q, step, xn1, P(MX_P_WQ) + (size_t)l * QD * D, a.q, N, D, QD, x16, NULL, a.qh, 0,
                    nam));
        CHK(lin_fwd(g, l, MX_LIN_K, step, xn1, P(MX_P_WK) + (size_t)l * KD * D, a.k, N, D, KD, x16, NULL, a.kh, 1));
        CHK(lin_fwd(g, l, MX_LIN_V, step, xn1, P(MX_P_WV) + (size_t)l * KD * D, a.v, N, D, KD, x16, NULL, a.vh, 1));
        PROF_B(PROF_ELEM, st);
        CHK(rope_fwd(g, a.q, a.qh, H));
        CHK(rope_fwd(g, a.k, a.kh, KV));
        PROF_E(PROF_ELEM, st);
        PROF_B(PROF_ATTN, st);
        CHK(attn_fwd(g, &a));
        PROF_E(PROF_ATTN, st);
        /* xmid = x + o(ao): the residual added in the GEMM's epilogue */
        CHK(lin_fwd(g, l, MX_LIN_O, step, a.ao, P(MX_P_WO) + (size_t)l * D * QD, xmid, N, QD, D, a.aoh, x));
        PROF_B(PROF_ELEM, st);
        CHK(norm_out(g, xn2, xn2h, g->rstd2 + (size_t)l * N, xmid, P(MX_P_FFN_NORM) + (size_t)l * D, nam));
        PROF_E(PROF_ELEM, st);
        x16 = shared_x16(g, l, MX_FPROP, xn2, xn2h, ND, &rc16);
        CHK(rc16);
        CHK(lin_fwd(g, l, MX_LIN_GATE, step, xn2, P(MX_P_WGATE) + (size_t)l * F * D, gate, N, D, F, x16, NULL,
                    gateh, 0, nam));
        CHK(lin_fwd(g, l, MX_LIN_UP, step, xn2, P(MX_P_WUP) + (size_t)l * F * D, up, N, D, F, x16, NULL, uph, 1));
        float* ham = swiglu_amax_on(g, l, MX_FPROP, hidh, hidh, (size_t)N * F) ? g->pam : NULL; /* h's, pam[0] */
        PROF_B(PROF_ELEM, st);
        CHK(swiglu_out(g, hid, hidh, gate, gateh, up, uph, ham));
        PROF_E(PROF_ELEM, st);
        /* xout = xmid + down(hid) */
        CHK(lin_fwd(g, l, MX_LIN_DOWN, step, hid, P(MX_P_WDOWN) + (size_t)l * D * F, xout, N, F, D, hidh, xmid, NULL,
                    0, ham));
    }
    float* xL = g->x + (size_t)L * ND;
    PROF_B(PROF_ELEM, st);
    CHK(mxg_rmsnorm_forward(g->xnf, g->rstdf, xL, P(MX_P_FINAL_NORM), N, D, c->norm_eps, st));
    PROF_E(PROF_ELEM, st);
    return MX_OK;
}

/* Data parallel: reduce-scatter the gradient slices of `kinds` (layer l of the
 * per-layer ones) on the reduction stream, after what the compute stream has
 * queued so far (the backward that produced them). */
static int dist_reduce(mxg_llama* g, const int* kinds, int nk, int l) {
    if (!g->comm || !g->sync) return MX_OK;
    CU_TRY(cudaEventRecord(g->ev_fire, g->st));
    CU_TRY(cudaStreamWaitEvent(g->cst, g->ev_fire, 0));
    CHK(mxg_comm_group(g->comm, 1));
    int rc = MX_OK;
    for (int i = 0; i < nk && !rc; i++) {
        const mx_param_info* in = &g->info[kinds[i]];
        const size_t sn = in->per_layer ? in->numel / (size_t)g->cfg.n_layers : in->numel;
        rc = mxg_comm_reduce_scatter(g->comm, GL(g, kinds[i], in->per_layer ? (size_t)l : 0), sn, g->cst);
    }
    int rc2 = mxg_comm_group(g->comm, 0);
    g->comm_pending = 1;
    return rc ? rc : rc2;
}

/* The compute stream waits for the reductions in flight. */
static int dist_wait(mxg_llama* g) {
    if (!g->comm_pending) return MX_OK;
    CU_TRY(cudaEventRecord(g->ev_done, g->cst));
    CU_TRY(cudaStreamWaitEvent(g->st, g->ev_done, 0));
    g->comm_pending = 0;
    return MX_OK;
}

static const int k_layer_kinds[9] = {MX_P_ATTN_NORM, MX_P_WQ,    MX_P_WK,  MX_P_WV,   MX_P_WO,
                                     MX_P_FFN_NORM,  MX_P_WGATE, MX_P_WUP, MX_P_WDOWN};
static const int k_head_kinds[2] = {MX_P_HEAD, MX_P_FINAL_NORM};
static const int k_embed_kinds[1] = {MX_P_EMBED};

static int backward_blocks(mxg_llama* g, uint64_t step) {
    const mx_model_config* c = &g->cfg;
    const int B = g->B, T = g->T, N = B * T, D = c->dim, L = c->n_layers, F = c->ffn, H = c->n_heads;
    const int KV = c->n_kv_heads, hd = D / H, QD = H * hd, KD = KV * hd;
    const size_t ND = (size_t)N * D;
    cudaStream_t st = g->st;
    /* g->dxn holds dxnf (from the head) */
    PROF_B(PROF_ELEM, st);
    CU_TRY(cudaMemsetAsync(g->dx, 0, ND * 4, st));
    CHK(norm_bwd(g, GL(g, MX_P_FINAL_NORM, 0), g->dxn, g->x + (size_t)L * ND, P(MX_P_FINAL_NORM), g->rstdf,
                 dx_amax(g, L - 1)));
    PROF_E(PROF_ELEM, st);
    CHK(dist_reduce(g, k_head_kinds, 2, 0));
    for (int l = L - 1; l >= 0; l--) {
        /* g->dx [N, D]: gradient of the block output x[l+1] = xmid + down(hid) */
        const size_t lr = g->recompute ? 0 : (size_t)l;
        float* x = g->x + (size_t)l * ND;
        float* xn1 = g->act16 ? NULL : g->xn1 + lr * ND;
        uint16_t* xn1h = g->act16 ? (uint16_t*)g->xn1 + lr * ND : NULL;
        const AttnT a = attn_tensors(g, l);
        float* xmid = g->xmid + (size_t)l * ND;
        float* xn2 = g->act16 ? NULL : g->xn2 + lr * ND;
        uint16_t* xn2h = g->act16 ? (uint16_t*)g->xn2 + lr * ND : NULL;
        float* gate = g->act16 ? NULL : g->gate + (size_t)l * N * F;
        uint16_t* gateh = g->act16 ? (uint16_t*)g->gate + (size_t)l * N * F : NULL;
        float* up = g->act16 ? NULL : g->up + (size_t)l * N * F;
        uint16_t* uph = g->act16 ? (uint16_t*)g->up + (size_t)l * N * F : NULL;
        float* hid = g->act16 ? NULL : g->hid + lr * N * F;
        uint16_t* hidh = g->act16 ? (uint16_t*)g->hid + lr * N * F : NULL;
        PROF_B(PROF_ELEM, st);
        if (g->recompute) { /* the same kernels on the same inputs: the same bits as the forward's */
            CHK(norm_out(g, xn2, xn2h, g->tmp, xmid, P(MX_P_FFN_NORM) + (size_t)l * D));
            CHK(swiglu_out(g, hid, hidh, gate, gateh, up, uph));
        }
        PROF_E(PROF_ELEM, st);
        /* with act16 dhid, dgate, dup are BF16 only (what the GEMMs and SwiGLU read): the dhid GEMM rounds its
         * output, the SwiGLU backward reads and writes BF16 */
        float* dhid = g->act16 ? NULL : g->dhid;
        uint16_t* dhidh = g->act16 ? (uint16_t*)g->dhid : NULL;
        CHK(lin_bwd(g, l, MX_LIN_DOWN, step, hid, P(MX_P_WDOWN) + (size_t)l * D * F, g->dx, dhid,
                    GL(g, MX_P_WDOWN, l), N, F, D, 0, hidh, NULL, dhidh, NULL, dx_amax(g, l)));
        uint16_t* dgateh = g->act16 ? (uint16_t*)g->dgate : NULL;
        uint16_t* duph = g->act16 ? (uint16_t*)g->dup : NULL;
        float* dgate = g->act16 ? NULL : g->dgate;
        float* dup = g->act16 ? NULL : g->dup;
        mxg_dyq dyq[2]; /* fuse_sw: dgate's and dup's operands, made here instead of dgate and dup */
        int fused = 0;
        if (g->fuse_sw) CHK(swiglu_bwd_fused(g, l, step, dhid, gate, up, dhidh, gateh, uph, dyq, &fused));
        /* dgate's and dup's amax for FP8 Dgrads: pam[1], pam[2] */
        float* dam = !fused && swiglu_amax_on(g, l, MX_DGRAD, dgateh, duph, (size_t)N * F) ? g->pam + 1 : NULL;
        PROF_B(PROF_ELEM, st);
        if (dam) CHK(mxg_swiglu_backward_bf16_amax(dgateh, duph, dhidh, gateh, uph, (size_t)N * F, dam, st));
        else if (!fused && g->act16) CHK(mxg_swiglu_backward_bf16(dgateh, duph, dhidh, gateh, uph, (size_t)N * F, st));
        else if (!fused) CHK(mxg_swiglu_backward(dgate, dup, dhid, gate, up, (size_t)N * F, st));
        PROF_E(PROF_ELEM, st);
        int rc16;
        const uint16_t* x16 = shared_x16(g, l, MX_WGRAD, xn2, xn2h, ND, &rc16);
        CHK(rc16);
        CHK(lin_bwd(g, l, MX_LIN_GATE, step, xn2, P(MX_P_WGATE) + (size_t)l * F * D, dgate, g->dxn,
                    GL(g, MX_P_WGATE, l), N, D, F, 0, x16, dgateh, NULL, fused ? &dyq[0] : NULL, dam));
        CHK(lin_bwd(g, l, MX_LIN_UP, step, xn2, P(MX_P_WUP) + (size_t)l * F * D, dup, g->dxn,
                    GL(g, MX_P_WUP, l), N, D, F, 1, x16, duph, NULL, fused ? &dyq[1] : NULL, dam ? dam + 1 : NULL));
        /* dx becomes the gradient of xmid: residual + the norm's path */
        PROF_B(PROF_ELEM, st);
        CHK(norm_bwd(g, GL(g, MX_P_FFN_NORM, l), g->dxn, xmid, P(MX_P_FFN_NORM) + (size_t)l * D,
                     g->rstd2 + (size_t)l * N, dx_amax(g, l)));
        if (g->recompute)
            CHK(norm_out(g, xn1, xn1h, g->tmp, x, P(MX_P_ATTN_NORM) + (size_t)l * D));
        PROF_E(PROF_ELEM, st);
        /* with att16 dao, dq, dk, dv are BF16 only (g's buffers, first halves) */
        uint16_t *daoh = g->att16 ? (uint16_t*)g->dao : NULL, *dqh = g->att16 ? (uint16_t*)g->dq : NULL;
        uint16_t *dkh = g->att16 ? (uint16_t*)g->dk : NULL, *dvh = g->att16 ? (uint16_t*)g->dv : NULL;
        float *dao = g->att16 ? NULL : g->dao, *dq = g->att16 ? NULL : g->dq;
        float *dk = g->att16 ? NULL : g->dk, *dv = g->att16 ? NULL : g->dv;
        CHK(lin_bwd(g, l, MX_LIN_O, step, a.ao, P(MX_P_WO) + (size_t)l * D * QD, g->dx, dao,
                    GL(g, MX_P_WO, l), N, QD, D, 0, a.aoh, NULL, daoh, NULL, dx_amax(g, l)));
        PROF_B(PROF_ATTN, st);
        CHK(attn_bwd(g, &a));
        PROF_E(PROF_ATTN, st);
        PROF_B(PROF_ELEM, st);
        float *qam = rope_amax(g, l, 0), *kam = rope_amax(g, l, 1);
        CHK(rope_bwd(g, dq, dqh, H, qam));
        CHK(rope_bwd(g, dk, dkh, KV, kam));
        PROF_E(PROF_ELEM, st);
        x16 = shared_x16(g, l, MX_WGRAD, xn1, xn1h, ND, &rc16);
        CHK(rc16);
        CHK(lin_bwd(g, l, MX_LIN_Q, step, xn1, P(MX_P_WQ) + (size_t)l * QD * D, dq, g->dxn,
                    GL(g, MX_P_WQ, l), N, D, QD, 0, x16, dqh, NULL, NULL, qam));
        CHK(lin_bwd(g, l, MX_LIN_K, step, xn1, P(MX_P_WK) + (size_t)l * KD * D, dk, g->dxn,
                    GL(g, MX_P_WK, l), N, D, KD, 1, x16, dkh, NULL, NULL, kam));
        CHK(lin_bwd(g, l, MX_LIN_V, step, xn1, P(MX_P_WV) + (size_t)l * KD * D, dv, g->dxn,
                    GL(g, MX_P_WV, l), N, D, KD, 1, x16, dvh));
        /* dx becomes the gradient of the block input x[l] */
        PROF_B(PROF_ELEM, st);
        CHK(norm_bwd(g, GL(g, MX_P_ATTN_NORM, l), g->dxn, x, P(MX_P_ATTN_NORM) + (size_t)l * D,
                     g->rstd1 + (size_t)l * N, dx_amax(g, l - 1)));
        PROF_E(PROF_ELEM, st);
        CHK(dist_reduce(g, k_layer_kinds, 9, l));
    }
    PROF_B(PROF_ELEM, st);
    if (g->gshare) /* lazy (zero_grad; forward_backward asks for it): zeroed now, the forward is over */
        CU_TRY(cudaMemsetAsync(GL(g, MX_P_EMBED, 0), 0, g->info[MX_P_EMBED].numel * 4, st));
    CHK(mxg_embedding_backward(GL(g, MX_P_EMBED, 0), g->dx, g->tok, N, D, c->vocab, g->emb_ws, g->emb_ws_bytes, st));
    PROF_E(PROF_ELEM, st);
    return dist_reduce(g, k_embed_kinds, 1, 0);
}

static int put_tokens(mxg_llama* g, const int32_t* tokens, const int32_t* targets) {
    const int N = g->B * g->T, V = g->cfg.vocab;
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0 || tokens[n] >= V || (targets && (targets[n] < 0 || targets[n] >= V)))
            return mx_fail(MX_EINVAL, "model: token id at position %d outside the vocabulary [0, %d)", n, V);
    CU_TRY(cudaMemcpyAsync(g->tok, tokens, (size_t)N * 4, cudaMemcpyHostToDevice, g->st));
    if (targets) CU_TRY(cudaMemcpyAsync(g->tgt, targets, (size_t)N * 4, cudaMemcpyHostToDevice, g->st));
    return MX_OK;
}

static int mean_loss(mxg_llama* g, float* loss) {
    const int N = g->B * g->T;
    CHK(mxg_mean(g->losses, N, g->dmean, g->st));
    float h = 0;
    CU_TRY(cudaMemcpyAsync(&h, g->dmean, 4, cudaMemcpyDeviceToHost, g->st));
    CU_TRY(cudaStreamSynchronize(g->st));
    *loss = h;
    return MX_OK;
}

/* The LM head and the loss (dxnf, dhead NULL: loss only): FP32 GEMMs, or BF16
 * operands on tensor cores (head_bf16, the default for non-fp32 recipes). */
static int head_xent(mxg_llama* g, float scale, float* dxnf, float* dhead) {
    const mx_model_config* c = &g->cfg;
    const int N = g->B * g->T;
    if (!g->head_bf16)
        return mxg_lm_head_xent(g->xnf, P(MX_P_HEAD), g->tgt, N, c->dim, c->vocab, scale, g->losses, dxnf, dhead,
                                g->chunk, g->Nc, g->st);
    if (!g->head16_fresh) { /* once per weight update, not per micro-batch or evaluation batch */
        CHK(mxg_to_bf16(P(MX_P_HEAD), (size_t)c->vocab * c->dim, g->head16, g->st));
        g->head16_fresh = 1;
    }
    CHK(mxg_to_bf16(g->xnf, (size_t)N * c->dim, g->xnf16, g->st));
    return mxg_lm_head_xent_bf16(g->xnf16, g->head16, g->tgt, N, c->dim, c->vocab, scale, g->losses, dxnf, dhead,
                                 g->chunk, g->Nc, g->st);
}

extern "C" int mxg_llama_set_telemetry(mxg_llama* g, int on) {
    if (on && g->act16)
        return mx_fail(MX_EINVAL, "GPU model: telemetry measures the FP32 operands; this model keeps BF16-only "
                                  "activations (made with act16: create it with act16 0)");
    if (on)
        CU_TRY(cudaMemsetAsync(g->tele, 0, (size_t)g->cfg.n_layers * MX_LIN_PER_BLOCK * TELE_PER_LIN * sizeof(mxg_opstats),
                               g->st));
    g->tele_on = on != 0;
    return MX_OK;
}

extern "C" int mxg_llama_telemetry_read(mxg_llama* g, mx_linear_state* lstate) {
    const size_t n = (size_t)g->cfg.n_layers * MX_LIN_PER_BLOCK;
    mxg_opstats* h = (mxg_opstats*)malloc(n * TELE_PER_LIN * sizeof *h);
    if (!h) return mx_fail(MX_ENOMEM, "GPU telemetry: out of host memory");
    cudaError_t e = cudaMemcpyAsync(h, g->tele, n * TELE_PER_LIN * sizeof *h, cudaMemcpyDeviceToHost, g->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->st);
    if (e != cudaSuccess) {
        free(h);
        return mx_fail(MX_EIO, "GPU telemetry: copy failed: %s", cudaGetErrorString(e));
    }
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < TELE_PER_LIN; k++) {
            const mxg_opstats* s = &h[i * TELE_PER_LIN + k];
            mx_operand_stats* d = k < 6 ? &lstate[i].op[k / 2][k % 2] : &lstate[i].out[k - 6];
            d->sig2 = s->sig2;
            d->err2 = s->err2;
            d->blocks = (int64_t)s->blocks;
            d->clipped = (int64_t)s->clipped;
            d->nonfinite = (int64_t)s->nonfinite;
        }
    free(h);
    return MX_OK;
}

extern "C" int mxg_llama_set_head_bf16(mxg_llama* g, int on) {
    g->head_bf16 = on;
    return MX_OK;
}

extern "C" int mxg_llama_forward_backward(mxg_llama* g, const int32_t* tokens, const int32_t* targets, uint64_t step,
                                          float grad_scale, float* loss) {
    if (g->gshare && !g->gz_lazy) /* this forward would write over the last backward's gradients */
        return mx_fail(MX_EINVAL, "GPU model: the gradients share memory with the activations (one micro-batch a "
                                  "step): zero_grad before each backward (to add the gradients of several "
                                  "micro-batches, create the model without share_grads)");
    CHK(put_tokens(g, tokens, targets));
    g->x8t_train = 1;
    const int rf = forward_blocks(g, step);
    g->x8t_train = 0;
    CHK(rf);
    /* head + loss + dlogits per chunk of rows: dxnf into dxn, dhead += */
    PROF_B(PROF_HEAD, g->st);
    CHK(head_xent(g, grad_scale, g->dxn, GL(g, MX_P_HEAD, 0)));
    PROF_E(PROF_HEAD, g->st);
    CHK(backward_blocks(g, step));
    g->gz_lazy = 0; /* every linear's dW written */
    return mean_loss(g, loss);
}

extern "C" int mxg_llama_loss(mxg_llama* g, const int32_t* tokens, const int32_t* targets, uint64_t step, float* loss,
                              float* token_losses) {
    const int N = g->B * g->T;
    CHK(put_tokens(g, tokens, targets));
    CHK(forward_blocks(g, step));
    PROF_B(PROF_HEAD, g->st);
    CHK(head_xent(g, 1.0f, NULL, NULL));
    PROF_E(PROF_HEAD, g->st);
    CHK(mean_loss(g, loss));
    if (token_losses) CU_TRY(cudaMemcpy(token_losses, g->losses, (size_t)N * 4, cudaMemcpyDeviceToHost));
    return MX_OK;
}

extern "C" int mxg_llama_logits(mxg_llama* g, const int32_t* tokens, uint64_t step, float* out) {
    const mx_model_config* c = &g->cfg;
    const int N = g->B * g->T;
    CHK(put_tokens(g, tokens, NULL));
    CHK(forward_blocks(g, step));
    float* d = NULL;
    CU_TRY(cudaMalloc(&d, (size_t)N * c->vocab * 4));
    int rc = mxg_sgemm(0, 1, N, c->vocab, c->dim, g->xnf, c->dim, P(MX_P_HEAD), c->dim, d, c->vocab, 0, g->st);
    if (!rc && cudaStreamSynchronize(g->st) != cudaSuccess) rc = mx_fail(MX_EIO, "GPU logits: sync failed");
    if (!rc && cudaMemcpy(out, d, (size_t)N * c->vocab * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
        rc = mx_fail(MX_EIO, "GPU logits: copy failed");
    cudaFree(d);
    return rc;
}

/* gshare: the optimizer's table of the gradient slices (mxg_span_table), in the weights' order: a span per slice
 * of the kinds in activations, one per other kind, with the BF16 copies the update writes (act16's linear
 * weights, the BF16 head); made again when head_bf16 has changed. */
static int spans_ready(mxg_llama* g) {
    if (g->spans && g->spans_head16 == g->head_bf16) return MX_OK;
    mxg_span_table_free(g->spans);
    g->spans = NULL;
    const size_t L = g->cfg.n_layers;
    mxg_span* sp = (mxg_span*)malloc((size_t)MX_P_COUNT * L * sizeof *sp);
    if (!sp) return mx_fail(MX_ENOMEM, "GPU model: out of host memory");
    uint16_t* copy[MX_P_COUNT];
    bf16_copies(g, copy);
    int n = 0;
    for (int k = 0; k < MX_P_COUNT; k++) {
        const mx_param_info* in = &g->info[k];
        uint16_t* const p16 = copy[k];
        const size_t ns = shared_kind(k) ? n_slices(in, L) : 1, len = in->numel / ns; /* other kinds: in a row */
        const int j = lin_index(k); /* a block linear's slices: with wamax, their amax words */
        for (size_t l = 0; l < ns; l++) {
            const size_t o = in->offset + l * len;
            unsigned* am = g->wamax && j >= 0 && ns == L ? g->wamax + l * MX_LIN_PER_BLOCK + j : NULL;
            sp[n++] = (mxg_span){g->params + o, GL(g, k, l), g->m + o, g->v + o, p16 ? p16 + l * len : NULL, len,
                                 in->is_matrix, am};
        }
    }
    const int rc = mxg_span_table_create(&g->spans, sp, n);
    free(sp);
    g->spans_head16 = g->head_bf16;
    return rc;
}

extern "C" int mxg_llama_grad_sumsq(mxg_llama* g, double* out) {
    CHK(grads_materialize(g));
    CHK(dist_wait(g));
    double mine = 0.0;
    PROF_B(PROF_OPT, g->st);
    if (g->gshare) { /* slice by slice in the weights' order, one launch (mxg_sum_squares_spans) */
        CHK(spans_ready(g));
        CHK(mxg_sum_squares_spans(g->spans, g->ss_out, g->ss_ws, g->st));
        CU_TRY(cudaMemcpyAsync(&mine, g->ss_out, 8, cudaMemcpyDeviceToHost, g->st));
    } else if (g->W == 1) { /* the whole array, as without NCCL: the same bits */
        CHK(mxg_sum_squares(g->grads, g->n_params, g->ss_out, g->ss_ws, g->st));
        CU_TRY(cudaMemcpyAsync(&mine, g->ss_out, 8, cudaMemcpyDeviceToHost, g->st));
    } else { /* the owned (reduced) parts, summed in part order on the host */
        for (int i = 0; i < g->npieces; i++)
            CHK(mxg_sum_squares(g->grads + g->pieces[i].full, g->pieces[i].n, g->ss_parts + i, g->ss_ws, g->st));
    }
    PROF_E(PROF_OPT, g->st);
    CU_TRY(cudaStreamSynchronize(g->st));
    if (g->W > 1) {
        double* h = (double*)malloc((size_t)g->npieces * 8);
        if (!h) return mx_fail(MX_ENOMEM, "GPU model: out of host memory");
        cudaError_t e = cudaMemcpy(h, g->ss_parts, (size_t)g->npieces * 8, cudaMemcpyDeviceToHost);
        for (int i = 0; i < g->npieces; i++) mine += h[i];
        free(h);
        if (e != cudaSuccess) return mx_fail(MX_EIO, "GPU model: copying the gradient-norm parts failed");
    }
    if (!g->comm) {
        *out = mine;
        return MX_OK;
    }
    double all[64];
    if (g->W > 64) return mx_fail(MX_EINVAL, "data parallel: at most 64 GPUs");
    CHK(mxg_comm_allgather_host(g->comm, &mine, all, 8));
    double s = 0.0;
    for (int r = 0; r < g->W; r++) s += all[r]; /* rank order: the same sum on every rank */
    *out = s;
    return MX_OK;
}

extern "C" int mxg_llama_adamw(mxg_llama* g, const mx_adamw_config* c, double lr, float gscale, int64_t t) {
    CHK(grads_materialize(g));
    weights_changed(g);
    if (g->comm) { /* ZeRO-1: the owned parts, then every rank gets the updated weights */
        CHK(dist_wait(g));
        PROF_B(PROF_OPT, g->st);
        CHK(mxg_adamw_pieces(g->pieces, g->npieces, g->params, g->grads, g->m, g->v, c, lr, gscale, t, g->st));
        CHK(mxg_comm_group(g->comm, 1));
        int rc = MX_OK;
        for (int i = 0; i < g->npieces && !rc; i++)
            rc = mxg_comm_all_gather(g->comm, g->params + g->pieces[i].slice, g->pieces[i].n * (size_t)g->W, g->st);
        int rc2 = mxg_comm_group(g->comm, 0);
        PROF_E(PROF_OPT, g->st);
        return rc ? rc : rc2;
    }
    /* the BF16 copies the next step reads (act16's linear weights, the BF16 head) written by the update */
    uint16_t* copy[MX_P_COUNT];
    bf16_copies(g, copy);
    int rc = g->gshare ? spans_ready(g) : MX_OK;
    PROF_B(PROF_OPT, g->st);
    if (!rc && g->wamax) /* (only with gshare) the update raises them from 0 */
        rc = cudaMemsetAsync(g->wamax, 0, (size_t)g->cfg.n_layers * MX_LIN_PER_BLOCK * sizeof(unsigned), g->st) ==
                     cudaSuccess ? MX_OK : mx_fail(MX_EIO, "GPU model: clearing the weights' amax failed");
    if (!rc && g->gshare) rc = mxg_adamw_spans(g->spans, c, lr, gscale, t, g->st); /* the same copies: spans_ready */
    else if (!rc) rc = mxg_adamw_update_bf16(g->info, g->params, g->grads, g->m, g->v, c, lr, gscale, t, copy, g->st);
    PROF_E(PROF_OPT, g->st);
    if (!rc) {
        g->w16_fresh = g->w16 != NULL;
        g->head16_fresh = g->head_bf16;
        g->wamax_fresh = g->wamax != NULL;
    }
    if (g_mxg_prof && t == 1) prof_restart(2);
    return rc;
}

extern "C" size_t mxg_llama_shard_size(const mxg_llama* g) { return g->nshard; }

extern "C" int mxg_llama_set_sync(mxg_llama* g, int on) {
    g->sync = on;
    return MX_OK;
}

extern "C" int mxg_llama_shard_copy(const mxg_llama* g, int rank, float* full, float* shard, int to_full) {
    if (rank < 0 || rank >= g->W) return mx_fail(MX_EINVAL, "data parallel: rank %d of %d", rank, g->W);
    if (!g->comm) {
        memcpy(to_full ? full : shard, to_full ? shard : full, g->n_params * 4);
        return MX_OK;
    }
    for (int i = 0; i < g->npieces; i++) {
        const mx_piece* p = &g->pieces[i];
        float* f = full + p->slice + (size_t)rank * p->n;
        float* s = shard + p->shard;
        memcpy(to_full ? f : s, to_full ? s : f, p->n * 4);
    }
    return MX_OK;
}
