/*
 * recipe.h: a precision recipe is data. Per GEMM of a linear layer (Fprop,
 * Dgrad, Wgrad) it names the format, the Hadamard rotation, the rounding of
 * each operand, the shared-scale rule and the weight layout. It is consulted
 * in one place only: the quantized linear layer (linear.h).
 *
 * Operands of each GEMM, in TN form (both with the reduction dim contiguous):
 *   GEMM   computes        operand a (rows M')      operand b (rows N')     reduction
 *   Fprop  Y  = X W^T      X   [M,K]                W   [N,K]  (weight)     K
 *   Dgrad  dX = dY W       dY  [M,N]                W^T [K,N]  (weight)     N
 *   Wgrad  dW = dY^T X     dY^T[N,M]                X^T [K,M]               M (tokens)
 */
#ifndef MXLM_RECIPE_H
#define MXLM_RECIPE_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MX_FPROP = 0, MX_DGRAD = 1, MX_WGRAD = 2 } mx_gemm_id;

typedef struct {
    mx_format fmt;
    int had_n;               /* 0: no rotation; else the Hadamard size (power of two, 2..256) */
    int had_random;          /* 1: rhN (random +-1 sign diagonal first) */
    mx_round round_a, round_b; /* MXFP4 rounding of operand a and b */
    mx_scale_rule scale;     /* MXFP4 shared-scale rule */
    int w2d;                 /* MXFP4: the weight operand uses 32x32 tiles instead of 1x32 */
} mx_gemm_recipe;

typedef enum { MX_RH_FIXED = 0, MX_RH_STEP = 1 } mx_rh_mode;

typedef struct {
    char name[128];          /* canonical name or the string it was parsed from */
    mx_gemm_recipe g[3];     /* indexed by mx_gemm_id */
    mx_rh_mode rh_mode;      /* rhN signs: fixed per layer, or fresh each step */
    mx_fp8_scaling fp8_scaling; /* FP8 per-tensor: current amax, or delayed (history of 4, most recent) */
} mx_recipe;

/* Parse a recipe: a name (mxlm_recipe_names()), or a name followed by
 * overrides, or overrides alone (applied on top of fp32):
 *   NAME[+GEMMS:key=val,key=val[;GEMMS:key=val...]][+rh=fixed|step][+fp8=current|delayed]
 * GEMMS is any of f, d, w (e.g. "fdw", "w") or "all"; keys:
 *   fmt=fp32|bf16|fp8|mxfp4 (the rows of formats.h)  had=none|hN|rhN  round=rne|sr|A/B  scale=floor|even|ceil  w=1d|2d
 * e.g. "mxfp4-fdw+w:had=h16"  or  "bf16+fdw:fmt=mxfp4,had=h16,round=rne/sr".
 * Unknown names, keys or values, and contradictions (sr, 2d or a scale rule
 * on a GEMM whose format does not allow it (formats.h), a Hadamard size that is not a power of two in 2..256)
 * are errors with a message (mx_last_error). */
int mx_recipe_parse(const char* s, mx_recipe* r);
/* Full description, e.g. "fprop=mxfp4,h16,rne/rne,floor,1d dgrad=... wgrad=...". */
void mx_recipe_describe(const mx_recipe* r, char* buf, size_t n);
/* The named recipes, NULL-terminated. */
const char* const* mx_recipe_names(void);
/* 1 if any GEMM of r uses format f. */
int mx_recipe_uses(const mx_recipe* r, mx_format f);
/* The LM head's default precision where tensor cores run it (the GPU): 1 (BF16 operands) unless the
 * recipe is all FP32 and no block is kept in BF16 (bf16_first, bf16_last). The trainer (--head auto)
 * and the GPU model read this one decision. */
int mx_recipe_head_bf16(const mx_recipe* r, int bf16_first, int bf16_last);

#ifdef __cplusplus
}
#endif
#endif
