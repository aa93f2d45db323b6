/*
 * test_attention_flash.cu: the BF16 tensor-core flash attention (src/cuda/nn/attention_flash.cu)
 * against the CPU attention (src/nn/attention.c, FP32) on the same BF16-rounded inputs, and against
 * the FP32 GPU kernels (layers.cu) at shapes where the CPU is too slow. Run:
 * make test-gpu-attn [T=substring] (build/cuda/tests/gpu/attn). Ends with "N passed, N failed".
 *
 * Every case: random non-zero inputs (fixed seed, MXG_SEED to change it) rounded to BF16, outputs
 * poisoned with NaN before each GPU run (every element must be written), two GPU runs compared
 * byte for byte (determinism). Tolerances (BF16 operands incl. P and dS, FP32 accumulation):
 *   out, dq, dk, dv   ||gpu - ref|| / ||ref|| <= 1e-2 (normwise over the tensor; measured 1.3e-3..3.6e-3)
 *   lse               max |gpu - ref| <= 1e-4 (ref: the log-sum-exp in FP64 of the same inputs)
 * `attn --bench` prints the forward and backward TFLOP/s at the issue's shapes instead (causal
 * FLOPs counted as half: forward 4 B H T^2 hd / 2, backward 2.5x the forward); `attn --kernels
 * [fwd,mt,dq,mt,dkv,mt]` runs each shape once (the defaults or that configuration) for a profiler to
 * time kernel by kernel.
 */
#include <algorithm>
#include <vector>

#include "mxlm/mx_scalar.h"
#include "test.cuh"

typedef std::vector<uint16_t> vecb;

/* float <-> bf16 bits: the library's scalar steps (round to nearest even) */
static uint16_t f2b(float f) { return mx_bf16_from_f32(f); }
static float b2f(uint16_t b) { return mx_bf16_to_f32(b); }
/* n normal values times s, rounded to BF16: the float copy and the bits */
static void randb(size_t n, float s, vecf& f, vecb& b) {
    f.resize(n);
    b.resize(n);
    for (size_t i = 0; i < n; i++) {
        b[i] = f2b(s * rndnf());
        f[i] = b2f(b[i]);
    }
}
static vecf tof(const vecb& b) {
    vecf f(b.size());
    for (size_t i = 0; i < b.size(); i++) f[i] = b2f(b[i]);
    return f;
}

/* ---- comparisons ---- */
static double g_worst = 0;
static void frob(const char* what, const vecf& g, const vecf& c, double tol) {
    double d2 = 0, c2 = 0, dmax = 0, cmax = 0;
    size_t nonfin = 0;
    for (size_t i = 0; i < c.size(); i++) {
        if (!isfinite(g[i])) nonfin++;
        const double d = (double)g[i] - c[i];
        d2 += d * d;
        c2 += (double)c[i] * c[i];
        dmax = fmax(dmax, fabs(d));
        cmax = fmax(cmax, fabs((double)c[i]));
    }
    const double fr = c2 > 0 ? sqrt(d2 / c2) : sqrt(d2);
    printf("    %-8s ||gpu - ref|| / ||ref|| = %.3g (tol %.0e), max |d| / max |ref| = %.3g\n", what, fr, tol,
           cmax > 0 ? dmax / cmax : dmax);
    if (nonfin) fail("%s: %zu non-finite elements (unwritten or NaN)", what, nonfin);
    else if (!(fr <= tol)) fail("%s: normwise error %.3g above %.0e", what, fr, tol);
    if (fr > g_worst) g_worst = fr;
}
static void lse_check(const vecf& g, const std::vector<double>& c, double tol) {
    double mx = 0;
    size_t bad = 0;
    for (size_t i = 0; i < c.size(); i++) {
        const double d = fabs((double)g[i] - c[i]);
        if (!(d <= tol)) bad++;
        if (d > mx || d != d) mx = d;
    }
    printf("    %-8s max |gpu - ref| = %.3g (tol %.0e)\n", "lse", mx, tol);
    if (bad) fail("lse: %zu of %zu rows out of tolerance", bad, c.size());
}
static void same(const char* what, const void* a, const void* b, size_t bytes) {
    if (memcmp(a, b, bytes)) fail("%s: two GPU runs differ (not deterministic)", what);
}

