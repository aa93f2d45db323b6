/* tokrec.c: the tokenizer record (tokrec.h): made from a tokenizer, kept in
 * shard headers and in a run directory's tokenizer.txt, and opened again
 * with a check of the vocabulary size and the token table's CRC-32. */
#include "mxlm/tokrec.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "mxlm/data.h"
#include "mxlm/mx.h"
#include "mxlm/util.h"

uint32_t mx_tokrec_crc(const mx_tokenizer* t) {
    uLong c = crc32(0L, Z_NULL, 0);
    const uint32_t V = mx_tok_vocab_size(t);
    for (uint32_t id = 0; id < V; id++) {
        size_t len = 0;
        const uint8_t* p = mx_tok_token_bytes(t, id, &len);
        unsigned char l4[4] = {(unsigned char)len, (unsigned char)(len >> 8), (unsigned char)(len >> 16),
                               (unsigned char)(len >> 24)};
        c = crc32(c, l4, 4);
        if (p && len) c = crc32(c, p, (uInt)len);
    }
    return (uint32_t)c;
}

int mx_tokrec_make(mx_tokrec* r, const mx_tokenizer* t, const char* encoding, const char* ranks) {
    memset(r, 0, sizeof *r);
    if ((!encoding || !*encoding) && (!ranks || !*ranks))
        return mx_fail(MX_EINVAL, "tokenizer record: neither an encoding nor a rank file");
    if (encoding && snprintf(r->encoding, sizeof r->encoding, "%s", encoding) >= (int)sizeof r->encoding)
        return mx_fail(MX_EINVAL, "tokenizer record: encoding name too long");
    if (ranks && snprintf(r->ranks, sizeof r->ranks, "%s", ranks) >= (int)sizeof r->ranks)
        return mx_fail(MX_EINVAL, "tokenizer record: rank file path too long: %s", ranks);
    for (const char* s = r->ranks; *s; s++)
        if (*s == '\n' || *s == '\r') return mx_fail(MX_EINVAL, "tokenizer record: a line break in the rank file path");
    r->pattern = mx_tok_pattern_of(t);
    r->vocab = mx_tok_vocab_size(t);
    r->crc = mx_tokrec_crc(t);
    return MX_OK;
}

int mx_tokrec_format(const mx_tokrec* r, char* buf, size_t n) {
    mx_sbuf b = {0};
    if (r->encoding[0]) mx_sb_printf(&b, "encoding = %s\n", r->encoding);
    if (r->ranks[0]) mx_sb_printf(&b, "ranks = %s\n", r->ranks);
    mx_sb_printf(&b, "pattern = %s\nvocab = %u\ncrc32 = %08x\n", mx_tok_pattern_name(r->pattern), r->vocab, r->crc);
    int len = b.oom ? -1 : (int)b.n;
    if (n) snprintf(buf, n, "%s", b.s ? b.s : "");
    free(b.s);
    return len;
}

