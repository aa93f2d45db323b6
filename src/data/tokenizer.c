/* tokenizer.c: byte-level BPE over tiktoken rank files; hand-written
 * pre-tokenizers for r50k, cl100k, o200k and llama3 (see tokenizer.h). */
#include "mxlm/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mxlm/mx.h"
#include "mxlm/util.h"

extern const uint16_t mx_uc_stage1[8704];
extern const uint8_t mx_uc_stage2[];

/* ---- character classes ------------------------------------------------------ */
enum { F_L = 1, F_N = 2, F_WS = 4, F_UP = 8, F_LO = 16, F_CRLF = 32 };
/* F_UP: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], F_LO: [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k). */
static const uint8_t k_cls_flags[8] = {
    0,                 /* other */
    F_L | F_UP,        /* Lu */
    F_L | F_LO,        /* Ll */
    F_L | F_UP,        /* Lt */
    F_L | F_UP | F_LO, /* Lm */
    F_L | F_UP | F_LO, /* Lo */
    F_UP | F_LO,       /* M */
    F_N,               /* N */
};

/* JavaScript's \s: WhiteSpace and LineTerminator (ECMA-262), i.e. TAB VT FF SP NBSP ZWNBSP
 * and the Zs category, plus LF CR LS PS. (U+0085 is not \s in JavaScript.) */
static inline int js_space(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 9 && c <= 13);
    return c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

static uint8_t k_ascii_flags[128];
static int k_ascii_ready;
static inline uint8_t cp_flags_slow(uint32_t c) {
    uint8_t f = c < 0x110000 ? k_cls_flags[mx_uc_stage2[(size_t)mx_uc_stage1[c >> 7] * 128 + (c & 127)]] : 0;
    if (js_space(c)) f |= F_WS;
    if (c == '\r' || c == '\n') f |= F_CRLF;
    return f;
}
static void init_ascii(void) {
    if (k_ascii_ready) return;
    for (uint32_t c = 0; c < 128; c++) k_ascii_flags[c] = cp_flags_slow(c);
    __atomic_store_n(&k_ascii_ready, 1, __ATOMIC_RELEASE);
}
static inline uint8_t cp_flags(uint32_t c) { return c < 128 ? k_ascii_flags[c] : cp_flags_slow(c); }

/* ---- UTF-8 -------------------------------------------------------------------- */
/* Decode one sequence at s[i..n). Returns its length; *cp = code point, or
 * 0xFFFD with *bad = 1 for a maximal invalid subpart (WHATWG decoder). */
static inline size_t utf8_next(const uint8_t* s, size_t i, size_t n, uint32_t* cp, int* bad) {
    uint8_t b = s[i];
    *bad = 0;
    if (b < 0x80) { *cp = b; return 1; }
    size_t need; uint32_t c; uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) { need = 1; c = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { need = 2; c = b & 0x0F; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { need = 3; c = b & 0x07; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else { *cp = 0xFFFD; *bad = 1; return 1; }
    size_t k = 1;
    for (; k <= need; k++) {
        if (i + k >= n) break;
        uint8_t x = s[i + k];
        if (x < lo || x > hi) break;
        lo = 0x80; hi = 0xBF;
        c = (c << 6) | (x & 0x3F);
    }
    if (k <= need) { *cp = 0xFFFD; *bad = 1; return k; }
    *cp = c;
    return need + 1;
}

size_t mx_utf8_valid_prefix(const char* str, size_t len) {
    const uint8_t* s = (const uint8_t*)str;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) { i++; continue; }
        uint32_t cp; int bad;
        size_t k = utf8_next(s, i, len, &cp, &bad);
        if (bad) return i;
        i += k;
    }
    return len;
}

int mx_utf8_sanitize(const char* str, size_t len, char** out, size_t* out_len) {
    const uint8_t* s = (const uint8_t*)str;
    uint8_t* o = malloc(len * 3 + 1);
    if (!o) return mx_fail(MX_ENOMEM, "out of memory (%zu bytes)", len * 3 + 1);
    size_t i = 0, j = 0;
    while (i < len) {
        uint32_t cp; int bad;
        size_t k = utf8_next(s, i, len, &cp, &bad);
        if (bad) { o[j++] = 0xEF; o[j++] = 0xBF; o[j++] = 0xBD; }
        else { memcpy(o + j, s + i, k); j += k; }
        i += k;
    }
    o[j] = 0;
    *out = (char*)o;
    *out_len = j;
    return 0;
}

/* ---- pre-tokenization ---------------------------------------------------------- */
typedef struct { const uint32_t* cp; const uint8_t* fl; size_t n; } cps;
#define OTHER(f) (!((f) & (F_L | F_N | F_WS)))

