/* telemetry.c: per-GEMM-operand quantization error (SQNR, dB) and clipped
 * MXFP4 block fraction of every linear layer, and the SQNR of each GEMM's
 * product against the unquantized product, as JSON lines. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mxlm/json.h"
#include "mxlm/trainer.h"

void mx_telemetry_reset(mx_llama* mdl) {
    int n = mdl->cfg.n_layers * MX_LIN_PER_BLOCK;
    for (int i = 0; i < n; i++) {
        memset(mdl->lstate[i].op, 0, sizeof mdl->lstate[i].op);
        memset(mdl->lstate[i].out, 0, sizeof mdl->lstate[i].out);
    }
}

static void put_num(FILE* f, double x) {
    char b[32];
    fputs(mx_json_number(b, sizeof b, x, 9), f);
}

int mx_telemetry_write(const mx_llama* mdl, int64_t step, void* file) {
    FILE* f = file;
    static const char* gn[3] = {"fprop", "dgrad", "wgrad"};
    static const char* on[2] = {"a", "b"};
    for (int l = 0; l < mdl->cfg.n_layers; l++)
        for (int j = 0; j < MX_LIN_PER_BLOCK; j++) {
            const mx_linear_state* s = &mdl->lstate[mx_linear_id(l, j)];
            fprintf(f, "{\"type\":\"telemetry\",\"step\":%lld,\"layer\":%d,\"linear\":\"%s\"", (long long)step, l,
                    mx_linear_name(j));
            for (int g = 0; g < 3; g++)
                for (int o = 0; o < 2; o++) {
                    const mx_operand_stats* st = &s->op[g][o];
                    fprintf(f, ",\"%s_%s_sqnr_db\":", gn[g], on[o]);
                    put_num(f, mx_stats_sqnr_db(st));
                    fprintf(f, ",\"%s_%s_clipped\":", gn[g], on[o]);
                    put_num(f, st->blocks ? (double)st->clipped / (double)st->blocks : 0.0);
                    if (st->nonfinite) fprintf(f, ",\"%s_%s_nonfinite\":%lld", gn[g], on[o], (long long)st->nonfinite);
                }
            for (int g = 0; g < 3; g++) { /* the products (mx_linear_state.out); none for FP32 GEMMs */
                const mx_operand_stats* st = &s->out[g];
                if (st->sig2 == 0 && st->err2 == 0 && !st->nonfinite) continue;
                fprintf(f, ",\"%s_out_sqnr_db\":", gn[g]);
                put_num(f, mx_stats_sqnr_db(st));
            }
            fprintf(f, "}\n");
        }
    if (fflush(f)) return mx_fail(MX_EIO, "telemetry: write failed");
    return MX_OK;
}
