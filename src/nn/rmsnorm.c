/* rmsnorm.c: RMSNorm (no bias), forward and backward.
 *   y = x * r * w,  r = 1 / sqrt(mean(x^2) + eps)
 *   dx = r * (dy*w - x * r^2 * mean(dy*w*x)),  dw = sum_n dy * x * r */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/model.h"

void mx_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int D, float eps) {
    /* out [N, D], rstd [N], x [N, D], w [D] */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* xr = x + (size_t)n * D;
        float* o = out + (size_t)n * D;
        double ss = 0.0;
        for (int i = 0; i < D; i++) ss += (double)xr[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss / D + (double)eps));
        rstd[n] = r;
        for (int i = 0; i < D; i++) o[i] = (xr[i] * r) * w[i];
    }
}

#define RMS_CHUNK 64 /* tokens per partial dw sum: fixed, so the order never depends on threads */

void mx_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                         const float* rstd, int N, int D) {
    /* dx [N, D] +=, dw [D] +=, dout [N, D], x [N, D], w [D], rstd [N] */
    int nch = (N + RMS_CHUNK - 1) / RMS_CHUNK;
    float* part = calloc((size_t)nch * D, sizeof(float)); /* [nch, D] */
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nch; ch++) {
        float* pw = part ? part + (size_t)ch * D : NULL;
        int n1 = (ch + 1) * RMS_CHUNK < N ? (ch + 1) * RMS_CHUNK : N;
        for (int n = ch * RMS_CHUNK; n < n1; n++) {
            const float* xr = x + (size_t)n * D;
            const float* g = dout + (size_t)n * D;
            float* d = dx + (size_t)n * D;
            float r = rstd[n];
            double dot = 0.0;
            for (int i = 0; i < D; i++) dot += (double)g[i] * w[i] * xr[i];
            float c = (float)(dot / D) * r * r;
            for (int i = 0; i < D; i++) {
                d[i] += r * (g[i] * w[i] - xr[i] * c);
                if (pw) pw[i] += g[i] * xr[i] * r;
            }
        }
    }
    if (part) {
        for (int ch = 0; ch < nch; ch++)
            for (int i = 0; i < D; i++) dw[i] += part[(size_t)ch * D + i];
        free(part);
    } else { /* out of memory for the partials: serially (another summation order, so other bits) */
        for (int n = 0; n < N; n++)
            for (int i = 0; i < D; i++) dw[i] += dout[(size_t)n * D + i] * x[(size_t)n * D + i] * rstd[n];
    }
}
