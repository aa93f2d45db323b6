/* fuzz_shard.c: the llm.c shard header parser. Any file: refused with a
 * message naming it, or opened with a token count that fits the file. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "mxlm/mx.h"
#include "mxlm/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    const char* path = fuzz_file(data, n, ".bin");
    mx_shard s;
    if (mx_shard_open(&s, path) == 0) {
        size_t need = 1024 + (size_t)s.n_tokens * (s.version == 1 ? 2 : 4);
        if (s.n_tokens < 0 || need != n) abort();
        uint32_t mx = 0;
        mx_shard_max_token(&s, &mx);
        for (int64_t i = 0; i < s.n_tokens; i++)
            if (mx_shard_token(&s, i) > mx) abort();
        mx_shard_close(&s);
    } else if (!strstr(mx_last_error(), "mxlm-fuzz")) {
        abort();
    }
    return 0;
}
