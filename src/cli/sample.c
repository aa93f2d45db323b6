/* sample.c: ./mxlm sample - text from a run's checkpoint or a Hugging Face
 * directory, with a key/value cache on the CPU (src/nn/decode.c) or, with
 * --device cuda, on the GPU (src/cuda/nn/decode.cu): the prompt (after the
 * document token) in one forward, then one token at a time. The same seed
 * gives the same text on a device (Philox draws, decode.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/using.h"
#include "mxlm/engine.h"
#include "mxlm/mx.h"

static const char* k_usage =
    "--run DIR [--ckpt FILE] | --hf DIR  [--prompt TEXT] [--tokens N] [--temperature X] [--top-k K] [--top-p P]\n"
    "           [--seed S] [options]\n"
    "  Continue the prompt (after the document token the training data puts before every document) with N\n"
    "  sampled tokens, and print the prompt and the continuation on stdout (a summary line on stderr). With a\n"
    "  key/value cache on the CPU, or on the GPU with --device cuda (CUDA build). The same seed gives the same\n"
    "  text (on one device: the GPU's logits differ from the CPU's in their last bits); --temperature 0 is\n"
    "  greedy. Generation stops\n"
    "  at the document token (the end of a document) unless --ignore-eot. The tokenizer is the run's\n"
    "  (RUN/tokenizer.txt), or --encoding / --ranks --pattern. Exit status: 0, 1 run-time failure, 2 usage error.";

int cmd_sample(int argc, char** argv) {
    const char *run = NULL, *ckpt = NULL, *hf = NULL, *recipe = NULL, *prompt = "";
    const char *encoding = NULL, *ranks = NULL, *pattern = NULL, *device = "cpu", *gemm = "fast";
    int tokens = 64, top_k = 0, ignore_eot = 0, json = 0;
    double temperature = 1.0, top_p = 1.0;
    uint64_t seed = 1;
    const cli_opt opts[] = {
        {"run", OPT_PATH, &run, "run directory of mxlm train (its latest checkpoint and tokenizer.txt)"},
        {"ckpt", OPT_PATH, &ckpt, "a checkpoint file (of --run, or alone: its folder is the run directory)"},
        {"hf", OPT_PATH, &hf, "a Hugging Face Llama directory instead of a run (needs --encoding or --ranks)"},
        {"prompt", OPT_STR, &prompt, "text to continue (default: none, a new document)"},
        {"tokens", OPT_INT, &tokens, "tokens to generate (default 64; prompt + tokens <= the model's context)"},
        {"temperature", OPT_DOUBLE, &temperature, "softmax temperature (default 1; 0 = greedy)"},
        {"top-k", OPT_INT, &top_k, "sample among the K most likely tokens (default 0 = all)"},
        {"top-p", OPT_DOUBLE, &top_p, "sample among the most likely tokens holding probability P (default 1 = all)"},
        {"seed", OPT_U64, &seed, "sampling seed (default 1): the same seed gives the same text"},
        {"ignore-eot", OPT_FLAG, &ignore_eot, "keep generating after the document token"},
        {"recipe", OPT_STR, &recipe, "precision recipe of the forward (default the run's; fp32 for --hf)"},
        {"encoding", OPT_STR, &encoding, "tokenizer: a named encoding (default the run's)"},
        {"ranks", OPT_PATH, &ranks, "tokenizer: a tiktoken rank file (with --pattern)"},
        {"pattern", OPT_STR, &pattern, "pre-tokenization pattern of --ranks: r50k, cl100k, o200k, llama3"},
        {"json", OPT_FLAG, &json, "print one JSON line (prompt ids, generated ids, text) instead of the text"},
        {"device", OPT_STR, &device, "cpu (default) or cuda (CUDA build: the forward and the cache on the GPU)"},
        {"gemm", OPT_STR, &gemm, "with --device cuda: MXFP4 GEMMs fast (E4M3 fold, default) or exact"},
    };
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    int rc = cli_parse(argc, argv, "sample", k_usage, opts, nopts, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (tokens < 1 || tokens > 1 << 20) { fprintf(stderr, "mxlm sample: --tokens %d: 1..1048576\n", tokens); return 2; }
    if (!isfinite(temperature) || temperature < 0) {
        fprintf(stderr, "mxlm sample: --temperature %g: a finite number >= 0\n", temperature);
        return 2;
    }
    if (top_k < 0) { fprintf(stderr, "mxlm sample: --top-k %d: must be >= 0\n", top_k); return 2; }
    if (!(top_p > 0 && top_p <= 1)) { fprintf(stderr, "mxlm sample: --top-p %g: in (0, 1]\n", top_p); return 2; }
    const int on_gpu = !strcmp(device, "cuda") || !strcmp(device, "gpu");
    if (!on_gpu && strcmp(device, "cpu")) { fprintf(stderr, "mxlm sample: --device: cpu or cuda, not '%s'\n", device); return 2; }
    if (strcmp(gemm, "fast") && strcmp(gemm, "exact")) {
        fprintf(stderr, "mxlm sample: --gemm: fast or exact, not '%s'\n", gemm);
        return 2;
    }
    if (on_gpu && !mx_engine_gpu_built()) {
        fprintf(stderr, "mxlm sample: --device cuda: this mxlm was built without CUDA (make cuda)\n");
        return 2;
    }
    if ((rc = cli_tokenizer_check("sample", encoding, ranks, pattern))) return rc;
    if (!run && !ckpt && !hf) { fprintf(stderr, "mxlm sample: give --run DIR, --ckpt FILE or --hf DIR\n"); return 2; }
    if (hf && (run || ckpt)) { fprintf(stderr, "mxlm sample: give --hf DIR or a run (--run/--ckpt), not both\n"); return 2; }

    cli_model cm;
    if ((rc = cli_model_open(&cm, "sample", run, ckpt, hf, recipe))) return rc;
    mx_tokenizer* tok = NULL;
    char tokwhat[1400];
    const char* mdir = cm.from_run ? cm.run : cm.source; /* the model's directory: its tokenizer.txt */
    if ((rc = cli_tokenizer_open("sample", encoding, ranks, pattern, mdir, cm.val, &tok, tokwhat, sizeof tokwhat))) {
        cli_model_free(&cm);
        return rc;
    }
    if (!rc && (rc = cli_tokenizers_agree("sample", &cm, NULL, encoding, ranks, tok))) {
        mx_tok_free(tok);
        cli_model_free(&cm);
        return rc;
    }
    if (!tok) {
        fprintf(stderr, "mxlm sample: no tokenizer: %s records none; give --encoding NAME or --ranks FILE --pattern P\n",
                cm.from_run ? cm.run : cm.source);
        cli_model_free(&cm);
        return 2;
    }
    const int V = cm.m.cfg.vocab, ctx = cm.m.cfg.seq_len;
    mx_ids pids = {0};
    rc = mx_ids_push(&pids, mx_tok_doc_token(tok));
    if (!rc) rc = mx_tok_encode(tok, prompt, strlen(prompt), &pids);
    for (size_t i = 0; !rc && i < pids.n; i++)
        if (pids.ids[i] >= (uint32_t)V)
            rc = mx_fail(MX_EINVAL, "the tokenizer gives id %u, outside the model's vocabulary of %d", pids.ids[i], V);
    if (rc) {
        fprintf(stderr, "mxlm sample: %s\n", mx_last_error());
        mx_ids_free(&pids); mx_tok_free(tok); cli_model_free(&cm);
        return 1;
    }
    if ((int64_t)pids.n + tokens > ctx) {
        fprintf(stderr, "mxlm sample: the prompt (%zu tokens with the document token) + --tokens %d exceed the "
                        "model's context of %d\n", pids.n, tokens, ctx);
        mx_ids_free(&pids); mx_tok_free(tok); cli_model_free(&cm);
        return 2;
    }
    int32_t* pr = malloc(sizeof(int32_t) * pids.n);
    int32_t* out = malloc(sizeof(int32_t) * (size_t)tokens);
    uint32_t* ids = malloc(sizeof(uint32_t) * (size_t)tokens);
    int got = 0;
    const int32_t eot = (int32_t)mx_tok_doc_token(tok);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!pr || !out || !ids) rc = mx_fail(MX_ENOMEM, "out of memory");
    else {
        for (size_t i = 0; i < pids.n; i++) pr[i] = (int32_t)pids.ids[i];
        mx_sample_opts o = {temperature, top_k, top_p, seed};
        rc = mx_engine_generate(on_gpu, &cm.m, pr, (int)pids.n, tokens, &o, ignore_eot ? -1 : eot, out, &got,
                                !strcmp(gemm, "exact"));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char* text = NULL;
    size_t tl = 0;
    int ended = !rc && !ignore_eot && got > 0 && out[got - 1] == eot;
    const int shown = ended ? got - 1 : got;
    for (int i = 0; !rc && i < got; i++) ids[i] = (uint32_t)out[i];
    if (!rc) rc = mx_tok_decode(tok, ids, (size_t)shown, &text, &tl);
    if (rc) {
        fprintf(stderr, "mxlm sample: %s\n", mx_last_error());
    } else {
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        fprintf(stderr, "sample: %s (step %lld), recipe %s, %s with a KV cache; %zu prompt + %d generated tokens%s in "
                        "%.2f s (%.0f tok/s); seed %llu, temperature %g, top-k %d, top-p %g\n",
                cm.source, (long long)cm.meta.step, cm.recipe, on_gpu ? "GPU" : "CPU", pids.n, got,
                ended ? " (ended at the document token)" : "",
                s, s > 0 ? got / s : 0.0, (unsigned long long)seed, temperature, top_k, top_p);
        if (json) {
            printf("{\"prompt_ids\":[");
            for (size_t i = 0; i < pids.n; i++) printf(i ? ",%u" : "%u", pids.ids[i]);
            printf("],\"ids\":[");
            for (int i = 0; i < got; i++) printf(i ? ",%d" : "%d", out[i]);
            printf("],\"ended\":%s,\"text\":\"", ended ? "true" : "false");
            cli_json_str(stdout, text, tl);
            printf("\"}\n");
        } else {
            fputs(prompt, stdout);
            fwrite(text, 1, tl, stdout);
            printf("\n");
        }
    }
    free(text);
    free(pr);
    free(out);
    free(ids);
    mx_ids_free(&pids);
    mx_tok_free(tok);
    cli_model_free(&cm);
    if (rc) return 1;
    return fflush(stdout) == 0 ? 0 : 1;
}
