/* test_hostile.c: the hostile-input classes of issue 48 fixed here (docs/reliability.md, "Hostile-input
 * classes"), each checked at its mechanism with inputs of the class rather than one example:
 *  5  the options every subcommand shares: --threads out of range refused (2) by every subcommand;
 *  6  machine-readable output is JSON: non-finite numbers written as null;
 *  7  a validation set or model whose tokenizer differs from the training shards' refused before the run
 *     directory exists;
 *  8  a checkpoint of another run refused on --resume (run id in config.txt and every checkpoint);
 *  9  config.txt round-trips every path (newline, tab, trailing space, backslash, quotes);
 * 10  --resume with a step-like option below the checkpoint's step refused;
 * 11  option values checked before the run directory exists, none left behind;
 * 15  small refusals: full stdout, empty paths, outputs naming one file, ... */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/config.h"
#include "mxlm/hf.h"
#include "mxlm/model.h"
#include "mxlm/trainer.h"
#include "test.h"

#define HMICRO "--vocab 256 --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --context 32 --batch 2 --seq 32"

/* The CLI's absolute path (the tests below run it from the scratch directory). */
static const char* hbin(void) {
    static char p[4096];
    if (!p[0] && !realpath(test_mxlm_bin(), p)) snprintf(p, sizeof p, "%s", test_mxlm_bin());
    return p;
}

static void shards(void) { test_sentence_shards("h_", 48, 20000, 3000); }

/* A micro run of `steps` steps into TMP/dir (fp32, the h_ shards) with more options; the exit status. */
static int micro_run(const char* dir, int steps, const char* more) {
    shards();
    const char* t = test_tmpdir();
    return test_sh("rm -rf %s/%s && %s train " HMICRO " --recipe fp32 --steps %d --eval-every 1 --val-tokens 128 "
                   "--train %s/h_train.bin --val %s/h_val.bin --out %s/%s %s > %s/%s.log 2>&1", t, dir, hbin(),
                   steps, t, t, t, dir, more, t, dir);
}

/* Every file (every line of a .jsonl) strict JSON: NaN / Infinity refused, as RFC 8259 has them not. */
static int strict_json(const char* files) {
    return test_sh("cd %s && python3 -c 'import json,sys\n"
                   "def no(c): raise ValueError(c)\n"
                   "for f in sys.argv[1:]:\n"
                   " t=open(f).read()\n"
                   " for l in (t.splitlines() if f.endswith(\".jsonl\") else [t]):\n"
                   "  json.loads(l, parse_constant=no)' %s", test_tmpdir(), files);
}

/* Run `mxlm ARGS` with output into TMP/name.log; its exit status. */
static int mx(const char* name, const char* args) {
    return test_sh("%s %s > %s/%s.log 2>&1", hbin(), args, test_tmpdir(), name);
}

/* Class 5: every subcommand takes --threads and checks it once (cli.c's shared table). */
TEST(hostile_threads_every_subcommand) {
    static const char* const cmds[] = {"train", "eval", "sample", "prep", "quant", "tokenize", "bpe", "export",
                                       "plot", "info", "bench", "study report", "study run"};
    static const char* const bad[] = {"100000", "0", "-3", "4097"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            char a[256];
            snprintf(a, sizeof a, "%s --threads %s", cmds[i], bad[k]);
            CHECKF(mx("h5", a) == 2, "%s: not exit 2", a);
            CHECKF(test_log_has("h5", "--threads") && test_log_has("h5", "[1, 4096]"), "%s: message", a);
        }
    CHECK(mx("h5", "eval --help") == 0 && test_log_has("h5", "1..4096"));
    CHECK(mx("h5", "info --threads 2") == 0);
}

/* Class 6: every JSON mxlm writes parses; non-finite numbers are null (mx_json_number), and a failed
 * evaluation exits non-zero. */
