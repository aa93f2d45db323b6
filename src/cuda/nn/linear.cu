/*
 * linear.cu: the quantized linear layer on the GPU, the twin of src/nn/linear.c.
 *
 * Same recipe, same operands, same random streams as the CPU: for GEMM g the
 * two TN operands ([rows, R], R the reduction dim contiguous; linear.c
 * transposes W for Dgrad, dY and X for Wgrad) are rotated and quantized by the
 * bit-exact quantizers of ../mx/mxfp4.cu with linear.c's seeds, stream ids and
 * element indices, then multiplied with FP32 accumulation. The GPU makes the
 * same operands without transposing FP32 tensors: BF16 operands are converted
 * as stored and the GEMM reads them transposed; FP8 codes (an elementwise cast
 * under a per-tensor scale) are made as stored and transposed as bytes; MXFP4
 * 1x32 operands of a transposed tensor come from the column-direction (32x1)
 * quantizer with the SR index of the transposed operand (mxg_qspec.sr_tn): the
 * same bits as linear.c's transpose-then-quantize (only 32x32 weight tiles
 * are still transposed in FP32 first). The backward converts or casts dY once
 * for Dgrad and Wgrad where the two take the same operand (BF16, FP8):
 *   fp32   FP32 GEMM (no TF32) straight on the untransposed tensors
 *   bf16   both operands rounded to BF16 (RNE), BF16 GEMM
 *   fp8    per-tensor current scaling, E4M3 (E5M2 for dY), FP8 GEMM with the
 *          two dequantization multipliers (given as one scale per row, OUTER:
 *          outer_scales & MXG_OUTER_FP8, the model's default; else as VEC128
 *          scales when R is a multiple of 128: FP32 promotion every 128, see below)
 *   mxfp4  exact: codes + E8M0 scales, dequantized to BF16 (exact), BF16 GEMM
 *          fast:  exponent-folded E4M3 + per-128 float scales, FP8 GEMM
 *          (VEC128_32F); falls back to exact when R is not a multiple of 128;
 *          with outer_scales & MXG_OUTER_MXFP4 (MXLM_GPU_OUTER=1) the two operands re-expressed
 *          with one scale per row, the GEMM on OUTER_VEC_32F scales, then the
 *          exact fix-up of the blocks that rounded (mxg_fold_outer_fixup); with
 *          MXG_OUTER_MXFP4_FPROP alone (MXLM_GPU_OUTER=fprop) Fprop's two operands
 *          folded OUTER in the quantizer's one pass and its GEMM on OUTER scales;
 *          with MXG_OUTER_MXFP4_ROUND as well (=round) Dgrad's and Wgrad's
 *          operands re-expressed as under =1, without the fix-up (=round:T: only
 *          where C [Ma, Nb] has Ma Nb / (Ma + Nb) >= T, outer_min)
 * The products equal the CPU's (FP32 products of the same quantized values);
 * only the accumulation order differs (cuBLASLt's), and on the fast path a
 * block more than 14 binades below its 128-group's largest rounds in E4M3.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/nn/gemm.cuh"
#include "cuda/reduce.cuh"
#include "mxlm/gpu_model.h"
#include "mxlm/gpu_switches.h"
#include "mxlm/linear_plan.h"

struct mxg_linws {
    size_t cap;            // elements per operand buffer
    int bf16_only;         // only h[] (mxg_linws_create's bf16_only)
    float* t[2];           // [cap] transposed FP32 operands (a, b)
    uint16_t* h[2];        // [cap] BF16 operands / dequantized MXFP4
    uint8_t* codes[2];     // [cap/2] packed E2M1
    uint8_t* scales[2];    // [cap/32] E8M0
    uint8_t* q8[2];        // [cap] E4M3/E5M2 codes (fp8) or folded E4M3 (mxfp4 fast)
    float* fs[2];          // [cap/128 + 4] per-128 float scales
    float* sc;             // [16] fp8: amax, scale, inv_scale per operand (16-byte aligned slots)
    unsigned long long* counters; // [2] clipped blocks, blocks outside the fold window
    /* what the last MXFP4 GEMM quantized (test hook) */
    int last_rows[2], last_R, last_layout[2];
    /* mxg_linear_ctx.x_same: X's fast-path MXFP4 operands or FP8 codes kept for the next linear reading X.
     * Role 0: Fprop's operand a, in q8[0] / fs[0] (any other use of slot 0 drops it); role 1: Wgrad's
     * operand b, in its own q8x / fsx / scx (Dgrad's operand b uses slot 1 between two Wgrads). */
    uint8_t* q8x;          // [cap], made on the first use of x_same (not counted by mxg_linws_bytes)
    float* fsx;            // [cap/128 + 4]
    float* scx;            // [16]: FP8's amax, scale, inv_scale of the kept Wgrad operand b
    struct { int valid, fmt, fold; const void* x; int xr, xc; mxg_qspec s; } xk[2]; // x: the tensor (FP32 or BF16); fold: OUTER (1) or not
    int a8t;               // fp8: t[0] holds the codes of the last GEMM's operand a transposed (A_MAKE_T), for the next (A_READY)
    /* mxg_linear_ctx.gout: the product made again and its FP32 reference ([gcap] each, grown at telemetry
     * steps), and the counters that second quantization adds to (not counters: nothing counted twice) */
    float *gq, *gr;
    size_t gcap;
    unsigned long long* gcount;
    /* NVFP4 / MXFP8 (block_gemm): the decoded FP32 values of an operand (telemetry) and then the unscaled
     * product of NVFP4's BF16 operands, [fcap], made on first use */
    float* fq;
    size_t fcap;
    /* mxg_linear_ctx.outer_scales: the two operands re-expressed with one scale per stored row ([cap] codes,
     * [cap/128 + 4] floats, [cap/32] flags each), made on first use (not in mxg_linws_bytes; the model's estimate
     * adds them: llama.cu's linws_bytes) */
    uint8_t* qo8[2];
    float* fo[2];
    uint8_t* fl[2];        // [cap/32]: the blocks that rounded (mxg_fold_outer_fixup's flags)
};

