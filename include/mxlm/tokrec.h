/*
 * tokrec.h: the tokenizer record (src/data/tokrec.c): which tokenizer made a
 * token stream, so that `mxlm eval` and `mxlm sample` can encode text and
 * decode ids the way the training data was made. Text of "key = value" lines:
 *
 *   encoding = tiny                  a named encoding (mx_tok_open_encoding), or absent
 *   ranks = build/data/tiny.tiktoken the rank file (as given to prep; absolute in a run directory), or absent
 *   pattern = r50k                   pre-tokenization pattern
 *   vocab = 4096                     ids are < vocab (ranks + specials)
 *   crc32 = 5f7a3c21                 CRC-32 of the token table (each id's byte length, 4 bytes LE, then its bytes)
 *
 * Where it is kept: `mxlm prep` writes it into the header of every shard
 * (shard.h, MX_SHARD_TOK_TAG; llm.c readers ignore it); `mxlm train` copies
 * the first training shard's record into RUN/tokenizer.txt when a run is
 * created, with the rank file's path made absolute. Loading one checks that
 * the tokenizer found has the recorded vocabulary size and CRC.
 *
 * Library code: errors via mx_fail, nothing printed.
 */
#ifndef MXLM_TOKREC_H
#define MXLM_TOKREC_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/shard.h"
#include "mxlm/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char encoding[64];   /* "" when the tokenizer came from a rank file */
    char ranks[1024];    /* "" when it came from a named encoding */
    int pattern;         /* MX_PAT_* */
    uint32_t vocab;
    uint32_t crc;
} mx_tokrec;

/* The record of tokenizer t, opened by name (encoding) or from a rank file (ranks); one of them non-NULL. */
int mx_tokrec_make(mx_tokrec* r, const mx_tokenizer* t, const char* encoding, const char* ranks);
/* CRC-32 of t's token table (as recorded). */
uint32_t mx_tokrec_crc(const mx_tokenizer* t);
/* Text of the record (the lines above); returns the length (snprintf semantics). */
int mx_tokrec_format(const mx_tokrec* r, char* buf, size_t n);
/* Parse a record; origin names it in messages. */
int mx_tokrec_parse(const char* text, const char* origin, mx_tokrec* r);
/* Open the recorded tokenizer: the rank file when it exists, else the named encoding; refuses one whose
 * vocabulary size or CRC differs from the record's. */
int mx_tokrec_open(const mx_tokrec* r, mx_tokenizer** t);

/* The record in a shard's header: 1 found (into r), 0 none, < 0 malformed. */
int mx_tokrec_of_shard(const mx_shard* s, mx_tokrec* r);
/* DIR/tokenizer.txt: 1 read (into r), 0 none, < 0 unreadable or malformed. */
int mx_tokrec_read_run(const char* dir, mx_tokrec* r);
/* Record shard s's tokenizer in run directory DIR (tokenizer.txt, atomically): a relative rank file path is
 * made absolute (relative to the current directory, else to the shard's), "encoding = tiny" gets the
 * absolute path of its rank file too. Returns 1 written, 0 the shard has no (readable) record, < 0 a write
 * error. */
int mx_tokrec_record_run(const char* dir, const mx_shard* s);

/* A source of token ids or of a model, for mx_tokrec_agree: exactly one of glob (a shard glob: every
 * matching shard's header record), dir (a run or exported model directory: DIR/tokenizer.txt) or rec (a
 * tokenizer given on the command line). `what` names it in the message ("--val x_*.bin", "the run"). */
typedef struct {
    const char* what;
    const char* glob;
    const char* dir;
    const mx_tokrec* rec;
} mx_tok_source;

/* Every tokenizer the sources record is one and the same (vocabulary size and token table CRC): MX_OK, or
 * MX_EINVAL with a message naming the two sources and their two tokenizers. A source that records no
 * tokenizer (shards made before the record, a directory without tokenizer.txt; all three NULL) is not compared. */
int mx_tokrec_agree(const mx_tok_source* src, int n);
/* "encoding NAME" or "ranks FILE", with the vocabulary size and CRC, into buf. */
void mx_tokrec_describe(const mx_tokrec* r, char* buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