static inline size_t run_while(const cps* c, size_t i, uint8_t mask) {
    while (i < c->n && (c->fl[i] & mask)) i++;
    return i;
}
static inline size_t run_other(const cps* c, size_t i) {
    while (i < c->n && OTHER(c->fl[i])) i++;
    return i;
}
static inline uint32_t lower_ascii(uint32_t x) { return (x >= 'A' && x <= 'Z') ? x + 32 : x; }
/* Contraction at i ('s 't 're 've 'm 'll 'd): returns its length in code points, or 0.
 * `ci`: ASCII case-insensitive ([sS] ...) as in cl100k/o200k/llama3; r50k is lower case only. */
static inline size_t contraction(const cps* c, size_t i, int ci) {
    if (i >= c->n || c->cp[i] != '\'' || i + 1 >= c->n) return 0;
    uint32_t a = c->cp[i + 1], b = i + 2 < c->n ? c->cp[i + 2] : 0;
    if (ci) { a = lower_ascii(a); b = lower_ascii(b); }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}
/* The end of a whitespace run starting at i (c->fl[i] is whitespace). */
static inline size_t ws_end(const cps* c, size_t i) { return run_while(c, i, F_WS); }
/* \s+(?!\S) | \s+   (the run length, minus one if a non-space follows and the run is longer than 1) */
static inline size_t ws_tail(const cps* c, size_t i, size_t e) {
    if (e == c->n) return e;
    return e - i >= 2 ? e - 1 : e;
}
/* \s*[\r\n]+ : the run up to and including its last CR/LF; 0 if it has none. */
static inline size_t ws_to_last_crlf(const cps* c, size_t i, size_t e) {
    for (size_t p = e; p > i; p--)
        if (c->fl[p - 1] & F_CRLF) return p;
    return 0;
}

/* r50k: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_r50k(const cps* c, size_t i) {
    size_t k = contraction(c, i, 0);
    if (k) return i + k;
    size_t s = i + (c->cp[i] == ' ');
    if (s < c->n) {
        uint8_t f = c->fl[s];
        if (f & F_L) return run_while(c, s, F_L);
        if (f & F_N) return run_while(c, s, F_N);
        if (OTHER(f)) return run_other(c, s);
    }
    /* c->cp[i] is whitespace here */
    return ws_tail(c, i, ws_end(c, i));
}

/* cl100k (gpt-tokenizer's form):
 * '(?:[sS]|[dD]|[mM]|[tT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
 * | ?[^\s\p{L}\p{N}]+[\r\n]*|\s+$|\s*[\r\n]|\s+(?!\S)|\s
 * llama3 (its tokenizer.json, contractions as [sS] etc. like the JS reference):
 * same up to [\r\n]*, then |\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_cl100k_like(const cps* c, size_t i, int llama) {
    size_t k = contraction(c, i, 1);
    if (k) return i + k;
    uint8_t f = c->fl[i];
    if (!(f & (F_CRLF | F_L | F_N)) && i + 1 < c->n && (c->fl[i + 1] & F_L)) return run_while(c, i + 1, F_L);
    if (f & F_L) return run_while(c, i, F_L);
    if (f & F_N) {
        size_t e = i + 1;
        while (e < c->n && e < i + 3 && (c->fl[e] & F_N)) e++;
        return e;
    }
    size_t s = i + (c->cp[i] == ' ');
    if (s < c->n && OTHER(c->fl[s])) return run_while(c, run_other(c, s), F_CRLF);
    /* whitespace */
    size_t e = ws_end(c, i);
    if (!llama) {
        if (e == c->n) return e;                 /* \s+$ */
        size_t p = ws_to_last_crlf(c, i, e);     /* \s*[\r\n] */
        if (p) return p;
        if (e - i >= 2) return e - 1;            /* \s+(?!\S) */
        return i + 1;                            /* \s */
    }
    size_t p = ws_to_last_crlf(c, i, e);
    if (p) return p;
    return ws_tail(c, i, e);
}

