/*
 * mx.h: MX block formats on the CPU, the reference every GPU kernel matches.
 *
 * A tensor is row-major [rows, cols] float32. An MXFP4 quantization of it
 * (mx_fp4) stores packed E2M1 codes and E8M0 scales in the orientation a TN
 * GEMM consumes (blocks contiguous):
 *   layout 1x32  blocks of 32 along a row.   codes [rows, cols/2], scales [rows, cols/32]
 *   layout 32x1  blocks of 32 along a column; stored transposed:
 *                codes [cols, rows/2] (element (r,c) at c*rows + r), scales [cols, rows/32]
 *   layout 32x32 one scale per 32x32 tile.   codes [rows, cols/2], scales [rows/32, cols/32]
 * Packing: element 2i of the stored order in the low nibble of byte i,
 * element 2i+1 in the high nibble.
 *
 * Library functions return 0 on success or a negative mx_err code and set a
 * message readable with mx_last_error() (error.h); they never exit.
 */
#ifndef MXLM_MX_H
#define MXLM_MX_H

#include <stddef.h>
#include <stdint.h>
#include "mxlm/error.h"
#include "mxlm/mx_scalar.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MXLM_VERSION "0.1.0"
#define MX_BLOCK 32

/* mx_err, mx_fail, mx_last_error: error.h */

/* 1x32 / 32x1 / 32x32: MXFP4 and MXFP8 (1D only); 1x16 / 16x1 / 16x16: NVFP4. The block edge
 * of a layout is mx_layout_block(l). */
typedef enum {
    MX_LAYOUT_1x32 = 0, MX_LAYOUT_32x1 = 1, MX_LAYOUT_32x32 = 2,
    MX_LAYOUT_1x16 = 3, MX_LAYOUT_16x1 = 4, MX_LAYOUT_16x16 = 5, MX_LAYOUT_COUNT
} mx_layout;
/* Block edge (32 or 16), orientation (along rows / along columns / 2D tile) of a layout. */
static inline int mx_layout_block(mx_layout l) { return l >= MX_LAYOUT_1x16 ? 16 : 32; }
static inline int mx_layout_is_cols(mx_layout l) { return l == MX_LAYOUT_32x1 || l == MX_LAYOUT_16x1; }
static inline int mx_layout_is_2d(mx_layout l) { return l == MX_LAYOUT_32x32 || l == MX_LAYOUT_16x16; }
typedef enum { MX_ROUND_RNE = 0, MX_ROUND_SR = 1 } mx_round;

/* Parse / name the enums ("1x32", "floor", "rne", ...). Parse returns -1 if unknown. */
int mx_layout_parse(const char* s);
int mx_scale_parse(const char* s);
int mx_round_parse(const char* s);
const char* mx_layout_name(mx_layout l);
const char* mx_scale_name(mx_scale_rule r);
const char* mx_round_name(mx_round r);

/* How one operand is quantized. Random bits for `sr` come from
 * mx_rand_u32(seed, MX_RNG_SR, tensor_id, r*cols + c), (r,c) the element's
 * position in the row-major input. */
typedef struct {
    mx_layout layout;
    mx_scale_rule scale;
    mx_round round;
    uint64_t seed;
    uint32_t tensor_id;
} mx_qopts;

/* An MXFP4 tensor (see the layout table above). */
typedef struct {
    int rows, cols;       /* logical shape of the quantized matrix */
    mx_layout layout;
    uint8_t* codes;       /* rows*cols/2 bytes */
    uint8_t* scales;      /* rows*cols/32 (1D) or rows*cols/1024 (32x32) bytes */
    /* statistics of the last quantization (telemetry) */
    int64_t n_blocks, n_clipped_blocks;  /* blocks with an element beyond +-6 after scaling */
    mx_scale_rule scale;  /* the rule it was quantized with (mx_quantize_fp4 sets it): dither decodes x 4/3 */
} mx_fp4;

/* Check that rows/cols suit a layout (multiples of its block edge, positive). */
int mx_check_shape(int rows, int cols, mx_layout layout);
size_t mx_fp4_n_scales(int rows, int cols, mx_layout layout);
int mx_fp4_alloc(mx_fp4* t, int rows, int cols, mx_layout layout);
void mx_fp4_free(mx_fp4* t);

/* Quantize x[rows, cols] (row-major) into t (allocated with the same shape
 * and o->layout). */
