/* test_model.c: the Llama 3 model. Finite-difference checks of every layer's
 * backward, a whole-model finite-difference check through the quantized
 * linear layer (fp32 recipe), the comparison with the PyTorch fixture
 * (tools/torch_fixture.py -> tests/fixtures/llama_micro.bin), presets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/model.h"
#include "test.h"

/* deterministic pseudo-random floats in [-1, 1) */
static float frand(uint32_t* s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) * (1.0 / 8388608.0)) - 1.0f;
}
static void fill(float* x, size_t n, uint32_t seed, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * frand(&seed);
}
static double dot(const float* a, const float* b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}
/* |num - ana| <= atol + rtol |ana| */
#define CHECK_GRAD(num, ana) CHECK_NEAR((num), (ana), 2e-3 + 2e-2 * fabs((double)(ana)))

/* ---- per-layer finite differences: L = sum(out * R) ----------------------------- */

TEST(rmsnorm_grad_fd) {
    enum { N = 6, D = 64 };
    float x[N * D], w[D], out[N * D], R[N * D], rstd[N], dx[N * D] = {0}, dw[D] = {0}, gout[N * D];
    fill(x, N * D, 1, 1.5f);
    fill(w, D, 2, 1.0f);
    fill(R, N * D, 3, 1.0f);
    memcpy(gout, R, sizeof R);
    mx_rmsnorm_forward(out, rstd, x, w, N, D, 1e-5f);
    mx_rmsnorm_backward(dx, dw, gout, x, w, rstd, N, D);
    const float eps = 1e-2f;
    for (int i = 0; i < N * D; i += 37) {
        float s = x[i];
        x[i] = s + eps; mx_rmsnorm_forward(out, rstd, x, w, N, D, 1e-5f); double lp = dot(out, R, N * D);
        x[i] = s - eps; mx_rmsnorm_forward(out, rstd, x, w, N, D, 1e-5f); double lm = dot(out, R, N * D);
        x[i] = s;
        CHECK_GRAD((lp - lm) / (2 * eps), dx[i]);
    }
    for (int i = 0; i < D; i += 5) {
        float s = w[i];
        w[i] = s + eps; mx_rmsnorm_forward(out, rstd, x, w, N, D, 1e-5f); double lp = dot(out, R, N * D);
        w[i] = s - eps; mx_rmsnorm_forward(out, rstd, x, w, N, D, 1e-5f); double lm = dot(out, R, N * D);
        w[i] = s;
        CHECK_GRAD((lp - lm) / (2 * eps), dw[i]);
    }
    /* a value: the norm of a constant row is exactly w */
    float c[D], o[D], r1;
    for (int i = 0; i < D; i++) c[i] = 3.0f;
    mx_rmsnorm_forward(o, &r1, c, w, 1, D, 0.0f);
    CHECK_NEAR(o[7], w[7], 1e-6);
    CHECK_NEAR(r1, 1.0 / 3.0, 1e-7);
}

TEST(rope_values_and_grad) {
    enum { B = 2, T = 5, NH = 3, HD = 8 };
    float cs[T * HD / 2], sn[T * HD / 2];
    mx_rope_tables(cs, sn, T, HD, 500000.0f);
    /* inv_freq_1 = 500000^(-2/8); position 3 angle = 3 * that */
    CHECK_NEAR(cs[3 * 4 + 1], cos(3.0 * pow(500000.0, -0.25)), 1e-6);
    CHECK_NEAR(sn[3 * 4 + 0], sin(3.0), 1e-6);
    CHECK_SAME_F(cs[0], 1.0f);
    float x[B * T * NH * HD], y[B * T * NH * HD], R[B * T * NH * HD], g[B * T * NH * HD];
    fill(x, B * T * NH * HD, 5, 1.0f);
    fill(R, B * T * NH * HD, 6, 1.0f);
    memcpy(y, x, sizeof x);
    mx_rope_forward(y, cs, sn, B, T, NH, HD);
    /* rotate-half: element (t=1, head 0, i=0) pairs with i+4 */
    int n1 = 1 * NH * HD;
    CHECK_NEAR(y[n1 + 0], x[n1 + 0] * cs[4] - x[n1 + 4] * sn[4], 1e-6);
    CHECK_NEAR(y[n1 + 4], x[n1 + 4] * cs[4] + x[n1 + 0] * sn[4], 1e-6);
    /* position T (second sequence) restarts at 0: identity at t = 0 */
    CHECK_SAME_F(y[T * NH * HD + 3], x[T * NH * HD + 3]);
    /* the backward of a linear map is its transpose: <R, rope(x)> = <rope^T(R), x> */
    memcpy(g, R, sizeof R);
    mx_rope_backward(g, cs, sn, B, T, NH, HD);
    CHECK_NEAR(dot(R, y, B * T * NH * HD), dot(g, x, B * T * NH * HD), 1e-4);
}