namespace {

/* dst[cols, rows] = src[rows, cols]^T in 32x32 tiles through shared memory (FP32 values; FP8 codes: mxg_fp8_transpose). */
template <typename T>
__global__ void k_transpose(T* __restrict__ dst, const T* __restrict__ src, int rows, int cols) {
    __shared__ T tile[32][33];
    int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {
        int r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[i][threadIdx.x] = src[(size_t)r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        int c = c0 + i, r = r0 + threadIdx.x;
        if (r < rows && c < cols) dst[(size_t)c * rows + r] = tile[threadIdx.x][i];
    }
}

template <typename T> int transpose(T* dst, const T* src, int rows, int cols, cudaStream_t st) {
    dim3 grid((cols + 31) / 32, (rows + 31) / 32), block(32, 8);
    k_transpose<T><<<grid, block, 0, st>>>(dst, src, rows, cols);
    CU_LAUNCHED();
    return MX_OK;
}

/* MXLM_GPU_OOW_PROBE=1 (gpu_switches.h): issue 16's measurement before an OUTER-folded fast path: each fast-path MXFP4 operand is quantized a second time into packed codes (the reference kernels:
 * the same bytes) and folded with OUTER scales (mxg_fold: e_ref the largest block exponent of the whole stored
 * row), into scratch, counting per GEMM and operand the blocks and those outside the OUTER fold's window
 * (exponent more than 14 below e_ref, a nonzero code: the blocks an exact fix-up would have to add). A
 * measurement, not a mode: slower, the training's bytes unchanged; the fused SwiGLU quantizer is off under it
 * (its operands would go uncounted). mxg_linear_oow_report prints the counts. */
int g_oow_probe = -1;
unsigned long long* g_oow_dev = NULL; // [3 GEMMs][2 operands][2]: mxg_fold's counters ([1]: outside the window)
unsigned long long g_oow_blocks[3][2];
int oow_probe_on(void) {
    if (g_oow_probe < 0) {
        mxg_switches sw;
        mxg_switches_read(&sw); /* (read once: the probe's counters span the run) */
        g_oow_probe = sw.oow_probe;
    }
    return g_oow_probe;
}

/* x [xr, xc] quantized as the fast path just did (spec s; col: the column-direction output), into w's
 * exact-path buffers and then folded OUTER into h[o] (e4m3 [rows, R], then fscale [rows]) */
int oow_probe_run(mxg_linws* w, mx_gemm_id g, int o, const float* x, int xr, int xc, int col, const mxg_qspec* s,
                  int rows, int R, cudaStream_t st) {
    if (!g_oow_dev) {
        CU_TRY(cudaMalloc(&g_oow_dev, 12 * sizeof(unsigned long long)));
        CU_TRY(cudaMemset(g_oow_dev, 0, 12 * sizeof(unsigned long long)));
    }
    mxg_qout q;
    memset(&q, 0, sizeof q);
    q.codes = w->codes[o];
    q.scales = w->scales[o];
    int rc = mxg_quantize(x, MXG_F32, xr, xc, col ? NULL : s, col ? NULL : &q, col ? s : NULL, col ? &q : NULL, st);
    if (rc) return rc;
    mxg_fp4 t = {rows, R, col ? MX_LAYOUT_1x32 : s->layout, w->codes[o], w->scales[o]};
    uint8_t* e4 = (uint8_t*)w->h[o];
    rc = mxg_fold(&t, 1, MXG_FOLD_OUTER, e4, (float*)(e4 + (size_t)rows * R), g_oow_dev + (g * 2 + o) * 2, st);
    if (!rc) g_oow_blocks[g][o] += (unsigned long long)rows * (unsigned long long)R / 32; /* k_fold counts 32-segments */
    return rc;
}

/* out[i] = *v for i < n (one per-tensor multiplier as a VEC128 scale tensor). */
__global__ void k_broadcast(float* __restrict__ out, size_t n, const float* __restrict__ v) {
    float x = *v;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = x;
}

/* Telemetry of a BF16 (kind 0: Q(x) = h) or FP8 (1: E4M3, 2: E5M2; Q(x) =
 * decode(q8) * inv, mx_fp8_fakequant's value) operand x [n], or of a product
 * (3: x = C, Q(x) = Cq given as FP32 in h's place): linear.c's
 * accumulate_stats, per-thread FP64 sums, warp-reduced, atomics into *st. */
__global__ void k_opstats(const float* __restrict__ x, size_t n, int kind, const uint16_t* __restrict__ h,
                          const uint8_t* __restrict__ q8, const float* __restrict__ inv_p, mxg_opstats* st) {
    /* kind 3 (a product, mx_linear_state.out): x the reference C, Q(x) the product Cq, in h's place as FP32 */
    const float* qf = (const float*)h;
    const float inv = inv_p ? *inv_p : 1.0f;
    double sg = 0.0, er = 0.0;
    unsigned long long nf = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float xv = x[i];
        if (!(fabsf(xv) <= 3.4028235e38f)) { nf++; continue; }
        const float q = kind == 3 ? qf[i] : kind == 0 ? mx_bf16_to_f32(h[i])
                                  : (kind == 1 ? mx_e4m3_decode(q8[i]) : mx_e5m2_decode(q8[i])) * inv;
        const double d = (double)xv - (double)q;
        sg += (double)xv * (double)xv;
        er += d * d;
    }
    sg = warp_sum(sg);
    er = warp_sum(er);
    nf = warp_sum(nf);
    if ((threadIdx.x & 31) == 0) {
        if (sg != 0.0) atomicAdd(&st->sig2, sg);
        if (er != 0.0) atomicAdd(&st->err2, er);
        if (nf) atomicAdd(&st->nonfinite, nf);
    }
}

int opstats(const float* x, size_t n, int kind, const uint16_t* h, const uint8_t* q8, const float* inv,
            mxg_opstats* st, cudaStream_t s) {
    size_t blocks = (n + 255) / 256;
    k_opstats<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, s>>>(x, n, kind, h, q8, inv, st);
    CU_LAUNCHED();
    return MX_OK;
}

/* linear.c's shape checks (linear_plan.h), then what the GPU does not run (the format table's GPU columns). */
int check_dims(mx_gemm_id g, const mx_recipe* r, int Ma, int Nb, int R) {
    const mx_gemm_recipe* q = &r->g[g];
    int rc = mx_gemm_check_dims(g, q, Ma, Nb, R);
    if (rc) return rc;
    switch (mx_gemm_gpu_refusal(r, g)) {
    case 1: return mx_fail(MX_EINVAL, "linear %s: %s has no GPU path (CPU-only)", mx_gemm_name(g), mx_format_name(q->fmt));
    case 2: {
        char ok[96];
        return mx_fail(MX_EINVAL, "linear %s: the GPU rotates %s operands only (a Hadamard rotation with %s is "
                                  "CPU-only)", mx_gemm_name(g), mx_format_list(mx_format_gpu_rotates, ok, sizeof ok),
                       mx_format_name(q->fmt));
    }
    case 3:
        return mx_fail(MX_EINVAL, "linear %s: FP8 delayed scaling is CPU-only (use fp8, current scaling, on the "
                                  "GPU)", mx_gemm_name(g));
    default: return MX_OK;
    }
}

int gemm_timed(mxg_scale_mode mode, const void* A, mxg_dtype at, int a_tr, const float* as, const void* B,
               mxg_dtype bt, int b_tr, const float* bs, void* C, mxg_dtype ct, int M, int N, int K, int acc,
               const float* res, void* stream) {
    PROF_B(PROF_GEMM, MXG_STREAM(stream));
    int rc = mxg_gemm_lin(mode, A, at, a_tr, as, B, bt, b_tr, bs, C, ct, M, N, K, acc, res, stream);
    PROF_E(PROF_GEMM, MXG_STREAM(stream));
    return rc;
}

}  // namespace

extern "C" int mxg_linws_create(mxg_linws** out, size_t max_elems, int bf16_only) {
    *out = NULL;
    mxg_linws* w = (mxg_linws*)calloc(1, sizeof *w);
    if (!w) return mx_fail(MX_ENOMEM, "linear workspace: out of host memory");
    size_t cap = (max_elems + 127) / 128 * 128;
    w->cap = cap;
    w->bf16_only = bf16_only;
    int rc = MX_OK;
#define ALLOC(p, bytes)                                                                                          \
    do {                                                                                                         \
        if (!rc && cudaMalloc((void**)&(p), (bytes)) != cudaSuccess) {                                          \
            cudaGetLastError();                                                                                  \
            rc = mx_fail(MX_ENOMEM, "GPU out of memory: linear-layer workspace (%s, %.1f MiB)", #p,               \
                         (double)(bytes) / 1048576.0);                                                          \
        }                                                                                                        \
    } while (0)
    for (int o = 0; o < 2; o++) {
        ALLOC(w->h[o], cap * sizeof(uint16_t));
        if (bf16_only) continue;
        ALLOC(w->t[o], cap * sizeof(float));
        ALLOC(w->codes[o], cap / 2);
        ALLOC(w->scales[o], cap / 32);
        ALLOC(w->q8[o], cap);
        ALLOC(w->fs[o], (cap / 128 + 4) * sizeof(float));
    }
    ALLOC(w->sc, 16 * sizeof(float));
    ALLOC(w->counters, 2 * sizeof(unsigned long long));
#undef ALLOC
    if (!rc && cudaMemset(w->counters, 0, 2 * sizeof(unsigned long long)) != cudaSuccess)
        rc = mx_fail(MX_EIO, "linear workspace: cudaMemset failed");
    if (rc) { mxg_linws_free(w); return rc; }
    *out = w;
    return MX_OK;
}

extern "C" void mxg_linws_free(mxg_linws* w) {
    if (!w) return;
    for (int o = 0; o < 2; o++) {
        cudaFree(w->t[o]); cudaFree(w->h[o]); cudaFree(w->codes[o]); cudaFree(w->scales[o]);
        cudaFree(w->q8[o]); cudaFree(w->fs[o]);
    }
    cudaFree(w->q8x); cudaFree(w->fsx); cudaFree(w->scx);
    cudaFree(w->gq); cudaFree(w->gr); cudaFree(w->gcount); cudaFree(w->fq);
    for (int o = 0; o < 2; o++) { cudaFree(w->qo8[o]); cudaFree(w->fo[o]); cudaFree(w->fl[o]); }
    cudaFree(w->sc);
    cudaFree(w->counters);
    free(w);
}

extern "C" size_t mxg_linws_bytes(size_t max_elems, int bf16_only) {
    size_t cap = (max_elems + 127) / 128 * 128;
    if (bf16_only) return 2 * cap * 2 + 64 + 16;
    return 2 * (cap * 4 + cap * 2 + cap / 2 + cap / 32 + cap + (cap / 128 + 4) * 4) + 64 + 16;
}

extern "C" int mxg_linws_last_fp4(const mxg_linws* w, int operand, mxg_fp4* t) {
    if (!w || operand < 0 || operand > 1 || !w->last_R) return mx_fail(MX_EINVAL, "linear workspace: no MXFP4 GEMM yet");
    t->rows = w->last_rows[operand];
    t->cols = w->last_R;
    t->layout = (mx_layout)w->last_layout[operand];
    t->codes = w->codes[operand];
    t->scales = w->scales[operand];
    return MX_OK;
}

