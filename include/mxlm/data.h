/*
 * data.h: the embedded corpus and the tiny tokenizer, shared with the trainer.
 *
 * The tiny tokenizer: byte-level BPE trained by `mxlm bpe` on the embedded
 * corpus (data/kjv.jsonl.gz), GPT-2 (r50k) pre-tokenization. Ids 0..255 are
 * the single bytes, 256..4094 the merges in training order, 4095 the
 * end-of-text token placed before every document... (see docs/data.md).
 * `make` writes build/data/tiny.tiktoken, build/data/tiny_train.bin and
 * build/data/tiny_val.bin (llm.c format, version 1).
 */
#ifndef MXLM_DATA_H
#define MXLM_DATA_H

#define MX_TINY_VOCAB 4096
#define MX_TINY_EOT 4095
#define MX_TINY_RANKS "build/data/tiny.tiktoken"
#define MX_TINY_TRAIN "build/data/tiny_train.bin"
#define MX_TINY_VAL "build/data/tiny_val.bin"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A line reader over a plain, gzip or zstd file (recognised by its magic bytes, not its name).
 * A truncated or corrupt compressed stream is an error naming the file. */
typedef struct mx_reader mx_reader;
int mx_reader_open(mx_reader** r, const char* path);
/* Next line (without its '\n'; valid until the next call). Returns 1, 0 at the end, or a negative mx_err. */
int mx_reader_line(mx_reader* r, const char** line, size_t* len);
int64_t mx_reader_line_no(const mx_reader* r);      /* lines returned so far */
uint64_t mx_reader_bytes_read(const mx_reader* r);  /* bytes read from the file so far */
const char* mx_reader_path(const mx_reader* r);
void mx_reader_close(mx_reader* r);

/* Strictly parse one JSON object and return its string field `key` decoded to UTF-8 (malloc'ed, NUL-terminated;
 * lone surrogate escapes become U+FFFD). Errors: malformed JSON (*err_col = 1-based column), no such string field
 * (*err_col = 0). */
int mx_json_get_string(const char* line, size_t len, const char* key, char** out, size_t* out_len, size_t* err_col);

#ifdef __cplusplus
}
#endif

#endif
