/* test_train.c: the trainer. Schedule and AdamW values, checkpoints (round
 * trip, corrupt and mismatched files refused), and ./mxlm train end to end on
 * synthetic shards with a micro model: the loss falls, 20 steps straight ==
 * 10 + --halt-at/--resume + 10 bit for bit, the same bits with 1 or 2
 * threads, a forced NaN ends the run as diverged, corrupt shards refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxlm/trainer.h"
#include "test.h"

TEST(lr_schedule_values) {
    /* warmup 10 of 100, peak 1e-3, floor 0.1x */
    CHECK_NEAR(mx_lr_at(0, 100, 10, 1e-3, 0.1), 1e-4, 1e-15);
    CHECK_NEAR(mx_lr_at(9, 100, 10, 1e-3, 0.1), 1e-3, 1e-15);
    CHECK_NEAR(mx_lr_at(10, 100, 10, 1e-3, 0.1), 1e-3, 1e-15);
    CHECK_NEAR(mx_lr_at(55, 100, 10, 1e-3, 0.1), 0.55e-3, 1e-12); /* half way down the cosine */
    CHECK_NEAR(mx_lr_at(100, 100, 10, 1e-3, 0.1), 1e-4, 1e-15);
    CHECK(mx_lr_at(99, 100, 10, 1e-3, 0.1) > 1e-4);
}

TEST(adamw_one_step_by_hand) {
    mx_llama m;
    REQUIRE(test_micro_llama("fp32", &m, NULL));
    float* mm = calloc(m.n_params, 4);
    float* vv = calloc(m.n_params, 4);
    REQUIRE(mm && vv);
    for (size_t i = 0; i < m.n_params; i++) { m.params[i] = 0.5f; m.grads[i] = 0.2f; }
    mx_adamw_config ac = {0.9, 0.95, 1e-5, 0.1};
    mx_adamw_update(&m, mm, vv, &ac, 1e-2, 0.5f, 1);
    /* g = 0.1 after scaling; t = 1: mhat = g, vhat = g^2 -> step = lr * g/(|g| + eps) */
    double step = 1e-2 * 0.1 / (0.1 + 1e-5);
    size_t iw = m.info[MX_P_WQ].offset, in = m.info[MX_P_ATTN_NORM].offset;
    CHECK_NEAR(m.params[iw], 0.5 * (1 - 1e-2 * 0.1) - step, 1e-7); /* matrix: decayed */
    CHECK_NEAR(m.params[in], 0.5 - step, 1e-7);                    /* norm weight: no decay */
    CHECK_NEAR(mm[iw], 0.1 * 0.1, 1e-8);
    CHECK_NEAR(vv[iw], 0.05 * 0.01, 1e-9);
    /* the global norm */
    CHECK_NEAR(mx_sum_squares(m.grads, m.n_params), 0.04 * (double)m.n_params, 1e-6 * m.n_params);
    free(mm);
    free(vv);
    mx_llama_free(&m);
}

