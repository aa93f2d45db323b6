/* test_hostile_io.c: issue 48's classes of hostile input about files and paths (docs/reliability.md "Hostile-input
 * classes"; the CLI's classes are test_hostile.c), each through the CLI as a user would meet it:
 *   1  an output path that exists and is not a regular file (a link, a FIFO, a directory);
 *   2  two prep runs on one output (the lock; a failing run removes only its own files);
 *   3  a second prep to the same outputs (refused without --replace; --replace removes the old set);
 *   4  paths longer than mxlm takes (refused up front, exit 2);
 *   12 --shard-tokens and other sizes below a sane minimum;
 *   13 FIFOs and other special files as inputs (refused at once, nothing created);
 *   14 a file size limit (ulimit -f) at a checkpoint: the full-disk error, the last checkpoint kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

/* TMP/hx_q.in: a 2 x 32 matrix of ones (float32). */
static void hx_qin(void) {
    test_sh("python3 -c \"import struct,sys; sys.stdout.buffer.write(struct.pack('<64f', *([1.0]*64)))\" > %s/hx_q.in",
            test_tmpdir());
}

/* mxlm quant of TMP/hx_q.in into OUT, output to TMP/LOG.log; the exit status. */
static int hx_quant(const char* log, const char* out) {
    const char* t = test_tmpdir();
    hx_qin();
    return test_sh("%s quant --rows 2 --cols 32 --in %s/hx_q.in --out %s > %s/%s.log 2>&1", test_mxlm_bin(), t, out, t,
                   log);
}

/* ---- class 1: writers and what is not a regular file ---------------------------------------- */

TEST(hostile_out_link_stays_a_link) {
    const char* t = test_tmpdir();
    /* quant --out naming a link to a regular file: the file is written, the link stays a link */
    test_sh("rm -rf %s/hx1 && mkdir -p %s/hx1/real && echo old > %s/hx1/real/q.out && ln -s real/q.out %s/hx1/q.lnk", t,
            t, t, t);
    char out[600];
    snprintf(out, sizeof out, "%s/hx1/q.lnk", t);
    CHECK_EQ_INT(hx_quant("hx1_q", out), 0);
    CHECK(test_sh("test -L %s/hx1/q.lnk && test \"$(stat -c %%s %s/hx1/real/q.out)\" = 256", t, t) == 0);
    CHECK(test_sh("test -z \"$(ls -A %s/hx1 | grep -v '^real$\\|^q.lnk$')\"", t) == 0); /* no temporary beside it */
    /* prep --train-pattern naming a link to a regular file: the same */
    test_sh("echo old > %s/hx1/real/s.bin && ln -s real/s.bin %s/hx1/s.lnk", t, t);
    char a[1400];
    snprintf(a, sizeof a, "--replace --train-pattern %s/hx1/s.lnk %s", t, test_docs_jsonl("hx_docs.jsonl", 40)); /* it names a file */
    CHECK_EQ_INT(test_prep("hx1_p", a), 0);
    CHECK(test_sh("test -L %s/hx1/s.lnk && test \"$(stat -c %%s %s/hx1/real/s.bin)\" -gt 100", t, t) == 0);
    CHECK(test_sh("test -z \"$(ls -A %s/hx1 %s/hx1/real | grep -v ':$' | grep 'part\\|tmp')\"", t, t) == 0);
}

