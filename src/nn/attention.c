/* attention.c: causal grouped-query attention (the batched products in FP32).
 *   s_tj = q_t . k_j / sqrt(hd) (j <= t),  p = softmax_j(s),  o_t = sum_j p_tj v_j
 * Query head h uses KV head h / (H / KV). Parallel over (batch, KV head): each
 * task owns its dk/dv rows, so the sums run in a fixed order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/model.h"

/* 8-wide vectors (two SSE registers on x86-64-v2), unaligned. Sums run in a
 * fixed order (8 lanes, then lanes combined pairwise), so the bits do not
 * depend on the thread count. */
typedef float v8u __attribute__((vector_size(32), aligned(4)));

static inline float dotf(const float* a, const float* b, int n) {
    int i = 0;
    float s = 0.0f;
    if (n >= 8) {
        v8u acc = {0};
        for (; i + 8 <= n; i += 8) acc += *(const v8u*)(a + i) * *(const v8u*)(b + i);
        s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y += a x */
static inline void axpyf(float* y, float a, const float* x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) *(v8u*)(y + i) += a * *(const v8u*)(x + i);
    for (; i < n; i++) y[i] += a * x[i];
}

/* dst[hd, T] = the KV head's rows of src [B*T, ks], transposed, for batch b */
void mx_softmax_scaled(float* row, int n, float scale) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        row[j] *= scale;
        mx = row[j] > mx ? row[j] : mx;
    }
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) row[j] *= inv;
}

static void gather_t(float* dst, const float* src, int b, int T, int ks, int off, int hd) {
    for (int j = 0; j < T; j++) {
        const float* r = src + (size_t)(b * T + j) * ks + off;
        for (int i = 0; i < hd; i++) dst[(size_t)i * T + j] = r[i];
    }
}

/* AVX2 clones where the CPU has it: the same elementwise operations in the
 * same order as the baseline build (C11 mode: no FMA contraction), so the
 * bits do not depend on which clone runs. */
#define MX_CLONES __attribute__((target_clones("avx2", "default")))
/* The clones are static (clang 14 names the ifunc of an exported clone
 * "<name>.ifunc", which nothing links against); the API functions call them. */

MX_CLONES static void attention_forward(float* out, float* att, const float* q, const float* k, const float* v, int B, int T,
                          int H, int KV, int hd) {
    /* out [B*T, H*hd], att [B, H, T, T], q [B*T, H*hd], k, v [B*T, KV*hd] */
    const int G = H / KV, qs = H * hd, ks = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel
    {
        float* Kt = malloc(sizeof(float) * hd * T); /* [hd, T] this head's keys, transposed */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            int b = bh / H, h = bh % H, kh = h / G;
            float* A = att + (size_t)bh * T * T; /* [T, T] */
            if (Kt) gather_t(Kt, k, b, T, ks, kh * hd, hd);
            for (int t = 0; t < T; t++) {
                const float* qt = q + (size_t)(b * T + t) * qs + h * hd;
                float* row = A + (size_t)t * T;
                /* scores s_j = q_t . k_j for j <= t: hd axpys along j (no horizontal sums) */
                if (Kt) {
                    for (int j = 0; j <= t; j++) row[j] = 0.0f;
                    for (int i = 0; i < hd; i++) axpyf(row, qt[i], Kt + (size_t)i * T, t + 1);
                } else {
                    for (int j = 0; j <= t; j++) row[j] = dotf(qt, k + (size_t)(b * T + j) * ks + kh * hd, hd);
                }
                mx_softmax_scaled(row, t + 1, scale);
                for (int j = t + 1; j < T; j++) row[j] = 0.0f;
                float* ot = out + (size_t)(b * T + t) * qs + h * hd;
                for (int i = 0; i < hd; i++) ot[i] = 0.0f;
                for (int j = 0; j <= t; j++) axpyf(ot, row[j], v + (size_t)(b * T + j) * ks + kh * hd, hd);
            }
        }
        free(Kt);
    }
}

MX_CLONES static void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att, const float* q,
                           const float* k, const float* v, int B, int T, int H, int KV, int hd) {
    /* dq [B*T, H*hd], dk, dv [B*T, KV*hd] (overwritten); dout [B*T, H*hd] */
    const int G = H / KV, qs = H * hd, ks = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel
    {
        float dp[8192]; /* [T]; T <= 8192 on the CPU */
        float* Vt = malloc(sizeof(float) * hd * T); /* [hd, T] this KV head's values, transposed */
#pragma omp for schedule(static)
        for (int bk = 0; bk < B * KV; bk++) {
            int b = bk / KV, kh = bk % KV;
            if (Vt) gather_t(Vt, v, b, T, ks, kh * hd, hd);
            for (int t = 0; t < T; t++) {
                memset(dk + (size_t)(b * T + t) * ks + kh * hd, 0, sizeof(float) * hd);
                memset(dv + (size_t)(b * T + t) * ks + kh * hd, 0, sizeof(float) * hd);
            }
            for (int h = kh * G; h < (kh + 1) * G; h++) {
                const float* A = att + ((size_t)b * H + h) * T * T;
                for (int t = 0; t < T; t++) {
                    const float* row = A + (size_t)t * T;
                    const float* go = dout + (size_t)(b * T + t) * qs + h * hd;
                    const float* qt = q + (size_t)(b * T + t) * qs + h * hd;
                    float* dqt = dq + (size_t)(b * T + t) * qs + h * hd;
                    /* dp_j = dout_t . v_j (hd axpys along j), dv_j += p_tj dout_t */
                    if (Vt) {
                        for (int j = 0; j <= t; j++) dp[j] = 0.0f;
                        for (int i = 0; i < hd; i++) axpyf(dp, go[i], Vt + (size_t)i * T, t + 1);
                    } else {
                        for (int j = 0; j <= t; j++) dp[j] = dotf(go, v + (size_t)(b * T + j) * ks + kh * hd, hd);
                    }
                    float dot = 0.0f;
                    for (int j = 0; j <= t; j++) {
                        axpyf(dv + (size_t)(b * T + j) * ks + kh * hd, row[j], go, hd);
                        dot += row[j] * dp[j];
                    }
                    for (int i = 0; i < hd; i++) dqt[i] = 0.0f;
                    for (int j = 0; j <= t; j++) {
                        float ds = row[j] * (dp[j] - dot) * scale;
                        const float* kj = k + (size_t)(b * T + j) * ks + kh * hd;
                        float* dkj = dk + (size_t)(b * T + j) * ks + kh * hd;
                        axpyf(dqt, ds, kj, hd);
                        axpyf(dkj, ds, qt, hd);
                    }
                }
            }
        }
        free(Vt);
    }
}

void mx_attention_forward(float* out, float* att, const float* q, const float* k, const float* v, int B, int T, int H,
                          int KV, int hd) {
    attention_forward(out, att, q, k, v, B, T, H, KV, hd);
}

void mx_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att, const float* q,
                           const float* k, const float* v, int B, int T, int H, int KV, int hd) {
    attention_backward(dq, dk, dv, dout, att, q, k, v, B, T, H, KV, hd);
}