TEST(hostile_json_nonfinite_is_null) {
    const char* t = test_tmpdir();
    /* an HF model with NaN weights: eval --json is JSON (loss null) and exits 1 with a message */
    mx_model_config c;
    REQUIRE(mx_model_preset("tiny", &c) == 0);
    c.vocab = 256; c.dim = 64; c.n_layers = 2; c.n_heads = 2; c.n_kv_heads = 1; c.ffn = 128; c.seq_len = 32;
    mx_recipe r;
    mx_llama m;
    REQUIRE(mx_recipe_parse("fp32", &r) == 0 && mx_llama_create(&m, &c, &r, 0, 0, 1) == 0);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] = NAN;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/h6_nanhf", t);
    REQUIRE(mx_hf_export(&m, dir, 0) == 0);
    mx_llama_free(&m);
    shards();
    CHECK_EQ_INT(test_sh("%s eval --hf %s/h6_nanhf --val %s/h_val.bin --seq 32 --val-tokens 64 --json > %s/h6_eval.json "
                         "2> %s/h6_eval.log", hbin(), t, t, t, t), 1);
    CHECK(strict_json("h6_eval.json") == 0);
    CHECK(test_sh("grep -q '\"loss\":null' %s/h6_eval.json", t) == 0);
    CHECK(test_log_has("h6_eval", "not finite"));
    /* a run with a NaN gradient skipped, telemetry on: metrics.jsonl and summary.json parse */
    REQUIRE(micro_run("h6_run", 3, "--debug-nan-grad-at 2 --on-nonfinite skip --telemetry-every 1 "
                      "--recipe mxfp4-fdw-h16") == 0);
    CHECK(strict_json("h6_run/metrics.jsonl h6_run/summary.json") == 0);
    CHECK(test_sh("grep -q 'null' %s/h6_run/metrics.jsonl", t) == 0);
    /* a diverged run: its status lines parse too */
    CHECK_EQ_INT(micro_run("h6_div", 4, "--debug-nan-at 2"), 3);
    CHECK(strict_json("h6_div/metrics.jsonl h6_div/summary.json") == 0);
}

/* Two token sets of the same documents under two tokenizers (BPE rank files of 300 and 320 ids): TMP/h7a_*
 * and TMP/h7b_*, with their rank files TMP/h7a.tiktoken, TMP/h7b.tiktoken. */
static int two_tokenizers(void) {
    const char* t = test_tmpdir();
    return test_sh("cd %s && for i in $(seq 1 300); do echo \"{\\\"text\\\":\\\"document $i: in the beginning was the "
                   "word, and the word was with the model $((i %% 7)) times\\\"}\"; done > h7.jsonl && "
                   "%s bpe --out h7a.tiktoken --vocab 300 h7.jsonl && %s bpe --out h7b.tiktoken --vocab 320 h7.jsonl && "
                   "%s prep --ranks h7a.tiktoken --pattern r50k --out h7a --val-docs 60 --quiet h7.jsonl && "
                   "%s prep --ranks h7b.tiktoken --pattern r50k --out h7b --val-docs 60 --quiet h7.jsonl",
                   t, hbin(), hbin(), hbin(), hbin());
}

/* Class 7: one tokenizer across the training shards, the validation shards, the model (a run's or an export's
 * tokenizer.txt) and a tokenizer given; a mismatch refused (2) naming both, before anything is created. */
TEST(hostile_tokenizer_mismatch_refused) {
    const char* t = test_tmpdir();
    const char* bin = hbin();
    REQUIRE(two_tokenizers() == 0);
#define H7 HMICRO " --vocab 512 --recipe fp32 --val-tokens 64 --eval-every 0"
    /* train: --val of another tokenizer than --train, and the other way round */
    static const char* const pairs[][2] = {{"h7a_train_*.bin", "h7b_val_*.bin"}, {"h7b_train_*.bin", "h7a_val_*.bin"}};
    for (int i = 0; i < 2; i++) {
        CHECKF(test_sh("cd %s && rm -rf h7run && %s train " H7 " --steps 1 --train '%s' --val '%s' --out h7run > h7t.log "
                       "2>&1", t, bin, pairs[i][0], pairs[i][1]) == 2, "pair %d: not exit 2", i);
        CHECKF(test_log_has("h7t", "h7a.tiktoken") && test_log_has("h7t", "h7b.tiktoken"), "pair %d: both named", i);
        CHECKF(test_sh("test ! -e %s/h7run", t) == 0, "pair %d: the run directory was made", i);
    }
    /* a run on h7a; eval of it on h7b's shards, or with h7b's rank file: refused */
    REQUIRE(test_sh("cd %s && %s train " H7 " --steps 1 --train 'h7a_train_*.bin' --val 'h7a_val_*.bin' --out h7run "
                    "> h7ok.log 2>&1", t, bin) == 0);
    CHECK_EQ_INT(test_sh("cd %s && %s eval --run h7run --val 'h7b_val_*.bin' > h7e.log 2>&1", t, bin), 2);
    CHECK(test_log_has("h7e", "tokenizers differ") && test_log_has("h7e", "h7b.tiktoken"));
    CHECK_EQ_INT(test_sh("cd %s && %s eval --run h7run --ranks h7b.tiktoken --pattern r50k h7.jsonl > h7e2.log 2>&1",
                         t, bin), 2);
    CHECK(test_log_has("h7e2", "tokenizers differ"));
    CHECK_EQ_INT(test_sh("cd %s && %s eval --run h7run > h7e3.log 2>&1", t, bin), 0); /* its own: fine */
    /* the export keeps the tokenizer; --init-from it with h7b's shards: refused, nothing created */
    REQUIRE(test_sh("cd %s && %s export --run h7run --hf h7hf > h7x.log 2>&1", t, bin) == 0);
    CHECK(test_sh("test -s %s/h7hf/tokenizer.txt", t) == 0);
    CHECK_EQ_INT(test_sh("cd %s && rm -rf h7run2 && %s train " H7 " --steps 1 --train 'h7b_train_*.bin' --val "
                         "'h7b_val_*.bin' --init-from h7hf --out h7run2 > h7i.log 2>&1", t, bin), 2);
    CHECK(test_log_has("h7i", "--init-from") && test_sh("test ! -e %s/h7run2", t) == 0);
    CHECK_EQ_INT(test_sh("cd %s && %s eval --hf h7hf --val 'h7b_val_*.bin' --seq 32 > h7h.log 2>&1", t, bin), 2);
#undef H7
}

