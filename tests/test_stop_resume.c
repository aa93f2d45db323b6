/* test_stop_resume.c: graceful stops and resumes (docs/training.md "Stopping, resuming, extending"), and
 * the up-front checks of `mxlm train` (docs/using.md "Usage errors"): SIGTERM at a known moment (the crash
 * point action `term`, no timing race) checkpoints and exits 143, --resume gives the uninterrupted run's
 * losses bit for bit; a finished run's resume writes nothing; --steps extends it on the schedule's floor;
 * --ckpt picks an older checkpoint; options disagreeing with config.txt are refused by name; a run that
 * failed before its first step does not block the corrected command; bad option values exit 2 naming the
 * option and create nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#define SR_MICRO "--vocab 256 --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --context 32 --batch 2 " \
                 "--val-tokens 256 --lr 1e-2 --log-every 1 --recipe bf16 --device cpu --eval-every 0"

static void shards(void) { test_sentence_shards("sr_", 777, 20000, 3000); }

/* mxlm train SR_MICRO + data + --out TMP/out + extra, output in TMP/log.log; env: prefix (e.g. a crash point) */
static int srt(const char* env, const char* out, const char* log, const char* extra) {
    shards();
    return test_sh("%s %s train " SR_MICRO " --train %s/sr_train.bin --val %s/sr_val.bin --out %s/%s %s > %s/%s.log 2>&1",
                   env, test_mxlm_bin(), test_tmpdir(), test_tmpdir(), test_tmpdir(), out, extra, test_tmpdir(), log);
}

static int losses(const char* dir, char v[][32], int max) { return test_metric_strings(dir, "loss", "val_loss", v, max); }