int mx_tokrec_parse(const char* text, const char* origin, mx_tokrec* r) {
    memset(r, 0, sizeof *r);
    int have_pat = 0, have_vocab = 0, have_crc = 0, lineno = 0;
    for (const char* p = text; *p;) {
        const char* e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[1200];
        lineno++;
        if (len >= sizeof line) return mx_fail(MX_EFORMAT, "%s:%d: line too long", origin, lineno);
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (e ? 1 : 0);
        if (!line[0] || line[0] == '#') continue;
        char* eq = strstr(line, " = ");
        if (!eq) return mx_fail(MX_EFORMAT, "%s:%d: expected 'key = value'", origin, lineno);
        *eq = 0;
        const char *k = line, *v = eq + 3;
        char* end = NULL;
        if (!strcmp(k, "encoding")) snprintf(r->encoding, sizeof r->encoding, "%s", v);
        else if (!strcmp(k, "ranks")) snprintf(r->ranks, sizeof r->ranks, "%s", v);
        else if (!strcmp(k, "pattern")) {
            r->pattern = mx_tok_pattern_parse(v);
            if (r->pattern < 0) return mx_fail(MX_EFORMAT, "%s:%d: unknown pattern '%s'", origin, lineno, v);
            have_pat = 1;
        } else if (!strcmp(k, "vocab")) {
            unsigned long x = strtoul(v, &end, 10);
            if (end == v || *end || x == 0 || x > UINT32_MAX)
                return mx_fail(MX_EFORMAT, "%s:%d: bad vocab '%s'", origin, lineno, v);
            r->vocab = (uint32_t)x;
            have_vocab = 1;
        } else if (!strcmp(k, "crc32")) {
            unsigned long x = strtoul(v, &end, 16);
            if (end == v || *end || x > UINT32_MAX) return mx_fail(MX_EFORMAT, "%s:%d: bad crc32 '%s'", origin, lineno, v);
            r->crc = (uint32_t)x;
            have_crc = 1;
        } /* other keys: ignored (later versions) */
    }
    if (!r->encoding[0] && !r->ranks[0]) return mx_fail(MX_EFORMAT, "%s: no 'encoding' or 'ranks' line", origin);
    if (!have_pat || !have_vocab || !have_crc)
        return mx_fail(MX_EFORMAT, "%s: a tokenizer record needs pattern, vocab and crc32 lines", origin);
    return MX_OK;
}

static int file_exists(const char* p) { struct stat st; return stat(p, &st) == 0 && S_ISREG(st.st_mode); }

int mx_tokrec_open(const mx_tokrec* r, mx_tokenizer** t) {
    *t = NULL;
    int rc;
    const char* from;
    if (r->ranks[0] && (file_exists(r->ranks) || !r->encoding[0])) {
        if (!file_exists(r->ranks))
            return mx_fail(MX_EIO, "the recorded rank file %s is not there (give the tokenizer with --encoding or "
                                   "--ranks/--pattern)", r->ranks);
        rc = mx_tok_open(t, r->ranks, r->pattern);
        from = r->ranks;
    } else {
        rc = mx_tok_open_encoding(t, r->encoding);
        from = r->encoding;
    }
    if (rc) return rc;
    uint32_t crc = mx_tokrec_crc(*t);
    if (mx_tok_vocab_size(*t) != r->vocab || crc != r->crc || mx_tok_pattern_of(*t) != r->pattern) {
        rc = mx_fail(MX_EFORMAT, "tokenizer %s (vocab %u, pattern %s, crc32 %08x) is not the one recorded (vocab %u, "
                                 "pattern %s, crc32 %08x)", from, mx_tok_vocab_size(*t),
                     mx_tok_pattern_name(mx_tok_pattern_of(*t)), crc, r->vocab, mx_tok_pattern_name(r->pattern), r->crc);
        mx_tok_free(*t);
        *t = NULL;
    }
    return rc;
}

int mx_tokrec_of_shard(const mx_shard* s, mx_tokrec* r) {
    char buf[MX_SHARD_TOK_MAX + 1];
    if (mx_shard_tok_record(s, buf, sizeof buf) <= 0) return 0;
    char origin[1100];
    snprintf(origin, sizeof origin, "%s (tokenizer record)", s->path);
    int rc = mx_tokrec_parse(buf, origin, r);
    return rc ? rc : 1;
}

int mx_tokrec_read_run(const char* dir, mx_tokrec* r) {
    char p[1200];
    if (mx_pathf(p, sizeof p, "%s/tokenizer.txt", dir)) return MX_EINVAL;
    FILE* f = mx_fopen_input(p, NULL);
    if (!f) {
        if (errno == ENOENT) return 0;
        return MX_EIO;
    }
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    int rc = mx_tokrec_parse(buf, p, r);
    return rc ? rc : 1;
}