extern "C" int mxg_linws_counters(const mxg_linws* w, unsigned long long out[2]) {
    CU_TRY(cudaMemcpy(out, w->counters, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    return MX_OK;
}

extern "C" unsigned long long* mxg_linws_device_counters(mxg_linws* w) { return w->counters; }

namespace {

/* Two quantizer specs give the same bytes of the same input: the fields the outputs depend on equal, and the SR
 * stream's and the random signs' seeds where they are used (an RNE spec's seed, a fixed rotation's seed do not
 * enter: they change with the step while the bytes do not). */
bool spec_bytes_same(const mxg_qspec* a, const mxg_qspec* b) {
    if (a->layout != b->layout || a->scale != b->scale || a->round != b->round || a->had_n != b->had_n ||
        a->had_axis != b->had_axis || a->had_random != b->had_random || a->sr_tn != b->sr_tn)
        return false;
    if (a->round == MX_ROUND_SR && (a->seed != b->seed || a->tensor_id != b->tensor_id)) return false;
    return !(a->had_n && a->had_random && (a->had_seed != b->had_seed || a->rot_id != b->rot_id));
}

/* x_same: the kept operand of `role` is X's, as spec s would make it now (spec_bytes_same: under RNE without
 * a random rotation, what x_same keeps, the seed, stream and rotation ids change no byte). */
bool xkept(const mxg_linws* w, int role, int fmt, int fold, const void* x, int xr, int xc, const mxg_qspec* s) {
    return w->xk[role].valid && w->xk[role].fmt == fmt && w->xk[role].fold == fold && w->xk[role].x == x &&
           w->xk[role].xr == xr && w->xk[role].xc == xc && spec_bytes_same(&w->xk[role].s, s);
}

void xrecord(mxg_linws* w, int role, int fmt, int fold, const void* x, int xr, int xc, const mxg_qspec* s) {
    w->xk[role].valid = 1;
    w->xk[role].fmt = fmt;
    w->xk[role].fold = fold;
    w->xk[role].x = x;
    w->xk[role].xr = xr;
    w->xk[role].xc = xc;
    w->xk[role].s = *s;
}

/* The kept Wgrad operand's own buffers, made on first use; 0 if there is no room (x_same then quantizes X
 * for every linear, as without it). */
int xbuffers(mxg_linws* w);

/* mxg_linear_ctx.x8s holds X's amax for Wgrad's operand b: given, and Fprop an FP8 per-tensor GEMM of X as stored
 * (no rotation: its amax is X's), which writes it. */
long long g_amax_hits = 0; /* the FP8 casts made from a kept or given amax (mxg_linear_amax_hits: a test's count) */
int x8s_amax(const mxg_linear_ctx* c) {
    const mx_gemm_recipe* f = &c->recipe->g[MX_FPROP];
    return c->x8s && mx_format_get(f->fmt)->scale == MX_SCALE_TENSOR && !f->had_n && !c->recipe->g[MX_WGRAD].had_n;
}

/* mxg_linear_ctx.x8t serves: given with its flag, x8s_amax's conditions, and Wgrad FP8 per tensor reading X in
 * Fprop's kind (E4M3: the same scale from the same amax, so the same codes). */
long long g_x8t_hits = 0; /* Wgrad operands taken from x8t (mxg_linear_x8t_hits: a test's count) */
int x8t_on(const mxg_linear_ctx* c) {
    return c->x8t && c->x8t_made && x8s_amax(c) && mx_format_get(c->recipe->g[MX_WGRAD].fmt)->scale == MX_SCALE_TENSOR &&
           mx_operand_fp8_kind(MX_WGRAD, 1) == mx_operand_fp8_kind(MX_FPROP, 0);
}

/* x_same for operand o of GEMM g: 0 or 1 the role of X's kept operand it is (Fprop's a, Wgrad's b), -1 none. */
int xrole(mx_gemm_id g, int o) { return (g == MX_FPROP && o == 0) ? 0 : (g == MX_WGRAD && o == 1) ? 1 : -1; }

/* Whether operand o of GEMM g keeps (or reuses) X's operand: x_same on, an X role, no telemetry, the format's
 * own condition `same_bytes` (the operand is the same bytes for every linear reading X), and for role 1 its
 * buffers. Slot 0's kept operand is dropped unless this operand a is X's again. */
int xkeep(mxg_linws* w, const mxg_linear_ctx* c, mx_gemm_id g, int o, int telemetry, int same_bytes) {
    const int role = xrole(g, o);
    const int keep = c->x_same && role >= 0 && !telemetry && same_bytes && (role == 0 || xbuffers(w));
    if (o == 0) w->xk[0].valid = w->xk[0].valid && keep;
    return keep;
}

int xbuffers(mxg_linws* w) {
    if (w->q8x) return 1;
    if (cudaMalloc((void**)&w->q8x, w->cap) != cudaSuccess ||
        cudaMalloc((void**)&w->fsx, (w->cap / 128 + 4) * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void**)&w->scx, 16 * sizeof(float)) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(w->q8x); cudaFree(w->fsx); cudaFree(w->scx);
        w->q8x = NULL; w->fsx = NULL; w->scx = NULL;
        return 0;
    }
    return 1;
}

/* C = base + P / s_a / s_b (base: C itself when accumulating, else res, else 0): the product P of block_gemm's
 * BF16 values and what they leave out per operand: NVFP4's tensor scale (device: amax_S, [1] the scale, when
 * Sa / Sb are given) or dither's 3/4 (da / db otherwise). */
__global__ void k_block_epilogue(float* __restrict__ C, const float* __restrict__ P, const float* __restrict__ res,
                                 size_t n, int accumulate, const float* Sa, const float* Sb, float da, float db) {
    const float sa = Sa ? Sa[1] : da, sb = Sb ? Sb[1] : db;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float base = accumulate ? C[i] : res ? res[i] : 0.0f;
        C[i] = base + P[i] / sa / sb;
    }
}

/* w->fq with room for n floats: made once, with the workspace's capacity (an operand, and every product of
 * the model's linears, fits in it: mxg_llama_estimate counts it for the recipes that take this path), so
 * it is not made again in the middle of a step; larger only for a caller's larger product. */
int fq_room(mxg_linws* w, size_t n) {
    if (n <= w->fcap) return MX_OK;
    if (n < w->cap) n = w->cap;
    cudaFree(w->fq);
    w->fq = NULL;
    w->fcap = 0;
    if (cudaMalloc((void**)&w->fq, n * 4) != cudaSuccess) {
        cudaGetLastError();
        return mx_fail(MX_ENOMEM, "GPU out of memory: the NVFP4 / MXFP8 / dither linear workspace (%.1f MiB)",
                       n * 4 / 1048576.0);
    }
    w->fcap = n;
    return MX_OK;
}

/* NVFP4, MXFP8 and MXFP4 under the dither rule, which have no fast path on Hopper: linear.c's steps on the
 * device. Each operand as [rows, R] in FP32 (transposed first where it is stored [R, rows]), rotated along
 * R when the recipe says (mxg_hadamard_rotate), quantized by the reference form of the CPU quantizer into
 * the values the GEMM takes in BF16 (exact: MXFP8's E4M3 x 2^e; NVFP4's q x sb without its tensor scale;
 * MXFP4's q x 2^e without dither's 4/3), telemetry from the FP32 decoded values; then the BF16 GEMM, the
 * product divided by what the BF16 values leave out (k_block_epilogue). The products equal the CPU's up to
 * the order of the sums (and the factor applied once to the sum rather than to each element). */
int block_gemm(const mxg_linear_ctx* c, mx_gemm_id g, const mx_format_info* f, const float* const op[2],
               const int rows[2], const int tr[2], int R, float* C, int Ma, int Nb, int accumulate, const float* res,
               mxg_opstats* const tele[2], void* stream) {
    const mx_gemm_recipe* q = &c->recipe->g[g];
    mxg_linws* w = c->ws;
    cudaStream_t st = MXG_STREAM(stream);
    const int nv = f->scale == MX_SCALE_E4M3_TENSOR;
    int rc = MX_OK;
    for (int o = 0; o < 2 && !rc; o++) {
        const size_t n = (size_t)rows[o] * R;
        const float* x = op[o];
        if (tr[o] || q->had_n) { /* a copy to rotate in place, or the transpose */
            rc = tr[o] ? transpose<float>(w->t[o], op[o], R, rows[o], st)
                       : (cudaMemcpyAsync(w->t[o], op[o], n * 4, cudaMemcpyDeviceToDevice, st) == cudaSuccess
                              ? MX_OK : mx_fail(MX_EIO, "linear: copy of an operand failed"));
            x = w->t[o];
        }
        if (!rc && q->had_n)
            rc = mxg_hadamard_rotate(w->t[o], rows[o], R, q->had_n, q->had_random, mx_rh_seed(c->recipe, c->seed, c->step),
                                     mx_rot_id(c->layer_id, g), stream);
        mx_qopts qp = mx_operand_qopts(q, g, o, c->seed, c->step, c->layer_id);
        qp.layout = mx_format_layout(f, mx_layout_is_2d(qp.layout));
        float* y = NULL;
        if (!rc && tele[o] && !(rc = fq_room(w, n))) y = w->fq;
        unsigned long long* stats = tele[o] ? &tele[o]->blocks : NULL;
        if (!rc)
            rc = nv ? mxg_fakequant_nvfp4(x, rows[o], R, &qp, w->sc + 8 * o, w->h[o], y, stats, w->counters, stream)
                 : f->elem == MX_ELEM_E2M1
                     ? mxg_fakequant_fp4_ref(x, rows[o], R, &qp, w->h[o], y, stats, w->counters, stream)
                     : mxg_fakequant_mxfp8(x, rows[o], R, &qp, w->h[o], y, stats, w->counters, stream);
        if (!rc && tele[o]) rc = opstats(x, n, 3, (const uint16_t*)y, NULL, NULL, tele[o], st);
    }
    PROF_E(PROF_QUANT, st);
    if (rc) return rc;
    const int dither = !nv && f->elem == MX_ELEM_E2M1; /* this path's MXFP4 is dither's, the GEMM's rule (both operands) */
    if (!nv && !dither)
        return gemm_timed(MXG_SCALE_NONE, w->h[0], MXG_BF16, 0, NULL, w->h[1], MXG_BF16, 0, NULL, C, MXG_F32, Ma, Nb, R,
                          accumulate, res, stream);
    const size_t n = (size_t)Ma * Nb;
    if ((rc = fq_room(w, n))) return rc;
    rc = gemm_timed(MXG_SCALE_NONE, w->h[0], MXG_BF16, 0, NULL, w->h[1], MXG_BF16, 0, NULL, w->fq, MXG_F32, Ma, Nb, R,
                    0, NULL, stream);
    if (rc) return rc;
    const size_t nb = (n + 255) / 256;
    k_block_epilogue<<<(unsigned)(nb < 4096 ? nb : 4096), 256, 0, st>>>(C, w->fq, res, n, accumulate, nv ? w->sc : NULL,
                                                                        nv ? w->sc + 8 : NULL, 0.75f, 0.75f);
    CU_LAUNCHED();
    return MX_OK;
}

/* The MXFP4 quantizer spec of operand o of GEMM g (tr: the operand is stored transposed, [R, rows]), as
 * linear.c quantizes it; returns 1 when it is made by the column-direction pass over the tensor as
 * stored (a transposed operand's 1x32 blocks: its 32x1 ones, the SR index in the transposed operand's
 * coordinates, sr_tn), 0 for a row-direction output. memset first: the specs are compared whole. */
int mxfp4_spec(const mxg_linear_ctx* c, mx_gemm_id g, int o, int tr, mxg_qspec* s) {
    const mx_gemm_recipe* q = &c->recipe->g[g];
    const mx_qopts qp = mx_operand_qopts(q, g, o, c->seed, c->step, c->layer_id);
    memset(s, 0, sizeof *s);
    s->layout = qp.layout;
    s->scale = qp.scale;
    s->round = qp.round;
    s->seed = qp.seed;
    s->tensor_id = qp.tensor_id;
    s->had_n = q->had_n;
    s->had_axis = 1;
    s->had_random = q->had_random;
    s->had_seed = mx_rh_seed(c->recipe, c->seed, c->step);
    s->rot_id = mx_rot_id(c->layer_id, g);
    if (!(tr && s->layout == MX_LAYOUT_1x32)) return 0;
    s->layout = MX_LAYOUT_32x1;
    s->sr_tn = 1;
    return 1;
}

/* MXG_OUTER_MXFP4_FPROP's condition (recipe_gemm_core's outer1) for GEMM g of c on the fast path over the
 * reduction dim R: both operands row-direction 1x32 outputs that mxg_quantize folds OUTER in one pass (no 32x32
 * weight tiles, a rotation <= 32, at most 1024 blocks a row); otherwise VEC128 as without it. */
int mxfp4_outer1(const mxg_linear_ctx* c, mx_gemm_id g, int fast, int a_t, int b_t, int R) {
    const mx_gemm_recipe* q = &c->recipe->g[g];
    return fast && g == MX_FPROP && (c->outer_scales & MXG_OUTER_MXFP4_FPROP) && !(c->outer_scales & MXG_OUTER_MXFP4) &&
           !a_t && !b_t && !q->w2d && q->had_n <= 32 && R / 32 <= 1024;
}

long long g_wq_hits = 0; /* the operands taken from an mxg_wq (mxg_linear_wq_hits: a test's count) */

/* The ready operand b of GEMM g (Fprop's W, Dgrad's W^T) in c->wq, made as this call would make it: W the same
 * tensor stored the same way ([n, k]: Fprop's B untransposed, Nb x R; Dgrad's transposed, R x Nb), the format,
 * spec and fold this call's (fp8: the OUTER scale vector it keeps); NULL otherwise (and under telemetry or the
 * OUTER probe, which look at the operand as it is made). */
const mxg_wq* wq_take(const mxg_linear_ctx* c, mx_gemm_id g, int fmt, const float* B, int b_t, int Nb, int R,
                      const mxg_qspec* s, int fold, int telemetry) {
    const mxg_wq* q = c->wq;
    const int k = g == MX_DGRAD;
    if (!q || (g != MX_FPROP && g != MX_DGRAD) || b_t != k || !q->valid[k] || q->fmt != fmt || q->w != B || !B ||
        telemetry || oow_probe_on())
        return NULL;
    if (k ? (q->n != R || q->k != Nb) : (q->n != Nb || q->k != R)) return NULL;
    if (fmt == MX_FMT_MXFP4 && (q->fold[k] != fold || !spec_bytes_same(&q->spec[k], s))) return NULL;
    if (fmt == MX_FMT_FP8 && !(c->outer_scales & MXG_OUTER_FP8)) return NULL;
    g_wq_hits++;
    return q;
}

/* An FP8 per-tensor cast of x [rows, cols] into codes as stored and / or codes_t transposed (either NULL: not
 * made; both: one read), s: amax, scale, _, _, inv_scale. known: x's amax made by its producer (the cast alone,
 * copied to am where am is given), else NULL (the amax computed, into s[0]). */
int fp8_cast(const void* x, mxg_dtype dt, int rows, int cols, mx_fp8_kind k, const float* known, float* am, float* s,
             float* rv, size_t nv, uint8_t* codes, uint8_t* codes_t, void* stream) {
    if (codes_t)
        return known ? mxg_fp8_quantize_t_amax(x, dt, rows, cols, k, known, am, s + 1, s + 4, rv, nv, codes, codes_t,
                                               stream)
                     : mxg_fp8_quantize_t(x, dt, rows, cols, k, NULL, s, s + 1, s + 4, rv, nv, codes, codes_t, stream);
    const size_t n = (size_t)rows * cols;
    return known ? mxg_fp8_quantize_amax(x, dt, n, k, known, am, s + 1, s + 4, rv, nv, codes, stream)
                 : mxg_fp8_quantize(x, dt, n, k, NULL, s, s + 1, s + 4, rv, nv, codes, stream);
}

/* GEMM g of the recipe: C[Ma,Nb] (+)= A'[Ma,R] B'[Nb,R]^T, A' = A (stored [Ma,R]) or, a_t, A^T
 * (stored [R,Ma]); B' likewise. a_mode: A_MAKE, or A_READY: operand a is already in the workspace as the
 * previous call made it from the same tensor stored the same way (BF16 in h[0], or FP8 codes in q8[0] with their
 * scale in sc[0..7], and where that call was told A_MAKE_T, in t[0] transposed; the caller checks that the two
 * GEMMs take the same operand), or A_MAKE_T: as A_MAKE, and an FP8 operand a stored as the GEMM takes it is cast
 * in both layouts at once (mxg_fp8_quantize_t's codes and codes_t: Dgrad's dY for the Wgrad after it, whose
 * operand a is dY^T; then no byte transpose there). */
enum { A_MAKE = 0, A_READY = 1, A_MAKE_T = 2 };
int recipe_gemm_core(const mxg_linear_ctx* c, mx_gemm_id g, const float* A, int a_t, const float* B, int b_t, float* C,
                     int Ma, int Nb, int R, int accumulate, int a_mode, void* stream) {
    const mx_gemm_recipe* q = &c->recipe->g[g];
    int rc = check_dims(g, c->recipe, Ma, Nb, R);
    if (rc) return rc;
    const int a_ready = a_mode == A_READY;
    const mx_format_info* f = mx_format_get(q->fmt); /* the dispatch goes by the format's row */
    cudaStream_t st = MXG_STREAM(stream);
    /* a given dY operand (mxg_dyq): dY itself was never written, so only the fast MXFP4 path may run this
     * GEMM (below, where the operand's spec is checked); anything else fails rather than read dY */
    if (c->dyq && g != MX_FPROP && (!mx_gemm_gpu_mxfp4(c->recipe, g) || c->exact || R % 128 || c->tele || c->gout))
        return mx_fail(MX_EINVAL, "linear %s: a given dY operand (mxg_dyq) needs the fast MXFP4 path without telemetry",
                       mx_gemm_name(g));
    /* telemetry of operand o (NULL: off); FP32 GEMMs record nothing, as linear.c (no rotation there) */
    mxg_opstats* tele[2] = {c->tele ? c->tele + 2 * (int)g : NULL, c->tele ? c->tele + 2 * (int)g + 1 : NULL};
    /* an operand may be absent (NULL) only where its BF16 copy serves, without telemetry: a BF16 GEMM reads it
     * as it is, an FP8 or MXFP4 one (the GPU model's act16) quantizes it (src16: the tensor the quantizers read,
     * FP32 where there is one, else the BF16 one) */
    const uint16_t* given[2] = {g == MX_FPROP ? c->x16 : c->dy16, g == MX_WGRAD ? c->x16 : c->w16}; /* BF16 copies */
    const int takes16 = mx_gemm_takes_bf16(c->recipe, g);
    for (int o = 0; o < 2; o++)
        if (!(o ? B : A) && !(takes16 && given[o] && !tele[o]))
            return mx_fail(MX_EINVAL, "linear %s: operand %c is missing", mx_gemm_name(g), o ? 'b' : 'a');
    const void* src16[2] = {A ? (const void*)A : (const void*)given[0], B ? (const void*)B : (const void*)given[1]};
    const mxg_dtype sdt[2] = {A ? MXG_F32 : MXG_BF16, B ? MXG_F32 : MXG_BF16};
    uint16_t* out16 = g == MX_WGRAD ? NULL : c->out16;
    const float* res = g == MX_FPROP ? c->res : NULL;
    if (out16 && (!takes16 || accumulate || res))
        return mx_fail(MX_EINVAL, "linear %s: a BF16 output needs BF16 operands (or FP8 / MXFP4 ones made from "
                                  "them), no accumulation and no residual", mx_gemm_name(g));
    if (out16 && mx_gemm_gpu_mxfp4(c->recipe, g) && !c->exact && (c->outer_scales & MXG_OUTER_MXFP4))
        return mx_fail(MX_EINVAL, "linear %s: a BF16 output with MXFP4 on OUTER scales (the fix-up adds into the FP32 "
                                  "product)", mx_gemm_name(g));
    void* cout = out16 ? (void*)out16 : (void*)C; /* the product, in BF16 at out16 or in FP32 */
    const mxg_dtype cdt = out16 ? MXG_BF16 : MXG_F32;
    if (res && (accumulate || res == C))
        return mx_fail(MX_EINVAL, "linear %s: a residual input needs an output of its own", mx_gemm_name(g));
    if (f->elem == MX_ELEM_FP32) { /* C[Ma,Nb] = A'[Ma,R] B'[Nb,R]^T on the tensors as stored */
        PROF_B(PROF_GEMM, st);
        if (res) { /* C = res, then C += the product: the epilogue's single rounding of res + product */
            CU_TRY(cudaMemcpyAsync(C, res, (size_t)Ma * Nb * 4, cudaMemcpyDeviceToDevice, st));
            accumulate = 1;
        }
        rc = mxg_sgemm(a_t, !b_t, Ma, Nb, R, A, a_t ? Ma : R, B, b_t ? Nb : R, C, Nb, accumulate, stream);
        PROF_E(PROF_GEMM, st);
        return rc;
    }
    mxg_linws* w = c->ws;
    const int a8t = a_ready && w->a8t; /* the transposed codes the previous call made, for this call alone */
    w->a8t = 0;
    if (w->bf16_only && f->scale != MX_SCALE_NONE)
        return mx_fail(MX_EINVAL, "linear %s: %s operands need a full linear workspace (this one was made for BF16 "
                                  "GEMMs only)", mx_gemm_name(g), mx_format_name(q->fmt));
    if ((size_t)Ma * R > w->cap || (size_t)Nb * R > w->cap)
        return mx_fail(MX_EINVAL, "linear %s: operands %dx%d / %dx%d exceed the workspace (%zu elements)",
                       mx_gemm_name(g), Ma, R, Nb, R, w->cap);
    PROF_B(PROF_QUANT, st);
    /* x_same (mxg_linear_ctx): the FP8 and MXFP4 branches keep or drop what slot 0 holds themselves; the
     * reference-form path (NVFP4, MXFP8, dither: block_gemm) uses slot 0's buffers */
    const int ref_form = mx_gemm_gpu_reference_form(c->recipe, g);
    if ((f->scale != MX_SCALE_E8M0 && f->scale != MX_SCALE_TENSOR) || ref_form) w->xk[0].valid = 0;
    const float* op[2] = {A, B}; /* as stored: [rows, R], or [R, rows] where tr */
    const int rows[2] = {Ma, Nb}, tr[2] = {a_t, b_t};
    if (ref_form) return block_gemm(c, g, f, op, rows, tr, R, C, Ma, Nb, accumulate, res, tele, stream);
    switch (f->scale) {
    case MX_SCALE_NONE: /* BF16 elements, converted as stored; the GEMM reads a transposed one as such */
    {
        const uint16_t* h[2] = {w->h[0], w->h[1]};
        for (int o = 0; o < 2 && !rc; o++) {
            if (given[o]) h[o] = given[o]; /* X or dY, rounded by the caller */
            else if (!(o == 0 && a_ready)) rc = mxg_to_bf16(op[o], (size_t)rows[o] * R, w->h[o], stream);
            if (!rc && tele[o]) rc = opstats(op[o], (size_t)rows[o] * R, 0, h[o], NULL, NULL, tele[o], st);
        }
        PROF_E(PROF_QUANT, st);
        if (!rc)
            rc = gemm_timed(MXG_SCALE_NONE, h[0], MXG_BF16, tr[0], NULL, h[1], MXG_BF16, tr[1], NULL, cout, cdt, Ma, Nb,
                            R, accumulate, res, stream);
        return rc;
    }
    case MX_SCALE_TENSOR: { /* FP8, per-tensor scale: codes cast as stored, transposed as bytes */
        mxg_dtype kt[2];
        const uint8_t* tn[2];
        const float* inv[2];
        float* fsv[2] = {w->fs[0], w->fs[1]};
        /* the GEMM's scale vectors (below: OUTER, or VEC128 where R % 128 == 0), written by the quantizer's own
         * cast where it makes the codes (bc[o]); a kept operand's were written when it was made (the same
         * tensor and shape); what is left (Wgrad's a_ready codes) is broadcast after the loop */
        const int outer8 = (c->outer_scales & MXG_OUTER_FP8) != 0, vecs = outer8 || R % 128 == 0;
        size_t nv[2];
        int bc[2] = {0, 0};
        for (int o = 0; o < 2 && !rc; o++) {
            nv[o] = outer8 ? (size_t)rows[o] : (size_t)(R / 128) * rows[o];
            mx_fp8_kind k = mx_operand_fp8_kind(g, o);
            kt[o] = k == MX_FP8_E5M2 ? MXG_E5M2 : MXG_E4M3;
            const mxg_wq* wq = o == 1 && k == MX_FP8_E4M3 ? wq_take(c, g, MX_FMT_FP8, B, b_t, Nb, R, NULL, 0, tele[1] != NULL)
                                                          : NULL;
            if (wq) { /* W's codes made after the update (mxg_linear_weight_operands): the same bytes and scale */
                tn[1] = wq->q8[g == MX_DGRAD];
                inv[1] = wq->sc + 4;
                fsv[1] = wq->fs[0];
                bc[1] = 1;
                continue;
            }
            if (g == MX_WGRAD && o == 1 && !tele[1] && x8t_on(c) && *c->x8t_made) {
                /* X^T's codes made by the Fprop's cast (x8t), its scale in x8s: the scale vector broadcast below */
                tn[1] = c->x8t;
                inv[1] = c->x8s + 4;
                g_x8t_hits++;
                continue;
            }
            /* x_same: X's codes (Fprop's a in q8[0] with sc[0..], role 0; Wgrad's b transposed in q8x with
             * scx, role 1) kept or reused: a per-tensor cast of X is the same bytes for every linear */
            const int role = xrole(g, o), keep = xkeep(w, c, g, o, tele[o] != NULL, 1);
            /* amax, scale, _, _, inv_scale: Fprop's X's in the caller's x8s where given (Wgrad takes its amax) */
            float* s = (keep && role == 1) ? w->scx : (role == 0 && c->x8s) ? c->x8s : w->sc + 8 * o;
            inv[o] = s + 4;
            if (keep && role == 1) fsv[1] = w->fsx;
            mxg_qspec key; /* no spec beyond the format: X's kind (E4M3) follows from its role */
            memset(&key, 0, sizeof key);
            if (keep && c->x_same == 2 && xkept(w, role, MX_FMT_FP8, 0, src16[o], rows[o], R, &key)) {
                tn[o] = role == 1 ? w->q8x : w->q8[0]; /* the same bytes are there, and its scale vector */
                bc[o] = 1;
                continue;
            }
            const size_t n = (size_t)rows[o] * R;
            float* rv = vecs ? fsv[o] : NULL;
            uint8_t* d = (keep && role == 1) ? w->q8x : (uint8_t*)w->t[o]; /* where a transposed operand goes */
            if (tr[o] && !(o == 0 && a_ready) && !tele[o]) {
                /* stored [R, rows], the GEMM's [rows, R]: cast and transpose in one pass (the same bytes); Wgrad's
                 * X^T from the amax its FP8 Fprop left in x8s (x8s_amax), without computing it again */
                const int known = role == 1 && x8s_amax(c);
                g_amax_hits += known;
                rc = fp8_cast(src16[o], sdt[o], R, rows[o], k, known ? c->x8s : NULL, NULL, s, rv, nv[o], NULL, d,
                              stream);
                tn[o] = d;
                bc[o] = 1;
            } else {
                if (!(o == 0 && a_ready)) {
                    const float* known = NULL; /* operand a's amax made by its producer: the cast alone */
                    if (o == 0 && !tele[0]) known = g == MX_FPROP ? c->x_amax : g == MX_DGRAD ? c->dy_amax : NULL;
                    g_amax_hits += known != NULL;
                    /* A_MAKE_T: the next GEMM's a^T as well, in t[0] ([R, rows]), from the same read; Fprop's
                     * X^T for the Wgrad of the backward in x8t (X^T [R, rows]: Wgrad's operand b) */
                    const int make_t = o == 0 && a_mode == A_MAKE_T && !tr[0] && !tele[0];
                    const int make_x8t =
                        !make_t && o == 0 && g == MX_FPROP && !tr[0] && !tele[0] && x8t_on(c) && s == c->x8s;
                    uint8_t* ct = make_t ? (uint8_t*)w->t[0] : make_x8t ? c->x8t : NULL;
                    rc = fp8_cast(src16[o], sdt[o], rows[o], R, k, known, s, s, rv, nv[o], w->q8[o], ct, stream);
                    w->a8t = !rc && make_t;
                    if (!rc && make_x8t) *c->x8t_made = 1;
                    bc[o] = 1;
                }
                if (!rc && tele[o])
                    rc = opstats(op[o], n, k == MX_FP8_E5M2 ? 2 : 1, NULL, w->q8[o], s + 4, tele[o], st);
                tn[o] = w->q8[o];
                if (!rc && tr[o] && o == 0 && a8t) tn[0] = (const uint8_t*)w->t[0]; /* made transposed by the call before */
                else if (!rc && tr[o]) { /* [R, rows] -> [rows, R] */
                    rc = mxg_fp8_transpose(w->q8[o], R, rows[o], d, st);
                    tn[o] = d;
                }
            }
            if (!rc && keep) xrecord(w, role, MX_FMT_FP8, 0, src16[o], rows[o], R, &key);
        }
        if (rc) return rc;
        if (vecs) {
            /* The per-tensor multipliers given as VEC128 scale tensors (all equal), or with outer_scales as one
             * scale per row (OUTER_VEC_32F): cuBLASLt's VEC128 and OUTER kernels promote the FP8 partial sums to
             * FP32 as often (measured <= 6e-5 of sum|ab|), its per-tensor ones less often (up to 4.2e-4:
             * tests/gpu/test_gpu.cu), which is enough to make a trajectory drift away from the CPU's FP32
             * accumulation. Same products, same scales. */
            for (int o = 0; o < 2; o++) {
                if (bc[o]) continue;
                const size_t n = nv[o];
                k_broadcast<<<(unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024), 256, 0, st>>>(
                    fsv[o], n, inv[o]);
                CU_LAUNCHED();
            }
            PROF_E(PROF_QUANT, st);
            return gemm_timed(outer8 ? MXG_SCALE_OUTER : MXG_SCALE_VEC128, tn[0], kt[0], 0, fsv[0], tn[1], kt[1], 0,
                              fsv[1], cout, cdt, Ma, Nb, R, accumulate, res, stream);
        }
        PROF_E(PROF_QUANT, st);
        return gemm_timed(MXG_SCALE_TENSOR, tn[0], kt[0], 0, inv[0], tn[1], kt[1], 0, inv[1], cout, cdt, Ma, Nb, R,
                          accumulate, res, stream);
    }
    case MX_SCALE_E8M0: { /* MXFP4 blocks (MXFP8's, and MXFP4's under dither: block_gemm, above) */
        const int fast = !c->exact && R % 128 == 0;
        /* MXG_OUTER_MXFP4_FPROP: Fprop's two row-direction operands folded OUTER by the quantizer in one pass
         * (mxg_quantize: e_ref the row's largest block exponent, one float scale per row), the GEMM on OUTER
         * scales; a block outside that window rounds and is counted, as under VEC128 (no fix-up) */
        const int outer1 = mxfp4_outer1(c, g, fast, a_t, b_t, R);
        uint8_t* e4[2] = {w->q8[0], w->q8[1]}; /* the fast path's operands (x_same: Wgrad's b in q8x) */
        float* fsc[2] = {w->fs[0], w->fs[1]};
        for (int o = 0; o < 2 && !rc; o++) {
            mxg_qspec s;
            const int col = mxfp4_spec(c, g, o, tr[o], &s); /* a column-direction output */
            const void* x = src16[o]; /* FP32, or (act16) BF16: xdt */
            mxg_dtype xdt = sdt[o];
            int xr = rows[o], xc = R; /* the tensor quantized, [xr, xc] */
            if (o == 0 && c->dyq && (g == MX_DGRAD || g == MX_WGRAD)) {
                /* dY's operand made already where dY was produced (mxg_dyq; the fast path without telemetry,
                 * checked above), with this very spec */
                const int k = g == MX_WGRAD;
                if (memcmp(&c->dyq->spec[k], &s, sizeof s))
                    return mx_fail(MX_EINVAL, "linear %s: the given dY operand (mxg_dyq) was made with another spec",
                                   mx_gemm_name(g));
                e4[0] = (uint8_t*)c->dyq->e4m3[k];
                fsc[0] = (float*)c->dyq->fscale[k];
                w->xk[0].valid = 0; /* as xkeep leaves it for an operand a that is not X's */
                continue;
            }
            const mxg_wq* wq = o == 1 && fast ? wq_take(c, g, MX_FMT_MXFP4, B, b_t, Nb, R, &s, outer1, tele[1] != NULL) : NULL;
            if (wq) { /* W's operand made after the update (mxg_linear_weight_operands), with this very spec */
                e4[1] = wq->q8[g == MX_DGRAD];
                fsc[1] = wq->fs[g == MX_DGRAD];
                continue;
            }
            if (col) {
                /* x^T's 1x32 blocks are x's 32x1 ones: the column-direction pass on x as stored, the SR
                 * index taken in x^T's coordinates; the outputs land in x^T's (the TN) layout */
                xr = R;
                xc = rows[o];
            } else if (tr[o]) { /* 32x32 weight tiles: transposed in FP32 first */
                if (!op[o])
                    return mx_fail(MX_EINVAL, "linear %s: 32x32 tiles of a transposed BF16 operand", mx_gemm_name(g));
                rc = transpose<float>(w->t[o], op[o], R, rows[o], st); /* stored [R, rows] -> [rows, R] */
                if (rc) return rc;
                x = w->t[o];
                xdt = MXG_F32;
            }
            /* x_same: X's operand (Fprop's a, role 0; Wgrad's b, role 1) kept or reused where it is the
             * same bytes for every linear reading X */
            const int role = xrole(g, o);
            const int keep = xkeep(w, c, g, o, tele[o] != NULL,
                                   fast && s.round == MX_ROUND_RNE && !s.had_random && s.layout != MX_LAYOUT_32x32);
            if (keep && role == 1) { e4[1] = w->q8x; fsc[1] = w->fsx; }
            if (keep && c->x_same == 2 && xkept(w, role, MX_FMT_MXFP4, outer1, x, xr, xc, &s)) continue; /* the same bytes */
            mxg_qout qo;
            memset(&qo, 0, sizeof qo);
            qo.counters = w->counters;
            qo.stats = tele[o];
            if (fast) {
                qo.e4m3 = e4[o];
                qo.fscale = fsc[o];
                qo.fold = outer1 ? MXG_FOLD_OUTER : MXG_FOLD_VEC128;
            } else {
                qo.codes = w->codes[o];
                qo.scales = w->scales[o];
                w->last_rows[o] = rows[o];
                w->last_layout[o] = col ? MX_LAYOUT_1x32 : s.layout; /* x's 32x1 codes: x^T's 1x32 ones, byte for byte */
            }
            rc = mxg_quantize(x, xdt, xr, xc, col ? NULL : &s, col ? NULL : &qo, col ? &s : NULL, col ? &qo : NULL,
                              stream);
            if (!rc && fast && oow_probe_on())
                rc = xdt == MXG_F32 ? oow_probe_run(w, g, o, (const float*)x, xr, xc, col, &s, rows[o], R, st)
                                    : mx_fail(MX_EINVAL, "linear: the OUTER probe needs FP32 operands");
            if (!rc && keep) xrecord(w, role, MX_FMT_MXFP4, outer1, x, xr, xc, &s);
        }
        if (rc) return rc;
        if (fast) {
            /* outer_scales: one scale per stored row, the VEC128 operands re-expressed, the GEMM on them, then
             * (MXG_OUTER_MXFP4) the exact fix-up of the blocks that rounded (mxg_fold_outer_fixup: C = A B^T up to
             * FP32 rounding, as on the VEC128 path), or (MXG_OUTER_MXFP4_ROUND) none: a block more than 14 binades
             * below its row's largest rounds in E4M3 and is counted, as in Fprop's one-pass fold */
            const int fix = (c->outer_scales & MXG_OUTER_MXFP4) != 0;
            /* round: no fix-up, no flags; where the GEMM is large enough (outer_min) */
            const int outer = fix || ((c->outer_scales & MXG_OUTER_MXFP4_ROUND) &&
                                      (double)Ma * Nb >= (double)c->outer_min * ((double)Ma + Nb));
            if (outer1) {
                PROF_E(PROF_QUANT, st);
                return gemm_timed(MXG_SCALE_OUTER, e4[0], MXG_E4M3, 0, fsc[0], e4[1], MXG_E4M3, 0, fsc[1], cout, cdt, Ma,
                                  Nb, R, accumulate, res, stream);
            }
            for (int o = 0; o < 2 && outer && !rc; o++) {
                if ((!w->qo8[o] && (cudaMalloc((void**)&w->qo8[o], w->cap) != cudaSuccess ||
                                    cudaMalloc((void**)&w->fo[o], (w->cap / 128 + 4) * sizeof(float)) != cudaSuccess)) ||
                    (fix && !w->fl[o] && cudaMalloc((void**)&w->fl[o], w->cap / 32) != cudaSuccess)) {
                    cudaGetLastError();
                    rc = mx_fail(MX_ENOMEM, "GPU out of memory: the OUTER-folded operands (MXLM_GPU_OUTER=%s)",
                                 fix ? "1" : "round");
                }
                if (!rc)
                    rc = mxg_fold_outer_from_vec128(e4[o], fsc[o], rows[o], R, w->qo8[o], w->fo[o], fix ? w->fl[o] : NULL,
                                                    w->counters, st);
            }
            PROF_E(PROF_QUANT, st);
            if (!rc)
                rc = gemm_timed(outer ? MXG_SCALE_OUTER : MXG_SCALE_VEC128, outer ? w->qo8[0] : e4[0], MXG_E4M3, 0,
                                outer ? w->fo[0] : fsc[0], outer ? w->qo8[1] : e4[1], MXG_E4M3, 0, outer ? w->fo[1] : fsc[1],
                                cout, cdt, Ma, Nb, R, accumulate, res, stream);
            if (!rc && fix) {
                PROF_B(PROF_QUANT, st);
                rc = mxg_fold_outer_fixup(C, Ma, Nb, R, e4[0], fsc[0], w->qo8[0], w->fo[0], w->fl[0], e4[1], fsc[1],
                                          w->qo8[1], w->fo[1], w->fl[1], stream);
                PROF_E(PROF_QUANT, st);
            }
            return rc;
        }
        w->last_R = R;
        for (int o = 0; o < 2 && !rc; o++) {
            mxg_fp4 t = {rows[o], R, (mx_layout)w->last_layout[o], w->codes[o], w->scales[o]};
            rc = mxg_dequant_bf16(&t, 1, w->h[o], stream);
        }
        PROF_E(PROF_QUANT, st);
        if (!rc)
            rc = gemm_timed(MXG_SCALE_NONE, w->h[0], MXG_BF16, 0, NULL, w->h[1], MXG_BF16, 0, NULL, cout, cdt, Ma, Nb,
                            R, accumulate, res, stream);
        return rc;
    }
    default: return mx_fail(MX_EINVAL, "linear %s: unknown format %d", mx_gemm_name(g), (int)q->fmt);
    }
}

/* mxg_linear_ctx.gout for GEMM g (after it ran): the product again into gq, quantized as before (the same
 * bytes: the same seeds and streams) with nothing else recorded (no operand telemetry, no counters, no x_same,
 * no BF16 output or residual), its FP32 reference from the operands as stored into gr, then their stats. */
int product_stats(const mxg_linear_ctx* c, mx_gemm_id g, const float* A, int a_t, const float* B, int b_t, int Ma,
                  int Nb, int R, void* stream) {
    mxg_linws* w = c->ws;
    const size_t n = (size_t)Ma * Nb;
    if (n > w->gcap) {
        cudaFree(w->gq); cudaFree(w->gr);
        w->gq = w->gr = NULL;
        w->gcap = 0;
        if (cudaMalloc((void**)&w->gq, n * 4) != cudaSuccess || cudaMalloc((void**)&w->gr, n * 4) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(w->gq); cudaFree(w->gr);
            w->gq = w->gr = NULL;
            return mx_fail(MX_ENOMEM, "GPU out of memory: telemetry of a product (2 x %.1f MiB)", n * 4 / 1048576.0);
        }
        w->gcap = n;
    }
    if (!w->gcount && cudaMalloc((void**)&w->gcount, 2 * sizeof(unsigned long long)) != cudaSuccess) {
        cudaGetLastError();
        w->gcount = NULL;
        return mx_fail(MX_ENOMEM, "GPU out of memory: telemetry counters");
    }
    mxg_linear_ctx c2 = *c;
    c2.tele = NULL;
    c2.gout = NULL;
    c2.out16 = NULL;
    c2.res = NULL;
    c2.x_same = 0;
    unsigned long long* counters = w->counters;
    w->counters = w->gcount;
    int rc = recipe_gemm_core(&c2, g, A, a_t, B, b_t, w->gq, Ma, Nb, R, 0, 0, stream);
    w->counters = counters;
    if (!rc) rc = mxg_sgemm(a_t, !b_t, Ma, Nb, R, A, a_t ? Ma : R, B, b_t ? Nb : R, w->gr, Nb, 0, stream);
    if (!rc) rc = opstats(w->gr, n, 3, (const uint16_t*)w->gq, NULL, NULL, c->gout + (int)g, MXG_STREAM(stream));
    return rc;
}

/* GEMM g as recipe_gemm_core makes it, then (mxg_linear_ctx.gout) the telemetry of its product. */
int recipe_gemm(const mxg_linear_ctx* c, mx_gemm_id g, const float* A, int a_t, const float* B, int b_t, float* C,
                int Ma, int Nb, int R, int accumulate, int a_mode, void* stream) {
    g_mxg_prof_gid = (int)g; /* MXLM_GPU_PROFILE's split by GEMM */
    int rc = recipe_gemm_core(c, g, A, a_t, B, b_t, C, Ma, Nb, R, accumulate, a_mode, stream);
    g_mxg_prof_gid = -1;
    if (rc || !c->gout || mx_format_get(c->recipe->g[g].fmt)->elem == MX_ELEM_FP32) return rc;
    if (!A || !B) return mx_fail(MX_EINVAL, "linear %s: the telemetry of a product needs both operands in FP32",
                                 mx_gemm_name(g));
    return product_stats(c, g, A, a_t, B, b_t, Ma, Nb, R, stream);
}

/* Dgrad's operand a (dY as stored) serves Wgrad's (dY^T) unchanged: the same BF16 values, or the same
 * FP8 codes and scale (E5M2 under dY's per-tensor amax in both), transposed as bytes. */
int dy_shared(const mx_recipe* r) {
    const mx_gemm_recipe *d = &r->g[MX_DGRAD], *w = &r->g[MX_WGRAD];
    const mx_format_info* f = mx_format_get(d->fmt);
    return f && d->fmt == w->fmt && (f->scale == MX_SCALE_NONE || f->scale == MX_SCALE_TENSOR) && !d->had_n &&
           !w->had_n && f->elem != MX_ELEM_FP32;
}

}  // namespace

