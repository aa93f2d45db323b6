/* eval.c: ./mxlm eval - the loss of a model on token shards or on text.
 *
 * Shards (--val GLOB, default the run's validation glob): the trainer's
 * validation set and its evaluation, the same function (the engine's
 * evaluate, engine.h: mx_evaluate on the CPU, the GPU model's in the CUDA build):
 * non-overlapping windows of T+1 tokens at 0, T, 2T, ... of each shard, the
 * first min(--val-tokens / T, windows) rounded down to whole batches of B,
 * the mean of the batch means. With the run's T, B and --val-tokens (the
 * defaults) it is the run's validation loss at the checkpoint's step, bit for
 * bit on the device the run used.
 *
 * Text (INPUT... : JSON Lines or plain text, plain / .gz / .zst): each
 * document is encoded with the run's tokenizer after the document token (as
 * `mxlm prep` does) into one stream; windows of T+1 tokens at stride T cover
 * every token once (the last window shorter), batches of B; the mean
 * cross-entropy is over every predicted token, summed in double in order.
 * Bits per byte = the summed nats / ln 2 / the UTF-8 bytes of the predicted
 * tokens (special tokens count 0 bytes): for valid UTF-8 the bytes of the
 * text, whatever the tokenizer. On shards the bytes are those of the
 * evaluated targets when the tokenizer is known. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/using.h"
#include "mxlm/data.h"
#include "mxlm/engine.h"
#include "mxlm/json.h"
#include "mxlm/mx.h"

static const char* k_usage =
    "--run DIR [--ckpt FILE] | --hf DIR   [--val GLOB | INPUT...]  [options]\n"
    "  The validation loss of a run's checkpoint (the latest, or --ckpt) or of a Hugging Face Llama directory:\n"
    "  mean cross-entropy (nats per token), perplexity, and bits per byte when the tokenizer is known.\n"
    "  Without INPUT: token shards (--val GLOB; default the run's validation shards, the run's windows:\n"
    "  with the run's --seq, --batch and --val-tokens this is the run's validation loss at that step).\n"
    "  INPUT...: JSON Lines (--field, default text) or plain text files (a file = a document), plain, .gz or\n"
    "  .zst, encoded with the run's tokenizer (RUN/tokenizer.txt, or the shards' record; else --encoding or\n"
    "  --ranks/--pattern), each document after the document token; every token is evaluated once.\n"
    "  Exit status: 0, 1 run-time failure (unreadable files, ...), 2 usage error.";

/* UTF-8 bytes of token id (0 for special tokens and ids the tokenizer does not have). */
static size_t tok_bytes(const mx_tokenizer* t, int32_t id) {
    size_t l = 0;
    if (id >= 0 && (uint32_t)id < mx_tok_vocab_size(t)) mx_tok_token_bytes(t, (uint32_t)id, &l);
    return l;
}

typedef struct {
    double loss, nats, bpb;
    int64_t tokens, bytes, windows, text_bytes, docs;
} result;

/* The text inputs: documents -> one stream of ids (the document token first of each). */
static int read_stream(const char* const* paths, int n, int format, const char* field, const mx_tokenizer* t,
                       mx_ids* ids, result* res) {
    mx_docs* d = NULL;
    int rc = mx_docs_open(&d, paths, n, format, field);
    if (rc) return rc;
    const char *text, *file;
    size_t len;
    int64_t line;
    int k;
    while ((k = mx_docs_next(d, &text, &len, &file, &line)) == 1) {
        res->docs++;
        res->text_bytes += (int64_t)len;
        rc = mx_ids_push(ids, mx_tok_doc_token(t));
        if (!rc) rc = mx_tok_encode(t, text, len, ids);
        if (rc) break;
    }
    if (k < 0) rc = k;
    mx_docs_close(d);
    return rc;
}

/* Every predicted token of the stream once: windows at stride T, batches of B (the last batch and window
 * padded with token 0, which nothing real attends to: attention is causal). */
