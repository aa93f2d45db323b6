/*
 * qfast_ab.cu: the fast MXFP4 quantizer's candidate code paths (src/cuda/mx/mxfp4.cu's QF_OPT_* bits) against
 * the path the trainer runs (QF_OPT), on the device. For each configuration (the two-direction rows of `mxlm
 * bench quant`, single-direction ones, shapes with edge tiles, and the fused SwiGLU-backward quantizer) and each
 * path, QF_OPT and QF_OPT with one of its bits flipped (kBits; the SwiGLU kernel: all but PF): its
 * outputs (codes, scales, folded E4M3, float scales, counters) byte for byte against QF_OPT's, and its time
 * against a device copy measured in the same run (bytes read + written; median of 15 launches after 3; QF_OPT
 * timed again last, so that drift shows). QF_OPT's own outputs (all but the counters) are held to the general
 * staged kernels' (mxg_quantize under mxg_quant_set_fast(0): no code of qf_prefetch or qf_pass), which make
 * test-gpu holds to the CPU, so a fault every combination shares shows too. The bytes are checked on an input
 * holding the blocks the kernel treats apart (zeros, tiny blocks, scale byte < 27, NaN, Inf, values near FLT_MAX,
 * among random BF16 values), the times taken on the random values alone (make_input: the trainer's kind).
 * A kernel experiment, not a test. Exit 1 where any output differs.
 *
 * Build: bench/make_carry.sh bins (nvcc as mk/cuda.mk's exact objects, --fmad=false, linked with the .o files
 * of build/cpu/src/mx and build/cpu/src/util for the C library's mx_fail and shape checks).
 */
#include "cuda/mx/mxfp4.cu"

#include <math.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace {

#define CK(x)                                                                                        \
    do {                                                                                             \
        cudaError_t e_ = (x);                                                                        \
        if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } \
    } while (0)

/* The BF16 input [rows, cols]: bench.cu's roughly normal values with rare outliers and, with special (the byte
 * checks' input), every 97th block of 32 along a row (and so some along columns) replaced by one of the special kinds.
 * The times are taken on the plain input: the special blocks put their 128-groups' other blocks outside the fold
 * window (fold32's scalar path, divergent in its warp), which the trainer's operands almost never are (the OUTER
 * probe: 0-0.007% of a 1b run's blocks). */
std::vector<uint16_t> make_input(int rows, int cols, bool special) {
    std::vector<uint16_t> h((size_t)rows * cols);
    uint64_t z = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < h.size(); i++) {
        z ^= z << 13; z ^= z >> 7; z ^= z << 17;
        const uint32_t r = (uint32_t)(z >> 32);
        float v = ((float)(r & 255) + (float)((r >> 8) & 255) + (float)((r >> 16) & 255) - 382.5f) / 128.0f;
        if (((r >> 24) & 255) == 0) v *= 50.0f;
        h[i] = mx_bf16_from_f32(v);
    }
    const size_t nb = special ? h.size() / 32 : 0;
    for (size_t b = 0; b < nb; b += 97) {
        uint16_t* p = &h[b * 32];
        switch ((b / 97) % 6) {
        case 0: for (int k = 0; k < 32; k++) p[k] = 0; break;                                        /* zeros */
        case 1: for (int k = 0; k < 32; k++) p[k] = mx_bf16_from_f32(ldexpf((float)(k - 16), -110)); break; /* tiny */
        case 2: p[b % 32] = 0x7fc0; break;                                                             /* NaN */
        case 3: p[b % 32] = (b & 64) ? 0xff80 : 0x7f80; break;                                         /* -Inf / Inf */
        case 4: p[b % 32] = 0x7f7f; break;                                                             /* near FLT_MAX */
        default: break;
        }
    }
    return h;
}

struct Cfg {
    const char* name;
    bool f32, row, col, e4m3, codes;
    int rows, cols;
};

struct Out {
    uint8_t *codes[2], *scales[2], *e4[2];
    float* fs[2];
    unsigned long long* cnt;
    size_t n;
};

