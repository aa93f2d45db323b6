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
#include "mxlm/json.h"

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
/* The rest of the (decompressed) file; *out malloc'ed, NUL-terminated. */
int mx_reader_read_all(mx_reader* r, char** out, size_t* len);
void mx_reader_close(mx_reader* r);

/* mx_json_get_string (the "text" field of a JSON line): json.h, the one JSON reader. */

/* ---- documents: JSON Lines ("text" field) or whole plain-text files, over several inputs ---- */
typedef enum { MX_FMT_AUTO = 0, MX_FMT_JSONL = 1, MX_FMT_TEXT = 2 } mx_doc_format;
typedef struct mx_docs mx_docs;
/* MX_FMT_AUTO: JSON Lines when the name contains ".json" (".json", ".jsonl", ".json.gz", ".jsonl.zst"),
 * else one document per file. */
int mx_docs_open(mx_docs** d, const char* const* paths, int n_paths, int format, const char* field);
/* Next document: 1 (text valid until the next call; *file, *line say where it came from), 0 at the end,
 * or a negative mx_err: malformed JSON or a truncated stream, message "file:line: ...". Invalid UTF-8 is
 * not checked here. */
int mx_docs_next(mx_docs* d, const char** text, size_t* len, const char** file, int64_t* line);
uint64_t mx_docs_bytes_read(const mx_docs* d);   /* compressed bytes read so far (all inputs) */
void mx_docs_close(mx_docs* d);
/* An output pattern of prep: a plain name or one %d / %0Nd / %Nd ("%%": a '%'); anything else (%s, %n, two
 * conversions) is refused (mx_fail). *conv_at: the index of the %d (-1: none); width, zero: its width/flag. */
int mx_prep_pattern_check(const char* p, int* conv_at, int* width, int* zero);
/* Count the documents (a full pass). */
int mx_docs_count(const char* const* paths, int n_paths, int format, const char* field, int64_t* n_docs);

/* ---- prep: documents -> token shards ---- */
struct mx_tokenizer;
/* prep's least tokens per shard (the CLI refuses fewer, exit 2; 2^16: many windows of any context, and a few
 * files per million tokens, not one per token). --threads is the CLI's shared option (cli.h). */
#define MX_PREP_SHARD_MIN 65536
typedef struct {
    const char* const* inputs; int n_inputs;
    int format; const char* field;           /* field: JSON key, default "text" */
    const struct mx_tokenizer* tok;
    const char* train_pattern;               /* printf pattern with one %d (shard index), or a plain name */
    const char* val_pattern;                 /* needed when there is a validation split */
    int64_t shard_tokens;                    /* tokens per shard (default 100M); the last one is shorter */
    int64_t val_docs;                        /* the last val_docs documents go to validation */
    double val_fraction;                     /* or this fraction of the documents (rounded up) */
    int skip_bad;                            /* skip documents with invalid UTF-8 (counted) instead of failing */
    int threads;                             /* 0: all cores */
    void (*progress)(void* ctx, uint64_t bytes_in, uint64_t bytes_total, int64_t docs, int64_t tokens);
    void* progress_ctx;
    const char* tok_record;                  /* written into every shard's header (tokrec.h; NULL: none) */
    int replace;                             /* an output that already holds a shard set: replace all of it */
} mx_prep_opts;
typedef struct {
    int64_t docs, train_docs, val_docs, skipped, train_tokens, val_tokens;
    int train_shards, val_shards;
    uint64_t text_bytes;
} mx_prep_stats;
/* All shards are written as hidden "DIR/.<name>.part" files (no shard glob takes them) and renamed to
 * their names only when every document has been read and encoded; on any error they are removed. The
 * outputs are locked while a run writes them (DIR/.<pattern>.lock). An output pattern that already has
 * shards (any index) is refused unless o->replace; then the old set's shards this run did not write
 * again are removed after the new ones are in place, so a glob never mixes the two. */
int mx_prep_run(const mx_prep_opts* o, mx_prep_stats* st);

/* ---- the tiny tokenizer's BPE trainer ---- */
/* Train a byte-level BPE on documents [0, n_docs) of the inputs (r50k pre-tokenization):
 * ranks 0..255 are the bytes, then one rank per merge in order, up to vocab-1 ranks in all (the
 * last id is left for <|endoftext|>). Ties in pair counts go to the smaller (left id, right id).
 * Deterministic. Writes a tiktoken rank file atomically. */
int mx_bpe_train(const char* const* inputs, int n_inputs, int64_t n_docs, int vocab, const char* out_path);

#ifdef __cplusplus
}
#endif

#endif