/* lse of the scaled scores in FP64 (the reference for both interfaces) */
static std::vector<double> lse_ref(const vecf& q, const vecf& k, int B, int T, int H, int KV, int hd) {
    std::vector<double> L((size_t)B * H * T);
    const double c = 1.0 / sqrt((double)hd);
    std::vector<double> s(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float* qt = &q[((size_t)(b * T + t) * H + h) * hd];
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const float* kj = &k[((size_t)(b * T + j) * KV + h / (H / KV)) * hd];
                    double a = 0;
                    for (int i = 0; i < hd; i++) a += (double)qt[i] * kj[i];
                    s[j] = a * c;
                    mx = fmax(mx, s[j]);
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                L[((size_t)b * H + h) * T + t] = mx + log(sum);
            }
    return L;
}

/* ---- against the CPU: iface 0 the BF16 entry points, 1 the FP32 wrappers ---- */
static const char* g_cfg_name = "";
/* A case's inputs (float copies and BF16 bits): q, k with scores of a few units (peaked and flat rows
 * both occur), v and dout of unit scale. */
static void rand_inputs(size_t nq, size_t nk, vecf& q, vecf& k, vecf& v, vecf& go, vecb& qb, vecb& kb, vecb& vb,
                        vecb& gob) {
    randb(nq, 1.5f, q, qb);
    randb(nk, 1.5f, k, kb);
    randb(nk, 1.0f, v, vb);
    randb(nq, 1.0f, go, gob);
}
static void test_cpu(int B, int T, int H, int KV, int hd, int iface) {
    char name[128];
    snprintf(name, sizeof name, "flash %s vs cpu B%d T%d H%d/%d hd%d%s", iface ? "fp32" : "bf16", B, T, H, KV, hd,
             g_cfg_name);
    if (!wanted(name)) return;
    begin(name);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nl = (size_t)B * H * T;
    vecf q, k, v, go;
    vecb qb, kb, vb, gob;
    rand_inputs(nq, nk, q, k, v, go, qb, kb, vb, gob);
    vecf out_c(nq), att((size_t)B * H * T * T), dq_c(nq), dk_c(nk), dv_c(nk);
    mx_attention_forward(out_c.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, KV, hd);
    mx_attention_backward(dq_c.data(), dk_c.data(), dv_c.data(), go.data(), att.data(), q.data(), k.data(), v.data(),
                          B, T, H, KV, hd);
    std::vector<double> L = lse_ref(q, k, B, T, H, KV, hd);
    const size_t es = iface ? 4 : 2;
    Dev dq_(nq * es), dk_(nk * es), dv_(nk * es), dgo(nq * es), dout(nq * es), dlse(nl * 4), ddelta(nl * 4);
    Dev gq(nq * es), gk(nk * es), gv(nk * es);
    if (iface) { up(dq_, q); up(dk_, k); up(dv_, v); up(dgo, go); }
    else { up(dq_, qb); up(dk_, kb); up(dv_, vb); up(dgo, gob); }
    vecf o[2], l[2], rq[2], rk[2], rv[2];
    for (int r = 0; r < 2; r++) {
        dout.poison(); dlse.poison(); gq.poison(); gk.poison(); gv.poison(); ddelta.poison();
        if (iface) {
            MXC(mxg_attention_forward_flash(dout.f(), dlse.f(), dq_.f(), dk_.f(), dv_.f(), B, T, H, KV, hd, NULL));
            MXC(mxg_attention_backward_flash(gq.f(), gk.f(), gv.f(), ddelta.f(), dgo.f(), dout.f(), dlse.f(), dq_.f(),
                                             dk_.f(), dv_.f(), B, T, H, KV, hd, NULL));
            o[r] = down<float>(dout, nq); rq[r] = down<float>(gq, nq); rk[r] = down<float>(gk, nk);
            rv[r] = down<float>(gv, nk);
        } else {
            MXC(mxg_attention_forward_flash_bf16(dout.h(), dlse.f(), dq_.h(), dk_.h(), dv_.h(), B, T, H, KV, hd, NULL));
            MXC(mxg_attention_backward_flash_bf16(gq.h(), gk.h(), gv.h(), ddelta.f(), dgo.h(), dout.h(), dlse.f(),
                                                  dq_.h(), dk_.h(), dv_.h(), B, T, H, KV, hd, NULL));
            o[r] = tof(down<uint16_t>(dout, nq)); rq[r] = tof(down<uint16_t>(gq, nq));
            rk[r] = tof(down<uint16_t>(gk, nk)); rv[r] = tof(down<uint16_t>(gv, nk));
        }
        l[r] = down<float>(dlse, nl);
    }
    CK(cudaGetLastError());
    frob("out", o[0], out_c, 1e-2);
    lse_check(l[0], L, 1e-4);
    frob("dq", rq[0], dq_c, 1e-2);
    frob("dk", rk[0], dk_c, 1e-2);
    frob("dv", rv[0], dv_c, 1e-2);
    same("out", o[0].data(), o[1].data(), nq * 4);
    same("lse", l[0].data(), l[1].data(), nl * 4);
    same("dq", rq[0].data(), rq[1].data(), nq * 4);
    same("dk", rk[0].data(), rk[1].data(), nk * 4);
    same("dv", rv[0].data(), rv[1].data(), nk * 4);
    if (!g_fail_case) printf("    deterministic: two runs, identical bytes (out, lse, dq, dk, dv)\n");
    end();
}