TEST(checkpoint_roundtrip_and_refusals) {
    mx_llama a, b;
    REQUIRE(test_micro_llama("fp8-delayed", &a, &b));
    mx_llama_init_weights(&a, 5);
    a.lstate[3].amax_hist[1][0][2] = 42.0f;
    a.lstate[3].amax_n[1][0] = 3;
    size_t n = a.n_params;
    float *m1 = calloc(n, 4), *v1 = calloc(n, 4), *m2 = calloc(n, 4), *v2 = calloc(n, 4);
    REQUIRE(m1 && v1 && m2 && v2);
    for (size_t i = 0; i < n; i++) { m1[i] = (float)i * 1e-3f; v1[i] = (float)i * 2e-3f; }
    mx_ckpt_meta meta = {.step = 7, .sample = 99, .tokens = 1234, .val_loss0 = 3.5f, .tokens_to_target = -1}, got;
    char path[512];
    snprintf(path, sizeof path, "%s/ckpt-00000007.bin", test_tmpdir());
    REQUIRE(mx_ckpt_save(path, &a, m1, v1, &meta, "lr = 1\n") == 0);
    REQUIRE(mx_ckpt_load(path, &b, m2, v2, &got, "lr = 1\n") == 0);
    CHECK(!memcmp(a.params, b.params, n * 4));
    CHECK(!memcmp(m1, m2, n * 4) && !memcmp(v1, v2, n * 4));
    CHECK_EQ_INT(got.step, 7);
    CHECK_EQ_INT(got.sample, 99);
    CHECK_SAME_F(b.lstate[3].amax_hist[1][0][2], 42.0f);
    CHECK_EQ_INT(b.lstate[3].amax_n[1][0], 3);
    char latest[600];
    CHECK(mx_ckpt_latest(test_tmpdir(), latest, sizeof latest) == 1 && !strcmp(latest, path));
    /* mismatched configuration: refused, naming the line */
    b.params[0] = 123.0f;
    CHECK(mx_ckpt_load(path, &b, m2, v2, &got, "lr = 2\n") == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "lr = 1") != NULL);
    CHECK_SAME_F(b.params[0], 123.0f); /* nothing modified */
    /* one flipped byte in the weights: checksum refusal */
    FILE* f = fopen(path, "r+b");
    REQUIRE(f);
    fseek(f, 200, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
    CHECK(mx_ckpt_load(path, &b, m2, v2, &got, "lr = 1\n") == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "checksum") != NULL);
    /* truncated */
    REQUIRE(truncate(path, 1000) == 0);
    CHECK(mx_ckpt_load(path, &b, m2, v2, &got, "lr = 1\n") == MX_EFORMAT);
    CHECK_SAME_F(b.params[0], 123.0f);
    remove(path);
    free(m1); free(v1); free(m2); free(v2);
    mx_llama_free(&a);
    mx_llama_free(&b);
}

/* ---- end to end ---------------------------------------------------------------- */

static void make_shards(void) { test_sentence_shards("", 12345, 40000, 6000); }

#define MICRO "--vocab 256 --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --context 32 --batch 4 " \
              "--val-tokens 1024 --lr 1e-2 --log-every 1"

static int train(const char* out, const char* extra) {
    make_shards();
    return test_sh("%s train " MICRO " --train %s/train.bin --val %s/val.bin --out %s/%s %s > %s/%s.log 2>&1",
                   test_mxlm_bin(), test_tmpdir(), test_tmpdir(), test_tmpdir(), out, extra, test_tmpdir(), out);
}



TEST(train_loss_falls) {
    REQUIRE(train("falls", "--steps 30 --eval-every 10 --recipe mxfp4-fdw-h16 --telemetry-every 15 --target-loss 4") == 0);
    char v[16][32];
    int n = test_metric_strings("falls", "val_loss", NULL, v, 16);
    REQUIRE(n >= 4);
    double v0 = atof(v[0]), vl = atof(v[n - 1]);
    CHECKF(vl < 0.6 * v0, "val loss %g -> %g", v0, vl);
    char t[64][32];
    int nt = test_metric_strings("falls", "fprop_a_sqnr_db", NULL, t, 64);
    CHECK(nt == 2 * 2 * 7); /* 2 telemetry steps x 14 linears */
    for (int i = 0; i < nt && i < 64; i++) /* telemetry on for those steps: MXFP4 h16 activations measure ~16 dB */
        CHECKF(atof(t[i]) > 5 && atof(t[i]) < 40, "fprop_a SQNR %s dB", t[i]);
    CHECK(test_metric_strings("falls", "tok_per_s", NULL, t, 64) == 30);
    char p[512];
    snprintf(p, sizeof p, "%s/falls/summary.json", test_tmpdir());
    struct stat st;
    CHECK(stat(p, &st) == 0);
    snprintf(p, sizeof p, "%s/falls/config.txt", test_tmpdir());
    CHECK(stat(p, &st) == 0);
    CHECK(test_log_has("falls", "converged: step 30")); /* --target-loss 4 reached */
    /* --target-loss 4: tokens-to-target recorded at the first evaluation at or below 4 */
    CHECK(test_sh("grep -q '\"event\":\"target\"' %s/falls/metrics.jsonl", test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"tokens_to_target\":[1-9]' %s/falls/summary.json", test_tmpdir()) == 0);
    /* the resolved config loads back with --config and reproduces step 1 */
    char c1[8][32], c2[8][32];
    REQUIRE(test_sh("%s train --config %s/falls/config.txt --steps 30 --halt-at 1 --out %s/cfg > /dev/null 2>&1",
                    test_mxlm_bin(), test_tmpdir(), test_tmpdir()) == 0);
    CHECK(test_metric_strings("falls", "loss", NULL, c1, 8) >= 1 && test_metric_strings("cfg", "loss", NULL, c2, 8) == 1);
    CHECK(!strcmp(c1[0], c2[0]));
}