static void att_loss(const float* q, const float* k, const float* v, const float* R, double* L, int B, int T, int H,
                     int KV, int hd) {
    float* out = malloc(sizeof(float) * B * T * H * hd);
    float* att = malloc(sizeof(float) * B * H * T * T);
    mx_attention_forward(out, att, q, k, v, B, T, H, KV, hd);
    *L = dot(out, R, (size_t)B * T * H * hd);
    free(out);
    free(att);
}

/* FD check of attention for one shape (hd >= 8 and T > 8 exercise the
 * 8-wide paths). */
static void attention_fd(int B, int T, int H, int KV, int HD, int stride) {
    size_t NQ = (size_t)B * T * H * HD, NK = (size_t)B * T * KV * HD;
    float *q = malloc(NQ * 4), *k = malloc(NK * 4), *v = malloc(NK * 4), *R = malloc(NQ * 4), *out = malloc(NQ * 4);
    float *att = malloc((size_t)B * H * T * T * 4), *dq = malloc(NQ * 4), *dk = malloc(NK * 4), *dv = malloc(NK * 4);
    fill(q, NQ, 11, 1.0f);
    fill(k, NK, 12, 1.0f);
    fill(v, NK, 13, 1.0f);
    fill(R, NQ, 14, 1.0f);
    mx_attention_forward(out, att, q, k, v, B, T, H, KV, HD);
    /* causal: row t sums to 1 and is zero past t */
    double s = 0;
    for (int j = 0; j < T; j++) s += att[3 * T + j];
    CHECK_NEAR(s, 1.0, 1e-6);
    CHECK_SAME_F(att[3 * T + 4], 0.0f);
    /* position 0 attends only to itself: out = v of its KV head (h = H-1 -> kv KV-1) */
    CHECK_NEAR(out[(H - 1) * HD + 2], v[(KV - 1) * HD + 2], 1e-6);
    mx_attention_backward(dq, dk, dv, R, att, q, k, v, B, T, H, KV, HD);
    const float eps = 1e-2f;
    float* arrs[3] = {q, k, v};
    float* grads[3] = {dq, dk, dv};
    size_t ns[3] = {NQ, NK, NK};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < ns[a]; i += (size_t)stride) {
            float sv = arrs[a][i];
            double lp, lm;
            arrs[a][i] = sv + eps; att_loss(q, k, v, R, &lp, B, T, H, KV, HD);
            arrs[a][i] = sv - eps; att_loss(q, k, v, R, &lm, B, T, H, KV, HD);
            arrs[a][i] = sv;
            CHECK_GRAD((lp - lm) / (2 * eps), grads[a][i]);
        }
    free(q); free(k); free(v); free(R); free(out); free(att); free(dq); free(dk); free(dv);
}

TEST(attention_grad_fd) {
    attention_fd(2, 6, 4, 2, 8, 13);    /* short rows: scalar tails */
    attention_fd(1, 12, 2, 1, 32, 41);  /* head dim 32, rows past 8: the vector paths */
}

