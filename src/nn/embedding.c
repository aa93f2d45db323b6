/* embedding.c: token embedding lookup, forward and backward. */
#include <string.h>

#include "mxlm/model.h"

void mx_embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D) {
    /* out [N, D], tokens [N], table [V, D] */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, table + (size_t)tokens[n] * D, sizeof(float) * D);
}

void mx_embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D) {
    /* dtable [V, D] +=, dout [N, D]. Sequential over n so repeated tokens add
     * in a fixed order; parallel over columns. */
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < D; c0 += 32) {
        int c1 = c0 + 32 < D ? c0 + 32 : D;
        for (int n = 0; n < N; n++) {
            float* dst = dtable + (size_t)tokens[n] * D;
            const float* src = dout + (size_t)n * D;
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}