/* o200k (gpt-tokenizer's form), with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}],
 * P = [^\r\n\p{L}\p{N}], C = '(?:[sS]|[dD]|[mM]|[tT]|[lL][lL]|[vV][eE]|[rR][eE]):
 *   P?U*W+C? | P?U+W*C? | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t o200k_uw(const cps* c, size_t s) { /* U*W+ at s (after the optional P); 0 if none */
    size_t ue = run_while(c, s, F_UP);
    /* greedy U* backs off to the last position p in [s, ue] where W matches */
    size_t p = ue + 1;
    if (ue < c->n && (c->fl[ue] & F_LO)) p = ue;
    else
        for (size_t q = ue; q > s; q--)
            if (c->fl[q - 1] & F_LO) { p = q - 1; break; }
    if (p == ue + 1) return 0;
    return run_while(c, p, F_LO);
}
static size_t o200k_u_w(const cps* c, size_t s) { /* U+W* at s; 0 if none */
    if (s >= c->n || !(c->fl[s] & F_UP)) return 0;
    return run_while(c, run_while(c, s, F_UP), F_LO);
}
static size_t match_o200k(const cps* c, size_t i) {
    uint8_t f = c->fl[i];
    int p_ok = !(f & (F_CRLF | F_L | F_N));
    for (int alt = 0; alt < 2; alt++) {
        size_t e = 0;
        if (p_ok && i + 1 < c->n) e = alt == 0 ? o200k_uw(c, i + 1) : o200k_u_w(c, i + 1);
        if (!e && i < c->n) e = alt == 0 ? o200k_uw(c, i) : o200k_u_w(c, i);
        if (e) return e + contraction(c, e, 1);
    }
    if (f & F_N) {
        size_t e = i + 1;
        while (e < c->n && e < i + 3 && (c->fl[e] & F_N)) e++;
        return e;
    }
    size_t s = i + (c->cp[i] == ' ');
    if (s < c->n && OTHER(c->fl[s])) {
        size_t e = run_other(c, s);
        while (e < c->n && ((c->fl[e] & F_CRLF) || c->cp[e] == '/')) e++;
        return e;
    }
    size_t e = ws_end(c, i);
    size_t p = ws_to_last_crlf(c, i, e);
    if (p) return p;
    return ws_tail(c, i, e);
}

/* Decode valid UTF-8 into code points + flags + byte offsets. */
typedef struct { uint32_t* cp; uint8_t* fl; uint32_t* off; size_t cap; } cpbuf;
static int decode_cps(cpbuf* b, const uint8_t* s, size_t len, size_t* n_out) {
    if (len + 1 > b->cap) {
        size_t cap = len + 1;
        uint32_t* cp = realloc(b->cp, cap * 4);
        if (cp) b->cp = cp;
        uint8_t* fl = realloc(b->fl, cap);
        if (fl) b->fl = fl;
        uint32_t* off = realloc(b->off, cap * 4);
        if (off) b->off = off;
        if (!cp || !fl || !off) return mx_fail(MX_ENOMEM, "out of memory");
        b->cap = cap;
    }
    size_t i = 0, n = 0;
    while (i < len) {
        uint8_t x = s[i];
        b->off[n] = (uint32_t)i;
        if (x < 0x80) { b->cp[n] = x; b->fl[n] = k_ascii_flags[x]; n++; i++; continue; }
        uint32_t cp; int bad;
        size_t k = utf8_next(s, i, len, &cp, &bad);
        b->cp[n] = cp; b->fl[n] = cp_flags_slow(cp); n++;
        i += k;
    }
    b->off[n] = (uint32_t)len;
    *n_out = n;
    return 0;
}

typedef size_t (*matcher)(const cps*, size_t);
static size_t m_cl100k(const cps* c, size_t i) { return match_cl100k_like(c, i, 0); }
static size_t m_llama3(const cps* c, size_t i) { return match_cl100k_like(c, i, 1); }
static const matcher k_match[4] = {match_r50k, m_cl100k, match_o200k, m_llama3};

int mx_tok_pattern_parse(const char* s) {
    if (!s) return -1;
    static const char* names[4] = {"r50k", "cl100k", "o200k", "llama3"};
    for (int i = 0; i < 4; i++) {
        size_t l = strlen(names[i]);
        if (!strncmp(s, names[i], l) && (s[l] == 0 || !strcmp(s + l, "_base"))) return i;
    }
    if (!strcmp(s, "gpt2") || !strcmp(s, "tiny")) return MX_PAT_R50K;
    return -1;
}
const char* mx_tok_pattern_name(int p) {
    static const char* names[4] = {"r50k", "cl100k", "o200k", "llama3"};
    return p >= 0 && p < 4 ? names[p] : "?";
}

/* Split valid UTF-8 (len < 4 GiB) into pieces. */
static int split_pieces(int pattern, const uint8_t* s, size_t len, cpbuf* b,
                        void (*fn)(const uint8_t*, size_t, void*), void* ctx) {
    init_ascii();
    if (len >= UINT32_MAX) return mx_fail(MX_EINVAL, "text of %zu bytes: split it into documents under 4 GiB", len);
    size_t n;
    int rc = decode_cps(b, s, len, &n);
    if (rc) return rc;
    cps c = {b->cp, b->fl, n};
    matcher m = k_match[pattern];
    for (size_t i = 0; i < n;) {
        size_t e = m(&c, i);
        fn(s + b->off[i], b->off[e] - b->off[i], ctx);
        i = e;
    }
    return 0;
}