/* ---- the warp-specialized dq kernel against the wgmma one: the same sums in the same order ----
 * dq of the configurations dq 3x1 (plain), 3x2 (pipelined), 3x3 and 3x4 (the same, Q and dO in
 * registers) byte for byte against dq 1x1 (the wgmma kernel over 64-key tiles), dk and dv (the same
 * kernel) too, and delta (the BF16 entry point: made by the warp-specialized dq kernel, by
 * k_fa_delta for dq 1x1); the forward at its default. */
static void test_dq_ws_same(int B, int T, int H, int KV, int hd) {
    char name[128];
    snprintf(name, sizeof name, "flash dq warp-specialized = wgmma B%d T%d H%d/%d hd%d", B, T, H, KV, hd);
    if (!wanted(name)) return;
    begin(name);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nl = (size_t)B * H * T;
    vecf q, k, v, go;
    vecb qb, kb, vb, gob;
    rand_inputs(nq, nk, q, k, v, go, qb, kb, vb, gob);
    Dev dq_(nq * 2), dk_(nk * 2), dv_(nk * 2), dgo(nq * 2), dout(nq * 2), dlse(nl * 4), ddelta(nl * 4);
    Dev gq(nq * 2), gk(nk * 2), gv(nk * 2);
    up(dq_, qb); up(dk_, kb); up(dv_, vb); up(dgo, gob);
    MXC(mxg_attention_forward_flash_bf16(dout.h(), dlse.f(), dq_.h(), dk_.h(), dv_.h(), B, T, H, KV, hd, NULL));
    const int mts[5][2] = {{1, 1}, {3, 1}, {3, 2}, {3, 3}, {3, 4}};
    std::vector<uint16_t> r[5][3];
    vecf dl[5];
    for (int c = 0; c < 5; c++) {
        MXC(mxg_attention_flash_config(0, 0, mts[c][0], mts[c][1], 0, 0));
        gq.poison(); gk.poison(); gv.poison(); ddelta.poison();
        MXC(mxg_attention_backward_flash_bf16(gq.h(), gk.h(), gv.h(), ddelta.f(), dgo.h(), dout.h(), dlse.f(), dq_.h(),
                                              dk_.h(), dv_.h(), B, T, H, KV, hd, NULL));
        r[c][0] = down<uint16_t>(gq, nq); r[c][1] = down<uint16_t>(gk, nk); r[c][2] = down<uint16_t>(gv, nk);
        dl[c] = down<float>(ddelta, nl);
    }
    mxg_attention_flash_config(0, 0, 0, 0, 0, 0);
    CK(cudaGetLastError());
    static const char* what[3] = {"dq", "dk", "dv"};
    for (int c = 1; c < 5; c++)
        for (int t = 0; t < 3; t++) {
            size_t nd = 0;
            for (size_t i = 0; i < r[0][t].size(); i++) nd += r[0][t][i] != r[c][t][i];
            if (nd) fail("%s of dq %dx%d: %zu of %zu values differ from dq 1x1's", what[t], mts[c][0], mts[c][1], nd,
                         r[0][t].size());
            /* delta: made by the warp-specialized dq kernel from its tiles, by k_fa_delta for dq 1x1 */
            if (t == 0 && memcmp(dl[0].data(), dl[c].data(), nl * 4))
                fail("delta of dq %dx%d differs from k_fa_delta's", mts[c][0], mts[c][1]);
        }
    if (!g_fail_case) printf("    dq 3x1, 3x2, 3x3, 3x4: the same bytes as dq 1x1 (dk, dv, delta too)\n");
    end();
}

