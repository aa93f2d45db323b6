/* using.h: what `mxlm eval`, `mxlm sample` and `mxlm train --sample-every` share (src/cli/using.c): a
 * model from a run's checkpoint or a Hugging Face directory, and the tokenizer that goes with it. */
#ifndef MXLM_CLI_USING_H
#define MXLM_CLI_USING_H
#include <stdint.h>
#include <stdio.h>

#include "mxlm/decode.h"
#include "mxlm/tokenizer.h"
#include "mxlm/trainer.h"

typedef struct {
    mx_llama m;            /* the weights, with the recipe they are run with */
    int from_run;          /* 1: a run's checkpoint, 0: a Hugging Face directory */
    char source[4200];     /* the checkpoint file or the HF directory */
    char run[4200];        /* the run directory ("" for --hf) */
    mx_ckpt_meta meta;     /* the checkpoint's step, tokens, ... (zero for --hf) */
    char recipe[256];      /* the recipe the model runs with */
    char run_recipe[256];  /* the run's training recipe ("" for --hf) */
    int bf16_first, bf16_last, head_bf16;
    int batch, seq, accum, gpus; /* the run's batch geometry (0: unknown) */
    uint64_t seed;
    char val[1024];        /* the run's validation glob (config.txt; "" unknown) */
    int64_t val_tokens;    /* the run's --val-tokens (config.txt; -1 unknown) */
    char gemm[16], attn[16]; /* the run's --gemm and --attn (config.txt; "" unknown): the GPU evaluation's */
} cli_model;

/* Load the model: --hf DIR, or a run (--run DIR: its latest checkpoint; --ckpt FILE: that one, the run
 * directory being --run or the file's folder). recipe: NULL for the run's own (fp32 for --hf). Returns 0, or
 * the exit status (2 usage, 1 run-time) after printing "mxlm CMD: ..." on stderr. */
int cli_model_open(cli_model* cm, const char* cmd, const char* run, const char* ckpt, const char* hf,
                   const char* recipe);
void cli_model_free(cli_model* cm);

/* "key = value" text (config.txt, a checkpoint fingerprint): the value of key into out (n bytes; 1 if found),
 * and the model shape (name "custom"; -1 with *missing the first model key not found). */
int cli_kv_get(const char* text, const char* key, char* out, size_t n);
int cli_model_from_kv(const char* text, mx_model_config* c, const char** missing);

/* The tokenizer: --encoding NAME or --ranks FILE --pattern P when given, else RUN/tokenizer.txt, else the
 * record in the header of the first shard matching `glob` (NULL: none). *t NULL and 0 returned when none
 * is known; `what` (n bytes) says where it came from. Returns the exit status on an error (printed). */
int cli_tokenizer_open(const char* cmd, const char* encoding, const char* ranks, const char* pattern,
                       const char* run, const char* glob, mx_tokenizer** t, char* what, size_t n);
/* The model's tokenizer (its directory's tokenizer.txt), that of the shards of `glob` (NULL: none) and the one
 * given (tok from --encoding or --ranks, else NULL) must be one: 0, or 2 and a message naming both. */
int cli_tokenizers_agree(const char* cmd, const cli_model* cm, const char* glob, const char* encoding,
                         const char* ranks, const mx_tokenizer* tok);
/* Usage check of --encoding/--ranks/--pattern without loading anything (2 and a message when wrong). */
int cli_tokenizer_check(const char* cmd, const char* encoding, const char* ranks, const char* pattern);

/* `mxlm train --sample-every N`: a short sample (48 tokens, temperature 1, the run's seed) from the event's
 * model after the document token, decoded with RUN/tokenizer.txt (ids when there is none), printed. */
void cli_train_sample(const mx_train_event* e, const char* run, uint64_t seed);

/* JSON string body of s[0..n) (quotes, backslashes, control bytes escaped; bytes >= 0x80 as they are). */
void cli_json_str(FILE* f, const char* s, size_t n);
#endif
