/* shard.c: llm.c token shards (.bin): open + validate by mmap, atomic write. */
#include "mxlm/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxlm/mx.h"
#include "mxlm/util.h"

static int32_t rd_i32le(const uint8_t* p) {
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}
static void wr_i32le(uint8_t* p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

int mx_shard_open(mx_shard* s, const char* path) {
    memset(s, 0, sizeof *s);
    if (!path) return mx_fail(MX_EINVAL, "shard: no path");
    if (mx_pathf(s->path, sizeof s->path, "%s", path)) return MX_EINVAL;
    int fd = mx_open_input(path, "shard");
    if (fd < 0) return fd == -2 ? MX_EFORMAT : MX_EIO; /* a directory, a FIFO: not a shard */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno; close(fd);
        return mx_fail(MX_EIO, "%s: cannot stat shard: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) { close(fd); return mx_fail(MX_EFORMAT, "%s: not a regular file", path); }
    const size_t hdr = MX_SHARD_HEADER_INTS * 4;
    if ((uint64_t)st.st_size < hdr) {
        close(fd);
        return mx_fail(MX_EFORMAT, "%s: truncated shard: %lld bytes, the header alone is %zu bytes", path,
                       (long long)st.st_size, hdr);
    }
    void* map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return mx_fail(MX_EIO, "%s: cannot map shard: %s", path, strerror(e));
    const uint8_t* h = (const uint8_t*)map;
    int32_t magic = rd_i32le(h), version = rd_i32le(h + 4), ntok = rd_i32le(h + 8);
    int rc = 0;
    if (magic != MX_SHARD_MAGIC)
        rc = mx_fail(MX_EFORMAT, "%s: not a token shard: magic %d at offset 0, expected %d", path, magic,
                     MX_SHARD_MAGIC);
    else if (version != 1 && version != 2)
        rc = mx_fail(MX_EFORMAT, "%s: unsupported shard version %d at offset 4 (1: uint16, 2: uint32)", path, version);
    else if (ntok < 0)
        rc = mx_fail(MX_EFORMAT, "%s: negative token count %d at offset 8", path, ntok);
    else {
        uint64_t want = hdr + (uint64_t)ntok * (version == 1 ? 2u : 4u);
        if ((uint64_t)st.st_size != want)
            rc = mx_fail(MX_EFORMAT, "%s: header says %d tokens (%llu bytes) but the file has %lld bytes%s", path,
                         ntok, (unsigned long long)want, (long long)st.st_size,
                         (uint64_t)st.st_size < want ? " (truncated)" : " (trailing data)");
    }
    if (rc) { munmap(map, (size_t)st.st_size); return rc; }
    s->version = version;
    s->n_tokens = ntok;
    s->map = map;
    s->map_len = (size_t)st.st_size;
    s->tokens = h + hdr;
    return 0;
}

void mx_shard_close(mx_shard* s) {
    if (!s) return;
    if (s->map) munmap(s->map, s->map_len);
    s->map = NULL; s->map_len = 0; s->tokens = NULL; s->n_tokens = 0;
}

int mx_shard_max_token(const mx_shard* s, uint32_t* max_out) {
    uint32_t m = 0;
    for (int64_t i = 0; i < s->n_tokens; i++) { uint32_t t = mx_shard_token(s, i); if (t > m) m = t; }
    *max_out = m;
    return 0;
}

int mx_shard_check_vocab(const mx_shard* s, uint32_t vocab) {
    for (int64_t i = 0; i < s->n_tokens; i++) {
        uint32_t t = mx_shard_token(s, i);
        if (t >= vocab)
            return mx_fail(MX_EFORMAT, "%s: token %u at index %lld (byte offset %lld) is >= the vocabulary size %u",
                           s->path, t, (long long)i,
                           (long long)(MX_SHARD_HEADER_INTS * 4 + i * (s->version == 1 ? 2 : 4)), vocab);
    }
    return 0;
}

int mx_shard_tok_record(const mx_shard* s, char* buf, size_t n) {
    if (n) buf[0] = 0;
    if (!s->map || s->map_len < MX_SHARD_HEADER_INTS * 4) return 0;
    const uint8_t* h = (const uint8_t*)s->map;
    int32_t len = rd_i32le(h + 16);
    if ((uint32_t)rd_i32le(h + 12) != MX_SHARD_TOK_TAG || len <= 0 || len > MX_SHARD_TOK_MAX || (size_t)len >= n) return 0;
    memcpy(buf, h + 20, (size_t)len);
    buf[len] = 0;
    return (int)strlen(buf);
}

int mx_shard_write(const char* path, const uint32_t* tokens, int64_t n, int version) {
    return mx_shard_write_tok(path, tokens, n, version, NULL);
}

int mx_shard_write_tok(const char* path, const uint32_t* tokens, int64_t n, int version, const char* tok_record) {
    const size_t rlen = tok_record ? strlen(tok_record) : 0;
    if (rlen > MX_SHARD_TOK_MAX)
        return mx_fail(MX_EINVAL, "%s: tokenizer record of %zu bytes, more than the header holds (%d)", path, rlen,
                       MX_SHARD_TOK_MAX);
    if (version != 1 && version != 2) return mx_fail(MX_EINVAL, "%s: shard version %d (1 or 2)", path, version);
    if (n < 0 || n > INT32_MAX) return mx_fail(MX_EINVAL, "%s: token count %lld out of range", path, (long long)n);
    if (version == 1)
        for (int64_t i = 0; i < n; i++)
            if (tokens[i] > 65535)
                return mx_fail(MX_EINVAL, "%s: token %u at index %lld does not fit a version-1 (uint16) shard", path,
                               tokens[i], (long long)i);
    mx_outfile o;
    int rc = mx_out_open(&o, path);
    if (rc) return rc;
    uint8_t hdr[MX_SHARD_HEADER_INTS * 4];
    memset(hdr, 0, sizeof hdr);
    wr_i32le(hdr, MX_SHARD_MAGIC); wr_i32le(hdr + 4, (uint32_t)version); wr_i32le(hdr + 8, (uint32_t)n);
    if (rlen) { wr_i32le(hdr + 12, MX_SHARD_TOK_TAG); wr_i32le(hdr + 16, (uint32_t)rlen); memcpy(hdr + 20, tok_record, rlen); }
    mx_out_write(&o, hdr, sizeof hdr);
    enum { CHUNK = 1 << 16 };
    uint8_t* buf = malloc((size_t)CHUNK * 4);
    if (!buf) { mx_out_abort(&o); return mx_fail(MX_ENOMEM, "out of memory"); }
    for (int64_t i = 0; !o.err && i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        size_t k = 0;
        for (int64_t j = 0; j < m; j++) {
            uint32_t t = tokens[i + j];
            buf[k++] = (uint8_t)t; buf[k++] = (uint8_t)(t >> 8);
            if (version == 2) { buf[k++] = (uint8_t)(t >> 16); buf[k++] = (uint8_t)(t >> 24); }
        }
        mx_out_write(&o, buf, k);
    }
    free(buf);
    return mx_out_commit(&o, "shard");
}