/* The outputs of one run as bytes on the host (codes, scales, E4M3, float scales, and with cnt the counters). */
std::vector<uint8_t> fetch(const Out& o, const Cfg& c, bool cnt = true) {
    std::vector<uint8_t> h;
    auto add = [&](const void* d, size_t bytes) {
        size_t at = h.size();
        h.resize(at + bytes);
        CK(cudaMemcpy(h.data() + at, d, bytes, cudaMemcpyDeviceToHost));
    };
    for (int d = 0; d < 2; d++) {
        if (!(d ? c.col : c.row)) continue;
        if (c.codes) { add(o.codes[d], o.n / 2); add(o.scales[d], o.n / 32); }
        if (c.e4m3) { add(o.e4[d], o.n); add(o.fs[d], o.n / 128 * 4); }
    }
    if (cnt) add(o.cnt, 4 * sizeof(unsigned long long));
    return h;
}

void alloc_out(Out& o, size_t n) {
    o.n = n;
    for (int d = 0; d < 2; d++) {
        CK(cudaMalloc(&o.codes[d], n / 2)); CK(cudaMalloc(&o.scales[d], n / 32));
        CK(cudaMalloc(&o.e4[d], n)); CK(cudaMalloc(&o.fs[d], n / 128 * 4));
    }
    CK(cudaMalloc(&o.cnt, 64));
}

void clear(const Out& o) {
    for (int d = 0; d < 2; d++) {
        CK(cudaMemset(o.codes[d], 0xab, o.n / 2)); CK(cudaMemset(o.scales[d], 0xab, o.n / 32));
        CK(cudaMemset(o.e4[d], 0xab, o.n)); CK(cudaMemset(o.fs[d], 0xab, o.n / 128 * 4));
    }
    CK(cudaMemset(o.cnt, 0, 4 * sizeof(unsigned long long)));
}

/* The spec of direction d every configuration quantizes with: RNE, floor scales, h16 (mxg_quantize's fields). */
mxg_qspec spec_of(int d) {
    mxg_qspec s;
    memset(&s, 0, sizeof s);
    s.layout = d ? MX_LAYOUT_32x1 : MX_LAYOUT_1x32;
    s.scale = MX_SCALE_FLOOR;
    s.round = MX_ROUND_RNE;
    s.seed = 5;
    s.tensor_id = d;
    s.had_n = 16;
    return s;
}

/* The outputs of direction d into o's buffers: codes + scales and / or E4M3 VEC128 + float scales, counters. */
mxg_qout out_of(const Out& o, int d, bool codes, bool e4m3) {
    mxg_qout q;
    memset(&q, 0, sizeof q);
    if (codes) { q.codes = o.codes[d]; q.scales = o.scales[d]; }
    if (e4m3) { q.e4m3 = o.e4[d]; q.fscale = o.fs[d]; q.fold = MXG_FOLD_VEC128; }
    q.counters = o.cnt + 2 * d;
    return q;
}

/* The code paths compared: QF_OPT (the trainer's, first) and QF_OPT with one bit flipped, for each bit. */
constexpr int kBits[] = {0, QF_OPT_LDSM, QF_OPT_PF, QF_OPT_MAD, QF_OPT_INV};
constexpr int NOPT = sizeof kBits / sizeof kBits[0];
constexpr int opt_of(int i) { return QF_OPT ^ kBits[i]; }

/* k_qswiglu as launch_qswiglu_n picks it for BF16 h16 without random signs, for path i (QF_OPT_PF does not
 * apply: swiglu_ab skips it). */
template <int I = 0> int launch_swiglu(const QsArgs& a, int i) {
    if constexpr (I + 1 < NOPT)
        if (i != I) return launch_swiglu<I + 1>(a, i);
    return launch_qswiglu_cfg<uint16_t, 16, 2, opt_of(I)>(a, 0);
}

/* launch_qfast_n's choice of tile and residency, for OPT. */
template <typename T, int OPT> int launch_opt(const QArgs& a) {
    if (a.s[0].active && a.s[1].active) {
        if constexpr (sizeof(T) == 2) return launch_qfast_cfg<T, 128, 128, 16, 2, OPT>(a, 0);
        else return launch_qfast_cfg<T, 128, 128, 16, 1, OPT>(a, 0);
    }
    if (a.s[0].active) return launch_qfast_cfg<T, 64, 128, 16, 3, OPT>(a, 0);
    return launch_qfast_cfg<T, 128, 64, 16, 3, OPT>(a, 0);
}

/* ... for path i */
template <typename T, int I = 0> int launch(const QArgs& a, int i) {
    if constexpr (I + 1 < NOPT)
        if (i != I) return launch<T, I + 1>(a, i);
    return launch_opt<T, opt_of(I)>(a);
}