TEST(swiglu_grad_fd) {
    enum { N = 200 };
    float g[N], u[N], h[N], R[N], dg[N], du[N];
    fill(g, N, 21, 4.0f);
    fill(u, N, 22, 2.0f);
    fill(R, N, 23, 1.0f);
    mx_swiglu_forward(h, g, u, N);
    CHECK_NEAR(h[5], g[5] / (1.0 + exp(-g[5])) * u[5], 1e-6);
    mx_swiglu_backward(dg, du, R, g, u, N);
    const float eps = 1e-2f;
    for (int i = 0; i < N; i += 7) {
        float s = g[i];
        g[i] = s + eps; mx_swiglu_forward(h, g, u, N); double lp = dot(h, R, N);
        g[i] = s - eps; mx_swiglu_forward(h, g, u, N); double lm = dot(h, R, N);
        g[i] = s;
        CHECK_GRAD((lp - lm) / (2 * eps), dg[i]);
        s = u[i];
        u[i] = s + eps; mx_swiglu_forward(h, g, u, N); lp = dot(h, R, N);
        u[i] = s - eps; mx_swiglu_forward(h, g, u, N); lm = dot(h, R, N);
        u[i] = s;
        CHECK_GRAD((lp - lm) / (2 * eps), du[i]);
    }
}

TEST(xent_values_and_grad) {
    enum { N = 3, V = 10 };
    float z[N * V], p[N * V], loss[N];
    int32_t tg[N] = {2, 9, 0};
    fill(z, N * V, 31, 3.0f);
    memcpy(p, z, sizeof z);
    float mean = mx_xent_forward(p, loss, tg, N, V);
    double ref = 0;
    for (int n = 0; n < N; n++) {
        double se = 0;
        for (int i = 0; i < V; i++) se += exp(z[n * V + i]);
        double l = log(se) - z[n * V + tg[n]];
        CHECK_NEAR(loss[n], l, 1e-5);
        ref += l / N;
    }
    CHECK_NEAR(mean, ref, 1e-5);
    mx_xent_backward(p, tg, N, V, 1.0f / N);
    const float eps = 1e-2f;
    for (int i = 0; i < N * V; i++) {
        float s = z[i], q[N * V];
        z[i] = s + eps; memcpy(q, z, sizeof q); double lp = mx_xent_forward(q, loss, tg, N, V);
        z[i] = s - eps; memcpy(q, z, sizeof q); double lm = mx_xent_forward(q, loss, tg, N, V);
        z[i] = s;
        CHECK_NEAR((lp - lm) / (2 * eps), p[i], 2e-3);
    }
    /* a NaN logit gives a NaN loss (the trainer's divergence signal) */
    float zn[V] = {0};
    zn[4] = NAN;
    float ln;
    int32_t t0 = 1;
    CHECK(isnan(mx_xent_forward(zn, &ln, &t0, 1, V)));
}

TEST(embedding_fwd_bwd) {
    float table[4 * 3] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, out[3 * 3], d[4 * 3] = {0};
    int32_t tok[3] = {2, 0, 2};
    mx_embedding_forward(out, tok, table, 3, 3);
    CHECK_SAME_F(out[1], 21.0f);
    CHECK_SAME_F(out[3], 0.0f);
    float g[9] = {1, 1, 1, 2, 2, 2, 4, 4, 4};
    mx_embedding_backward(d, g, tok, 3, 3);
    CHECK_SAME_F(d[2 * 3 + 0], 5.0f);
    CHECK_SAME_F(d[0], 2.0f);
    CHECK_SAME_F(d[3], 0.0f);
}

/* ---- whole model ---------------------------------------------------------------- */

static mx_model_config micro_config(void) {
    mx_model_config c;
    mx_model_preset("tiny", &c);
    c.vocab = 64; c.dim = 64; c.n_layers = 2; c.n_heads = 2; c.n_kv_heads = 1; c.ffn = 96; c.seq_len = 16;
    return c;
}

/* Central difference of the loss in parameter i (the parameter is restored). */
static double fd_grad(mx_llama* m, const int32_t* tok, const int32_t* tgt, int B, int T, size_t i, float eps) {
    float sv = m->params[i], lp, lm;
    m->params[i] = sv + eps;
    mx_llama_forward(m, tok, tgt, B, T, &lp);
    m->params[i] = sv - eps;
    mx_llama_forward(m, tok, tgt, B, T, &lm);
    m->params[i] = sv;
    return ((double)lp - lm) / (2 * eps);
}

