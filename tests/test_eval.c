/* test_eval.c: mxlm eval, mxlm sample, mxlm plot, train --sample-every and the tokenizer record.
 *  - eval of a run's final checkpoint over the run's validation shards prints the run's final validation
 *    loss, the same %.9g text as metrics.jsonl, for mxfp4-fdw-h16 with accumulation, fp8-delayed (the FP8
 *    history from the checkpoint) and mxfp4-fdw-sr (the SR bits of the trainer's evaluation step); --ckpt
 *    of an older checkpoint gives that step's loss; another recipe gives another value;
 *  - bits per byte on a known text: a model with a zero LM head predicts 1/4096 for every id, so the loss
 *    is ln 4096 and bits/byte = 12 x tokens / bytes exactly, with the tokens counted by mxlm tokenize and
 *    the bytes those of the file (plain text, and two documents of JSON Lines .gz);
 *  - text evaluation = shard evaluation of the same text prepared with mxlm prep (same windows);
 *  - sample: the same seed gives the same text, another seed another, temperature 0 = top-k 1; from a run
 *    (its tokenizer.txt) and from an HF directory; train --sample-every prints samples;
 *  - plot: an SVG with one training and one validation curve per run (as many points as lines), the
 *    telemetry panels; usage errors (2) and run-time errors (1) of all three, with a message, nothing written;
 *  - the tokenizer record: round trip, in shard headers (llm.c's fields untouched), checked on opening. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/data.h"
#include "mxlm/hf.h"
#include "mxlm/study.h"
#include "mxlm/tokrec.h"
#include "mxlm/trainer.h"
#include "test.h"

#define MICRO "--vocab 256 --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --context 32"

/* The %.9g text of the last val_loss of TMP/dir/metrics.jsonl and of the val_loss at `step` (NULL: skip). */
static int last_val(const char* dir, char* out, const char* step, char* at) {
    char vals[64][32], steps[64][32];
    int n = test_metric_strings(dir, "val_loss", "\"event\"", vals, 64);
    int m = test_metric_strings(dir, "step", "\"loss\"", steps, 64); /* evaluation and status lines */
    if (n <= 0) return -1;
    memcpy(out, vals[n - 1], sizeof vals[0]);
    if (step)
        for (int i = 0; i < n && i < m; i++)
            if (!strcmp(steps[i], step)) memcpy(at, vals[i], sizeof vals[0]);
    return n;
}

/* "key": value of a JSON line in TMP/name.log, as text. */
static int json_field(const char* name, const char* key, char* out, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s.log", test_tmpdir(), name);
    size_t len = 0;
    char* s = test_read_file(p, &len);
    if (!s) return 0;
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    char* q = strstr(s, pat);
    int ok = 0;
    if (q) {
        q += strlen(pat);
        size_t k = strcspn(q, ",}\n");
        snprintf(out, n, "%.*s", (int)k, q);
        ok = 1;
    }
    free(s);
    return ok;
}

static double json_num(const char* name, const char* key) {
    char b[64];
    return json_field(name, key, b, sizeof b) ? strtod(b, NULL) : NAN;
}

