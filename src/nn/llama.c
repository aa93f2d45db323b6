/* llama.c: the Llama 3 model on the CPU: presets, parameter layout, init,
 * forward and backward. Reads top to bottom like the model; one allocation
 * per class of tensor (params, grads, activations). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/linear_plan.h"
#include "mxlm/model.h"

/* ---- presets --------------------------------------------------------------- */

typedef struct { const char* name; int V, D, L, H, KV, F, T; } preset;
/* Names: non-embedding parameters, roughly. All linear dims are multiples of
 * 32 (MXFP4 blocks) and of 32 again for H16/H32. */
static const preset k_presets[] = {
    {"tiny", 4096, 128, 4, 4, 2, 384, 128},
    {"20m", 50304, 384, 12, 6, 2, 1024, 512},
    {"60m", 50304, 512, 20, 8, 4, 1536, 1024},
    {"125m", 50304, 768, 16, 12, 4, 2560, 1024},
    {"350m", 50304, 1024, 24, 16, 8, 3584, 2048},
    {"1b", 128256, 2048, 16, 32, 8, 8192, 2048},
    {"llama3.1-8b", 128256, 4096, 32, 32, 8, 14336, 8192},
};
static const char* const k_preset_names[] = {"tiny", "20m", "60m", "125m", "350m", "1b", "llama3.1-8b", NULL};

const char* const* mx_model_preset_names(void) { return k_preset_names; }

int mx_model_preset(const char* name, mx_model_config* c) {
    for (size_t i = 0; i < sizeof k_presets / sizeof k_presets[0]; i++) {
        const preset* p = &k_presets[i];
        if (strcmp(p->name, name)) continue;
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", p->name);
        c->vocab = p->V; c->dim = p->D; c->n_layers = p->L; c->n_heads = p->H; c->n_kv_heads = p->KV;
        c->ffn = p->F; c->seq_len = p->T; c->rope_theta = 500000.0f; c->norm_eps = 1e-5f;
        return MX_OK;
    }
    return mx_fail(MX_EINVAL, "unknown model preset '%s' (tiny, 20m, 60m, 125m, 350m, 1b, llama3.1-8b)", name);
}

int mx_model_config_check(const mx_model_config* c) {
    if (c->vocab <= 0 || c->dim <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 || c->ffn <= 0 ||
        c->seq_len <= 0)
        return mx_fail(MX_EINVAL, "model: every size must be positive");
    if (c->dim % c->n_heads) return mx_fail(MX_EINVAL, "model: dim %d not divisible by heads %d", c->dim, c->n_heads);
    if (c->n_heads % c->n_kv_heads)
        return mx_fail(MX_EINVAL, "model: heads %d not divisible by kv heads %d", c->n_heads, c->n_kv_heads);
    if ((c->dim / c->n_heads) % 2) return mx_fail(MX_EINVAL, "model: head dim %d must be even", c->dim / c->n_heads);
    if (!(c->rope_theta > 0) || !(c->norm_eps > 0)) return mx_fail(MX_EINVAL, "model: rope theta and eps must be > 0");
    return MX_OK;
}

size_t mx_param_layout(const mx_model_config* c, mx_param_info info[MX_P_COUNT]) {
    const int V = c->vocab, D = c->dim, L = c->n_layers, hd = c->dim / c->n_heads;
    const int QD = c->n_heads * hd, KD = c->n_kv_heads * hd, F = c->ffn;
    struct { const char* name; int per_layer, rows, cols, mat; } t[MX_P_COUNT] = {
        [MX_P_EMBED] = {"embed", 0, V, D, 1},       [MX_P_ATTN_NORM] = {"attn_norm", 1, 1, D, 0},
        [MX_P_WQ] = {"wq", 1, QD, D, 1},            [MX_P_WK] = {"wk", 1, KD, D, 1},
        [MX_P_WV] = {"wv", 1, KD, D, 1},            [MX_P_WO] = {"wo", 1, D, QD, 1},
        [MX_P_FFN_NORM] = {"ffn_norm", 1, 1, D, 0}, [MX_P_WGATE] = {"w_gate", 1, F, D, 1},
        [MX_P_WUP] = {"w_up", 1, F, D, 1},          [MX_P_WDOWN] = {"w_down", 1, D, F, 1},
        [MX_P_FINAL_NORM] = {"final_norm", 0, 1, D, 0}, [MX_P_HEAD] = {"head", 0, V, D, 1},
    };
    size_t off = 0;
    for (int i = 0; i < MX_P_COUNT; i++) {
        info[i].name = t[i].name;
        info[i].offset = off;
        info[i].per_layer = t[i].per_layer;
        info[i].rows = t[i].rows;
        info[i].cols = t[i].cols;
        info[i].is_matrix = t[i].mat;
        info[i].numel = (size_t)t[i].rows * t[i].cols * (t[i].per_layer ? (size_t)L : 1);
        off += info[i].numel;
    }
    return off;
}