/* An FP32 model (weights of `seed`, x3: larger than the init so every path matters), random tokens and
 * targets tok, tgt [B*T] (frand from s) and the gradients of one forward + backward; 0 on a failure. */
static int fd_model(mx_llama* m, const mx_model_config* c, uint64_t seed, uint32_t s, int32_t* tok, int32_t* tgt,
                    int B, int T) {
    mx_recipe r;
    if (mx_recipe_parse("fp32", &r) || mx_llama_create(m, c, &r, 0, 0, seed)) return 0;
    mx_llama_init_weights(m, seed);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] *= 3.0f;
    for (int i = 0; i < B * T; i++) { tok[i] = (int32_t)((frand(&s) + 1) * 31.9f); tgt[i] = (int32_t)((frand(&s) + 1) * 31.9f); }
    float loss;
    if (mx_llama_forward(m, tok, tgt, B, T, &loss)) return 0;
    mx_llama_zero_grad(m);
    return mx_llama_backward(m, tok, tgt, 1.0f / (B * T)) == 0;
}

TEST(model_grad_fd_fp32) {
    mx_model_config c = micro_config();
    mx_llama m;
    enum { B = 2, T = 16 };
    int32_t tok[B * T], tgt[B * T];
    REQUIRE(fd_model(&m, &c, 7, 99, tok, tgt, B, T));
    const float eps = 2e-3f;
    int checked = 0;
    for (int t = 0; t < MX_P_COUNT; t++) {
        size_t off = m.info[t].offset, n = m.info[t].numel;
        for (int j = 0; j < 3; j++) {
            size_t i = off + (n * (size_t)(2 * j + 1)) / 7;
            /* embedding rows of tokens that occur (other rows have a zero gradient) */
            if (t == MX_P_EMBED) i = off + (size_t)tok[5 * j + 1] * c.dim + (size_t)(7 * j) % c.dim;
            double num = fd_grad(&m, tok, tgt, B, T, i, eps);
            CHECKF(fabs(num - m.grads[i]) <= 2e-3 + 3e-2 * fabs(m.grads[i]), "%s[%zu]: fd %.6g, backward %.6g",
                   m.info[t].name, i - off, num, (double)m.grads[i]);
            checked++;
        }
    }
    CHECK_EQ_INT(checked, 3 * MX_P_COUNT);
    mx_llama_free(&m);
}

/* More tokens than the vocabulary (N = 128 > V = 64): the head's backward
 * needs xnf^T [D, N] scratch larger than head^T [D, V] (a bug found in review
 * wrote past it). Central differences on head, final norm and embedding. */
TEST(model_head_grad_when_tokens_exceed_vocab) {
    mx_model_config c = micro_config();
    c.n_layers = 1;
    mx_llama m;
    enum { B = 8, T = 16 };
    int32_t tok[B * T], tgt[B * T];
    REQUIRE(fd_model(&m, &c, 3, 5, tok, tgt, B, T));
    const int ts[3] = {MX_P_HEAD, MX_P_FINAL_NORM, MX_P_EMBED};
    const float eps = 2e-3f;
    double worst = 0, gmax = 0;
    for (int q = 0; q < 3; q++) {
        size_t off = m.info[ts[q]].offset, n = m.info[ts[q]].numel;
        for (int j = 0; j < 8; j++) {
            size_t i = off + (ts[q] == MX_P_EMBED ? (size_t)tok[j * 13] * c.dim + j : (n * (size_t)(2 * j + 1)) / 17);
            double num = fd_grad(&m, tok, tgt, B, T, i, eps);
            /* FP32 loss: the difference quotient resolves ~1e-4 absolute */
            worst = fmax(worst, fabs(num - m.grads[i]) / (3e-4 + 2e-2 * fabs(num)));
            gmax = fmax(gmax, fabs(num));
        }
    }
    CHECKF(gmax > 1e-3, "probes too small to test anything (%g)", gmax);
    CHECKF(worst <= 1.0, "gradient error %.3g x the tolerance (3e-4 + 2e-2 |fd|)", worst);
    mx_llama_free(&m);
}