TEST(train_resume_bit_identical) {
    const char* common = "--steps 20 --eval-every 5 --recipe mxfp4-fdw-h16";
    char extra[256];
    snprintf(extra, sizeof extra, "%s --ckpt-every 5", common); /* not part of the trajectory */
    REQUIRE(train("straight", extra) == 0);
    /* checkpoints every 5 steps, the newest 2 kept */
    CHECK(test_sh("cd %s/straight && test \"$(ls ckpt-*)\" = \"$(printf 'ckpt-00000015.bin\\nckpt-00000020.bin')\"",
                  test_tmpdir()) == 0);
    snprintf(extra, sizeof extra, "%s --halt-at 10", common);
    REQUIRE(train("split", extra) == 0);
    CHECK(test_log_has("split", "halted: step 10"));
    snprintf(extra, sizeof extra, "%s --resume", common);
    REQUIRE(test_sh("%s train " MICRO " --train %s/train.bin --val %s/val.bin --out %s/split %s > %s/split2.log 2>&1",
                    test_mxlm_bin(), test_tmpdir(), test_tmpdir(), test_tmpdir(), extra, test_tmpdir()) == 0);
    CHECK(test_log_has("split2", "resumed from"));
    char a[64][32], b[64][32];
    int na = test_metric_strings("straight", "loss", NULL, a, 64), nb = test_metric_strings("split", "loss", NULL, b, 64);
    CHECK_EQ_INT(na, 20);
    CHECK_EQ_INT(na, nb);
    for (int i = 0; i < na && i < nb; i++) CHECKF(!strcmp(a[i], b[i]), "step %d: %s vs %s", i + 1, a[i], b[i]);
    na = test_metric_strings("straight", "val_loss", NULL, a, 64);
    nb = test_metric_strings("split", "val_loss", NULL, b, 64);
    CHECK_EQ_INT(na, 5); /* steps 0, 5, 10, 15, 20 */
    CHECK_EQ_INT(na, nb);
    for (int i = 0; i < na && i < nb; i++) CHECKF(!strcmp(a[i], b[i]), "eval %d: %s vs %s", i, a[i], b[i]);
    /* the printed losses too */
    CHECK(test_sh("grep -h '^step 1[1-9]/20  loss\\|^step 20/20  loss' %s/straight.log > %s/a.txt && "
                  "grep -h '^step 1[1-9]/20  loss\\|^step 20/20  loss' %s/split2.log > %s/b.txt && "
                  "sed -i 's/tok.s.*//' %s/a.txt %s/b.txt && cmp -s %s/a.txt %s/b.txt && test $(wc -l < %s/a.txt) -eq 10",
                  test_tmpdir(), test_tmpdir(), test_tmpdir(), test_tmpdir(), test_tmpdir(), test_tmpdir(),
                  test_tmpdir(), test_tmpdir(), test_tmpdir()) == 0);
}

TEST(train_same_bits_any_thread_count) {
    REQUIRE(train("th1", "--steps 3 --eval-every 0 --threads 1 --recipe mxfp4-fdw-h16") == 0);
    REQUIRE(train("th2", "--steps 3 --eval-every 0 --threads 2 --recipe mxfp4-fdw-h16") == 0);
    char a[8][32], b[8][32];
    int na = test_metric_strings("th1", "grad_norm", NULL, a, 8), nb = test_metric_strings("th2", "grad_norm", NULL, b, 8);
    CHECK_EQ_INT(na, 3);
    CHECK_EQ_INT(na, nb);
    for (int i = 0; i < na && i < nb; i++) CHECKF(!strcmp(a[i], b[i]), "step %d: %s vs %s", i + 1, a[i], b[i]);
}

/* 2 micro-batches of 2 sequences == 1 batch of 4 (the same windows in the
 * same order; fp32 so only the summation order differs). */
