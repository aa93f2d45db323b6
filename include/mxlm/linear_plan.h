/*
 * linear_plan.h: what the recipe asks of each operand of each GEMM of a linear
 * layer, written once for the CPU layer (src/nn/linear.c) and its GPU twin
 * (src/cuda/linear.cu): the GEMM names, the FP8 kind of an operand, whether it
 * is the weight, its MXFP4 layout, rounding and random streams, and the
 * dimension checks every format's row asks for (formats.h). Static inline, C
 * and CUDA host code alike (in the manner of mx_scalar.h).
 *
 * Random streams (operand o: 0 = a, 1 = b; GEMM g; linear layer L; step s):
 *   SR bits:     mx_rand_u32(seed + s * MX_GOLDEN, MX_RNG_SR, L * 6 + g * 2 + o, r * R + c)
 *                for element (r, c) of the TN operand [rows, R];
 *   rhN signs:   mx_rh_sign(seed', L * 3 + g, j), j the position along the reduction dim, shared by
 *                both operands; seed' = seed (rh=fixed) or seed + s * MX_GOLDEN (rh=step).
 */
#ifndef MXLM_LINEAR_PLAN_H
#define MXLM_LINEAR_PLAN_H
#include <stdint.h>
#include "mxlm/recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The golden-ratio increment that separates the steps' random streams. */
#define MX_GOLDEN 0x9E3779B97F4A7C15ull

static inline const char* mx_gemm_name(mx_gemm_id g) {
    return g == MX_FPROP ? "fprop" : g == MX_DGRAD ? "dgrad" : g == MX_WGRAD ? "wgrad" : "?";
}

/* Operand b of Fprop and Dgrad is the weight (Wgrad has none). */
static inline int mx_operand_is_weight(mx_gemm_id g, int o) { return o == 1 && g != MX_WGRAD; }

/* FP8 kinds of the hybrid recipe: E4M3 for activations and weights, E5M2 for gradients
 * (operand a of Dgrad and Wgrad is dY). */
static inline mx_fp8_kind mx_operand_fp8_kind(mx_gemm_id g, int o) {
    return (o == 0 && g != MX_FPROP) ? MX_FP8_E5M2 : MX_FP8_E4M3;
}

/* The SR stream of operand o of GEMM g in linear layer `layer`. */
static inline uint32_t mx_sr_tensor_id(uint32_t layer, mx_gemm_id g, int o) {
    return layer * 6u + (uint32_t)g * 2u + (uint32_t)o;
}
/* The SR seed of a step. */
static inline uint64_t mx_sr_seed(uint64_t seed, uint64_t step) { return seed + step * MX_GOLDEN; }
/* The rotation (rhN signs) of GEMM g in linear layer `layer`, and its seed. */
static inline uint32_t mx_rot_id(uint32_t layer, mx_gemm_id g) { return layer * 3u + (uint32_t)g; }
static inline uint64_t mx_rh_seed(const mx_recipe* r, uint64_t seed, uint64_t step) {
    return seed + (r->rh_mode == MX_RH_STEP ? step * MX_GOLDEN : 0);
}

/* How operand o of GEMM g is block-quantized ([rows, R], the reduction dim R contiguous): the
 * weight in 32x32 tiles when the recipe says w=2d, else blocks along R. */
static inline mx_qopts mx_operand_qopts(const mx_gemm_recipe* q, mx_gemm_id g, int o, uint64_t seed, uint64_t step,
                                        uint32_t layer) {
    mx_qopts qo;
    qo.layout = (mx_operand_is_weight(g, o) && q->w2d) ? MX_LAYOUT_32x32 : MX_LAYOUT_1x32;
    qo.scale = q->scale;
    qo.round = o == 0 ? q->round_a : q->round_b;
    qo.seed = mx_sr_seed(seed, step);
    qo.tensor_id = mx_sr_tensor_id(layer, g, o);
    return qo;
}

/* The shape checks of C[Ma,Nb] = A[Ma,R] B[Nb,R]^T under GEMM g's recipe: positive, a Hadamard
 * size dividing R, and for a block format (the row's block) R a multiple of the block and, with
 * 32x32 weight tiles, the weight's rows too. */
static inline int mx_gemm_check_dims(mx_gemm_id g, const mx_gemm_recipe* q, int Ma, int Nb, int R) {
    const mx_format_info* f = mx_format_get(q->fmt);
    if (!f) return mx_fail(MX_EINVAL, "linear %s: unknown format %d", mx_gemm_name(g), (int)q->fmt);
    if (Ma <= 0 || Nb <= 0 || R <= 0) return mx_fail(MX_EINVAL, "linear %s: empty shape %dx%dx%d", mx_gemm_name(g), Ma, Nb, R);
    if (q->had_n && R % q->had_n)
        return mx_fail(MX_EINVAL, "linear %s: Hadamard h%d does not divide the reduction dim %d", mx_gemm_name(g),
                       q->had_n, R);
    if (f->block) {
        if (R % f->block)
            return mx_fail(MX_EINVAL, "linear %s: %s needs the reduction dim (%d) to be a multiple of %d",
                           mx_gemm_name(g), f->label, R, f->block);
        if (q->w2d && mx_operand_is_weight(g, 1) && Nb % f->block)
            return mx_fail(MX_EINVAL, "linear %s: %dx%d weight tiles need %d to be a multiple of %d", mx_gemm_name(g),
                           f->block, f->block, Nb, f->block);
    }
    return MX_OK;
}