int mx_shard_plan_count(const mx_model_config* c) {
    mx_param_info info[MX_P_COUNT];
    mx_param_layout(c, info);
    int n = 0;
    for (int k = 0; k < MX_P_COUNT; k++) n += info[k].per_layer ? c->n_layers : 1;
    return n;
}

int mx_shard_plan(const mx_model_config* c, int W, int R, mx_piece* out, int* n_pieces, size_t* nshard) {
    if (W < 1 || R < 0 || R >= W) return mx_fail(MX_EINVAL, "shard plan: rank %d of %d", R, W);
    mx_param_info info[MX_P_COUNT];
    mx_param_layout(c, info);
    size_t so = 0;
    int n = 0;
    for (int k = 0; k < MX_P_COUNT; k++) {
        const mx_param_info* in = &info[k];
        const int nl = in->per_layer ? c->n_layers : 1;
        const size_t sn = in->numel / (size_t)nl;
        if (sn % (size_t)W)
            return mx_fail(MX_EINVAL, "data parallel: tensor %s (%zu values per slice) does not split into %d equal "
                                      "parts (use a GPU count that divides it)", in->name, sn, W);
        for (int l = 0; l < nl; l++) {
            const size_t slice = in->offset + (size_t)l * sn, part = sn / (size_t)W;
            out[n++] = (mx_piece){slice + (size_t)R * part, so, part, slice, in->is_matrix};
            so += part;
        }
    }
    *n_pieces = n;
    *nshard = so;
    return MX_OK;
}

int64_t mx_model_n_params(const mx_model_config* c) {
    mx_param_info info[MX_P_COUNT];
    return (int64_t)mx_param_layout(c, info);
}

int64_t mx_model_n_params_nonembed(const mx_model_config* c) {
    return mx_model_n_params(c) - 2 * (int64_t)c->vocab * c->dim;
}

void mx_model_config_describe(const mx_model_config* c, char* buf, size_t n) {
    snprintf(buf, n, "%s: V %d D %d L %d H %d/%d (head dim %d) F %d T %d, rope theta %g, eps %g", c->name, c->vocab,
             c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->dim / c->n_heads, c->ffn, c->seq_len,
             (double)c->rope_theta, (double)c->norm_eps);
}

const char* mx_linear_name(int j) {
    static const char* k[MX_LIN_PER_BLOCK] = {"q", "k", "v", "o", "gate", "up", "down"};
    return j >= 0 && j < MX_LIN_PER_BLOCK ? k[j] : "?";
}

/* ---- create / free ----------------------------------------------------------- */