TEST(train_gradient_accumulation) {
    REQUIRE(train("acc1", "--steps 3 --eval-every 0 --recipe fp32 --batch 4 --accum 1") == 0);
    REQUIRE(train("acc2", "--steps 3 --eval-every 0 --recipe fp32 --batch 2 --accum 2") == 0);
    char a[8][32], b[8][32];
    REQUIRE(test_metric_strings("acc1", "loss", NULL, a, 8) == 3 && test_metric_strings("acc2", "loss", NULL, b, 8) == 3);
    for (int i = 0; i < 3; i++) CHECK_NEAR(atof(a[i]), atof(b[i]), 2e-5 * atof(a[i]));
    REQUIRE(test_metric_strings("acc1", "grad_norm", NULL, a, 8) == 3 && test_metric_strings("acc2", "grad_norm", NULL, b, 8) == 3);
    for (int i = 0; i < 3; i++) CHECK_NEAR(atof(a[i]), atof(b[i]), 1e-4 * atof(a[i]));
    REQUIRE(test_metric_strings("acc2", "tokens", NULL, a, 8) >= 2);
    CHECK(!strcmp(a[1], "128")); /* step 1: 2 x 32 x 2 tokens */
}

TEST(train_nan_diverges) {
    int rc = train("nan", "--steps 10 --debug-nan-at 4 --recipe mxfp4-fdw-h16");
    CHECK_EQ_INT(rc, 3);
    CHECK(test_log_has("nan", "diverged at step 4"));
    CHECK(test_sh("grep -q '\"status\":\"diverged\",\"step\":4' %s/nan/metrics.jsonl", test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"status\":\"diverged\"' %s/nan/summary.json", test_tmpdir()) == 0);
}

TEST(train_refuses_corrupt_and_mismatched_checkpoints) {
    REQUIRE(train("bad", "--steps 6 --halt-at 3 --recipe bf16") == 0);
    /* mismatched: another learning rate */
    /* mismatched: another learning rate than config.txt's, refused by name before anything is touched (2) */
    CHECK(train("bad", "--steps 6 --recipe bf16 --resume --lr 5e-3") == 2);
    CHECK(test_log_has("bad", "--lr 5e-3 differs"));
    /* corrupt: one byte flipped; nothing overwritten */
    REQUIRE(test_sh("cp %s/bad/metrics.jsonl %s/bad.m && printf '\\x55' | dd of=%s/bad/ckpt-00000003.bin bs=1 seek=5000 "
                    "conv=notrunc 2>/dev/null", test_tmpdir(), test_tmpdir(), test_tmpdir()) == 0);
    CHECK(train("bad", "--steps 6 --recipe bf16 --resume") == 1);
    CHECK(test_log_has("bad", "checksum"));
    CHECK(test_sh("cmp -s %s/bad/metrics.jsonl %s/bad.m", test_tmpdir(), test_tmpdir()) == 0);
    /* a fresh run into a used directory is refused */
    CHECK(train("bad", "--steps 6 --recipe bf16") == 1);
    CHECK(test_log_has("bad", "already holds a run"));
    /* --resume with nothing to resume */
    CHECK(train("empty", "--steps 6 --recipe bf16 --resume") == 1);
}

TEST(train_refuses_bad_shards) {
    make_shards();
    /* truncated: the header promises more tokens than the file holds */
    CHECK(test_sh("head -c 3000 %s/train.bin > %s/trunc.bin", test_tmpdir(), test_tmpdir()) == 0);
    CHECK(test_sh("%s train " MICRO " --steps 2 --train %s/trunc.bin --val %s/val.bin --out %s/ts > %s/ts.log 2>&1",
                  test_mxlm_bin(), test_tmpdir(), test_tmpdir(), test_tmpdir(), test_tmpdir()) == 1);
    CHECK(test_log_has("ts", "trunc.bin"));
    /* a token id beyond the model's vocabulary: named with its offset */
    CHECK(test_sh("%s train " MICRO " --vocab 128 --steps 2 --train %s/train.bin --val %s/val.bin --out %s/tv "
                  "> %s/tv.log 2>&1", test_mxlm_bin(), test_tmpdir(), test_tmpdir(), test_tmpdir(), test_tmpdir()) == 1);
    CHECK(test_log_has("tv", "outside the model's vocabulary"));
    CHECK(test_sh("%s train " MICRO " --steps 2 --train %s/nothing*.bin --out %s/tn > /dev/null 2>&1",
                  test_mxlm_bin(), test_tmpdir(), test_tmpdir()) == 1);
}