typedef struct { mx_piece_fn fn; void* ctx; } split_ctx;
static void split_cb(const uint8_t* p, size_t n, void* ctx) {
    split_ctx* sc = ctx;
    sc->fn((const char*)p, n, sc->ctx);
}
int mx_tok_split(int pattern, const char* text, size_t len, mx_piece_fn fn, void* ctx) {
    if (pattern < 0 || pattern > 3) return mx_fail(MX_EINVAL, "unknown pattern %d", pattern);
    if (mx_utf8_valid_prefix(text, len) != len) return mx_fail(MX_EINVAL, "mx_tok_split: invalid UTF-8");
    cpbuf b = {0};
    split_ctx sc = {fn, ctx};
    int rc = split_pieces(pattern, (const uint8_t*)text, len, &b, split_cb, &sc);
    free(b.cp); free(b.fl); free(b.off);
    return rc;
}

/* ---- the rank table ------------------------------------------------------------- */
typedef struct { uint32_t rank; uint32_t tag; } slot;
struct mx_tokenizer {
    int pattern;
    uint32_t n_ranks;        /* ranks are < n_ranks (there may be holes) */
    uint64_t* tok_off;       /* [n_ranks + 1] offsets into blob; hole: equal offsets */
    uint8_t* blob;
    slot* table; uint64_t mask;
    uint32_t byte_rank[256];
    uint32_t n_special, special_base;  /* contiguous specials block (llama3) or list */
    uint32_t spec_id[8]; const char* spec_name[8]; int n_spec_list;
    uint32_t vocab, eot, doc_tok;
};

static inline uint64_t hash_bytes(const uint8_t* p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0x100000001B3ull);
    while (n >= 8) {
        uint64_t w; memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull; h ^= h >> 32;
        p += 8; n -= 8;
    }
    uint64_t w = 0;
    for (size_t k = 0; k < n; k++) w |= (uint64_t)p[k] << (8 * k);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

#define NO_RANK UINT32_MAX
static inline uint32_t lookup(const mx_tokenizer* t, const uint8_t* p, size_t n) {
    uint64_t h = hash_bytes(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & t->mask;; i = (i + 1) & t->mask) {
        const slot* s = &t->table[i];
        if (s->rank == NO_RANK) return NO_RANK;
        if (s->tag == tag) {
            uint64_t a = t->tok_off[s->rank], b = t->tok_off[s->rank + 1];
            if (b - a == n && !memcmp(t->blob + a, p, n)) return s->rank;
        }
    }
}