int mx_quantize_fp4(const float* x, int rows, int cols, const mx_qopts* o, mx_fp4* t);
/* Dequantize back into y[rows, cols] row-major (the values a GEMM consumes). */
int mx_dequantize_fp4(const mx_fp4* t, float* y);
/* Quantize then dequantize in one call: y = Q(x). y may alias x. */
int mx_fakequant_fp4(const float* x, float* y, int rows, int cols, const mx_qopts* o,
                     int64_t* n_clipped_blocks);

/* Code and scale of element (r, c) of t (after quantization). */
uint8_t mx_fp4_code_at(const mx_fp4* t, int r, int c);
uint8_t mx_fp4_scale_at(const mx_fp4* t, int r, int c);

/* Quantize one block of 32 values (stride between elements `stride`) into
 * 32 codes (unpacked) and return its scale byte; `rbits` (32 words) are the
 * random bits for sr, NULL for rne. `clipped` gets 1 if any |x|/2^e > 6. */
uint8_t mx_quantize_block(const float* x, int stride, mx_scale_rule rule, const uint32_t* rbits,
                          uint8_t codes[MX_BLOCK], int* clipped);

/* ---- the folded form of an MXFP4 operand (src/mx/fold.c; docs/gpu.md) -------------------------
 * What the GPU's fast GEMM path feeds FP8 tensor cores, here as the reference. Stored row i of an
 * operand (dir 0: row i of t, K = t->cols; dir 1: column i, K = t->rows), block j = its elements
 * [32j, 32j + 32) with codes q and scale byte sb_j (e_j = sb_j - 127):
 *   e_ref   the largest non-NaN block exponent of a group: MX_FOLD_VEC128 the 4 blocks of j's 128-group,
 *           MX_FOLD_OUTER every block of the row (0 where there is none); fscale = 2^(e_ref - 6) per group
 *           (VEC128: [K/128][stored rows]; OUTER: [stored rows])
 *   d_j     = e_j - e_ref; inside the window (d_j >= MX_FOLD_DMIN) every code folds exactly:
 *           e4m3 = E4M3(decode(q) * 2^(d_j + 6)), so e4m3 * fscale = decode(q) * 2^e_j
 *   outside it, a block with a nonzero code: MX_FOLD_ROUND rounds each value as E4M3 does (inexact: the
 *           fast path's VEC128 fold today), MX_FOLD_LIST writes zeros and lists the block for the fix-up
 *   a NaN block (sb 0xFF): E4M3 NaN (0x7f) in every element
 * With MX_FOLD_LIST, C = A B^T (A [M,K], B [N,K] their exact values) is exactly
 *   C = A_f B_f^T + dA B^T + A_f dB^T
 * (A_f, B_f the folded operands' values, dA, dB the listed blocks' exact values): mx_fold_product. */
#define MX_FOLD_DMIN (-14)
typedef enum { MX_FOLD_VEC128 = 0, MX_FOLD_OUTER = 1 } mx_fold_mode;
typedef enum { MX_FOLD_ROUND = 0, MX_FOLD_LIST = 1 } mx_fold_oow;
typedef struct { int row, block; } mx_fold_block; /* a listed block: stored row, block index along K */
/* Fold t (1x32 or 32x32 for dir 0, 32x1 or 32x32 for dir 1) into e4m3 [stored rows, K] and fscale; *n_oow gets the number
 * of blocks outside the window with a nonzero code; with MX_FOLD_LIST they go into list (by stored row,
 * then block), an error (MX_EINVAL) when there are more than cap. */
int mx_fold_mxfp4(const mx_fp4* t, int dir, mx_fold_mode mode, mx_fold_oow oow, uint8_t* e4m3, float* fscale,
                  mx_fold_block* list, size_t cap, size_t* n_oow);
/* C [M, N] (FP64, row-major) = the product of two folded operands (e4m3 + fscale as mx_fold_mxfp4 makes
 * them, K along rows, the same mode) plus the fix-up of their listed blocks from their exact MXFP4 forms
 * (a: dir_a of ta, b: dir_b of tb). Every term in FP64; the reference of the fix-up's arithmetic. */
int mx_fold_product(const mx_fp4* ta, int dir_a, const uint8_t* ea, const float* fa, const mx_fold_block* la,
                    size_t na, const mx_fp4* tb, int dir_b, const uint8_t* eb, const float* fb,
                    const mx_fold_block* lb, size_t nb, mx_fold_mode mode, double* C);