TEST(sigterm_then_resume_bit_identical) {
    REQUIRE(srt("", "sr_straight", "sr_straight", "--steps 8") == 0);
    /* SIGTERM after update 3: a checkpoint of step 3, status and summary "stopped", exit 128 + 15 */
    CHECK_EQ_INT(srt("MXLM_TEST_CRASH=update@3:term", "sr_stop", "sr_stop1", "--steps 8"), 143);
    CHECK(test_log_has("sr_stop1", "stopped by SIGTERM after step 3"));
    CHECK(test_log_has("sr_stop1", "--resume"));
    CHECK(test_sh("test -f %s/sr_stop/ckpt-00000003.bin", test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"status\":\"stopped\"' %s/sr_stop/summary.json", test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '\"status\":\"stopped\",\"step\":3' %s/sr_stop/metrics.jsonl", test_tmpdir()) == 0);
    /* SIGINT before the first step (after the step-0 evaluation): a step-0 checkpoint, 130 */
    CHECK_EQ_INT(srt("MXLM_TEST_CRASH=start@0:int", "sr_int", "sr_int", "--steps 8"), 130);
    CHECK(test_sh("test -f %s/sr_int/ckpt-00000000.bin", test_tmpdir()) == 0);
    /* --resume alone: the run's config.txt gives every option */
    REQUIRE(test_sh("%s train --out %s/sr_stop --resume > %s/sr_stop2.log 2>&1", test_mxlm_bin(), test_tmpdir(),
                    test_tmpdir()) == 0);
    REQUIRE(test_sh("%s train --out %s/sr_int --resume > %s/sr_int2.log 2>&1", test_mxlm_bin(), test_tmpdir(),
                    test_tmpdir()) == 0);
    char a[16][32], b[16][32], c[16][32];
    REQUIRE(losses("sr_straight", a, 16) == 8);
    REQUIRE(losses("sr_stop", b, 16) == 8);
    REQUIRE(losses("sr_int", c, 16) == 8);
    for (int i = 0; i < 8; i++) {
        CHECKF(!strcmp(a[i], b[i]), "step %d: %s vs %s", i + 1, a[i], b[i]);
        CHECKF(!strcmp(a[i], c[i]), "step %d: %s vs %s", i + 1, a[i], c[i]);
    }
}

TEST(resume_finished_extend_ckpt_and_identity) {
    REQUIRE(srt("", "sr_fin", "sr_fin", "--steps 6 --ckpt-every 2 --keep 5") == 0);
    /* a finished run: --resume changes nothing it wrote */
    REQUIRE(test_sh("cd %s/sr_fin && md5sum config.txt metrics.jsonl summary.json ckpt-*.bin > ../sr_fin.md5",
                    test_tmpdir()) == 0);
    CHECK_EQ_INT(srt("", "sr_fin", "sr_fin2", "--steps 6 --resume"), 0);
    CHECK(test_log_has("sr_fin2", "the run is finished"));
    CHECK(test_sh("cd %s/sr_fin && md5sum -c --quiet ../sr_fin.md5", test_tmpdir()) == 0);
    /* options that disagree with config.txt: refused by name, nothing changed; the validation set too */
    CHECK_EQ_INT(srt("", "sr_fin", "sr_fin3", "--steps 6 --resume --lr 5e-3"), 2);
    CHECK(test_log_has("sr_fin3", "--lr 5e-3 differs"));
    CHECK_EQ_INT(srt("", "sr_fin", "sr_fin4", "--steps 6 --resume --val-tokens 128"), 2);
    CHECK(test_log_has("sr_fin4", "--val-tokens"));
    CHECK_EQ_INT(test_sh("%s train --out %s/sr_fin --resume --val %s/sr_train.bin > %s/sr_fin5.log 2>&1",
                         test_mxlm_bin(), test_tmpdir(), test_tmpdir(), test_tmpdir()), 2);
    CHECK(test_log_has("sr_fin5", "--val "));
    CHECK(test_sh("cd %s/sr_fin && md5sum -c --quiet ../sr_fin.md5", test_tmpdir()) == 0);
    /* extended: --steps 9 keeps the 6-step schedule; steps 7..9 at the floor (0.1 x 1e-2) */
    REQUIRE(test_sh("%s train --out %s/sr_fin --resume --steps 9 > %s/sr_fin6.log 2>&1", test_mxlm_bin(),
                    test_tmpdir(), test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '^schedule-steps = 6$' %s/sr_fin/config.txt", test_tmpdir()) == 0);
    char lr[16][32], a[16][32], b[16][32];
    REQUIRE(test_metric_strings("sr_fin", "lr", NULL, lr, 16) == 9);
    for (int i = 6; i < 9; i++) CHECK_NEAR(atof(lr[i]), 1e-3, 1e-12);
    /* --ckpt: back to step 4 of the 9-step run; the newer checkpoints moved aside; the same losses again */
    REQUIRE(losses("sr_fin", a, 16) == 9);
    REQUIRE(test_sh("%s train --out %s/sr_fin --resume --ckpt %s/sr_fin/ckpt-00000004.bin > %s/sr_fin7.log 2>&1",
                    test_mxlm_bin(), test_tmpdir(), test_tmpdir(), test_tmpdir()) == 0);
    CHECK(test_log_has("sr_fin7", "moved aside"));
    CHECK(test_sh("test -f %s/sr_fin/ckpt-00000006.bin.superseded", test_tmpdir()) == 0);
    REQUIRE(losses("sr_fin", b, 16) == 9);
    for (int i = 0; i < 9; i++) CHECKF(!strcmp(a[i], b[i]), "step %d: %s vs %s", i + 1, a[i], b[i]);
    CHECK_EQ_INT(srt("", "sr_fin", "sr_fin8", "--steps 6 --ckpt x.bin"), 2); /* --ckpt without --resume */
}

TEST(failed_before_first_step_does_not_block) {
    shards();
    /* a shard with an id beyond --vocab 128: refused at open, naming the file and offset */
    CHECK_EQ_INT(test_sh("%s train " SR_MICRO " --vocab 128 --steps 2 --train %s/sr_train.bin --val %s/sr_val.bin "
                         "--out %s/sr_fail > %s/sr_fail.log 2>&1", test_mxlm_bin(), test_tmpdir(), test_tmpdir(),
                         test_tmpdir(), test_tmpdir()), 1);
    CHECK(test_log_has("sr_fail", "sr_train.bin: token id"));
    CHECK(test_log_has("sr_fail", "at token offset"));
    /* the corrected command, without --resume, in the same directory */
    CHECK_EQ_INT(srt("", "sr_fail", "sr_fail2", "--steps 2"), 0);
}

/* Bad values: exit 2, a message naming the option, no run directory. */
TEST(train_option_ranges_exit_2) {
    static const char* const bad[][2] = {
        {"--lr nan", "--lr"}, {"--lr -1", "--lr"}, {"--lr inf", "--lr"}, {"--beta1 1", "--beta1"},
        {"--beta2 -0.1", "--beta2"}, {"--adam-eps 0", "--adam-eps"}, {"--weight-decay -1", "--weight-decay"},
        {"--clip nan", "--clip"}, {"--warmup -3", "--warmup"}, {"--min-lr-frac 1.5", "--min-lr-frac"},
        {"--threads -2", "--threads"}, {"--keep 0", "--keep-ckpts"}, {"--ckpt-every -1", "--ckpt-every"},
        {"--eval-every -5", "--eval-every"}, {"--layers -1", "--layers"}, {"--bf16-first 3", "--bf16-first"},
        {"--steps 0", "--steps"}, {"--val-tokens 0", "--val-tokens"}, {"--seq 64", "--seq"},
        {"--steps 5 --halt-at 9", "--halt-at"}, {"--spike-z -1", "--spike-z"}, {"--target-loss nan", "--target-loss"},
        {"--recipe mxfp4-fdw-h16 --batch 1 --seq 31", "--recipe"}, {"--recipe nosuch", "mxfp4-fdw-h16"},
        {"--preset nosuch", "20m"}, {"--norm-eps -1", "--norm-eps"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char log[32];
        snprintf(log, sizeof log, "sr_bad%zu", i);
        int rc = srt("", "sr_bad_out", log, bad[i][0]);
        CHECKF(rc == 2, "%s: exit %d", bad[i][0], rc);
        CHECKF(test_log_has(log, bad[i][1]), "%s: no '%s' in the message", bad[i][0], bad[i][1]);
        CHECKF(test_sh("test ! -e %s/sr_bad_out", test_tmpdir()) == 0, "%s: the run directory was created", bad[i][0]);
        test_sh("rm -rf %s/sr_bad_out", test_tmpdir());
    }
}

TEST(train_list_recipes) {
    REQUIRE(test_sh("%s train --list-recipes > %s/sr_lr.log 2>&1", test_mxlm_bin(), test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '^mxfp4-fdw-h16 .*fprop=' %s/sr_lr.log", test_tmpdir()) == 0);
    CHECK(test_sh("grep -q '^bf16 ' %s/sr_lr.log", test_tmpdir()) == 0);
    CHECK(test_sh("test $(wc -l < %s/sr_lr.log) -ge 10", test_tmpdir()) == 0);
}
