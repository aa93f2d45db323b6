/* prep.c: documents (JSON Lines / text files, plain/gz/zst) -> llm.c token shards,
 * tokenized in parallel over documents (OpenMP), written in document order. */
#include <errno.h>
#include <dirent.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxlm/data.h"
#include "mxlm/mx.h"
#include "mxlm/util.h"
#include "mxlm/shard.h"
#include "mxlm/tokenizer.h"

/* ---- documents ------------------------------------------------------------------ */
struct mx_docs {
    const char* const* paths; int n, cur;
    int format; const char* field;
    mx_reader* r; int cur_jsonl;
    char* text; size_t text_len;     /* current document (owned) */
    uint64_t bytes_done;             /* bytes of the inputs already finished */
};

static int is_jsonl_name(const char* p) {
    const char* base = strrchr(p, '/');
    return strstr(base ? base : p, ".json") != NULL;
}

int mx_docs_open(mx_docs** out, const char* const* paths, int n, int format, const char* field) {
    mx_docs* d = calloc(1, sizeof *d);
    if (!d) return mx_fail(MX_ENOMEM, "out of memory");
    d->paths = paths; d->n = n; d->cur = -1; d->format = format; d->field = field ? field : "text";
    *out = d;
    return 0;
}
void mx_docs_close(mx_docs* d) {
    if (!d) return;
    mx_reader_close(d->r);
    free(d->text);
    free(d);
}
uint64_t mx_docs_bytes_read(const mx_docs* d) { return d->bytes_done + (d->r ? mx_reader_bytes_read(d->r) : 0); }

/* The next document unparsed: a JSON line (*is_json = 1; valid until the next call) or a whole text file. */
static int docs_next_raw(mx_docs* d, const char** raw, size_t* len, const char** file, int64_t* line, int* is_json) {
    free(d->text); d->text = NULL;
    for (;;) {
        if (!d->r) {
            if (d->cur + 1 >= d->n) return 0;
            d->cur++;
            int rc = mx_reader_open(&d->r, d->paths[d->cur]);
            if (rc) return rc;
            d->cur_jsonl = d->format == MX_FMT_JSONL || (d->format == MX_FMT_AUTO && is_jsonl_name(d->paths[d->cur]));
            if (!d->cur_jsonl) { /* the whole file is one document */
                rc = mx_reader_read_all(d->r, &d->text, &d->text_len);
                if (rc) return rc;
                d->bytes_done += mx_reader_bytes_read(d->r);
                mx_reader_close(d->r); d->r = NULL;
                *raw = d->text; *len = d->text_len; *file = d->paths[d->cur]; *line = 0; *is_json = 0;
                return 1;
            }
        }
        const char* ln; size_t ll;
        int k = mx_reader_line(d->r, &ln, &ll);
        if (k < 0) return k;
        if (k == 0) {
            d->bytes_done += mx_reader_bytes_read(d->r);
            mx_reader_close(d->r); d->r = NULL;
            continue;
        }
        while (ll && (ln[ll - 1] == '\r' || ln[ll - 1] == ' ' || ln[ll - 1] == '\t')) ll--;
        size_t s = 0;
        while (s < ll && (ln[s] == ' ' || ln[s] == '\t')) s++;
        if (s == ll) continue; /* blank line */
        *raw = ln; *len = ll; *file = d->paths[d->cur]; *line = mx_reader_line_no(d->r); *is_json = 1;
        return 1;
    }
}

int mx_docs_next(mx_docs* d, const char** text, size_t* len, const char** file, int64_t* line) {
    const char* raw; size_t rl; int js;
    int k = docs_next_raw(d, &raw, &rl, file, line, &js);
    if (k <= 0 || !js) { if (k == 1) { *text = raw; *len = rl; } return k; }
    size_t col;
    char* t; size_t tl;
    int rc = mx_json_get_string(raw, rl, d->field, &t, &tl, &col);
    if (rc) return mx_fail(rc, "%s:%lld: %s", *file, (long long)*line, mx_last_error());
    d->text = t; d->text_len = tl;
    *text = t; *len = tl;
    return 1;
}

int mx_docs_count(const char* const* paths, int n_paths, int format, const char* field, int64_t* n_docs) {
    mx_docs* d = NULL;
    *n_docs = 0;
    int rc = mx_docs_open(&d, paths, n_paths, format, field);
    if (rc) return rc;
    const char* t; size_t l; const char* f; int64_t ln; int js;
    int k;
    while ((k = docs_next_raw(d, &t, &l, &f, &ln, &js)) == 1) (*n_docs)++;
    mx_docs_close(d);
    return k < 0 ? k : 0;
}