static int b64val(int ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

static const char* k_llama3_named[] = {"<|begin_of_text|>", "<|end_of_text|>"};

int mx_tok_open(mx_tokenizer** out, const char* path, int pattern) {
    *out = NULL;
    init_ascii();
    if (pattern < 0 || pattern > 3) return mx_fail(MX_EINVAL, "unknown pre-tokenization pattern %d", pattern);
    FILE* f = mx_fopen_input(path, "rank file");
    if (!f) return MX_EIO;
    char* text = NULL; size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = (len + 65536 + 1) * 2;
            char* x = realloc(text, cap);
            if (!x) { free(text); fclose(f); return mx_fail(MX_ENOMEM, "out of memory"); }
            text = x;
        }
        size_t r = fread(text + len, 1, 65536, f);
        len += r;
        if (r == 0) break;
    }
    int ferr = ferror(f);
    fclose(f);
    if (ferr) { free(text); return mx_fail(MX_EIO, "%s: read error", path); }
    text[len] = 0;
    /* pass 1: count lines, find the largest rank */
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    if (len && text[len - 1] != '\n') lines++;
    mx_tokenizer* t = calloc(1, sizeof *t);
    uint32_t* ranks = malloc((lines + 1) * sizeof *ranks);
    uint64_t* offs = malloc((lines + 1) * sizeof *offs);
    uint8_t* blob = malloc(len + 1);
    int rc = 0;
    if (!t || !ranks || !offs || !blob) { rc = mx_fail(MX_ENOMEM, "out of memory"); goto fail; }
    size_t nt = 0, bl = 0, line = 0;
    uint32_t maxr = 0;
    for (size_t i = 0; i < len;) {
        line++;
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        size_t le = e;
        if (le > i && text[le - 1] == '\r') le--;
        if (le == i) { i = e + 1; continue; } /* blank line */
        size_t sp = i;
        while (sp < le && text[sp] != ' ') sp++;
        if (sp == le) { rc = mx_fail(MX_EFORMAT, "%s:%zu: expected 'base64 rank'", path, line); goto fail; }
        /* base64 decode */
        uint64_t start = bl;
        uint32_t acc = 0; int bits = 0; size_t q = i;
        for (; q < sp; q++) {
            if (text[q] == '=') break;
            int v = b64val((unsigned char)text[q]);
            if (v < 0) { rc = mx_fail(MX_EFORMAT, "%s:%zu: bad base64 character", path, line); goto fail; }
            acc = (acc << 6) | (uint32_t)v; bits += 6;
            if (bits >= 8) { bits -= 8; blob[bl++] = (uint8_t)(acc >> bits); acc &= (1u << bits) - 1; }
        }
        if (bl == start) { rc = mx_fail(MX_EFORMAT, "%s:%zu: empty token", path, line); goto fail; }
        char* endp;
        errno = 0;
        unsigned long r = strtoul(text + sp + 1, &endp, 10);
        if (endp == text + sp + 1 || (size_t)(endp - text) != le || errno || r >= 0x7fffffffUL) {
            rc = mx_fail(MX_EFORMAT, "%s:%zu: bad rank", path, line); goto fail;
        }
        /* Tables are indexed by rank: a bound keeps a hostile file from asking for gigabytes
         * (the largest real vocabularies are ~256k). */
        if (r >= MX_TOK_MAX_RANK) {
            rc = mx_fail(MX_EFORMAT, "%s:%zu: rank %lu is too large (ranks must be below %d)", path, line, r,
                         MX_TOK_MAX_RANK);
            goto fail;
        }
        ranks[nt] = (uint32_t)r;
        offs[nt] = start;
        nt++;
        if (r > maxr) maxr = (uint32_t)r;
        i = e + 1;
    }
    if (!nt) { rc = mx_fail(MX_EFORMAT, "%s: no ranks", path); goto fail; }
    t->pattern = pattern;
    t->n_ranks = maxr + 1;
    t->blob = blob; blob = NULL;
    t->tok_off = calloc((size_t)t->n_ranks + 1, sizeof *t->tok_off);
    uint64_t* lens = calloc((size_t)t->n_ranks, sizeof *lens);
    uint64_t tsz = 16;
    while (tsz < (uint64_t)nt * 2) tsz <<= 1;
    t->table = malloc(tsz * sizeof *t->table);
    t->mask = tsz - 1;
    if (!t->tok_off || !lens || !t->table) { free(lens); rc = mx_fail(MX_ENOMEM, "out of memory"); goto fail; }
    /* Re-lay the blob in rank order so tok_off is monotone: tokens ordered by rank. */
    {
        uint8_t* nb = malloc(bl + 1);
        uint64_t* src = malloc((size_t)t->n_ranks * sizeof *src);
        if (!nb || !src) { free(nb); free(src); free(lens); rc = mx_fail(MX_ENOMEM, "out of memory"); goto fail; }
        for (size_t k = 0; k < nt; k++) {
            uint64_t tl = (k + 1 < nt ? offs[k + 1] : bl) - offs[k];
            if (lens[ranks[k]]) {
                free(nb); free(src); free(lens);
                rc = mx_fail(MX_EFORMAT, "%s: rank %u appears twice", path, ranks[k]);
                goto fail;
            }
            lens[ranks[k]] = tl; src[ranks[k]] = offs[k];
        }
        uint64_t o = 0;
        for (uint32_t r = 0; r < t->n_ranks; r++) {
            t->tok_off[r] = o;
            if (lens[r]) { memcpy(nb + o, t->blob + src[r], lens[r]); o += lens[r]; }
        }
        t->tok_off[t->n_ranks] = o;
        free(t->blob); t->blob = nb;
        free(src); free(lens);
    }
    for (uint64_t k = 0; k < tsz; k++) t->table[k].rank = NO_RANK;
    for (uint32_t r = 0; r < t->n_ranks; r++) {
        uint64_t a = t->tok_off[r], b = t->tok_off[r + 1];
        if (a == b) continue;
        if (lookup(t, t->blob + a, b - a) != NO_RANK) {
            rc = mx_fail(MX_EFORMAT, "%s: token of rank %u appears twice", path, r);
            goto fail;
        }
        uint64_t h = hash_bytes(t->blob + a, b - a);
        uint64_t k = h & t->mask;
        while (t->table[k].rank != NO_RANK) k = (k + 1) & t->mask;
        t->table[k].rank = r; t->table[k].tag = (uint32_t)(h >> 32);
    }
    for (int by = 0; by < 256; by++) {
        uint8_t c = (uint8_t)by;
        t->byte_rank[by] = lookup(t, &c, 1);
        if (t->byte_rank[by] == NO_RANK) {
            rc = mx_fail(MX_EFORMAT, "%s: byte 0x%02x has no rank (a byte-level BPE needs all 256)", path, by);
            goto fail;
        }
    }
    /* special tokens */
    switch (pattern) {
    case MX_PAT_R50K:
        t->spec_id[0] = t->n_ranks; t->spec_name[0] = "<|endoftext|>"; t->n_spec_list = 1;
        t->eot = t->doc_tok = t->n_ranks; t->vocab = t->n_ranks + 1;
        break;
    case MX_PAT_CL100K: {
        static const uint32_t ids[5] = {100257, 100258, 100259, 100260, 100276};
        static const char* nm[5] = {"<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                                    "<|endofprompt|>"};
        for (int k = 0; k < 5; k++) { t->spec_id[k] = ids[k]; t->spec_name[k] = nm[k]; }
        t->n_spec_list = 5; t->eot = t->doc_tok = 100257; t->vocab = 100277;
        break;
    }
    case MX_PAT_O200K:
        t->spec_id[0] = 199999; t->spec_name[0] = "<|endoftext|>";
        t->spec_id[1] = 200018; t->spec_name[1] = "<|endofprompt|>";
        t->n_spec_list = 2; t->eot = t->doc_tok = 199999; t->vocab = 200019;
        break;
    case MX_PAT_LLAMA3:
        t->special_base = 128000; t->n_special = 256;
        t->doc_tok = 128000; t->eot = 128001; t->vocab = 128256;
        break;
    }
    if (t->vocab < t->n_ranks) {
        rc = mx_fail(MX_EFORMAT, "%s: %u ranks is more than the %s vocabulary (%u)", path, t->n_ranks,
                     mx_tok_pattern_name(pattern), t->vocab);
        goto fail;
    }
    free(text); free(ranks); free(offs);
    *out = t;
    return 0;
fail:
    free(text); free(ranks); free(offs); free(blob);
    mx_tok_free(t);
    return rc;
}