/* Rewrite the checkpoint TMP/path without its fingerprint's run-id line (as written before run ids), with a
 * fresh CRC; and, when cfg_too, config.txt beside it without its run-id line. */
static int strip_run_id(const char* path, int cfg_too) {
    return test_sh("cd %s && python3 -c 'import struct,zlib,sys,os\n"
                   "p=sys.argv[1]; b=open(p,\"rb\").read()\n"
                   "fl=struct.unpack(\"<I\",b[12:16])[0]; fp=b[16:16+fl]\n"
                   "i=fp.rstrip(b\"\\n\").rfind(b\"\\n\")+1\n"
                   "assert fp[i:].startswith(b\"run-id = \"); fp=fp[:i]\n"
                   "n=b[:12]+struct.pack(\"<I\",len(fp))+fp+b[16+fl:-12]\n"
                   "open(p,\"wb\").write(n+struct.pack(\"<I\",zlib.crc32(n)&0xffffffff)+b[-8:])\n"
                   "c=os.path.join(os.path.dirname(p),\"config.txt\")\n"
                   "k=[l for l in open(c) if not l.startswith(\"run-id\")]\n"
                   "if int(sys.argv[2]): open(c,\"w\").write(\"\".join(k))\n"
                   "' %s %d", test_tmpdir(), path, cfg_too);
}

/* Class 8: a checkpoint records its run (run-id, config.txt and every checkpoint); --resume --ckpt of another
 * run's checkpoint is refused pointing to --init-from, even when every other setting is the same; a
 * checkpoint from before run ids is taken with a note. */
TEST(hostile_resume_refuses_another_runs_checkpoint) {
    const char* t = test_tmpdir();
    REQUIRE(micro_run("h8a", 2, "") == 0);
    REQUIRE(micro_run("h8b", 2, "") == 0);
    CHECK(test_sh("grep -q '^run-id = [0-9a-f]\\{16\\}$' %s/h8a/config.txt", t) == 0);
    CHECK(test_sh("! cmp -s %s/h8a/config.txt %s/h8b/config.txt", t, t) == 0); /* two runs, two ids */
    CHECK(test_sh("%s train --out %s/h8b --resume --steps 3 --ckpt %s/h8a/ckpt-00000002.bin > %s/h8r.log 2>&1",
                  hbin(), t, t, t) != 0);
    CHECK(test_log_has("h8r", "belongs to another run") && test_log_has("h8r", "--init-from"));
    CHECK(test_sh("test ! -e %s/h8b/ckpt-00000003.bin", t) == 0);
    /* its own checkpoint: resumed */
    CHECK_EQ_INT(test_sh("%s train --out %s/h8b --resume --steps 3 > %s/h8ok.log 2>&1", hbin(), t, t), 0);
    /* a checkpoint without a run id (an older mxlm): taken, with a note; and in a run without one at all */
    REQUIRE(strip_run_id("h8a/ckpt-00000002.bin", 0) == 0);
    CHECK_EQ_INT(test_sh("%s train --out %s/h8a --resume --steps 3 > %s/h8old.log 2>&1", hbin(), t, t), 0);
    CHECK(test_log_has("h8old", "records no run id"));
    REQUIRE(micro_run("h8c", 2, "") == 0);
    REQUIRE(strip_run_id("h8c/ckpt-00000002.bin", 1) == 0);
    CHECK_EQ_INT(test_sh("%s train --out %s/h8c --resume --steps 3 > %s/h8old2.log 2>&1", hbin(), t, t), 0);
}