/* ---- against the FP32 GPU kernels of layers.cu (same BF16-valued FP32 inputs) ---- */
static void test_fp32_gpu(int B, int T, int H, int KV, int hd) {
    char name[128];
    snprintf(name, sizeof name, "flash fp32 vs layers.cu B%d T%d H%d/%d hd%d", B, T, H, KV, hd);
    if (!wanted(name)) return;
    begin(name);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nl = (size_t)B * H * T;
    vecf q, k, v, go;
    vecb qb, kb, vb, gob;
    rand_inputs(nq, nk, q, k, v, go, qb, kb, vb, gob);
    Dev dq_(nq * 4), dk_(nk * 4), dv_(nk * 4), dgo(nq * 4), dlse(nl * 4), ddelta(nl * 4);
    Dev o1(nq * 4), q1(nq * 4), k1(nk * 4), v1(nk * 4), l1(nl * 4);
    Dev o2(nq * 4), q2(nq * 4), k2(nk * 4), v2(nk * 4), l2(nl * 4);
    up(dq_, q); up(dk_, k); up(dv_, v); up(dgo, go);
    MXC(mxg_attention_forward(o1.f(), l1.f(), dq_.f(), dk_.f(), dv_.f(), B, T, H, KV, hd, NULL));
    MXC(mxg_attention_backward(q1.f(), k1.f(), v1.f(), ddelta.f(), dgo.f(), o1.f(), l1.f(), dq_.f(), dk_.f(), dv_.f(),
                               B, T, H, KV, hd, NULL));
    o2.poison(); l2.poison(); q2.poison(); k2.poison(); v2.poison();
    MXC(mxg_attention_forward_flash(o2.f(), l2.f(), dq_.f(), dk_.f(), dv_.f(), B, T, H, KV, hd, NULL));
    MXC(mxg_attention_backward_flash(q2.f(), k2.f(), v2.f(), ddelta.f(), dgo.f(), o2.f(), l2.f(), dq_.f(), dk_.f(),
                                     dv_.f(), B, T, H, KV, hd, NULL));
    CK(cudaDeviceSynchronize());
    frob("out", down<float>(o2, nq), down<float>(o1, nq), 1e-2);
    vecf lg = down<float>(l2, nl), lr = down<float>(l1, nl);
    std::vector<double> L(lr.begin(), lr.end());
    lse_check(lg, L, 1e-4);
    frob("dq", down<float>(q2, nq), down<float>(q1, nq), 1e-2);
    frob("dk", down<float>(k2, nk), down<float>(k1, nk), 1e-2);
    frob("dv", down<float>(v2, nk), down<float>(v1, nk), 1e-2);
    end();
}

static void test_args(void) {
    if (!wanted("flash argument checks")) return;
    begin("flash argument checks");
    float lse;
    int rc = mxg_attention_forward_flash_bf16(NULL, &lse, NULL, NULL, NULL, 1, 16, 4, 2, 96, NULL);
    printf("    hd 96 -> %d (%s)\n", rc, rc ? mx_last_error() : "accepted");
    if (rc == 0) fail("hd 96 accepted");
    rc = mxg_attention_forward_flash_bf16(NULL, &lse, NULL, NULL, NULL, 1, 16, 6, 4, 64, NULL);
    printf("    H 6 / KV 4 -> %d (%s)\n", rc, rc ? mx_last_error() : "accepted");
    if (rc == 0) fail("H %% KV != 0 accepted");
    end();
}

