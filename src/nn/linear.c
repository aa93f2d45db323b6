/* linear.c: the quantized linear layer on the CPU (linear.h). The recipe is
 * consulted here and nowhere else.
 *
 * Random streams (the GPU twin must use the same):
 *   SR bits of operand o (0 = a, 1 = b) of GEMM g in layer L at step s:
 *     mx_rand_u32(seed + s * 0x9E3779B97F4A7C15, MX_RNG_SR, L * 6 + g * 2 + o, r * R + c)
 *     for element (r, c) of the TN operand [rows, R].
 *   rhN signs of GEMM g in layer L (both operands share them):
 *     mx_rh_sign(seed', L * 3 + g, j), j the position along the reduction dim,
 *     seed' = seed (rh=fixed) or seed + s * 0x9E3779B97F4A7C15 (rh=step).
 */
#include "mxlm/linear.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ull

static const char* k_gemm_name[3] = {"fprop", "dgrad", "wgrad"};

/* FP8 kinds of the hybrid recipe: E4M3 for activations and weights, E5M2 for
 * gradients (operand a of Dgrad and Wgrad is dY). */
static mx_fp8_kind fp8_kind(mx_gemm_id g, int operand) {
    return (operand == 0 && g != MX_FPROP) ? MX_FP8_E5M2 : MX_FP8_E4M3;
}

static void accumulate_stats(mx_operand_stats* s, const float* x, const float* q, size_t n) {
    double sig = 0, err = 0;
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) { bad++; continue; }
        double d = (double)x[i] - (double)q[i];
        sig += (double)x[i] * x[i];
        err += d * d;
    }
    s->sig2 += sig;
    s->err2 += err;
    s->nonfinite += bad;
}

/* Quantize operand `o` ([rows, R], rotated already) in place as GEMM g says. */
static int quantize_operand(const mx_linear_ctx* c, mx_gemm_id g, int o, float* x, int rows, int R) {
    const mx_gemm_recipe* q = &c->recipe->g[g];
    size_t n = (size_t)rows * R;
    mx_operand_stats* st = (c->telemetry && c->state) ? &c->state->op[g][o] : NULL;
    float* orig = NULL;
    if (st && q->fmt != MX_FMT_FP32) {
        orig = malloc(n * sizeof *orig);
        if (!orig) return mx_fail(MX_ENOMEM, "linear: out of memory (telemetry copy)");
        memcpy(orig, x, n * sizeof *x);
    }
    int rc = MX_OK;
    switch (q->fmt) {
    case MX_FMT_FP32: break;
    case MX_FMT_BF16: mx_bf16_fakequant(x, x, n); break;
    case MX_FMT_FP8: {
        mx_fp8_kind k = fp8_kind(g, o);
        float amax = mx_amax(x, n);
        float use = amax;
        if (c->recipe->fp8_scaling == MX_FP8_DELAYED && c->state) {
            /* most recent amax of the history (previous steps); current on the first */
            int cnt = c->state->amax_n[g][o];
            if (cnt > 0) use = c->state->amax_hist[g][o][(cnt - 1) % 4];
            c->state->amax_hist[g][o][cnt % 4] = amax;
            c->state->amax_n[g][o] = cnt + 1;
        }
        mx_fp8_fakequant(x, x, n, mx_fp8_scale_for_amax(use, k), k);
        break;
    }
    case MX_FMT_MXFP4: {
        int is_weight = (o == 1 && g != MX_WGRAD);
        mx_qopts qo = {
            .layout = (is_weight && q->w2d) ? MX_LAYOUT_32x32 : MX_LAYOUT_1x32,
            .scale = q->scale,
            .round = o == 0 ? q->round_a : q->round_b,
            .seed = c->seed + c->step * GOLDEN,
            .tensor_id = c->layer_id * 6u + (uint32_t)g * 2u + (uint32_t)o,
        };
        int64_t clipped = 0;
        rc = mx_fakequant_fp4(x, x, rows, R, &qo, &clipped);
        if (st && !rc) {
            st->blocks += (int64_t)mx_fp4_n_scales(rows, R, qo.layout);
            st->clipped += clipped;
        }
        break;
    }
    }
    if (st && !rc) {
        if (orig) accumulate_stats(st, orig, x, n);
        else accumulate_stats(st, x, x, n);
    }
    free(orig);
    return rc;
}

static int check_dims(mx_gemm_id g, const mx_gemm_recipe* q, int Ma, int Nb, int R) {
    if (Ma <= 0 || Nb <= 0 || R <= 0) return mx_fail(MX_EINVAL, "linear %s: empty shape %dx%dx%d", k_gemm_name[g], Ma, Nb, R);
    if (q->had_n && R % q->had_n)
        return mx_fail(MX_EINVAL, "linear %s: Hadamard h%d does not divide the reduction dim %d", k_gemm_name[g], q->had_n, R);
    if (q->fmt == MX_FMT_MXFP4) {
        if (R % MX_BLOCK)
            return mx_fail(MX_EINVAL, "linear %s: MXFP4 needs the reduction dim (%d) to be a multiple of 32", k_gemm_name[g], R);
        if (q->w2d && g != MX_WGRAD && Nb % MX_BLOCK)
            return mx_fail(MX_EINVAL, "linear %s: 32x32 weight tiles need %d to be a multiple of 32", k_gemm_name[g], Nb);
    }
    return MX_OK;
}