/* Class 9: config.txt gives back every value as written (mx_config_value_write / mx_config_value_read):
 * the pair on hostile values, then a run on shards whose names hold them, halted and resumed. */
TEST(hostile_config_values_round_trip) {
    static const char* const vals[] = {" lead", "trail ", "\ttab\t", "new\nline", "back\\slash", "\"quoted\"",
                                       "\"", "a \"b\" \\n c", "cr\r", "x\x01y\x7f", "#hash", "= eq", "", "plain"};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char w[256], text[300], back[256];
        mx_config_value_write(vals[i], w, sizeof w);
        CHECKF(!strchr(w, '\n'), "value %zu: a newline written", i);
        snprintf(text, sizeof text, "# c\nval = %s\nsteps = 1\n", w);
        CHECKF(mx_config_get(text, "val", back, sizeof back) == 1 && !strcmp(back, vals[i]), "value %zu: get", i);
        char** tok = NULL;
        int nt = 0;
        CHECKF(mx_config_tokens(text, strlen(text), "t", NULL, &tok, &nt) == 0 && nt == 2 && !strncmp(tok[0], "--val=", 6)
               && !strcmp(tok[0] + 6, vals[i]), "value %zu: tokens", i);
        mx_config_free(tok, nt);
    }
    char b[64];
    CHECK(mx_config_value_read("\"a\\q\"", 5, b, sizeof b) < 0 && mx_config_value_read("\"a\\x00\"", 7, b, sizeof b) < 0);
    /* a run on shards named with a leading blank, a newline, a tab, a quote, a glob escape and a trailing blank */
    const char* t = test_tmpdir();
    shards();
    REQUIRE(test_sh("rm -rf %s/h9 && mkdir %s/h9 && cp %s/h_train.bin '%s/h9/ a\nb\tc\"de.bin' && "
                    "cp %s/h_val.bin '%s/h9/v.bin '", t, t, t, t, t, t) == 0);
    REQUIRE(test_sh("cd %s/h9 && %s train " HMICRO " --recipe fp32 --steps 3 --halt-at 1 --val-tokens 128 --train "
                    "' a\nb\tc\"d\\e.bin' --val 'v.bin ' --out run > ../h9a.log 2>&1", t, hbin()) == 0);
    CHECK(test_sh("grep -q '^train = \" a\\\\nb\\\\tc\\\\\"d\\\\\\\\e.bin\"$' %s/h9/run/config.txt", t) == 0);
    CHECK_EQ_INT(test_sh("cd %s/h9 && %s train --out run --resume > ../h9b.log 2>&1", t, hbin()), 0);
    CHECK(test_log_has("h9b", "budget: step 3"));
    CHECK_EQ_INT(test_sh("cd %s/h9 && %s eval --run run > ../h9e.log 2>&1", t, hbin()), 0); /* the run's --val */
}

/* Class 10: on --resume every step-like option is checked against the checkpoint's step (2, nothing written):
 * --steps below it, --halt-at and the --debug-*-at positions not past it. */
TEST(hostile_resume_step_options_below_checkpoint) {
    const char* t = test_tmpdir();
    REQUIRE(micro_run("h10", 4, "--ckpt-every 2 --eval-every 2") == 0);
    REQUIRE(test_sh("cd %s/h10 && md5sum * > ../h10.md5", t) == 0);
    static const char* const bad[] = {"--steps 3", "--steps 6 --halt-at 1", "--steps 6 --halt-at 4",
                                      "--steps 6 --debug-nan-at 2", "--steps 6 --debug-nan-grad-at 4",
                                      "--steps 6 --debug-spike-at 3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char a[256];
        snprintf(a, sizeof a, "train --out %s/h10 --resume %s", t, bad[i]);
        CHECKF(mx("h10r", a) == 2, "%s: not exit 2", bad[i]);
        CHECKF(test_log_has("h10r", "the checkpoint's step 4"), "%s: message", bad[i]);
        CHECKF(test_sh("cd %s/h10 && md5sum -c --quiet ../h10.md5 && test ! -e ckpt-00000006.bin", t) == 0,
               "%s: the run changed", bad[i]);
    }
    /* past it: halted there */
    char a[256];
    snprintf(a, sizeof a, "train --out %s/h10 --resume --steps 6 --halt-at 5", t);
    CHECK_EQ_INT(mx("h10ok", a), 0);
    CHECK(test_sh("test -e %s/h10/ckpt-00000005.bin", t) == 0);
}

