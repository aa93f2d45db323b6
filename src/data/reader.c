/* reader.c: line reader over plain, gzip and zstd files (detected by magic bytes),
 * and a strict JSON Lines "text" field extractor. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "mxlm/data.h"
#include "mxlm/mx.h"

enum { K_PLAIN, K_GZ, K_ZST };
struct mx_reader {
    char path[1024];
    FILE* f;
    int kind;
    uint8_t* in; size_t in_len, in_pos, in_cap; int in_eof;
    char* buf; size_t len, pos, cap;     /* decompressed data; pos = start of next line */
    int out_eof;                         /* no more decompressed data */
    z_stream zs; int zs_init, gz_member_done;
    ZSTD_DStream* zd; size_t zd_last;    /* last ZSTD_decompressStream hint: 0 = frame complete */
    int64_t line_no;
    uint64_t bytes_read;
};

int mx_reader_open(mx_reader** out, const char* path) {
    *out = NULL;
    mx_reader* r = calloc(1, sizeof *r);
    if (!r) return mx_fail(MX_ENOMEM, "out of memory");
    snprintf(r->path, sizeof r->path, "%s", path);
    r->f = fopen(path, "rb");
    if (!r->f) { int e = errno; free(r); return mx_fail(MX_EIO, "%s: cannot open: %s", path, strerror(e)); }
    r->in_cap = 1 << 17; r->cap = 1 << 20;
    r->in = malloc(r->in_cap); r->buf = malloc(r->cap + 1);
    if (!r->in || !r->buf) { mx_reader_close(r); return mx_fail(MX_ENOMEM, "out of memory"); }
    r->in_len = fread(r->in, 1, r->in_cap, r->f);
    r->bytes_read = r->in_len;
    if (ferror(r->f)) { mx_reader_close(r); return mx_fail(MX_EIO, "%s: read error", path); }
    if (r->in_len < r->in_cap) r->in_eof = 1;
    r->kind = K_PLAIN;
    if (r->in_len >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b) r->kind = K_GZ;
    else if (r->in_len >= 4 && r->in[0] == 0x28 && r->in[1] == 0xb5 && r->in[2] == 0x2f && r->in[3] == 0xfd)
        r->kind = K_ZST;
    if (r->kind == K_GZ) {
        if (inflateInit2(&r->zs, 15 + 32) != Z_OK) { mx_reader_close(r); return mx_fail(MX_ENOMEM, "zlib init failed"); }
        r->zs_init = 1;
    } else if (r->kind == K_ZST) {
        r->zd = ZSTD_createDStream();
        if (!r->zd) { mx_reader_close(r); return mx_fail(MX_ENOMEM, "zstd init failed"); }
        ZSTD_DCtx_setParameter(r->zd, ZSTD_d_windowLogMax, 31);
        r->zd_last = 1;
    }
    *out = r;
    return 0;
}

void mx_reader_close(mx_reader* r) {
    if (!r) return;
    if (r->f) fclose(r->f);
    if (r->zs_init) inflateEnd(&r->zs);
    if (r->zd) ZSTD_freeDStream(r->zd);
    free(r->in); free(r->buf); free(r);
}

int64_t mx_reader_line_no(const mx_reader* r) { return r->line_no; }
uint64_t mx_reader_bytes_read(const mx_reader* r) { return r->bytes_read; }
const char* mx_reader_path(const mx_reader* r) { return r->path; }

static int refill_in(mx_reader* r) {
    if (r->in_pos < r->in_len || r->in_eof) return 0;
    r->in_len = fread(r->in, 1, r->in_cap, r->f);
    r->in_pos = 0;
    r->bytes_read += r->in_len;
    if (ferror(r->f)) return mx_fail(MX_EIO, "%s: read error", r->path);
    if (r->in_len == 0) r->in_eof = 1;
    return 0;
}