/* ---- benchmark ---- */
__global__ void k_fill(uint16_t* p, size_t n, uint64_t seed, float s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; /* uniform (-1, 1) */
        const float f = u * s * 1.7320508f;                                    /* variance s^2 */
        uint32_t b = __float_as_uint(f);
        b += 0x7FFFu + ((b >> 16) & 1u);
        p[i] = (uint16_t)(b >> 16);
    }
}
__global__ void k_fillf(float* p, size_t n, uint64_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z ^= z >> 31;
        p[i] = ((float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * 1.7320508f;
    }
}
static void fillf(Dev& d, size_t n, uint64_t seed) {
    k_fillf<<<1024, 256>>>(d.f(), n, seed);
    CK(cudaGetLastError());
}
static void fill(Dev& d, size_t n, uint64_t seed, float s) {
    k_fill<<<1024, 256>>>(d.h(), n, seed, s);
    CK(cudaGetLastError());
}

struct Timer {
    cudaEvent_t a, b;
    Timer() { CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b)); }
    ~Timer() { cudaEventDestroy(a); cudaEventDestroy(b); }
};
template <class F>
static double median_ms(F f, int reps) {
    Timer t;
    std::vector<float> ms;
    for (int i = 0; i < 3; i++) f();
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(t.a));
        f();
        CK(cudaEventRecord(t.b));
        CK(cudaEventSynchronize(t.b));
        float x;
        CK(cudaEventElapsedTime(&x, t.a, t.b));
        ms.push_back(x);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

/* The issue's shapes (B, H, KV, T, hd), and one shape's BF16 tensors (filled) with its two calls:
 * the benchmark's and `attn --kernels`'s inputs. */
static const int k_shapes[4][5] = {{8, 12, 4, 1024, 64}, {4, 16, 8, 2048, 64}, {4, 32, 8, 2048, 64}, {2, 32, 8, 4096, 128}};
struct BenchShape {
    const int B, H, KV, T, hd;
    const size_t nq, nk, nl;
    Dev q, k, v, go, o, lse, delta, dq, dk, dv;
    explicit BenchShape(const int* s)
        : B(s[0]), H(s[1]), KV(s[2]), T(s[3]), hd(s[4]), nq((size_t)B * T * H * hd), nk((size_t)B * T * KV * hd),
          nl((size_t)B * H * T), q(nq * 2), k(nk * 2), v(nk * 2), go(nq * 2), o(nq * 2), lse(nl * 4), delta(nl * 4),
          dq(nq * 2), dk(nk * 2), dv(nk * 2) {
        fill(q, nq, 1, 1.0f); fill(k, nk, 2, 1.0f); fill(v, nk, 3, 1.0f); fill(go, nq, 4, 1.0f);
    }
    int fwd() { return mxg_attention_forward_flash_bf16(o.h(), lse.f(), q.h(), k.h(), v.h(), B, T, H, KV, hd, NULL); }
    int bwd() {
        return mxg_attention_backward_flash_bf16(dq.h(), dk.h(), dv.h(), delta.f(), go.h(), o.h(), lse.f(), q.h(), k.h(),
                                                 v.h(), B, T, H, KV, hd, NULL);
    }
};