TEST(eval_reproduces_the_runs_final_val_loss) {
    const char *T = test_tmpdir(), *bin = test_mxlm_bin();
    test_sentence_shards("ev_", 77, 20000, 3000);
    struct { const char* recipe; const char* extra; } runs[] = {
        {"mxfp4-fdw-h16", "--accum 2"}, {"fp8-delayed", ""}, {"mxfp4-fdw-sr", "--accum 2 --bf16-first 1"}};
    for (int i = 0; i < 3; i++) {
        char dir[64], log[64], val[32] = "", at3[32] = "", got[64] = "";
        snprintf(dir, sizeof dir, "ev_run%d", i);
        snprintf(log, sizeof log, "ev_eval%d", i);
        REQUIRE(test_sh("rm -rf %s/%s", T, dir) == 0);
        REQUIRE(test_sh("%s train " MICRO " --recipe %s %s --steps 6 --batch 2 --seq 32 --val-tokens 320 --eval-every 3 "
                        "--ckpt-every 3 --keep 3 --train %s/ev_train.bin --val %s/ev_val.bin --out %s/%s > %s/%s.log 2>&1",
                        bin, runs[i].recipe, runs[i].extra, T, T, T, dir, T, dir) == 0);
        REQUIRE(last_val(dir, val, "3", at3) == 3);
        /* the latest checkpoint (step 6) over the run's validation set: the same float */
        REQUIRE(test_sh("%s eval --run %s/%s --json > %s/%s.log 2>&1", bin, T, dir, T, log) == 0);
        CHECKF(json_field(log, "loss", got, sizeof got) && !strcmp(got, val), "%s: eval %s, the run's final %s",
               runs[i].recipe, got, val);
        CHECK_EQ_INT(json_num(log, "tokens"), 320 / 32 / 2 * 2 * 32);
        CHECK_EQ_INT(json_num(log, "step"), 6);
        /* --ckpt: the step-3 checkpoint gives the step-3 evaluation; one thread changes nothing */
        REQUIRE(test_sh("%s eval --ckpt %s/%s/ckpt-00000003.bin --threads 1 --json > %s/%s.log 2>&1", bin, T, dir, T,
                        log) == 0);
        CHECKF(json_field(log, "loss", got, sizeof got) && !strcmp(got, at3), "%s: eval of step 3 %s, the run's %s",
               runs[i].recipe, got, at3);
    }
    /* a control: another recipe's forward of the same weights is another value */
    char val[32], at3[32], got[64] = "";
    REQUIRE(last_val("ev_run0", val, NULL, at3) == 3);
    REQUIRE(test_sh("%s eval --run %s/ev_run0 --recipe fp32 --json > %s/ev_fp32.log 2>&1", bin, T, T) == 0);
    CHECK(json_field("ev_fp32", "loss", got, sizeof got) && strcmp(got, val) != 0);
    /* the run's shards carry no tokenizer record: no bytes, and text needs --encoding (usage error) */
    CHECK(json_field("ev_eval0", "bytes", got, sizeof got) && !strcmp(got, "null"));
    REQUIRE(test_sh("printf 'abc' > %s/ev_x.txt", T) == 0);
    CHECK_EQ_INT(test_sh("%s eval --run %s/ev_run0 %s/ev_x.txt > %s/ev_notok.log 2>&1", bin, T, T, T), 2);
    CHECK(test_log_has("ev_notok", "give --encoding"));
}

/* An HF directory of a model over the tiny vocabulary (V 4096, D 64, L 1): zero head (uniform predictions)
 * or random weights. */
static int write_hf(const char* name, int zero_head) {
    mx_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "t");
    c.vocab = MX_TINY_VOCAB; c.dim = 64; c.n_layers = 1; c.n_heads = 2; c.n_kv_heads = 1; c.ffn = 128; c.seq_len = 64;
    c.rope_theta = 500000.0f; c.norm_eps = 1e-5f;
    mx_recipe r;
    mx_llama m;
    if (mx_recipe_parse("fp32", &r) || mx_llama_create(&m, &c, &r, 0, 0, 1)) return -1;
    mx_llama_init_weights(&m, 5);
    if (zero_head) memset(m.params + m.info[MX_P_HEAD].offset, 0, sizeof(float) * m.info[MX_P_HEAD].numel);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), name);
    int rc = test_sh("mkdir -p %s", dir) || mx_hf_export(&m, dir, 0);
    mx_llama_free(&m);
    return rc;
}

static const char* k_text = "In the beginning God created the heaven and the earth. And the earth was without form, "
                            "and void; and darkness was upon the face of the deep. \xc3\xa9t\xc3\xa9 \xe2\x80\x94 caf\xc3\xa9.\n"
                            "And God said, Let there be light: and there was light.\n";

/* TMPDIR/name holding k_text `times` times, its path in p[n]; 0 when it cannot be written. */
static int text_file(char* p, size_t n, const char* name, int times) {
    snprintf(p, n, "%s/%s", test_tmpdir(), name);
    FILE* f = fopen(p, "wb");
    if (!f) return 0;
    for (int i = 0; i < times; i++) fputs(k_text, f);
    return fclose(f) == 0;
}

