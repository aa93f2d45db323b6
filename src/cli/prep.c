/* prep.c: ./mxlm prep (documents -> token shards) and ./mxlm bpe (train the tiny BPE). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "mxlm/data.h"
#include "mxlm/mx.h"
#include "mxlm/tokenizer.h"
#include "mxlm/tokrec.h"
#include "mxlm/util.h"

static const char* k_prep_usage =
    "--encoding NAME | --ranks FILE --pattern P   --out PREFIX | --train-pattern PAT [--val-pattern PAT]\n"
    "           [--val-fraction F | --val-docs N] [--shard-tokens N] [--format auto|jsonl|text] [--field text]\n"
    "           [--skip-bad] [--replace] [--threads N] [--quiet] INPUT...\n"
    "  INPUT: JSON Lines with a \"text\" field, or plain UTF-8 text files (one document each); plain, gzip or\n"
    "  zstd (recognised by content). Every document is preceded by the end-of-text token (<|begin_of_text|>\n"
    "  for llama3), as llm.c does. Shards: llm.c .bin, version 1 (uint16) when the vocabulary fits 65,536 ids,\n"
    "  else version 2 (uint32). --out PREFIX writes PREFIX_train_000000.bin ... and PREFIX_val_000000.bin.\n"
    "  The validation split is the LAST documents. Shards are written as hidden DIR/.NAME.part files (no\n"
    "  shard glob takes them) and renamed only once everything succeeded; a malformed line, invalid UTF-8 or\n"
    "  a truncated stream stops with file:line and leaves no shard (--skip-bad skips documents with invalid\n"
    "  UTF-8 and reports how many). An output that already has shards is refused unless --replace, which\n"
    "  replaces the whole set: its shards this run does not write again are removed, so a glob such as\n"
    "  'PREFIX_train_*.bin' never mixes two runs. A second prep on the same outputs is refused while one runs.";

typedef struct { double t0, last; int quiet; } prog;
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void progress(void* ctx, uint64_t in, uint64_t total, int64_t docs, int64_t tokens) {
    prog* p = ctx;
    double t = now_s();
    if (p->quiet || t - p->last < 0.5) return;
    p->last = t;
    double el = t - p->t0, mbs = (double)in / 1e6 / (el > 0 ? el : 1e-9);
    double eta = in > 0 && total > in ? el * (double)(total - in) / (double)in : 0;
    fprintf(stderr, "\rprep: %.1f/%.1f MB read, %lld docs, %lld tokens, %.1f MB/s, ETA %d:%02d   ", in / 1e6,
            total / 1e6, (long long)docs, (long long)tokens, mbs, (int)eta / 60, (int)eta % 60);
    fflush(stderr);
}

static int open_tok(const char* encoding, const char* ranks, const char* pattern, mx_tokenizer** t, const char* cmd) {
    int rc;
    if (ranks) {
        int pat = mx_tok_pattern_parse(pattern);
        if (pat < 0) { fprintf(stderr, "mxlm %s: --pattern must be r50k, cl100k, o200k or llama3\n", cmd); return 2; }
        rc = mx_tok_open(t, ranks, pat);
    } else if (encoding) rc = mx_tok_open_encoding(t, encoding);
    else { fprintf(stderr, "mxlm %s: give --encoding NAME or --ranks FILE --pattern P\n", cmd); return 2; }
    if (rc) { fprintf(stderr, "mxlm %s: %s\n", cmd, mx_last_error()); return 1; }
    return 0;
}

int cmd_prep(int argc, char** argv) {
    const char *encoding = NULL, *ranks = NULL, *pattern = NULL, *out = NULL, *trainp = NULL, *valp = NULL;
    const char *format = "auto", *field = "text";
    double val_fraction = 0; int64_t val_docs = 0, shard_tokens = 100000000;
    int skip_bad = 0, quiet = 0, replace = 0;
    cli_opt opts[] = {
        {"encoding", OPT_STR, &encoding, "r50k_base cl100k_base o200k_base llama3 tiny"},
        {"ranks", OPT_PATH, &ranks, "tiktoken rank file"},
        {"pattern", OPT_STR, &pattern, "r50k | cl100k | o200k | llama3 (with --ranks)"},
        {"out", OPT_PATH, &out, "output prefix: PREFIX_train_%06d.bin, PREFIX_val_%06d.bin"},
        {"train-pattern", OPT_PATH, &trainp, "training shard names (printf, one %d), or one file name"},
        {"val-pattern", OPT_PATH, &valp, "validation shard names (printf, one %d), or one file name"},
        {"val-fraction", OPT_DOUBLE, &val_fraction, "fraction of the documents (the last ones) for validation"},
        {"val-docs", OPT_I64, &val_docs, "number of documents (the last ones) for validation"},
        {"shard-tokens", OPT_I64, &shard_tokens, "tokens per shard (default 100000000; 65536..2147483647)"},
        {"format", OPT_STR, &format, "auto (.json* names are JSON Lines) | jsonl | text"},
        {"field", OPT_STR, &field, "JSON field holding the text (default text)"},
        {"skip-bad", OPT_FLAG, &skip_bad, "skip documents with invalid UTF-8 (counted) instead of failing"},
        {"quiet", OPT_FLAG, &quiet, "no progress line"},
        {"replace", OPT_FLAG, &replace, "an output that already has shards: replace the whole set (its other shards removed)"},
    };
    char* pos[64]; int npos = 0;
    int rc = cli_parse(argc, argv, "prep", k_prep_usage, opts, sizeof opts / sizeof opts[0], pos, &npos);
    if (rc) return rc == 1 ? 0 : rc;
    if (npos < 1) { fprintf(stderr, "mxlm prep: no input files\n"); return 2; }
    int fmt = !strcmp(format, "auto") ? MX_FMT_AUTO : !strcmp(format, "jsonl") ? MX_FMT_JSONL
            : !strcmp(format, "text") ? MX_FMT_TEXT : -1;
    if (fmt < 0) { fprintf(stderr, "mxlm prep: --format must be auto, jsonl or text\n"); return 2; }
    if (!(val_fraction >= 0 && val_fraction < 1)) { fprintf(stderr, "mxlm prep: --val-fraction must be in [0, 1)\n"); return 2; }
    if (val_docs < 0) { fprintf(stderr, "mxlm prep: --val-docs must be >= 0\n"); return 2; }
    /* a shard holds many training windows (contexts are at most a few thousand tokens), and the number of
     * files stays small: --shard-tokens 1 would write one file per token */
    if (cli_check_range("prep", "shard-tokens", shard_tokens, MX_PREP_SHARD_MIN, INT32_MAX,
                        "tokens per shard out of range"))
        return 2;
    static char tbuf[1100], vbuf[1100];
    if (out) {
        if (cli_pathf("prep", tbuf, sizeof tbuf, "%s_train_%%06d.bin", out) ||
            cli_pathf("prep", vbuf, sizeof vbuf, "%s_val_%%06d.bin", out))
            return 2;
        if (!trainp) trainp = tbuf;
        if (!valp) valp = vbuf;
    }
    if (!trainp) { fprintf(stderr, "mxlm prep: give --out PREFIX or --train-pattern\n"); return 2; }
    if ((val_fraction > 0 || val_docs > 0) && !valp) { fprintf(stderr, "mxlm prep: a validation split needs --val-pattern\n"); return 2; }
    if (mx_prep_pattern_check(trainp, NULL, NULL, NULL) || (valp && mx_prep_pattern_check(valp, NULL, NULL, NULL))) {
        fprintf(stderr, "mxlm prep: %s\n", mx_last_error());
        return 2;
    }
    if ((val_fraction > 0 || val_docs > 0) && !strcmp(trainp, valp)) {
        fprintf(stderr, "mxlm prep: the training and validation outputs have the same name (%s)\n", trainp);
        return 2;
    }
    if (val_fraction > 0 && val_docs > 0) { fprintf(stderr, "mxlm prep: give --val-fraction or --val-docs, not both\n"); return 2; }
    if (!isfinite(val_fraction)) { fprintf(stderr, "mxlm prep: --val-fraction must be in [0, 1)\n"); return 2; }
    mx_tokenizer* t = NULL;
    if ((rc = open_tok(encoding, ranks, pattern, &t, "prep"))) return rc;
    prog pg = {now_s(), 0, quiet || !isatty(2)};
    /* the tokenizer record in every shard's header (tokrec.h): mxlm train copies it into the run directory */
    static char rec[MX_SHARD_TOK_MAX + 64];
    mx_tokrec tr;
    int rl = mx_tokrec_make(&tr, t, ranks ? NULL : encoding, ranks) ? -1 : mx_tokrec_format(&tr, rec, sizeof rec);
    if (rl < 0 || rl > MX_SHARD_TOK_MAX) {
        fprintf(stderr, "mxlm prep: note: the tokenizer cannot be recorded in the shards' headers (%s)\n",
                rl < 0 ? mx_last_error() : "the rank file's path is too long");
        rec[0] = 0;
    }
    mx_prep_opts o = {(const char* const*)pos, npos, fmt, field, t, trainp, valp, shard_tokens, val_docs, val_fraction,
                      skip_bad, cli_threads(), progress, &pg, rec, replace};
    mx_prep_stats st;
    rc = mx_prep_run(&o, &st);
    if (!pg.quiet) fprintf(stderr, "\n");
    mx_tok_free(t);
    if (rc) { fprintf(stderr, "mxlm prep: %s (no shard written)\n", mx_last_error()); return 1; }
    double el = now_s() - pg.t0;
    if (!quiet)
        fprintf(stderr, "prep: %lld documents (%lld train, %lld val, %lld skipped), %.1f MB of text in %.2f s (%.1f MB/s); "
                        "train %lld tokens in %d shard(s), val %lld tokens in %d shard(s)\n",
                (long long)st.docs, (long long)st.train_docs, (long long)st.val_docs, (long long)st.skipped,
                st.text_bytes / 1e6, el, st.text_bytes / 1e6 / (el > 0 ? el : 1e-9), (long long)st.train_tokens,
                st.train_shards, (long long)st.val_tokens, st.val_shards);
    return 0;
}