int mx_llama_create(mx_llama* m, const mx_model_config* cfg, const mx_recipe* recipe, int bf16_first,
                    int bf16_last, uint64_t seed) {
    memset(m, 0, sizeof *m);
    int rc = mx_model_config_check(cfg);
    if (rc) return rc;
    if (bf16_first < 0 || bf16_last < 0) return mx_fail(MX_EINVAL, "model: negative bf16 block count");
    m->cfg = *cfg;
    m->n_params = mx_param_layout(cfg, m->info);
    m->recipe = *recipe;
    rc = mx_recipe_parse("bf16", &m->recipe_bf16);
    if (rc) return rc;
    m->bf16_first = bf16_first;
    m->bf16_last = bf16_last;
    m->seed = seed;
    m->params = calloc(m->n_params, sizeof(float));
    m->grads = calloc(m->n_params, sizeof(float));
    m->lstate = calloc((size_t)cfg->n_layers * MX_LIN_PER_BLOCK, sizeof(mx_linear_state));
    if (!m->params || !m->grads || !m->lstate) {
        const size_t np = m->n_params; /* mx_llama_free clears it */
        mx_llama_free(m);
        return mx_fail(MX_ENOMEM, "model: out of memory for %zu parameters (%.1f GiB of weights and as much of "
                                  "gradients)", np, (double)np * 4 / (1 << 30));
    }
    return MX_OK;
}

void mx_llama_free(mx_llama* m) {
    free(m->params);
    free(m->grads);
    free(m->lstate);
    free(m->acts);
    memset(m, 0, sizeof *m);
}

const mx_recipe* mx_llama_block_recipe(const mx_llama* m, int l) {
    if (l < m->bf16_first || l >= m->cfg.n_layers - m->bf16_last) return &m->recipe_bf16;
    return &m->recipe;
}

void mx_llama_zero_grad(mx_llama* m) { memset(m->grads, 0, m->n_params * sizeof(float)); }

/* A standard normal from two 32-bit draws (Box-Muller, in double). */
static float normal_at(uint64_t seed, uint32_t stream, uint64_t i) {
    double u1 = ((double)mx_rand_u32(seed, MX_RNG_INIT, stream, 2 * i) + 0.5) * (1.0 / 4294967296.0);
    double u2 = ((double)mx_rand_u32(seed, MX_RNG_INIT, stream, 2 * i + 1) + 0.5) * (1.0 / 4294967296.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void mx_llama_init_weights(mx_llama* m, uint64_t seed) {
    const float std = 0.02f, std_out = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layers);
    for (int t = 0; t < MX_P_COUNT; t++) {
        const mx_param_info* in = &m->info[t];
        float* p = m->params + in->offset;
        if (!in->is_matrix) {
            for (size_t i = 0; i < in->numel; i++) p[i] = 1.0f;
            continue;
        }
        float s = (t == MX_P_WO || t == MX_P_WDOWN) ? std_out : std;
        int64_t n = (int64_t)in->numel;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) p[i] = s * normal_at(seed, (uint32_t)t, (uint64_t)i);
    }
}

/* ---- activations ----------------------------------------------------------- */

int mx_llama_alloc_acts(mx_llama* m, int B, int T) {
    const mx_model_config* c = &m->cfg;
    if (B <= 0 || T <= 0 || T > c->seq_len)
        return mx_fail(MX_EINVAL, "model: batch %dx%d invalid (context %d)", B, T, c->seq_len);
    if (T > 8192) return mx_fail(MX_EINVAL, "model: the CPU attention supports T <= 8192 (got %d)", T);
    if (m->acts && m->B == B && m->T == T) return MX_OK;
    free(m->acts);
    m->acts = NULL;
    const size_t N = (size_t)B * T, D = c->dim, L = c->n_layers, V = c->vocab, F = c->ffn;
    const size_t hd = D / c->n_heads, QD = c->n_heads * hd, KD = c->n_kv_heads * hd;
    const size_t W = (F > QD ? F : QD) > D ? (F > QD ? F : QD) : D; /* widest activation row */
    struct { float** p; size_t n; } parts[] = {
        {&m->x, (L + 1) * N * D}, {&m->xn1, L * N * D}, {&m->rstd1, L * N}, {&m->q, L * N * QD},
        {&m->k, L * N * KD}, {&m->v, L * N * KD}, {&m->att, L * (size_t)B * c->n_heads * T * T},
        {&m->ao, L * N * QD}, {&m->xmid, L * N * D}, {&m->xn2, L * N * D}, {&m->rstd2, L * N},
        {&m->gate, L * N * F}, {&m->up, L * N * F}, {&m->hid, L * N * F}, {&m->xnf, N * D}, {&m->rstdf, N},
        {&m->logits, N * V}, {&m->losses, N}, {&m->rope_cos, (size_t)T * hd / 2}, {&m->rope_sin, (size_t)T * hd / 2},
        {&m->dx, N * D}, {&m->dxn, N * D}, {&m->dq, N * QD}, {&m->dk, N * KD}, {&m->dv, N * KD}, {&m->dao, N * QD},
        {&m->dgate, N * F}, {&m->dup, N * F}, {&m->dhid, N * F}, {&m->dtmp, N * W}, {&m->headT, D * V},
        {&m->scratchT, (V > D ? V : D) * N},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) total += (parts[i].n + 15) / 16 * 16;
    m->acts = aligned_alloc(64, total * sizeof(float));
    if (!m->acts) return mx_fail(MX_ENOMEM, "model: out of memory for activations (%zu MiB)", total * 4 >> 20);
    memset(m->acts, 0, total * sizeof(float));
    float* p = m->acts;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        *parts[i].p = p;
        p += (parts[i].n + 15) / 16 * 16;
    }
    m->B = B;
    m->T = T;
    mx_rope_tables(m->rope_cos, m->rope_sin, T, (int)hd, c->rope_theta);
    return MX_OK;
}

