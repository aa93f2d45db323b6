/* decode.c: the model one chunk of tokens at a time with a key/value cache,
 * and the seeded sampler (decode.h). Each step below is the step of
 * mx_llama_forward (llama.c) on the new rows, with the same functions or the
 * same arithmetic in the same order, so the logits equal the full forward's
 * bit for bit when the recipe's Fprop is row-local (decode.h says which). */
#include "mxlm/decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define P(m, t) ((m)->params + (m)->info[t].offset)
#define CHK(x) do { int rc_ = (x); if (rc_) { rc = rc_; goto out; } } while (0)

int mx_kv_create(mx_kv_cache* c, const mx_llama* m, int cap) {
    memset(c, 0, sizeof *c);
    const mx_model_config* cf = &m->cfg;
    if (cap <= 0 || cap > cf->seq_len)
        return mx_fail(MX_EINVAL, "decode: %d positions requested, the model's context is %d", cap, cf->seq_len);
    const int hd = cf->dim / cf->n_heads, KD = cf->n_kv_heads * hd;
    const size_t kv = (size_t)cf->n_layers * cap * KD;
    c->m = m;
    c->cap = cap;
    c->step = m->step;
    c->k = malloc(sizeof(float) * kv);
    c->v = malloc(sizeof(float) * kv);
    c->rope_cos = malloc(sizeof(float) * (size_t)cap * (hd / 2));
    c->rope_sin = malloc(sizeof(float) * (size_t)cap * (hd / 2));
    if (!c->k || !c->v || !c->rope_cos || !c->rope_sin) {
        mx_kv_free(c);
        return mx_fail(MX_ENOMEM, "decode: out of memory for a cache of %d positions", cap);
    }
    mx_rope_tables(c->rope_cos, c->rope_sin, cap, hd, cf->rope_theta);
    return MX_OK;
}

void mx_kv_free(mx_kv_cache* c) {
    free(c->k);
    free(c->v);
    free(c->rope_cos);
    free(c->rope_sin);
    memset(c, 0, sizeof *c);
}

static int lin(const mx_kv_cache* c, int l, int j, const float* X, const float* W, float* Y, int M, int K, int N) {
    const mx_llama* m = c->m;
    /* no state: no telemetry, and FP8 delayed scaling falls back to the current amax */
    mx_linear_ctx ctx = {.recipe = mx_llama_block_recipe(m, l), .seed = m->seed, .layer_id = mx_linear_id(l, j),
                         .step = c->step, .state = NULL, .telemetry = 0};
    return mx_linear_forward(&ctx, X, W, Y, M, K, N);
}

/* Causal attention of the n new rows (absolute positions p0 .. p0+n-1) over
 * the cached keys/values 0 .. p, term by term as attention_forward (the
 * score of key j accumulated over i in order from 0, scaled, softmax with
 * expf and a sequential sum, the output accumulated over j in order). */
static void attend(float* out, const float* q, const float* K, const float* V, int n, int p0, int H, int KV, int hd) {
    /* out [n, H*hd], q [n, H*hd], K, V [p0+n, KV*hd] */
    const int G = H / KV, qs = H * hd, ks = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel
    {
        float* row = malloc(sizeof(float) * (size_t)(p0 + n)); /* [p+1] */
#pragma omp for schedule(static)
        for (int th = 0; th < n * H; th++) {
            const int t = th / H, h = th % H, kh = h / G, p = p0 + t;
            const float* qt = q + (size_t)t * qs + h * hd;
            float* ot = out + (size_t)t * qs + h * hd;
            if (!row) { for (int i = 0; i < hd; i++) ot[i] = NAN; continue; }
            for (int j = 0; j <= p; j++) {
                const float* kj = K + (size_t)j * ks + kh * hd;
                float s = 0.0f;
                for (int i = 0; i < hd; i++) s += qt[i] * kj[i];
                row[j] = s;
            }
            mx_softmax_scaled(row, p + 1, scale);
            for (int i = 0; i < hd; i++) ot[i] = 0.0f;
            for (int j = 0; j <= p; j++) {
                const float* vj = V + (size_t)j * ks + kh * hd;
                for (int i = 0; i < hd; i++) ot[i] += row[j] * vj[i];
            }
        }
        free(row);
    }
}

int mx_decode_check(const mx_llama* m, int pos, int cap, const int32_t* tokens, int n) {
    if (n <= 0 || pos + n > cap)
        return mx_fail(MX_EINVAL, "decode: %d tokens at position %d exceed the cache's %d positions", n, pos, cap);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab)
            return mx_fail(MX_EINVAL, "decode: token id %d at position %d outside the vocabulary [0, %d)", tokens[i],
                           pos + i, m->cfg.vocab);
    return MX_OK;
}

