/* test_reliability.c: crash-safe checkpoints (SIGKILL at many points, then
 * --resume: the newest complete checkpoint loads, a partial file is never
 * taken, the losses are bit-identical to an uninterrupted run), --keep
 * rotation, divergence policies (--on-nonfinite skip, --max-skips, the
 * loss-spike detector, final status and exit codes), and the limits checked
 * up front (memory estimate, unwritable directory, full disk at a
 * checkpoint). A tiny model so the whole file stays fast under ASan. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mxlm/trainer.h"
#include "test.h"

static void rel_shards(void) { test_sentence_shards("rel_", 777, 20000, 2000); }

#define TINY "--vocab 256 --dim 32 --layers 1 --heads 1 --kv-heads 1 --ffn 64 --context 16 --batch 2 " \
             "--val-tokens 64 --lr 1e-2 --recipe mxfp4-fdw-h16 --log-every 1 --threads 2"

/* ./mxlm train TINY EXTRA into TMP/DIR with the environment prefix ENV
 * ("" or "MXLM_TEST_CRASH=... "), output to TMP/LOG.log; the exit status
 * (137 when killed by SIGKILL). */
static int rtrain(const char* env, const char* dir, const char* log, const char* extra) {
    rel_shards();
    const char* t = test_tmpdir();
    return test_sh("%s %s train " TINY " --train %s/rel_train.bin --val %s/rel_val.bin --out %s/%s %s > %s/%s.log 2>&1;"
                   " exit $?", env, test_mxlm_bin(), t, t, t, dir, extra, t, log);
}

/* The same under a file size limit of `blocks` (512 bytes each, as sh counts
 * them; SIGXFSZ ignored, so a write past it fails with EFBIG as on a full
 * disk). The log goes through a pipe, which the limit does not touch. */
static int rtrain_fsize(int blocks, const char* dir, const char* log, const char* extra) {
    rel_shards();
    const char* t = test_tmpdir();
    return test_sh("(ulimit -f %d; trap '' XFSZ; %s train " TINY " --train %s/rel_train.bin --val %s/rel_val.bin "
                   "--out %s/%s %s 2>&1; echo \"mxlm-exit $?\") | cat > %s/%s.log; "
                   "exit $(sed -n 's/^mxlm-exit //p' %s/%s.log)",
                   blocks, test_mxlm_bin(), t, t, t, dir, extra, t, log, t, log);
}



/* The same training losses and validation losses, bit for bit (as printed). */
static void check_same_losses(const char* a, const char* b, int steps) {
    char x[64][32], y[64][32];
    int nx = test_metric_strings(a, "loss", "event", x, 64), ny = test_metric_strings(b, "loss", "event", y, 64);
    CHECK_EQ_INT(nx, steps);
    CHECK_EQ_INT(ny, steps);
    for (int i = 0; i < nx && i < ny; i++) CHECKF(!strcmp(x[i], y[i]), "%s/%s step %d: %s vs %s", a, b, i + 1, x[i], y[i]);
    nx = test_metric_strings(a, "val_loss", "event", x, 64);
    ny = test_metric_strings(b, "val_loss", "event", y, 64);
    CHECK(nx >= 2);
    CHECK_EQ_INT(nx, ny);
    for (int i = 0; i < nx && i < ny; i++) CHECKF(!strcmp(x[i], y[i]), "%s/%s eval %d: %s vs %s", a, b, i, x[i], y[i]);
}

/* A checkpoint's validity checked here independently of the loader: magic,
 * end marker, CRC-32. */
static int ckpt_valid(const char* path) {
    size_t n;
    unsigned char* b = test_read_file(path, &n);
    if (!b) return 0;
    int ok = n > 28 && !memcmp(b, "MXLMCKP1", 8) && !memcmp(b + n - 8, "MXLMEND1", 8);
    if (ok) {
        uint32_t stored;
        memcpy(&stored, b + n - 12, 4);
        ok = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)(n - 12)) == stored;
    }
    free(b);
    return ok;
}

/* The tensors of a checkpoint (params, AdamW m and v, linear states): the
 * bytes after the header. */