/* No data flags: the tiny preset on the embedded corpus (build/data, made by `make`). */
TEST(train_default_corpus) {
    make_shards(); /* for the environment */
    REQUIRE(test_sh("test -f build/data/tiny_train.bin && test -f build/data/tiny_val.bin") == 0);
    REQUIRE(test_sh("%s train --preset tiny --recipe mxfp4-fdw-h16 --steps 1 --batch 2 --seq 64 --val-tokens 128 --out %s/dflt "
                    "> %s/dflt.log 2>&1", test_mxlm_bin(), test_tmpdir(), test_tmpdir()) == 0);
    CHECK(test_log_has("dflt", "tiny mxfp4-fdw-h16: 1836160 parameters"));
    char v[4][32];
    REQUIRE(test_metric_strings("dflt", "val_loss", NULL, v, 4) == 2);
    CHECK_NEAR(atof(v[0]), log(4096.0), 0.1); /* the initial model is close to uniform */
}

/* Device and precision options: bad values are usage errors (exit 2) naming the option; the CPU
 * build refuses --device cuda with a message (exit 1); --head bf16 on the CPU rounds the head's
 * operands (a different, deterministic trajectory) and is recorded in the fingerprint, so a resume
 * with another head precision is refused. */
TEST(train_device_and_head_options) {
    CHECK_EQ_INT(train("dev_bad", "--steps 2 --device tpu"), 2);
    CHECK(test_log_has("dev_bad", "--device: 'auto', 'cpu' or 'cuda'"));
    CHECK_EQ_INT(train("gemm_bad", "--steps 2 --gemm quick"), 2);
    CHECK(test_log_has("gemm_bad", "--gemm: 'fast' or 'exact'"));
    CHECK_EQ_INT(train("head_bad", "--steps 2 --head fp16"), 2);
    CHECK(test_log_has("head_bad", "--head: 'auto', 'fp32' or 'bf16'"));
#ifndef MXLM_CUDA
    CHECK_EQ_INT(train("dev_cuda", "--steps 2 --device cuda"), 1);
    CHECK(test_log_has("dev_cuda", "built without CUDA"));
#endif
    REQUIRE(train("head32", "--steps 4 --device cpu --recipe bf16") == 0);
    REQUIRE(train("head16", "--steps 4 --device cpu --recipe bf16 --head bf16 --halt-at 2") == 0);
    REQUIRE(train("head16", "--steps 4 --device cpu --recipe bf16 --head bf16 --resume") == 0);
    REQUIRE(train("head16b", "--steps 4 --device cpu --recipe bf16 --head bf16") == 0);
    char a[16][32], b[16][32], c[16][32];
    int na = test_metric_strings("head32", "loss", "event", a, 16);
    int nb = test_metric_strings("head16", "loss", "event", b, 16);
    int nc = test_metric_strings("head16b", "loss", "event", c, 16);
    REQUIRE(na == 4 && nb == 4 && nc == 4);
    CHECK(strcmp(a[3], b[3]) != 0);              /* the BF16 head changes the numbers */
    for (int i = 0; i < 4; i++) CHECK(!strcmp(b[i], c[i])); /* halted + resumed = straight, bit for bit */
    CHECK(test_sh("grep -q '^head = bf16$' %s/head16/config.txt", test_tmpdir()) == 0);
    CHECK_EQ_INT(train("head16", "--steps 6 --device cpu --recipe bf16 --head fp32 --resume"), 2); /* config.txt's head */
    CHECK(test_log_has("head16", "head"));
}

/* issue 18: the CPU trainer runs the NVFP4 and MXFP8 recipes (the linear layer's fake-quant of each
 * format), a few steps with finite losses. */
TEST(train_nvfp4_and_mxfp8_recipes_on_cpu) {
    static const char* recipes[] = {"nvfp4", "mxfp8", "nvfp4+w:had=rh16,round=sr/rne+fd:w=2d", "nvfp4-nvidia",
                                    "mxfp4-tseng+dw:had=rh32"}; /* rh32: this model's kv dim is 32 */
    for (int i = 0; i < 5; i++) {
        char out[32], extra[160];
        snprintf(out, sizeof out, "fmt18_%d", i);
        snprintf(extra, sizeof extra, "--steps 4 --eval-every 0 --recipe '%s'", recipes[i]);
        CHECKF(train(out, extra) == 0, "recipe %s did not train", recipes[i]);
        CHECKF(test_sh("grep -qi 'nan' %s/%s.log", test_tmpdir(), out) != 0, "recipe %s: NaN in the log", recipes[i]);
    }
}