/* GEMM g of the recipe takes plain BF16 operands (no block scale, no rotation): an operand may then
 * come as a BF16 copy made by the caller (the GPU model's shared and BF16-only activations). */
static inline int mx_gemm_bf16_operands(const mx_recipe* r, mx_gemm_id g) {
    const mx_format_info* f = r ? mx_format_get(r->g[g].fmt) : NULL;
    return f && f->scale == MX_SCALE_NONE && f->elem != MX_ELEM_FP32 && !r->g[g].had_n;
}

/* The GPU model's BF16 storage (act16) applies to recipe r: all three GEMMs take plain BF16 operands, so
 * the GEMM outputs gate, up (Fprop) and dhid (Dgrad) may be kept in BF16 and the activations only BF16
 * GEMMs read need no FP32 copy. The CPU model (mx_llama.act16) rounds at the same points. */
static inline int mx_act16_applies(const mx_recipe* r) {
    return mx_gemm_bf16_operands(r, MX_FPROP) && mx_gemm_bf16_operands(r, MX_DGRAD) &&
           mx_gemm_bf16_operands(r, MX_WGRAD);
}

/* GEMM g of r runs through the GPU's reference-form path (linear.cu's block_gemm: NVFP4, MXFP8, MXFP4 under
 * the dither rule). */
static inline int mx_gemm_gpu_reference_form(const mx_recipe* r, mx_gemm_id g) {
    const mx_gemm_recipe* q = &r->g[g];
    const mx_format_info* f = mx_format_get(q->fmt);
    return f && (f->scale == MX_SCALE_E4M3_TENSOR || (f->scale == MX_SCALE_E8M0 && f->elem != MX_ELEM_E2M1) ||
                 (f->elem == MX_ELEM_E2M1 && q->scale == MX_SCALE_DITHER));
}

/* GEMM g of r is MXFP4 through mx/mxfp4.cu's quantizers (the fast path's E4M3 fold unless --gemm exact):
 * an MXFP4 format outside the reference form. */
static inline int mx_gemm_gpu_mxfp4(const mx_recipe* r, mx_gemm_id g) {
    const mx_format_info* f = mx_format_get(r->g[g].fmt);
    return f && f->scale == MX_SCALE_E8M0 && f->elem == MX_ELEM_E2M1 && !mx_gemm_gpu_reference_form(r, g);
}

/* GEMM g of r can read its activation operands as BF16 tensors (the GPU model's BF16 storage, act16): plain
 * BF16 operands, or quantized by the GPU quantizers that read BF16 as they read FP32 (FP8 per-tensor: the
 * cast; MXFP4 outside the reference form: mx/mxfp4.cu); not FP32 GEMMs, not the reference-form path (NVFP4,
 * MXFP8, MXFP4 under dither: FP32 inputs). */
static inline int mx_gemm_takes_bf16(const mx_recipe* r, mx_gemm_id g) {
    const mx_format_info* f = r ? mx_format_get(r->g[g].fmt) : NULL;
    return f && f->elem != MX_ELEM_FP32 && !mx_gemm_gpu_reference_form(r, g) &&
           (mx_gemm_bf16_operands(r, g) || (f->scale == MX_SCALE_TENSOR && !r->g[g].had_n) || mx_gemm_gpu_mxfp4(r, g));
}

/* The GPU model's BF16 storage can serve recipe r: its three GEMMs read BF16 operands (mx_gemm_takes_bf16).
 * Where it is on (mxg_llama_create's act16: by default only where mx_act16_applies, mxg_llama_act16_default)
 * the tensors the linears read are stored in BF16 and a quantized GEMM quantizes those BF16 values: the CPU
 * model (mx_llama.act16) rounds at the same points. */
static inline int mx_act16_possible(const mx_recipe* r) {
    return mx_gemm_takes_bf16(r, MX_FPROP) && mx_gemm_takes_bf16(r, MX_DGRAD) && mx_gemm_takes_bf16(r, MX_WGRAD);
}

/* What the GPU fast path cannot run of GEMM g's recipe (the format table's GPU columns): 0, or
 * 1 when the format has no GPU path, 2 a rotation the GPU does not do with this format, 3 a
 * per-tensor scaling it does not do. */
static inline int mx_gemm_gpu_refusal(const mx_recipe* r, mx_gemm_id g) {
    const mx_gemm_recipe* q = &r->g[g];
    const mx_format_info* f = mx_format_get(q->fmt);
    if (!f || !f->gpu) return 1;
    if (q->had_n && !f->gpu_hadamard) return 2;
    if (f->fp8_scalings && !(f->gpu_fp8_scalings & MX_BIT(r->fp8_scaling))) return 3;
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif
