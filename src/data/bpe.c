/* bpe.c: train the tiny byte-level BPE (deterministic) and write a tiktoken rank file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mxlm/data.h"
#include "mxlm/mx.h"
#include "mxlm/tokenizer.h"
#include "mxlm/util.h"

/* ---- a hash map from byte strings (pieces) to counts ---- */
typedef struct { uint64_t h; uint32_t off, len; int64_t count; } wslot;
typedef struct { wslot* s; uint64_t cap, n; char* blob; size_t blen, bcap; int oom; } wmap;

static uint64_t fnv(const char* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= (uint8_t)p[i]; h *= 1099511628211ull; }
    return h | 1; /* 0 marks an empty slot */
}
static int wmap_grow(wmap* m) {
    uint64_t cap = m->cap ? m->cap * 2 : 1 << 16;
    wslot* s = calloc(cap, sizeof *s);
    if (!s) return -1;
    for (uint64_t i = 0; i < m->cap; i++)
        if (m->s[i].h) {
            uint64_t j = m->s[i].h & (cap - 1);
            while (s[j].h) j = (j + 1) & (cap - 1);
            s[j] = m->s[i];
        }
    free(m->s); m->s = s; m->cap = cap;
    return 0;
}
static void wmap_add(const char* p, size_t n, void* ctx) {
    wmap* m = ctx;
    if (m->oom) return;
    if ((m->n + 1) * 2 > m->cap && wmap_grow(m)) { m->oom = 1; return; }
    uint64_t h = fnv(p, n);
    uint64_t j = h & (m->cap - 1);
    while (m->s[j].h) {
        if (m->s[j].h == h && m->s[j].len == n && !memcmp(m->blob + m->s[j].off, p, n)) { m->s[j].count++; return; }
        j = (j + 1) & (m->cap - 1);
    }
    if (m->blen + n > m->bcap) {
        size_t c = m->bcap ? m->bcap : 1 << 20;
        while (m->blen + n > c) c *= 2;
        char* b = realloc(m->blob, c);
        if (!b) { m->oom = 1; return; }
        m->blob = b; m->bcap = c;
    }
    memcpy(m->blob + m->blen, p, n);
    m->s[j] = (wslot){h, (uint32_t)m->blen, (uint32_t)n, 1};
    m->blen += n; m->n++;
}

/* ---- pair counts: key (a << 16 | b), open addressing, no deletion ---- */
typedef struct { uint32_t key; int64_t count; } pslot;
typedef struct { pslot* s; uint64_t cap, n; } pmap;
#define PEMPTY UINT32_MAX
static inline uint64_t phash(uint32_t k) { uint64_t x = k * 0x9E3779B97F4A7C15ull; return x ^ (x >> 29); }
static int pmap_add(pmap* m, uint32_t key, int64_t d) {
    if ((m->n + 1) * 2 > m->cap) {
        uint64_t cap = m->cap ? m->cap * 2 : 1 << 16;
        pslot* s = malloc(cap * sizeof *s);
        if (!s) return -1;
        for (uint64_t i = 0; i < cap; i++) s[i].key = PEMPTY;
        for (uint64_t i = 0; i < m->cap; i++)
            if (m->s[i].key != PEMPTY) {
                uint64_t j = phash(m->s[i].key) & (cap - 1);
                while (s[j].key != PEMPTY) j = (j + 1) & (cap - 1);
                s[j] = m->s[i];
            }
        free(m->s); m->s = s; m->cap = cap;
    }
    uint64_t j = phash(key) & (m->cap - 1);
    while (m->s[j].key != PEMPTY && m->s[j].key != key) j = (j + 1) & (m->cap - 1);
    if (m->s[j].key == PEMPTY) { m->s[j].key = key; m->s[j].count = 0; m->n++; }
    m->s[j].count += d;
    return 0;
}

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static size_t b64enc(const uint8_t* p, size_t n, char* o) {
    size_t j = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        o[j++] = k_b64[v >> 18 & 63]; o[j++] = k_b64[v >> 12 & 63];
        o[j++] = i + 1 < n ? k_b64[v >> 6 & 63] : '=';
        o[j++] = i + 2 < n ? k_b64[v & 63] : '=';
    }
    return j;
}