TEST(hostile_out_fifo_written_through) {
    const char* t = test_tmpdir();
    /* a FIFO (and a link to one) with a reader: written through, still a FIFO afterwards */
    test_sh("rm -rf %s/hx1f && mkdir -p %s/hx1f && mkfifo %s/hx1f/f && ln -s f %s/hx1f/f.lnk", t, t, t, t);
    char out[600];
    snprintf(out, sizeof out, "%s/hx1f/f.lnk", t);
    hx_qin();
    CHECK_EQ_INT(test_sh("(timeout 20 cat %s/hx1f/f > %s/hx1f/got &) ; sleep 0.3; %s quant --rows 2 --cols 32 "
                         "--in %s/hx_q.in --out %s > %s/hx1f.log 2>&1; r=$?; sleep 0.3; exit $r",
                         t, t, test_mxlm_bin(), t, out, t),
                 0);
    CHECK(test_sh("test -p %s/hx1f/f && test -L %s/hx1f/f.lnk && test \"$(stat -c %%s %s/hx1f/got)\" = 256", t, t, t) ==
          0);
    /* a FIFO nobody reads: refused at once with the reason, not a hang */
    CHECK_EQ_INT(test_sh("timeout 20 %s quant --rows 2 --cols 32 --in %s/hx_q.in --out %s/hx1f/f > %s/hx1f_nr.log "
                         "2>&1", test_mxlm_bin(), t, t, t),
                 1);
    CHECK(test_log_has("hx1f_nr", "no process reads"));
    CHECK(test_sh("test -p %s/hx1f/f", t) == 0);
    /* a link to a device: written through (the test never names a device itself: a writer that replaced
     * what it names would replace the device, while through a link only the link is lost) */
    test_sh("ln -s /dev/null %s/hx1f/null.lnk", t);
    snprintf(out, sizeof out, "%s/hx1f/null.lnk", t);
    CHECK_EQ_INT(hx_quant("hx1f_null", out), 0);
    CHECK(test_sh("test -L %s/hx1f/null.lnk && test -c /dev/null", t) == 0);
    /* a directory and a dangling link: refused, untouched */
    test_sh("mkdir -p %s/hx1f/d && ln -sf nowhere %s/hx1f/dang", t, t);
    snprintf(out, sizeof out, "%s/hx1f/d", t);
    CHECK_EQ_INT(hx_quant("hx1f_dir", out), 1);
    CHECK(test_log_has("hx1f_dir", "a directory"));
    snprintf(out, sizeof out, "%s/hx1f/dang", t);
    CHECK_EQ_INT(hx_quant("hx1f_dang", out), 1);
    CHECK(test_log_has("hx1f_dang", "a symbolic link to nothing"));
    CHECK(test_sh("test -d %s/hx1f/d && test -L %s/hx1f/dang && test ! -e %s/hx1f/nowhere", t, t, t) == 0);
}

/* ---- class 2: two prep runs on one output ----------------------------------------------------- */

TEST(hostile_prep_output_locked) {
    const char* t = test_tmpdir();
    char a[1400];
    test_sh("rm -rf %s/hx2 && mkdir -p %s/hx2", t, t);
    snprintf(a, sizeof a, "--out %s/hx2/x --val-docs 2 %s", t, test_docs_jsonl("hx_docs.jsonl", 40));
    REQUIRE(test_prep("hx2_a", a) == 0);
    test_sh("md5sum %s/hx2/x_*.bin > %s/hx2.md5", t, t);
    /* another prep holds the outputs (as a running one does): refused, its shards untouched */
    CHECK_EQ_INT(test_sh("flock -n %s/hx2/.x_train_%%06d.bin.lock %s prep --encoding tiny --quiet %s > %s/hx2_b.log "
                         "2>&1",
                         t, test_mxlm_bin(), a, t),
                 1);
    CHECK(test_log_has("hx2_b", "another mxlm prep is writing"));
    CHECK(test_sh("md5sum -c --quiet %s/hx2.md5", t) == 0);
    /* two at once: at most one succeeds; what the winner reports is on disk, whole */
    test_sh("for i in $(seq 1 3000); do echo \"{\\\"text\\\":\\\"doc $i $i $i of many words in a row\\\"}\"; done "
            "> %s/hx2_big.jsonl", t);
    snprintf(a, sizeof a, "--out %s/hx2/y --shard-tokens 65536 %s/hx2_big.jsonl", t, t);
    test_sh("(%s prep --encoding tiny --quiet %s > %s/hx2_p1.log 2>&1; echo $? > %s/hx2_p1.rc) & "
            "(%s prep --encoding tiny --quiet %s > %s/hx2_p2.log 2>&1; echo $? > %s/hx2_p2.rc) & wait",
            test_mxlm_bin(), a, t, t, test_mxlm_bin(), a, t, t);
    CHECK(test_sh("grep -qx 0 %s/hx2_p1.rc || grep -qx 0 %s/hx2_p2.rc", t, t) == 0);
    CHECK(test_sh("test -s %s/hx2/y_train_000000.bin", t) == 0);
    CHECK(test_sh("test -z \"$(ls -A %s/hx2 | grep part)\"", t) == 0);
}