static unsigned char* ckpt_payload(const char* dir, int step, size_t* len) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s/ckpt-%08d.bin", test_tmpdir(), dir, step);
    size_t n;
    unsigned char* b = test_read_file(p, &n);
    if (!b || n < 100) { free(b); return NULL; }
    uint32_t flen;
    int32_t nw;
    memcpy(&flen, b + 12, 4);
    size_t off = 16 + flen + 36 + 24; /* meta, then version 2's counters */
    memcpy(&nw, b + off, 4);
    off += 4 + (size_t)nw * 4 + 16;   /* the loss window, n_params, n_linear */
    *len = n - 12 - off;
    memmove(b, b + off, *len);
    return b;
}

static int same_payload(const char* dir, int s1, int s2) {
    size_t n1 = 0, n2 = 0;
    unsigned char* a = ckpt_payload(dir, s1, &n1);
    unsigned char* b = ckpt_payload(dir, s2, &n2);
    int same = a && b && n1 == n2 && n1 > 0 && !memcmp(a, b, n1);
    free(a);
    free(b);
    return same;
}

/* Every "ckpt-N.bin" in DIR is a complete, valid checkpoint; returns how
 * many, and the newest step in *newest (-1: none). */
static int all_ckpts_valid(const char* dir, int* newest) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls %s/%s 2>/dev/null | grep -E '^ckpt-[0-9]{8}\\.bin$'", test_tmpdir(), dir);
    FILE* f = popen(cmd, "r");
    if (!f) return -1;
    char name[256];
    int n = 0, bad = 0;
    *newest = -1;
    while (fgets(name, sizeof name, f)) {
        name[strcspn(name, "\n")] = 0;
        char p[600];
        snprintf(p, sizeof p, "%s/%s/%s", test_tmpdir(), dir, name);
        if (!ckpt_valid(p)) { bad++; test_fail_at(__FILE__, __LINE__, "%s is not a valid checkpoint", p); }
        int s = atoi(name + 5);
        if (s > *newest) *newest = s;
        n++;
    }
    pclose(f);
    return bad ? -1 : n;
}

static int count_files(const char* dir, const char* pattern) {
    return test_sh("exit $(ls %s/%s 2>/dev/null | grep -c -E '%s')", test_tmpdir(), dir, pattern);
}

/* ---- crash-safe checkpoints ------------------------------------------------------ */

/* 12 steps with a checkpoint every 2, killed (SIGKILL) at nine points in a
 * row, each followed by --resume: during a step before any checkpoint, in
 * the middle of writing one, between fsync and rename, after the rename but
 * before rotation, after a metrics line, with an empty temporary file, after
 * the update, from outside while the writer is paused before fsync, after
 * the last evaluation. */