static int eval_stream(mx_engine* e, const uint32_t* ids, int64_t n, int64_t max_tokens, const mx_tokenizer* t,
                       result* res) {
    const int B = e->c->batch, T = e->c->seq;
    int64_t pred = n > 0 ? n - 1 : 0;
    if (max_tokens > 0 && pred > max_tokens) pred = max_tokens;
    const int64_t nw = (pred + T - 1) / T;
    int32_t* inp = malloc(sizeof(int32_t) * (size_t)B * T);  /* [B, T] */
    int32_t* tgt = malloc(sizeof(int32_t) * (size_t)B * T);  /* [B, T] */
    float* tl = malloc(sizeof(float) * (size_t)B * T);       /* [B, T] */
    int rc = inp && tgt && tl ? MX_OK : mx_fail(MX_ENOMEM, "eval: out of memory");
    double nats = 0.0;
    int64_t bytes = 0;
    for (int64_t w0 = 0; w0 < nw && !rc; w0 += B) {
        int len[1024];
        for (int b = 0; b < B; b++) {
            int64_t s = (w0 + b) * T;
            len[b] = w0 + b < nw ? (int)(pred - s < T ? pred - s : T) : 0;
            for (int i = 0; i < T; i++) {
                int ok = i < len[b];
                inp[b * T + i] = ok ? (int32_t)ids[s + i] : 0;
                tgt[b * T + i] = ok ? (int32_t)ids[s + i + 1] : 0;
            }
        }
        rc = e->ops->token_losses(e, inp, tgt, tl);
        for (int b = 0; b < B && !rc; b++)
            for (int i = 0; i < len[b]; i++) {
                nats += (double)tl[b * T + i];
                if (t) bytes += (int64_t)tok_bytes(t, tgt[b * T + i]);
            }
    }
    free(inp);
    free(tgt);
    free(tl);
    if (rc) return rc;
    res->tokens = pred;
    res->windows = nw;
    res->nats = nats;
    res->loss = pred > 0 ? (double)(float)(nats / (double)pred) : NAN;
    res->bytes = t ? bytes : -1;
    return MX_OK;
}

static void print_num(FILE* f, const char* key, double x) {
    char b[32];
    fprintf(f, "%s\"%s\":%s", strcmp(key, "loss") ? "," : "{", key, mx_json_number(b, sizeof b, x, 9));
}

