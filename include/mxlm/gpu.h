/*
 * gpu.h: the GPU path (CUDA build only: compiled with -DMXLM_CUDA).
 *
 * Every pointer named "device" lives in GPU memory (cudaMalloc). Functions
 * return 0 (MX_OK) or a negative mx_err code with a message readable through
 * mx_last_error(); they never exit or print. `stream` is a cudaStream_t
 * (NULL: the default stream). Work is asynchronous unless said otherwise.
 *
 * The quantizers reproduce the CPU library (mx.h) bit for bit: same codes,
 * same E8M0 scales, same SR bits (mx_rand_u32 with index r*cols + c of the
 * input), same Hadamard butterfly order and the single final normalization
 * multiply. The GPU test (tests/gpu/) checks it.
 */
#ifndef MXLM_GPU_H
#define MXLM_GPU_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/mx.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Describe the GPU found (name, memory, compute capability, CUDA and cuBLASLt
 * versions) into buf; return 0 if a usable GPU is present, -1 otherwise. */
int mxg_device_info(char* buf, size_t n);

typedef enum { MXG_F32 = 0, MXG_BF16 = 1, MXG_E4M3 = 2, MXG_E5M2 = 3 } mxg_dtype;

/* How one MXFP4 output of mxg_quantize is made. The rotation runs along the
 * block axis: axis 1 (along a row) for 1x32, axis 0 (along a column) for
 * 32x1; for 32x32 `had_axis` says which (1 or 0). */
typedef struct {
    mx_layout layout;
    mx_scale_rule scale;
    mx_round round;
    uint64_t seed;        /* SR: mx_rand_u32(seed, MX_RNG_SR, tensor_id, r*cols + c) */
    uint32_t tensor_id;
    int had_n;            /* 0: no rotation; else 2..256, a power of two dividing the axis */
    int had_axis;         /* 32x32 only: 1 rotate/fold along rows' direction (cols), 0 along columns */
    int had_random;       /* rhN: sign mx_rh_sign(had_seed, rot_id, j) first */
    uint64_t had_seed;
    uint32_t rot_id;
    int sr_tn;            /* column-direction outputs: the SR index of element (r, c) is c*rows + r instead,
                             its index in x^T [cols, rows]: a 32x1 output of x with sr_tn is bit for bit the
                             1x32 output of x^T (what src/nn/linear.c quantizes after transposing) */
} mxg_qspec;

/* E4M3 scale-tensor layouts of the folded form. */
typedef enum { MXG_FOLD_VEC128 = 0, MXG_FOLD_OUTER = 1 } mxg_fold_mode;

/* Where one output goes (device pointers; NULL: that part is not written).
 * "Stored rows" are the rows of the TN operand: rows of x for 1x32 (and for
 * 32x32 folded along axis 1), columns of x for 32x1 (and 32x32 along axis 0);
 * the block axis K is contiguous in each.
 *   codes   packed E2M1 in mx.h's layout (mx_fp4: 1x32 [rows, cols/2], 32x1
 *           [cols, rows/2], 32x32 [rows, cols/2]), rows*cols/2 bytes
 *   scales  E8M0 in mx.h's layout (rows*cols/32 or rows*cols/1024 bytes)
 *   e4m3    the exponent-folded form [stored rows, K]: code q of a block with
 *           exponent e written as E4M3(q * 2^(e - e_ref + 6)), e_ref the largest
 *           block exponent of its 128 values along K (VEC128 only here; see
 *           mxg_fold for OUTER). NaN blocks give E4M3 NaN.
 *   fscale  float 2^(e_ref - 6), VEC128 layout [K/128, stored rows] (outer dim
 *           contiguous), the layout cuBLASLt's VEC128_32F takes
 *   counters  two uint64 added to: [0] clipped blocks (an element beyond +-6
 *           after scaling), [1] blocks outside the fold window (exponent more
 *           than 14 below e_ref and a nonzero code: they round in E4M3) */