int mx_llama_decode(mx_kv_cache* c, const int32_t* tokens, int n, float* logits, int all) {
    const mx_llama* m = c->m;
    const mx_model_config* cf = &m->cfg;
    const int D = cf->dim, L = cf->n_layers, V = cf->vocab, F = cf->ffn, H = cf->n_heads, KV = cf->n_kv_heads;
    const int hd = D / H, QD = H * hd, KD = KV * hd, h2 = hd / 2;
    int rc = mx_decode_check(m, c->pos, c->cap, tokens, n);
    if (rc) return rc;
    const int p0 = c->pos, W = F > QD ? (F > D ? F : D) : (QD > D ? QD : D);
    const size_t N = (size_t)n;
    float* x = malloc(sizeof(float) * N * D);      /* [n, D] residual stream */
    float* xn = malloc(sizeof(float) * N * D);     /* [n, D] */
    float* xmid = malloc(sizeof(float) * N * D);   /* [n, D] */
    float* rstd = malloc(sizeof(float) * N);       /* [n] */
    float* q = malloc(sizeof(float) * N * QD);     /* [n, QD] */
    float* ao = malloc(sizeof(float) * N * QD);    /* [n, QD] */
    float* gate = malloc(sizeof(float) * N * F);   /* [n, F] */
    float* up = malloc(sizeof(float) * N * F);     /* [n, F] */
    float* hid = malloc(sizeof(float) * N * F);    /* [n, F] */
    float* tmp = malloc(sizeof(float) * N * W);    /* [n, W] */
    float* headq = NULL;                           /* [V, D] BF16-rounded head (head_bf16) */
    if (!x || !xn || !xmid || !rstd || !q || !ao || !gate || !up || !hid || !tmp) {
        rc = mx_fail(MX_ENOMEM, "decode: out of memory for %d tokens", n);
        goto out;
    }
    mx_embedding_forward(x, tokens, P(m, MX_P_EMBED), n, D);
    for (int l = 0; l < L; l++) {
        float* kc = c->k + ((size_t)l * c->cap + p0) * KD; /* [n, KD] this layer's new keys */
        float* vc = c->v + ((size_t)l * c->cap + p0) * KD; /* [n, KD] */
        mx_rmsnorm_forward(xn, rstd, x, P(m, MX_P_ATTN_NORM) + (size_t)l * D, n, D, cf->norm_eps);
        CHK(lin(c, l, MX_LIN_Q, xn, P(m, MX_P_WQ) + (size_t)l * QD * D, q, n, D, QD));
        CHK(lin(c, l, MX_LIN_K, xn, P(m, MX_P_WK) + (size_t)l * KD * D, kc, n, D, KD));
        CHK(lin(c, l, MX_LIN_V, xn, P(m, MX_P_WV) + (size_t)l * KD * D, vc, n, D, KD));
        /* positions p0 .. p0+n-1: the tables from row p0 on, B = 1, T = n */
        mx_rope_forward(q, c->rope_cos + (size_t)p0 * h2, c->rope_sin + (size_t)p0 * h2, 1, n, H, hd);
        mx_rope_forward(kc, c->rope_cos + (size_t)p0 * h2, c->rope_sin + (size_t)p0 * h2, 1, n, KV, hd);
        attend(ao, q, c->k + (size_t)l * c->cap * KD, c->v + (size_t)l * c->cap * KD, n, p0, H, KV, hd);
        CHK(lin(c, l, MX_LIN_O, ao, P(m, MX_P_WO) + (size_t)l * D * QD, tmp, n, QD, D));
        for (size_t i = 0; i < N * D; i++) xmid[i] = x[i] + tmp[i];
        mx_rmsnorm_forward(xn, rstd, xmid, P(m, MX_P_FFN_NORM) + (size_t)l * D, n, D, cf->norm_eps);
        CHK(lin(c, l, MX_LIN_GATE, xn, P(m, MX_P_WGATE) + (size_t)l * F * D, gate, n, D, F));
        CHK(lin(c, l, MX_LIN_UP, xn, P(m, MX_P_WUP) + (size_t)l * F * D, up, n, D, F));
        mx_swiglu_forward(hid, gate, up, N * F);
        CHK(lin(c, l, MX_LIN_DOWN, hid, P(m, MX_P_WDOWN) + (size_t)l * D * F, tmp, n, F, D));
        for (size_t i = 0; i < N * D; i++) x[i] = xmid[i] + tmp[i];
    }
    mx_rmsnorm_forward(xn, rstd, x, P(m, MX_P_FINAL_NORM), n, D, cf->norm_eps);
    const int r0 = all ? 0 : n - 1, rows = n - r0; /* the head is row-local: only the rows wanted */
    const float* xr = xn + (size_t)r0 * D;
    const float* head = P(m, MX_P_HEAD);
    if (m->head_bf16) { /* as llama.c: BF16-rounded operands, FP32 accumulation */
        headq = malloc(sizeof(float) * (size_t)V * D);
        if (!headq) { rc = mx_fail(MX_ENOMEM, "decode: out of memory"); goto out; }
        mx_bf16_fakequant(xr, tmp, (size_t)rows * D);
        mx_bf16_fakequant(head, headq, (size_t)V * D);
        xr = tmp;
        head = headq;
    }
    CHK(mx_sgemm_tn(xr, head, logits, rows, V, D, 0)); /* logits [rows, V] */
    c->pos += n;
out:
    free(x); free(xn); free(xmid); free(rstd); free(q); free(ao); free(gate); free(up); free(hid); free(tmp);
    free(headq);
    return rc;
}