/* Re-express a VEC128-folded operand (e4m3 [R, K] and fscale [K/128][R] as mx_fold_mxfp4 makes them) under one
 * scale per stored row, the OUTER form the GPU's GEMM takes fastest (MXG_SCALE_OUTER; mxg_fold_outer_from_vec128
 * is its twin, bit for bit): e_row = the largest group exponent of the row, fscale_out [R] = 2^(e_row - 6), each
 * code mx_e4m3_rescale'd down by e_row - e_group (a power of two: exact unless it falls below E4M3's smallest
 * subnormal, where it rounds to nearest even). *n_round gets the blocks of 32 with a rounded element, flags
 * [R][K/32] (NULL: not written) 1 for each such block and 0 elsewhere. Where
 * the VEC128 fold was exact (its n_oow 0) and no block is NaN this is mx_fold_mxfp4 MX_FOLD_OUTER
 * MX_FOLD_ROUND's output byte for byte (a single rounding of the exact value either way); a row holding a
 * NaN block may take another e_row (a NaN-only group counts as exponent 0), its products are NaN regardless.
 * out may be e4m3 (in place). K a multiple of 128. */
int mx_fold_outer_from_vec128(const uint8_t* e4m3, const float* fscale, int R, int K, uint8_t* out, float* fscale_out,
                              uint8_t* flags, size_t* n_round);
/* The exact fix-up of a GEMM on OUTER re-expressed operands: with A (a_v, a_fs: VEC128 form [M, K], exact) and
 * A_o (a_o, a_fo: its OUTER form, rounded in the blocks a_flag [M][K/32] marks), B likewise [N, K], and C [M, N]
 * (row-major FP32) holding A_o B_o^T, adds (A - A_o) B^T and then A_o (B - B_o)^T, so that C = A B^T but for FP32
 * rounding: for each row r of A with marked blocks, for each n, one FP32 sum over its marked blocks in block
 * order and over each block's 32 elements in order, added to C[r][n]; then for each row n of B likewise into
 * C[.][n]. Every difference A - A_o is exact (a value and its rounding to E4M3's subnormal grid are within a
 * factor 2, or the rounding is 0). The GPU's mxg_fold_outer_fixup is its twin, bit for bit. */
int mx_fold_outer_fixup(float* C, int M, int N, int K, const uint8_t* a_v, const float* a_fs, const uint8_t* a_o,
                        const float* a_fo, const uint8_t* a_flag, const uint8_t* b_v, const float* b_fs,
                        const uint8_t* b_o, const float* b_fo, const uint8_t* b_flag);

/* ---- NVFP4 (src/mx/nvfp4.c; docs/numerics.md) -------------------------- */
/* E2M1 codes in blocks of 16 (layouts 1x16, 16x1, 16x16) with an E4M3 block scale and an FP32
 * tensor scale S; value = (q * sb) / S. Stored like MXFP4 with 16 for 32: codes packed two a
 * byte in the same orders ([rows, cols/2]; 16x1 transposed [cols, rows/2]); scales E4M3 bytes
 * [rows, cols/16], [cols, rows/16] or [rows/16, cols/16] (0x7F: a block with a NaN or Inf). */
typedef struct {
    int rows, cols;
    mx_layout layout;
    uint8_t* codes;       /* rows*cols/2 bytes */
    uint8_t* scales;      /* rows*cols/16 (1D) or rows*cols/256 (16x16) E4M3 bytes */
    float tensor_scale;   /* S = 2688 / amax_t */
    int64_t n_blocks, n_clipped_blocks;  /* blocks with an element beyond +-6 after scaling */
} mx_nvfp4;

size_t mx_nvfp4_n_scales(int rows, int cols, mx_layout layout);
int mx_nvfp4_alloc(mx_nvfp4* t, int rows, int cols, mx_layout layout);
void mx_nvfp4_free(mx_nvfp4* t);
/* o->layout one of 1x16, 16x1, 16x16; o->scale is ignored; o->round rne or sr (bits as MXFP4). */
int mx_quantize_nvfp4(const float* x, int rows, int cols, const mx_qopts* o, mx_nvfp4* t);
int mx_dequantize_nvfp4(const mx_nvfp4* t, float* y);
/* y = Q(x); y may alias x. */
int mx_fakequant_nvfp4(const float* x, float* y, int rows, int cols, const mx_qopts* o, int64_t* n_clipped_blocks);
uint8_t mx_nvfp4_code_at(const mx_nvfp4* t, int r, int c);
uint8_t mx_nvfp4_scale_at(const mx_nvfp4* t, int r, int c);
/* amax over the finite elements of x[n] (0 if none). */
float mx_amax_finite(const float* x, size_t n);