TEST(kill_resume_chain_bit_identical) {
    /* one --run-id for both runs: a checkpoint records its run, and the two files are compared byte for byte */
    const char* common = "--steps 12 --ckpt-every 2 --eval-every 4 --keep 2 --run-id 4b52";
    REQUIRE(rtrain("", "kr_ref", "kr_ref", common) == 0);
    CHECK(test_log_has("kr_ref", "budget: step 12"));
    struct {
        const char* crash;   /* MXLM_TEST_CRASH */
        int resumed_from;    /* the step this invocation starts from (0: restarted, -1: fresh) */
        int newest_after;    /* the newest valid checkpoint after it was killed (-1: none) */
    } stage[] = {
        {"locked@0", -1, -1},        /* the directory created and locked, nothing in it */
        {"step@1", 0, -1},           /* before any checkpoint */
        {"ckpt-mid@2", 0, -1},       /* half a checkpoint: only a temporary file */
        {"ckpt-synced@4", 0, 2},     /* complete and fsync'ed but not renamed */
        {"ckpt-renamed@6", 2, 6},    /* renamed, not yet rotated: 3 checkpoints */
        {"metrics@7", 6, 6},         /* during training after a metrics line */
        {"ckpt-open@8", 6, 6},       /* an empty temporary */
        {"update@9", 6, 8},          /* after the update, before its metrics line */
    };
    char env[256], extra[256];
    for (size_t i = 0; i < sizeof stage / sizeof stage[0]; i++) {
        char log[32];
        snprintf(log, sizeof log, "kr_%zu", i);
        snprintf(env, sizeof env, "MXLM_TEST_CRASH=%s", stage[i].crash);
        snprintf(extra, sizeof extra, "%s%s", common, stage[i].resumed_from >= 0 ? " --resume" : "");
        int rc = rtrain(env, "kr", log, extra);
        CHECKF(rc == 137, "stage %zu (%s): exit %d, expected 137 (SIGKILL)", i, stage[i].crash, rc);
        if (stage[i].resumed_from == 0) CHECKF(test_log_has(log, "restarting from step 0"), "stage %zu", i);
        if (stage[i].resumed_from > 0) {
            char want[64];
            snprintf(want, sizeof want, "ckpt-%08d.bin (step %d)", stage[i].resumed_from, stage[i].resumed_from);
            CHECKF(test_log_has(log, want), "stage %zu (%s): not resumed from step %d", i, stage[i].crash,
                   stage[i].resumed_from);
        }
        int newest;
        int n = all_ckpts_valid("kr", &newest);
        CHECKF(n >= 0 && newest == stage[i].newest_after, "stage %zu (%s): newest valid checkpoint %d, expected %d", i,
               stage[i].crash, newest, stage[i].newest_after);
        if (i == 4) CHECK_EQ_INT(n, 3); /* killed between rename and rotation */
    }
    /* the temporaries of stages 2, 3 and 6 were left and then removed by the next resume */
    CHECK(test_log_has("kr_3", "removed 1 temporary file"));
    CHECK(test_log_has("kr_4", "removed 1 temporary file"));
    CHECK(test_log_has("kr_7", "removed 1 temporary file"));
    /* from outside: the writer pauses after writing ckpt 10, before its fsync;
     * a second trainer on the same directory is refused meanwhile; SIGKILL */
    const char* t = test_tmpdir();
    REQUIRE(test_sh("MXLM_TEST_CRASH=ckpt-written@10:pause %s train " TINY " --train %s/rel_train.bin "
                    "--val %s/rel_val.bin --out %s/kr %s --resume > %s/kr_p.log 2>&1 & echo $! > %s/kr.pid; "
                    "for i in $(seq 1 600); do grep -q paused %s/kr_p.log && exit 0; sleep 0.05; done; exit 1",
                    test_mxlm_bin(), t, t, t, common, t, t, t) == 0);
    CHECK(count_files("kr", "^ckpt-00000010\\.bin\\.tmp\\.") == 1);
    CHECK_EQ_INT(rtrain("", "kr", "kr_second", extra), 1);
    CHECK(test_log_has("kr_second", "another mxlm train is running"));
    CHECK(test_sh("kill -9 $(cat %s/kr.pid); for i in $(seq 1 200); do kill -0 $(cat %s/kr.pid) 2>/dev/null || exit 0; "
                  "sleep 0.05; done; exit 1", t, t) == 0);
    CHECK(test_log_has("kr_p", "resumed from"));
    int newest;
    CHECK(all_ckpts_valid("kr", &newest) >= 1 && newest == 8);
    /* after the last evaluation, before the last checkpoint */
    CHECK_EQ_INT(rtrain("MXLM_TEST_CRASH=eval@12", "kr", "kr_e", extra), 137);
    CHECK(test_log_has("kr_e", "ckpt-00000008.bin (step 8)"));
    /* after the last checkpoint and its rotation, before the status line */
    CHECK_EQ_INT(rtrain("MXLM_TEST_CRASH=ckpt-pruned@12", "kr", "kr_x", extra), 137);
    CHECK(test_log_has("kr_x", "ckpt-00000010.bin (step 10)"));
    /* the last resume only finishes the run: its summary has the last evaluation */
    CHECK_EQ_INT(rtrain("", "kr", "kr_end", extra), 0);
    CHECK(test_log_has("kr_end", "ckpt-00000012.bin (step 12)"));
    CHECK(test_sh("grep -o '\"val_loss\":[^,]*' %s/kr/summary.json > %s/kr_a && "
                  "grep -o '\"val_loss\":[^,]*' %s/kr_ref/summary.json > %s/kr_b && cmp -s %s/kr_a %s/kr_b",
                  t, t, t, t, t, t) == 0);
    CHECK(test_log_has("kr_end", "budget: step 12"));
    check_same_losses("kr_ref", "kr", 12);
    CHECK(all_ckpts_valid("kr", &newest) == 2 && newest == 12);
    CHECK_EQ_INT(count_files("kr", "\\.tmp\\."), 0);
    CHECK(test_sh("test $(grep -c '\"status\"' %s/kr/metrics.jsonl) -eq 1 && "
                  "grep -q '\"status\":\"budget\"' %s/kr/summary.json", t, t) == 0);
    /* the final checkpoints hold the same bytes as the uninterrupted run's */
    CHECK(test_sh("cmp -s %s/kr/ckpt-00000012.bin %s/kr_ref/ckpt-00000012.bin", t, t) == 0);
}

