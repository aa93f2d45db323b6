/* quant.c: ./mxlm quant — the numerics as a black box.
 * Reads R*C little-endian float32 (row-major), writes Q(rotate(X)) in the same
 * shape: the dequantized values a GEMM would consume, rotation not undone. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "mxlm/formats.h"
#include "mxlm/mx.h"
#include "mxlm/util.h"

static float* read_f32(const char* path, size_t n) {
    FILE* f = mx_fopen_input(path, NULL);
    if (!f) { fprintf(stderr, "mxlm quant: %s\n", mx_last_error()); return NULL; }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "mxlm quant: --in %s is a directory, not a file of float32 values\n", path);
        fclose(f);
        return NULL;
    }
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

/* --format: the block formats are rows of the format table; e4m3 / e5m2 / bf16 are the per-tensor
 * FP8 kinds and the BF16 round trip. */
enum { Q_MXFP4, Q_E4M3, Q_E5M2, Q_BF16, Q_NVFP4, Q_MXFP8 };

int cmd_quant(int argc, char** argv) {
    int rows = 0, cols = 0;
    const char *layout_s = NULL, *scale_s = NULL, *round_s = "rne", *had_s = "none";
    const char *format_s = "mxfp4", *in = NULL, *out = NULL, *codes_out = NULL, *scales_out = NULL, *ts_out = NULL;
    uint64_t seed = 0, tensor_id = 0, rot_id = 0;
    const cli_opt opts[] = {
        {"rows", OPT_INT, &rows, "rows of the input matrix (required)"},
        {"cols", OPT_INT, &cols, "columns of the input matrix (required)"},
        {"format", OPT_STR, &format_s, "mxfp4 (default) | nvfp4 | mxfp8 | e4m3 | e5m2 (FP8, per-tensor current scaling) | bf16"},
        {"layout", OPT_STR, &layout_s, "mxfp4: 1x32 (default) | 32x1 | 32x32; nvfp4: 1x16 (default) | 16x1 | 16x16; mxfp8: 1x32 (default) | 32x1"},
        {"scale", OPT_STR, &scale_s, "shared-scale rule: floor (OCP, default) | even | ceil | dither (mxfp4); floor | ceil (mxfp8)"},
        {"round", OPT_STR, &round_s, "rne (default) | sr (stochastic, Philox4x32-10; mxfp4, nvfp4)"},
        {"hadamard", OPT_STR, &had_s, "none (default) | hN | rhN, N a power of two 2..256"},
        {"seed", OPT_U64, &seed, "seed for sr bits and rhN signs (default 0)"},
        {"tensor-id", OPT_U64, &tensor_id, "stream id of the sr bits (default 0)"},
        {"rot-id", OPT_U64, &rot_id, "stream id of the rhN signs (default 0)"},
        {"in", OPT_PATH, &in, "input file: rows*cols float32, little-endian, row-major (required)"},
        {"out", OPT_PATH, &out, "output file: dequantized float32, same shape (required)"},
        {"codes", OPT_PATH, &codes_out, "also write the codes (mxfp4, nvfp4: packed E2M1, GEMM order; mxfp8, fp8: a byte each)"},
        {"scales", OPT_PATH, &scales_out, "also write the scales (mxfp4, mxfp8: E8M0 bytes; nvfp4: E4M3 bytes; fp8: the float32 scale)"},
        {"tensor-scale", OPT_PATH, &ts_out, "nvfp4: also write the FP32 tensor scale S (4 bytes, little-endian)"},
    };
    const char* usage = "--rows R --cols C --in X.f32 --out Y.f32 [options]\n\n"
                        "Writes quantize(rotate(X)): for 1xB blocks and rotation run along rows, for Bx1 along\n"
                        "columns, for BxB the tiles are BxB and the rotation runs along rows (B = 32 for mxfp4 and\n"
                        "mxfp8, 16 for nvfp4). Codes of Bx1 are stored transposed ([cols, rows/2] packed, or\n"
                        "[cols, rows] for mxfp8), scales as [rows, cols/B], [cols, rows/B] or [rows/B, cols/B];\n"
                        "packed codes two a byte, the even element in the low nibble. nvfp4 decodes as\n"
                        "(E2M1(q) * E4M3(sb)) / S with S in --tensor-scale (docs/numerics.md).";
    int rc = cli_parse(argc, argv, "quant", usage, opts, (int)(sizeof opts / sizeof opts[0]), NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;

    int fmt = !strcmp(format_s, "mxfp4") ? Q_MXFP4 : !strcmp(format_s, "e4m3") ? Q_E4M3 : !strcmp(format_s, "e5m2") ? Q_E5M2
            : !strcmp(format_s, "bf16") ? Q_BF16 : !strcmp(format_s, "nvfp4") ? Q_NVFP4 : !strcmp(format_s, "mxfp8") ? Q_MXFP8 : -1;
    /* the block formats' rows: layouts, roundings and scale rules come from the table */
    const mx_format_info* row = fmt == Q_MXFP4 ? mx_format_get(MX_FMT_MXFP4) : fmt == Q_NVFP4 ? mx_format_get(MX_FMT_NVFP4)
                              : fmt == Q_MXFP8 ? mx_format_get(MX_FMT_MXFP8) : NULL;
    if (!layout_s) layout_s = fmt == Q_NVFP4 ? "1x16" : "1x32";
    int layout = mx_layout_parse(layout_s), scale = mx_scale_parse(scale_s ? scale_s : "floor"), round = mx_round_parse(round_s);
    int had_n, had_rand;
    char msg[256];
    const char* err = NULL;
    if (!in || !out) err = "--in and --out are required";
    else if (rows <= 0 || cols <= 0) err = "--rows and --cols are required and must be positive";
    else if ((int64_t)rows * cols > ((int64_t)1 << 31)) err = "--rows x --cols is at most 2^31 elements (8 GiB of float32)";
    else if (fmt < 0) err = "--format must be mxfp4, nvfp4, mxfp8, e4m3, e5m2 or bf16";
    else if (layout < 0 || (row && !(row->layouts & MX_BIT(layout))) || (!row && strcmp(layout_s, "1x32"))) {
        snprintf(msg, sizeof msg, "--layout %s does not apply to --format %s (%s)", layout_s, format_s,
                 fmt == Q_MXFP4 ? "1x32, 32x1 or 32x32" : fmt == Q_NVFP4 ? "1x16, 16x1 or 16x16"
                 : fmt == Q_MXFP8 ? "1x32 or 32x1" : "per-tensor: no layout");
        err = msg;
    } else if (scale < 0) err = "--scale must be floor, even, ceil or dither";
    else if (scale_s && !(row && (row->scale_rules & MX_BIT(scale)))) {
        snprintf(msg, sizeof msg, "--scale %s does not apply to --format %s (%s)", scale_s, format_s,
                 fmt == Q_MXFP4 ? "floor, even, ceil or dither" : fmt == Q_MXFP8 ? "floor or ceil"
                 : fmt == Q_NVFP4 ? "its block scale is E4M3 of amax/6 x S: no rule" : "no shared scale");
        err = msg;
    } else if (round < 0) err = "--round must be rne or sr";
    else if (mx_hadamard_parse(had_s, &had_n, &had_rand)) err = "--hadamard must be none, hN or rhN with N a power of two in 2..256";
    else if (round == MX_ROUND_SR && !(row && (row->roundings & MX_BIT(MX_ROUND_SR)))) err = "--round sr applies to --format mxfp4 and nvfp4 only";
    else if (tensor_id > 0xffffffffu || rot_id > 0xffffffffu) err = "--tensor-id and --rot-id are 32-bit";
    else if (ts_out && fmt != Q_NVFP4) err = "--tensor-scale applies to --format nvfp4 only";
    else if ((codes_out || scales_out) && fmt == Q_BF16) err = "--codes/--scales do not apply to bf16";
    if (err) { fprintf(stderr, "mxlm quant: %s\n", err); return 2; }
    const char* const files[] = {in, out, codes_out, scales_out, ts_out};
    static const char* const fnames[] = {"--in", "--out", "--codes", "--scales", "--tensor-scale"};
    if (cli_paths_distinct("quant", fnames, files, 5)) return 2;
    if (row && mx_check_shape(rows, cols, (mx_layout)layout)) {
        fprintf(stderr, "mxlm quant: %s\n", mx_last_error());
        return 2;
    }
    int axis = mx_layout_is_cols((mx_layout)layout) ? 0 : 1;
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
    const void* scales = NULL;
    size_t codes_n = 0, scales_n = 0;
    mx_fp4 t = {0};
    mx_nvfp4 tn = {0};
    mx_mxfp8 t8 = {0};
    if (had_n && mx_hadamard_rotate(x, rows, cols, axis, had_n, had_rand, seed, (uint32_t)rot_id)) {
        fprintf(stderr, "mxlm quant: %s\n", mx_last_error());
        goto done;
    }
    float fp8_scale = 1.0f;
    mx_qopts o = {(mx_layout)layout, (mx_scale_rule)scale, (mx_round)round, seed, (uint32_t)tensor_id};
    if (fmt == Q_MXFP4) {
        if (mx_fp4_alloc(&t, rows, cols, o.layout) || mx_quantize_fp4(x, rows, cols, &o, &t) ||
            mx_dequantize_fp4(&t, x)) {
            fprintf(stderr, "mxlm quant: %s\n", mx_last_error());
            goto done;
        }
        codes = t.codes; codes_n = n / 2;
        scales = t.scales; scales_n = mx_fp4_n_scales(rows, cols, t.layout);
    } else if (fmt == Q_NVFP4) {
        if (mx_nvfp4_alloc(&tn, rows, cols, o.layout) || mx_quantize_nvfp4(x, rows, cols, &o, &tn) ||
            mx_dequantize_nvfp4(&tn, x)) {
            fprintf(stderr, "mxlm quant: %s\n", mx_last_error());
            goto done;
        }
        codes = tn.codes; codes_n = n / 2;
        scales = tn.scales; scales_n = mx_nvfp4_n_scales(rows, cols, tn.layout);
    } else if (fmt == Q_MXFP8) {
        if (mx_mxfp8_alloc(&t8, rows, cols, o.layout) || mx_quantize_mxfp8(x, rows, cols, &o, &t8) ||
            mx_dequantize_mxfp8(&t8, x)) {
            fprintf(stderr, "mxlm quant: %s\n", mx_last_error());
            goto done;
        }
        codes = t8.codes; codes_n = n;
        scales = t8.scales; scales_n = n / MX_BLOCK;
    } else if (fmt == Q_BF16) {
        mx_bf16_fakequant(x, x, n);
    } else {
        mx_fp8_kind k = fmt == Q_E4M3 ? MX_FP8_E4M3 : MX_FP8_E5M2;
        fp8_scale = mx_fp8_scale_for_amax(mx_amax(x, n), k);
        codes = malloc(n);
        if (!codes) { fprintf(stderr, "mxlm quant: out of memory\n"); goto done; }
        codes_n = n;
        mx_fp8_quantize(x, n, fp8_scale, k, codes);
        mx_fp8_dequantize(codes, n, fp8_scale, k, x);
        scales = &fp8_scale; scales_n = 4;
    }
    if (cli_write_file_atomic(out, x, n * 4)) goto done;
    if (codes_out && cli_write_file_atomic(codes_out, codes, codes_n)) goto done;
    if (scales_out && cli_write_file_atomic(scales_out, scales, scales_n)) goto done;
    if (ts_out && cli_write_file_atomic(ts_out, &tn.tensor_scale, 4)) goto done;
    status = 0;
done:
    if (fmt == Q_E4M3 || fmt == Q_E5M2) free(codes);
    mx_fp4_free(&t);
    mx_nvfp4_free(&tn);
    mx_mxfp8_free(&t8);
    free(x);
    return status;
}
