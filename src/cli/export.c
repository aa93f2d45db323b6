/* export.c: ./mxlm export --hf DIR --run RUNDIR: the latest checkpoint of a
 * run as a Hugging Face LlamaForCausalLM directory (config.json +
 * model.safetensors), read back and compared after writing; with
 * --ref-tokens N also DIR/mxlm_reference.json, our exact-FP32 logits and
 * loss on N tokens, for tools/hf_check.py to compare transformers against.
 *
 * The model shape comes from RUNDIR/config.txt (the run's resolved
 * configuration) and is checked against the checkpoint's own fingerprint. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/using.h"
#include "mxlm/hf.h"
#include "mxlm/json.h"
#include "mxlm/mx.h"
#include "mxlm/trainer.h"
#include "mxlm/util.h"

/* "key = value" lines (config.txt, a checkpoint fingerprint): the model shape, the preset name and the
 * validation glob. Returns 0, or -1 with *missing the first model key not found. */
static int parse_kv(const char* text, mx_model_config* c, char* val, size_t vn, const char** missing) {
    if (val && vn) {
        val[0] = 0;
        cli_kv_get(text, "val", val, vn);
    }
    if (cli_model_from_kv(text, c, missing)) return -1;
    cli_kv_get(text, "preset", c->name, sizeof c->name);
    return 0;
}

static void json_floats(FILE* f, const float* x, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        char b[32];
        fprintf(f, "%s%s", i ? "," : "", mx_json_number(b, sizeof b, (double)x[i], 9));
    }
    fputc(']', f);
}