static void run_bench(void) {
    /* warps x m-tiles of the forward / dq warps / dk,dv warps */
    /* warps 1 or 2: the wgmma kernels (warpgroups), else mma.sync warps; m-tiles as in main() */
    /* m-tiles 3, 4 of the wgmma kernels: the pipelined forward, dq / dk,dv with A from registers */
    /* warps 3 (fwd, dk/dv): the warp-specialized kernels (TMA producer, two consumer warpgroups);
     * dk/dv warps 5: the fused backward */
    const int cfg[][6] = {{4, 2, 4, 1, 4, 1}, {1, 2, 1, 1, 1, 2}, {2, 2, 2, 1, 2, 2}, {1, 4, 1, 3, 1, 4},
                          {3, 2, 1, 1, 1, 2}, {3, 2, 1, 1, 3, 2}, {3, 2, 2, 1, 3, 2}, {3, 1, 2, 1, 3, 1},
                          {1, 2, 1, 1, 3, 1}, {1, 2, 1, 1, 5, 2}, {3, 2, 1, 1, 5, 2}, {1, 2, 3, 1, 1, 2},
                          {1, 2, 3, 2, 1, 2}, {3, 2, 3, 1, 3, 2}, {3, 2, 3, 2, 3, 2}, {3, 2, 3, 3, 3, 2},
                          {3, 2, 3, 4, 3, 2}, {1, 2, 1, 1, 3, 2}, {1, 2, 3, 4, 3, 2}};
    const int ncfg = sizeof cfg / sizeof cfg[0], reps = 20;
    printf("bench: median of %d event-timed runs after 3 warm-ups; causal FLOPs: fwd 4 B H T^2 hd / 2, bwd 2.5x\n",
           reps);
    printf("%-22s %-13s %9s %9s %9s %9s %10s\n", "shape B,Hq/Hkv,T,d", "config", "fwd ms", "fwd TF/s", "bwd ms",
           "bwd TF/s", "f+b TF/s");
    struct Best { double f, b; int cf, cb; } best[4];
    for (int si = 0; si < 4; si++) {
        BenchShape bs(k_shapes[si]);
        const int B = bs.B, H = bs.H, KV = bs.KV, T = bs.T, hd = bs.hd;
        const size_t nq = bs.nq, nk = bs.nk;
        Dev &lse = bs.lse, &delta = bs.delta;
        const double fl = 4.0 * B * H * (double)T * T * hd / 2, flb = 2.5 * fl;
        best[si] = {1e30, 1e30, 0, 0};
        for (int c = 0; c < ncfg; c++) {
            if (mxg_attention_flash_config(cfg[c][0], cfg[c][1], cfg[c][2], cfg[c][3], cfg[c][4], cfg[c][5])) { fprintf(stderr, "%s\n", mx_last_error()); exit(1); }
            int rc = 0;
            const double tf = median_ms([&] { rc |= bs.fwd(); }, reps);
            const double tb = median_ms([&] { rc |= bs.bwd(); }, reps);
            if (rc) { fprintf(stderr, "bench: %s\n", mx_last_error()); exit(1); }
            CK(cudaDeviceSynchronize());
            char sh[64], wc[24];
            snprintf(sh, sizeof sh, "(%d, %d/%d, %d, %d)", B, H, KV, T, hd);
            snprintf(wc, sizeof wc, "%dx%d/%dx%d/%dx%d", cfg[c][0], cfg[c][1], cfg[c][2], cfg[c][3], cfg[c][4], cfg[c][5]);
            printf("%-22s %-13s %9.3f %9.1f %9.3f %9.1f %10.1f\n", sh, wc, tf, fl / tf * 1e-9, tb, flb / tb * 1e-9,
                   (fl + flb) / (tf + tb) * 1e-9);
            if (tf < best[si].f) { best[si].f = tf; best[si].cf = c; }
            if (tb < best[si].b) { best[si].b = tb; best[si].cb = c; }
        }
        /* the FP32 wrappers at the default configuration (their BF16 pre-passes included) */
        mxg_attention_flash_config(0, 0, 0, 0, 0, 0);
        {
            Dev qf(nq * 4), kf(nk * 4), vf(nk * 4), gof(nq * 4), of(nq * 4), dqf(nq * 4), dkf(nk * 4), dvf(nk * 4);
            fillf(qf, nq, 5); fillf(kf, nk, 6); fillf(vf, nk, 7); fillf(gof, nq, 8);
            int rc = 0;
            const double tf = median_ms([&] { rc |= mxg_attention_forward_flash(of.f(), lse.f(), qf.f(), kf.f(), vf.f(), B, T, H, KV, hd, NULL); }, reps);
            const double tb = median_ms([&] {
                rc |= mxg_attention_backward_flash(dqf.f(), dkf.f(), dvf.f(), delta.f(), gof.f(), of.f(), lse.f(), qf.f(),
                                                   kf.f(), vf.f(), B, T, H, KV, hd, NULL);
            }, reps);
            if (rc) { fprintf(stderr, "bench fp32: %s\n", mx_last_error()); exit(1); }
            char sh[64];
            snprintf(sh, sizeof sh, "(%d, %d/%d, %d, %d)", B, H, KV, T, hd);
            printf("%-22s %-13s %9.3f %9.1f %9.3f %9.1f %10.1f\n", sh, "fp32 api", tf, fl / tf * 1e-9, tb, flb / tb * 1e-9,
                   (fl + flb) / (tf + tb) * 1e-9);
        }
    }
    printf("\nbest per shape (warps x m-tiles of fwd; dq/dkv):\n");
    printf("%-22s %9s %9s %9s %9s\n", "shape", "fwd TF/s", "cfg", "bwd TF/s", "cfg");
    for (int si = 0; si < 4; si++) {
        const int B = k_shapes[si][0], H = k_shapes[si][1], KV = k_shapes[si][2], T = k_shapes[si][3], hd = k_shapes[si][4];
        const double fl = 4.0 * B * H * (double)T * T * hd / 2;
        char sh[64], c1[16], c2[24];
        snprintf(sh, sizeof sh, "(%d, %d/%d, %d, %d)", B, H, KV, T, hd);
        snprintf(c1, sizeof c1, "%dx%d", cfg[best[si].cf][0], cfg[best[si].cf][1]);
        snprintf(c2, sizeof c2, "%dx%d/%dx%d", cfg[best[si].cb][2], cfg[best[si].cb][3], cfg[best[si].cb][4], cfg[best[si].cb][5]);
        printf("%-22s %9.1f %9s %9.1f %9s\n", sh, fl / best[si].f * 1e-9, c1, 2.5 * fl / best[si].b * 1e-9, c2);
    }
}