/* ---- class 3: a second prep to the same outputs ------------------------------------------------ */

TEST(hostile_prep_stale_shards) {
    const char* t = test_tmpdir();
    char a[1400];
    test_sh("rm -rf %s/hx3 && mkdir -p %s/hx3", t, t);
    test_sh("for i in $(seq 1 4000); do echo \"{\\\"text\\\":\\\"doc $i $i $i of many words in a row\\\"}\"; done "
            "> %s/hx3_big.jsonl", t);
    /* small shards: several files */
    snprintf(a, sizeof a, "--out %s/hx3/x --val-docs 10 --shard-tokens 65536 %s/hx3_big.jsonl", t, t);
    REQUIRE(test_prep("hx3_a", a) == 0);
    REQUIRE(test_sh("test -s %s/hx3/x_train_000001.bin", t) == 0);
    test_sh("md5sum %s/hx3/x_*.bin > %s/hx3.md5", t, t);
    /* the same outputs again, other --shard-tokens: refused, nothing touched */
    snprintf(a, sizeof a, "--out %s/hx3/x --val-docs 10 --shard-tokens 1000000 %s/hx3_big.jsonl", t, t);
    CHECK_EQ_INT(test_prep("hx3_b", a), 1);
    CHECK(test_log_has("hx3_b", "already has"));
    CHECK(test_log_has("hx3_b", "--replace"));
    CHECK(test_sh("md5sum -c --quiet %s/hx3.md5", t) == 0);
    /* a plain --train-pattern with a %d is refused the same way */
    snprintf(a, sizeof a, "--train-pattern '%s/hx3/x_train_%%03d.bin' %s/hx3_big.jsonl", t, t);
    CHECK_EQ_INT(test_prep("hx3_c", a), 1);
    CHECK(test_log_has("hx3_c", "already has"));
    /* --replace: the whole set replaced, the old higher-numbered shards gone, a glob takes only the new */
    snprintf(a, sizeof a, "--replace --out %s/hx3/x --val-docs 10 --shard-tokens 1000000 %s/hx3_big.jsonl", t, t);
    CHECK_EQ_INT(test_prep("hx3_d", a), 0);
    CHECK(test_sh("test \"$(ls %s/hx3/x_train_*.bin)\" = %s/hx3/x_train_000000.bin", t, t) == 0);
    CHECK(test_sh("test \"$(ls %s/hx3/x_val_*.bin)\" = %s/hx3/x_val_000000.bin", t, t) == 0);
    /* an interrupted run leaves nothing a shard glob takes: its files are hidden (.NAME.part) */
    /* 400,000 documents (about 0.5 s of prep where the first part appears after a few ms): the kill lands
     * while shards are still being written, not in the rename loop at the end (a 12,000-document input was
     * done in 27 ms and CI once killed it between its renames) */
    test_sh("awk 'BEGIN{for(i=1;i<=400000;i++) printf \"{\\\"text\\\":\\\"doc %%d %%d of many words\\\"}\\n\", i, i}' "
            "> %s/hx3_many.jsonl", t);
    const int killed = test_sh("%s prep --encoding tiny --quiet --threads 1 --out %s/hx3/k --shard-tokens 65536 "
                               "%s/hx3_many.jsonl & p=$!; for i in $(seq 1 200); do ls -A %s/hx3 | grep -q "
                               "'^\\.k_.*part' && break; sleep 0.01; done; { kill -9 $p; wait $p; } 2>/dev/null; "
                               "test $? = 137",
                               test_mxlm_bin(), t, t, t) == 0;
    if (killed) CHECK(test_sh("test -z \"$(ls %s/hx3 | grep '^k_')\"", t) == 0); /* else it finished first */
}