/* ---- prep ------------------------------------------------------------------------ */
/* One shard of this run: written as `part` (hidden, beside the target: no shard glob takes it) and renamed
 * onto `target` (the name, or the regular file a link names) once the whole run succeeded; a device or a
 * FIFO (part NULL) is written through at once (util.h, mx_out_resolve). */
typedef struct { char* name; char* target; char* part; int renamed; } shard_out;

typedef struct {
    const char* pattern; int split;      /* 0 train, 1 val */
    uint32_t* buf; int64_t n, cap;
    shard_out* outs; int n_names;        /* the shards written */
    int64_t tokens;
    const char* tok_record;              /* the tokenizer record written in every shard's header (tokrec.h) */
} sink;

/* An output pattern: a plain name, or one %d / %0Nd / %Nd (and %% for a '%'); anything else (%s, %n, two
 * conversions) is refused: the pattern is never handed to printf. *conv = where the %d starts (-1: none). */
int mx_prep_pattern_check(const char* p, int* conv_at, int* width, int* zero) {
    int at = -1, w = 0, z = 0;
    for (int i = 0; p[i]; i++) {
        if (p[i] != '%') continue;
        if (p[i + 1] == '%') { i++; continue; }
        int j = i + 1, zz = 0, ww = 0;
        if (p[j] == '0') { zz = 1; j++; }
        while (p[j] >= '0' && p[j] <= '9' && ww < 100) ww = ww * 10 + (p[j++] - '0');
        if (p[j] != 'd' || at >= 0 || ww > 20)
            return mx_fail(MX_EINVAL, "output pattern '%s': only one %%d (or %%06d) may appear, and %%%% for a '%%'", p);
        at = i; w = ww; z = zz;
        i = j;
    }
    if (conv_at) *conv_at = at;
    if (width) *width = w;
    if (zero) *zero = z;
    return MX_OK;
}

/* The pattern with idx in place of its %d and %% as '%'; -1 when it does not fit out[sz] (never a cut name). */
static int pattern_format(const char* p, int idx, char* out, size_t sz) {
    size_t k = 0;
    int cut = 0;
#define PUT(ch) do { if (k + 1 < sz) out[k++] = (ch); else cut = 1; } while (0)
    for (int i = 0; p[i]; i++) {
        if (p[i] == '%' && p[i + 1] == '%') { PUT('%'); i++; continue; }
        if (p[i] == '%') {
            int j = i + 1, z = 0, w = 0;
            if (p[j] == '0') { z = 1; j++; }
            while (p[j] >= '0' && p[j] <= '9') w = w * 10 + (p[j++] - '0');
            char num[48];
            if (z) snprintf(num, sizeof num, "%0*d", w, idx);
            else snprintf(num, sizeof num, "%*d", w, idx);
            for (const char* c = num; *c; c++) PUT(*c);
            i = j;
            continue;
        }
        PUT(p[i]);
    }
#undef PUT
    out[k] = 0;
    return cut ? -1 : 0;
}

static int sink_name(const sink* s, int idx, char* out, size_t sz) {
    int at = -1;
    int rc = mx_prep_pattern_check(s->pattern, &at, NULL, NULL);
    if (rc) return rc;
    if (at >= 0) {
        if (pattern_format(s->pattern, idx, out, sz))
            return mx_fail(MX_EINVAL, "%s: the shard names are too long (more than %zu bytes)", s->pattern, sz - 1);
    } else {
        if (idx > 0)
            return mx_fail(MX_EINVAL, "%s: more than one shard is needed: put %%d (or %%06d) in the output pattern",
                           s->pattern);
        return mx_pathf(out, sz, "%s", s->pattern);
    }
    return 0;
}
/* The hidden name beside a file: DIR/.BASE.SUFFIX (malloc'ed; NULL when out of memory). */
static char* hidden_name(const char* path, const char* suffix) {
    const char* sl = strrchr(path, '/');
    size_t dl = sl ? (size_t)(sl - path + 1) : 0, n = strlen(path) + strlen(suffix) + 3;
    char* p = malloc(n);
    if (p) snprintf(p, n, "%.*s.%s.%s", (int)dl, path, path + dl, suffix);
    return p;
}