/* ---- forward / backward ------------------------------------------------------ */

static mx_linear_ctx lin_ctx(mx_llama* m, int l, int j) {
    uint32_t id = mx_linear_id(l, j);
    mx_linear_ctx c = {.recipe = mx_llama_block_recipe(m, l), .seed = m->seed, .layer_id = id, .step = m->step,
                       .state = &m->lstate[id], .telemetry = m->telemetry};
    return c;
}

static int lin_fwd(mx_llama* m, int l, int j, const float* X, const float* W, float* Y, int M, int K, int N) {
    mx_linear_ctx c = lin_ctx(m, l, j);
    return mx_linear_forward(&c, X, W, Y, M, K, N);
}

static int lin_bwd(mx_llama* m, int l, int j, const float* X, const float* W, const float* dY, float* dX, float* dW,
                   int M, int K, int N) {
    mx_linear_ctx c = lin_ctx(m, l, j);
    return mx_linear_backward(&c, X, W, dY, dX, dW, M, K, N);
}

/* dst[cols, rows] = src[rows, cols]^T */
static void transpose(float* dst, const float* src, int rows, int cols) {
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < cols; c0 += 32)
        for (int r = 0; r < rows; r++)
            for (int c = c0; c < c0 + 32 && c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/* The GPU model's act16 rounding points `which` (MX_ACT16_*) apply (mx_llama.act16). */
static int act16(const mx_llama* m, int which) { return (m->act16 & which) && mx_act16_possible(&m->recipe); }
static void round16(float* x, size_t n) { mx_bf16_fakequant(x, x, n); }

#define P(m, t) ((m)->params + (m)->info[t].offset)
#define G(m, t) ((m)->grads + (m)->info[t].offset)
#define CHK(x) do { int rc_ = (x); if (rc_) return rc_; } while (0)

int mx_llama_forward(mx_llama* m, const int32_t* tokens, const int32_t* targets, int B, int T, float* loss) {
    CHK(mx_llama_alloc_acts(m, B, T));
    const mx_model_config* c = &m->cfg;
    const int N = B * T, D = c->dim, L = c->n_layers, V = c->vocab, F = c->ffn, H = c->n_heads, KV = c->n_kv_heads;
    const int hd = D / H, QD = H * hd, KD = KV * hd;
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0 || tokens[n] >= V || (targets && (targets[n] < 0 || targets[n] >= V)))
            return mx_fail(MX_EINVAL, "model: token id at position %d outside the vocabulary [0, %d)", n, V);

    mx_embedding_forward(m->x, tokens, P(m, MX_P_EMBED), N, D);
    for (int l = 0; l < L; l++) {
        float* x = m->x + (size_t)l * N * D;          /* [N, D] block input */
        float* xn1 = m->xn1 + (size_t)l * N * D;      /* [N, D] */
        float* q = m->q + (size_t)l * N * QD;         /* [N, QD] */
        float* k = m->k + (size_t)l * N * KD;         /* [N, KD] */
        float* v = m->v + (size_t)l * N * KD;         /* [N, KD] */
        float* att = m->att + (size_t)l * B * H * T * T; /* [B, H, T, T] */
        float* ao = m->ao + (size_t)l * N * QD;       /* [N, QD] */
        float* xmid = m->xmid + (size_t)l * N * D;    /* [N, D] */
        float* xn2 = m->xn2 + (size_t)l * N * D;      /* [N, D] */
        float* gate = m->gate + (size_t)l * N * F;    /* [N, F] */
        float* up = m->up + (size_t)l * N * F;        /* [N, F] */
        float* hid = m->hid + (size_t)l * N * F;      /* [N, F] */
        float* xout = m->x + (size_t)(l + 1) * N * D; /* [N, D] */

        mx_rmsnorm_forward(xn1, m->rstd1 + (size_t)l * N, x, P(m, MX_P_ATTN_NORM) + (size_t)l * D, N, D, c->norm_eps);
        if (act16(m, MX_ACT16_FFN)) round16(xn1, (size_t)N * D); /* the GPU's BF16 storage (a quantizer reads it) */
        CHK(lin_fwd(m, l, MX_LIN_Q, xn1, P(m, MX_P_WQ) + (size_t)l * QD * D, q, N, D, QD));
        CHK(lin_fwd(m, l, MX_LIN_K, xn1, P(m, MX_P_WK) + (size_t)l * KD * D, k, N, D, KD));
        CHK(lin_fwd(m, l, MX_LIN_V, xn1, P(m, MX_P_WV) + (size_t)l * KD * D, v, N, D, KD));
        const int a16 = act16(m, MX_ACT16_ATTN);
        if (a16) { /* the GPU's BF16 outputs */
            round16(q, (size_t)N * QD);
            round16(k, (size_t)N * KD);
            round16(v, (size_t)N * KD);
        }
        mx_rope_forward(q, m->rope_cos, m->rope_sin, B, T, H, hd);
        mx_rope_forward(k, m->rope_cos, m->rope_sin, B, T, KV, hd);
        if (a16) {
            round16(q, (size_t)N * QD);
            round16(k, (size_t)N * KD);
        }
        mx_attention_forward(ao, att, q, k, v, B, T, H, KV, hd);
        if (a16) round16(ao, (size_t)N * QD);
        CHK(lin_fwd(m, l, MX_LIN_O, ao, P(m, MX_P_WO) + (size_t)l * D * QD, m->dtmp, N, QD, D));
        for (size_t i = 0; i < (size_t)N * D; i++) xmid[i] = x[i] + m->dtmp[i];

        mx_rmsnorm_forward(xn2, m->rstd2 + (size_t)l * N, xmid, P(m, MX_P_FFN_NORM) + (size_t)l * D, N, D, c->norm_eps);
        if (act16(m, MX_ACT16_FFN)) round16(xn2, (size_t)N * D);
        CHK(lin_fwd(m, l, MX_LIN_GATE, xn2, P(m, MX_P_WGATE) + (size_t)l * F * D, gate, N, D, F));
        CHK(lin_fwd(m, l, MX_LIN_UP, xn2, P(m, MX_P_WUP) + (size_t)l * F * D, up, N, D, F));
        if (act16(m, MX_ACT16_FFN)) { /* the GPU's BF16 outputs */
            round16(gate, (size_t)N * F);
            round16(up, (size_t)N * F);
        }
        mx_swiglu_forward(hid, gate, up, (size_t)N * F);
        if (act16(m, MX_ACT16_FFN)) round16(hid, (size_t)N * F);
        CHK(lin_fwd(m, l, MX_LIN_DOWN, hid, P(m, MX_P_WDOWN) + (size_t)l * D * F, m->dtmp, N, F, D));
        for (size_t i = 0; i < (size_t)N * D; i++) xout[i] = xmid[i] + m->dtmp[i];
    }
    float* xL = m->x + (size_t)L * N * D; /* [N, D] */
    mx_rmsnorm_forward(m->xnf, m->rstdf, xL, P(m, MX_P_FINAL_NORM), N, D, c->norm_eps);
    if (m->head_bf16) { /* BF16 operands: dtmp [N, W >= D] and headT [D*V] are free here */
        mx_bf16_fakequant(m->xnf, m->dtmp, (size_t)N * D);
        mx_bf16_fakequant(P(m, MX_P_HEAD), m->headT, (size_t)V * D);
        CHK(mx_sgemm_tn(m->dtmp, m->headT, m->logits, N, V, D, 0)); /* logits [N, V] */
    } else {
        CHK(mx_sgemm_tn(m->xnf, P(m, MX_P_HEAD), m->logits, N, V, D, 0)); /* logits [N, V] */
    }
    if (targets) {
        float lo = mx_xent_forward(m->logits, m->losses, targets, N, V);
        if (loss) *loss = lo;
    }
    return MX_OK;
}