void mx_tok_free(mx_tokenizer* t) {
    if (!t) return;
    free(t->tok_off); free(t->blob); free(t->table);
    free(t);
}

int mx_tok_open_encoding(mx_tokenizer** out, const char* name) {
    *out = NULL;
    int pat = mx_tok_pattern_parse(name);
    if (pat < 0) return mx_fail(MX_EINVAL, "unknown encoding '%s' (r50k_base, cl100k_base, o200k_base, llama3, tiny)", name);
    char path[1024];
    if (!strcmp(name, "tiny")) snprintf(path, sizeof path, "build/data/tiny.tiktoken");
    else {
        const char* dir = getenv("MXLM_TOKENIZERS");
        if (!dir || !*dir) dir = "data/tokenizers";
        const char* base = pat == MX_PAT_R50K ? "r50k_base" : pat == MX_PAT_CL100K ? "cl100k_base"
                         : pat == MX_PAT_O200K ? "o200k_base" : "llama3";
        if (pat == MX_PAT_R50K && strcmp(name, "r50k") && strcmp(name, "r50k_base") && strcmp(name, "gpt2"))
            base = name;
        if (mx_pathf(path, sizeof path, "%s/%s.tiktoken", dir, base)) return MX_EINVAL;
    }
    if (access(path, F_OK) != 0)
        return mx_fail(MX_EIO, "%s: not found (run tools/fetch_tokenizers.sh for the rank files; `make` builds tiny)",
                       path);
    return mx_tok_open(out, path, pat);
}

int mx_tok_pattern_of(const mx_tokenizer* t) { return t->pattern; }
uint32_t mx_tok_vocab_size(const mx_tokenizer* t) { return t->vocab; }
uint32_t mx_tok_eot(const mx_tokenizer* t) { return t->eot; }
uint32_t mx_tok_doc_token(const mx_tokenizer* t) { return t->doc_tok; }

/* ---- ids ------------------------------------------------------------------------ */
void mx_ids_free(mx_ids* v) { free(v->ids); v->ids = NULL; v->n = v->cap = 0; }
static int ids_reserve(mx_ids* v, size_t extra) {
    if (v->n + extra <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->n + extra) cap *= 2;
    uint32_t* x = realloc(v->ids, cap * sizeof *x);
    if (!x) return mx_fail(MX_ENOMEM, "out of memory (%zu ids)", cap);
    v->ids = x; v->cap = cap;
    return 0;
}
int mx_ids_push(mx_ids* v, uint32_t id) {
    int rc = ids_reserve(v, 1);
    if (rc) return rc;
    v->ids[v->n++] = id;
    return 0;
}

