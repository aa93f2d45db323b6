/* The GPU's experiment switches and hooks: every MXLM_GPU_* environment variable, read in one place
 * (src/cuda/train/switches.cu) into one struct. Each changes how the GPU computes, never what the loss is:
 * docs/gpu.md "Experiment switches" says what each trades and what it measured. They are read when a GPU model
 * is made (mxg_llama_create), so a test may set one, make a model, and unset it.
 *
 *   MXLM_GPU_OUTER      the scale layout of the GEMMs on FP8 tensor cores (MXG_OUTER_* bits): fprop (the
 *                       default) the fp8 recipe's GEMMs on OUTER scales and MXFP4's Fprop OUTER-folded in one pass;
 *                       round as fprop, and MXFP4's Dgrad / Wgrad on OUTER too (operands re-expressed, a block
 *                       that rounds counted, no fix-up); round:T as round for a Dgrad / Wgrad GEMM C [Ma, Nb]
 *                       with Ma Nb / (Ma + Nb) >= T only (a larger GEMM saves more than its operands' re-expression
 *                       costs: the saving grows as Ma Nb K, the re-expression as (Ma + Nb) K), the rest on VEC128;
 *                       fp8 MXFP4 all on VEC128; 1 both MXFP4 operands on OUTER
 *                       with the exact fix-up; 0 fp8's GEMMs on VEC128 too
 *   MXLM_GPU_WCACHE     0: the weights' Fprop / Dgrad operands made in every GEMM instead of once per update
 *                       (a test hook: the cached operands against the uncached, bit for bit)
 *   MXLM_GPU_FUSE_SWIGLU 0: the SwiGLU backward writes FP32 dgate / dup and the linears quantize them (test hook)
 *   MXLM_GPU_FP8_AMAX   0: every FP8 cast computes its tensor's amax itself instead of taking one already made
 *                       (Wgrad's X from its Fprop, h / dgate / dup from the SwiGLU kernels, the norm outputs
 *                       from the norm kernels, the residual dY from the norms' backward, dq / dk from the RoPE
 *                       backward, W from AdamW), and no x8t; a test hook
 *   MXLM_GPU_FP8_XT     1: x8t, the forward's FP8 casts write X^T's codes for the Wgrads (one read of X fewer,
 *                       L (2 D + QD + F) bytes a token more); off by default: no speed it buys was measured
 *                       (H100, 2026-12-07: fp8 at 1b and 350m within 0.2%, +1.7 / +2.4 GiB)
 *   MXLM_GPU_HEAD_MI    n: at most n Mi logits per LM-head chunk (default 256; a memory / speed trade)
 *   MXLM_GPU_PROFILE    1: time each kernel class per step (profiling hook; prints the split)
 *   MXLM_GPU_OOW_PROBE  1: count the MXFP4 blocks outside an OUTER fold's window (a measurement, slower) */
#ifndef MXLM_GPU_SWITCHES_H
#define MXLM_GPU_SWITCHES_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int outer;       /* MXG_OUTER_* bits (gpu_model.h) */
    int outer_min;   /* round:T's T (0: every GEMM) */
    int wcache;      /* 1 unless MXLM_GPU_WCACHE=0 */
    int fuse_swiglu; /* 1 unless MXLM_GPU_FUSE_SWIGLU=0 */
    int fp8_amax;    /* 1 unless MXLM_GPU_FP8_AMAX=0 */
    int fp8_xt;      /* MXLM_GPU_FP8_XT=1 */
    int head_mi;     /* Mi logits per LM-head chunk at most */
    int profile;     /* MXLM_GPU_PROFILE set and not 0 */
    int oow_probe;   /* MXLM_GPU_OOW_PROBE=1 */
} mxg_switches;

/* The switches as the environment gives them now; MX_EINVAL (with the message) for a value it does not know,
 * *s then the defaults. */
int mxg_switches_read(mxg_switches* s);

#ifdef __cplusplus
}
#endif
#endif
