/* hadamard.c: the normalized Walsh-Hadamard transform (FWHT), the block-diagonal rotation of
 * a matrix along either axis (hN, rhN with seeded random signs) and the hN/rhN names. */
#include "mxlm/mx.h"

#include <stdlib.h>
#include <string.h>

/* ---- Hadamard -------------------------------------------------------------- */

int mx_hadamard_valid(int n) { return n >= 2 && n <= 256 && (n & (n - 1)) == 0; }

int mx_hadamard_parse(const char* s, int* n, int* random) {
    *n = 0;
    *random = 0;
    if (!strcmp(s, "none")) return 0;
    if (s[0] == 'r') { *random = 1; s++; }
    if (s[0] != 'h' || s[1] < '0' || s[1] > '9') return -1;
    char* end;
    long v = strtol(s + 1, &end, 10);
    if (*end || v > 256 || !mx_hadamard_valid((int)v)) return -1;
    *n = (int)v;
    return 0;
}

void mx_fwht(float* x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    float s = mx_hadamard_norm(n);
    for (int i = 0; i < n; i++) x[i] *= s;
}

int mx_hadamard_rotate(float* x, int rows, int cols, int axis, int n, int random_sign, uint64_t seed,
                       uint32_t rot_id) {
    if (!mx_hadamard_valid(n)) return mx_fail(MX_EINVAL, "Hadamard size %d: must be a power of two in 2..256", n);
    int len = axis == 1 ? cols : rows;
    if (len % n) return mx_fail(MX_EINVAL, "Hadamard h%d along a dimension of %d: not a multiple of %d", n, len, n);
    float* sign = NULL;  /* rhN: the signs of the axis positions, drawn once */
    if (random_sign) {
        sign = malloc((size_t)len * sizeof *sign);
        if (!sign) return mx_fail(MX_ENOMEM, "Hadamard: out of memory");
        for (int j = 0; j < len; j++) sign[j] = mx_rh_sign(seed, rot_id, (uint64_t)j);
    }
    int outer = axis == 1 ? rows : cols;
    size_t step_o = axis == 1 ? (size_t)cols : 1, step_k = axis == 1 ? 1 : (size_t)cols;
#pragma omp parallel for schedule(static)
    for (int o = 0; o < outer; o++) {
        float buf[256];
        for (int j0 = 0; j0 < len; j0 += n) {
            float* p = x + (size_t)o * step_o + (size_t)j0 * step_k;
            for (int k = 0; k < n; k++) buf[k] = sign ? p[k * step_k] * sign[j0 + k] : p[k * step_k];
            mx_fwht(buf, n);
            for (int k = 0; k < n; k++) p[k * step_k] = buf[k];
        }
    }
    free(sign);
    return MX_OK;
}