static int sink_flush(sink* s, int64_t n, int version) {
    char name[1200];
    int rc = sink_name(s, s->n_names, name, sizeof name);
    if (rc) return rc;
    shard_out* x = realloc(s->outs, (size_t)(s->n_names + 1) * sizeof *x);
    if (!x) return mx_fail(MX_ENOMEM, "out of memory");
    s->outs = x;
    shard_out* o = &s->outs[s->n_names];
    int direct = 0;
    *o = (shard_out){0};
    rc = mx_out_resolve(name, &o->target, &direct);
    if (rc) return rc;
    o->name = strdup(name);
    if (!direct) o->part = hidden_name(o->target, "part");
    if (!o->name || (!direct && !o->part)) rc = mx_fail(MX_ENOMEM, "out of memory");
    if (!rc) rc = mx_shard_write_tok(direct ? o->target : o->part, s->buf, n, version, s->tok_record);
    if (rc) { free(o->name); free(o->target); free(o->part); return rc; }
    s->n_names++;
    memmove(s->buf, s->buf + n, (size_t)(s->n - n) * sizeof *s->buf);
    s->n -= n;
    return 0;
}
static int sink_add(sink* s, const uint32_t* ids, size_t n, int64_t shard_tokens, int version) {
    if (s->n + (int64_t)n > s->cap) {
        int64_t cap = s->cap ? s->cap : 1 << 16;
        while (cap < s->n + (int64_t)n) cap *= 2;
        uint32_t* x = realloc(s->buf, (size_t)cap * sizeof *x);
        if (!x) return mx_fail(MX_ENOMEM, "out of memory");
        s->buf = x; s->cap = cap;
    }
    memcpy(s->buf + s->n, ids, n * sizeof *ids);
    s->n += (int64_t)n;
    s->tokens += (int64_t)n;
    while (s->n >= shard_tokens) {
        int rc = sink_flush(s, shard_tokens, version);
        if (rc) return rc;
    }
    return 0;
}
/* A failed run: its temporaries removed, and the shards it renamed into place (nothing half-done is left;
 * a file this run did not write is never touched). */
static void sink_undo(sink* s) {
    for (int i = 0; i < s->n_names; i++) {
        shard_out* o = &s->outs[i];
        if (o->part && !o->renamed) unlink(o->part);
        if (o->part && o->renamed) unlink(o->target);
    }
}
static void sink_discard(sink* s) {
    for (int i = 0; i < s->n_names; i++) { free(s->outs[i].name); free(s->outs[i].target); free(s->outs[i].part); }
    free(s->outs); free(s->buf);
}
static int sink_commit(sink* s) {
    for (int i = 0; i < s->n_names; i++) {
        shard_out* o = &s->outs[i];
        if (!o->part) continue;
        if (rename(o->part, o->target) != 0) return mx_fail(MX_EIO, "%s: cannot rename: %s", o->part, strerror(errno));
        o->renamed = 1;
    }
    return 0;
}

/* ---- an existing shard set (issue 48 class 3) ------------------------------------------------ */

/* Does the file name `base` come out of the pattern's file name `pb` (its %d at pb + at) for some index?
 * The digits may be padded with spaces (%6d) or zeros. */
static int name_matches(const char* pb, int at, const char* base) {
    char head[1100], pre[1100], suf[1100];
    int j = at + 1;
    while (pb[j] != 'd') j++;
    if (mx_pathf(head, sizeof head, "%.*s", at, pb) || pattern_format(head, 0, pre, sizeof pre) ||
        pattern_format(pb + j + 1, 0, suf, sizeof suf)) /* the text around the conversion, %% undone */
        return 0; /* longer than any file name */
    size_t lp = strlen(pre), ls = strlen(suf), lb = strlen(base);
    if (lb <= lp + ls || strncmp(base, pre, lp) || strcmp(base + lb - ls, suf)) return 0;
    size_t k = lp;
    while (k < lb - ls && base[k] == ' ') k++;
    if (k == lb - ls) return 0;
    for (; k < lb - ls; k++) if (base[k] < '0' || base[k] > '9') return 0;
    return 1;
}

/* The names (DIR/BASE, malloc'ed) of the shard set a pattern already has: the files of its folder that
 * it makes for some index (the one name of a plain pattern). A device or a FIFO holds no set. */
