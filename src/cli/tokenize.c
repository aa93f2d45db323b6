/* tokenize.c: ./mxlm tokenize: UTF-8 on stdin -> token ids (or --decode: ids -> bytes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "mxlm/data.h"
#include "mxlm/mx.h"
#include "mxlm/tokenizer.h"

static const char* k_usage =
    "[--encoding NAME | --ranks FILE --pattern r50k|cl100k|o200k|llama3] [--decode] [--count]\n"
    "  Encode UTF-8 text from stdin and print the token ids separated by spaces (no special\n"
    "  tokens are added; special-token text is encoded as ordinary text). Invalid UTF-8 is\n"
    "  replaced by U+FFFD per maximal invalid subpart, as the JavaScript references do.\n"
    "  --decode reads ids (whitespace-separated) and writes the bytes they stand for.\n"
    "  --encoding: r50k_base, cl100k_base, o200k_base, llama3 (rank files from\n"
    "  tools/fetch_tokenizers.sh in data/tokenizers or $MXLM_TOKENIZERS) or tiny (built by make).";

static char* read_all(FILE* f, size_t* n) {
    size_t cap = 1 << 16, len = 0;
    char* b = malloc(cap + 1);
    if (!b) return NULL;
    for (;;) {
        if (len == cap) {
            cap *= 2;
            char* x = realloc(b, cap + 1);
            if (!x) { free(b); return NULL; }
            b = x;
        }
        size_t r = fread(b + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    if (ferror(f)) { free(b); return NULL; }
    b[len] = 0;
    *n = len;
    return b;
}

int cmd_tokenize(int argc, char** argv) {
    const char* ranks = NULL; const char* pattern = NULL; const char* encoding = NULL;
    const char* jsonl = NULL;
    int decode = 0, count = 0, timing = 0;
    cli_opt opts[] = {
        {"encoding", OPT_STR, &encoding, "named encoding (r50k_base cl100k_base o200k_base llama3 tiny)"},
        {"ranks", OPT_PATH, &ranks, "tiktoken rank file (base64 token, rank per line)"},
        {"pattern", OPT_STR, &pattern, "pre-tokenization pattern: r50k | cl100k | o200k | llama3"},
        {"decode", OPT_FLAG, &decode, "ids on stdin -> bytes on stdout"},
        {"count", OPT_FLAG, &count, "print only the number of tokens"},
        {"time", OPT_FLAG, &timing, "report the encode time and MB/s on stderr (one thread; loading excluded)"},
        {"jsonl", OPT_PATH, &jsonl, "encode each \"text\" of this JSON Lines file (plain/.gz/.zst): one line of ids each"},
    };
    int rc = cli_parse(argc, argv, "tokenize", k_usage, opts, sizeof opts / sizeof opts[0], NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    mx_tokenizer* t = NULL;
    if (ranks) {
        int pat = mx_tok_pattern_parse(pattern);
        if (pat < 0) {
            fprintf(stderr, "mxlm tokenize: --pattern must be r50k, cl100k, o200k or llama3 (got '%s')\n",
                    pattern ? pattern : "");
            return 2;
        }
        rc = mx_tok_open(&t, ranks, pat);
    } else if (encoding) {
        rc = mx_tok_open_encoding(&t, encoding);
    } else {
        fprintf(stderr, "mxlm tokenize: give --encoding NAME or --ranks FILE --pattern P\n");
        return 2;
    }
    if (rc) { fprintf(stderr, "mxlm tokenize: %s\n", mx_last_error()); return 1; }
    if (jsonl) {
        mx_reader* r = NULL;
        int ret = 0;
        if (mx_reader_open(&r, jsonl)) { fprintf(stderr, "mxlm tokenize: %s\n", mx_last_error()); mx_tok_free(t); return 1; }
        mx_ids ids = {0};
        const char* line; size_t ll;
        int k;
        while ((k = mx_reader_line(r, &line, &ll)) == 1) {
            if (ll == 0) continue;
            char* txt; size_t tl, col;
            if (mx_json_get_string(line, ll, "text", &txt, &tl, &col)) {
                fprintf(stderr, "mxlm tokenize: %s:%lld: %s\n", jsonl, (long long)mx_reader_line_no(r), mx_last_error());
                ret = 1; break;
            }
            ids.n = 0;
            int e = mx_tok_encode(t, txt, tl, &ids);
            free(txt);
            if (e) { fprintf(stderr, "mxlm tokenize: %s\n", mx_last_error()); ret = 1; break; }
            for (size_t i = 0; i < ids.n; i++) printf(i ? " %u" : "%u", ids.ids[i]);
            printf("\n");
        }
        if (k < 0) { fprintf(stderr, "mxlm tokenize: %s\n", mx_last_error()); ret = 1; }
        mx_ids_free(&ids);
        mx_reader_close(r);
        mx_tok_free(t);
        if (fflush(stdout) != 0) ret = 1;
        return ret;
    }
    size_t n = 0;
    char* in = read_all(stdin, &n);
    if (!in) { fprintf(stderr, "mxlm tokenize: cannot read stdin\n"); mx_tok_free(t); return 1; }
    int ret = 0;
    if (!decode) {
        mx_ids ids = {0};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int erc = mx_tok_encode(t, in, n, &ids);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (timing && !erc) {
            double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            fprintf(stderr, "{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": %.2f}\n", n, ids.n, s,
                    (double)n / 1e6 / s);
        }
        if (erc) { fprintf(stderr, "mxlm tokenize: %s\n", mx_last_error()); ret = 1; }
        else if (count) printf("%zu\n", ids.n);
        else {
            for (size_t i = 0; i < ids.n; i++) printf(i ? " %u" : "%u", ids.ids[i]);
            printf("\n");
        }
        mx_ids_free(&ids);
    } else {
        mx_ids ids = {0};
        char* p = in;
        while (*p) {
            while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',') p++;
            if (!*p) break;
            char* e;
            unsigned long v = strtoul(p, &e, 10);
            if (e == p || v > 0xffffffffUL || (*e && !strchr(" \n\t\r,", *e))) {
                fprintf(stderr, "mxlm tokenize: stdin byte %zu: not a token id\n", (size_t)(p - in));
                ret = 2; break;
            }
            if (mx_ids_push(&ids, (uint32_t)v)) { ret = 1; break; }
            p = e;
        }
        char* outb = NULL; size_t ol = 0;
        if (!ret && mx_tok_decode(t, ids.ids, ids.n, &outb, &ol)) {
            fprintf(stderr, "mxlm tokenize: %s\n", mx_last_error()); ret = 1;
        }
        if (!ret && fwrite(outb, 1, ol, stdout) != ol) ret = 1;
        free(outb);
        mx_ids_free(&ids);
    }
    if (fflush(stdout) != 0) { fprintf(stderr, "mxlm tokenize: write error\n"); ret = 1; }
    free(in);
    mx_tok_free(t);
    return ret;
}