extern "C" int mxg_linear_dy_specs(const mxg_linear_ctx* c, int M, int N, mxg_qspec spec[2]) {
    if (c->exact || c->tele || c->gout || M <= 0 || N <= 0 || M % 128 || N % 128) return 0;
    for (int k = 0; k < 2; k++) { /* Dgrad's a: dY as stored; Wgrad's a: dY^T, the column-direction pass */
        const mx_gemm_id g = k ? MX_WGRAD : MX_DGRAD;
        if (!mx_gemm_gpu_mxfp4(c->recipe, g)) return 0;
        if (mxfp4_spec(c, g, 0, k, &spec[k]) != k || spec[k].layout != (k ? MX_LAYOUT_32x1 : MX_LAYOUT_1x32) ||
            spec[k].round != MX_ROUND_RNE || spec[k].had_n > 32)
            return 0;
    }
    return 1;
}

extern "C" long long mxg_linear_wq_hits(void) { return g_wq_hits; }
extern "C" long long mxg_linear_x8t_hits(void) { return g_x8t_hits; }
extern "C" long long mxg_linear_amax_hits(void) { return g_amax_hits; }

extern "C" size_t mxg_linear_weight_fs(int n, int k) {
    const size_t v = (size_t)n * k / 128, r = (size_t)(n > k ? n : k);
    return (v > r ? v : r) + 4;
}