static const char* k_bpe_usage =
    "--out FILE [--vocab 4096] [--val-fraction 0.05 | --val-docs N] INPUT...\n"
    "  Train the tiny byte-level BPE on the documents of INPUT (the same reader as prep), leaving out the\n"
    "  last documents that prep puts in validation. r50k pre-tokenization; ranks 0..255 are the bytes, then the\n"
    "  merges in order; id vocab-1 is <|endoftext|>. Deterministic: the same input gives the same bytes.";

int cmd_bpe(int argc, char** argv) {
    const char* out = NULL;
    int vocab = 4096; double val_fraction = 0.05; int64_t val_docs = 0;
    cli_opt opts[] = {
        {"out", OPT_PATH, &out, "rank file to write (tiktoken format)"},
        {"vocab", OPT_INT, &vocab, "vocabulary size including <|endoftext|> (default 4096; 257..65536)"},
        {"val-fraction", OPT_DOUBLE, &val_fraction, "fraction of the documents (the last ones) left out (default 0.05)"},
        {"val-docs", OPT_I64, &val_docs, "number of documents (the last ones) left out"},
    };
    char* pos[64]; int npos = 0;
    int rc = cli_parse(argc, argv, "bpe", k_bpe_usage, opts, sizeof opts / sizeof opts[0], pos, &npos);
    if (rc) return rc == 1 ? 0 : rc;
    if (!out || npos < 1) { fprintf(stderr, "mxlm bpe: give --out FILE and input files\n"); return 2; }
    for (int i = 0; i < npos; i++) {
        const char* const files[] = {out, pos[i]};
        static const char* const fnames[] = {"--out", "input"};
        if (cli_paths_distinct("bpe", fnames, files, 2)) return 2;
    }
    if (cli_check_range("bpe", "vocab", vocab, 257, 65536, "the bytes, one merge at least and <|endoftext|>")) return 2;
    int64_t n = 0;
    if (mx_docs_count((const char* const*)pos, npos, MX_FMT_AUTO, "text", &n)) {
        fprintf(stderr, "mxlm bpe: %s\n", mx_last_error()); return 1;
    }
    int64_t nval = val_docs > 0 ? val_docs : (int64_t)(val_fraction * (double)n + 0.999999);
    if (nval > n) nval = n;
    if (mx_bpe_train((const char* const*)pos, npos, n - nval, vocab, out)) {
        fprintf(stderr, "mxlm bpe: %s\n", mx_last_error()); return 1;
    }
    return 0;
}
