/* linear.c: the quantized linear layer on the CPU (linear.h). The recipe is
 * consulted here and nowhere else; what it asks of each operand (layout,
 * rounding, FP8 kind, random streams) and the shape checks are in
 * linear_plan.h, shared with the GPU twin (src/cuda/linear.cu); the dispatch
 * goes by the format's row (formats.h): no scale (element rounding), a
 * per-tensor scale, an E8M0 block scale (MXFP4, MXFP8) or an E4M3 block scale
 * with an FP32 tensor scale (NVFP4). */
#include "mxlm/linear.h"
#include "mxlm/linear_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* Telemetry of a GEMM's product (mx_linear_state.out): C (+)= Aq Bq^T as without it (the product made on its
 * own, then added: the same bits, mx_sgemm_tn adds its finished sums), and the product of the unquantized,
 * unrotated A and B as the reference. */
static int product_stats(mx_operand_stats* st, const float* A, const float* B, const float* Aq, const float* Bq,
                         float* C, int Ma, int Nb, int R, int accumulate) {
    size_t n = (size_t)Ma * Nb;
    float* Cq = malloc(n * sizeof *Cq); // [Ma, Nb]
    float* Cr = malloc(n * sizeof *Cr); // [Ma, Nb]
    int rc = (!Cq || !Cr) ? mx_fail(MX_ENOMEM, "linear: out of memory (telemetry of a product)") : MX_OK;
    if (!rc) rc = mx_sgemm_tn(Aq, Bq, Cq, Ma, Nb, R, 0);
    if (!rc) rc = mx_sgemm_tn(A, B, Cr, Ma, Nb, R, 0);
    if (!rc) {
        accumulate_stats(st, Cr, Cq, n);
        for (size_t i = 0; i < n; i++) C[i] = accumulate ? C[i] + Cq[i] : Cq[i];
    }
    free(Cq);
    free(Cr);
    return rc;
}

/* Quantize operand `o` ([rows, R], rotated already) in place as GEMM g says. */
static int quantize_operand(const mx_linear_ctx* c, mx_gemm_id g, int o, float* x, int rows, int R) {
    const mx_gemm_recipe* q = &c->recipe->g[g];
    const mx_format_info* f = mx_format_get(q->fmt);
    size_t n = (size_t)rows * R;
    mx_operand_stats* st = (c->telemetry && c->state) ? &c->state->op[g][o] : NULL;
    float* orig = NULL;
    if (st && f->elem != MX_ELEM_FP32) {
        orig = malloc(n * sizeof *orig);
        if (!orig) return mx_fail(MX_ENOMEM, "linear: out of memory (telemetry copy)");
        memcpy(orig, x, n * sizeof *x);
    }
    int rc = MX_OK;
    switch (f->scale) {
    case MX_SCALE_NONE: /* element rounding only */
        if (f->elem == MX_ELEM_BF16) mx_bf16_fakequant(x, x, n);
        break;
    case MX_SCALE_TENSOR: { /* FP8, per-tensor scale */
        mx_fp8_kind k = mx_operand_fp8_kind(g, o);
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
    case MX_SCALE_E8M0:          /* MX blocks: MXFP4 (E2M1) or MXFP8 (E4M3) */
    case MX_SCALE_E4M3_TENSOR: { /* NVFP4 */
        mx_qopts qo = mx_operand_qopts(q, g, o, c->seed, c->step, c->layer_id);
        qo.layout = mx_format_layout(f, mx_layout_is_2d(qo.layout));
        int64_t clipped = 0;
        if (f->scale == MX_SCALE_E4M3_TENSOR) rc = mx_fakequant_nvfp4(x, x, rows, R, &qo, &clipped);
        else if (f->elem == MX_ELEM_E4M3) rc = mx_fakequant_mxfp8(x, x, rows, R, &qo, &clipped);
        else rc = mx_fakequant_fp4(x, x, rows, R, &qo, &clipped);
        if (st && !rc) {
            int b = mx_layout_block(qo.layout);
            st->blocks += (int64_t)((size_t)rows * R / (mx_layout_is_2d(qo.layout) ? (size_t)b * b : (size_t)b));
            st->clipped += clipped;
        }
        break;
    }
    default:
        rc = mx_fail(MX_EINVAL, "linear: %s: no CPU quantizer for this scale type", f->name);
        break;
    }
    if (st && !rc) {
        if (orig) accumulate_stats(st, orig, x, n);
        else accumulate_stats(st, x, x, n);
    }
    free(orig);
    return rc;
}

int mx_gemm_recipe_tn(const mx_linear_ctx* c, mx_gemm_id g, const float* A, const float* B, float* C, int Ma, int Nb,
                      int R, int accumulate) {
    const mx_gemm_recipe* q = &c->recipe->g[g];
    int rc = mx_gemm_check_dims(g, q, Ma, Nb, R);
    if (rc) return rc;
    if (mx_format_get(q->fmt)->elem == MX_ELEM_FP32 && !q->had_n) return mx_sgemm_tn(A, B, C, Ma, Nb, R, accumulate);
    float* Aq = malloc((size_t)Ma * R * sizeof(float));  // [Ma, R]
    float* Bq = malloc((size_t)Nb * R * sizeof(float));  // [Nb, R]
    if (!Aq || !Bq) { free(Aq); free(Bq); return mx_fail(MX_ENOMEM, "linear %s: out of memory", mx_gemm_name(g)); }
    memcpy(Aq, A, (size_t)Ma * R * sizeof(float));
    memcpy(Bq, B, (size_t)Nb * R * sizeof(float));
    if (q->had_n) {
        uint64_t rs = mx_rh_seed(c->recipe, c->seed, c->step);
        uint32_t rot_id = mx_rot_id(c->layer_id, g);
        rc = mx_hadamard_rotate(Aq, Ma, R, 1, q->had_n, q->had_random, rs, rot_id);
        if (!rc) rc = mx_hadamard_rotate(Bq, Nb, R, 1, q->had_n, q->had_random, rs, rot_id);
    }
    if (!rc) rc = quantize_operand(c, g, 0, Aq, Ma, R);
    if (!rc) rc = quantize_operand(c, g, 1, Bq, Nb, R);
    if (!rc && c->telemetry && c->state) rc = product_stats(&c->state->out[g], A, B, Aq, Bq, C, Ma, Nb, R, accumulate);
    else if (!rc) rc = mx_sgemm_tn(Aq, Bq, C, Ma, Nb, R, accumulate);
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