int mx_gemm_recipe_tn(const mx_linear_ctx* c, mx_gemm_id g, const float* A, const float* B, float* C, int Ma, int Nb,
                      int R, int accumulate) {
    const mx_gemm_recipe* q = &c->recipe->g[g];
    int rc = check_dims(g, q, Ma, Nb, R);
    if (rc) return rc;
    if (q->fmt == MX_FMT_FP32 && !q->had_n) return mx_sgemm_tn(A, B, C, Ma, Nb, R, accumulate);
    float* Aq = malloc((size_t)Ma * R * sizeof(float));  // [Ma, R]
    float* Bq = malloc((size_t)Nb * R * sizeof(float));  // [Nb, R]
    if (!Aq || !Bq) { free(Aq); free(Bq); return mx_fail(MX_ENOMEM, "linear %s: out of memory", k_gemm_name[g]); }
    memcpy(Aq, A, (size_t)Ma * R * sizeof(float));
    memcpy(Bq, B, (size_t)Nb * R * sizeof(float));
    if (q->had_n) {
        uint64_t rs = c->seed + (c->recipe->rh_mode == MX_RH_STEP ? c->step * GOLDEN : 0);
        uint32_t rot_id = c->layer_id * 3u + (uint32_t)g;
        rc = mx_hadamard_rotate(Aq, Ma, R, 1, q->had_n, q->had_random, rs, rot_id);
        if (!rc) rc = mx_hadamard_rotate(Bq, Nb, R, 1, q->had_n, q->had_random, rs, rot_id);
    }
    if (!rc) rc = quantize_operand(c, g, 0, Aq, Ma, R);
    if (!rc) rc = quantize_operand(c, g, 1, Bq, Nb, R);
    if (!rc) rc = mx_sgemm_tn(Aq, Bq, C, Ma, Nb, R, accumulate);
    free(Aq);
    free(Bq);
    return rc;
}

/* dst[cols, rows] = src[rows, cols]^T, in 32x32 tiles (both sides stay in cache). */
static float* transpose(const float* src, int rows, int cols) {
    float* d = malloc((size_t)rows * cols * sizeof(float));
    if (!d) return NULL;
    int tr = (rows + 31) / 32, tc = (cols + 31) / 32;
#pragma omp parallel for schedule(static) collapse(2)
    for (int bi = 0; bi < tr; bi++)
        for (int bj = 0; bj < tc; bj++) {
            int r1 = bi * 32 + 32 < rows ? bi * 32 + 32 : rows, c1 = bj * 32 + 32 < cols ? bj * 32 + 32 : cols;
            for (int cc = bj * 32; cc < c1; cc++)
                for (int r = bi * 32; r < r1; r++) d[(size_t)cc * rows + r] = src[(size_t)r * cols + cc];
        }
    return d;
}

int mx_linear_forward(const mx_linear_ctx* c, const float* X, const float* W, float* Y, int M, int K, int N) {
    return mx_gemm_recipe_tn(c, MX_FPROP, X, W, Y, M, N, K, 0);
}

int mx_linear_backward(const mx_linear_ctx* c, const float* X, const float* W, const float* dY, float* dX, float* dW,
                       int M, int K, int N) {
    int rc = MX_OK;
    if (dX) {
        float* Wt = transpose(W, N, K);  // [K, N]
        if (!Wt) return mx_fail(MX_ENOMEM, "linear dgrad: out of memory");
        rc = mx_gemm_recipe_tn(c, MX_DGRAD, dY, Wt, dX, M, K, N, 1);  // dX[M,K] += dY[M,N] . Wt[K,N]^T
        free(Wt);
        if (rc) return rc;
    }
    if (dW) {
        float* dYt = transpose(dY, M, N);  // [N, M]
        float* Xt = transpose(X, M, K);    // [K, M]
        if (!dYt || !Xt) rc = mx_fail(MX_ENOMEM, "linear wgrad: out of memory");
        else rc = mx_gemm_recipe_tn(c, MX_WGRAD, dYt, Xt, dW, N, K, M, 1);  // dW[N,K] += dYt[N,M] . Xt[K,M]^T
        free(dYt);
        free(Xt);
    }
    return rc;
}

double mx_stats_sqnr_db(const mx_operand_stats* s) {
    if (s->err2 == 0) return INFINITY;
    if (s->sig2 == 0) return -INFINITY;
    return 10.0 * log10(s->sig2 / s->err2);
}
