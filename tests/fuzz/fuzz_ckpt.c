/* fuzz_ckpt.c: the checkpoint loader. A micro model is built once; any file
 * is either loaded or refused with a message, and a refused file leaves the
 * weights, the optimizer state and the meta untouched.
 * FUZZ_CKPT_SEED=path writes a valid checkpoint of that model (the seed corpus). */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mxlm/model.h"
#include "mxlm/trainer.h"

static mx_llama g_m;
static float *g_mo, *g_vo, *g_snap;
static const char* k_fp = "fuzz micro model\nrecipe fp8-delayed\n";

static void setup(void) {
    mx_model_config c = {.name = "fuzz", .vocab = 16, .dim = 16, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1,
                         .ffn = 16, .seq_len = 8, .rope_theta = 500000.0f, .norm_eps = 1e-5f};
    mx_recipe r;
    if (mx_recipe_parse("fp8-delayed", &r) || mx_llama_create(&g_m, &c, &r, 0, 0, 1)) abort();
    mx_llama_init_weights(&g_m, 1);
    g_mo = calloc(g_m.n_params, sizeof(float));
    g_vo = calloc(g_m.n_params, sizeof(float));
    g_snap = malloc(g_m.n_params * sizeof(float));
    for (size_t i = 0; i < g_m.n_params; i++) { g_mo[i] = 0.001f * (float)(i % 7); g_vo[i] = 1e-6f * (float)(i % 5); }
    const char* seed_path = getenv("FUZZ_CKPT_SEED");
    if (seed_path) {
        mx_ckpt_meta meta = {.step = 3, .sample = 24, .tokens = 384, .val_loss0 = 4.0f, .tokens_to_target = -1};
        mx_ckpt_meta back;
        if (mx_ckpt_save(seed_path, &g_m, g_mo, g_vo, &meta, k_fp)) abort();
        if (mx_ckpt_load(seed_path, &g_m, g_mo, g_vo, &back, k_fp) || back.step != 3) abort();  /* the seed loads */
        _exit(0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    if (!g_mo) setup();
    const char* path = fuzz_file(data, n, ".ckpt");
    memcpy(g_snap, g_m.params, g_m.n_params * sizeof(float));
    mx_ckpt_meta meta = {.step = -7};
    if (mx_ckpt_load(path, &g_m, g_mo, g_vo, &meta, k_fp) != 0) {
        if (memcmp(g_snap, g_m.params, g_m.n_params * sizeof(float)) != 0 || meta.step != -7) abort();
    }
    return 0;
}