static int old_set(const char* pattern, char*** names, int* n) {
    *names = NULL; *n = 0;
    int at = -1;
    int rc = mx_prep_pattern_check(pattern, &at, NULL, NULL);
    if (rc) return rc;
    const char* sl = strrchr(pattern, '/');
    const char* pb = sl ? sl + 1 : pattern;
    if (at >= 0 && pattern + at < pb)
        return mx_fail(MX_EINVAL, "output pattern '%s': the %%d must be in the file name, not the folder", pattern);
    char raw[1100], dir[1100];
    if (mx_pathf(raw, sizeof raw, "%.*s", sl ? (int)(sl - pattern) : 0, pattern) ||
        pattern_format(raw, 0, dir, sizeof dir)) /* the folder as the names have it (%% undone) */
        return mx_fail(MX_EINVAL, "output pattern '%.80s...': its folder is too long", pattern);
    DIR* d = opendir(!sl ? "." : dir[0] ? dir : "/");
    if (!d) return MX_OK; /* no folder yet: no set */
    struct dirent* e;
    while (!rc && (e = readdir(d))) {
        struct stat st;
        char* full = malloc(strlen(dir) + strlen(e->d_name) + 2);
        if (!full) { rc = mx_fail(MX_ENOMEM, "out of memory"); break; }
        sprintf(full, "%s%s%s", dir, sl ? "/" : "", e->d_name);
        int ok = (at >= 0 ? name_matches(pb, (int)(pattern + at - pb), e->d_name) : !strcmp(e->d_name, pb)) &&
                 stat(full, &st) == 0 && S_ISREG(st.st_mode);
        char** x = ok ? realloc(*names, (size_t)(*n + 1) * sizeof *x) : NULL;
        if (ok && !x) rc = mx_fail(MX_ENOMEM, "out of memory");
        if (x) { *names = x; (*names)[(*n)++] = full; }
        else free(full);
    }
    closedir(d);
    return rc;
}

