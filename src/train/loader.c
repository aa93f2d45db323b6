/* loader.c: token windows from llm.c shards for training (sampled from the
 * seed: the position is just a sample counter) and validation (fixed). */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/trainer.h"

/* Every token id of shard s below vocab (one pass at open: an out-of-vocabulary id is an error now, naming
 * the file and offset, not at the step that would read it). */
static int check_vocab(const mx_shard* s, int vocab) {
    if (vocab <= 0 || (s->version == 1 && vocab >= 65536)) return MX_OK;
    uint32_t mx = 0;
    const int64_t n = s->n_tokens;
    if (s->version == 1) {
        const uint8_t* p = s->tokens;
        for (int64_t i = 0; i < n; i++) {
            uint32_t t = (uint32_t)p[2 * i] | ((uint32_t)p[2 * i + 1] << 8);
            mx = t > mx ? t : mx;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            uint32_t t = mx_shard_token(s, i);
            mx = t > mx ? t : mx;
        }
    }
    if (mx < (uint32_t)vocab) return MX_OK;
    for (int64_t i = 0; i < n; i++) {
        uint32_t id = mx_shard_token(s, i);
        if (id >= (uint32_t)vocab)
            return mx_fail(MX_EFORMAT, "%s: token id %u at token offset %lld (byte %lld) is outside the model's "
                                       "vocabulary (%d)", s->path, id, (long long)i,
                           (long long)(1024 + i * (s->version == 1 ? 2 : 4)), vocab);
    }
    return MX_OK;
}

int mx_loader_open(mx_loader* l, const char* pattern, int T, int vocab) {
    memset(l, 0, sizeof *l);
    l->T = T;
    l->vocab = vocab;
    glob_t g;
    int gr = glob(pattern, 0, NULL, &g);
    if (gr == GLOB_NOMATCH) return mx_fail(MX_EIO, "%s: no shard matches", pattern);
    if (gr != 0) return mx_fail(MX_EIO, "%s: cannot expand the pattern", pattern);
    l->n = (int)g.gl_pathc;
    l->shards = calloc((size_t)l->n, sizeof(mx_shard));
    l->first = calloc((size_t)l->n + 1, sizeof(int64_t));
    if (!l->shards || !l->first) {
        globfree(&g);
        mx_loader_close(l);
        return mx_fail(MX_ENOMEM, "loader: out of memory");
    }
    int rc = MX_OK;
    for (int i = 0; i < l->n && !rc; i++) {
        rc = mx_shard_open(&l->shards[i], g.gl_pathv[i]); /* sorted by glob */
        if (rc) { l->n = i; break; }
        rc = check_vocab(&l->shards[i], vocab);
        if (rc) { l->n = i + 1; break; }
        int64_t starts = l->shards[i].n_tokens - T; /* windows of T+1 tokens */
        if (starts < 1)
            rc = mx_fail(MX_EFORMAT, "%s: %lld tokens, too few for one window of %d", g.gl_pathv[i],
                         (long long)l->shards[i].n_tokens, T + 1);
        l->first[i + 1] = l->first[i] + (starts > 0 ? starts : 0);
    }
    globfree(&g);
    if (rc) mx_loader_close(l);
    return rc;
}

void mx_loader_close(mx_loader* l) {
    if (l->shards)
        for (int i = 0; i < l->n; i++) mx_shard_close(&l->shards[i]);
    free(l->shards);
    free(l->first);
    memset(l, 0, sizeof *l);
}

int64_t mx_loader_n_windows(const mx_loader* l) { return l->first[l->n]; }

static int read_at(const mx_loader* l, int si, int64_t start, int32_t* inp, int32_t* tgt) {
    const mx_shard* s = &l->shards[si];
    for (int t = 0; t <= l->T; t++) {
        uint32_t id = mx_shard_token(s, start + t);
        if (id >= (uint32_t)l->vocab)
            return mx_fail(MX_EFORMAT, "%s: token id %u at token offset %lld is outside the model's vocabulary (%d)",
                           s->path, id, (long long)(start + t), l->vocab);
        if (t < l->T) inp[t] = (int32_t)id;
        if (t > 0) tgt[t - 1] = (int32_t)id;
    }
    return MX_OK;
}

int mx_loader_window(const mx_loader* l, int64_t w, int32_t* inp, int32_t* tgt) {
    if (w < 0 || w >= l->first[l->n]) return mx_fail(MX_EINVAL, "loader: window %lld out of range", (long long)w);
    int lo = 0, hi = l->n - 1; /* the shard with first[i] <= w < first[i+1] */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->first[mid] <= w) lo = mid; else hi = mid - 1;
    }
    return read_at(l, lo, w - l->first[lo], inp, tgt);
}

int64_t mx_loader_sample(const mx_loader* l, uint64_t seed, int64_t s) {
    uint64_t r = ((uint64_t)mx_rand_u32(seed, MX_RNG_DATA, 0, 2 * (uint64_t)s) << 32) |
                 mx_rand_u32(seed, MX_RNG_DATA, 0, 2 * (uint64_t)s + 1);
    return (int64_t)(r % (uint64_t)l->first[l->n]);
}

int64_t mx_loader_n_val_windows(const mx_loader* l) {
    int64_t n = 0;
    for (int i = 0; i < l->n; i++) n += (l->shards[i].n_tokens - 1) / l->T;
    return n;
}

int mx_loader_val_window(const mx_loader* l, int64_t i, int32_t* inp, int32_t* tgt) {
    for (int si = 0; si < l->n; si++) {
        int64_t k = (l->shards[si].n_tokens - 1) / l->T;
        if (i < k) return read_at(l, si, i * l->T, inp, tgt);
        i -= k;
    }
    return mx_fail(MX_EINVAL, "loader: validation window out of range");
}

int mx_val_windows(int64_t n_windows, int64_t val_tokens, int T, int B, const char* set, int64_t* n) {
    const int64_t want = val_tokens == 0 || val_tokens / T > n_windows ? n_windows : val_tokens / T;
    *n = want / B * B;
    if (*n > 0) return MX_OK;
    if (want < n_windows || n_windows >= B)
        return mx_fail(MX_EUSAGE, "--val-tokens %lld makes %lld validation window%s of %d + 1 tokens (--seq %d), "
                                  "fewer than one batch of %d (--batch): give --val-tokens %lld or more",
                       (long long)val_tokens, (long long)want, want == 1 ? "" : "s", T, T, B, (long long)B * T);
    return mx_fail(MX_EINVAL, "the validation set %s has %lld window%s of %d + 1 tokens, fewer than one batch of %d: "
                              "give more validation data, or a smaller --batch or --seq", set, (long long)n_windows,
                   n_windows == 1 ? "" : "s", T, B);
}