int cmd_eval(int argc, char** argv) {
    const char *run = NULL, *ckpt = NULL, *hf = NULL, *val = NULL, *recipe = NULL, *device = "cpu";
    const char *encoding = NULL, *ranks = NULL, *pattern = NULL, *format = "auto", *field = "text", *gemm = NULL;
    int batch = INT_MIN, seq = INT_MIN, json = 0; /* INT_MIN, INT64_MIN: not given (the run's) */
    int64_t val_tokens = INT64_MIN;
    const cli_opt opts[] = {
        {"run", OPT_PATH, &run, "run directory of mxlm train (its latest checkpoint, config.txt, tokenizer.txt)"},
        {"ckpt", OPT_PATH, &ckpt, "a checkpoint file (of --run, or alone: its folder is the run directory)"},
        {"hf", OPT_PATH, &hf, "a Hugging Face Llama directory (config.json + model.safetensors) instead of a run"},
        {"val", OPT_PATH, &val, "token shards, a glob (default: the run's validation shards)"},
        {"val-tokens", OPT_I64, &val_tokens, "shards: validation tokens (default the run's, else 8192; 0 = every "
                                             "window); text: at most this many tokens (default all)"},
        {"seq", OPT_INT, &seq, "tokens per window T (default the run's --seq; for --hf the model's context)"},
        {"batch", OPT_INT, &batch, "windows per batch B (default the run's --batch; for --hf 1)"},
        {"recipe", OPT_STR, &recipe, "precision recipe of the forward (default the run's; fp32 for --hf)"},
        {"encoding", OPT_STR, &encoding, "tokenizer for text inputs and bytes: a named encoding (default the run's)"},
        {"ranks", OPT_PATH, &ranks, "tokenizer: a tiktoken rank file (with --pattern)"},
        {"pattern", OPT_STR, &pattern, "pre-tokenization pattern of --ranks: r50k, cl100k, o200k, llama3"},
        {"format", OPT_STR, &format, "text inputs: auto (names with .json are JSON Lines), jsonl or text"},
        {"field", OPT_STR, &field, "JSON Lines: the field holding the text (default text)"},
        {"device", OPT_STR, &device, "cpu (default: the reference) or cuda (CUDA build: the GPU trainer's evaluation)"},
        {"gemm", OPT_STR, &gemm, "GPU MXFP4 GEMMs: fast or exact (default the run's, else fast)"},
        {"json", OPT_FLAG, &json, "print one JSON line instead of the text report"},
    };
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    char* pos[64];
    int npos = 0;
    int rc = cli_parse(argc, argv, "eval", k_usage, opts, nopts, pos, &npos);
    if (rc) return rc == 1 ? 0 : rc;
    /* usage checks, before anything is read */
    /* given values in range; not given: 0 (seq, batch) and -1 (val-tokens) below mean the run's */
    if (batch != INT_MIN && (batch < 1 || batch > 1024)) {
        fprintf(stderr, "mxlm eval: --batch %d: 1..1024\n", batch);
        return 2;
    }
    if (seq != INT_MIN && seq < 1) { fprintf(stderr, "mxlm eval: --seq %d: must be positive\n", seq); return 2; }
    if (val_tokens != INT64_MIN && val_tokens < 0) {
        fprintf(stderr, "mxlm eval: --val-tokens %lld: must be >= 0 (0: every window)\n", (long long)val_tokens);
        return 2;
    }
    if (batch == INT_MIN) batch = 0;
    if (seq == INT_MIN) seq = 0;
    if (val_tokens == INT64_MIN) val_tokens = -1;
    if (val && npos) { fprintf(stderr, "mxlm eval: give --val GLOB or text INPUT files, not both\n"); return 2; }
    int fmt = !strcmp(format, "auto") ? MX_FMT_AUTO : !strcmp(format, "jsonl") ? MX_FMT_JSONL
            : !strcmp(format, "text") ? MX_FMT_TEXT : -1;
    if (fmt < 0) { fprintf(stderr, "mxlm eval: --format: auto, jsonl or text, not '%s'\n", format); return 2; }
    int on_gpu = !strcmp(device, "cuda") || !strcmp(device, "gpu");
    if (!on_gpu && strcmp(device, "cpu")) { fprintf(stderr, "mxlm eval: --device: cpu or cuda, not '%s'\n", device); return 2; }
    if (gemm && strcmp(gemm, "fast") && strcmp(gemm, "exact")) { fprintf(stderr, "mxlm eval: --gemm: fast or exact, not '%s'\n", gemm); return 2; }
    if (on_gpu && !mx_engine_gpu_built()) {
        fprintf(stderr, "mxlm eval: --device cuda: this mxlm was built without CUDA (make cuda)\n");
        return 2;
    }
    if ((rc = cli_tokenizer_check("eval", encoding, ranks, pattern))) return rc;
    if (!run && !ckpt && !hf) { fprintf(stderr, "mxlm eval: give --run DIR, --ckpt FILE or --hf DIR\n"); return 2; }
    if (hf && (run || ckpt)) { fprintf(stderr, "mxlm eval: give --hf DIR or a run (--run/--ckpt), not both\n"); return 2; }
    if (hf && !val && !npos) { fprintf(stderr, "mxlm eval: --hf needs --val GLOB or text INPUT files\n"); return 2; }

    cli_model cm;
    if ((rc = cli_model_open(&cm, "eval", run, ckpt, hf, recipe))) return rc;
    const mx_model_config* cfg = &cm.m.cfg;
    const int T = seq ? seq : cm.seq ? cm.seq : cfg->seq_len;
    const int B = batch ? batch : cm.batch ? cm.batch : 1;
    const char* glob = val ? val : cm.val;
    if (T > cfg->seq_len) {
        fprintf(stderr, "mxlm eval: --seq %d exceeds the model's context %d\n", T, cfg->seq_len);
        cli_model_free(&cm);
        return 2;
    }
    if (!npos && !glob[0]) {
        fprintf(stderr, "mxlm eval: %s has no validation glob in config.txt: give --val GLOB or text INPUT files\n",
                cm.run);
        cli_model_free(&cm);
        return 2;
    }
    mx_tokenizer* tok = NULL;
    char tokwhat[1400];
    const char* mdir = cm.from_run ? cm.run : cm.source; /* the model's directory: its tokenizer.txt */
    if ((rc = cli_tokenizer_open("eval", encoding, ranks, pattern, mdir, npos ? NULL : glob, &tok, tokwhat,
                                 sizeof tokwhat))) {
        cli_model_free(&cm);
        return rc;
    }
    if ((rc = cli_tokenizers_agree("eval", &cm, npos ? NULL : glob, encoding, ranks, tok))) {
        mx_tok_free(tok);
        cli_model_free(&cm);
        return rc;
    }
    if (npos && !tok) {
        fprintf(stderr, "mxlm eval: no tokenizer for the text inputs: %s records none (a run made before runs "
                        "recorded their tokenizer); give --encoding NAME or --ranks FILE --pattern P\n",
                cm.from_run ? cm.run : cm.source);
        cli_model_free(&cm);
        return 2;
    }
    /* the linear layers' step: that of the trainer's evaluation after the checkpoint's last update (SR bits) */
    cm.m.step = cm.meta.step > 0 && cm.gpus <= 1 ? (uint64_t)cm.meta.step * (uint64_t)cm.accum - 1 : 0;
    /* the engine's config: the model, its recipe, the run's attention (chosen as the trainer chooses it) */
    mx_train_config ec;
    memset(&ec, 0, sizeof ec);
    ec.model = *cfg;
    snprintf(ec.recipe, sizeof ec.recipe, "%s", cm.recipe);
    ec.rec = cm.m.recipe; /* parsed once, by cli_model_open */
    for (int i = 0; mx_attn_names[i]; i++)
        if (!strcmp(cm.attn, mx_attn_names[i])) ec.attn = i;
    ec.bf16_first = cm.bf16_first;
    ec.bf16_last = cm.bf16_last;
    ec.seed = cm.seed;
    ec.batch = B;
    ec.seq = T;
    ec.gemm_exact = !strcmp(gemm ? gemm : cm.gemm, "exact");
    ec.head = cm.head_bf16 ? MX_HEAD_BF16 : MX_HEAD_FP32;
    mx_engine* e = NULL;
    char devname[600] = "CPU";
    if (on_gpu) {
        char info[512];
        if (mx_engine_gpu_info(info, sizeof info) != 1) {
            fprintf(stderr, "mxlm eval: --device cuda: no usable GPU: %s\n", info);
            rc = 1;
        } else if (mx_engine_create_eval(&e, 1, &ec, &cm.m)) {
            fprintf(stderr, "mxlm eval: GPU: %s\n", mx_last_error());
            rc = 1;
        }
        snprintf(devname, sizeof devname, "GPU %s", info);
    } else if (mx_engine_create_eval(&e, 0, &ec, &cm.m)) {
        fprintf(stderr, "mxlm eval: %s\n", mx_last_error());
        rc = 1;
    }
    if (rc) { mx_tok_free(tok); cli_model_free(&cm); return rc; }
    result res;
    memset(&res, 0, sizeof res);
    res.bytes = -1;
    char data[1400];
    if (npos) { /* text */
        mx_ids ids = {0};
        rc = read_stream((const char* const*)pos, npos, fmt, field, tok, &ids, &res);
        if (!rc && ids.n < 2) rc = mx_fail(MX_EINVAL, "eval: the inputs give %zu token(s): nothing to predict", ids.n);
        if (!rc) rc = eval_stream(e, ids.ids, (int64_t)ids.n, val_tokens > 0 ? val_tokens : 0, tok, &res);
        mx_ids_free(&ids);
        snprintf(data, sizeof data, "%d file(s), %lld document(s), %lld bytes of text", npos, (long long)res.docs,
                 (long long)res.text_bytes);
    } else { /* shards: the trainer's validation windows and evaluation */
        mx_loader l;
        memset(&l, 0, sizeof l);
        rc = mx_loader_open(&l, glob, T, cfg->vocab);
        if (!rc) {
            int64_t vt = val_tokens >= 0 ? val_tokens : cm.val_tokens >= 0 ? cm.val_tokens : 8192;
            rc = mx_val_windows(mx_loader_n_val_windows(&l), vt, T, B, glob, &res.windows);
        }
        float loss = 0.0f;
        if (!rc) rc = e->ops->evaluate(e, &l, res.windows, B, T, &loss);
        if (!rc) {
            res.loss = loss;
            res.tokens = res.windows * T;
            res.nats = (double)loss * (double)res.tokens;
            if (tok) { /* the bytes of the evaluated targets */
                int32_t* inp = malloc(sizeof(int32_t) * (size_t)T);
                int32_t* tgt = malloc(sizeof(int32_t) * (size_t)T);
                res.bytes = 0;
                for (int64_t w = 0; inp && tgt && w < res.windows && !rc; w++) {
                    rc = mx_loader_val_window(&l, w, inp, tgt);
                    for (int i = 0; i < T && !rc; i++) res.bytes += (int64_t)tok_bytes(tok, tgt[i]);
                }
                if (!inp || !tgt) res.bytes = -1;
                free(inp);
                free(tgt);
            }
        }
        if (l.shards) mx_loader_close(&l);
        snprintf(data, sizeof data, "%s: %lld windows of %d + 1 tokens%s", glob, (long long)res.windows, T,
                 !val && !seq && !batch && val_tokens < 0 && cm.from_run ? " (the run's validation set)" : "");
    }
    mx_engine_free(e);
    if (rc) {
        const int rel = !npos && !val && glob[0] != '/' && strstr(mx_last_error(), "no shard matches");
        fprintf(stderr, "mxlm eval: %s%s\n", mx_last_error(),
                rel ? " (the run's validation glob is relative to the directory mxlm train ran in: run eval there, or "
                      "give --val)" : "");
        mx_tok_free(tok);
        cli_model_free(&cm);
        return rc == MX_EUSAGE ? 2 : 1;
    }
    res.bpb = res.bytes > 0 ? res.nats / log(2.0) / (double)res.bytes : NAN;
    const double ppl = exp(res.loss);
    if (json) {
        print_num(stdout, "loss", res.loss);
        print_num(stdout, "perplexity", ppl);
        print_num(stdout, "bits_per_byte", res.bpb);
        printf(",\"tokens\":%lld,\"bytes\":", (long long)res.tokens);
        if (res.bytes >= 0) printf("%lld", (long long)res.bytes);
        else printf("null");
        printf(",\"windows\":%lld,\"seq\":%d,\"batch\":%d,\"source\":\"%s\"", (long long)res.windows, T, B,
               npos ? "text" : "shards");
        if (npos) printf(",\"documents\":%lld,\"text_bytes\":%lld", (long long)res.docs, (long long)res.text_bytes);
        printf(",\"model\":\"");
        cli_json_str(stdout, cm.source, strlen(cm.source));
        printf("\",\"step\":%lld,\"recipe\":\"", (long long)cm.meta.step);
        cli_json_str(stdout, cm.recipe, strlen(cm.recipe));
        printf("\",\"device\":\"%s\"}\n", on_gpu ? "cuda" : "cpu");
    } else {
        char d[512];
        mx_model_config_describe(cfg, d, sizeof d);
        printf("model: %s", cm.source);
        if (cm.from_run) printf(" (step %lld, %lld tokens trained)", (long long)cm.meta.step, (long long)cm.meta.tokens);
        printf(", recipe %s, %s\n       %s\n", cm.recipe, devname, d);
        printf("data: %s\n", data);
        if (tokwhat[0]) printf("tokenizer: %s\n", tokwhat);
        printf("loss %.6f nats/token, perplexity %.3f", res.loss, ppl);
        if (res.bytes > 0) printf(", %.4f bits/byte", res.bpb);
        printf(" (%lld tokens", (long long)res.tokens);
        if (res.bytes >= 0) printf(", %lld bytes", (long long)res.bytes);
        printf(")\n");
    }
    mx_tok_free(tok);
    cli_model_free(&cm);
    if (!isfinite(res.loss)) { /* the evaluation itself failed: said, and a non-zero exit (as train's divergence) */
        fprintf(stderr, "mxlm eval: the loss is not finite (NaN or Inf: the model's weights or its recipe's numerics "
                        "overflow); written as null in --json\n");
        return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
