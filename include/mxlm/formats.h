/*
 * formats.h: the number formats as data. One row per format of a GEMM's
 * operands (fp32, bf16, fp8, mxfp4, nvfp4, mxfp8): what its elements and scales are,
 * which operand layouts and roundings it allows, which scale rules and FP8
 * scalings apply, and what the GPU fast path runs. The recipe grammar
 * (src/nn/recipe.c), the validity checks (recipe parsing, the linear layer's
 * dimension checks on the CPU and the GPU, the trainer's device check), mxlm
 * quant and the linear layer's dispatch read this table (src/mx/format.c); a
 * new format is a row here plus its quantizers (NVFP4: E2M1 in blocks of 16
 * with an E4M3 scale and an FP32 tensor scale, src/mx/nvfp4.c; MXFP8: E4M3 in
 * blocks of 32 with an E8M0 scale, src/mx/mxfp8.c; both CPU only for now).
 */
#ifndef MXLM_FORMATS_H
#define MXLM_FORMATS_H
#include <stddef.h>
#include "mxlm/mx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The formats a GEMM of a recipe can use (the recipe word is the row's name). */
typedef enum {
    MX_FMT_FP32 = 0, MX_FMT_BF16 = 1, MX_FMT_FP8 = 2, MX_FMT_MXFP4 = 3, MX_FMT_NVFP4 = 4, MX_FMT_MXFP8 = 5,
    MX_FMT_COUNT
} mx_format;

/* Per-tensor scaling of FP8: current amax, or delayed (history of 4, most recent). */
typedef enum { MX_FP8_CURRENT = 0, MX_FP8_DELAYED = 1 } mx_fp8_scaling;

/* What an element is. */
typedef enum {
    MX_ELEM_FP32 = 0,  /* IEEE binary32 (no quantization) */
    MX_ELEM_BF16 = 1,  /* bfloat16, round to nearest even */
    MX_ELEM_FP8 = 2,   /* E4M3 (activations, weights) / E5M2 (gradients): mx_operand_fp8_kind (linear_plan.h) */
    MX_ELEM_E2M1 = 3,  /* FP4 E2M1, two per byte */
    MX_ELEM_E4M3 = 4,  /* FP8 E4M3 (OCP fn) on every operand (MXFP8) */
} mx_elem_type;

/* How a value's scale is shared. */
typedef enum {
    MX_SCALE_NONE = 0,   /* no scale */
    MX_SCALE_TENSOR = 1, /* one FP32 scale per tensor (amax: current or delayed) */
    MX_SCALE_E8M0 = 2,   /* one E8M0 power of two per block of `block` elements along the reduction dim */
    MX_SCALE_E4M3_TENSOR = 3, /* one E4M3 scale per block of `block` and one FP32 scale per tensor (NVFP4) */
} mx_scale_type;

/* Bit masks of the table's sets. */
#define MX_BIT(x) (1u << (unsigned)(x))

typedef struct {
    mx_format id;
    const char* name;      /* the recipe word (fmt=NAME) and config.txt's */
    const char* label;     /* as messages write it ("MXFP4") */
    mx_elem_type elem;
    int elem_bits;         /* bits per element as stored (8 for FP8, 4 for E2M1) */
    int block;             /* elements per shared scale along the reduction dim (0: none or per tensor) */
    int scale;             /* an mx_scale_type (int: a switch over it elsewhere may not list every type) */
    unsigned layouts;      /* MX_BIT(mx_layout) the format has (mxlm quant --layout); the weight operand of a
                              GEMM uses the 1D one along rows, or the 2D tile for w=2d (0: n/a) */
    unsigned roundings;    /* MX_BIT(mx_round) allowed per operand */
    unsigned scale_rules;  /* MX_BIT(mx_scale_rule) of the shared-scale rules that apply (0: none) */
    unsigned fp8_scalings; /* MX_BIT(mx_fp8_scaling) allowed (0: per-tensor scaling does not apply) */
    /* the GPU fast path (src/cuda/linear.cu) */
    int gpu;               /* 1: the GPU runs this format */
    int gpu_hadamard;      /* 1: the GPU rotates operands of this format (hN / rhN) */
    unsigned gpu_fp8_scalings; /* MX_BIT(mx_fp8_scaling) the GPU runs */
} mx_format_info;

/* The row of f (NULL if f is not a format). */
const mx_format_info* mx_format_get(mx_format f);
/* The row named s (NULL if none). */
const mx_format_info* mx_format_find(const char* s);
/* Format id by name (-1: unknown) and name by id ("?" if none). */
int mx_format_parse(const char* s);
const char* mx_format_name(mx_format f);
/* "A, B or C": the names of the formats for which pred(row) holds, into buf (the messages' lists). */
const char* mx_format_list(int (*pred)(const mx_format_info*), char* buf, size_t n);
int mx_format_any(const mx_format_info* f);          /* every row */
int mx_format_has_sr(const mx_format_info* f);       /* stochastic rounding allowed */
int mx_format_has_2d(const mx_format_info* f);       /* 2D weight tiles (32x32, 16x16) allowed */
/* The layout of a GEMM operand of format f: its 1D layout along rows, or its 2D tile (w2d). */
mx_layout mx_format_layout(const mx_format_info* f, int w2d);
int mx_format_has_scale_rule(const mx_format_info* f);
int mx_format_gpu_rotates(const mx_format_info* f);

#ifdef __cplusplus
}
#endif
#endif