/* The fixture from tools/torch_fixture.py. */
typedef struct {
    int V, D, L, H, KV, F, T, B;
    int32_t *tok, *tgt;
    float *params, *logits, *grads, loss;
    size_t n;
} fixture;

static int load_fixture(fixture* fx) {
    FILE* f = fopen("tests/fixtures/llama_micro.bin", "rb");
    if (!f) return -1;
    char magic[8];
    int32_t h[8];
    double th[2];
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, "MXLMFIX1", 8) && fread(h, 4, 8, f) == 8 &&
             fread(th, 8, 2, f) == 2;
    if (!ok) { fclose(f); return -1; }
    fx->V = h[0]; fx->D = h[1]; fx->L = h[2]; fx->H = h[3]; fx->KV = h[4]; fx->F = h[5]; fx->T = h[6]; fx->B = h[7];
    mx_model_config c;
    mx_model_preset("tiny", &c);
    c.vocab = fx->V; c.dim = fx->D; c.n_layers = fx->L; c.n_heads = fx->H; c.n_kv_heads = fx->KV; c.ffn = fx->F;
    c.seq_len = fx->T;
    fx->n = (size_t)mx_model_n_params(&c);
    size_t N = (size_t)fx->B * fx->T;
    fx->tok = malloc(N * 4); fx->tgt = malloc(N * 4);
    fx->params = malloc(fx->n * 4); fx->grads = malloc(fx->n * 4); fx->logits = malloc(N * fx->V * 4);
    ok = fread(fx->tok, 4, N, f) == N && fread(fx->tgt, 4, N, f) == N && fread(fx->params, 4, fx->n, f) == fx->n &&
         fread(&fx->loss, 4, 1, f) == 1 && fread(fx->logits, 4, N * fx->V, f) == N * fx->V &&
         fread(fx->grads, 4, fx->n, f) == fx->n && fgetc(f) == EOF;
    fclose(f);
    return ok ? 0 : -1;
}
static void free_fixture(fixture* fx) {
    free(fx->tok); free(fx->tgt); free(fx->params); free(fx->grads); free(fx->logits);
}

/* Run the fixture's batch with a recipe; relative max error of logits and of
 * each gradient tensor (max |ours - torch| / max |torch|). */
static void run_fixture(const char* recipe, int act16, double tol_loss, double tol_logit, double tol_grad) {
    fixture fx;
    REQUIRE(load_fixture(&fx) == 0);
    mx_model_config c;
    mx_model_preset("tiny", &c);
    c.vocab = fx.V; c.dim = fx.D; c.n_layers = fx.L; c.n_heads = fx.H; c.n_kv_heads = fx.KV; c.ffn = fx.F;
    c.seq_len = fx.T;
    mx_recipe r;
    REQUIRE(mx_recipe_parse(recipe, &r) == 0);
    mx_llama m;
    REQUIRE(mx_llama_create(&m, &c, &r, 0, 0, 1) == 0);
    REQUIRE(m.n_params == fx.n);
    m.act16 = act16;
    memcpy(m.params, fx.params, fx.n * 4);
    float loss;
    REQUIRE(mx_llama_forward(&m, fx.tok, fx.tgt, fx.B, fx.T, &loss) == 0);
    CHECK_NEAR(loss, fx.loss, tol_loss);
    /* logits: m.logits holds probabilities now; recompute them from xnf and the head */
    size_t N = (size_t)fx.B * fx.T;
    double lmax = 0, lerr = 0;
    for (size_t n = 0; n < N; n++)
        for (int v = 0; v < fx.V; v++) {
            double z = 0;
            for (int d = 0; d < fx.D; d++)
                z += (double)m.xnf[n * fx.D + d] * m.params[m.info[MX_P_HEAD].offset + (size_t)v * fx.D + d];
            double ref = fx.logits[n * fx.V + v];
            lmax = fmax(lmax, fabs(ref));
            lerr = fmax(lerr, fabs(z - ref));
        }
    CHECKF(lerr <= tol_logit * lmax, "%s: logits max error %.3g (max %.3g)", recipe, lerr, lmax);
    mx_llama_zero_grad(&m);
    REQUIRE(mx_llama_backward(&m, fx.tok, fx.tgt, 1.0f / (float)N) == 0);
    for (int t = 0; t < MX_P_COUNT; t++) {
        const float* a = m.grads + m.info[t].offset;
        const float* b = fx.grads + m.info[t].offset;
        double gm = 0, ge = 0;
        for (size_t i = 0; i < m.info[t].numel; i++) {
            gm = fmax(gm, fabs(b[i]));
            ge = fmax(ge, fabs((double)a[i] - b[i]));
        }
        CHECKF(gm > 0 && ge <= tol_grad * gm, "%s: d%s max error %.3g (max %.3g)", recipe, m.info[t].name, ge, gm);
    }
    mx_llama_free(&m);
    free_fixture(&fx);
}

