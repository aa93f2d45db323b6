/* reader.c: line reader over plain, gzip and zstd files (detected by magic bytes); the
 * JSON Lines "text" field is extracted by the one JSON reader (src/util/json.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "mxlm/data.h"
#include "mxlm/mx.h"
#include "mxlm/util.h"

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
    if (mx_pathf(r->path, sizeof r->path, "%s", path)) { free(r); return MX_EINVAL; }
    r->f = mx_fopen_input(path, NULL);
    if (!r->f) { free(r); return MX_EIO; }
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
