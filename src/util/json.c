/* json.c: the one JSON reader (json.h). One tokenizer (whitespace, strings
 * with escapes and surrogate pairs, numbers, literals, skipping a value) under
 * two readers: mx_json_get_string, the corpus's field extractor (a scan
 * without a tree: the fuzzed hot path, tests/fuzz/fuzz_json.c), and
 * mx_json_parse, a tree for Hugging Face's config.json and safetensors headers
 * and the study's metrics lines. */
#include "mxlm/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/mx.h"

/* ---- the tokenizer ------------------------------------------------------------------ */

#define MAX_DEPTH 64

typedef struct { const char* s; size_t n, i; const char* err; } jp;

static void ws(jp* p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\r' || p->s[p->i] == '\n')) p->i++;
}
static int hex4(jp* p, uint32_t* v) {
    if (p->i + 4 > p->n) return -1;
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i + k];
        x <<= 4;
        if (c >= '0' && c <= '9') x |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') x |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') x |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    p->i += 4;
    *v = x;
    return 0;
}
static size_t put_utf8(char* o, uint32_t c) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 63)); o[2] = (char)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 63));
    o[2] = (char)(0x80 | ((c >> 6) & 63)); o[3] = (char)(0x80 | (c & 63));
    return 4;
}
/* Parse a string at p->i (on the opening quote). If out != NULL, write the decoded bytes
 * (at most the raw length) and set *olen. Lone surrogates become U+FFFD, or with `strict` are
 * refused, as is \u0000 (the tree's strings are NUL-terminated). */
static int jstring(jp* p, char* out, size_t* olen, int strict) {
    if (p->i >= p->n || p->s[p->i] != '"') { p->err = "expected a string"; return -1; }
    p->i++;
    size_t o = 0;
    for (;;) {
        if (p->i >= p->n) { p->err = "unterminated string"; return -1; }
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') { p->i++; break; }
        if (c < 0x20) { p->err = "control character in a string"; return -1; }
        if (c != '\\') {
            size_t j = p->i + 1;
            while (j < p->n && p->s[j] != '"' && p->s[j] != '\\' && (unsigned char)p->s[j] >= 0x20) j++;
            if (out) memcpy(out + o, p->s + p->i, j - p->i);
            o += j - p->i; p->i = j;
            continue;
        }
        p->i++;
        if (p->i >= p->n) { p->err = "unterminated string"; return -1; }
        char e = p->s[p->i++];
        char ch;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            uint32_t u;
            if (hex4(p, &u)) { p->err = "bad \\u escape"; return -1; }
            if (u >= 0xD800 && u <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                size_t save = p->i;
                p->i += 2;
                uint32_t lo;
                if (!hex4(p, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                else if (strict) { p->err = "bad surrogate pair"; return -1; }
                else { p->i = save; u = 0xFFFD; }
            } else if (u >= 0xD800 && u <= 0xDFFF) {
                if (strict) { p->err = "lone surrogate"; return -1; }
                u = 0xFFFD;
            } else if (u == 0 && strict) { p->err = "NUL in a string"; return -1; }
            char tmp[4];
            size_t k = put_utf8(tmp, u);
            if (out) memcpy(out + o, tmp, k);
            o += k;
            continue;
        }
        default: p->err = "bad escape in a string"; return -1;
        }
        if (out) out[o] = ch;
        o++;
    }
    if (olen) *olen = o;
    return 0;
}
/* The string at p->i decoded into a malloc'ed NUL-terminated buffer (a scan, then the copy). */
static int jstring_dup(jp* p, char** out, size_t* olen, int strict) {
    size_t start = p->i;
    if (jstring(p, NULL, NULL, strict)) return -1;
    char* o = malloc(p->i - start + 1);
    if (!o) { p->err = "out of memory"; return -1; }
    jp q = {p->s, p->n, start, NULL};
    size_t len = 0;
    jstring(&q, o, &len, strict);
    o[len] = 0;
    *out = o;
    if (olen) *olen = len;
    return 0;
}
static int jliteral(jp* p, const char* lit) {
    size_t l = strlen(lit);
    if (p->i + l > p->n || memcmp(p->s + p->i, lit, l)) { p->err = "invalid value"; return -1; }
    p->i += l;
    return 0;
}
/* -?digits[.digits][(e|E)[+-]digits]; *is_int: neither fraction nor exponent. */
static int jnumber(jp* p, int* is_int) {
    size_t st = p->i;
    int whole = 1;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    size_t d = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i == d) { p->err = "invalid value"; return -1; }
    if (p->i < p->n && p->s[p->i] == '.') {
        whole = 0;
        p->i++; d = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
        if (p->i == d) { p->err = "bad number"; return -1; }
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        whole = 0;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        d = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
        if (p->i == d) { p->err = "bad number"; return -1; }
    }
    if (is_int) *is_int = whole;
    return p->i > st ? 0 : -1;
}
/* Skip one value (validated, not stored). */
static int jvalue(jp* p, int depth) {
    if (depth > MAX_DEPTH) { p->err = "nesting too deep"; return -1; }
    ws(p);
    if (p->i >= p->n) { p->err = "unexpected end of line"; return -1; }
    char c = p->s[p->i];
    if (c == '"') return jstring(p, NULL, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        p->i++; ws(p);
        if (p->i < p->n && p->s[p->i] == close) { p->i++; return 0; }
        for (;;) {
            if (c == '{') {
                ws(p);
                if (jstring(p, NULL, NULL, 0)) return -1;
                ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') { p->err = "expected ':'"; return -1; }
                p->i++;
            }
            if (jvalue(p, depth + 1)) return -1;
            ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == close) { p->i++; return 0; }
            p->err = c == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
            return -1;
        }
    }
    if (c == 't') return jliteral(p, "true");
    if (c == 'f') return jliteral(p, "false");
    if (c == 'n') return jliteral(p, "null");
    return jnumber(p, NULL);
}