/* ---- class 12: sizes that let a user hurt themselves ------------------------------------------ */

TEST(hostile_size_bounds) {
    const char* t = test_tmpdir();
    char a[1400];
    test_sh("rm -rf %s/hx12 && mkdir -p %s/hx12", t, t);
    /* --shard-tokens below the minimum (one file per token) and above 2^31-1: usage errors, nothing written */
    static const char* const bad[] = {"1", "0", "-5", "65535", "2147483648"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(a, sizeof a, "--out %s/hx12/x --shard-tokens %s %s", t, bad[i], test_docs_jsonl("hx_docs.jsonl", 40));
        CHECKF(test_prep("hx12", a) == 2, "--shard-tokens %s", bad[i]);
        CHECKF(test_log_has("hx12", "65536..2147483647"), "--shard-tokens %s", bad[i]);
    }
    CHECK(test_sh("test -z \"$(ls -A %s/hx12)\"", t) == 0);
    snprintf(a, sizeof a, "--out %s/hx12/x --shard-tokens 65536 %s", t, test_docs_jsonl("hx_docs.jsonl", 40));
    CHECK_EQ_INT(test_prep("hx12_ok", a), 0);
    /* --threads beyond any machine, bpe --vocab outside what a rank file holds, a quant matrix past 2^31 */
    snprintf(a, sizeof a, "--out %s/hx12/y --threads 100000 %s", t, test_docs_jsonl("hx_docs.jsonl", 40));
    CHECK_EQ_INT(test_prep("hx12_thr", a), 2);
    CHECK(test_log_has("hx12_thr", "--threads 100000"));
    CHECK_EQ_INT(test_sh("%s bpe --vocab 100 --out %s/hx12/b.tiktoken %s > %s/hx12_bpe.log 2>&1", test_mxlm_bin(), t,
                         test_docs_jsonl("hx_docs.jsonl", 40), t),
                 2);
    CHECK(test_sh("test ! -e %s/hx12/b.tiktoken", t) == 0);
    hx_qin();
    CHECK_EQ_INT(test_sh("%s quant --rows 65536 --cols 65536 --in %s/hx_q.in --out %s/hx12/q > %s/hx12_q.log 2>&1",
                         test_mxlm_bin(), t, t, t),
                 2);
    CHECK(test_log_has("hx12_q", "at most 2^31"));
}

/* ---- class 13: FIFOs and other special files as inputs ---------------------------------------- */

/* CMD (after the binary) under a 20 s timeout, output to TMP/LOG.log; the exit status (124: it hung). */
static int hx_run(const char* log, const char* cmd) {
    return test_sh("timeout 20 %s %s > %s/%s.log 2>&1", test_mxlm_bin(), cmd, test_tmpdir(), log);
}

#define HX_TINY "--vocab 256 --dim 32 --layers 1 --heads 1 --kv-heads 1 --ffn 64 --context 16 --batch 2 " \
                "--val-tokens 64 --recipe bf16 --threads 2 --steps 2 --eval-every 0"