/* Class 11: an option value the trainer finds wrong is named with what to change (2) before the run
 * directory exists; a run refused before its first step leaves no directory it made (a folder that was
 * there stays, with what it held). */
TEST(hostile_refusals_name_the_option_and_leave_no_dir) {
    const char* t = test_tmpdir();
    shards();
    static const struct { const char* args; int rc; const char* msg; } cases[] = {
        {"--batch 4 --val-tokens 64", 2, "give --val-tokens 128 or more"},
        {"--batch 2 --val-tokens 1", 2, "--val-tokens 1 makes 0 validation windows"},
        {"--batch 200 --val-tokens 100000", 1, "fewer than one batch of 200: give more validation data"},
        {"--init-from /nonexistent/hf", 1, "/nonexistent/hf"},
        {"--vocab 128", 1, "token id"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECKF(test_sh("rm -rf %s/h11 && %s train " HMICRO " --recipe fp32 --steps 2 --train %s/h_train.bin --val "
                       "%s/h_val.bin %s --out %s/h11 > %s/h11.log 2>&1; test $? -eq %d", t, hbin(), t, t, cases[i].args,
                       t, t, cases[i].rc) == 0, "%s: not exit %d", cases[i].args, cases[i].rc);
        CHECKF(test_log_has("h11", cases[i].msg), "%s: message", cases[i].args);
        CHECKF(test_sh("test ! -e %s/h11", t) == 0, "%s: a run directory left behind", cases[i].args);
    }
    /* a folder that was there before: kept, with its file */
    CHECK(test_sh("rm -rf %s/h11 && mkdir %s/h11 && echo x > %s/h11/keep && %s train " HMICRO " --recipe fp32 --steps 2 "
                  "--train %s/h_train.bin --val %s/h_val.bin --vocab 128 --out %s/h11 > %s/h11.log 2>&1; test $? -eq 1 "
                  "&& test -f %s/h11/keep", t, t, t, hbin(), t, t, t, t, t) == 0);
}

/* Class 15: small refusals, each a clear message. */
TEST(hostile_small_refusals) {
    const char* t = test_tmpdir();
    const char* b = hbin();
    /* a message that wraps the last one (mx_fail(rc, "%s: %s", file, mx_last_error())) keeps its text */
    mx_fail(MX_EINVAL, "no \"nope\" string field");
    mx_fail(MX_EINVAL, "%s:%d: %s", "f.jsonl", 1, mx_last_error());
    CHECK(!strcmp(mx_last_error(), "f.jsonl:1: no \"nope\" string field"));
    /* a full standard output: a message and a non-zero exit, whatever the command */
    static const char* const full[] = {"info", "eval --help", "train --list-recipes", "--version"};
    for (size_t i = 0; i < sizeof full / sizeof full[0]; i++) {
        CHECKF(test_sh("%s %s > /dev/full 2> %s/h15.log; test $? -ne 0", b, full[i], t) == 0, "%s: exit 0", full[i]);
        CHECKF(test_log_has("h15", "writing the standard output failed"), "%s: message", full[i]);
    }
    /* empty paths: refused (2) for every path option and argument */
    static const char* const empty[] = {"prep --encoding tiny --out '' x.jsonl", "prep --encoding tiny --out x ''",
                                        "quant --rows 32 --cols 32 --in '' --out o", "train --out ''",
                                        "eval --run ''", "export --hf '' --run r", "study run --out ''",
                                        "train --config ''", "tokenize --ranks '' --pattern r50k"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        CHECKF(mx("h15", empty[i]) == 2, "%s: not exit 2", empty[i]);
        CHECKF(test_log_has("h15", "empty"), "%s: message", empty[i]);
    }
    /* quant: an input that is a directory; two files of one name, by path or by inode */
    REQUIRE(test_sh("cd %s && head -c 4096 /dev/zero > h15.f32 && mkdir -p h15d && ln -sf h15.f32 h15l.f32", t) == 0);
    char a[1024];
    snprintf(a, sizeof a, "quant --rows 32 --cols 32 --in %s/h15d --out %s/h15o.f32", t, t);
    CHECK(mx("h15", a) == 1 && test_log_has("h15", "a directory"));
    static const char* const same[] = {"--in h15.f32 --out ./h15.f32", "--in h15.f32 --out h15o --codes ../%s/h15o",
                                       "--in h15l.f32 --out h15.f32", "--in h15.f32 --out o --codes c --scales c",
                                       "--format nvfp4 --layout 1x16 --in h15.f32 --out o --scales s --tensor-scale s"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char s[256];
        const char* base = strrchr(t, '/');
        snprintf(s, sizeof s, same[i], base + 1);
        CHECKF(test_sh("cd %s && rm -f o c s h15o && %s quant --rows 32 --cols 32 %s > h15.log 2>&1; test $? -eq 2 && "
                       "test ! -e o && test ! -e h15o && cmp -s h15.f32 /dev/zero -n 4096", t, b, s) == 0, "%s", s);
        CHECKF(test_log_has("h15", "name the same file"), "%s: message", s);
    }
    /* eval: given values out of range */
    static const char* const ev[] = {"--seq 0", "--batch 0", "--val-tokens -1", "--seq -1", "--batch 2000"};
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) {
        snprintf(a, sizeof a, "eval --run %s %s", t, ev[i]);
        CHECKF(mx("h15", a) == 2, "eval %s: not exit 2", ev[i]);
    }
    /* resume of a run whose config.txt is gone: said so, no option blamed */
    REQUIRE(micro_run("h15r", 1, "") == 0);
    REQUIRE(test_sh("rm %s/h15r/config.txt", t) == 0);
    snprintf(a, sizeof a, "train --out %s/h15r --resume --steps 2", t);
    CHECK(mx("h15", a) == 1 && test_log_has("h15", "no config.txt") && !test_log_has("h15", "differs"));
    /* out of memory: the parameters counted */
    CHECK(test_sh("ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1 %s train --vocab 256 --dim "
                  "65536 --layers 64 --heads 512 --kv-heads 512 --ffn 262144 --context 32 --batch 1 --seq 32 --recipe "
                  "fp32 --steps 1 --train %s/h_train.bin --val %s/h_val.bin --val-tokens 32 --out %s/h15m "
                  "--ignore-limits > %s/h15.log 2>&1; test $? -eq 1", b, t, t, t, t) == 0);
    CHECK(test_log_has("h15", "out of memory for 4398088519680 parameters"));
    /* HF: tie_word_embeddings true beside a separate lm_head; tensors that overlap */
    REQUIRE(micro_run("h15q", 1, "") == 0);
    REQUIRE(test_sh("cd %s && rm -rf h15hf && %s export --run h15q --hf h15hf > h15x.log 2>&1", t, b) == 0);
    REQUIRE(test_sh("cd %s && cp -r h15hf h15tie && sed -i 's/\"tie_word_embeddings\": false/\"tie_word_embeddings\": "
                    "true/' h15tie/config.json && grep -q '\"tie_word_embeddings\": true' h15tie/config.json", t) == 0);
    CHECK(test_sh("cd %s && %s eval --hf h15tie --val h_val.bin --seq 32 > h15.log 2>&1; test $? -eq 1", t, b) == 0);
    CHECK(test_log_has("h15", "tie_word_embeddings: true, but the file holds a separate lm_head.weight"));
    REQUIRE(test_sh("cd %s && cp -r h15hf h15ov && python3 -c 'import json,struct\n"
                    "p=\"h15ov/model.safetensors\"; b=open(p,\"rb\").read(); n=struct.unpack(\"<Q\",b[:8])[0]\n"
                    "h=json.loads(b[8:8+n]); k=[x for x in h if \"layers.1.self_attn.q_proj\" in x][0]\n"
                    "h[k][\"data_offsets\"]=h[k.replace(\"layers.1\",\"layers.0\")][\"data_offsets\"]\n"
                    "t=json.dumps(h).encode(); open(p,\"wb\").write(struct.pack(\"<Q\",len(t))+t+b[8+n:])'", t) == 0);
    CHECK(test_sh("cd %s && %s eval --hf h15ov --val h_val.bin --seq 32 > h15.log 2>&1; test $? -eq 1", t, b) == 0);
    CHECK(test_log_has("h15", "overlap"));
}