TEST(keep_rotation) {
    REQUIRE(rtrain("", "keep1", "keep1", "--steps 5 --ckpt-every 1 --eval-every 0 --keep 1") == 0);
    int newest;
    CHECK(all_ckpts_valid("keep1", &newest) == 1 && newest == 5);
    REQUIRE(rtrain("", "keep3", "keep3", "--steps 5 --ckpt-every 1 --eval-every 0 --keep-ckpts 3") == 0);
    CHECK(all_ckpts_valid("keep3", &newest) == 3 && newest == 5);
    CHECK(test_sh("cd %s/keep3 && test \"$(ls ckpt-*)\" = \"$(printf 'ckpt-00000003.bin\\nckpt-00000004.bin\\n"
                  "ckpt-00000005.bin')\"", test_tmpdir()) == 0);
    /* --keep 0 would leave none: refused before anything happens */
    CHECK_EQ_INT(rtrain("", "keep0", "keep0", "--steps 5 --ckpt-every 1 --keep 0"), 2); /* a usage error */
    CHECK(test_log_has("keep0", "--keep-ckpts 0: must be in [1, 1000]"));
    CHECK(test_sh("test ! -e %s/keep0", test_tmpdir()) == 0);
}

/* ---- divergence policies -------------------------------------------------------- */

TEST(nonfinite_skip_and_abort) {
    /* one NaN gradient at step 4: abort (the default) ends the run, exit 3 */
    CHECK_EQ_INT(rtrain("", "nf_abort", "nf_abort", "--steps 6 --eval-every 0 --debug-nan-grad-at 4"), 3);
    CHECK(test_log_has("nf_abort", "diverged at step 4"));
    CHECK(test_sh("grep -q '\"status\":\"diverged\",\"step\":4' %s/nf_abort/metrics.jsonl", test_tmpdir()) == 0);
    /* skip: step 4's update is skipped, counted, and the run goes on */
    REQUIRE(rtrain("", "nf_skip", "nf_skip", "--steps 6 --eval-every 0 --debug-nan-grad-at 4 --on-nonfinite skip "
                   "--ckpt-every 1 --keep 10") == 0);
    CHECK(test_log_has("nf_skip", "update skipped"));
    CHECK(test_sh("grep -q '\"step\":4,.*\"grad_norm\":null,.*\"skipped\":\"nonfinite\"' %s/nf_skip/metrics.jsonl",
                  test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"status\":\"budget\",\"reason\":\"\",\"step\":6,.*\"skipped_nonfinite\":1,' "
                  "%s/nf_skip/summary.json", test_tmpdir()) == 0);
    /* the skipped step left weights, moments and linear states untouched */
    CHECK(same_payload("nf_skip", 3, 4));
    CHECK(!same_payload("nf_skip", 4, 5));
    /* steps 1-4 as in a clean run (the NaN enters after step 4's loss) */
    REQUIRE(rtrain("", "nf_clean", "nf_clean", "--steps 6 --eval-every 0") == 0);
    char a[8][32], b[8][32];
    REQUIRE(test_metric_strings("nf_clean", "loss", NULL, a, 8) == 6 && test_metric_strings("nf_skip", "loss", NULL, b, 8) == 6);
    for (int i = 0; i < 4; i++) CHECKF(!strcmp(a[i], b[i]), "step %d: %s vs %s", i + 1, a[i], b[i]);
    CHECK(strcmp(a[4], b[4]) != 0);
    /* a poisoned weight never recovers: skips 3, 4, 5 exceed --max-skips 2 at step 5 */
    CHECK_EQ_INT(rtrain("", "nf_max", "nf_max", "--steps 8 --eval-every 0 --debug-nan-at 3 --on-nonfinite skip "
                        "--max-skips 2"), 3);
    CHECK(test_log_has("nf_max", "diverged at step 5 (too many skipped updates"));
    CHECK(test_sh("grep -q '\"status\":\"diverged\",\"step\":5,.*max-skips' %s/nf_max/metrics.jsonl", test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"skipped_nonfinite\":3,' %s/nf_max/summary.json", test_tmpdir()) == 0);
    /* a bad policy name is a usage error */
    CHECK_EQ_INT(rtrain("", "nf_bad", "nf_bad", "--steps 2 --on-nonfinite ignore"), 2);
}

