/* using.c: the model and tokenizer of `mxlm eval` / `mxlm sample` (using.h).
 *
 * A run's checkpoint is read as `mxlm export` reads it, but the shape, the
 * recipe, the blocks kept in BF16, the head's precision, the batch geometry
 * and the seed come from the checkpoint's own fingerprint (the config lines
 * that changed its numbers), so a checkpoint file is enough; config.txt (if
 * the run directory has one) adds the preset name and the validation set. */
#include "cli/using.h"
#include "cli/cli.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mxlm/config.h"
#include "mxlm/data.h"
#include "mxlm/hf.h"
#include "mxlm/mx.h"
#include "mxlm/tokrec.h"
#include "mxlm/util.h"

/* The value of "key = value" in text (the first such line) into out; 1 found, 0 not. */
int cli_kv_get(const char* text, const char* key, char* out, size_t n) { return mx_config_get(text, key, out, n); }

static int kv_int(const char* text, const char* key, long long* v) {
    char b[64], *end = NULL;
    if (!cli_kv_get(text, key, b, sizeof b)) return 0;
    errno = 0;
    *v = strtoll(b, &end, 10);
    return !errno && end != b && !*end;
}

/* The fingerprint text of a checkpoint ("MXLMCKP1", u32 version, u32 length, text), malloc'ed. */
static char* ckpt_fingerprint(const char* path) {
    FILE* f = mx_fopen_input(path, "checkpoint");
    if (!f) return NULL;
    unsigned char h[16];
    char* fp = NULL;
    if (fread(h, 1, 16, f) != 16 || memcmp(h, "MXLMCKP1", 8)) {
        mx_fail(MX_EFORMAT, "%s: not an mxlm checkpoint (bad magic or too short)", path);
    } else {
        uint32_t flen = (uint32_t)h[12] | (uint32_t)h[13] << 8 | (uint32_t)h[14] << 16 | (uint32_t)h[15] << 24;
        fp = flen < (1u << 20) ? malloc((size_t)flen + 1) : NULL;
        if (!fp || fread(fp, 1, flen, f) != flen) {
            free(fp);
            fp = NULL;
            mx_fail(MX_EFORMAT, "%s: checkpoint header truncated or invalid", path);
        } else fp[flen] = 0;
    }
    fclose(f);
    return fp;
}

/* The model shape from "key = value" lines; the first missing key into *missing. */
int cli_model_from_kv(const char* text, mx_model_config* c, const char** missing) {
    static const char* keys[] = {"vocab", "dim", "layers", "heads", "kv-heads", "ffn", "context", "rope-theta",
                                 "norm-eps"};
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "custom");
    for (int i = 0; i < 9; i++) {
        char b[64];
        if (!cli_kv_get(text, keys[i], b, sizeof b)) { *missing = keys[i]; return -1; }
        double x = strtod(b, NULL);
        switch (i) {
        case 0: c->vocab = (int)x; break;
        case 1: c->dim = (int)x; break;
        case 2: c->n_layers = (int)x; break;
        case 3: c->n_heads = (int)x; break;
        case 4: c->n_kv_heads = (int)x; break;
        case 5: c->ffn = (int)x; break;
        case 6: c->seq_len = (int)x; break;
        case 7: c->rope_theta = (float)x; break;
        case 8: c->norm_eps = (float)x; break;
        }
    }
    return 0;
}

static int is_dir(const char* p) { struct stat st; return stat(p, &st) == 0 && S_ISDIR(st.st_mode); }