/* `attn --kernels [cfg]`: the configuration's forward and backward once per shape of the bench,
 * then the one-pass backward (dk,dv warps 5): a short launch sequence for a profiler to time kernel by
 * kernel (bench/device_round.sh's attnk part: ncu's gpu__time_duration per launch). */
static void run_kernels(const int* cfg) {
    for (int pass = 0; pass < 2; pass++)
        for (int si = 0; si < 4; si++) {
            BenchShape bs(k_shapes[si]);
            if (mxg_attention_flash_config(cfg[0], cfg[1], cfg[2], cfg[3], pass ? 5 : cfg[4], pass ? 0 : cfg[5])) { fprintf(stderr, "%s\n", mx_last_error()); exit(1); }
            int rc = bs.fwd();
            rc |= bs.bwd();
            CK(cudaDeviceSynchronize());
            if (rc) { fprintf(stderr, "kernels: %s\n", mx_last_error()); exit(1); }
            printf("(%d, %d/%d, %d, %d) %s\n", bs.B, bs.H, bs.KV, bs.T, bs.hd, pass ? "one-pass backward" : "the configuration");
        }
    mxg_attention_flash_config(0, 0, 0, 0, 0, 0);
}

int main(int argc, char** argv) {
    const int bench = argc > 1 && !strcmp(argv[1], "--bench");
    if (gpu_test_start(argc, argv, 0x5EED5EED12345678ull)) return 1; /* this program's inputs (MXG_SEED overrides) */
    if (argc > 1 && !strcmp(argv[1], "--kernels")) { /* [fwd,mt,dq,mt,dkv,mt]: the configuration (else defaults) */
        int cfg[6] = {0, 0, 0, 0, 0, 0};
        if (argc > 2 && sscanf(argv[2], "%d,%d,%d,%d,%d,%d", &cfg[0], &cfg[1], &cfg[2], &cfg[3], &cfg[4], &cfg[5]) != 6) {
            fprintf(stderr, "attn --kernels: the configuration is six numbers: fwd,mt,dq,mt,dkv,mt\n");
            return 2;
        }
        run_kernels(cfg);
        mxg_attention_flash_shutdown();
        return 0;
    }
    if (bench) {
        run_bench();
        mxg_attention_flash_shutdown();
        return 0;
    }
    printf("input seed: MXG_SEED=0x%llx\n", (unsigned long long)g_rng);
    test_args();
    /* GQA ratios 1, 2, 4, 8; hd 64 and 128; partial tiles (T not a multiple of 16, 64 or 128) */
    test_cpu(2, 256, 4, 4, 64, 0);   /* ratio 1, whole tiles */
    test_cpu(1, 1000, 8, 4, 128, 0); /* ratio 2, partial tiles */
    test_cpu(2, 333, 8, 2, 64, 0);   /* ratio 4, T odd */
    test_cpu(1, 520, 8, 1, 128, 0);  /* ratio 8 */
    test_cpu(1, 1000, 16, 2, 64, 0); /* ratio 8, partial tiles */
    test_cpu(3, 17, 2, 1, 64, 0);    /* tiny: one partial tile */
    test_cpu(1, 1, 2, 2, 128, 0);    /* T = 1 */
    test_cpu(2, 256, 4, 4, 128, 1);  /* the FP32 wrappers */
    test_cpu(1, 1000, 8, 2, 64, 1);
    test_cpu(1, 300, 8, 1, 128, 1);
    /* the other tile configurations (warps per CTA of fwd / dq / dkv) that --bench times */
    /* fwd warps 1 or 2: the wgmma forward with that many warpgroups, m-tiles 1: 64 keys a tile, 2: 128 */
    static const int cfgs[][6] = {{4, 1, 4, 1, 4, 1}, {8, 1, 8, 1, 8, 1}, {4, 2, 4, 2, 4, 2}, {8, 2, 8, 2, 8, 2},
                                  {1, 1, 0, 0, 0, 0}, {2, 1, 0, 0, 0, 0}, {1, 2, 0, 0, 0, 0}, {2, 2, 0, 0, 0, 0},
                                  /* warps 1 or 2 for dq / dk,dv: the wgmma backward (dq m-tiles 1: 64 keys a
                                   * tile, 2: 128; dk,dv m-tiles 1: 32 queries a tile, 2: 64) */
                                  {1, 2, 1, 1, 1, 1}, {2, 2, 2, 1, 2, 2}, {1, 1, 1, 2, 1, 2}, {2, 1, 2, 2, 2, 1},
                                  {4, 2, 4, 1, 4, 1}, {1, 2, 2, 1, 2, 2}, {2, 2, 1, 1, 1, 2},
                                  /* m-tiles 3, 4: forward pipelined over 64 / 128 keys; dq with Q, dO as A
                                   * fragments in registers over 64 / 128 keys; dk,dv with K, V so over 32 / 64
                                   * queries */
                                  {1, 3, 1, 3, 1, 3}, {2, 4, 2, 4, 2, 4}, {1, 4, 2, 3, 2, 3}, {2, 3, 1, 4, 1, 4},
                                  /* warps 3: the warp-specialized forward over 64 / 128 keys, dk/dv over 32 / 64
                                   * queries */
                                  {3, 1, 0, 0, 3, 1}, {3, 2, 0, 0, 3, 2}, {0, 0, 2, 1, 3, 1},
                                  /* dk,dv warps 5: the fused backward (dQ summed in a fixed order) */
                                  {0, 0, 0, 0, 5, 0}, {3, 2, 0, 0, 5, 2},
                                  /* dq warps 3: the warp-specialized dq kernel (64-key tiles; 2 pipelined) */
                                  {0, 0, 3, 1, 0, 0}, {3, 2, 3, 2, 3, 2}, {3, 2, 3, 4, 3, 2}};
    for (const auto& c : cfgs) {
        char cn[48];
        snprintf(cn, sizeof cn, " cfg %dx%d/%dx%d/%dx%d", c[0], c[1], c[2], c[3], c[4], c[5]);
        g_cfg_name = cn;
        if (mxg_attention_flash_config(c[0], c[1], c[2], c[3], c[4], c[5])) fail("config: %s", mx_last_error());
        test_cpu(1, 1000, 8, 4, 128, 0);
        test_cpu(2, 333, 8, 2, 64, 0);
        test_cpu(3, 17, 2, 1, 64, 1);
    }
    g_cfg_name = "";
    mxg_attention_flash_config(0, 0, 0, 0, 0, 0);
    test_dq_ws_same(1, 1000, 8, 4, 128); /* partial tiles */
    test_dq_ws_same(2, 333, 8, 2, 64);
    test_dq_ws_same(1, 520, 8, 1, 128);
    /* against the FP32 kernels of layers.cu where the CPU is too slow */
    test_fp32_gpu(2, 2048, 16, 4, 128);
    test_fp32_gpu(4, 2048, 12, 4, 64);
    mxg_attention_flash_shutdown();
    printf("attention (flash) tests: %d passed, %d failed (worst normwise error %.3g)\n", g_pass, g_fail, g_worst);
    return g_fail ? 1 : 0;
}