TEST(model_matches_pytorch_fp32) { run_fixture("fp32", 0, 2e-6, 1e-5, 1e-5); }
/* BF16 operands in every block linear (FP32 accumulate): looser, stated bounds; act16 (gate, up, dhid
 * rounded to BF16 as the GPU stores them, ~2^-9 relative each) within the same bounds but the loss's, 3e-3
 * (measured 1.2e-3 from the FP32 fixture, 1.2e-4 without act16). */
TEST(model_matches_pytorch_bf16) { run_fixture("bf16", 0, 1e-3, 2e-2, 3e-2); }
TEST(model_matches_pytorch_bf16_act16) { run_fixture("bf16", MX_ACT16_FFN | MX_ACT16_ATTN, 3e-3, 2e-2, 3e-2); }

/* mx_llama.act16: gate and up (forward) and dhid (backward) hold BF16 values exactly, the result
 * moves (the rounding points are real); fp8 (its quantizers then read the BF16 values, as the GPU's
 * act16 makes them: mx_act16_possible) moves too; for FP32 GEMMs (no BF16 storage) it changes no bit. */
static int all_bf16(const float* x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (mx_round_bf16(x[i]) != x[i]) return 0;
    return 1;
}

TEST(model_act16_rounding_points) {
    mx_model_config c = micro_config();
    const int B = 2, T = 16, N = B * T;
    int32_t tok[32], tgt[32];
    for (int n = 0; n < N; n++) { tok[n] = (n * 7 + 3) % 64; tgt[n] = (n * 5 + 1) % 64; }
    const char* recipes[3] = {"bf16", "fp8", "fp32"};
    for (int k = 0; k < 3; k++) {
        mx_recipe r;
        REQUIRE(mx_recipe_parse(recipes[k], &r) == 0);
        float loss[2];
        float* grads[2];
        for (int a = 0; a < 2; a++) {
            mx_llama m;
            REQUIRE(mx_llama_create(&m, &c, &r, 0, 0, 1) == 0);
            mx_llama_init_weights(&m, 3);
            m.act16 = a ? MX_ACT16_FFN | MX_ACT16_ATTN : 0;
            REQUIRE(mx_llama_forward(&m, tok, tgt, B, T, &loss[a]) == 0);
            const size_t nf = (size_t)c.n_layers * N * c.ffn, nq = (size_t)c.n_layers * N * c.dim;
            const size_t nk = nq / c.n_heads * c.n_kv_heads;
            if (k == 0 && a) CHECKF(all_bf16(m.gate, nf) && all_bf16(m.up, nf), "act16: gate/up not BF16");
            if (k == 0) CHECK(all_bf16(m.q, nq) == a && all_bf16(m.k, nk) == a && all_bf16(m.v, nk) == a);
            if (k == 0 && !a) CHECK(!all_bf16(m.gate, nf)); /* else the check above says nothing */
            if (k < 2 && a) /* the linears' inputs as the GPU stores them (a quantizer reads these) */
                CHECKF(all_bf16(m.xn1, nq) && all_bf16(m.xn2, nq) && all_bf16(m.hid, nf) && all_bf16(m.ao, nq),
                       "%s act16: a linear's input not BF16", recipes[k]);
            mx_llama_zero_grad(&m);
            REQUIRE(mx_llama_backward(&m, tok, tgt, 1.0f / N) == 0);
            if (k == 0) { /* layer 0's, the last computed */
                CHECK(all_bf16(m.dhid, (size_t)N * c.ffn) == a);
                CHECK(all_bf16(m.dq, (size_t)N * c.dim) == a && all_bf16(m.dao, (size_t)N * c.dim) == a);
            }
            grads[a] = malloc(m.n_params * 4);
            memcpy(grads[a], m.grads, m.n_params * 4);
            const size_t np = m.n_params;
            mx_llama_free(&m);
            if (a) {
                int same = !memcmp(grads[0], grads[1], np * 4) && !memcmp(&loss[0], &loss[1], 4);
                CHECKF(same == (k == 2), "%s: act16 %s the result", recipes[k], k == 2 ? "changed" : "did not change");
                CHECK_NEAR(loss[1], loss[0], 1e-2 * fabs(loss[0]));
            }
        }
        free(grads[0]);
        free(grads[1]);
    }
}