int cli_model_open(cli_model* cm, const char* cmd, const char* run, const char* ckpt, const char* hf,
                   const char* recipe) {
    memset(cm, 0, sizeof *cm);
    cm->val_tokens = -1;
    if (hf && (run || ckpt)) { fprintf(stderr, "mxlm %s: give --hf DIR or a run (--run/--ckpt), not both\n", cmd); return 2; }
    if (!hf && !run && !ckpt) { fprintf(stderr, "mxlm %s: give --run DIR, --ckpt FILE or --hf DIR\n", cmd); return 2; }
    mx_recipe rec;
    if (recipe && mx_recipe_parse(recipe, &rec)) { fprintf(stderr, "mxlm %s: --recipe: %s\n", cmd, mx_last_error()); return 2; }
    mx_model_config cfg;
    if (hf) {
        if (!is_dir(hf)) { fprintf(stderr, "mxlm %s: --hf %s: not a directory\n", cmd, hf); return 1; }
        if (cli_pathf(cmd, cm->source, sizeof cm->source, "%s", hf)) return 2;
        snprintf(cm->recipe, sizeof cm->recipe, "%s", recipe ? recipe : "fp32");
        if (!recipe && mx_recipe_parse("fp32", &rec)) return 1;
        if (mx_hf_read_config(hf, &cfg) || mx_llama_create(&cm->m, &cfg, &rec, 0, 0, 0) || mx_hf_load(hf, &cm->m)) {
            fprintf(stderr, "mxlm %s: %s\n", cmd, mx_last_error());
            cli_model_free(cm);
            return 1;
        }
        snprintf(cm->m.cfg.name, sizeof cm->m.cfg.name, "hf");
        return 0;
    }
    cm->from_run = 1;
    if (run) {
        if (cli_pathf(cmd, cm->run, sizeof cm->run, "%s", run)) return 2;
    } else { /* --ckpt alone: its folder */
        const char* sl = strrchr(ckpt, '/');
        if (cli_pathf(cmd, cm->run, sizeof cm->run, "%.*s", sl ? (int)(sl - ckpt) : 1, sl ? ckpt : ".")) return 2;
    }
    if (run && !is_dir(run)) { fprintf(stderr, "mxlm %s: --run %s: not a directory\n", cmd, run); return 1; }
    if (ckpt) { if (cli_pathf(cmd, cm->source, sizeof cm->source, "%s", ckpt)) return 2; }
    else if (!mx_ckpt_latest(run, cm->source, sizeof cm->source)) {
        fprintf(stderr, "mxlm %s: no checkpoint (ckpt-*.bin) in %s\n", cmd, run);
        return 1;
    }
    char* fp = ckpt_fingerprint(cm->source);
    if (!fp) { fprintf(stderr, "mxlm %s: %s\n", cmd, mx_last_error()); return 1; }
    const char* missing = NULL;
    long long x;
    char b[256];
    int rc = 0;
    if (cli_model_from_kv(fp, &cfg, &missing)) {
        fprintf(stderr, "mxlm %s: %s: the checkpoint's configuration has no '%s' line\n", cmd, cm->source, missing);
        rc = 1;
    } else if (!cli_kv_get(fp, "recipe", cm->run_recipe, sizeof cm->run_recipe)) {
        fprintf(stderr, "mxlm %s: %s: the checkpoint's configuration has no 'recipe' line\n", cmd, cm->source);
        rc = 1;
    }
    if (!rc) {
        cm->bf16_first = kv_int(fp, "bf16-first", &x) ? (int)x : 0;
        cm->bf16_last = kv_int(fp, "bf16-last", &x) ? (int)x : 0;
        cm->batch = kv_int(fp, "batch", &x) ? (int)x : 0;
        cm->seq = kv_int(fp, "seq", &x) ? (int)x : 0;
        cm->accum = kv_int(fp, "accum", &x) ? (int)x : 1;
        cm->gpus = kv_int(fp, "gpus", &x) ? (int)x : 1;
        cm->seed = cli_kv_get(fp, "seed", b, sizeof b) ? strtoull(b, NULL, 10) : 0;
        cm->head_bf16 = cli_kv_get(fp, "head", b, sizeof b) && !strcmp(b, "bf16");
        snprintf(cm->recipe, sizeof cm->recipe, "%s", recipe ? recipe : cm->run_recipe);
        if (!recipe && mx_recipe_parse(cm->run_recipe, &rec)) {
            fprintf(stderr, "mxlm %s: %s: recipe: %s\n", cmd, cm->source, mx_last_error());
            rc = 1;
        }
    }
    /* config.txt: the preset's name and the validation set */
    char cpath[4300];
    if (cli_pathf(cmd, cpath, sizeof cpath, "%s/config.txt", cm->run)) return 2;
    char* ctext = rc ? NULL : mx_read_text(cpath);
    if (ctext) {
        cli_kv_get(ctext, "preset", cfg.name, sizeof cfg.name);
        cli_kv_get(ctext, "val", cm->val, sizeof cm->val);
        if (kv_int(ctext, "val-tokens", &x)) cm->val_tokens = x;
        cli_kv_get(ctext, "gemm", cm->gemm, sizeof cm->gemm);
        cli_kv_get(ctext, "attn", cm->attn, sizeof cm->attn);
        free(ctext);
    }
    if (!rc && (mx_llama_create(&cm->m, &cfg, &rec, cm->bf16_first, cm->bf16_last, cm->seed) ||
                mx_ckpt_load_params(cm->source, &cm->m, &cm->meta, NULL, 0))) {
        fprintf(stderr, "mxlm %s: %s\n", cmd, mx_last_error());
        rc = 1;
    }
    free(fp);
    if (rc) { cli_model_free(cm); return rc; }
    cm->m.head_bf16 = cm->head_bf16;
    return 0;
}