extern "C" int mxg_linear_weight_operands(const mxg_linear_ctx* c, const float* W, int N, int K, const float* w_amax,
                                          mxg_wq* q, void* stream) {
    q->valid[0] = q->valid[1] = 0;
    q->w = W;
    q->n = N;
    q->k = K;
    q->fold[0] = q->fold[1] = 0;
    memset(q->spec, 0, sizeof q->spec);
    if (!W || c->tele || c->gout || oow_probe_on() || N <= 0 || K <= 0) return MX_OK;
    const mx_recipe* r = c->recipe;
    int take[2] = {0, 0};
    const mx_gemm_id gs[2] = {MX_FPROP, MX_DGRAD};
    /* fp8: both GEMMs FP8 per-tensor with W in E4M3 and the OUTER scale vector (the model's default) */
    for (int k = 0; k < 2; k++) {
        const mx_format_info* f = mx_format_get(r->g[gs[k]].fmt);
        take[k] = f && f->scale == MX_SCALE_TENSOR && f->elem == MX_ELEM_FP8 && !mx_gemm_gpu_refusal(r, gs[k]) &&
                  mx_operand_fp8_kind(gs[k], 1) == MX_FP8_E4M3 && (c->outer_scales & MXG_OUTER_FP8);
    }
    if (take[0] || take[1]) {
        q->fmt = MX_FMT_FP8;
        float* s = q->sc;
        const size_t nr = (size_t)(N > K ? N : K); /* one vector for both GEMMs' rows (N, K): all 1/scale */
        /* Dgrad's W^T [K, N] in the same pass as Fprop's W (no byte transpose); the amax the update made where
         * given (s[0] then a copy of it) */
        g_amax_hits += w_amax != NULL;
        int rc = fp8_cast(W, MXG_F32, N, K, MX_FP8_E4M3, w_amax, w_amax ? s : NULL, s, q->fs[0], nr,
                          take[0] ? q->q8[0] : NULL, take[1] ? q->q8[1] : NULL, stream);
        if (rc) return rc;
        q->valid[0] = take[0]; /* (both GEMMs read fs[0]: 1/scale for max(N, K) rows) */
        q->valid[1] = take[1];
        return MX_OK;
    }
    /* MXFP4 on the fast path: Fprop's operand b the row-direction output of W (VEC128, or OUTER under
     * MXG_OUTER_MXFP4_FPROP), Dgrad's the column-direction one (W^T's 1x32 blocks; not 32x32 tiles, which the
     * GEMM transposes in FP32 first) */
    mxg_qout qo[2];
    memset(qo, 0, sizeof qo);
    for (int k = 0; k < 2; k++) {
        const int R = k ? N : K, fast = !c->exact && R % 128 == 0;
        if (!mx_gemm_gpu_mxfp4(r, gs[k]) || !fast || mx_gemm_gpu_refusal(r, gs[k])) continue;
        if (mx_gemm_check_dims(gs[k], &r->g[gs[k]], k ? K : N, k ? K : N, R)) continue;
        if (mxfp4_spec(c, gs[k], 1, k, &q->spec[k]) != k) continue; /* Dgrad: the column direction, or none */
        q->fold[k] = mxfp4_outer1(c, gs[k], fast, 0, k, R);
        qo[k].e4m3 = q->q8[k];
        qo[k].fscale = q->fs[k];
        qo[k].fold = q->fold[k] ? MXG_FOLD_OUTER : MXG_FOLD_VEC128;
        qo[k].counters = c->ws ? c->ws->counters : NULL;
        take[k] = 1;
    }
    if (!take[0] && !take[1]) return MX_OK;
    q->fmt = MX_FMT_MXFP4;
    int rc;
    if (take[0] && take[1] && !q->fold[0]) /* both from one read of W */
        rc = mxg_quantize(W, MXG_F32, N, K, &q->spec[0], &qo[0], &q->spec[1], &qo[1], stream);
    else {
        rc = take[0] ? mxg_quantize(W, MXG_F32, N, K, &q->spec[0], &qo[0], NULL, NULL, stream) : MX_OK;
        if (!rc && take[1]) rc = mxg_quantize(W, MXG_F32, N, K, NULL, NULL, &q->spec[1], &qo[1], stream);
    }
    if (rc) return rc;
    q->valid[0] = take[0];
    q->valid[1] = take[1];
    return MX_OK;
}

