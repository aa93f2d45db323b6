/* swiglu.c: h = silu(gate) * up, forward and backward (elementwise). */
#include <math.h>

#include "mxlm/model.h"

void mx_swiglu_forward(float* h, const float* gate, const float* up, size_t n) {
    /* h, gate, up [n] */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float sg = 1.0f / (1.0f + expf(-g));
        h[i] = g * sg * up[i];
    }
}

void mx_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t n) {
    /* d silu(g)/dg = s (1 + g (1 - s)) */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float sg = 1.0f / (1.0f + expf(-g));
        float silu = g * sg;
        dup[i] = dh[i] * silu;
        dgate[i] = dh[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
    }
}
