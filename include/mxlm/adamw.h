/*
 * adamw.h: the optimizer (src/train/adamw.c; its GPU twin: mxg_adamw* of gpu_model.h): what the trainer
 * (trainer.h) and the GPU kernels share, apart from the rest of the trainer.
 */
#ifndef MXLM_ADAMW_H
#define MXLM_ADAMW_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double beta1, beta2, eps, weight_decay;
} mx_adamw_config;

/* Sum of squares of g[n] in double, over fixed chunks summed in order (the
 * same bits for any thread count). */
double mx_sum_squares(const float* g, size_t n);
/* One AdamW update of every tensor of the model (decoupled weight decay on
 * matrices only), with the gradient multiplied by `gscale` first (clipping).
 * t is the 1-based update count (bias correction). m, v [n_params]. */
void mx_adamw_update(const mx_llama* mdl, float* m, float* v, const mx_adamw_config* c, double lr, float gscale,
                     int64_t t);

#ifdef __cplusplus
}
#endif
#endif