/* Telemetry of one quantized operand on the device, the twin of mx_operand_stats
 * (linear.h): over the rotated operand x (what is quantized) and its dequantized
 * value Q(x): sig2 += sum x^2 and err2 += sum (x - Q(x))^2 over the finite x (FP64),
 * nonfinite += the non-finite x; for MXFP4 blocks += scale blocks (one per 32x32
 * tile for 32x32) and clipped += those with an element beyond +-6 after scaling.
 * Added to with atomics (the FP64 sums' order is not fixed). */
typedef struct {
    double sig2, err2;
    unsigned long long blocks, clipped, nonfinite;
} mxg_opstats;

typedef struct {
    uint8_t* codes;
    uint8_t* scales;
    uint8_t* e4m3;
    float* fscale;
    unsigned long long* counters;
    mxg_fold_mode fold;   /* VEC128 (default), or OUTER: fscale [stored rows], e_ref the
                             largest block exponent of the whole row (one pass; only for a
                             lone 1x32 output with rotation <= 32 and cols <= 32768) */
    mxg_opstats* stats;   /* device [1]: telemetry of this output added to it (FP32 input only;
                             NULL: none, and the kernels without telemetry run, unchanged) */
} mxg_qout;

/* Quantize x[rows, cols] (row-major, device, MXG_F32 or MXG_BF16) into one
 * or two outputs from a single read of x: a row-direction output (1x32, or
 * 32x32 with had_axis 1) and/or a column-direction output (32x1, or 32x32
 * with had_axis 0). Either spec may be NULL. When both are given and a
 * rotation is larger than 32, x is read twice (two launches). */
int mxg_quantize(const void* x, mxg_dtype dt, int rows, int cols, const mxg_qspec* s0, const mxg_qout* o0,
                 const mxg_qspec* s1, const mxg_qout* o1, void* stream);
/* Quantize-on-produce for the MLP's backward: dgate and dup, the SwiGLU backward of gate, up and dh (FP32
 * [rows, cols], device, 16-byte aligned; src/nn/swiglu.c's expressions, cuda/nn/swiglu.cuh), each
 * quantized in both directions (s[t][0] / o[t][0] the row-direction output of tensor t, 0 dgate, 1 dup;
 * s[t][1] / o[t][1] its column-direction one) without writing them: every output byte as mxg_quantize
 * makes it from the tensors that mxg_swiglu_backward writes. Only the fast kernel's case:
 * mxg_quantize_swiglu_ok says whether it is (folded E4M3 outputs, RNE, rotation <= 32, no telemetry,
 * rows and cols multiples of 128); else refused. */
int mxg_quantize_swiglu_ok(int rows, int cols, const mxg_qspec* const s[2][2], const mxg_qout* const o[2][2]);
int mxg_quantize_swiglu_bwd(const float* dh, const float* gate, const float* up, int rows, int cols,
                            const mxg_qspec* const s[2][2], const mxg_qout* const o[2][2], void* stream);
/* The same from BF16 gate, up and dh (the GPU model's act16), dgate and dup rounded to BF16 before they are
 * quantized: every byte as mxg_quantize makes it from what mxg_swiglu_backward_bf16 writes. */
int mxg_quantize_swiglu_bwd_bf16(const uint16_t* dh, const uint16_t* gate, const uint16_t* up, int rows, int cols,
                                 const mxg_qspec* const s[2][2], const mxg_qout* const o[2][2], void* stream);

/* An MXFP4 tensor on the device (mx.h layouts). */
typedef struct {
    int rows, cols;
    mx_layout layout;
    uint8_t* codes;   /* device */
    uint8_t* scales;  /* device */
} mxg_fp4;

/* Fold a packed MXFP4 tensor into E4M3 [stored rows, K] + float scales:
 * VEC128 ([K/128, stored rows]) or OUTER (one per stored row: e_ref is the
 * largest block exponent of the whole row). For 32x32 tensors `axis` says the
 * orientation (1: stored rows = rows; 0: = cols); ignored otherwise.
 * counters as in mxg_qout ([1] only). */