static void free_names(char** names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Refuse an output that already holds shards (unless --replace). */
static int check_old_set(const char* pattern, int replace, char*** names, int* n) {
    int rc = old_set(pattern, names, n);
    if (rc || !*n || replace) return rc;
    rc = mx_fail(MX_EINVAL, "prep: the output '%s' already has %d shard(s) (%s%s); --replace replaces the whole set, "
                            "or choose another output", pattern, *n, (*names)[0], *n > 1 ? ", ..." : "");
    free_names(*names, *n);
    *names = NULL; *n = 0;
    return rc;
}

/* After a --replace run's shards are in place: the old set's files it did not write again are removed. */
static void remove_stale(const sink* s, char** names, int n) {
    for (int i = 0; i < n; i++) {
        int again = 0;
        for (int j = 0; j < s->n_names && !again; j++) again = !strcmp(names[i], s->outs[j].name);
        if (!again) unlink(names[i]);
    }
}

/* The lock of an output pattern (DIR/.PATTERN.lock, held while this run writes its shards; issue 48 class 2:
 * a second prep on the same outputs is refused instead of both writing and one's clean-up deleting the
 * other's shards). A device or a FIFO is not locked. *fd -1: none taken. */
static int lock_output(const char* pattern, int* fd) {
    *fd = -1;
    char* target = NULL;
    int direct = 0;
    if (mx_out_resolve(pattern, &target, &direct) == 0 && direct) { free(target); return MX_OK; }
    free(target);
    char* lp = hidden_name(pattern, "lock");
    if (!lp) return mx_fail(MX_ENOMEM, "out of memory");
    int rc = mx_lock_take(lp, fd);
    if (rc > 0) rc = mx_fail(MX_EINVAL, "prep: another mxlm prep is writing %s (it holds %s); nothing was written", pattern, lp);
    free(lp);
    return rc;
}

typedef struct {
    char* raw; size_t raw_len; int is_json;   /* the JSON line or the whole text file */
    char* text; size_t len;                   /* the document text (== raw for text files) */
    const char* file; int64_t line; mx_ids ids;
    int bad; size_t bad_off; int rc; char err[400];
} pdoc;

/* What a run writes: shard size and version, the split, the input's size (for the progress line). */
typedef struct {
    int64_t shard_tokens, n_train, n_val; int version; uint64_t total_bytes;
    char** old[2]; int n_old[2];  /* the shard sets already there (train, val): --replace removes them */
} prep_plan;
static int prep_locked(const mx_prep_opts* o, mx_prep_stats* st, const prep_plan* pl);

int mx_prep_run(const mx_prep_opts* o, mx_prep_stats* st) {
    memset(st, 0, sizeof *st);
    if (!o->tok || !o->train_pattern || o->n_inputs < 1) return mx_fail(MX_EINVAL, "prep: tokenizer, inputs and output needed");
    prep_plan pl = {.shard_tokens = o->shard_tokens > 0 ? o->shard_tokens : 100000000,
                    .version = mx_tok_vocab_size(o->tok) <= 65536 ? 1 : 2};
    if (pl.shard_tokens > INT32_MAX)
        return mx_fail(MX_EINVAL, "prep: shard size %lld over 2^31-1 tokens", (long long)pl.shard_tokens);
    for (int i = 0; i < o->n_inputs; i++) {
        struct stat sb;
        if (stat(o->inputs[i], &sb) != 0) return mx_fail(MX_EIO, "%s: %s", o->inputs[i], strerror(errno));
        if (!S_ISREG(sb.st_mode)) return mx_check_input(o->inputs[i], NULL); /* before an output folder or lock */
        pl.total_bytes += (uint64_t)sb.st_size;
    }
    int64_t n_val = 0, n_all = -1;
    if (o->val_docs > 0 || o->val_fraction > 0) {
        if (!o->val_pattern) return mx_fail(MX_EINVAL, "prep: a validation split needs a validation output");
        int rc = mx_docs_count(o->inputs, o->n_inputs, o->format, o->field, &n_all);
        if (rc) return rc;
        n_val = o->val_docs > 0 ? o->val_docs : (int64_t)(o->val_fraction * (double)n_all + 0.999999);
        if (n_val > n_all) n_val = n_all;
    }
    if (n_all >= 0 && n_val >= n_all)
        return mx_fail(MX_EINVAL, "prep: the validation split (%s %lld documents) leaves no training document: the "
                                  "input has %lld", o->val_docs > 0 ? "--val-docs" : "--val-fraction:", (long long)n_val,
                       (long long)n_all);
    pl.n_train = n_all < 0 ? INT64_MAX : n_all - n_val;
    pl.n_val = n_val;
    /* the output folders (a pattern's directory part) */
    for (int s2 = 0; s2 < 2; s2++) {
        const char* pat = s2 ? o->val_pattern : o->train_pattern;
        if (!pat) continue;
        int rc = mx_prep_pattern_check(pat, NULL, NULL, NULL);
        if (rc) return rc;
        char dir[1200];
        if (mx_pathf(dir, sizeof dir, "%s", pat)) return MX_EINVAL;
        char* sl = strrchr(dir, '/');
        if (sl && sl != dir) {
            *sl = 0;
            if ((rc = mx_mkdirs(dir))) return rc;
        }
    }
    int lock_fd[2] = {-1, -1};
    const int own_val = o->val_pattern && strcmp(o->val_pattern, o->train_pattern); /* a second output */
    int rc = lock_output(o->train_pattern, &lock_fd[0]);
    if (!rc && own_val) rc = lock_output(o->val_pattern, &lock_fd[1]);
    if (!rc) rc = check_old_set(o->train_pattern, o->replace, &pl.old[0], &pl.n_old[0]);
    if (!rc && own_val) rc = check_old_set(o->val_pattern, o->replace, &pl.old[1], &pl.n_old[1]);
    if (!rc) rc = prep_locked(o, st, &pl);
    for (int i = 0; i < 2; i++) {
        free_names(pl.old[i], pl.n_old[i]);
        if (lock_fd[i] >= 0) close(lock_fd[i]);
    }
    return rc;
}

/* mx_prep_run once its outputs are locked: tokenize, write the shards as hidden parts, rename them. */
static int prep_locked(const mx_prep_opts* o, mx_prep_stats* st, const prep_plan* pl) {
    const int64_t shard_tokens = pl->shard_tokens, n_train = pl->n_train, n_val = pl->n_val;
    const int version = pl->version;
    const uint32_t doc_tok = mx_tok_doc_token(o->tok);
    if (o->threads > 0) omp_set_num_threads(o->threads);
    sink sk[2] = {{o->train_pattern, 0, NULL, 0, 0, NULL, 0, 0, o->tok_record},
                   {o->val_pattern, 1, NULL, 0, 0, NULL, 0, 0, o->tok_record}};
    mx_docs* d = NULL;
    int rc = mx_docs_open(&d, o->inputs, o->n_inputs, o->format, o->field);
    if (rc) return rc;
    enum { MAXB = 4096 };
    const size_t MAXBYTES = 64u << 20;
    pdoc* batch = calloc(MAXB, sizeof *batch);
    if (!batch) { mx_docs_close(d); return mx_fail(MX_ENOMEM, "out of memory"); }
    int64_t doc_index = 0;
    int eof = 0;
    while (!eof && !rc) {
        int nb = 0; size_t bytes = 0;
        while (nb < MAXB && bytes < MAXBYTES) {
            const char* t; size_t l; const char* f; int64_t ln; int js;
            int k = docs_next_raw(d, &t, &l, &f, &ln, &js);
            if (k < 0) { rc = k; break; }
            if (k == 0) { eof = 1; break; }
            pdoc* p = &batch[nb++];
            p->raw = malloc(l + 1);
            if (!p->raw) { rc = mx_fail(MX_ENOMEM, "out of memory"); break; }
            memcpy(p->raw, t, l); p->raw[l] = 0; p->raw_len = l; p->is_json = js; p->file = f; p->line = ln;
            p->text = NULL; p->len = 0;
            p->ids.n = 0; p->bad = 0; p->rc = 0; p->err[0] = 0;
            bytes += l;
        }
        if (!rc) {
#pragma omp parallel for schedule(dynamic, 4)
            for (int i = 0; i < nb; i++) {
                pdoc* p = &batch[i];
                if (p->is_json) {
                    size_t col;
                    p->rc = mx_json_get_string(p->raw, p->raw_len, o->field ? o->field : "text", &p->text, &p->len, &col);
                    if (p->rc) { snprintf(p->err, sizeof p->err, "%s:%lld: %s", p->file, (long long)p->line, mx_last_error()); continue; }
                } else { p->text = p->raw; p->len = p->raw_len; }
                size_t v = mx_utf8_valid_prefix(p->text, p->len);
                if (v != p->len) { p->bad = 1; p->bad_off = v; continue; }
                p->rc = mx_ids_push(&p->ids, doc_tok);
                if (!p->rc) p->rc = mx_tok_encode(o->tok, p->text, p->len, &p->ids);
                if (p->rc) snprintf(p->err, sizeof p->err, "%s: %s", p->file, mx_last_error());
            }
        }
        for (int i = 0; i < nb; i++) {
            pdoc* p = &batch[i];
            if (!rc) {
                if (p->rc) rc = mx_fail(p->rc, "%s", p->err);
                else if (p->bad) {
                    if (o->skip_bad) st->skipped++;
                    else if (p->line > 0)
                        rc = mx_fail(MX_EFORMAT, "%s:%lld: invalid UTF-8 at byte %zu of the \"%s\" text (--skip-bad skips such documents)",
                                     p->file, (long long)p->line, p->bad_off, o->field ? o->field : "text");
                    else
                        rc = mx_fail(MX_EFORMAT, "%s: invalid UTF-8 at byte %zu (--skip-bad skips such documents)", p->file, p->bad_off);
                }
                if (!rc && !p->bad) {
                    sink* s = &sk[doc_index >= n_train];
                    rc = sink_add(s, p->ids.ids, p->ids.n, shard_tokens, version);
                    st->text_bytes += p->len;
                    if (doc_index >= n_train) st->val_docs++; else st->train_docs++;
                }
                if (!rc) doc_index++;
            }
            if (p->text != p->raw) free(p->text);
            free(p->raw); p->raw = NULL; p->text = NULL;
        }
        st->docs = doc_index;
        if (o->progress && !rc)
            o->progress(o->progress_ctx, mx_docs_bytes_read(d), pl->total_bytes, doc_index, sk[0].tokens + sk[1].tokens);
    }
    for (int i = 0; i < MAXB; i++) mx_ids_free(&batch[i].ids);
    free(batch);
    mx_docs_close(d);
    if (!rc && sk[0].n) rc = sink_flush(&sk[0], sk[0].n, version);
    if (!rc && sk[1].n) rc = sink_flush(&sk[1], sk[1].n, version);
    if (!rc && sk[0].tokens == 0) /* nothing to train on: no shard */
        rc = mx_fail(MX_EINVAL, "prep: the training split is empty (no document in the input%s)",
                     n_val > 0 ? " before the validation split" : "");
    if (!rc) rc = sink_commit(&sk[0]);
    if (!rc) rc = sink_commit(&sk[1]);
    st->train_tokens = sk[0].tokens; st->val_tokens = sk[1].tokens;
    st->train_shards = sk[0].n_names; st->val_shards = sk[1].n_names;
    if (rc) { sink_undo(&sk[0]); sink_undo(&sk[1]); }
    else { remove_stale(&sk[0], pl->old[0], pl->n_old[0]); remove_stale(&sk[1], pl->old[1], pl->n_old[1]); }
    sink_discard(&sk[0]); sink_discard(&sk[1]);
    return rc;
}
