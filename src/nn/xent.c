/* xent.c: softmax cross-entropy over the vocabulary, forward and backward. */
#include <math.h>

#include "mxlm/model.h"

float mx_xent_forward(float* logits, float* losses, const int32_t* targets, int N, int V) {
    /* logits [N, V] -> probabilities in place; losses [N]; targets [N] */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* z = logits + (size_t)n * V;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++) mx = z[i] > mx ? z[i] : mx;
        float zt = z[targets[n]] - mx;
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            float e = expf(z[i] - mx);
            z[i] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < V; i++) z[i] *= inv;
        losses[n] = (float)(log(sum) - (double)zt); /* -log softmax_t; NaN logits stay NaN */
    }
    double tot = 0.0;
    for (int n = 0; n < N; n++) tot += losses[n];
    return (float)(tot / N);
}

void mx_xent_backward(float* probs, const int32_t* targets, int N, int V, float scale) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* p = probs + (size_t)n * V;
        p[targets[n]] -= 1.0f;
        for (int i = 0; i < V; i++) p[i] *= scale;
    }
}