int mxg_fold(const mxg_fp4* t, int axis, mxg_fold_mode mode, uint8_t* e4m3, float* fscale,
             unsigned long long* counters, void* stream);

/* A VEC128-folded operand (e4m3 [R, K], fscale [K/128, R], as mxg_quantize writes them) re-expressed under one
 * float scale per stored row (fscale_out [R], MXG_SCALE_OUTER's layout): the bytes of the CPU's
 * mx_fold_outer_from_vec128 (mx.h), out may be e4m3 (in place); counters[1] (NULL: none) += the blocks of 32
 * that rounded (more than 14 binades below the row's largest block), flags [R, K/32] (NULL: none) 1 for each
 * such block, 0 elsewhere. K a multiple of 128, codes 16-byte aligned. */
int mxg_fold_outer_from_vec128(const uint8_t* e4m3, const float* fscale, int R, int K, uint8_t* out, float* fscale_out,
                               uint8_t* flags, unsigned long long* counters, void* stream);
/* The exact fix-up after C = A_o B_o^T (FP32 [M, N], row-major) on two re-expressed operands: the bytes of the
 * CPU's mx_fold_outer_fixup (mx.h), A's flagged rows then B's; rows without a flagged block cost one read of
 * their flags. K a multiple of 128, at most 262144. */
int mxg_fold_outer_fixup(float* C, int M, int N, int K, const uint8_t* a_v, const float* a_fs, const uint8_t* a_o,
                         const float* a_fo, const uint8_t* a_flag, const uint8_t* b_v, const float* b_fs,
                         const uint8_t* b_o, const float* b_fo, const uint8_t* b_flag, void* stream);

/* Dequantize an MXFP4 tensor exactly into BF16 [stored rows, K] (the operand
 * of the exact-emulation GEMM). For 32x32, `axis` as in mxg_fold. */
int mxg_dequant_bf16(const mxg_fp4* t, int axis, uint16_t* out, void* stream);

/* FP8 per-tensor, current scaling: amax of x (device float, |x| max, NaN if
 * any NaN), then scale = fmax/amax as mx_fp8_scale_for_amax (written to
 * *scale, device), inv_scale = 1/scale (device, for the GEMM; may be NULL),
 * codes[i] = encode(x[i] * scale). With `given_scale` (device, non-NULL) that
 * scale is used instead (delayed scaling) and amax is still written.
 * inv_rows (NULL: none): 1/scale written to inv_rows[0 .. n_rows) as well, by the
 * launch that makes the codes (a GEMM's per-row or per-128 scale vector). Two launches
 * (the amax, then the cast that computes the scale and writes the scalars). */
int mxg_fp8_quantize(const void* x, mxg_dtype dt, size_t n, mx_fp8_kind kind, const float* given_scale,
                     float* amax, float* scale, float* inv_scale, float* inv_rows, size_t n_rows, uint8_t* codes,
                     void* stream);
/* The same for x [rows, cols] (row-major) with the codes written transposed, codes_t [cols, rows]: the bytes
 * of mxg_fp8_quantize then a transpose, from one read of x (the cast's pass writes them transposed). codes
 * (NULL: none): mxg_fp8_quantize's codes as well, in the same pass (one operand as stored and transposed). */
int mxg_fp8_quantize_t(const void* x, mxg_dtype dt, int rows, int cols, mx_fp8_kind kind, const float* given_scale,
                       float* amax, float* scale, float* inv_scale, float* inv_rows, size_t n_rows, uint8_t* codes,
                       uint8_t* codes_t, void* stream);
/* mxg_fp8_quantize (current scaling) with x's amax known: `known` (device) as mxg_fp8_quantize writes an amax, or
 * as a kernel that produced x wrote it (the largest |x| bits: mxg_swiglu_forward_bf16_amax). The cast alone, one
 * pass over x: the same codes and scalars (amax, may be NULL, a copy of *known). */