TEST(loss_spike_detector) {
    /* batch 4, lr 3e-2: by step 24 the loss is ~4 and a scrambled batch gives ~6.3 */
    const char* common = "--steps 26 --batch 4 --lr 3e-2 --eval-every 0 --spike-window 8 --spike-z 4 --debug-spike-at 24";
    /* detection only: one spike event, at step 12; the update is applied */
    REQUIRE(rtrain("", "sp_log", "sp_log", common) == 0);
    CHECK(test_log_has("sp_log", "loss spike at step 24"));
    CHECK(test_sh("test $(grep -c '\"event\":\"spike\"' %s/sp_log/metrics.jsonl) -eq 1 && "
                  "grep -q '\"event\":\"spike\",\"step\":24,.*\"skipped\":false' %s/sp_log/metrics.jsonl",
                  test_tmpdir(), test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"skipped_spikes\":0,\"spikes\":1,' %s/sp_log/summary.json", test_tmpdir()) == 0);
    /* --skip-spikes: step 24's update skipped (same state as after step 23) */
    char extra[256];
    snprintf(extra, sizeof extra, "%s --skip-spikes --ckpt-every 1 --keep 20", common);
    REQUIRE(rtrain("", "sp_skip", "sp_skip", extra) == 0);
    CHECK(test_log_has("sp_skip", "update skipped"));
    CHECK(test_sh("grep -q '\"step\":24,.*\"skipped\":\"spike\"' %s/sp_skip/metrics.jsonl", test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"skipped_spikes\":1,\"spikes\":1,' %s/sp_skip/summary.json", test_tmpdir()) == 0);
    CHECK(same_payload("sp_skip", 23, 24));
    CHECK(!same_payload("sp_skip", 22, 23));
    /* the detector's window is checkpointed: halted at 20 and resumed (a
     * fresh window would be too short to see step 24), the same spike and
     * skip, the same bits */
    snprintf(extra, sizeof extra, "%s --skip-spikes --halt-at 20", common);
    REQUIRE(rtrain("", "sp_split", "sp_split", extra) == 0);
    snprintf(extra, sizeof extra, "%s --skip-spikes --resume", common);
    REQUIRE(rtrain("", "sp_split", "sp_split2", extra) == 0);
    CHECK(test_log_has("sp_split2", "loss spike at step 24"));
    char a[32][32], b[32][32];
    int na = test_metric_strings("sp_skip", "loss", "event", a, 32), nb = test_metric_strings("sp_split", "loss", "event", b, 32);
    CHECK_EQ_INT(na, 26);
    CHECK_EQ_INT(nb, 26);
    for (int i = 0; i < na && i < nb; i++) CHECKF(!strcmp(a[i], b[i]), "step %d: %s vs %s", i + 1, a[i], b[i]);
    /* no false alarm on a clean run with the same detector */
    REQUIRE(rtrain("", "sp_clean", "sp_clean", "--steps 26 --batch 4 --lr 3e-2 --eval-every 0 --spike-window 8 "
                   "--spike-z 4") == 0);
    CHECK(test_sh("! grep -q spike %s/sp_clean/metrics.jsonl", test_tmpdir()) == 0);
}