/* Append more decompressed bytes to buf (compacting first). */
static int fill(mx_reader* r) {
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos; r->pos = 0;
    }
    if (r->len == r->cap) {
        size_t cap = r->cap * 2;
        char* x = realloc(r->buf, cap + 1);
        if (!x) return mx_fail(MX_ENOMEM, "%s: out of memory (line longer than %zu bytes)", r->path, r->cap);
        r->buf = x; r->cap = cap;
    }
    for (;;) {
        int rc = refill_in(r);
        if (rc) return rc;
        if (r->kind == K_PLAIN) {
            size_t n = r->in_len - r->in_pos, room = r->cap - r->len;
            if (n > room) n = room;
            memcpy(r->buf + r->len, r->in + r->in_pos, n);
            r->in_pos += n; r->len += n;
            if (n == 0 && r->in_eof) r->out_eof = 1;
            return 0;
        }
        if (r->kind == K_GZ) {
            if (r->in_pos == r->in_len && r->in_eof) {
                if (!r->gz_member_done)
                    return mx_fail(MX_EFORMAT, "%s: truncated gzip stream (line %lld)", r->path, (long long)r->line_no + 1);
                r->out_eof = 1;
                return 0;
            }
            if (r->gz_member_done) { /* another gzip member follows */
                if (inflateReset(&r->zs) != Z_OK) return mx_fail(MX_EFORMAT, "%s: zlib reset failed", r->path);
                r->gz_member_done = 0;
            }
            r->zs.next_in = r->in + r->in_pos; r->zs.avail_in = (uInt)(r->in_len - r->in_pos);
            r->zs.next_out = (Bytef*)r->buf + r->len; r->zs.avail_out = (uInt)(r->cap - r->len);
            int z = inflate(&r->zs, Z_NO_FLUSH);
            size_t got = (r->cap - r->len) - r->zs.avail_out;
            r->in_pos = r->in_len - r->zs.avail_in;
            r->len += got;
            if (z == Z_STREAM_END) r->gz_member_done = 1;
            else if (z != Z_OK && z != Z_BUF_ERROR)
                return mx_fail(MX_EFORMAT, "%s: corrupt gzip data near compressed byte %llu: %s", r->path,
                               (unsigned long long)(r->bytes_read - (r->in_len - r->in_pos)),
                               r->zs.msg ? r->zs.msg : "inflate error");
            if (got) return 0;
            continue;
        }
        /* zstd */
        if (r->in_pos == r->in_len && r->in_eof) {
            if (r->zd_last != 0)
                return mx_fail(MX_EFORMAT, "%s: truncated zstd stream (line %lld)", r->path, (long long)r->line_no + 1);
            r->out_eof = 1;
            return 0;
        }
        ZSTD_inBuffer ib = {r->in, r->in_len, r->in_pos};
        ZSTD_outBuffer ob = {r->buf + r->len, r->cap - r->len, 0};
        size_t z = ZSTD_decompressStream(r->zd, &ob, &ib);
        if (ZSTD_isError(z))
            return mx_fail(MX_EFORMAT, "%s: corrupt zstd data near compressed byte %llu: %s", r->path,
                           (unsigned long long)(r->bytes_read - (r->in_len - ib.pos)), ZSTD_getErrorName(z));
        r->zd_last = z;
        r->in_pos = ib.pos;
        r->len += ob.pos;
        if (ob.pos) return 0;
    }
}

int mx_reader_line(mx_reader* r, const char** line, size_t* len) {
    size_t scan = r->pos;
    for (;;) {
        char* nl = memchr(r->buf + scan, '\n', r->len - scan);
        if (nl) {
            *line = r->buf + r->pos;
            *len = (size_t)(nl - (r->buf + r->pos));
            r->pos = (size_t)(nl - r->buf) + 1;
            r->line_no++;
            return 1;
        }
        if (r->out_eof) {
            if (r->pos == r->len) return 0;
            *line = r->buf + r->pos; *len = r->len - r->pos;   /* last line without newline */
            r->buf[r->len] = 0;
            r->pos = r->len;
            r->line_no++;
            return 1;
        }
        size_t off = scan - r->pos;
        int rc = fill(r);
        if (rc) return rc;
        scan = r->pos + off;
    }
}

/* ---- JSON ----------------------------------------------------------------------- */
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
 * (at most the raw length) and set *olen. Lone surrogates become U+FFFD. */
static int jstring(jp* p, char* out, size_t* olen) {
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
                else { p->i = save; u = 0xFFFD; }
            } else if (u >= 0xD800 && u <= 0xDFFF) u = 0xFFFD;
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
static int jvalue(jp* p, int depth);
static int jliteral(jp* p, const char* lit) {
    size_t l = strlen(lit);
    if (p->i + l > p->n || memcmp(p->s + p->i, lit, l)) { p->err = "invalid value"; return -1; }
    p->i += l;
    return 0;
}
static int jnumber(jp* p) {
    size_t st = p->i;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    size_t d = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i == d) { p->err = "invalid value"; return -1; }
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++; d = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
        if (p->i == d) { p->err = "bad number"; return -1; }
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        d = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
        if (p->i == d) { p->err = "bad number"; return -1; }
    }
    return p->i > st ? 0 : -1;
}
static int jvalue(jp* p, int depth) {
    if (depth > 64) { p->err = "nesting too deep"; return -1; }
    ws(p);
    if (p->i >= p->n) { p->err = "unexpected end of line"; return -1; }
    char c = p->s[p->i];
    if (c == '"') return jstring(p, NULL, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        p->i++; ws(p);
        if (p->i < p->n && p->s[p->i] == close) { p->i++; return 0; }
        for (;;) {
            if (c == '{') {
                ws(p);
                if (jstring(p, NULL, NULL)) return -1;
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
    return jnumber(p);
}

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
        if (jstring(&p, NULL, NULL)) goto bad;
        int is_key = (p.i - ks == klen + 2) && !memcmp(p.s + ks + 1, key, klen);
        ws(&p);
        if (p.i >= p.n || p.s[p.i] != ':') { p.err = "expected ':'"; goto bad; }
        p.i++; ws(&p);
        if (is_key && !found && p.i < p.n && p.s[p.i] == '"') {
            size_t vs = p.i;
            if (jstring(&p, NULL, NULL)) goto bad;
            char* o = malloc(p.i - vs + 1);
            if (!o) return mx_fail(MX_ENOMEM, "out of memory");
            jp q = {line, len, vs, NULL};
            jstring(&q, o, out_len);
            o[*out_len] = 0;
            *out = o;
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

int mx_reader_read_all(mx_reader* r, char** out, size_t* len) {
    *out = NULL; *len = 0;
    while (!r->out_eof) {
        int rc = fill(r);
        if (rc) return rc;
    }
    size_t n = r->len - r->pos;
    char* b = malloc(n + 1);
    if (!b) return mx_fail(MX_ENOMEM, "out of memory");
    memcpy(b, r->buf + r->pos, n);
    b[n] = 0;
    r->pos = r->len;
    *out = b; *len = n;
    return 0;
}