int mxg_fp8_quantize_amax(const void* x, mxg_dtype dt, size_t n, mx_fp8_kind kind, const float* known, float* amax,
                          float* scale, float* inv_scale, float* inv_rows, size_t n_rows, uint8_t* codes, void* stream);
/* mxg_fp8_quantize_t (current scaling) with x's amax known: `known` (device) as mxg_fp8_quantize_amax takes it.
 * The cast alone, one pass over x (no amax pass): the same codes (codes may be NULL), codes_t and scalars (amax,
 * may be NULL, a copy of *known). */
int mxg_fp8_quantize_t_amax(const void* x, mxg_dtype dt, int rows, int cols, mx_fp8_kind kind, const float* known,
                            float* amax, float* scale, float* inv_scale, float* inv_rows, size_t n_rows, uint8_t* codes,
                            uint8_t* codes_t, void* stream);
/* out [cols, rows] = in [rows, cols]^T for bytes (FP8 codes made earlier, as another GEMM wants them). */
int mxg_fp8_transpose(const uint8_t* in, int rows, int cols, uint8_t* out, void* stream);

/* Convert float -> BF16 (RNE, mx_bf16_from_f32) on the device. */
int mxg_to_bf16(const float* x, size_t n, uint16_t* out, void* stream);

/* ---- NVFP4, MXFP8, MXFP4's reference form, a standalone rotation (nvfp4.cu, mxfp8.cu, mxfp4_ref.cu,
 * hadamard.cu) ---- */
/* mx_amax_finite on the device: the largest |x| over the finite elements into *out (device float). */
int mxg_amax_finite(const float* x, size_t n, float* out, void* stream);
/* mx_quantize_nvfp4 + mx_dequantize_nvfp4 of x[rows, cols] (device FP32) as o says (layout 1x16, 16x1,
 * 16x16; RNE or SR): amax_S (device [2]) gets the tensor's finite amax and its scale S; y16 (may be
 * NULL) q x sb in BF16 (exact; the 1/S of the value left to the caller), y (may be NULL) (q x sb) / S
 * in FP32, bit for bit the CPU's. stats (device [2], may be NULL): += blocks, clipped blocks (the
 * fields blocks, clipped of mxg_opstats); clip_total (device, may be NULL): += clipped blocks. */
int mxg_fakequant_nvfp4(const float* x, int rows, int cols, const mx_qopts* o, float* amax_S, uint16_t* y16, float* y,
                        unsigned long long* stats, unsigned long long* clip_total, void* stream);
/* mx_quantize_mxfp8 + mx_dequantize_mxfp8 of x[rows, cols] (layout 1x32 or 32x1, rule floor or ceil,
 * RNE): the decoded values E4M3 x 2^e in BF16 (y16, exact above 2^-126) and/or FP32 (y); stats and
 * clip_total as for NVFP4. */
int mxg_fakequant_mxfp8(const float* x, int rows, int cols, const mx_qopts* o, uint16_t* y16, float* y,
                        unsigned long long* stats, unsigned long long* clip_total, void* stream);
/* mx_quantize_fp4 + mx_dequantize_fp4 in their reference form (mxfp4_ref.cu: every scale rule, dither
 * included; layouts 1x32, 32x1, 32x32; RNE or SR): q x 2^e in BF16 (y16, exact; dither's 4/3 not
 * applied) and/or the decoded values in FP32 (y, the CPU's); stats and clip_total as for NVFP4. */
int mxg_fakequant_fp4_ref(const float* x, int rows, int cols, const mx_qopts* o, uint16_t* y16, float* y,
                          unsigned long long* stats, unsigned long long* clip_total, void* stream);
/* mx_hadamard_rotate(x, rows, cols, axis 1, n, random_sign, seed, rot_id) on the device, in place. */
int mxg_hadamard_rotate(float* x, int rows, int cols, int n, int random_sign, uint64_t seed, uint32_t rot_id,
                        void* stream);

