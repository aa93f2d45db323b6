/*
 * json.h: the one JSON reader (src/util/json.c), for every JSON the library
 * reads: the corpus's JSON Lines (a "text" field: mx_json_get_string, the
 * fuzzed hot path: no tree, no copy but the field's), Hugging Face's
 * config.json and safetensors headers, and the study's metrics.jsonl lines
 * (mx_json_parse: a tree). Strict RFC 8259 syntax, a nesting limit of 64; one
 * tokenizer underneath both. Errors through mx_fail (mx.h) or the err buffer.
 */
#ifndef MXLM_JSON_H
#define MXLM_JSON_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Strictly parse one JSON object and return its string field `key` decoded to UTF-8 (malloc'ed,
 * NUL-terminated; lone surrogate escapes become U+FFFD). Errors: malformed JSON (*err_col = 1-based
 * column), no such string field (*err_col = 0), out of memory. */
int mx_json_get_string(const char* line, size_t len, const char* key, char** out, size_t* out_len, size_t* err_col);

/* A parsed value. */
typedef enum { MX_JSON_NULL = 0, MX_JSON_BOOL, MX_JSON_NUM, MX_JSON_STR, MX_JSON_ARR, MX_JSON_OBJ } mx_json_type;
typedef struct mx_json {
    int t;                /* mx_json_type */
    int b;                /* MX_JSON_BOOL */
    double num;           /* MX_JSON_NUM (1e999 reads as inf) */
    int is_int;           /* MX_JSON_NUM written without fraction or exponent */
    char* s;              /* MX_JSON_STR: UTF-8, NUL-terminated (\u0000 and lone surrogates are refused) */
    int n, cap;           /* MX_JSON_ARR, MX_JSON_OBJ: items */
    struct mx_json* v;    /* [n] */
    char** k;             /* [n] keys (MX_JSON_OBJ), in file order (duplicates kept; mx_json_get finds the first) */
} mx_json;

/* The one JSON number writer (every JSON mxlm writes: metrics.jsonl, summary.json, eval --json, the study's
 * JSON, export's reference file): x with `sig` significant digits (%.*g) into b (n bytes; 32 is enough),
 * or null when x is NaN or infinite (JSON has neither). Returns b. */
const char* mx_json_number(char* b, size_t n, double x, int sig);

/* Parse text[0..n) as one JSON value into *out (free with mx_json_free); on failure returns -1,
 * *out is empty and err (en bytes) gets "WHAT at byte OFFSET". */
int mx_json_parse(const char* text, size_t n, mx_json* out, char* err, size_t en);
void mx_json_free(mx_json* x);
/* The member `key` of object o (NULL: o is not an object, or no such member). */
const mx_json* mx_json_get(const mx_json* o, const char* key);
/* The number of member `key` of o: NaN when absent, null or not a number; *present (when not NULL)
 * says whether the member exists. */
double mx_json_num(const mx_json* o, const char* key, int* present);
/* The string of member `key` of o, or NULL. */
const char* mx_json_str(const mx_json* o, const char* key);

#ifdef __cplusplus
}
#endif
#endif
