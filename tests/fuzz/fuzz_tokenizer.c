/* fuzz_tokenizer.c: encode arbitrary bytes with each pre-tokenization
 * pattern over the tiny byte-level rank file (every byte is a token), then
 * decode: the result must equal the input with invalid UTF-8 replaced by
 * U+FFFD (mx_utf8_sanitize), and every id must be below the vocabulary. */
#include <stdlib.h>
#include <string.h>

#include "mxlm/data.h"
#include "mxlm/tokenizer.h"

static mx_tokenizer* g_tok[4];

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    if (n < 1) return 0;
    int pat = data[0] & 3;
    if (!g_tok[pat] && mx_tok_open(&g_tok[pat], MX_TINY_RANKS, pat) != 0) abort();  /* run from the repo root after make */
    const char* text = (const char*)data + 1;
    size_t len = n - 1;
    mx_ids ids = {0};
    if (mx_tok_encode(g_tok[pat], text, len, &ids) != 0) abort();
    uint32_t vocab = mx_tok_vocab_size(g_tok[pat]);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] >= vocab) abort();
    char *dec = NULL, *clean = NULL;
    size_t dlen = 0, clen = 0;
    if (mx_tok_decode(g_tok[pat], ids.ids, ids.n, &dec, &dlen) != 0) abort();
    if (mx_utf8_sanitize(text, len, &clean, &clen) != 0) abort();
    if (dlen != clen || memcmp(dec, clean, dlen) != 0) abort();
    free(dec);
    free(clean);
    mx_ids_free(&ids);
    return 0;
}