double median_ms(int iters, const std::function<void()>& fn) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) fn();
    std::vector<float> t;
    for (int i = 0; i < iters; i++) {
        CK(cudaEventRecord(a));
        fn();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/* Path i's name: the trainer's, or the bit it flips (+ on, - off) */
const char* opt_name(int i) {
    static const char* const nm[] = {"", "ldsm", "pf", "mad", "inv"};
    static char buf[NOPT][32];
    if (i == 0) return "QF_OPT (trainer)";
    snprintf(buf[i], sizeof buf[i], "%c%s", (opt_of(i) & kBits[i]) ? '+' : '-', nm[i]);
    return buf[i];
}

/* The fused SwiGLU-backward quantizer (k_qswiglu: dgate and dup from dh, gate and up, both tensors' Dgrad and Wgrad
 * operands as folded E4M3, BF16 inputs [16384, 4096]: the trainer's act16 case) under QF_OPT and its LDSM / MAD /
 * INV flips, byte for byte against QF_OPT and timed (bytes: the three inputs read, the four operands written).
 * Its rows in the table; returns how many combinations differ. */
int swiglu_ab(const std::vector<uint16_t>& hb, const std::vector<uint16_t>& hp, uint16_t* dh, const Out& o, const Out& o2,
              double cbw) {
    const int rows = 16384, cols = 4096;
    const size_t n = (size_t)rows * cols;
    const Cfg c = {"fused SwiGLU backward (BF16), dgate + dup, E4M3 both", false, true, true, true, false, rows, cols};
    uint16_t *gate, *up;
    CK(cudaMalloc(&gate, n * 2));
    CK(cudaMalloc(&up, n * 2));
    /* dh, gate, up from x (the special input for the byte checks, then the plain one for the times) */
    auto inputs = [&](const std::vector<uint16_t>& x) {
        std::vector<uint16_t> h(n);
        CK(cudaMemcpy(dh, x.data(), n * 2, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < n; i++) h[i] = x[(i * 7 + 3) % n]; /* other values in other places */
        CK(cudaMemcpy(gate, h.data(), n * 2, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < n; i++) h[i] = x[(i * 13 + 5) % n];
        CK(cudaMemcpy(up, h.data(), n * 2, cudaMemcpyHostToDevice));
    };
    QsArgs a;
    memset(&a, 0, sizeof a);
    a.dh = dh; a.gate = gate; a.up = up; a.rows = rows; a.cols = cols;
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < 2; d++) {
            const mxg_qspec s = spec_of(d);
            const mxg_qout q = out_of(t ? o2 : o, d, false, true);
            if (make_slot(&s, &q, d, rows, cols, &a.q[t].s[d])) { fprintf(stderr, "%s: %s\n", c.name, mx_last_error()); exit(2); }
        }
    const double bytes = 6.0 * n + 4.0 * (n + n / 32);
    auto run = [&](int opt) {
        if (launch_swiglu(a, opt) != MX_OK) { fprintf(stderr, "%s: %s\n", c.name, mx_last_error()); exit(2); }
    };
    std::vector<uint8_t> ref;
    double base = 0;
    int bad = 0;
    bool same[NOPT];
    inputs(hb);
    for (int opt = 0; opt < NOPT; opt++) {
        if (kBits[opt] == QF_OPT_PF) continue;
        clear(o);
        clear(o2);
        run(opt);
        CK(cudaDeviceSynchronize());
        std::vector<uint8_t> got = fetch(o, c), got2 = fetch(o2, c);
        got.insert(got.end(), got2.begin(), got2.end());
        if (opt == 0) ref = got;
        same[opt] = got == ref;
        bad += !same[opt];
    }
    inputs(hp);
    for (int opt = 0; opt < NOPT; opt++) {
        if (kBits[opt] == QF_OPT_PF) continue;
        const double ms = median_ms(15, [&]() { run(opt); });
        if (opt == 0) base = ms;
        printf("%-58s %-18s %8.4f %7.1f%% %7.3fx %7s\n", opt ? "" : c.name, opt_name(opt), ms,
               100.0 * bytes / (ms * 1e6) / cbw, base / ms, opt == 0 ? "base" : same[opt] ? "same" : "DIFFER");
    }
    CK(cudaFree(gate));
    CK(cudaFree(up));
    return bad;
}

}  // namespace

int main(void) {
    const Cfg cfgs[] = {
        {"BF16 1x32 + 32x1 h16, codes + scales (issue 16's kernel)", false, true, true, false, true, 16384, 4096},
        {"BF16 1x32 + 32x1 h16, E4M3 VEC128 both", false, true, true, true, false, 16384, 4096},
        {"BF16 1x32 + 32x1 h16, codes + E4M3 both", false, true, true, true, true, 16384, 4096},
        {"FP32 1x32 + 32x1 h16, E4M3 VEC128 both", true, true, true, true, false, 16384, 4096},
        {"BF16 1x32 h16, E4M3 VEC128 (row tiles 64 x 128)", false, true, false, true, false, 16384, 4096},
        {"BF16 32x1 h16, E4M3 VEC128 (column tiles 128 x 64)", false, false, true, true, false, 16384, 4096},
        {"FP32 1x32 + 32x1 h16, codes + scales", true, true, true, false, true, 16384, 4096},
        {"FP32 1x32 h16, E4M3 VEC128 (Fprop's operand)", true, true, false, true, false, 16384, 4096},
        {"FP32 32x1 h16, E4M3 VEC128 (Wgrad's operands)", true, false, true, true, false, 16384, 4096},
    };
    int dev = 0;
    cudaDeviceProp pr;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&pr, dev));
    printf("GPU: %s, %d SMs\n", pr.name, pr.multiProcessorCount);
    const size_t nmax = (size_t)16384 * 4096;
    std::vector<uint16_t> hb = make_input(16384, 4096, true), hp = make_input(16384, 4096, false);
    std::vector<float> hf(hb.size()), hpf(hp.size());
    for (size_t i = 0; i < hb.size(); i++) hf[i] = mx_bf16_to_f32(hb[i]);
    for (size_t i = 0; i < hp.size(); i++) hpf[i] = mx_bf16_to_f32(hp[i]);
    uint16_t* xb;
    float* xf;
    CK(cudaMalloc(&xb, nmax * 2));
    CK(cudaMalloc(&xf, nmax * 4));
    Out o, o2; /* o2: the fused SwiGLU kernel's second tensor */
    alloc_out(o, nmax);
    alloc_out(o2, nmax);
    /* the copy ceiling: 1 GiB device to device, bytes read + written */
    void *cs, *cd;
    CK(cudaMalloc(&cs, 1ull << 30));
    CK(cudaMalloc(&cd, 1ull << 30));
    CK(cudaMemset(cs, 0x3c, 1ull << 30));
    const double cms = median_ms(15, [&]() { CK(cudaMemcpyAsync(cd, cs, 1ull << 30, cudaMemcpyDeviceToDevice)); });
    const double cbw = 2.0 * (1ull << 30) / (cms * 1e6);
    CK(cudaFree(cs));
    CK(cudaFree(cd));
    printf("copy ceiling: %.0f GB/s (cudaMemcpy D2D 1 GiB, read + write)\n\n", cbw);
    printf("%-58s %-18s %8s %8s %8s %7s\n", "configuration", "code path", "ms", "of copy", "vs base", "bytes");
    printf("(bytes: QF_OPT's outputs against the general kernels' (=gen), each candidate's against QF_OPT's (same))\n");
    int bad = 0;
    for (int k = 0; k < 2 * (int)(sizeof cfgs / sizeof cfgs[0]); k++) {
        /* each configuration as given, then with tiles overhanging x: 32 rows and / or columns fewer, where
         * the folded form, which needs its block axis a multiple of 128, allows */
        Cfg c = cfgs[k / 2];
        char name[96];
        if (k % 2) {
            const int dr = c.col && c.e4m3 ? 0 : 32, dc = c.row && c.e4m3 ? 0 : 32;
            if (!dr && !dc) continue;
            c.rows -= dr;
            c.cols -= dc;
            snprintf(name, sizeof name, "  the same at [%d, %d] (edge tiles)", c.rows, c.cols);
            c.name = name;
        }
        const size_t n = (size_t)c.rows * c.cols;
        /* the input's first n values as [rows, cols] (each configuration its own layout of the same values) */
        if (c.f32) CK(cudaMemcpy(xf, hf.data(), n * 4, cudaMemcpyHostToDevice));
        else CK(cudaMemcpy(xb, hb.data(), n * 2, cudaMemcpyHostToDevice));
        QArgs a;
        memset(&a, 0, sizeof a);
        a.x = c.f32 ? (const void*)xf : (const void*)xb;
        a.rows = c.rows;
        a.cols = c.cols;
        size_t bytes = n * (c.f32 ? 4 : 2);
        for (int d = 0; d < 2; d++) {
            if (!(d ? c.col : c.row)) continue;
            const mxg_qspec s = spec_of(d);
            const mxg_qout q = out_of(o, d, c.codes, c.e4m3);
            bytes += (c.codes ? n / 2 + n / 32 : 0) + (c.e4m3 ? n + n / 32 : 0);
            if (make_slot(&s, &q, d, c.rows, c.cols, &a.s[d])) { fprintf(stderr, "%s: %s\n", c.name, mx_last_error()); return 2; }
        }
        if (!qfast_ok(a, c.f32 ? MXG_F32 : MXG_BF16)) { fprintf(stderr, "%s: not the fast kernel's case\n", c.name); return 2; }
        auto run = [&](int opt) {
            if ((c.f32 ? launch<float>(a, opt) : launch<uint16_t>(a, opt)) != MX_OK) {
                fprintf(stderr, "%s: %s\n", c.name, mx_last_error());
                exit(2);
            }
        };
        /* the general kernels' outputs: the reference QF_OPT is held to */
        std::vector<uint8_t> gen;
        {
            const mxg_qspec sp[2] = {spec_of(0), spec_of(1)};
            const mxg_qout qo[2] = {out_of(o, 0, c.codes, c.e4m3), out_of(o, 1, c.codes, c.e4m3)};
            clear(o);
            mxg_quant_set_fast(0);
            const int rc = mxg_quantize(a.x, c.f32 ? MXG_F32 : MXG_BF16, c.rows, c.cols, c.row ? &sp[0] : NULL,
                                        c.row ? &qo[0] : NULL, c.col ? &sp[1] : NULL, c.col ? &qo[1] : NULL, NULL);
            mxg_quant_set_fast(1);
            if (rc) { fprintf(stderr, "%s: general kernels: %s\n", c.name, mx_last_error()); return 2; }
            CK(cudaDeviceSynchronize());
            gen = fetch(o, c, false); /* the counters are compared among the fast kernel's paths only */
        }
        std::vector<uint8_t> ref;
        double base = 0;
        bool same[NOPT];
        /* a flip that leaves this configuration's code as it is (LDSM: BF16 column passes only) is left out */
        auto moot = [&](int opt) { return kBits[opt] == QF_OPT_LDSM && (c.f32 || !c.col); };
        for (int opt = 0; opt < NOPT; opt++) {
            if (moot(opt)) continue;
            clear(o);
            run(opt);
            CK(cudaDeviceSynchronize());
            std::vector<uint8_t> got = fetch(o, c);
            if (opt == 0) ref = got;
            same[opt] = opt == 0 ? fetch(o, c, false) == gen : got == ref;
            bad += !same[opt];
        }
        /* the times on the plain input (the same layout) */
        if (c.f32) CK(cudaMemcpy(xf, hpf.data(), n * 4, cudaMemcpyHostToDevice));
        else CK(cudaMemcpy(xb, hp.data(), n * 2, cudaMemcpyHostToDevice));
        for (int opt = 0; opt < NOPT; opt++) {
            if (moot(opt)) continue;
            const double ms = median_ms(15, [&]() { run(opt); });
            if (opt == 0) base = ms;
            printf("%-58s %-18s %8.4f %7.1f%% %7.3fx %7s\n", opt ? "" : c.name, opt_name(opt), ms,
                   100.0 * bytes / (ms * 1e6) / cbw, base / ms,
                   opt == 0 ? (same[opt] ? "=gen" : "!=GEN") : same[opt] ? "same" : "DIFFER");
        }
        const double again = median_ms(15, [&]() { run(0); });
        printf("%-58s %-18s %8.4f %7.1f%% %7.3fx\n", "", "QF_OPT again", again, 100.0 * bytes / (again * 1e6) / cbw,
               base / again);
    }
    bad += swiglu_ab(hb, hp, xb, o, o2, cbw);
    printf("\n%s\n", bad ? "qfast_ab: SOME OUTPUTS DIFFER from QF_OPT's" : "qfast_ab: QF_OPT's outputs equal the general kernels', every candidate's QF_OPT's");
    return bad ? 1 : 0;
}
