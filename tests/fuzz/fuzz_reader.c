/* fuzz_reader.c: the input path of prep: plain / gzip / zstd detection by
 * magic bytes, decompression, line splitting and the JSON Lines documents
 * on top. Any file: lines or a clean error, never a crash; the documents
 * reader reports errors with a file:line message. */
#include <string.h>

#include "fuzz_util.h"
#include "mxlm/data.h"
#include "mxlm/mx.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    const char* path = fuzz_file(data, n, ".jsonl");
    mx_reader* r = NULL;
    if (mx_reader_open(&r, path) == 0) {
        const char* line;
        size_t len;
        int rc, lines = 0;
        while ((rc = mx_reader_line(r, &line, &len)) == 1) {
            if (memchr(line, '\n', len)) abort();
            lines++;
        }
        if (mx_reader_line_no(r) != lines) abort();
        mx_reader_close(r);
    }
    mx_docs* d = NULL;
    const char* paths[1] = {path};
    if (mx_docs_open(&d, paths, 1, MX_FMT_JSONL, "text") == 0) {
        const char *text, *file;
        size_t len;
        int64_t line;
        int rc;
        while ((rc = mx_docs_next(d, &text, &len, &file, &line)) == 1) {
            if (line < 1) abort();
        }
        if (rc < 0 && !strstr(mx_last_error(), "mxlm-fuzz")) abort();  /* the message names the file */
        mx_docs_close(d);
    }
    return 0;
}