/* ---- MXFP8 (src/mx/mxfp8.c; OCP MX v1.0) ------------------------------- */
/* E4M3 codes (a byte each) in blocks of 32 (layouts 1x32, 32x1) with an E8M0 scale; value =
 * E4M3(q) * 2^(sb-127). Codes [rows, cols] (32x1: transposed [cols, rows]); scales as MXFP4's
 * 1D layouts. o->scale: floor or ceil. */
typedef struct {
    int rows, cols;
    mx_layout layout;
    uint8_t* codes;       /* rows*cols bytes */
    uint8_t* scales;      /* rows*cols/32 E8M0 bytes */
    int64_t n_blocks, n_clipped_blocks;  /* blocks with an element beyond +-448 after scaling */
} mx_mxfp8;

int mx_mxfp8_alloc(mx_mxfp8* t, int rows, int cols, mx_layout layout);
void mx_mxfp8_free(mx_mxfp8* t);
int mx_quantize_mxfp8(const float* x, int rows, int cols, const mx_qopts* o, mx_mxfp8* t);
int mx_dequantize_mxfp8(const mx_mxfp8* t, float* y);
int mx_fakequant_mxfp8(const float* x, float* y, int rows, int cols, const mx_qopts* o, int64_t* n_clipped_blocks);
uint8_t mx_mxfp8_code_at(const mx_mxfp8* t, int r, int c);
uint8_t mx_mxfp8_scale_at(const mx_mxfp8* t, int r, int c);

/* Where element (r, c) of a [rows, cols] tensor in `layout` is stored: its code's index in the
 * stored order and its scale's index (the shared block helpers of MXFP4, NVFP4, MXFP8). */
size_t mx_block_code_index(int rows, int cols, mx_layout layout, int r, int c);
size_t mx_block_scale_index(int rows, int cols, mx_layout layout, int r, int c);

/* ---- Hadamard ---------------------------------------------------------- */

/* Is n a supported Hadamard size (power of two, 2..256)? */
int mx_hadamard_valid(int n);
/* Parse "none", "hN" or "rhN" into (n, random); n = 0 for none. Returns 0, or -1 if malformed
 * or N is not a supported size. */
int mx_hadamard_parse(const char* s, int* n, int* random);
/* Normalized Walsh-Hadamard (y = x H_n) of n contiguous values, in place. */
void mx_fwht(float* x, int n);
/* Rotate x[rows, cols] in place, block-diagonally in tiles of n along each
 * row (axis 1: x <- x (I (x) H_n)) or along each column (axis 0: x <- (I (x) H_n)^T x).
 * `random_sign`: multiply position j of the rotated axis by mx_rh_sign(seed,
 * rot_id, j) first (rhN: x <- x D H). */
int mx_hadamard_rotate(float* x, int rows, int cols, int axis, int n, int random_sign,
                       uint64_t seed, uint32_t rot_id);

/* ---- FP8 per-tensor ---------------------------------------------------- */

typedef enum { MX_FP8_E4M3 = 0, MX_FP8_E5M2 = 1 } mx_fp8_kind;

float mx_amax(const float* x, size_t n);
/* Current scaling: scale = fmax / amax (1 when amax is 0 or not finite).
 * codes[i] = encode(x[i] * scale); a consumer multiplies by 1/scale. */
float mx_fp8_scale_for_amax(float amax, mx_fp8_kind kind);
void mx_fp8_quantize(const float* x, size_t n, float scale, mx_fp8_kind kind, uint8_t* codes);
void mx_fp8_dequantize(const uint8_t* codes, size_t n, float scale, mx_fp8_kind kind, float* y);
/* y = decode(encode(x * scale)) / scale; y may alias x. */
void mx_fp8_fakequant(const float* x, float* y, size_t n, float scale, mx_fp8_kind kind);

/* BF16 round trip of every element; y may alias x. */
void mx_bf16_fakequant(const float* x, float* y, size_t n);

/* Signal-to-quantization-noise ratio in dB of q against x (inf if equal). */
double mx_sqnr_db(const float* x, const float* q, size_t n);

#ifdef __cplusplus
}
#endif
#endif
