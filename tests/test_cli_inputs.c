/* test_cli_inputs.c: inputs checked before anything is created (docs/using.md "Usage errors"): prep's
 * outputs (an empty training split, a validation split of the whole input, one name for both splits,
 * output patterns with %s / %n never used as printf formats, the output folder created), file names
 * with '%' in them handled, a shard glob that matches nothing refused before the run directory exists,
 * and the seeded, time-bounded CLI fuzz test (tests/cli_fuzz.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"


TEST(prep_refuses_untrainable_outputs) {
    const char* in = test_docs_jsonl("ci_docs.jsonl", 20);
    const char* t = test_tmpdir();
    char a[2048];
    /* the output folder is created */
    snprintf(a, sizeof a, "--out %s/ci_sub/deeper/x --val-docs 2 %s", t, in);
    CHECK_EQ_INT(test_prep("ci_ok", a), 0);
    CHECK(test_sh("test -s %s/ci_sub/deeper/x_train_000000.bin && test -s %s/ci_sub/deeper/x_val_000000.bin", t, t) == 0);
    /* a validation split of every document: no training document, nothing written */
    snprintf(a, sizeof a, "--out %s/ci_all/x --val-docs 20 %s", t, in);
    CHECK_EQ_INT(test_prep("ci_all", a), 1);
    CHECK(test_log_has("ci_all", "leaves no training document"));
    CHECK(test_sh("test -z \"$(ls %s/ci_all 2>/dev/null)\"", t) == 0);
    snprintf(a, sizeof a, "--out %s/ci_all/x --val-docs 99 %s", t, in);
    CHECK_EQ_INT(test_prep("ci_all2", a), 1);
    CHECK(test_log_has("ci_all2", "the input has 20"));
    /* an empty input: an empty training split, no shard */
    snprintf(a, sizeof a, "--out %s/ci_empty/x %s/ci_none.jsonl", t, t);
    test_sh(": > %s/ci_none.jsonl", t);
    CHECK_EQ_INT(test_prep("ci_empty", a), 1);
    CHECK(test_log_has("ci_empty", "the training split is empty"));
    CHECK(test_sh("test -z \"$(ls %s/ci_empty 2>/dev/null)\"", t) == 0);
    /* one name for both splits: a usage error */
    snprintf(a, sizeof a, "--train-pattern %s/ci_same.bin --val-pattern %s/ci_same.bin --val-docs 2 %s", t, t, in);
    CHECK_EQ_INT(test_prep("ci_same", a), 2);
    CHECK(test_log_has("ci_same", "the same name"));
    CHECK(test_sh("test ! -e %s/ci_same.bin", t) == 0);
    /* patterns with %s, %n or two conversions: refused (2), never a printf format */
    static const char* const bad[] = {"%s", "%n", "%d_%d", "%x", "%99999d"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(a, sizeof a, "--train-pattern '%s/ci_pat_%s.bin' %s", t, bad[i], in);
        CHECKF(test_prep("ci_pat", a) == 2, "pattern %s", bad[i]);
        CHECKF(test_log_has("ci_pat", "only one %d"), "pattern %s", bad[i]);
    }
    /* %% and %04d are fine */
    snprintf(a, sizeof a, "--train-pattern '%s/ci_pct%%%%_%%04d.bin' %s", t, in);
    CHECK_EQ_INT(test_prep("ci_pct", a), 0);
    CHECK(test_sh("test -s '%s/ci_pct%%_0000.bin'", t) == 0);
    /* an input and a shard whose names hold %s%n: named in the messages, no crash */
    CHECK(test_sh("cp %s '%s/ci_%%s%%n.jsonl'", in, t) == 0);
    snprintf(a, sizeof a, "--train-pattern '%s/ci_%%s%%n.bin' '%s/ci_%%s%%n.jsonl'", t, t);
    CHECK_EQ_INT(test_prep("ci_pn", a), 2);
    CHECK(test_sh("printf 'garbage' > '%s/ci_%%s%%n.bin'; %s train --steps 1 --train '%s/ci_%%s%%n.bin' --out %s/ci_pnrun "
                  "> %s/ci_pnt.log 2>&1; test $? -eq 1", t, test_mxlm_bin(), t, t, t) == 0);
    CHECK(test_log_has("ci_pnt", "ci_%s%n.bin"));
}

/* A training or validation glob that matches nothing: refused (1) before the run directory is made. */
TEST(train_refuses_missing_shards_before_the_run_dir) {
    const char* t = test_tmpdir();
    static const char* const which[] = {"train", "val"};
    for (int i = 0; i < 2; i++) {
        CHECKF(test_sh("rm -rf %s/ci_noshard; %s train --steps 1 --%s '%s/ci_nowhere/x_*.bin' --out %s/ci_noshard "
                       "> %s/ci_noshard.log 2>&1; test $? -eq 1", t, test_mxlm_bin(), which[i], t, t, t) == 0,
               "--%s", which[i]);
        CHECKF(test_log_has("ci_noshard", "no shard matches (nothing was created)"), "--%s", which[i]);
        CHECKF(test_sh("test ! -e %s/ci_noshard", t) == 0, "--%s: the run directory was made", which[i]);
    }
}

/* --device cuda with a recipe the GPU does not run (fp8 delayed scaling, a rotation on bf16) or
 * --attn flash at a head dim it does not run: a usage error (2) before anything is created, on any
 * machine (this one has no GPU: the recipe is judged before the device is probed). */
TEST(train_gpu_refusals_are_usage_errors) {
    const char* t = test_tmpdir();
    static const char* const args[][2] = {
        {"--recipe fp8-delayed", "delayed scaling is CPU-only"},
        {"--recipe bf16+f:had=h16", "rotates mxfp4, nvfp4 or mxfp8 operands only"},
        {"--recipe bf16 --attn flash", "runs head dims 64 and 128"},
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        CHECKF(test_sh("rm -rf %s/ci_gpuref; %s train --device cuda --preset tiny --steps 1 %s --out %s/ci_gpuref "
                       "> %s/ci_gpuref.log 2>&1; test $? -eq 2", t, test_mxlm_bin(), args[i][0], t, t) == 0,
               "%s: not exit 2", args[i][0]);
        CHECKF(test_log_has("ci_gpuref", args[i][1]), "%s: message", args[i][0]);
        CHECKF(test_sh("test ! -e %s/ci_gpuref", t) == 0, "%s: the run directory was made", args[i][0]);
    }
}

/* The seeded CLI fuzz test (10 s of commands, seed 19: the same commands every time). */
TEST(cli_fuzz_exit_codes) {
    int rc = test_sh("bash tests/cli_fuzz.sh %s %s/cli_fuzz 19 10 > %s/cli_fuzz.log 2>&1", test_mxlm_bin(),
                     test_tmpdir(), test_tmpdir());
    if (rc) test_sh("tail -n 30 %s/cli_fuzz.log >&2", test_tmpdir());
    CHECK_EQ_INT(rc, 0);
    CHECK(test_log_has("cli_fuzz", ", 0 failures"));
}
