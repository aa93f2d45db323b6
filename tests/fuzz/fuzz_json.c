/* fuzz_json.c: the strict JSON-object field extractor (mx_json_get_string).
 * Any bytes: no crash; on success the output is NUL-terminated at out_len;
 * on failure a 1-based column within the line (or 0: field missing). */
#include <stdlib.h>
#include <string.h>

#include "mxlm/data.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    char* out = NULL;
    size_t out_len = 0, col = 0;
    int rc = mx_json_get_string((const char*)data, n, "text", &out, &out_len, &col);
    if (rc == 0) {
        if (!out || out[out_len] != 0) abort();
        free(out);
    } else if (col > n + 1) {
        abort();
    }
    return 0;
}