TEST(eval_bits_per_byte_on_known_text) {
    const char *T = test_tmpdir(), *bin = test_mxlm_bin();
    REQUIRE(write_hf("ev_uniform", 1) == 0);
    char p[512];
    REQUIRE(text_file(p, sizeof p, "ev_text.txt", 1));
    const long bytes = (long)strlen(k_text);
    REQUIRE(test_sh("%s tokenize --encoding tiny --count < %s > %s/ev_count.log", bin, p, T) == 0);
    char cp[512];
    snprintf(cp, sizeof cp, "%s/ev_count.log", T);
    size_t cl = 0;
    char* cs = test_read_file(cp, &cl);
    REQUIRE(cs);
    const long count = strtol(cs, NULL, 10);
    free(cs);
    REQUIRE(count > 20);
    REQUIRE(test_sh("%s eval --hf %s/ev_uniform --encoding tiny --seq 16 --batch 3 %s --json > %s/ev_bpb.log 2>&1", bin,
                    T, p, T) == 0);
    /* one document: the document token then `count` tokens, every one predicted; ln 4096 each */
    CHECK_EQ_INT(json_num("ev_bpb", "tokens"), count);
    CHECK_EQ_INT(json_num("ev_bpb", "bytes"), bytes);
    CHECK_EQ_INT(json_num("ev_bpb", "text_bytes"), bytes);
    CHECK_NEAR(json_num("ev_bpb", "loss"), log(4096.0), 1e-6);
    CHECK_NEAR(json_num("ev_bpb", "bits_per_byte"), 12.0 * (double)count / (double)bytes, 1e-6);
    CHECK_NEAR(json_num("ev_bpb", "perplexity"), 4096.0, 1e-2);
    /* JSON Lines, gzip'ed, two documents: the second document token is predicted too (0 bytes) */
    REQUIRE(test_sh("printf '{\"text\": \"In the beginning\"}\\n{\"text\": \"caf\\\\u00e9 au lait\"}\\n' | gzip -c > "
                    "%s/ev_docs.jsonl.gz", T) == 0);
    REQUIRE(test_sh("printf 'In the beginning' | %s tokenize --encoding tiny --count > %s/ev_c1.log && printf "
                    "'caf\\303\\251 au lait' | %s tokenize --encoding tiny --count > %s/ev_c2.log", bin, T, bin, T) == 0);
    long c1 = 0, c2 = 0;
    snprintf(cp, sizeof cp, "%s/ev_c1.log", T);
    cs = test_read_file(cp, &cl);
    if (cs) c1 = strtol(cs, NULL, 10);
    free(cs);
    snprintf(cp, sizeof cp, "%s/ev_c2.log", T);
    cs = test_read_file(cp, &cl);
    if (cs) c2 = strtol(cs, NULL, 10);
    free(cs);
    REQUIRE(c1 > 0 && c2 > 0);
    REQUIRE(test_sh("%s eval --hf %s/ev_uniform --encoding tiny --seq 8 %s/ev_docs.jsonl.gz --json > %s/ev_gz.log 2>&1",
                    bin, T, T, T) == 0);
    CHECK_EQ_INT(json_num("ev_gz", "tokens"), c1 + 1 + c2);
    CHECK_EQ_INT(json_num("ev_gz", "documents"), 2);
    CHECK_EQ_INT(json_num("ev_gz", "bytes"), 16 + 13);
    CHECK_NEAR(json_num("ev_gz", "bits_per_byte"), 12.0 * (double)(c1 + 1 + c2) / 29.0, 1e-6);
    /* --val-tokens caps the tokens evaluated */
    REQUIRE(test_sh("%s eval --hf %s/ev_uniform --encoding tiny --val-tokens 5 %s --json > %s/ev_cap.log 2>&1", bin, T,
                    p, T) == 0);
    CHECK_EQ_INT(json_num("ev_cap", "tokens"), 5);
}