/* ---- BPE ------------------------------------------------------------------------ */
static size_t g_heap_threshold = 512; /* pieces longer than this use the O(n log n) merge */
void mx_tok_set_heap_threshold(size_t n); /* tests only */
void mx_tok_set_heap_threshold(size_t n) { g_heap_threshold = n; }

/* tiktoken's merge: repeatedly merge the adjacent pair of lowest rank (leftmost on ties). */
static int bpe_small(const mx_tokenizer* t, const uint8_t* p, size_t m, mx_ids* out) {
    uint32_t posb[513], rkb[513];
    uint32_t* pos = posb; uint32_t* rk = rkb;
    /* pos[k]: start of part k (k < cnt), pos[cnt] = m; rk[k]: rank of parts k and k+1 merged */
    size_t cnt = m;
    for (size_t k = 0; k <= m; k++) pos[k] = (uint32_t)k;
    for (size_t k = 0; k + 1 < cnt; k++) rk[k] = lookup(t, p + k, 2);
    while (cnt > 1) {
        uint32_t best = NO_RANK; size_t bi = 0;
        for (size_t k = 0; k + 1 < cnt; k++)
            if (rk[k] < best) { best = rk[k]; bi = k; }
        if (best == NO_RANK) break;
        /* merge parts bi and bi+1 */
        memmove(pos + bi + 1, pos + bi + 2, (cnt - bi - 1) * sizeof *pos);
        if (cnt >= bi + 3) memmove(rk + bi + 1, rk + bi + 2, (cnt - bi - 3) * sizeof *rk);
        cnt--;
        if (bi + 1 < cnt) rk[bi] = lookup(t, p + pos[bi], pos[bi + 2] - pos[bi]);
        if (bi > 0) rk[bi - 1] = lookup(t, p + pos[bi - 1], pos[bi + 1] - pos[bi - 1]);
    }
    int rc = ids_reserve(out, cnt);
    if (rc) return rc;
    for (size_t k = 0; k < cnt; k++) {
        uint32_t r = lookup(t, p + pos[k], pos[k + 1] - pos[k]);
        out->ids[out->n++] = r;
    }
    return 0;
}

typedef struct { uint32_t rank, start, mid, end; } hent;
static inline int hless(const hent* a, const hent* b) {
    return a->rank < b->rank || (a->rank == b->rank && a->start < b->start);
}
static void hpush(hent* h, size_t* n, hent e) {
    size_t i = (*n)++;
    while (i) {
        size_t pa = (i - 1) / 2;
        if (!hless(&e, &h[pa])) break;
        h[i] = h[pa]; i = pa;
    }
    h[i] = e;
}
static hent hpop(hent* h, size_t* n) {
    hent top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, s = i;
        const hent* cur = &last;
        if (l < *n && hless(&h[l], cur)) { s = l; cur = &h[l]; }
        if (r < *n && hless(&h[r], cur)) s = r;
        if (s == i) break;
        h[i] = h[s]; i = s;
    }
    if (*n) h[i] = last;
    return top;
}
static int bpe_heap(const mx_tokenizer* t, const uint8_t* p, size_t m, mx_ids* out) {
    uint32_t* nxt = malloc((m + 1) * sizeof *nxt);
    uint32_t* prv = malloc((m + 1) * sizeof *prv);
    hent* h = malloc((2 * m + 2) * sizeof *h);
    int rc = 0;
    if (!nxt || !prv || !h) { rc = mx_fail(MX_ENOMEM, "out of memory"); goto done; }
    size_t hn = 0;
    for (size_t k = 0; k < m; k++) { nxt[k] = (uint32_t)(k + 1); prv[k] = (uint32_t)k - 1; }
    for (size_t k = 0; k + 1 < m; k++) {
        uint32_t r = lookup(t, p + k, 2);
        if (r != NO_RANK) hpush(h, &hn, (hent){r, (uint32_t)k, (uint32_t)k + 1, (uint32_t)k + 2});
    }
    const uint32_t DEAD = UINT32_MAX;
    while (hn) {
        hent e = hpop(h, &hn);
        if (nxt[e.start] != e.mid || nxt[e.mid] != e.end) continue; /* stale (a dead part has nxt DEAD) */
        /* merge: part e.start absorbs e.mid */
        nxt[e.start] = e.end;
        nxt[e.mid] = DEAD;
        if (e.end < m) prv[e.end] = e.start;
        if (e.end < m) {
            uint32_t r = lookup(t, p + e.start, nxt[e.end] - e.start);
            if (r != NO_RANK) hpush(h, &hn, (hent){r, e.start, e.end, nxt[e.end]});
        }
        if (e.start > 0) {
            uint32_t a = prv[e.start];
            uint32_t r = lookup(t, p + a, e.end - a);
            if (r != NO_RANK) hpush(h, &hn, (hent){r, a, e.start, e.end});
        }
    }
    for (size_t k = 0; k < m; k = nxt[k]) {
        rc = mx_ids_push(out, lookup(t, p + k, nxt[k] - k));
        if (rc) break;
    }
done:
    free(nxt); free(prv); free(h);
    return rc;
}

