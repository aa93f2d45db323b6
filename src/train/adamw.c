/* adamw.c: global gradient norm and the AdamW update (decoupled weight decay
 * on matrices only, PyTorch's formulation):
 *   p -= lr * wd * p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * Elementwise, so any thread count gives the same bits. */
#include <math.h>
#include <stdlib.h>

#include "mxlm/adamw.h"

#define SS_CHUNK 4096 /* fixed partial-sum chunks: the reduction order never depends on threads */

double mx_sum_squares(const float* g, size_t n) {
    size_t nch = (n + SS_CHUNK - 1) / SS_CHUNK;
    double* part = malloc((nch ? nch : 1) * sizeof(double)); /* [nch] */
    double tot = 0.0;
    if (!part) {
        for (size_t i = 0; i < n; i++) tot += (double)g[i] * g[i];
        return tot;
    }
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nch; c++) {
        size_t i1 = (c + 1) * SS_CHUNK < n ? (c + 1) * SS_CHUNK : n;
        double s = 0.0;
        for (size_t i = c * SS_CHUNK; i < i1; i++) s += (double)g[i] * g[i];
        part[c] = s;
    }
    for (size_t c = 0; c < nch; c++) tot += part[c];
    free(part);
    return tot;
}

void mx_adamw_update(const mx_llama* mdl, float* m, float* v, const mx_adamw_config* c, double lr, float gscale,
                     int64_t t) {
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float bc1 = (float)(1.0 - pow(c->beta1, (double)t)), bc2 = (float)(1.0 - pow(c->beta2, (double)t));
    const float flr = (float)lr;
    for (int ti = 0; ti < MX_P_COUNT; ti++) {
        const mx_param_info* in = &mdl->info[ti];
        float* p = mdl->params + in->offset;
        const float* g = mdl->grads + in->offset;
        float* mm = m + in->offset;
        float* vv = v + in->offset;
        const float decay = in->is_matrix ? 1.0f - flr * (float)c->weight_decay : 1.0f;
        const int64_t n = (int64_t)in->numel;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i] * gscale;
            float mi = b1 * mm[i] + (1.0f - b1) * gi;
            float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;
            mm[i] = mi;
            vv[i] = vi;
            float mhat = mi / bc1, vhat = vi / bc2;
            p[i] = p[i] * decay - flr * mhat / (sqrtf(vhat) + eps);
        }
    }
}
