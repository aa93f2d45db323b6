/*
 * shard.h: token shards in llm.c's .bin format.
 *   header: 256 x int32 little-endian: [0] magic 20240520, [1] version, [2] token count
 *   version 1: uint16 tokens; version 2 (mxlm): uint32 tokens (vocabularies over 65536)
 */
#ifndef MXLM_SHARD_H
#define MXLM_SHARD_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MX_SHARD_MAGIC 20240520
#define MX_SHARD_HEADER_INTS 256
/* mxlm's tokenizer record in the header (ints 3..255, which llm.c's readers ignore): int [3] is this tag
 * ("MXTK"), int [4] the record's length L (<= MX_SHARD_TOK_MAX), bytes 20 .. 20+L the record text
 * (include/mxlm/tokrec.h); the rest stays zero. A shard without one has int [3] = 0. */
#define MX_SHARD_TOK_TAG 0x4b54584d
#define MX_SHARD_TOK_MAX (MX_SHARD_HEADER_INTS * 4 - 20)

typedef struct {
    char path[1024];
    int version;          /* 1: uint16 tokens, 2: uint32 tokens */
    int64_t n_tokens;
    const uint8_t* tokens; /* mapped token data (after the header) */
    void* map;            /* whole-file mapping */
    size_t map_len;
} mx_shard;

/* Open and validate (magic, version, token count against the file size).
 * Returns 0, or a negative mx_err with a message naming the file. */
int mx_shard_open(mx_shard* s, const char* path);
void mx_shard_close(mx_shard* s);
static inline uint32_t mx_shard_token(const mx_shard* s, int64_t i) {
    if (s->version == 1) return (uint32_t)s->tokens[2 * i] | ((uint32_t)s->tokens[2 * i + 1] << 8);
    const uint8_t* p = s->tokens + 4 * i;
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
/* Write n tokens atomically (temporary file, fsync, rename); version 1 needs
 * every token < 65536. */
int mx_shard_write(const char* path, const uint32_t* tokens, int64_t n, int version);
/* The same with a tokenizer record in the header (NULL or "": none; longer than MX_SHARD_TOK_MAX: refused). */
int mx_shard_write_tok(const char* path, const uint32_t* tokens, int64_t n, int version, const char* tok_record);
/* The tokenizer record of an open shard into buf (NUL-terminated): its length, 0 if the shard has none. */
int mx_shard_tok_record(const mx_shard* s, char* buf, size_t n);
/* Largest token id in the shard (0 for an empty shard). */
int mx_shard_max_token(const mx_shard* s, uint32_t* max_out);
/* Refuse a shard holding a token id >= vocab (message names file, index, byte offset). */
int mx_shard_check_vocab(const mx_shard* s, uint32_t vocab);

#ifdef __cplusplus
}
#endif
#endif
