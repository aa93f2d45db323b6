/* fuzz_util.h: helpers shared by the libFuzzer harnesses. */
#ifndef MXLM_FUZZ_UTIL_H
#define MXLM_FUZZ_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Write the input to this process's scratch file and return its path (the
 * file-based parsers read paths). */
static inline const char* fuzz_file(const uint8_t* data, size_t n, const char* suffix) {
    static char path[256];
    snprintf(path, sizeof path, "%s/mxlm-fuzz-%d%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(),
             suffix);
    FILE* f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
    return path;
}
#endif