TEST(hostile_special_inputs_refused) {
    const char* t = test_tmpdir();
    test_sentence_shards("hx13_", 5, 4000, 1000);
    test_sh("rm -rf %s/hx13 && mkdir -p %s/hx13/hf && mkfifo %s/hx13/f.bin %s/hx13/hf/config.json && "
            "ln -s f.bin %s/hx13/l.bin", t, t, t, t, t);
    struct { const char* log; const char* fmt; } cases[] = {
        {"hx13_train", "train " HX_TINY " --train %1$s/hx13/f.bin --val %1$s/hx13_val.bin --out %1$s/hx13/run"},
        {"hx13_trainl", "train " HX_TINY " --train %1$s/hx13/l.bin --val %1$s/hx13_val.bin --out %1$s/hx13/run"},
        {"hx13_val", "train " HX_TINY " --train %1$s/hx13_train.bin --val %1$s/hx13/f.bin --out %1$s/hx13/run"},
        {"hx13_cfg", "train --config %1$s/hx13/f.bin --out %1$s/hx13/run"},
        {"hx13_init", "train " HX_TINY " --train %1$s/hx13_train.bin --val %1$s/hx13_val.bin --init-from %1$s/hx13/hf "
                      "--out %1$s/hx13/run"},
        {"hx13_ckpt", "train " HX_TINY " --train %1$s/hx13_train.bin --val %1$s/hx13_val.bin --resume --ckpt "
                      "%1$s/hx13/f.bin --out %1$s/hx13/run"},
        {"hx13_prep", "prep --encoding tiny --quiet --out %1$s/hx13/out/x %1$s/hx13/f.bin"},
        {"hx13_ranks", "prep --ranks %1$s/hx13/f.bin --pattern r50k --quiet --out %1$s/hx13/out/x %1$s/hx13_docs.jsonl"},
        {"hx13_quant", "quant --rows 2 --cols 32 --in %1$s/hx13/f.bin --out %1$s/hx13/out.q"},
        {"hx13_eval", "eval --ckpt %1$s/hx13/f.bin %1$s/hx13_val.bin"},
        {"hx13_evald", "eval --ckpt %1$s/hx13 %1$s/hx13_val.bin"},
    };
    test_sh("cp %s %s/hx13_docs.jsonl", test_docs_jsonl("hx_docs.jsonl", 40), t);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[2048];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(cmd, sizeof cmd, cases[i].fmt, t);
#pragma GCC diagnostic pop
        const int rc = hx_run(cases[i].log, cmd);
        CHECKF(rc != 0 && rc != 124, "%s: exit %d (124: it hung on the FIFO)", cases[i].log, rc);
        CHECKF(test_log_has(cases[i].log, "not a regular file"), "%s: no reason given", cases[i].log);
        /* nothing was created: no run directory, no output folder, no output */
        CHECKF(test_sh("test ! -e %s/hx13/run && test ! -e %s/hx13/out && test ! -e %s/hx13/out.q", t, t, t) == 0,
               "%s: an output was created", cases[i].log);
    }
}

/* ---- class 14: a file size limit at a checkpoint ---------------------------------------------- */

TEST(hostile_file_size_limit) {
    const char* t = test_tmpdir();
    test_sentence_shards("hx14_", 9, 20000, 2000);
    test_sh("rm -rf %s/hx14", t);
    const char* common = HX_TINY " --steps 8 --ckpt-every 2 --eval-every 4";
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "train %s --train %s/hx14_train.bin --val %s/hx14_val.bin --out %s/hx14 --halt-at 4",
             common, t, t, t);
    REQUIRE(hx_run("hx14_a", cmd) == 0);
    /* files limited to 150 KiB (300 blocks of 512 bytes, as sh counts them; a checkpoint is ~330 KB), SIGXFSZ
     * left as the shell has it (no trap): the run stops at its next checkpoint with the full-disk error and
     * status 1, not killed by the signal (153) */
    CHECK_EQ_INT(test_sh("(ulimit -f 300; %s train %s --train %s/hx14_train.bin --val %s/hx14_val.bin --out %s/hx14 "
                         "--resume 2>&1; echo \"mxlm-exit $?\") | cat > %s/hx14_b.log; "
                         "exit $(sed -n 's/^mxlm-exit //p' %s/hx14_b.log)",
                         test_mxlm_bin(), common, t, t, t, t, t),
                 1);
    CHECK(test_log_has("hx14_b", "ckpt-00000006.bin: cannot write checkpoint: File too large (the previous checkpoint "
                                 "is kept)"));
    CHECK(test_sh("test -s %s/hx14/ckpt-00000004.bin && test ! -e %s/hx14/ckpt-00000006.bin && "
                  "test -z \"$(ls %s/hx14 | grep '\\.tmp\\.')\"", t, t, t) == 0);
    /* the kept checkpoint finishes the run */
    snprintf(cmd, sizeof cmd, "train %s --train %s/hx14_train.bin --val %s/hx14_val.bin --out %s/hx14 --resume", common,
             t, t, t);
    CHECK_EQ_INT(hx_run("hx14_c", cmd), 0);
    CHECK(test_log_has("hx14_c", "ckpt-00000004.bin (step 4)"));
}