/* ---- one string field of an object, without a tree (the corpus) --------------------------- */

int mx_json_get_string(const char* line, size_t len, const char* key, char** out, size_t* out_len, size_t* err_col) {
    jp p = {line, len, 0, NULL};
    *out = NULL; *out_len = 0;
    size_t klen = strlen(key);
    int found = 0;
    ws(&p);
    if (p.i >= p.n || p.s[p.i] != '{') { p.err = "expected a JSON object"; goto bad; }
    p.i++; ws(&p);
    if (p.i < p.n && p.s[p.i] == '}') { p.i++; goto end; }
    for (;;) {
        ws(&p);
        size_t ks = p.i;
        if (jstring(&p, NULL, NULL, 0)) goto bad;
        int is_key = (p.i - ks == klen + 2) && !memcmp(p.s + ks + 1, key, klen);
        ws(&p);
        if (p.i >= p.n || p.s[p.i] != ':') { p.err = "expected ':'"; goto bad; }
        p.i++; ws(&p);
        if (is_key && !found && p.i < p.n && p.s[p.i] == '"') {
            if (jstring_dup(&p, out, out_len, 0)) {
                if (!*out && p.err && !strcmp(p.err, "out of memory")) return mx_fail(MX_ENOMEM, "out of memory");
                goto bad;
            }
            found = 1;
        } else {
            if (is_key && !found) { p.err = "the field is not a string"; goto bad; }
            if (jvalue(&p, 1)) goto bad;
        }
        ws(&p);
        if (p.i < p.n && p.s[p.i] == ',') { p.i++; continue; }
        if (p.i < p.n && p.s[p.i] == '}') { p.i++; break; }
        p.err = "expected ',' or '}'";
        goto bad;
    }
end:
    ws(&p);
    if (p.i != p.n) { p.err = "trailing characters after the object"; goto bad; }
    if (!found) { if (err_col) *err_col = 0; return mx_fail(MX_EFORMAT, "no \"%s\" string field", key); }
    return 0;
bad:
    free(*out); *out = NULL;
    if (err_col) *err_col = p.i + 1;
    return mx_fail(MX_EFORMAT, "malformed JSON at column %zu: %s", p.i + 1, p.err ? p.err : "syntax error");
}

/* ---- the tree ------------------------------------------------------------------------ */

void mx_json_free(mx_json* x) {
    if (!x) return;
    free(x->s);
    for (int i = 0; i < x->n; i++) {
        mx_json_free(&x->v[i]);
        if (x->k) free(x->k[i]);
    }
    free(x->v);
    free(x->k);
    memset(x, 0, sizeof *x);
}

