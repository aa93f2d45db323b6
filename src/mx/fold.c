/* fold.c: the folded form of MXFP4 operands (mx.h "the folded form"; docs/gpu.md), the CPU reference of
 * the GPU fast path's fold (src/cuda/mx/mxfp4.cu: qf_pass / fold32 with VEC128 and OUTER scales) and of
 * the exact fix-up of the blocks an OUTER fold cannot hold (issue 16; docs/gpu.md), and the
 * re-expression of a VEC128-folded operand under OUTER scales (mx_fold_outer_from_vec128; mxfp4.cu's
 * k_fold_outer is its twin).
 * Guarantee: deterministic, no state; mx_fold_product's FP64 sums run in a fixed order (k ascending,
 * then the listed blocks in list order). */
#include "mxlm/mx.h"

#include <math.h>
#include <string.h>

/* code and scale of element k of stored row i (dir 0: t's row i; dir 1: t's column i) */
static uint8_t code_st(const mx_fp4* t, int dir, int i, int k) { return dir ? mx_fp4_code_at(t, k, i) : mx_fp4_code_at(t, i, k); }
static uint8_t scale_st(const mx_fp4* t, int dir, int i, int k) { return dir ? mx_fp4_scale_at(t, k, i) : mx_fp4_scale_at(t, i, k); }

static int fold_shape(const mx_fp4* t, int dir, int* R, int* K) {
    if (dir != 0 && dir != 1) return mx_fail(MX_EINVAL, "fold: dir %d: 0 (rows) or 1 (columns)", dir);
    if (t->layout != (dir ? MX_LAYOUT_32x1 : MX_LAYOUT_1x32) && t->layout != MX_LAYOUT_32x32)
        return mx_fail(MX_EINVAL, "fold: layout %s along %s: the fold takes 1x32 rows, 32x1 columns or 32x32 tiles",
                       mx_layout_name(t->layout), dir ? "columns" : "rows");
    if (t->scale == MX_SCALE_DITHER) return mx_fail(MX_EINVAL, "fold: the dither rule's values (x 4/3) do not fold");
    *R = dir ? t->cols : t->rows;
    *K = dir ? t->rows : t->cols;
    if (*K % 128) return mx_fail(MX_EINVAL, "fold: K = %d: a multiple of 128", *K);
    return MX_OK;
}

/* e_ref of block kb of stored row i: the largest non-NaN scale byte of its group, as an exponent */
static int fold_eref(const mx_fp4* t, int dir, int i, int K, int kb, mx_fold_mode mode) {
    const int b0 = mode == MX_FOLD_OUTER ? 0 : kb & ~3, b1 = mode == MX_FOLD_OUTER ? K / 32 : b0 + 4;
    int m = -1;
    for (int q = b0; q < b1; q++) {
        const int sb = scale_st(t, dir, i, q * 32);
        if (sb != MX_E8M0_NAN && sb > m) m = sb;
    }
    return m < 0 ? 0 : m - 127;
}

int mx_fold_mxfp4(const mx_fp4* t, int dir, mx_fold_mode mode, mx_fold_oow oow, uint8_t* e4m3, float* fscale,
                  mx_fold_block* list, size_t cap, size_t* n_oow) {
    int R = 0, K = 0;
    int rc = fold_shape(t, dir, &R, &K);
    if (rc) return rc;
    size_t n = 0;
    for (int i = 0; i < R; i++)
        for (int kb = 0; kb < K / 32; kb++) {
            const int eref = fold_eref(t, dir, i, K, kb, mode);
            if (mode == MX_FOLD_OUTER) fscale[i] = mx_exp2i(eref - 6);
            else if (!(kb & 3)) fscale[(size_t)(kb / 4) * R + i] = mx_exp2i(eref - 6);
            const int sb = scale_st(t, dir, i, kb * 32), d = sb - 127 - eref;
            uint8_t* o = e4m3 + (size_t)i * K + (size_t)kb * 32;
            int nz = 0;
            for (int j = 0; j < 32; j++) nz |= code_st(t, dir, i, kb * 32 + j) & 7;
            const int out = sb != MX_E8M0_NAN && d < MX_FOLD_DMIN && nz;
            if (out) {
                if (oow == MX_FOLD_LIST) {
                    if (n >= cap) return mx_fail(MX_EINVAL, "fold: more than %zu blocks outside the window", cap);
                    list[n].row = i;
                    list[n].block = kb;
                }
                n++;
            }
            for (int j = 0; j < 32; j++) {
                if (sb == MX_E8M0_NAN) { o[j] = 0x7f; continue; }
                if (out && oow == MX_FOLD_LIST) { o[j] = 0; continue; }
                const int e = d + 6 < -149 ? -149 : d + 6; /* below the smallest float: rounds to zero either way */
                o[j] = mx_e4m3_encode(mx_e2m1_decode(code_st(t, dir, i, kb * 32 + j)) * mx_exp2i(e));
            }
        }
    *n_oow = n;
    return MX_OK;
}

/* the exact value of element k of stored row i */
static double exact_at(const mx_fp4* t, int dir, int i, int k) {
    const uint8_t sb = scale_st(t, dir, i, k);
    return (double)mx_e2m1_decode(code_st(t, dir, i, k)) * (double)mx_e8m0_decode(sb);
}

/* the folded value of element k of stored row i (e4m3 [R, K], fscale as mx_fold_mxfp4 writes them) */
static double folded_at(const uint8_t* e, const float* f, int R, int K, int i, int k, mx_fold_mode mode) {
    const float s = mode == MX_FOLD_OUTER ? f[i] : f[(size_t)(k / 128) * R + i];
    return (double)mx_e4m3_decode(e[(size_t)i * K + k]) * (double)s;
}