TEST(final_status_and_exit_codes) {
    /* converged: the target is reached (exit 0) */
    REQUIRE(rtrain("", "st_conv", "st_conv", "--steps 6 --eval-every 2 --target-loss 20") == 0);
    CHECK(test_log_has("st_conv", "converged: step 6"));
    CHECK(test_sh("grep -q '\"status\":\"converged\"' %s/st_conv/summary.json && "
                  "grep -q '\"status\":\"converged\",\"step\":6' %s/st_conv/metrics.jsonl", test_tmpdir(),
                  test_tmpdir()) == 0);
    /* budget with an unreached target: exit 4 */
    CHECK_EQ_INT(rtrain("", "st_budget", "st_budget", "--steps 3 --eval-every 0 --target-loss 0.001"), 4);
    CHECK(test_sh("grep -q '\"status\":\"budget\",\"reason\":\"target loss not reached\"' %s/st_budget/summary.json",
                  test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"status\":\"budget\",\"step\":3' %s/st_budget/metrics.jsonl", test_tmpdir()) == 0);
    /* --resume where no run ever started: an error, and the directory is not created */
    CHECK_EQ_INT(rtrain("", "st_none", "st_none", "--steps 3 --resume"), 1);
    CHECK(test_log_has("st_none", "no checkpoint in"));
    CHECK(test_sh("test ! -e %s/st_none", test_tmpdir()) == 0);
    /* halted: exit 0, then the resume reaches the budget */
    CHECK_EQ_INT(rtrain("", "st_halt", "st_halt", "--steps 3 --eval-every 0 --halt-at 2"), 0);
    CHECK(test_sh("grep -q '\"status\":\"halted\"' %s/st_halt/summary.json", test_tmpdir()) == 0);
    CHECK_EQ_INT(rtrain("", "st_halt", "st_halt2", "--steps 3 --eval-every 0 --resume"), 0);
    CHECK(test_sh("grep -q '\"status\":\"budget\"' %s/st_halt/summary.json && "
                  "test $(grep -c '\"status\"' %s/st_halt/metrics.jsonl) -eq 1", test_tmpdir(), test_tmpdir()) == 0);
}

/* ---- limits up front ---------------------------------------------------------------- */

/* The estimate's parts against what the model really allocates. */
TEST(memory_estimate_matches_allocation) {
    mx_train_config c;
    mx_train_config_default(&c);
    c.model.vocab = 256; c.model.dim = 64; c.model.n_layers = 2; c.model.n_heads = 2; c.model.n_kv_heads = 1;
    c.model.ffn = 128; c.model.seq_len = 32;
    c.batch = 3;
    c.seq = 32;
    mx_mem_estimate e;
    mx_train_estimate(&c, &e);
    mx_recipe r;
    REQUIRE(mx_recipe_parse("fp32", &r) == 0);
    mx_llama m;
    REQUIRE(mx_llama_create(&m, &c.model, &r, 0, 0, 1) == 0);
    REQUIRE(mx_llama_alloc_acts(&m, c.batch, c.seq) == 0);
    CHECK_EQ_INT(e.params, (int64_t)m.n_params * 4);
    CHECK_EQ_INT(e.grads, e.params);
    CHECK_EQ_INT(e.adam, 2 * e.params);
    /* the activation block ends with scratchT [max(V, D), N] */
    int64_t acts = ((m.scratchT - m.acts) + (int64_t)256 * 96) * 4;
    CHECKF(e.acts <= acts && e.acts >= acts - 32 * 16 * 4, "estimate %lld, allocated %lld", (long long)e.acts,
           (long long)acts);
    CHECK(e.total > e.params + e.grads + e.adam + e.acts);
    mx_llama_free(&m);
    /* the checkpoint's size on disk, from a real one */
    CHECK(e.ckpt_bytes >= e.params * 3 && e.ckpt_bytes < e.params * 3 + 64 * 1024);
    /* the 8B preset at its full context does not fit this machine */
    mx_model_preset("llama3.1-8b", &c.model);
    c.seq = 0;
    c.batch = 1;
    mx_train_estimate(&c, &e);
    CHECK(e.params == 8030261248LL * 4);
    CHECK(e.total > (int64_t)100 << 30);
    CHECK(mx_mem_available() > 0);
}