int mx_tokrec_record_run(const char* dir, const mx_shard* s) {
    mx_tokrec r;
    int rc = mx_tokrec_of_shard(s, &r);
    if (rc <= 0) return 0; /* none, or not one we can read: nothing recorded */
    char abs[PATH_MAX];
    if (r.ranks[0] && r.ranks[0] != '/') { /* relative to where prep ran: here, else beside the shard */
        char near[2200];
        const char* slash = strrchr(s->path, '/');
        const int fits = !mx_pathf(near, sizeof near, "%.*s/%s", slash ? (int)(slash - s->path) : 1,
                                   slash ? s->path : ".", r.ranks);
        if ((realpath(r.ranks, abs) || (fits && realpath(near, abs))) && strlen(abs) < sizeof r.ranks)
            memcpy(r.ranks, abs, strlen(abs) + 1);
    } else if (!r.ranks[0] && !strcmp(r.encoding, "tiny") && realpath(MX_TINY_RANKS, abs) && strlen(abs) < sizeof r.ranks) {
        memcpy(r.ranks, abs, strlen(abs) + 1);
    }
    char text[2048], p[1200];
    int len = mx_tokrec_format(&r, text, sizeof text);
    if (len < 0 || len >= (int)sizeof text) return mx_fail(MX_EINVAL, "tokenizer record too long");
    if (mx_pathf(p, sizeof p, "%s/tokenizer.txt", dir)) return MX_EINVAL;
    rc = mx_write_atomic(p, text, (size_t)len);
    return rc ? rc : 1;
}

void mx_tokrec_describe(const mx_tokrec* r, char* buf, size_t n) {
    snprintf(buf, n, "%s %s (vocab %u, crc32 %08x)", r->ranks[0] && !r->encoding[0] ? "ranks" : "encoding",
             r->ranks[0] && !r->encoding[0] ? r->ranks : r->encoding, r->vocab, r->crc);
}

/* The first record seen (*have, into first / first_what) or a comparison with it. */
static int agree_one(const mx_tokrec* r, const char* what, mx_tokrec* first, char* first_what, size_t fn, int* have) {
    if (!*have) {
        *first = *r;
        snprintf(first_what, fn, "%s", what);
        *have = 1;
        return MX_OK;
    }
    if (r->vocab == first->vocab && r->crc == first->crc) return MX_OK;
    char a[1200], b[1200];
    mx_tokrec_describe(first, a, sizeof a);
    mx_tokrec_describe(r, b, sizeof b);
    return mx_fail(MX_EINVAL, "tokenizers differ: %s is tokenized with %s, but %s with %s (token ids of one "
                              "tokenizer mean other text under another)", first_what, a, what, b);
}

/* The records of every shard matching glob, each compared (agree_one). */
static int agree_glob(const mx_tok_source* s, mx_tokrec* first, char* fw, size_t fn, int* have) {
    glob_t g;
    if (glob(s->glob, 0, NULL, &g) != 0) return MX_OK; /* nothing to compare: the loader says what is missing */
    int rc = MX_OK;
    for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
        mx_shard sh;
        mx_tokrec r;
        if (mx_shard_open(&sh, g.gl_pathv[i]) != 0) continue; /* unreadable: the loader's message */
        const int found = mx_tokrec_of_shard(&sh, &r) > 0;
        mx_shard_close(&sh);
        char what[2400];
        snprintf(what, sizeof what, "%s (%s)", s->what, g.gl_pathv[i]);
        if (found) rc = agree_one(&r, what, first, fw, fn, have);
    }
    globfree(&g);
    return rc;
}

int mx_tokrec_agree(const mx_tok_source* src, int n) {
    mx_tokrec first;
    char fw[2400] = "";
    int have = 0, rc = MX_OK;
    for (int i = 0; i < n && !rc; i++) {
        mx_tokrec r;
        if (src[i].glob) rc = agree_glob(&src[i], &first, fw, sizeof fw, &have);
        else if (src[i].rec) rc = agree_one(src[i].rec, src[i].what, &first, fw, sizeof fw, &have);
        else if (src[i].dir && mx_tokrec_read_run(src[i].dir, &r) == 1)
            rc = agree_one(&r, src[i].what, &first, fw, sizeof fw, &have);
    }
    return rc;
}