int mx_bpe_train(const char* const* inputs, int n_inputs, int64_t n_docs, int vocab, const char* out_path) {
    if (vocab < 257 || vocab > 65536) return mx_fail(MX_EINVAL, "bpe: vocabulary %d out of range (257..65536)", vocab);
    int n_tok = vocab - 1; /* ranks; the last id is <|endoftext|> */
    wmap wm = {0};
    mx_docs* d = NULL;
    int rc = mx_docs_open(&d, inputs, n_inputs, MX_FMT_AUTO, "text");
    if (rc) return rc;
    const char* t; size_t l; const char* f; int64_t ln;
    int64_t nd = 0;
    int k = 0;
    while (nd < n_docs && (k = mx_docs_next(d, &t, &l, &f, &ln)) == 1) {
        if (mx_utf8_valid_prefix(t, l) != l) { rc = mx_fail(MX_EFORMAT, "%s:%lld: invalid UTF-8", f, (long long)ln); break; }
        rc = mx_tok_split(MX_PAT_R50K, t, l, wmap_add, &wm);
        if (rc) break;
        nd++;
    }
    if (!rc && nd < n_docs && k < 0) rc = k;
    mx_docs_close(d);
    if (!rc && wm.oom) rc = mx_fail(MX_ENOMEM, "out of memory");
    /* words as symbol sequences */
    uint64_t nw = wm.n;
    uint16_t** sym = NULL; uint32_t* slen = NULL; int64_t* wc = NULL;
    uint8_t** tb = NULL; uint32_t* tl = NULL; pmap pm = {0};
    char* out = NULL;
    if (rc) goto done;
    sym = calloc(nw ? nw : 1, sizeof *sym); slen = calloc(nw ? nw : 1, sizeof *slen); wc = calloc(nw ? nw : 1, sizeof *wc);
    tb = calloc((size_t)n_tok, sizeof *tb); tl = calloc((size_t)n_tok, sizeof *tl);
    if (!sym || !slen || !wc || !tb || !tl) { rc = mx_fail(MX_ENOMEM, "out of memory"); goto done; }
    /* words in table order: the counts are sums and ties go to the smaller pair key, so the result does not
     * depend on the order (and FNV-1a + fixed growth make the order itself the same everywhere) */
    {
        uint64_t w = 0;
        wslot** order = malloc((nw ? nw : 1) * sizeof *order);
        if (!order) { rc = mx_fail(MX_ENOMEM, "out of memory"); goto done; }
        for (uint64_t i = 0; i < wm.cap; i++) if (wm.s[i].h) order[w++] = &wm.s[i];
        for (uint64_t i = 0; i < nw; i++) {
            wslot* s = order[i];
            sym[i] = malloc(s->len * sizeof **sym);
            if (!sym[i]) { free(order); rc = mx_fail(MX_ENOMEM, "out of memory"); goto done; }
            for (uint32_t j = 0; j < s->len; j++) sym[i][j] = (uint8_t)wm.blob[s->off + j];
            slen[i] = s->len; wc[i] = s->count;
        }
        free(order);
    }
    for (int b = 0; b < 256; b++) {
        tb[b] = malloc(1); tb[b][0] = (uint8_t)b; tl[b] = 1;
    }
    for (uint64_t i = 0; i < nw; i++)
        for (uint32_t j = 0; j + 1 < slen[i]; j++)
            if (pmap_add(&pm, (uint32_t)sym[i][j] << 16 | sym[i][j + 1], wc[i])) { rc = mx_fail(MX_ENOMEM, "out of memory"); goto done; }
    int next = 256;
    while (next < n_tok) {
        /* the most frequent pair; ties to the smaller key */
        int64_t best = 0; uint32_t bk = PEMPTY;
        for (uint64_t i = 0; i < pm.cap; i++)
            if (pm.s[i].key != PEMPTY && (pm.s[i].count > best || (pm.s[i].count == best && best > 0 && pm.s[i].key < bk))) {
                best = pm.s[i].count; bk = pm.s[i].key;
            }
        if (best <= 0) { rc = mx_fail(MX_EINVAL, "bpe: the corpus is too small for %d tokens (%d made)", vocab, next); goto done; }
        uint16_t a = (uint16_t)(bk >> 16), b = (uint16_t)(bk & 0xffff);
        /* the merged bytes; if a token with these bytes exists, reuse its id */
        uint32_t ml = tl[a] + tl[b];
        uint8_t* mb = malloc(ml);
        memcpy(mb, tb[a], tl[a]); memcpy(mb + tl[a], tb[b], tl[b]);
        int id = -1;
        for (int q = 0; q < next; q++) if (tl[q] == ml && !memcmp(tb[q], mb, ml)) { id = q; break; }
        if (id < 0) { id = next++; tb[id] = mb; tl[id] = ml; } else free(mb);
        for (uint64_t i = 0; i < nw; i++) {
            uint16_t* s = sym[i]; uint32_t n = slen[i];
            int has = 0;
            for (uint32_t j = 0; j + 1 < n; j++) if (s[j] == a && s[j + 1] == b) { has = 1; break; }
            if (!has) continue;
            int64_t c = wc[i];
            for (uint32_t j = 0; j + 1 < n; j++) pmap_add(&pm, (uint32_t)s[j] << 16 | s[j + 1], -c);
            uint32_t o = 0;
            for (uint32_t j = 0; j < n;) {
                if (j + 1 < n && s[j] == a && s[j + 1] == b) { s[o++] = (uint16_t)id; j += 2; }
                else s[o++] = s[j++];
            }
            slen[i] = o;
            for (uint32_t j = 0; j + 1 < o; j++)
                if (pmap_add(&pm, (uint32_t)s[j] << 16 | s[j + 1], c)) { rc = mx_fail(MX_ENOMEM, "out of memory"); goto done; }
        }
    }
    /* write: rank order */
    {
        size_t cap = 64, len = 0;
        for (int r = 0; r < n_tok; r++) cap += (tl[r] + 2) / 3 * 4 + 8;
        out = malloc(cap);
        if (!out) { rc = mx_fail(MX_ENOMEM, "out of memory"); goto done; }
        for (int r = 0; r < n_tok; r++) {
            len += b64enc(tb[r], tl[r], out + len);
            len += (size_t)sprintf(out + len, " %d\n", r);
        }
        rc = mx_write_atomic(out_path, out, len);
    }
done:
    free(out);
    if (sym) for (uint64_t i = 0; i < nw; i++) free(sym[i]);
    if (tb) for (int r = 0; r < n_tok; r++) free(tb[r]);
    free(sym); free(slen); free(wc); free(tb); free(tl); free(pm.s);
    free(wm.s); free(wm.blob);
    return rc;
}