/* ---- class 4: paths longer than mxlm takes ---------------------------------------------------- */

/* TMP/hx4/ + a run of `n` bytes of nested folders ("aaaa.../aaaa.../...", 200 a's each). */
static const char* hx_long_path(int n) {
    static char p[8192];
    int k = snprintf(p, sizeof p, "%s/hx4", test_tmpdir());
    while (k < n) k += snprintf(p + k, sizeof p - (size_t)k, "/%.200s", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    return p;
}

TEST(hostile_long_paths_refused) {
    const char* t = test_tmpdir();
    test_sentence_shards("hx4_", 3, 4000, 1000);
    test_sh("rm -rf %s/hx4", t);
    const char* lp = hx_long_path(1500); /* over mxlm's 1023, under the system's 4095 */
    struct { const char* log; const char* fmt; } cases[] = {
        {"hx4_out", "train " HX_TINY " --train %2$s/hx4_train.bin --val %2$s/hx4_val.bin --out %1$s"},
        {"hx4_train", "train " HX_TINY " --train %1$s/x.bin --val %2$s/hx4_val.bin --out %2$s/hx4/run"},
        {"hx4_init", "train " HX_TINY " --train %2$s/hx4_train.bin --val %2$s/hx4_val.bin --init-from %1$s "
                     "--out %2$s/hx4/run"},
        {"hx4_prep", "prep --encoding tiny --quiet --out %1$s/x %3$s"},
        {"hx4_prepin", "prep --encoding tiny --quiet --out %2$s/hx4/x %1$s/in.jsonl"},
        {"hx4_quant", "quant --rows 2 --cols 32 --in %2$s/hx_q.in --out %1$s/q"},
        {"hx4_eval", "eval --run %1$s"},
        {"hx4_export", "export --run %1$s --hf %2$s/hx4/hf"},
    };
    hx_qin();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[8192];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(cmd, sizeof cmd, cases[i].fmt, lp, t, test_docs_jsonl("hx_docs.jsonl", 40));
#pragma GCC diagnostic pop
        const int rc = hx_run(cases[i].log, cmd);
        CHECKF(rc == 2, "%s: exit %d, expected 2 (a usage error)", cases[i].log, rc);
        CHECKF(test_log_has(cases[i].log, "at most 1023 bytes"), "%s: no reason given", cases[i].log);
        CHECKF(test_sh("test ! -e %s/hx4", t) == 0, "%s: something was created", cases[i].log);
    }
    /* a --config file naming a long --out: the same */
    test_sh("mkdir -p %s/hx4c && printf 'out = %s\\n' > %s/hx4c/c.txt", t, lp, t);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "train --config %s/hx4c/c.txt", t);
    CHECK_EQ_INT(hx_run("hx4_cfg", cmd), 2);
    CHECK(test_log_has("hx4_cfg", "at most 1023 bytes"));
    CHECK(test_sh("test ! -e %s/hx4", t) == 0);
}