TEST(presets_and_param_counts) {
    mx_model_config c;
    REQUIRE(mx_model_preset("llama3.1-8b", &c) == 0);
    CHECK_EQ_INT(mx_model_n_params(&c), 8030261248LL); /* Llama 3.1 8B's published count */
    CHECK_EQ_INT(c.n_kv_heads, 8);
    CHECK_EQ_INT(c.ffn, 14336);
    REQUIRE(mx_model_preset("tiny", &c) == 0);
    CHECK_EQ_INT(c.vocab, 4096);
    CHECK_EQ_INT(mx_model_n_params(&c), 1836160);
    CHECK_NEAR(c.rope_theta, 500000.0, 0);
    CHECK_NEAR(c.norm_eps, 1e-5, 1e-12);
    for (const char* const* p = mx_model_preset_names(); *p; p++) {
        REQUIRE(mx_model_preset(*p, &c) == 0);
        CHECK(mx_model_config_check(&c) == 0);
        CHECKF(c.dim % 32 == 0 && c.ffn % 32 == 0 && (c.dim / c.n_heads * c.n_kv_heads) % 32 == 0,
               "%s: a linear dim is not a multiple of 32", *p);
    }
    CHECK(mx_model_preset("nope", &c) != 0);
}

TEST(model_rejects_bad_tokens_and_shapes) {
    mx_model_config c = micro_config();
    mx_recipe r;
    REQUIRE(mx_recipe_parse("mxfp4-fdw-h16", &r) == 0);
    mx_llama m;
    REQUIRE(mx_llama_create(&m, &c, &r, 0, 0, 1) == 0);
    mx_llama_init_weights(&m, 1);
    int32_t tok[48] = {0}, tgt[48] = {0};
    float loss;
    tok[5] = 64; /* == vocab */
    CHECK(mx_llama_forward(&m, tok, tgt, 2, 16, &loss) != 0);
    tok[5] = 3;
    CHECK(mx_llama_forward(&m, tok, tgt, 2, 16, &loss) == 0);
    /* 48 tokens: H16 divides it, but the MXFP4 Wgrad reduction (tokens) is not a multiple of 32 */
    CHECK(mx_llama_forward(&m, tok, tgt, 3, 16, &loss) == 0);
    CHECK(mx_llama_backward(&m, tok, tgt, 1.0f / 48) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "multiple of 32") != NULL);
    mx_llama_free(&m);
}

TEST(model_bf16_first_last_blocks) {
    mx_model_config c = micro_config();
    c.n_layers = 4;
    mx_recipe r;
    REQUIRE(mx_recipe_parse("mxfp4-fdw", &r) == 0);
    mx_llama m;
    REQUIRE(mx_llama_create(&m, &c, &r, 1, 2, 1) == 0);
    CHECK(mx_llama_block_recipe(&m, 0)->g[0].fmt == MX_FMT_BF16);
    CHECK(mx_llama_block_recipe(&m, 1)->g[0].fmt == MX_FMT_MXFP4);
    CHECK(mx_llama_block_recipe(&m, 2)->g[0].fmt == MX_FMT_BF16);
    CHECK(mx_llama_block_recipe(&m, 3)->g[2].fmt == MX_FMT_BF16);
    mx_llama_free(&m);
}