TEST(memory_limit_refuses_before_allocating) {
    /* an 8B model on this machine: refused with the estimate, exit 5, nothing created */
    CHECK_EQ_INT(test_sh("%s train --preset llama3.1-8b --steps 1 --out %s/lim8b > %s/lim8b.log 2>&1",
                         test_mxlm_bin(), test_tmpdir(), test_tmpdir()), 5);
    CHECK(test_log_has("lim8b", "needs about"));
    CHECK(test_log_has("lim8b", "MemAvailable"));
    CHECK(test_log_has("lim8b", "--ignore-limits"));
    CHECK(test_sh("test ! -e %s/lim8b", test_tmpdir()) == 0);
    /* a small limit for the tiny model: refused; --ignore-limits runs it anyway */
    CHECK_EQ_INT(rtrain("", "limx", "limx", "--steps 2 --batch 32 --val-tokens 1024 --mem-limit-mib 1"), 5);
    CHECK(test_log_has("limx", "but 1.0 MiB are available (--mem-limit-mib)"));
    CHECK_EQ_INT(rtrain("", "limx", "limx2", "--steps 2 --batch 32 --val-tokens 1024 --mem-limit-mib 1 --ignore-limits"), 0);
    CHECK(test_log_has("limx2", "warning: the estimate exceeds"));
    /* the estimate is printed with --describe and at the start of a run */
    CHECK(test_log_has("limx2", "memory: "));
    CHECK(test_sh("%s train --preset 1b --describe | grep -q '^memory  .* MiB estimated: parameters 5716.3'",
                  test_mxlm_bin()) == 0);
}

TEST(unwritable_dir_and_full_disk) {
    const char* t = test_tmpdir();
    /* a directory that cannot be created: before any step */
    CHECK_EQ_INT(rtrain("", "../../../dev/null/x", "dn", "--steps 2"), 1);
    CHECK(test_log_has("dn", "cannot create"));
    /* a directory where no file can be written (file size limit 0): the 64 KiB probe
     * fails before the first step, nothing written */
    CHECK_EQ_INT(rtrain_fsize(0, "ro", "ro", "--steps 2"), 1);
    CHECK(test_log_has("ro", "cannot be written"));
    CHECK(test_sh("test -z \"$(ls %s/ro | grep -v '^\\.lock$')\"", t) == 0);
    /* the disk fills at a checkpoint (files limited to 150 KiB: 300 blocks of 512 bytes for sh; a checkpoint is
     * ~330 KB): the run stops at its next checkpoint with the reason, the
     * previous checkpoint stays the newest and valid, no temporary is left,
     * and a later --resume finishes the run bit-identically */
    const char* common = "--steps 8 --ckpt-every 2 --eval-every 4";
    REQUIRE(rtrain("", "full_ref", "full_ref", common) == 0);
    char extra[256];
    snprintf(extra, sizeof extra, "%s --halt-at 4", common);
    REQUIRE(rtrain("", "full", "full1", extra) == 0);
    snprintf(extra, sizeof extra, "%s --resume", common);
    CHECK_EQ_INT(rtrain_fsize(300, "full", "full2", extra), 1);
    CHECK(test_log_has("full2", "ckpt-00000006.bin: cannot write checkpoint: File too large (the previous checkpoint is kept)"));
    int newest;
    CHECK(all_ckpts_valid("full", &newest) == 2 && newest == 4); /* 2 and 4 (--keep 2) */
    CHECK_EQ_INT(count_files("full", "\\.tmp\\."), 0);
    CHECK(test_sh("grep -q '\"status\":\"error\",\"reason\":\".*cannot write checkpoint: File too large' "
                  "%s/full/summary.json", t) == 0);
    CHECK_EQ_INT(rtrain("", "full", "full3", extra), 0);
    CHECK(test_log_has("full3", "ckpt-00000004.bin (step 4)"));
    check_same_losses("full_ref", "full", 8);
}