/* ---- GEMM (cuBLASLt), TN: C[M,N] = A[M,K] B[N,K]^T, K contiguous --------- */
typedef enum {
    MXG_SCALE_NONE = 0,    /* BF16 operands */
    MXG_SCALE_TENSOR = 1,  /* FP8, one float per operand (device pointer: the dequant multiplier) */
    MXG_SCALE_VEC128 = 2,  /* FP8, float per 128 along K, [K/128, rows] */
    MXG_SCALE_OUTER = 3    /* FP8, float per row */
} mxg_scale_mode;

/* a_type/b_type: MXG_BF16 (mode NONE) or MXG_E4M3/MXG_E5M2; c_type MXG_F32 or
 * MXG_BF16. FP32 accumulation, FAST_ACCUM off. Scale pointers (device) must be
 * 16-byte aligned. */
int mxg_gemm_tn(mxg_scale_mode mode, const void* A, mxg_dtype a_type, const float* a_scale, const void* B,
                mxg_dtype b_type, const float* b_scale, void* C, mxg_dtype c_type, int M, int N, int K, void* stream);

/* The same with C += A B^T when `accumulate` (beta 1; C read in c_type). */
int mxg_gemm_tn_acc(mxg_scale_mode mode, const void* A, mxg_dtype a_type, const float* a_scale, const void* B,
                    mxg_dtype b_type, const float* b_scale, void* C, mxg_dtype c_type, int M, int N, int K,
                    int accumulate, void* stream);

/* Exact emulation of an MXFP4 GEMM: dequantize both (mxg_dequant_bf16) into
 * the BF16 workspaces wa [M,K], wb [N,K] (device), then a BF16 GEMM with FP32
 * accumulation. A and B have K as their block axis (1x32: rows are M/N;
 * 32x1: cols are M/N; 32x32: `axis` 1). */
int mxg_gemm_mxfp4_exact(const mxg_fp4* A, const mxg_fp4* B, uint16_t* wa, uint16_t* wb, void* C, mxg_dtype c_type,
                         void* stream);

/* Test hook: count the float inputs (all 2^32) on which the quantizers'
 * branch-free E2M1 rounding differs from mx_e2m1_rne (must be 0). Synchronous. */
int mxg_selftest_e2m1(unsigned long long* mismatches);
/* Test hook: mismatches on all 2^32 floats of the fast quantizer's arithmetic against the scalar
 * definitions: [0] its packed E2M1 codes against mx_e2m1_rne and [1] their folded E4M3 bytes against
 * mx_e4m3_encode of the decoded codes (over |y| < 8, their domain), [2] the hardware E4M3 and [3] E5M2
 * conversions against mx_e4m3_encode / mx_e5m2_encode (over the non-NaN floats), [4] the device's
 * mx_bf16_from_f32 (the conversion instruction) and [5] the paired one (bf16x2_rn) against
 * mx_bf16_from_f32_int (over every float, NaN included). All must be 0. Synchronous. */
int mxg_selftest_round(unsigned long long mismatches[6]);
/* Test and benchmark hook: 0 routes mxg_quantize to the general staged kernels only, 1 (the
 * default) lets it take the fast kernel where it applies (RNE, 1x32/32x1, rotation <= 32, no
 * telemetry; the same bytes). Returns the previous setting. */
int mxg_quant_set_fast(int on);

/* Release the cuBLASLt handle, plans and workspace (optional at exit). */
void mxg_shutdown(void);

/* ---- benchmarks (./mxlm bench in the CUDA build) ------------------------ */
/* Each prints its table to stdout; returns 0 or an mx_err code. */
int mxg_bench_quant(int rows, int cols, int iters);
int mxg_bench_hadamard(int rows, int cols, int iters);
int mxg_bench_gemm(int M, int N, int K, int iters);

#ifdef __cplusplus
}
#endif
#endif
