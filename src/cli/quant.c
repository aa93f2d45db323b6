/* quant.c: ./mxlm quant — the numerics as a black box.
 * Reads R*C little-endian float32 (row-major), writes Q(rotate(X)) in the same
 * shape: the dequantized values a GEMM would consume, rotation not undone. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "mxlm/mx.h"

static float* read_f32(const char* path, size_t n) {
    FILE* f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "mxlm quant: cannot open %s: %s\n", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size != n * 4) {
        fprintf(stderr, "mxlm quant: %s has %lld bytes; --rows x --cols needs %zu (float32)\n", path,
                (long long)st.st_size, n * 4);
        fclose(f);
        return NULL;
    }
    float* x = malloc(n * 4 + 1);
    if (!x) { fprintf(stderr, "mxlm quant: out of memory for %zu floats\n", n); fclose(f); return NULL; }
    size_t got = fread(x, 4, n, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != n || extra) {
        fprintf(stderr, "mxlm quant: %s: %s (read %zu of %zu floats)\n", path,
                extra ? "longer than --rows x --cols" : "too short", got, n);
        free(x);
        return NULL;
    }
    return x;
}

int cmd_quant(int argc, char** argv) {
    int rows = 0, cols = 0;
    const char *layout_s = "1x32", *scale_s = "floor", *round_s = "rne", *had_s = "none";
    const char *format_s = "mxfp4", *in = NULL, *out = NULL, *codes_out = NULL, *scales_out = NULL;
    uint64_t seed = 0, tensor_id = 0, rot_id = 0;
    const cli_opt opts[] = {
        {"rows", OPT_INT, &rows, "rows of the input matrix (required)"},
        {"cols", OPT_INT, &cols, "columns of the input matrix (required)"},
        {"format", OPT_STR, &format_s, "mxfp4 (default) | e4m3 | e5m2 (FP8, per-tensor current scaling) | bf16"},
        {"layout", OPT_STR, &layout_s, "1x32 (along rows, default) | 32x1 (along columns) | 32x32 (tiles)"},
        {"scale", OPT_STR, &scale_s, "shared-scale rule: floor (OCP, default) | even | ceil"},
        {"round", OPT_STR, &round_s, "rne (default) | sr (stochastic, Philox4x32-10)"},
        {"hadamard", OPT_STR, &had_s, "none (default) | hN | rhN, N a power of two 2..256"},
        {"seed", OPT_U64, &seed, "seed for sr bits and rhN signs (default 0)"},
        {"tensor-id", OPT_U64, &tensor_id, "stream id of the sr bits (default 0)"},
        {"rot-id", OPT_U64, &rot_id, "stream id of the rhN signs (default 0)"},
        {"in", OPT_STR, &in, "input file: rows*cols float32, little-endian, row-major (required)"},
        {"out", OPT_STR, &out, "output file: dequantized float32, same shape (required)"},
        {"codes", OPT_STR, &codes_out, "also write the codes (mxfp4: packed E2M1, GEMM order; fp8: a byte each)"},
        {"scales", OPT_STR, &scales_out, "also write the scales (mxfp4: E8M0 bytes; fp8: the float32 scale)"},
    };
    const char* usage = "--rows R --cols C --in X.f32 --out Y.f32 [options]\n\n"
                        "Writes quantize(rotate(X)): for 1x32 blocks and rotation run along rows, for 32x1 along\n"
                        "columns, for 32x32 the tiles are 32x32 and the rotation runs along rows. Codes of 32x1\n"
                        "are stored transposed ([cols, rows/2]), scales as [rows, cols/32], [cols, rows/32] or\n"
                        "[rows/32, cols/32]; two codes a byte, the even element in the low nibble.";
    int rc = cli_parse(argc, argv, "quant", usage, opts, (int)(sizeof opts / sizeof opts[0]), NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;

    int layout = mx_layout_parse(layout_s), scale = mx_scale_parse(scale_s), round = mx_round_parse(round_s);
    int had_n, had_rand;
    int fmt = !strcmp(format_s, "mxfp4") ? 0 : !strcmp(format_s, "e4m3") ? 1 : !strcmp(format_s, "e5m2") ? 2
            : !strcmp(format_s, "bf16") ? 3 : -1;
    const char* err = NULL;
    if (!in || !out) err = "--in and --out are required";
    else if (rows <= 0 || cols <= 0) err = "--rows and --cols are required and must be positive";
    else if (fmt < 0) err = "--format must be mxfp4, e4m3, e5m2 or bf16";
    else if (layout < 0) err = "--layout must be 1x32, 32x1 or 32x32";
    else if (scale < 0) err = "--scale must be floor, even or ceil";
    else if (round < 0) err = "--round must be rne or sr";
    else if (mx_hadamard_parse(had_s, &had_n, &had_rand)) err = "--hadamard must be none, hN or rhN with N a power of two in 2..256";
    else if (fmt != 0 && round == MX_ROUND_SR) err = "--round sr applies to --format mxfp4 only";
    else if (tensor_id > 0xffffffffu || rot_id > 0xffffffffu) err = "--tensor-id and --rot-id are 32-bit";
    if (err) { fprintf(stderr, "mxlm quant: %s\n", err); return 2; }
    if (fmt == 0 && mx_check_shape(rows, cols, (mx_layout)layout)) {
        fprintf(stderr, "mxlm quant: %s\n", mx_last_error());
        return 2;
    }
    int axis = layout == MX_LAYOUT_32x1 ? 0 : 1;
    if (had_n && (axis ? cols : rows) % had_n) {
        fprintf(stderr, "mxlm quant: --hadamard %s runs along %s, whose length %d is not a multiple of %d\n", had_s,
                axis ? "rows (cols)" : "columns (rows)", axis ? cols : rows, had_n);
        return 2;
    }
    size_t n = (size_t)rows * (size_t)cols;
    float* x = read_f32(in, n);
    if (!x) return 1;
    int status = 1;
    void* codes = NULL;
    size_t codes_n = 0;
    mx_fp4 t = {0};
    if (had_n && mx_hadamard_rotate(x, rows, cols, axis, had_n, had_rand, seed, (uint32_t)rot_id)) {
        fprintf(stderr, "mxlm quant: %s\n", mx_last_error());
        goto done;
    }
    float fp8_scale = 1.0f;
    if (fmt == 0) {
        mx_qopts o = {(mx_layout)layout, (mx_scale_rule)scale, (mx_round)round, seed, (uint32_t)tensor_id};
        if (mx_fp4_alloc(&t, rows, cols, o.layout) || mx_quantize_fp4(x, rows, cols, &o, &t) ||
            mx_dequantize_fp4(&t, x)) {
            fprintf(stderr, "mxlm quant: %s\n", mx_last_error());
            goto done;
        }
        codes = t.codes;
        codes_n = n / 2;
    } else if (fmt == 3) {
        mx_bf16_fakequant(x, x, n);
    } else {
        mx_fp8_kind k = fmt == 1 ? MX_FP8_E4M3 : MX_FP8_E5M2;
        fp8_scale = mx_fp8_scale_for_amax(mx_amax(x, n), k);
        codes = malloc(n);
        if (!codes) { fprintf(stderr, "mxlm quant: out of memory\n"); goto done; }
        codes_n = n;
        mx_fp8_quantize(x, n, fp8_scale, k, codes);
        mx_fp8_dequantize(codes, n, fp8_scale, k, x);
    }
    if ((codes_out || scales_out) && fmt == 3) {
        fprintf(stderr, "mxlm quant: --codes/--scales do not apply to bf16\n");
        goto done;
    }
    if (cli_write_file_atomic(out, x, n * 4)) goto done;
    if (codes_out && cli_write_file_atomic(codes_out, codes, codes_n)) goto done;
    if (scales_out) {
        if (fmt == 0 ? cli_write_file_atomic(scales_out, t.scales, mx_fp4_n_scales(rows, cols, t.layout))
                     : cli_write_file_atomic(scales_out, &fp8_scale, 4))
            goto done;
    }
    status = 0;
done:
    if (fmt != 0) free(codes);
    mx_fp4_free(&t);
    free(x);
    return status;
}
