/* rope.c: rotary position embedding, HF Llama "rotate half" convention.
 * Pairs (i, i + hd/2) rotate by angle pos * theta^(-2i/hd). */
#include <math.h>

#include "mxlm/model.h"

void mx_rope_tables(float* cos_t, float* sin_t, int T, int hd, float theta) {
    /* cos_t, sin_t [T, hd/2]. inv_freq as HF computes it (float32), the angle
     * pos * inv_freq rounded to float32, cos/sin in double then rounded. */
    int h2 = hd / 2;
    for (int i = 0; i < h2; i++) {
        float inv = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)hd));
        for (int t = 0; t < T; t++) {
            float a = (float)t * inv;
            cos_t[(size_t)t * h2 + i] = (float)cos((double)a);
            sin_t[(size_t)t * h2 + i] = (float)sin((double)a);
        }
    }
}

/* x [B*T, nh*hd] in place: each pair (i, i + hd/2) of a head rotated by
 * +angle (sign 1, forward) or -angle (sign -1: the transpose, backward).
 * Negating sin is exact, so both directions round like their own formula. */
static void rope_rotate(float* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd, float sign) {
    int h2 = hd / 2;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float* c = cos_t + (size_t)(n % T) * h2;
        const float* s = sin_t + (size_t)(n % T) * h2;
        for (int h = 0; h < nh; h++) {
            float* p = x + ((size_t)n * nh + h) * hd;
            for (int i = 0; i < h2; i++) {
                float a = p[i], b = p[i + h2], si = sign * s[i];
                p[i] = a * c[i] - b * si;
                p[i + h2] = b * c[i] + a * si;
            }
        }
    }
}

void mx_rope_forward(float* x, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd) {
    rope_rotate(x, cos_t, sin_t, B, T, nh, hd, 1.0f);
}

void mx_rope_backward(float* dx, const float* cos_t, const float* sin_t, int B, int T, int nh, int hd) {
    rope_rotate(dx, cos_t, sin_t, B, T, nh, hd, -1.0f);
}