TEST(eval_text_equals_shards_of_the_same_text) {
    const char *T = test_tmpdir(), *bin = test_mxlm_bin();
    REQUIRE(write_hf("ev_rand", 0) == 0);
    char p[512];
    REQUIRE(text_file(p, sizeof p, "ev_text2.txt", 6));
    /* prep the same text into one shard (its header records the tiny tokenizer) */
    REQUIRE(test_sh("%s prep --quiet --encoding tiny --train-pattern %s/ev_text2.bin %s > %s/ev_prep.log 2>&1", bin, T,
                    p, T) == 0);
    REQUIRE(test_sh("%s eval --hf %s/ev_rand --val %s/ev_text2.bin --val-tokens 0 --seq 32 --batch 2 --json > "
                    "%s/ev_sh.log 2>&1", bin, T, T, T) == 0);
    const double tok = json_num("ev_sh", "tokens");
    REQUIRE(tok >= 64);
    /* the tokenizer came from the shard's header: bytes are known */
    CHECK(json_num("ev_sh", "bytes") > 0);
    REQUIRE(test_sh("%s eval --hf %s/ev_rand --encoding tiny %s --val-tokens %.0f --seq 32 --batch 2 --json > "
                    "%s/ev_tx.log 2>&1", bin, T, p, tok, T) == 0);
    CHECK_EQ_INT(json_num("ev_tx", "tokens"), (long long)tok);
    CHECK_EQ_INT(json_num("ev_tx", "bytes"), (long long)json_num("ev_sh", "bytes"));
    /* the mean of batch means (shards) against the mean over tokens (text): the same up to rounding */
    const double a = json_num("ev_sh", "loss"), b = json_num("ev_tx", "loss");
    CHECKF(fabs(a - b) <= 2e-6 * a, "shards %.9g, text %.9g", a, b);
    CHECK(a > 7.0 && a < 9.5); /* a random model: about ln 4096 */
}

