/* fuzz_quant.c: libFuzzer harness for block quantization. The first bytes
 * choose shape, layout, scale rule, rounding and rotation; the rest are the
 * float32 values (any bit patterns: NaN, Inf, subnormals). Invariants:
 * fake-quant == quantize + dequantize bit for bit, every scale is a valid
 * E8M0 byte, a block's values are within its scale's range (|q| <= 6 * 2^e),
 * and a NaN scale only where the block held a NaN or Inf. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/mx.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    if (n < 8) return 0;
    int layout = data[0] % 3, rule = data[1] % 3, round = data[2] & 1;
    int had = data[3] % 5;  /* none, h2, h16, h32, rh16 */
    int rows = 32 * (1 + (data[4] & 1)), cols = 32 * (1 + ((data[4] >> 1) & 1));
    if (layout == MX_LAYOUT_1x32) rows = 1 + (data[4] >> 2) % 3;
    if (layout == MX_LAYOUT_32x1) cols = 1 + (data[4] >> 2) % 3;
    uint64_t seed = data[5] | ((uint64_t)data[6] << 8);
    size_t cnt = (size_t)rows * cols;
    float* x = calloc(cnt, sizeof(float));
    float* a = malloc(cnt * sizeof(float));
    float* b = malloc(cnt * sizeof(float));
    memcpy(x, data + 8, (n - 8) < cnt * 4 ? n - 8 : cnt * 4);
    int axis = layout == MX_LAYOUT_32x1 ? 0 : 1;
    static const int hn[5] = {0, 2, 16, 32, 16};
    if (hn[had] && (axis ? cols : rows) % hn[had] == 0)
        mx_hadamard_rotate(x, rows, cols, axis, hn[had], had == 4, seed, 3);
    mx_qopts o = {(mx_layout)layout, (mx_scale_rule)rule, (mx_round)round, seed, 1};
    mx_fp4 t;
    if (mx_fp4_alloc(&t, rows, cols, o.layout)) abort();
    if (mx_quantize_fp4(x, rows, cols, &o, &t)) abort();
    mx_dequantize_fp4(&t, a);
    int64_t clipped;
    if (mx_fakequant_fp4(x, b, rows, cols, &o, &clipped)) abort();
    if (clipped != t.n_clipped_blocks) abort();
    for (size_t i = 0; i < cnt; i++) {
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) abort();
        int r = (int)(i / cols), c = (int)(i % cols);
        uint8_t sb = mx_fp4_scale_at(&t, r, c);
        if (sb == 0xFF) {
            if (!isnan(a[i])) abort();
        } else if (!(fabsf(a[i]) <= 6.0f * mx_e8m0_decode(sb))) abort();
        if (sb != 0xFF && !isfinite(x[i])) abort();
    }
    mx_fp4_free(&t);
    free(x); free(a); free(b);
    return 0;
}