static int tpush(jp* p, mx_json* x, char* key) {
    if (x->n == x->cap) {
        int cap = x->cap ? x->cap * 2 : 8;
        mx_json* v = realloc(x->v, sizeof(mx_json) * (size_t)cap);
        if (!v) { p->err = "out of memory"; return -1; }
        x->v = v;
        if (x->t == MX_JSON_OBJ) {
            char** k = realloc(x->k, sizeof(char*) * (size_t)cap);
            if (!k) { p->err = "out of memory"; return -1; }
            x->k = k;
        }
        x->cap = cap;
    }
    memset(&x->v[x->n], 0, sizeof(mx_json));
    if (x->t == MX_JSON_OBJ) x->k[x->n] = key;
    x->n++;
    return 0;
}

static int tvalue(jp* p, mx_json* out, int depth) {
    memset(out, 0, sizeof *out);
    if (depth > MAX_DEPTH) { p->err = "nesting too deep"; return -1; }
    ws(p);
    if (p->i >= p->n) { p->err = "unexpected end"; return -1; }
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        out->t = c == '{' ? MX_JSON_OBJ : MX_JSON_ARR;
        char close = c == '{' ? '}' : ']';
        p->i++; ws(p);
        if (p->i < p->n && p->s[p->i] == close) { p->i++; return 0; }
        for (;;) {
            char* key = NULL;
            if (out->t == MX_JSON_OBJ) {
                ws(p);
                if (jstring_dup(p, &key, NULL, 1)) return -1;
                ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') { free(key); p->err = "expected ':'"; return -1; }
                p->i++;
            }
            if (tpush(p, out, key)) { free(key); return -1; }
            if (tvalue(p, &out->v[out->n - 1], depth + 1)) return -1;
            ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == close) { p->i++; return 0; }
            p->err = c == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
            return -1;
        }
    }
    if (c == '"') {
        out->t = MX_JSON_STR;
        return jstring_dup(p, &out->s, NULL, 1);
    }
    if (c == 't' || c == 'f' || c == 'n') {
        const char* w = c == 't' ? "true" : c == 'f' ? "false" : "null";
        if (jliteral(p, w)) return -1;
        out->t = c == 'n' ? MX_JSON_NULL : MX_JSON_BOOL;
        out->b = c == 't';
        return 0;
    }
    size_t st = p->i;
    if (jnumber(p, &out->is_int)) return -1;
    char buf[64];
    if (p->i - st >= sizeof buf) { p->err = "number too long"; return -1; }
    memcpy(buf, p->s + st, p->i - st);
    buf[p->i - st] = 0;
    out->t = MX_JSON_NUM;
    out->num = strtod(buf, NULL);
    return 0;
}

int mx_json_parse(const char* text, size_t n, mx_json* out, char* err, size_t en) {
    jp p = {text, n, 0, NULL};
    int rc = tvalue(&p, out, 0);
    if (!rc) {
        ws(&p);
        if (p.i != p.n) { p.err = "trailing characters"; rc = -1; }
    }
    if (rc) {
        mx_json_free(out);
        if (err && en) snprintf(err, en, "%s at byte %zu", p.err ? p.err : "invalid JSON", p.i);
    }
    return rc;
}

const mx_json* mx_json_get(const mx_json* o, const char* key) {
    if (!o || o->t != MX_JSON_OBJ) return NULL;
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->k[i], key)) return &o->v[i];
    return NULL;
}

double mx_json_num(const mx_json* o, const char* key, int* present) {
    const mx_json* x = mx_json_get(o, key);
    if (present) *present = x != NULL;
    return x && x->t == MX_JSON_NUM ? x->num : NAN;
}

const char* mx_json_str(const mx_json* o, const char* key) {
    const mx_json* x = mx_json_get(o, key);
    return x && x->t == MX_JSON_STR ? x->s : NULL;
}

const char* mx_json_number(char* b, size_t n, double x, int sig) {
    if (isfinite(x)) snprintf(b, n, "%.*g", sig, x);
    else snprintf(b, n, "null");
    return b;
}