extern "C" int mxg_gemm_recipe_tn(const mxg_linear_ctx* c, mx_gemm_id g, const float* A, int a_t, const float* B,
                                  int b_t, float* C, int Ma, int Nb, int R, int accumulate, void* stream) {
    return recipe_gemm(c, g, A, a_t, B, b_t, C, Ma, Nb, R, accumulate, A_MAKE, stream);
}

extern "C" int mxg_linear_forward(const mxg_linear_ctx* c, const float* X, const float* W, float* Y, int M, int K,
                                  int N, void* stream) {
    return mxg_gemm_recipe_tn(c, MX_FPROP, X, 0, W, 0, Y, M, N, K, 0, stream); /* Y[M,N] = X[M,K] W[N,K]^T */
}

extern "C" int mxg_linear_backward(const mxg_linear_ctx* c, const float* X, const float* W, const float* dY, float* dX,
                                   float* dW, int M, int K, int N, void* stream) {
    return mxg_linear_backward_acc(c, X, W, dY, dX, dW, M, K, N, 1, stream);
}

extern "C" int mxg_linear_backward_acc(const mxg_linear_ctx* c, const float* X, const float* W, const float* dY,
                                       float* dX, float* dW, int M, int K, int N, int dx_acc, void* stream) {
    int rc = MX_OK;
    const int dgrad = dX || c->out16; /* dX in FP32, or in BF16 at out16 */
    /* dX[M,K] (+)= dY[M,N] (W^T)[K,N]^T */
    const int shared = dgrad && dW && dy_shared(c->recipe); /* Wgrad's dY^T from Dgrad's dY */
    if (dgrad) rc = recipe_gemm(c, MX_DGRAD, dY, 0, W, 1, dX, M, K, N, dx_acc, shared ? A_MAKE_T : A_MAKE, stream);
    /* dW[N,K] += (dY^T)[N,M] (X^T)[K,M]^T */
    if (!rc && dW)
        rc = recipe_gemm(c, MX_WGRAD, dY, 1, X, 1, dW, N, K, M, !c->dw_first, shared ? A_READY : A_MAKE, stream);
    return rc;
}

extern "C" int mxg_linear_oow_probe(void) { return oow_probe_on(); }

extern "C" int mxg_linear_oow_report(char* buf, size_t n) {
    if (!oow_probe_on() || !g_oow_dev || n < 2) return 0;
    unsigned long long c[12];
    if (cudaMemcpy(c, g_oow_dev, sizeof c, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
    static const char* const gname[3] = {"fprop", "dgrad", "wgrad"};
    size_t k = (size_t)snprintf(buf, n, "OUTER fold probe (MXLM_GPU_OOW_PROBE): blocks outside the window / blocks:");
    for (int g = 0; g < 3 && k < n; g++)
        for (int o = 0; o < 2 && k < n; o++) {
            const unsigned long long b = g_oow_blocks[g][o], x = c[(g * 2 + o) * 2 + 1];
            k += (size_t)snprintf(buf + k, n - k, "%s %s %c %llu / %llu (%.3g%%)", g || o ? ";" : "", gname[g], o ? 'b' : 'a',
                                  x, b, b ? 100.0 * (double)x / (double)b : 0.0);
        }
    return 1;
}