TEST(eval_usage_and_runtime_errors) {
    const char *T = test_tmpdir(), *bin = test_mxlm_bin();
    test_sentence_shards("ev_", 77, 20000, 3000);
    REQUIRE(test_sh("printf 'abc' > %s/ev_x.txt", T) == 0);
    REQUIRE(test_sh("rm -rf %s/ev_erun && %s train " MICRO " --steps 2 --batch 2 --seq 32 --val-tokens 256 "
                    "--train %s/ev_train.bin --val %s/ev_val.bin --out %s/ev_erun > /dev/null 2>&1", T, bin, T, T, T) == 0);
    struct { const char* args; int rc; const char* msg; } cases[] = {
        {"", 2, "give --run"},
        {"--run R --hf R", 2, "not both"},
        {"--run R --batch -1", 2, "--batch"},
        {"--run R --seq -5", 2, "--seq"},
        {"--run R --seq 64", 2, "exceeds the model's context"},
        {"--run R --val-tokens -3", 2, "--val-tokens"},
        {"--run R --val 'x*.bin' X", 2, "not both"},
        {"--run R --format yaml X", 2, "--format"},
        {"--run R --device tpu", 2, "--device"},
        {"--run R --ranks foo", 2, "--pattern"},
        {"--run R --ranks foo --pattern p", 2, "--pattern"},
        {"--run R --encoding nope", 2, "unknown encoding"},
        {"--run R --recipe mxfp4-zz", 2, "--recipe"},
        {"--run R --bogus 1", 2, "unknown option"},
        {"--hf R", 2, "--hf needs"},
        {"--run NOWHERE", 1, "not a directory"},
        {"--ckpt NOWHERE/ckpt-1.bin", 1, "cannot open"},
        {"--run R --val 'NOWHERE/x*.bin'", 1, "no shard matches"},
        {"--run R --encoding tiny NOWHERE/a.txt", 1, "nowhere/a.txt"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[512], o[64];
        /* R: the run, X: a text file, NOWHERE: a missing path */
        size_t k = 0;
        for (const char* s = cases[i].args; *s && k + 200 < sizeof a; s++) {
            if (*s == 'R' && (s[1] == 0 || s[1] == ' ')) k += (size_t)snprintf(a + k, sizeof a - k, "%s/ev_erun", T);
            else if (*s == 'X' && (s[1] == 0 || s[1] == ' ')) k += (size_t)snprintf(a + k, sizeof a - k, "%s/ev_x.txt", T);
            else if (!strncmp(s, "NOWHERE", 7)) { k += (size_t)snprintf(a + k, sizeof a - k, "%s/nowhere", T); s += 6; }
            else a[k++] = *s;
        }
        a[k] = 0;
        snprintf(o, sizeof o, "ev_err%zu", i);
        int rc = test_sh("%s eval %s > %s/%s.log 2>&1", bin, a, T, o);
        CHECKF(rc == cases[i].rc && test_log_has(o, cases[i].msg), "eval %s: exit %d (want %d), message '%s' expected "
               "(see %s/%s.log)", a, rc, cases[i].rc, cases[i].msg, T, o);
    }
    /* a corrupt checkpoint is refused (1) with its name */
    REQUIRE(test_sh("mkdir -p %s/ev_bad && cp %s/ev_erun/config.txt %s/ev_bad/ && head -c 5000 %s/ev_erun/ckpt-00000002.bin"
                    " > %s/ev_bad/ckpt-00000002.bin", T, T, T, T, T) == 0);
    CHECK_EQ_INT(test_sh("%s eval --run %s/ev_bad > %s/ev_bad.log 2>&1", bin, T, T), 1);
    CHECK(test_log_has("ev_bad", "ckpt-00000002.bin"));
    CHECK(test_sh("%s eval --help | grep -q -- '--val-tokens'", bin) == 0);
}

TEST(sample_deterministic_per_seed_and_train_sample_every) {
    const char *T = test_tmpdir(), *bin = test_mxlm_bin();
    /* a run on the embedded corpus: its tokenizer is recorded, samples are printed during training */
    REQUIRE(test_sh("rm -rf %s/sm_run && %s train --preset tiny --layers 1 --steps 2 --batch 2 --seq 32 --val-tokens 256 "
                    "--sample-every 1 --out %s/sm_run > %s/sm_train.log 2>&1", T, bin, T, T) == 0);
    CHECK(test_log_has("sm_train", "sample at step 1 (") && test_log_has("sm_train", "sample at step 2 ("));
    char tp[512];
    snprintf(tp, sizeof tp, "%s/sm_run/tokenizer.txt", T);
    size_t n = 0;
    char* rec = test_read_file(tp, &n);
    REQUIRE(rec);
    CHECKF(strstr(rec, "ranks = /") && strstr(rec, "/build/data/tiny.tiktoken\n") && strstr(rec, "vocab = 4096\n") &&
               strstr(rec, "pattern = r50k\n"), "tokenizer.txt: %s", rec);
    free(rec);
    const char* q = "--prompt 'And God said' --tokens 24 --ignore-eot";
    REQUIRE(test_sh("%s sample --run %s/sm_run %s --seed 5 --json > %s/sm_a.log 2>/dev/null", bin, T, q, T) == 0);
    REQUIRE(test_sh("%s sample --run %s/sm_run %s --seed 5 --json --threads 1 > %s/sm_b.log 2>/dev/null", bin, T, q, T) == 0);
    REQUIRE(test_sh("%s sample --run %s/sm_run %s --seed 6 --json > %s/sm_c.log 2>/dev/null", bin, T, q, T) == 0);
    CHECK(test_sh("cmp -s %s/sm_a.log %s/sm_b.log", T, T) == 0);
    CHECK(test_sh("cmp -s %s/sm_a.log %s/sm_c.log", T, T) != 0);
    char ids[4096] = "";
    CHECK(json_field("sm_a", "prompt_ids", ids, sizeof ids) && !strcmp(ids, "[4095")); /* the document token first */
    /* temperature 0 (greedy) = top-k 1, whatever the seed */
    REQUIRE(test_sh("%s sample --run %s/sm_run %s --temperature 0 --seed 1 > %s/sm_g.log 2>/dev/null", bin, T, q, T) == 0);
    REQUIRE(test_sh("%s sample --run %s/sm_run %s --top-k 1 --seed 9 > %s/sm_k.log 2>/dev/null", bin, T, q, T) == 0);
    CHECK(test_sh("cmp -s %s/sm_g.log %s/sm_k.log", T, T) == 0);
    CHECK(test_log_has("sm_g", "And God said"));
    /* from an HF directory with a named encoding */
    REQUIRE(write_hf("sm_hf", 0) == 0);
    REQUIRE(test_sh("%s sample --hf %s/sm_hf --encoding tiny --tokens 16 --seed 2 --json > %s/sm_h1.log 2>/dev/null && "
                    "%s sample --hf %s/sm_hf --encoding tiny --tokens 16 --seed 2 --json > %s/sm_h2.log 2>/dev/null", bin,
                    T, T, bin, T, T) == 0);
    CHECK(test_sh("cmp -s %s/sm_h1.log %s/sm_h2.log", T, T) == 0);
    /* usage (2) and run-time (1) errors */
    struct { const char* args; int rc; const char* msg; } cases[] = {
        {"--tokens 0", 2, "--tokens"},          {"--temperature -1", 2, "--temperature"},
        {"--temperature nan", 2, "--temperature"}, {"--top-p 0", 2, "--top-p"},
        {"--top-p 1.5", 2, "--top-p"},         {"--top-k -2", 2, "--top-k"},
        {"--tokens 200", 2, "context"},        {"--seed -1", 2, "--seed"},
        {"--encoding zz", 2, "unknown encoding"}, {"--recipe nope", 2, "--recipe"},
        {"--device tpu", 2, "--device"},       {"--gemm slow", 2, "--gemm"},
#ifndef MXLM_CUDA
        {"--device cuda", 2, "built without CUDA"},
#endif
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char o[64];
        snprintf(o, sizeof o, "sm_err%zu", i);
        int rc = test_sh("%s sample --run %s/sm_run %s > %s/%s.log 2>&1", bin, T, cases[i].args, T, o);
        CHECKF(rc == cases[i].rc && test_log_has(o, cases[i].msg), "sample %s: exit %d (want %d), message '%s'",
               cases[i].args, rc, cases[i].rc, cases[i].msg);
    }
    CHECK_EQ_INT(test_sh("%s sample > %s/sm_none.log 2>&1", bin, T), 2);
    CHECK_EQ_INT(test_sh("%s sample --run %s/nowhere > %s/sm_nw.log 2>&1", bin, T, T), 1);
    CHECK_EQ_INT(test_sh("%s sample --hf %s/sm_hf > %s/sm_notok.log 2>&1", bin, T, T), 2); /* no tokenizer */
    CHECK(test_log_has("sm_notok", "no tokenizer"));
    CHECK_EQ_INT(test_sh("%s train --sample-every -1 --out %s/sm_neg > %s/sm_neg.log 2>&1", bin, T, T), 2);
    CHECK(test_sh("test -e %s/sm_neg", T) != 0);
}

/* Points in the n-th polyline (0-based) of an SVG file; -1 when there is none. */
static int poly_points(const char* svg, int nth) {
    const char* s = svg;
    for (int i = 0; i <= nth; i++) {
        s = strstr(s, "<polyline");
        if (!s) return -1;
        s++;
    }
    s = strstr(s, "points=\"");
    if (!s) return -1;
    s += 8;
    int n = 0;
    for (; *s && *s != '"'; s++) n += *s == ',';
    return n;
}

TEST(plot_runs_and_telemetry) {
    const char *T = test_tmpdir(), *bin = test_mxlm_bin();
    test_sentence_shards("ev_", 77, 20000, 3000);
    REQUIRE(test_sh("rm -rf %s/pl_a %s/pl_b %s/pl.svg && %s train " MICRO " --steps 8 --batch 2 --seq 32 --val-tokens 128 "
                    "--eval-every 2 --train %s/ev_train.bin --val %s/ev_val.bin --out %s/pl_a > /dev/null 2>&1 && %s train "
                    MICRO " --recipe bf16 --steps 6 --batch 2 --seq 32 --val-tokens 128 --eval-every 3 --telemetry-every 2 "
                    "--train %s/ev_train.bin --val %s/ev_val.bin --out %s/pl_b > /dev/null 2>&1", T, T, T, bin, T, T, T,
                    bin, T, T, T) == 0);
    REQUIRE(test_sh("%s plot %s/pl_a %s/pl_b --out %s/pl.svg > %s/pl.log 2>&1", bin, T, T, T, T) == 0);
    char p[512];
    snprintf(p, sizeof p, "%s/pl.svg", T);
    size_t n = 0;
    char* svg = test_read_file(p, &n);
    REQUIRE(svg);
    CHECK(!strncmp(svg, "<svg", 4) && strstr(svg, "</svg>"));
    /* run a: 8 training lines, evaluations at 0 2 4 6 8; run b: 6 training lines, evaluations at 0 3 6 */
    CHECK_EQ_INT(poly_points(svg, 0), 8);
    CHECK_EQ_INT(poly_points(svg, 1), 5);
    CHECK_EQ_INT(poly_points(svg, 2), 6);
    CHECK_EQ_INT(poly_points(svg, 3), 3);
    CHECK_EQ_INT(poly_points(svg, 4), -1); /* no telemetry panel without --telemetry */
    CHECK(strstr(svg, "/pl_a (") && strstr(svg, "/pl_b ("));
    free(svg);
    CHECK(test_log_has("pl", "pl_a: mxfp4-fdw-h16, 8 training lines, 5 evaluations"));
    REQUIRE(test_sh("%s plot %s/pl_a %s/pl_b --telemetry --out %s/pl.svg > /dev/null 2>&1", bin, T, T, T) == 0);
    svg = test_read_file(p, &n);
    REQUIRE(svg);
    CHECK(strstr(svg, "SQNR") != NULL);
    for (int o = 0; o < 6; o++) CHECK_EQ_INT(poly_points(svg, 4 + o), 3); /* run b: telemetry at steps 2 4 6 */
    CHECK_EQ_INT(poly_points(svg, 10), -1);
    free(svg);
    /* errors: nothing written */
    REQUIRE(test_sh("rm -f %s/pl2.svg %s/pl2.png %s/pl2.gif", T, T, T) == 0);
    CHECK_EQ_INT(test_sh("%s plot --out %s/pl2.svg > %s/pl_e1.log 2>&1", bin, T, T), 2);
    CHECK_EQ_INT(test_sh("%s plot %s/pl_a --out %s/pl2.gif > %s/pl_e2.log 2>&1", bin, T, T, T), 2);
    CHECK(test_log_has("pl_e2", ".svg or .png"));
    CHECK_EQ_INT(test_sh("%s plot %s/pl_a %s/nowhere --out %s/pl2.png > %s/pl_e5.log 2>&1", bin, T, T, T, T), 1);
    CHECK_EQ_INT(test_sh("%s plot %s/pl_a %s/nowhere --out %s/pl2.svg > %s/pl_e3.log 2>&1", bin, T, T, T, T), 1);
    CHECK(test_log_has("pl_e3", "nowhere"));
    CHECK_EQ_INT(test_sh("%s plot %s/pl_a --bogus --out %s/pl2.svg > %s/pl_e4.log 2>&1", bin, T, T, T), 2);
    CHECK(test_sh("test -e %s/pl2.svg || test -e %s/pl2.png || test -e %s/pl2.gif", T, T, T) != 0);
}

TEST(tokrec_round_trip_shard_header_and_checks) {
    const char* T = test_tmpdir();
    mx_tokenizer* t = NULL;
    REQUIRE(mx_tok_open_encoding(&t, "tiny") == 0);
    mx_tokrec r, r2;
    REQUIRE(mx_tokrec_make(&r, t, NULL, MX_TINY_RANKS) == 0);
    char text[2048];
    int len = mx_tokrec_format(&r, text, sizeof text);
    REQUIRE(len > 0 && len < (int)sizeof text);
    CHECK(!strcmp(text, "ranks = build/data/tiny.tiktoken\npattern = r50k\nvocab = 4096\ncrc32 = 1c1ccb86\n"));
    REQUIRE(mx_tokrec_parse(text, "t", &r2) == 0);
    CHECK(!strcmp(r2.ranks, r.ranks) && r2.pattern == r.pattern && r2.vocab == 4096 && r2.crc == r.crc);
    /* into a shard header: llm.c's three fields as before, the tokens unchanged, the record back */
    char p[512];
    snprintf(p, sizeof p, "%s/tr_shard.bin", T);
    uint32_t toks[5] = {1, 2, 3, 4095, 7};
    REQUIRE(mx_shard_write_tok(p, toks, 5, 1, text) == 0);
    mx_shard s;
    REQUIRE(mx_shard_open(&s, p) == 0);
    const int32_t* h = (const int32_t*)s.map;
    CHECK(h[0] == MX_SHARD_MAGIC && h[1] == 1 && h[2] == 5 && s.n_tokens == 5 && mx_shard_token(&s, 3) == 4095);
    CHECK(mx_tokrec_of_shard(&s, &r2) == 1 && r2.crc == r.crc);
    /* run directory: the path made absolute */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tr_run", T);
    REQUIRE(test_sh("mkdir -p %s", dir) == 0);
    CHECK(mx_tokrec_record_run(dir, &s) == 1);
    CHECK(mx_tokrec_read_run(dir, &r2) == 1 && r2.ranks[0] == '/' && strstr(r2.ranks, "/build/data/tiny.tiktoken"));
    mx_tokenizer* t2 = NULL;
    CHECK(mx_tokrec_open(&r2, &t2) == 0 && t2);
    mx_tok_free(t2);
    mx_shard_close(&s);
    /* a record that does not match the tokenizer found is refused */
    r2.crc ^= 1;
    t2 = NULL;
    CHECK(mx_tokrec_open(&r2, &t2) != 0 && !t2 && strstr(mx_last_error(), "not the one recorded"));
    /* a shard without one, and a record too long for the header */
    REQUIRE(mx_shard_write(p, toks, 5, 1) == 0);
    REQUIRE(mx_shard_open(&s, p) == 0);
    CHECK(mx_tokrec_of_shard(&s, &r2) == 0);
    mx_shard_close(&s);
    char big[1100];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK(mx_shard_write_tok(p, toks, 5, 1, big) != 0);
    CHECK(mx_tokrec_parse("pattern = r50k\nvocab = 4\ncrc32 = 0\n", "t", &r2) != 0); /* neither encoding nor ranks */
    mx_tok_free(t);
    /* the embedded corpus' shards (mxlm prep in make) carry it */
    REQUIRE(mx_shard_open(&s, MX_TINY_VAL) == 0);
    CHECK(mx_tokrec_of_shard(&s, &r2) == 1 && !strcmp(r2.ranks, MX_TINY_RANKS) && r2.vocab == MX_TINY_VOCAB);
    mx_shard_close(&s);
}

TEST(plot_svg_library) {
    mx_study_run r;
    memset(&r, 0, sizeof r);
    snprintf(r.dir, sizeof r.dir, "runs/a&b");
    mx_study_eval ev[3] = {{0, 0, 8.0}, {10, 1000, 6.0}, {20, 2000, 5.5}}, tl[2] = {{10, 1000, 6.2}, {20, 2000, NAN}};
    r.evals = ev;
    r.n_evals = 3;
    r.train_loss = tl;
    r.n_train_loss = 2;
    char* svg = mx_plot_svg(&r, 1, 1, "T<1>");
    REQUIRE(svg);
    CHECK(strstr(svg, "runs/a&amp;b (5.5000)") && strstr(svg, "T&lt;1&gt;") && !strstr(svg, "T<1>")); /* escaped */
    CHECK_EQ_INT(poly_points(svg, 0), 1); /* the NaN training point is left out */
    CHECK_EQ_INT(poly_points(svg, 1), 3);
    free(svg);
}