int mx_llama_backward(mx_llama* m, const int32_t* tokens, const int32_t* targets, float grad_scale) {
    const mx_model_config* c = &m->cfg;
    const int B = m->B, T = m->T, N = B * T, D = c->dim, L = c->n_layers, V = c->vocab, F = c->ffn;
    const int H = c->n_heads, KV = c->n_kv_heads, hd = D / H, QD = H * hd, KD = KV * hd;
    if (!m->acts) return mx_fail(MX_EINVAL, "model: backward before forward");

    /* head and loss: logits [N, V] hold the probabilities; turn them into dlogits */
    mx_xent_backward(m->logits, targets, N, V, grad_scale);
    if (m->head_bf16) mx_bf16_fakequant(m->logits, m->logits, (size_t)N * V); /* dlogits in BF16 */
    transpose(m->scratchT, m->logits, N, V); /* dlogits^T [V, N] */
    transpose(m->dtmp, m->xnf, N, D);        /* xnf^T [D, N] (dtmp [N, W >= D] is free here; headT is
                                              * only [D, V], too small when N > V) */
    if (m->head_bf16) mx_bf16_fakequant(m->dtmp, m->dtmp, (size_t)D * N);
    CHK(mx_sgemm_tn(m->scratchT, m->dtmp, G(m, MX_P_HEAD), V, D, N, 1)); /* dhead [V, D] += dlogits^T xnf */
    transpose(m->headT, P(m, MX_P_HEAD), V, D); /* head^T [D, V] */
    if (m->head_bf16) mx_bf16_fakequant(m->headT, m->headT, (size_t)D * V);
    CHK(mx_sgemm_tn(m->logits, m->headT, m->dxn, N, D, V, 0)); /* dxnf [N, D] = dlogits head */
    memset(m->dx, 0, sizeof(float) * N * D);
    mx_rmsnorm_backward(m->dx, G(m, MX_P_FINAL_NORM), m->dxn, m->x + (size_t)L * N * D, P(m, MX_P_FINAL_NORM),
                        m->rstdf, N, D);

    for (int l = L - 1; l >= 0; l--) {
        /* m->dx [N, D]: gradient of the block output x[l+1] = xmid + down(hid) */
        float* x = m->x + (size_t)l * N * D;
        float* xn1 = m->xn1 + (size_t)l * N * D;
        float* q = m->q + (size_t)l * N * QD;
        float* k = m->k + (size_t)l * N * KD;
        float* v = m->v + (size_t)l * N * KD;
        float* att = m->att + (size_t)l * B * H * T * T;
        float* ao = m->ao + (size_t)l * N * QD;
        float* xmid = m->xmid + (size_t)l * N * D;
        float* xn2 = m->xn2 + (size_t)l * N * D;
        float* gate = m->gate + (size_t)l * N * F;
        float* up = m->up + (size_t)l * N * F;
        float* hid = m->hid + (size_t)l * N * F;

        memset(m->dhid, 0, sizeof(float) * N * F);
        CHK(lin_bwd(m, l, MX_LIN_DOWN, hid, P(m, MX_P_WDOWN) + (size_t)l * D * F, m->dx, m->dhid,
                    G(m, MX_P_WDOWN) + (size_t)l * D * F, N, F, D));
        if (act16(m, MX_ACT16_FFN)) round16(m->dhid, (size_t)N * F); /* the GPU's BF16 output */
        mx_swiglu_backward(m->dgate, m->dup, m->dhid, gate, up, (size_t)N * F);
        if (act16(m, MX_ACT16_FFN)) { /* the GPU's BF16 SwiGLU backward */
            round16(m->dgate, (size_t)N * F);
            round16(m->dup, (size_t)N * F);
        }
        memset(m->dxn, 0, sizeof(float) * N * D);
        CHK(lin_bwd(m, l, MX_LIN_GATE, xn2, P(m, MX_P_WGATE) + (size_t)l * F * D, m->dgate, m->dxn,
                    G(m, MX_P_WGATE) + (size_t)l * F * D, N, D, F));
        CHK(lin_bwd(m, l, MX_LIN_UP, xn2, P(m, MX_P_WUP) + (size_t)l * F * D, m->dup, m->dxn,
                    G(m, MX_P_WUP) + (size_t)l * F * D, N, D, F));
        /* dx becomes the gradient of xmid: residual + the norm's path */
        mx_rmsnorm_backward(m->dx, G(m, MX_P_FFN_NORM) + (size_t)l * D, m->dxn, xmid,
                            P(m, MX_P_FFN_NORM) + (size_t)l * D, m->rstd2 + (size_t)l * N, N, D);

        memset(m->dao, 0, sizeof(float) * N * QD);
        CHK(lin_bwd(m, l, MX_LIN_O, ao, P(m, MX_P_WO) + (size_t)l * D * QD, m->dx, m->dao,
                    G(m, MX_P_WO) + (size_t)l * D * QD, N, QD, D));
        const int a16 = act16(m, MX_ACT16_ATTN); /* the GPU's BF16 outputs */
        if (a16) round16(m->dao, (size_t)N * QD);
        mx_attention_backward(m->dq, m->dk, m->dv, m->dao, att, q, k, v, B, T, H, KV, hd);
        if (a16) {
            round16(m->dq, (size_t)N * QD);
            round16(m->dk, (size_t)N * KD);
            round16(m->dv, (size_t)N * KD);
        }
        mx_rope_backward(m->dq, m->rope_cos, m->rope_sin, B, T, H, hd);
        mx_rope_backward(m->dk, m->rope_cos, m->rope_sin, B, T, KV, hd);
        if (a16) {
            round16(m->dq, (size_t)N * QD);
            round16(m->dk, (size_t)N * KD);
        }
        memset(m->dxn, 0, sizeof(float) * N * D);
        CHK(lin_bwd(m, l, MX_LIN_Q, xn1, P(m, MX_P_WQ) + (size_t)l * QD * D, m->dq, m->dxn,
                    G(m, MX_P_WQ) + (size_t)l * QD * D, N, D, QD));
        CHK(lin_bwd(m, l, MX_LIN_K, xn1, P(m, MX_P_WK) + (size_t)l * KD * D, m->dk, m->dxn,
                    G(m, MX_P_WK) + (size_t)l * KD * D, N, D, KD));
        CHK(lin_bwd(m, l, MX_LIN_V, xn1, P(m, MX_P_WV) + (size_t)l * KD * D, m->dv, m->dxn,
                    G(m, MX_P_WV) + (size_t)l * KD * D, N, D, KD));
        /* dx becomes the gradient of the block input x[l] */
        mx_rmsnorm_backward(m->dx, G(m, MX_P_ATTN_NORM) + (size_t)l * D, m->dxn, x,
                            P(m, MX_P_ATTN_NORM) + (size_t)l * D, m->rstd1 + (size_t)l * N, N, D);
    }
    mx_embedding_backward(G(m, MX_P_EMBED), m->dx, tokens, N, D);
    return MX_OK;
}
