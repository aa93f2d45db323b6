/* bench/sr_sensitivity.c: how far a tiny change of the weights moves the gradient operands of a whole model
 * under a recipe, on the CPU (not a test). The GPU and the CPU compute the same
 * products with FP32 sums in another order; under stochastic rounding such differences can flip an SR decision,
 * a whole FP4 step that feeds the next layers' decisions, so the GPU's test of a whole SR model against the CPU
 * can agree only by chance. This measures it without a GPU: the tiny model of the layers program's telemetry
 * case (init seed 7, + 0.01 x uniform noise), two forward/backward passes with telemetry at steps 5 and 6, run
 * as is and with every weight scaled by 1 + eps x uniform(-1, 1) (four draws); printed: the largest relative
 * difference of the Dgrad dY operands' sum of squares over the linears.
 *   make build/cpu/mxlm && cc -std=c11 -O2 -fopenmp -Iinclude -Isrc bench/sr_sensitivity.c \
 *     $(find build/cpu/src -name '*.o' ! -path '*cli*') -lzstd -lz -lm -lpthread -o build/sr_sensitivity
 *   build/sr_sensitivity [eps] [recipe ...]     (default 1e-7; mxfp4-fdw-sr mxfp4-fdw-h16 mxfp4-fdw bf16)
 * Output of 2026-12-02 (the CPU development VM): weights moved by 1e-7 x uniform moved the Dgrad operands of
 * mxfp4-fdw-h16 / -sr by up to 4.3% and 0.26 dB in 1 / 3 draws of 8 (docs/gpu.md, telemetry tolerances). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mxlm/linear.h"
#include "mxlm/model.h"
#include "mxlm/recipe.h"
#include "mxlm/trainer.h"

static uint64_t g_s;
static double u01(void) {
    g_s = g_s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_s >> 11) * (1.0 / 9007199254740992.0);
}

/* sig[i]: the Dgrad dY operand's sum of squares of block linear i, fsig[i] the Fprop X operand's; draw 0 is the
 * unperturbed model */
static int run(const char* recipe, int draw, double eps, double* sig, double* fsig, double* db, int* nl) {
    mx_model_config cfg;
    mx_recipe rec;
    mx_llama m;
    if (mx_model_preset("tiny", &cfg) || mx_recipe_parse(recipe, &rec) || mx_llama_create(&m, &cfg, &rec, 0, 0, 7)) {
        fprintf(stderr, "sr_sensitivity: %s\n", mx_last_error());
        return 1;
    }
    mx_llama_init_weights(&m, 7);
    g_s = 99;
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += 0.01f * (float)(u01() * 2 - 1);
    g_s = 1000 + (uint64_t)draw;
    if (draw)
        for (size_t i = 0; i < m.n_params; i++) m.params[i] *= (float)(1.0 + eps * (u01() * 2 - 1));
    m.head_bf16 = 0;
    enum { B = 2, T = 64, N = B * T };
    int32_t tok[2 * N], tgt[2 * N];
    g_s = 0x5555;
    for (int n = 0; n < 2 * N; n++) {
        tok[n] = (int32_t)(u01() * 64);
        tgt[n] = (int32_t)(u01() * cfg.vocab);
    }
    mx_telemetry_reset(&m);
    m.telemetry = 1;
    mx_llama_zero_grad(&m);
    int rc = 0;
    for (int a = 0; a < 2 && !rc; a++) {
        float lo = 0;
        m.step = 5 + (uint64_t)a;
        rc = mx_llama_forward(&m, tok + a * N, tgt + a * N, B, T, &lo) ||
             mx_llama_backward(&m, tok + a * N, tgt + a * N, 1.0f / N);
    }
    *nl = cfg.n_layers * MX_LIN_PER_BLOCK;
    for (int i = 0; i < *nl && i < 64; i++) {
        sig[i] = m.lstate[i].op[1][0].sig2;
        fsig[i] = m.lstate[i].op[0][0].sig2;
        for (int g = 0; g < 3; g++) /* each GEMM's operand a: its SQNR (dB) */
            db[3 * i + g] = 10.0 * log10(m.lstate[i].op[g][0].sig2 / m.lstate[i].op[g][0].err2);
    }
    if (rc) fprintf(stderr, "sr_sensitivity: %s\n", mx_last_error());
    mx_llama_free(&m);
    return rc;
}

int main(int argc, char** argv) {
    const double eps = argc > 1 ? atof(argv[1]) : 1e-7;
    static const char* dflt[] = {"mxfp4-fdw-sr", "mxfp4-fdw-h16", "mxfp4-fdw", "bf16"};
    const int nr = argc > 2 ? argc - 2 : 4;
    for (int r = 0; r < nr; r++) {
        const char* recipe = argc > 2 ? argv[2 + r] : dflt[r];
        double base[64], fbase[64], p[64], fp[64], dbase[192], dp[192], wdb[3] = {0, 0, 0};
        int nl = 0;
        if (run(recipe, 0, eps, base, fbase, dbase, &nl)) return 1;
        printf("%-16s eps %g, worst relative difference of the operands' sig2 over %d linears, Dgrad dY / Fprop X:",
               recipe, eps, nl);
        for (int draw = 1; draw <= 8; draw++) {
            if (run(recipe, draw, eps, p, fp, dp, &nl)) return 1;
            double w = 0, wf = 0;
            for (int i = 0; i < nl && i < 64; i++) {
                w = fmax(w, fabs(p[i] - base[i]) / base[i]);
                wf = fmax(wf, fabs(fp[i] - fbase[i]) / fbase[i]);
                for (int g = 0; g < 3; g++)
                    if (isfinite(dp[3 * i + g]) && isfinite(dbase[3 * i + g]))
                        wdb[g] = fmax(wdb[g], fabs(dp[3 * i + g] - dbase[3 * i + g]));
            }
            printf(" %.2g/%.2g", w, wf);
        }
        printf("\n%-16s worst SQNR difference of operand a over the draws: fprop %.3g dB, dgrad %.3g, wgrad %.3g\n", recipe,
               wdb[0], wdb[1], wdb[2]);
    }
    return 0;
}