void cli_model_free(cli_model* cm) { mx_llama_free(&cm->m); }

int cli_tokenizer_check(const char* cmd, const char* encoding, const char* ranks, const char* pattern) {
    if (encoding && ranks) { fprintf(stderr, "mxlm %s: give --encoding or --ranks, not both\n", cmd); return 2; }
    if (pattern && !ranks) { fprintf(stderr, "mxlm %s: --pattern goes with --ranks FILE\n", cmd); return 2; }
    if (ranks && mx_tok_pattern_parse(pattern ? pattern : "") < 0) {
        fprintf(stderr, "mxlm %s: --ranks needs --pattern r50k, cl100k, o200k or llama3%s%s%s\n", cmd,
                pattern ? " (got '" : "", pattern ? pattern : "", pattern ? "')" : "");
        return 2;
    }
    if (encoding && mx_tok_pattern_parse(encoding) < 0) {
        fprintf(stderr, "mxlm %s: --encoding: unknown encoding '%s' (r50k_base, cl100k_base, o200k_base, llama3, tiny)\n",
                cmd, encoding);
        return 2;
    }
    return 0;
}

int cli_tokenizer_open(const char* cmd, const char* encoding, const char* ranks, const char* pattern,
                       const char* run, const char* glob_pat, mx_tokenizer** t, char* what, size_t n) {
    *t = NULL;
    if (n) what[0] = 0;
    if (encoding || ranks) {
        int rc = ranks ? mx_tok_open(t, ranks, mx_tok_pattern_parse(pattern)) : mx_tok_open_encoding(t, encoding);
        if (rc) { fprintf(stderr, "mxlm %s: %s\n", cmd, mx_last_error()); return 1; }
        snprintf(what, n, "%s%s%s", ranks ? ranks : encoding, ranks ? ", pattern " : "", ranks ? pattern : "");
        return 0;
    }
    mx_tokrec r;
    int found = 0;
    if (run && run[0]) {
        found = mx_tokrec_read_run(run, &r);
        if (found < 0) { fprintf(stderr, "mxlm %s: %s\n", cmd, mx_last_error()); return 1; }
        if (found) snprintf(what, n, "%s/tokenizer.txt: %s", run, r.ranks[0] ? r.ranks : r.encoding);
    }
    if (!found && glob_pat && glob_pat[0]) { /* a run made before runs recorded it: its shards may have it */
        glob_t g;
        if (glob(glob_pat, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
            mx_shard s;
            if (mx_shard_open(&s, g.gl_pathv[0]) == 0) {
                found = mx_tokrec_of_shard(&s, &r) > 0;
                if (found) snprintf(what, n, "the header of %s: %s", g.gl_pathv[0], r.ranks[0] ? r.ranks : r.encoding);
                mx_shard_close(&s);
            }
        }
        globfree(&g);
    }
    if (!found) return 0;
    if (mx_tokrec_open(&r, t)) {
        fprintf(stderr, "mxlm %s: %s (recorded in %s)\n", cmd, mx_last_error(), what);
        return 1;
    }
    return 0;
}

int cli_tokenizers_agree(const char* cmd, const cli_model* cm, const char* glob, const char* encoding,
                         const char* ranks, const mx_tokenizer* tok) {
    char mwhat[4300], gwhat[1100], twhat[1100];
    snprintf(mwhat, sizeof mwhat, "the model (%s/tokenizer.txt)", cm->from_run ? cm->run : cm->source);
    snprintf(gwhat, sizeof gwhat, "the validation shards %s", glob ? glob : "");
    snprintf(twhat, sizeof twhat, "%s %s", ranks ? "--ranks" : "--encoding", ranks ? ranks : encoding);
    mx_tokrec given;
    const int has_given =
        tok && (encoding || ranks) && mx_tokrec_make(&given, tok, ranks ? NULL : encoding, ranks) == 0;
    const mx_tok_source src[3] = {{mwhat, NULL, cm->from_run ? cm->run : cm->source, NULL},
                                  {gwhat, glob && glob[0] ? glob : NULL, NULL, NULL},
                                  {twhat, NULL, NULL, has_given ? &given : NULL}};
    if (mx_tokrec_agree(src, 3) == 0) return 0;
    fprintf(stderr, "mxlm %s: %s\n", cmd, mx_last_error());
    return 2;
}

void cli_json_str(FILE* f, const char* s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

void cli_train_sample(const mx_train_event* e, const char* run, uint64_t seed) {
    static mx_tokenizer* tok;
    static int tried;
    if (!tried) { /* the run's tokenizer, once (tokenizer.txt is written before the first step) */
        tried = 1;
        mx_tokrec r;
        if (mx_tokrec_read_run(run, &r) == 1 && mx_tokrec_open(&r, &tok)) {
            printf("sample: %s; printing token ids\n", mx_last_error());
            tok = NULL;
        }
    }
    const mx_llama* m = e->model;
    const int V = m->cfg.vocab;
    int32_t start = tok && mx_tok_doc_token(tok) < (uint32_t)V ? (int32_t)mx_tok_doc_token(tok) : V - 1;
    int n_new = m->cfg.seq_len - 1 < 48 ? m->cfg.seq_len - 1 : 48, got = 0;
    int32_t out[48];
    mx_sample_opts o = {1.0, 0, 1.0, seed};
    if (n_new < 1 || mx_generate(m, &start, 1, n_new, &o, start, out, &got)) {
        printf("sample at step %lld: failed: %s\n", (long long)e->step, n_new < 1 ? "context too short" : mx_last_error());
        return;
    }
    const int ended = got && out[got - 1] == start;
    if (ended) got--; /* the document ended */
    printf("sample at step %lld (%d tokens%s, seed %llu, temperature 1):\n---\n", (long long)e->step, got,
           ended ? ", then the document token" : "", (unsigned long long)seed);
    char* text = NULL;
    size_t tl = 0;
    uint32_t ids[48];
    for (int i = 0; i < got; i++) ids[i] = (uint32_t)out[i];
    if (tok && mx_tok_decode(tok, ids, (size_t)got, &text, &tl) == 0) {
        fwrite(text, 1, tl, stdout);
        printf("\n");
    } else {
        for (int i = 0; i < got; i++) printf(i ? " %d" : "%d", out[i]);
        printf("\n");
    }
    free(text);
    printf("---\n");
}
