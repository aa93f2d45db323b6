/* eval.c: mean validation cross-entropy (nats) over a fixed window set. */
#include <stdlib.h>
#include <string.h>

#include "mxlm/trainer.h"

int mx_evaluate_batches(mx_batch_loss_fn fn, void* ctx, const mx_loader* val, int64_t n_windows, int B, int T,
                        float* loss) {
    int32_t* inp = malloc(sizeof(int32_t) * B * T); /* [B, T] */
    int32_t* tgt = malloc(sizeof(int32_t) * B * T); /* [B, T] */
    int rc = MX_OK;
    if (!inp || !tgt) rc = mx_fail(MX_ENOMEM, "eval: out of memory");
    double tot = 0.0;
    int64_t nb = n_windows / B;
    for (int64_t b = 0; b < nb && !rc; b++) {
        for (int r = 0; r < B && !rc; r++) rc = mx_loader_val_window(val, b * B + r, inp + r * T, tgt + r * T);
        float lo = 0.0f;
        if (!rc) rc = fn(ctx, inp, tgt, &lo);
        tot += lo;
    }
    if (!rc) *loss = nb > 0 ? (float)(tot / (double)nb) : 0.0f;
    free(inp);
    free(tgt);
    return rc;
}

typedef struct { mx_llama* mdl; int B, T; } cpu_eval;

static int cpu_batch_loss(void* ctx, const int32_t* inp, const int32_t* tgt, float* loss) {
    cpu_eval* e = ctx;
    return mx_llama_forward(e->mdl, inp, tgt, e->B, e->T, loss);
}

int mx_evaluate(mx_llama* mdl, const mx_loader* val, int64_t n_windows, int B, int T, float* loss) {
    size_t ns = (size_t)mdl->cfg.n_layers * MX_LIN_PER_BLOCK * sizeof(mx_linear_state);
    mx_linear_state* saved = malloc(ns);
    if (!saved) return mx_fail(MX_ENOMEM, "eval: out of memory");
    memcpy(saved, mdl->lstate, ns);
    int tele = mdl->telemetry;
    mdl->telemetry = 0;
    cpu_eval e = {mdl, B, T};
    int rc = mx_evaluate_batches(cpu_batch_loss, &e, val, n_windows, B, T, loss);
    mdl->telemetry = tele;
    memcpy(mdl->lstate, saved, ns);
    free(saved);
    return rc;
}