static int encode_piece(const mx_tokenizer* t, const uint8_t* p, size_t m, mx_ids* out) {
    if (m == 1) return mx_ids_push(out, t->byte_rank[p[0]]);
    uint32_t r = lookup(t, p, m);
    if (r != NO_RANK) return mx_ids_push(out, r);
    return m <= g_heap_threshold && m <= 512 ? bpe_small(t, p, m, out) : bpe_heap(t, p, m, out);
}

typedef struct { const mx_tokenizer* t; mx_ids* out; int rc; } enc_ctx;
static void enc_cb(const uint8_t* p, size_t n, void* ctx) {
    enc_ctx* e = ctx;
    if (!e->rc) e->rc = encode_piece(e->t, p, n, e->out);
}

int mx_tok_encode(const mx_tokenizer* t, const char* text, size_t len, mx_ids* out) {
    char* clean = NULL; size_t clen = len;
    const uint8_t* s = (const uint8_t*)text;
    if (mx_utf8_valid_prefix(text, len) != len) {
        int rc = mx_utf8_sanitize(text, len, &clean, &clen);
        if (rc) return rc;
        s = (const uint8_t*)clean;
    }
    cpbuf b = {0};
    enc_ctx e = {t, out, 0};
    int rc = split_pieces(t->pattern, s, clen, &b, enc_cb, &e);
    free(b.cp); free(b.fl); free(b.off); free(clean);
    return rc ? rc : e.rc;
}

/* ---- decode --------------------------------------------------------------------- */
static const char* special_name(const mx_tokenizer* t, uint32_t id, char* buf, size_t bufsz) {
    for (int k = 0; k < t->n_spec_list; k++)
        if (t->spec_id[k] == id) return t->spec_name[k];
    if (t->n_special && id >= t->special_base && id < t->special_base + t->n_special) {
        uint32_t k = id - t->special_base;
        if (k < 2) return k_llama3_named[k];
        if (k == 6) return "<|start_header_id|>";
        if (k == 7) return "<|end_header_id|>";
        if (k == 9) return "<|eot_id|>";
        uint32_t rsv = k < 6 ? k - 2 : k == 8 ? 4 : k - 5;
        snprintf(buf, bufsz, "<|reserved_special_token_%u|>", rsv);
        return buf;
    }
    return NULL;
}

const uint8_t* mx_tok_token_bytes(const mx_tokenizer* t, uint32_t id, size_t* len) {
    if (id < t->n_ranks && t->tok_off[id + 1] > t->tok_off[id]) {
        *len = t->tok_off[id + 1] - t->tok_off[id];
        return t->blob + t->tok_off[id];
    }
    *len = 0;
    return NULL;
}

int mx_tok_decode(const mx_tokenizer* t, const uint32_t* ids, size_t n, char** out, size_t* out_len) {
    size_t cap = 64 + n * 8, len = 0;
    char* o = malloc(cap);
    if (!o) return mx_fail(MX_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char buf[64];
        size_t l;
        const uint8_t* p = mx_tok_token_bytes(t, ids[i], &l);
        if (!p) {
            const char* nm = special_name(t, ids[i], buf, sizeof buf);
            if (!nm) {
                free(o);
                return mx_fail(MX_EINVAL, "token id %u at position %zu is not in the vocabulary (%u ids)", ids[i], i,
                               t->vocab);
            }
            p = (const uint8_t*)nm; l = strlen(nm);
        }
        if (len + l + 1 > cap) {
            while (len + l + 1 > cap) cap *= 2;
            char* x = realloc(o, cap);
            if (!x) { free(o); return mx_fail(MX_ENOMEM, "out of memory"); }
            o = x;
        }
        memcpy(o + len, p, l);
        len += l;
    }
    o[len] = 0;
    *out = o; *out_len = len;
    return 0;
}