int mx_fold_product(const mx_fp4* ta, int dir_a, const uint8_t* ea, const float* fa, const mx_fold_block* la,
                    size_t na, const mx_fp4* tb, int dir_b, const uint8_t* eb, const float* fb,
                    const mx_fold_block* lb, size_t nb, mx_fold_mode mode, double* C) {
    int M = 0, Ka = 0, N = 0, Kb = 0;
    int rc = fold_shape(ta, dir_a, &M, &Ka);
    if (!rc) rc = fold_shape(tb, dir_b, &N, &Kb);
    if (rc) return rc;
    if (Ka != Kb) return mx_fail(MX_EINVAL, "fold product: K %d against %d", Ka, Kb);
    const int K = Ka;
    /* the GEMM's part: A_f B_f^T */
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += folded_at(ea, fa, M, K, r, k, mode) * folded_at(eb, fb, N, K, c, k, mode);
            C[(size_t)r * N + c] = s;
        }
    /* dA B^T: a listed block of A against B's exact values (B's own listed blocks included) */
    for (size_t q = 0; q < na; q++) {
        const int r = la[q].row, k0 = la[q].block * 32;
        for (int c = 0; c < N; c++) {
            double s = 0.0;
            for (int k = k0; k < k0 + 32; k++) s += exact_at(ta, dir_a, r, k) * exact_at(tb, dir_b, c, k);
            C[(size_t)r * N + c] += s;
        }
    }
    /* A_f dB^T: A's folded values (its listed blocks zero) against a listed block of B */
    for (size_t q = 0; q < nb; q++) {
        const int c = lb[q].row, k0 = lb[q].block * 32;
        for (int r = 0; r < M; r++) {
            double s = 0.0;
            for (int k = k0; k < k0 + 32; k++) s += folded_at(ea, fa, M, K, r, k, mode) * exact_at(tb, dir_b, c, k);
            C[(size_t)r * N + c] += s;
        }
    }
    return MX_OK;
}

int mx_fold_outer_from_vec128(const uint8_t* e4m3, const float* fscale, int R, int K, uint8_t* out, float* fscale_out,
                              uint8_t* flags, size_t* n_round) {
    if (R <= 0 || K <= 0 || K % 128) return mx_fail(MX_EINVAL, "fold VEC128 -> OUTER: shape [%d, %d] (K a multiple of 128)", R, K);
    size_t n = 0;
    for (int i = 0; i < R; i++) {
        int er = -1000; /* the row's largest group scale exponent (e_group - 6) */
        for (int g = 0; g < K / 128; g++) {
            const int e = mx_log2_pow2(fscale[(size_t)g * R + i]);
            if (e > er) er = e;
        }
        fscale_out[i] = mx_exp2i(er);
        for (int b = 0; b < K / 32; b++) {
            const int down = er - mx_log2_pow2(fscale[(size_t)(b / 4) * R + i]);
            int inexact = 0;
            for (int j = 0; j < 32; j++) {
                const size_t k = (size_t)i * K + (size_t)b * 32 + j;
                out[k] = mx_e4m3_rescale(e4m3[k], down, &inexact);
            }
            n += (size_t)inexact;
            if (flags) flags[(size_t)i * (K / 32) + b] = (uint8_t)inexact;
        }
    }
    *n_round = n;
    return MX_OK;
}

/* one pass of the fix-up (k_outer_fix in mxfp4.cu is its twin): side 0, (A - A_o) B^T into C's rows; side 1,
 * A_o (B - B_o)^T into C's columns. Row i of the side's operand (x: its VEC128 and OUTER forms and flags) reaches
 * the entries e of C through the other operand's row e (y_v / y_fs exact for side 0, y_o / y_fo for side 1) */
static void fixup_side(int side, float* C, int M, int N, int K, const uint8_t* x_v, const float* x_fs, const uint8_t* x_o,
                       const float* x_fo, const uint8_t* x_flag, const uint8_t* y_v, const float* y_fs, const uint8_t* y_o,
                       const float* y_fo) {
    const int nb = K / 32, R = side ? N : M, other = side ? M : N;
    for (int i = 0; i < R; i++)
        for (int e = 0; e < other; e++) {
            float acc = 0.0f;
            int any = 0;
            for (int b = 0; b < nb; b++) {
                if (!x_flag[(size_t)i * nb + b]) continue;
                any = 1;
                for (int j = 0; j < 32; j++) {
                    const int k = b * 32 + j;
                    const float d = mx_fold_vec128_at(x_v, x_fs, R, K, i, k) - mx_fold_outer_at(x_o, x_fo, K, i, k);
                    acc += side ? mx_fold_outer_at(y_o, y_fo, K, e, k) * d : d * mx_fold_vec128_at(y_v, y_fs, other, K, e, k);
                }
            }
            if (any) C[side ? (size_t)e * N + i : (size_t)i * N + e] += acc;
        }
}

int mx_fold_outer_fixup(float* C, int M, int N, int K, const uint8_t* a_v, const float* a_fs, const uint8_t* a_o,
                        const float* a_fo, const uint8_t* a_flag, const uint8_t* b_v, const float* b_fs,
                        const uint8_t* b_o, const float* b_fo, const uint8_t* b_flag) {
    if (M <= 0 || N <= 0 || K <= 0 || K % 128) return mx_fail(MX_EINVAL, "fold fix-up: shape %d x %d x %d (K a multiple of 128)", M, N, K);
    fixup_side(0, C, M, N, K, a_v, a_fs, a_o, a_fo, a_flag, b_v, b_fs, b_o, b_fo); /* (A - A_o) B^T */
    fixup_side(1, C, M, N, K, b_v, b_fs, b_o, b_fo, b_flag, a_v, a_fs, a_o, a_fo); /* A_o (B - B_o)^T */
    return MX_OK;
}
