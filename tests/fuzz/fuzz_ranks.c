/* fuzz_ranks.c: the tiktoken rank-file loader. Any file: a tokenizer or an
 * error with a message naming the file; a loaded tokenizer encodes and
 * decodes a fixed text without crashing. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mxlm/mx.h"
#include "mxlm/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    if (n < 1) return 0;
    const char* path = fuzz_file(data + 1, n - 1, ".tiktoken");
    mx_tokenizer* t = NULL;
    if (mx_tok_open(&t, path, data[0] & 3) == 0) {
        mx_ids ids = {0};
        const char* s = "Hello, world! 123 \xc3\xa9t\xc3\xa9";
        if (mx_tok_encode(t, s, strlen(s), &ids) == 0) {
            char* out = NULL;
            size_t len;
            if (mx_tok_decode(t, ids.ids, ids.n, &out, &len) == 0) free(out);
        }
        mx_ids_free(&ids);
        mx_tok_free(t);
    } else if (!strstr(mx_last_error(), "mxlm-fuzz")) {
        abort();
    }
    return 0;
}