/* A version-1 checkpoint (before the skip counters and the loss window)
 * still loads, with those zero; version 2 round-trips them. */
TEST(checkpoint_v1_still_loads) {
    mx_llama a, b;
    REQUIRE(test_micro_llama("bf16", &a, &b));
    mx_llama_init_weights(&a, 3);
    size_t n = a.n_params;
    float *m1 = calloc(n, 4), *v1 = calloc(n, 4), *m2 = calloc(n, 4), *v2 = calloc(n, 4);
    static mx_ckpt_meta meta, got;
    REQUIRE(m1 && v1 && m2 && v2);
    meta.step = 5; meta.sample = 10; meta.tokens = 80; meta.val_loss0 = 3.0f; meta.tokens_to_target = -1;
    meta.skipped_nonfinite = 2; meta.skipped_spikes = 1; meta.spikes = 4; meta.n_window = 3;
    meta.window[0] = 1.5f; meta.window[1] = 2.5f; meta.window[2] = -0.0f;
    char p2[512], p1[512];
    snprintf(p2, sizeof p2, "%s/v2.bin", test_tmpdir());
    snprintf(p1, sizeof p1, "%s/v1.bin", test_tmpdir());
    REQUIRE(mx_ckpt_save(p2, &a, m1, v1, &meta, "x = 1\n") == 0);
    REQUIRE(mx_ckpt_load(p2, &b, m2, v2, &got, "x = 1\n") == 0);
    CHECK_EQ_INT(got.skipped_nonfinite, 2);
    CHECK_EQ_INT(got.skipped_spikes, 1);
    CHECK_EQ_INT(got.spikes, 4);
    CHECK_EQ_INT(got.n_window, 3);
    CHECK_SAME_F(got.window[1], 2.5f);
    CHECK(!memcmp(&got.window[2], &meta.window[2], 4)); /* -0 keeps its sign bit */
    /* the same file as version 1: without the 3 counters, n_window and the window */
    size_t len;
    unsigned char* f = test_read_file(p2, &len);
    REQUIRE(f);
    uint32_t ver = 1, flen;
    memcpy(&flen, f + 12, 4);
    size_t cut = 16 + flen + 36, drop = 24 + 4 + 3 * 4;
    memcpy(f + 8, &ver, 4);
    memmove(f + cut, f + cut + drop, len - cut - drop);
    len -= drop;
    uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), f, (uInt)(len - 12));
    memcpy(f + len - 12, &crc, 4);
    FILE* o = fopen(p1, "wb");
    REQUIRE(o);
    CHECK(fwrite(f, 1, len, o) == len);
    fclose(o);
    free(f);
    memset(b.params, 0, n * 4);
    REQUIRE(mx_ckpt_load(p1, &b, m2, v2, &got, "x = 1\n") == 0);
    CHECK(!memcmp(a.params, b.params, n * 4));
    CHECK_EQ_INT(got.step, 5);
    CHECK_EQ_INT(got.sample, 10);
    CHECK_EQ_INT(got.skipped_nonfinite, 0);
    CHECK_EQ_INT(got.n_window, 0);
    /* an out-of-range window length is refused (its CRC made valid) */
    f = test_read_file(p2, &len);
    REQUIRE(f);
    int32_t bad = MX_SPIKE_WINDOW_MAX + 1;
    memcpy(f + cut + 24, &bad, 4);
    crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), f, (uInt)(len - 12));
    memcpy(f + len - 12, &crc, 4);
    o = fopen(p1, "wb");
    REQUIRE(o);
    CHECK(fwrite(f, 1, len, o) == len);
    fclose(o);
    free(f);
    CHECK(mx_ckpt_load(p1, &b, m2, v2, &got, "x = 1\n") == MX_EFORMAT);
    free(m1); free(v1); free(m2); free(v2);
    mx_llama_free(&a);
    mx_llama_free(&b);
}