/* ---- sampling ---------------------------------------------------------------------- */

typedef struct { float z; int32_t id; } cand;

static int cmp_cand(const void* a, const void* b) {
    const cand *x = a, *y = b;
    if (x->z != y->z) return x->z > y->z ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int mx_sample_pick(const float* logits, int V, const mx_sample_opts* o, uint64_t i, int32_t* id) {
    if (V <= 0) return mx_fail(MX_EINVAL, "sample: empty vocabulary");
    for (int j = 0; j < V; j++)
        if (isnan(logits[j])) return mx_fail(MX_EINVAL, "sample: NaN logit at id %d", j);
    if (!(o->temperature > 0)) { /* greedy: the first id of the largest logit */
        int best = 0;
        for (int j = 1; j < V; j++)
            if (logits[j] > logits[best]) best = j;
        *id = best;
        return MX_OK;
    }
    cand* c = malloc(sizeof(cand) * (size_t)V);
    double* p = malloc(sizeof(double) * (size_t)V);
    if (!c || !p) { free(c); free(p); return mx_fail(MX_ENOMEM, "sample: out of memory"); }
    for (int j = 0; j < V; j++) c[j] = (cand){logits[j], j};
    qsort(c, (size_t)V, sizeof *c, cmp_cand);
    int n = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    double tot = 0.0;
    for (int j = 0; j < n; j++) {
        p[j] = exp(((double)c[j].z - (double)c[0].z) / o->temperature);
        tot += p[j];
    }
    if (o->top_p > 0 && o->top_p < 1) {
        double cum = 0.0;
        int k = 0;
        while (k < n) {
            cum += p[k++];
            if (cum >= o->top_p * tot) break;
        }
        n = k;
        tot = cum;
    }
    uint32_t hi = mx_rand_u32(o->seed, MX_RNG_SAMPLE, 0, 2 * i), lo = mx_rand_u32(o->seed, MX_RNG_SAMPLE, 0, 2 * i + 1);
    double u = (double)(((uint64_t)hi << 21) | (lo >> 11)) * (1.0 / 9007199254740992.0); /* [0, 1), 53 bits */
    double r = u * tot, acc = 0.0;
    int pick = n - 1;
    for (int j = 0; j < n; j++) {
        acc += p[j];
        if (r < acc) { pick = j; break; }
    }
    *id = c[pick].id;
    free(c);
    free(p);
    return MX_OK;
}

int mx_generate_check(const mx_llama* m, int n_prompt, int n_new) {
    if (n_prompt < 1) return mx_fail(MX_EINVAL, "sample: the prompt needs at least one token");
    if (n_new < 0 || (int64_t)n_prompt + n_new > m->cfg.seq_len)
        return mx_fail(MX_EINVAL, "sample: %d prompt tokens + %d new exceed the model's context %d", n_prompt, n_new,
                       m->cfg.seq_len);
    return MX_OK;
}

int mx_generate_loop(const mx_llama* m, mx_decode_fn decode, void* cache, const int32_t* prompt, int n_prompt,
                     int n_new, const mx_sample_opts* o, int32_t stop_id, int32_t* out, int* n_out) {
    *n_out = 0;
    float* logits = malloc(sizeof(float) * (size_t)m->cfg.vocab); /* [V] */
    if (!logits) return mx_fail(MX_ENOMEM, "sample: out of memory");
    int rc = decode(cache, prompt, n_prompt, logits, 0);
    for (int g = 0; g < n_new && !rc; g++) {
        int32_t id = 0;
        rc = mx_sample_pick(logits, m->cfg.vocab, o, (uint64_t)g, &id);
        if (rc) break;
        out[(*n_out)++] = id;
        if (id == stop_id || g + 1 == n_new) break;
        rc = decode(cache, &id, 1, logits, 0);
    }
    free(logits);
    return rc;
}

static int cpu_decode(void* cache, const int32_t* tokens, int n, float* logits, int all) {
    return mx_llama_decode((mx_kv_cache*)cache, tokens, n, logits, all);
}

int mx_generate(const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new, const mx_sample_opts* o,
                int32_t stop_id, int32_t* out, int* n_out) {
    *n_out = 0;
    int rc = mx_generate_check(m, n_prompt, n_new);
    if (rc || n_new == 0) return rc;
    mx_kv_cache kv;
    if ((rc = mx_kv_create(&kv, m, n_prompt + n_new))) return rc;
    rc = mx_generate_loop(m, cpu_decode, &kv, prompt, n_prompt, n_new, o, stop_id, out, n_out);
    mx_kv_free(&kv);
    return rc;
}