static void json_string(FILE* f, const char* s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Logits rows stored in the reference: all when N*V is small, else 8 spread
 * positions (first and last included). */
#define REF_ALL_LIMIT (1 << 20)

static int write_reference(mx_llama* m, const char* dir, int N, const char* val_glob, const char* ckpt, int64_t step) {
    const int V = m->cfg.vocab;
    int32_t* tok = malloc(sizeof(int32_t) * (size_t)N); /* [N] */
    int32_t* tgt = malloc(sizeof(int32_t) * (size_t)N); /* [N] */
    if (!tok || !tgt) { free(tok); free(tgt); fprintf(stderr, "mxlm export: out of memory\n"); return 1; }
    char source[1400];
    mx_loader l;
    memset(&l, 0, sizeof l);
    int from_val = 0;
    if (val_glob && val_glob[0] && mx_loader_open(&l, val_glob, N, V) == 0) {
        if (mx_loader_n_val_windows(&l) > 0 && mx_loader_val_window(&l, 0, tok, tgt) == 0) from_val = 1;
        mx_loader_close(&l);
    }
    if (from_val) snprintf(source, sizeof source, "validation window 0 of %s (%d + 1 tokens)", val_glob, N);
    else {
        if (val_glob && val_glob[0])
            fprintf(stderr, "mxlm export: note: no validation window of %d + 1 tokens from '%s' (%s); using tokens "
                            "t mod %d\n", N, val_glob, mx_last_error(), V);
        for (int i = 0; i < N; i++) { tok[i] = i % V; tgt[i] = (i + 1) % V; }
        snprintf(source, sizeof source, "synthetic: token i = i mod vocab, target i = (i + 1) mod vocab");
    }
    int rc = mx_llama_forward(m, tok, NULL, 1, N, NULL);
    if (rc) {
        fprintf(stderr, "mxlm export: reference forward: %s\n", mx_last_error());
        free(tok); free(tgt);
        return 1;
    }
    int all = (int64_t)N * V <= REF_ALL_LIMIT;
    int npos = all ? N : (N < 8 ? N : 8);
    int pos[8];
    float* rows = malloc(sizeof(float) * (size_t)(all ? N : npos) * V); /* [npos, V] */
    if (!rows) { fprintf(stderr, "mxlm export: out of memory\n"); free(tok); free(tgt); return 1; }
    if (all) memcpy(rows, m->logits, sizeof(float) * (size_t)N * V);
    else
        for (int i = 0; i < npos; i++) {
            pos[i] = npos > 1 ? (int)((int64_t)i * (N - 1) / (npos - 1)) : 0;
            memcpy(rows + (size_t)i * V, m->logits + (size_t)pos[i] * V, sizeof(float) * V);
        }
    /* the loss as the trainer computes it (in place: logits -> probabilities) */
    float loss = mx_xent_forward(m->logits, m->losses, tgt, N, V);

    char* buf = NULL;
    size_t blen = 0;
    FILE* f = open_memstream(&buf, &blen);
    if (!f) { fprintf(stderr, "mxlm export: out of memory\n"); free(rows); free(tok); free(tgt); return 1; }
    const mx_model_config* c = &m->cfg;
    fprintf(f, "{\n  \"format\": \"mxlm-reference-1\",\n  \"producer\": \"mxlm %s\",\n", MXLM_VERSION);
    fprintf(f, "  \"checkpoint\": ");
    json_string(f, ckpt);
    fprintf(f, ",\n  \"step\": %lld,\n", (long long)step);
    fprintf(f, "  \"forward\": \"mxlm CPU mx_llama_forward, recipe fp32 (exact FP32 linear layers; the run's recipe "
               "is not applied)\",\n");
    fprintf(f, "  \"model\": {\"vocab\": %d, \"dim\": %d, \"layers\": %d, \"heads\": %d, \"kv_heads\": %d, \"ffn\": "
               "%d, \"context\": %d},\n", c->vocab, c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->ffn,
            c->seq_len);
    fprintf(f, "  \"source\": ");
    json_string(f, source);
    fprintf(f, ",\n  \"n_tokens\": %d,\n  \"tokens\": [", N);
    for (int i = 0; i < N; i++) fprintf(f, "%s%d", i ? "," : "", tok[i]);
    fprintf(f, "],\n  \"targets\": [");
    for (int i = 0; i < N; i++) fprintf(f, "%s%d", i ? "," : "", tgt[i]);
    char lb[32];
    fprintf(f, "],\n  \"loss\": %s,\n  \"losses\": ", mx_json_number(lb, sizeof lb, (double)loss, 9));
    json_floats(f, m->losses, (size_t)N);
    fprintf(f, ",\n  \"logits_positions\": [");
    for (int i = 0; i < npos; i++) fprintf(f, "%s%d", i ? "," : "", all ? i : pos[i]);
    fprintf(f, "],\n  \"logits\": [\n");
    for (int i = 0; i < npos; i++) {
        fprintf(f, "    ");
        json_floats(f, rows + (size_t)i * V, (size_t)V);
        fprintf(f, "%s\n", i + 1 < npos ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    int ferr = ferror(f);
    fclose(f);
    free(rows);
    free(tok);
    free(tgt);
    if (ferr || !buf) { free(buf); fprintf(stderr, "mxlm export: out of memory\n"); return 1; }
    char path[4200];
    if (cli_pathf("export", path, sizeof path, "%s/mxlm_reference.json", dir)) { free(buf); return 2; };
    int wr = cli_write_file_atomic(path, buf, blen);
    free(buf);
    if (wr) return 1;
    printf("reference: %s: %d tokens (%s), loss %.6f, logits of %s\n", path, N, from_val ? "validation" : "synthetic",
           (double)loss, all ? "every position" : "8 positions");
    return 0;
}

/* The run's tokenizer record (RUN/tokenizer.txt) into the export (DIR/tokenizer.txt): train --init-from and
 * eval --hf compare it with their shards' (tokrec.h). None recorded: nothing copied. 0, or 1 printed. */
static int copy_tokrec(const char* run, const char* hf) {
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/tokenizer.txt", run);
    snprintf(dst, sizeof dst, "%s/tokenizer.txt", hf);
    char* text = mx_read_text(src);
    if (!text) return 0;
    int rc = cli_write_file_atomic(dst, text, strlen(text));
    free(text);
    return rc ? 1 : 0;
}

int cmd_export(int argc, char** argv) {
    const char *hf = NULL, *run = NULL, *ckpt_opt = NULL, *val_opt = NULL;
    int bf16 = 0, ref_tokens = 0, no_verify = 0;
    const cli_opt opts[] = {
        {"hf", OPT_PATH, &hf, "output directory: config.json + model.safetensors for transformers' LlamaForCausalLM "
                             "(required)"},
        {"run", OPT_PATH, &run, "run directory of mxlm train (config.txt + ckpt-*.bin; required)"},
        {"ckpt", OPT_PATH, &ckpt_opt, "a checkpoint file of that run instead of its latest"},
        {"bf16", OPT_FLAG, &bf16, "write BF16 tensors (round to nearest even) instead of F32"},
        {"ref-tokens", OPT_INT, &ref_tokens, "also write mxlm_reference.json: our FP32 logits and loss on N tokens "
                                             "(validation window 0 of the run, else t mod vocab)"},
        {"val", OPT_PATH, &val_opt, "token shards for --ref-tokens instead of the run's validation glob"},
        {"no-verify", OPT_FLAG, &no_verify, "skip reading the export back and comparing it with the checkpoint"},
    };
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    const char* usage = "--hf DIR --run RUNDIR [--bf16] [--ref-tokens N]";
    int rc = cli_parse(argc, argv, "export", usage, opts, nopts, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (!hf || !run) { fprintf(stderr, "mxlm export: --hf DIR and --run RUNDIR are required\n"); return 2; }
    if (ref_tokens < 0) { fprintf(stderr, "mxlm export: --ref-tokens must be positive\n"); return 2; }

    /* the model shape: config.txt */
    char cpath[4200], val[1024] = "", ckpt[4200];
    if (cli_pathf("export", cpath, sizeof cpath, "%s/config.txt", run)) return 2;
    char* text = mx_read_text(cpath);
    if (!text) { fprintf(stderr, "mxlm export: %s (not a run directory?)\n", mx_last_error()); return 1; }
    mx_model_config cfg;
    const char* missing = NULL;
    if (parse_kv(text, &cfg, val, sizeof val, &missing)) {
        fprintf(stderr, "mxlm export: %s: no '%s = ...' line\n", cpath, missing);
        free(text);
        return 1;
    }
    free(text);
    if (mx_model_config_check(&cfg)) { fprintf(stderr, "mxlm export: %s: %s\n", cpath, mx_last_error()); return 1; }
    if (ckpt_opt) { if (cli_pathf("export", ckpt, sizeof ckpt, "%s", ckpt_opt)) return 2; }
    else if (!mx_ckpt_latest(run, ckpt, sizeof ckpt)) {
        fprintf(stderr, "mxlm export: no checkpoint (ckpt-*.bin) in %s\n", run);
        return 1;
    }
    if (ref_tokens > cfg.seq_len) {
        fprintf(stderr, "mxlm export: --ref-tokens %d exceeds the model's context %d\n", ref_tokens, cfg.seq_len);
        return 2;
    }

    /* the parameters; FP32 recipe (the reference forward is exact FP32) */
    mx_recipe fp32;
    mx_llama m, back;
    memset(&back, 0, sizeof back);
    if (mx_recipe_parse("fp32", &fp32) || mx_llama_create(&m, &cfg, &fp32, 0, 0, 0)) {
        fprintf(stderr, "mxlm export: %s\n", mx_last_error());
        return 1;
    }
    static mx_ckpt_meta meta; /* large (the loss window) */
    static char fp[8192];
    if (mx_ckpt_load_params(ckpt, &m, &meta, fp, sizeof fp)) {
        fprintf(stderr, "mxlm export: %s\n", mx_last_error());
        mx_llama_free(&m);
        return 1;
    }
    mx_model_config fcfg;
    if (parse_kv(fp, &fcfg, NULL, 0, &missing) || fcfg.vocab != cfg.vocab || fcfg.dim != cfg.dim ||
        fcfg.n_layers != cfg.n_layers || fcfg.n_heads != cfg.n_heads || fcfg.n_kv_heads != cfg.n_kv_heads ||
        fcfg.ffn != cfg.ffn || fcfg.seq_len != cfg.seq_len || fcfg.rope_theta != cfg.rope_theta ||
        fcfg.norm_eps != cfg.norm_eps) {
        fprintf(stderr, "mxlm export: %s and the model lines of %s's fingerprint disagree\n", cpath, ckpt);
        mx_llama_free(&m);
        return 1;
    }
    char d[256];
    mx_model_config_describe(&cfg, d, sizeof d);
    if (mx_hf_export(&m, hf, bf16)) {
        fprintf(stderr, "mxlm export: %s\n", mx_last_error());
        mx_llama_free(&m);
        return 1;
    }
    if (copy_tokrec(run, hf)) {
        mx_llama_free(&m);
        return 1;
    }
    printf("exported %s (step %lld) to %s/model.safetensors + config.json: %zu parameters, %s, %.1f MiB\n", ckpt,
           (long long)meta.step, hf, m.n_params, bf16 ? "BF16" : "F32",
           (double)m.n_params * (bf16 ? 2 : 4) / (1 << 20));
    printf("model: %s\n", d);

    rc = 0;
    if (!no_verify) { /* read it back: bit-identical (F32) or the BF16 rounding of every value */
        mx_model_config rcfg;
        if (mx_hf_read_config(hf, &rcfg) || mx_llama_create(&back, &cfg, &fp32, 0, 0, 0) || mx_hf_load(hf, &back)) {
            fprintf(stderr, "mxlm export: reading the export back: %s\n", mx_last_error());
            rc = 1;
        } else if (rcfg.vocab != cfg.vocab || rcfg.dim != cfg.dim || rcfg.n_layers != cfg.n_layers ||
                   rcfg.n_heads != cfg.n_heads || rcfg.n_kv_heads != cfg.n_kv_heads || rcfg.ffn != cfg.ffn ||
                   rcfg.seq_len != cfg.seq_len || rcfg.rope_theta != cfg.rope_theta || rcfg.norm_eps != cfg.norm_eps) {
            fprintf(stderr, "mxlm export: read back: config.json does not describe the model\n");
            rc = 1;
        } else {
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < m.n_params; i++) {
                float want = bf16 ? mx_round_bf16(m.params[i]) : m.params[i];
                if (memcmp(&want, &back.params[i], 4) && !(want != want && back.params[i] != back.params[i])) {
                    if (!bad) first = i;
                    bad++;
                }
            }
            if (bad) {
                fprintf(stderr, "mxlm export: read back: %zu of %zu values differ (first at %zu)\n", bad, m.n_params,
                        first);
                rc = 1;
            } else printf("verified: read back %s\n", bf16 ? "equal to the BF16 rounding of every value" : "bit-identical");
        }
        mx_llama_free(&back);
    }
    if (!rc && ref_tokens > 0) {
        if (bf16) /* compare what transformers will see: the rounded weights */
            for (size_t i = 0; i < m.n_params; i++) m.params[i] = mx_round_bf16(m.params[i]);
        rc = write_reference(&m, hf, ref_tokens, val_opt ? val_opt : val, ckpt, meta.step);
    }
    mx_llama_free(&m);
    return rc;
}
