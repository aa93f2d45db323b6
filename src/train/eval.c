/* eval.c: mean validation cross-entropy (nats) over a fixed window set. */
#include <stdlib.h>
#include <string.h>

#include "mxlm/train.h"

int mx_evaluate(mx_llama* mdl, const mx_loader* val, int64_t n_windows, int B, int T, float* loss) {
    size_t ns = (size_t)mdl->cfg.n_layers * MX_LIN_PER_BLOCK * sizeof(mx_linear_state);
    mx_linear_state* saved = malloc(ns);
    int32_t* inp = malloc(sizeof(int32_t) * B * T); /* [B, T] */
    int32_t* tgt = malloc(sizeof(int32_t) * B * T); /* [B, T] */
    int rc = MX_OK;
    if (!saved || !inp || !tgt) { rc = mx_fail(MX_ENOMEM, "eval: out of memory"); goto done; }
    memcpy(saved, mdl->lstate, ns);
    int tele = mdl->telemetry;
    mdl->telemetry = 0;
    double tot = 0.0;
    int64_t nb = n_windows / B;
    for (int64_t b = 0; b < nb && !rc; b++) {
        for (int r = 0; r < B && !rc; r++) rc = mx_loader_val_window(val, b * B + r, inp + r * T, tgt + r * T);
        float lo = 0.0f;
        if (!rc) rc = mx_llama_forward(mdl, inp, tgt, B, T, &lo);
        tot += lo;
    }
    mdl->telemetry = tele;
    memcpy(mdl->lstate, saved, ns);
    if (!rc) *loss = nb > 0 ? (float)(tot / (double)nb) : 0.0f;
done:
    free(saved);
    free(inp);
    free(tgt);
    return rc;
}
