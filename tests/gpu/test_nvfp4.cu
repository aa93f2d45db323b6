/*
 * test_nvfp4.cu: the reference-form quantizers mx/nvfp4.cu, mx/mxfp8.cu, mx/mxfp4_ref.cu and the rotation
 * mx/hadamard.cu against src/mx/nvfp4.c, mxfp8.c, mxfp4.c and hadamard.c (run program): the decoded values (FP32) bit for bit the CPU's (NaN where the CPU has
 * NaN), the tensor scale, the BF16 values the GEMM takes exactly the decoded ones (NVFP4: times S;
 * MXFP4 under dither: times 3/4),
 * the block and clipped-block counts; every layout, RNE and SR, floor and ceil, zero / NaN / Inf
 * blocks, an all-zero tensor, tiny and huge tensors; the rotation for n = 2..256, plain and random.
 */
#include "test.cuh"

namespace {

/* inputs: kind 0 normal with exponents over 2^-12..2^12; 1 all zero; 2 tiny (1e-30 scale); 3 huge (1e30);
 * 4 with a zero block, a NaN, an Inf and ties to the E2M1 grid */
vecf fmt_input(size_t n, int kind, int cols) {
    vecf x(n);
    const double sc = kind == 2 ? 1e-30 : kind == 3 ? 1e30 : 1.0;
    for (auto& v : x) v = kind == 1 ? 0.0f : (float)(rndn() * sc * ldexp(1.0, (int)(rndu() * 24) - 12));
    if (kind == 4) {
        for (int j = 0; j < 32 && j < (int)n; j++) x[j] = 0.0f;                /* a zero block (row 0) */
        x[n / 2] = NAN;
        x[n / 3] = INFINITY;
        for (int j = 0; j < 16 && (size_t)(cols + j) < n; j++) x[cols + j] = 0.25f * (float)(j + 1); /* ties */
    }
    return x;
}

int same_f(float a, float b) { return (a != a && b != b) || mx_f2u(a) == mx_f2u(b); }

/* One case of a reference-form quantizer: call(dx, dS, dh, dy, dc) runs it on the device (dS: NVFP4's
 * amax and tensor scale, dc: blocks, clipped, and the clipped total). Its FP32 decoded values against the
 * CPU's yc bit for bit, its BF16 values through value16(h, S) (what they stand for) against yc too (where
 * ok16(yc[i])), the counts against nb blocks and the CPU's clipped blocks. Returns NVFP4's amax and S. */
template <class Call, class Value16, class Ok16>
std::vector<float> check_case(const char* what, const vecf& x, const vecf& yc, unsigned long long nb, int64_t clipped,
                              Call call, Value16 value16, Ok16 ok16) {
    const size_t n = x.size();
    float* dx = dalloc<float>(n);
    float* dy = dalloc<float>(n);
    float* dS = dalloc<float>(2);
    uint16_t* dh = dalloc<uint16_t>(n);
    unsigned long long* dc = dalloc<unsigned long long>(3);
    CK(cudaMemset(dc, 0, 3 * sizeof(unsigned long long)));
    CK(cudaMemset(dS, 0, 2 * sizeof(float)));
    CK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
    std::vector<float> sg(2, 0.0f);
    if (call(dx, dS, dh, dy, dc) == 0 && cudaDeviceSynchronize() == cudaSuccess) {
        auto yg = d2h(dy, n);
        auto hg = d2h(dh, n);
        auto cg = d2h(dc, 3);
        sg = d2h(dS, 2);
        size_t bad = 0, bad16 = 0, first = n;
        for (size_t i = 0; i < n; i++) {
            if (!same_f(yg[i], yc[i])) { bad++; if (first == n) first = i; }
            if (ok16(yc[i]) && !same_f(value16(hg[i], sg[1]), yc[i])) bad16++;
        }
        if (bad) fail("%s: %zu of %zu decoded values differ (first %zu: gpu %g cpu %g)", what, bad, n, first, yg[first], yc[first]);
        if (bad16) fail("%s: %zu BF16 values do not stand for the decoded ones", what, bad16);
        if (cg[0] != nb || cg[1] != (unsigned long long)clipped || cg[2] != cg[1])
            fail("%s: blocks %llu clipped %llu / %llu, CPU %llu %lld", what, cg[0], cg[1], cg[2], nb, (long long)clipped);
    } else fail("%s: %s", what, mx_last_error());
    CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dS)); CK(cudaFree(dh)); CK(cudaFree(dc));
    return sg;
}

int any_value(float) { return 1; }

}  // namespace

void test_nvfp4(const char* filter) {
    if (!wanted("nvfp4", "nvfp4")) return;
    static const mx_layout lay[3] = {MX_LAYOUT_1x16, MX_LAYOUT_16x1, MX_LAYOUT_16x16};
    int ncase = 0;
    for (int li = 0; li < 3; li++)
        for (int kind = 0; kind < 5; kind++)
            for (int sr = 0; sr < 2; sr++) {
                g_fail_case = 0;
                /* 1x16: 5 blocks a row and an odd row count, so the last warp of k_ref_lanes has one block */
                const int rows = 48 + 16 * kind + (li == 0), cols = li == 0 ? 80 : 64 + 32 * li;
                const size_t n = (size_t)rows * cols;
                vecf x = fmt_input(n, kind, cols), yc(n);
                mx_qopts o = {lay[li], MX_SCALE_FLOOR, sr ? MX_ROUND_SR : MX_ROUND_RNE, 0x5eed + (uint64_t)kind, 7u + (uint32_t)li};
                int64_t clipped = 0;
                MX(mx_fakequant_nvfp4(x.data(), yc.data(), rows, cols, &o, &clipped));
                mx_nvfp4 t;
                MX(mx_nvfp4_alloc(&t, rows, cols, o.layout));
                MX(mx_quantize_nvfp4(x.data(), rows, cols, &o, &t));
                const float S = t.tensor_scale;
                mx_nvfp4_free(&t);
                char what[96];
                snprintf(what, sizeof what, "nvfp4 %s kind %d %s", mx_layout_name(o.layout), kind, sr ? "sr" : "rne");
                auto sg = check_case(
                    what, x, yc, n / (li == 2 ? 256 : 16), clipped,
                    [&](float* dx, float* dS, uint16_t* dh, float* dy, unsigned long long* dc) {
                        return mxg_fakequant_nvfp4(dx, rows, cols, &o, dS, dh, dy, dc, dc + 2, NULL);
                    },
                    [](uint16_t h, float s) { return mx_bf16_to_f32(h) / s; }, any_value); /* q x sb, exact */
                const float amax = mx_amax_finite(x.data(), n);
                if (sg[0] != amax || sg[1] != S) fail("%s: amax %g S %g, CPU %g %g", what, sg[0], sg[1], amax, S);
                if (g_fail_case) g_fail++; else g_pass++;
                ncase++;
            }
    printf("  nvfp4 cases: %d (layouts 1x16 16x1 16x16, 5 inputs, RNE and SR)\n", ncase);
}

void test_mxfp8(const char* filter) {
    if (!wanted("mxfp8", "mxfp8")) return;
    static const mx_layout lay[2] = {MX_LAYOUT_1x32, MX_LAYOUT_32x1};
    static const mx_scale_rule rules[2] = {MX_SCALE_FLOOR, MX_SCALE_CEIL};
    int ncase = 0;
    for (int li = 0; li < 2; li++)
        for (int kind = 0; kind < 5; kind++)
            for (int ri = 0; ri < 2; ri++) {
                g_fail_case = 0;
                const int rows = 64 + 32 * kind, cols = 96 + 32 * li;
                const size_t n = (size_t)rows * cols;
                vecf x = fmt_input(n, kind, cols), yc(n);
                mx_qopts o = {lay[li], rules[ri], MX_ROUND_RNE, 0, 0};
                int64_t clipped = 0;
                MX(mx_fakequant_mxfp8(x.data(), yc.data(), rows, cols, &o, &clipped));
                char what[96];
                snprintf(what, sizeof what, "mxfp8 %s %s kind %d", mx_layout_name(o.layout), mx_scale_name(o.scale), kind);
                check_case(
                    what, x, yc, n / 32, clipped,
                    [&](float* dx, float*, uint16_t* dh, float* dy, unsigned long long* dc) {
                        return mxg_fakequant_mxfp8(dx, rows, cols, &o, dh, dy, dc, dc + 2, NULL);
                    },
                    [](uint16_t h, float) { return mx_bf16_to_f32(h); },
                    /* E4M3 x 2^e is exact in BF16 above the floor of BF16's normal range */
                    [](float v) { return fabsf(v) >= 0x1p-126f || v == 0.0f || v != v; });
                if (g_fail_case) g_fail++; else g_pass++;
                ncase++;
            }
    printf("  mxfp8 cases: %d (layouts 1x32 32x1, floor and ceil, 5 inputs)\n", ncase);
}

void test_fp4_ref(const char* filter) {
    if (!wanted("fp4 ref", "fp4ref")) return;
    static const mx_layout lay[3] = {MX_LAYOUT_1x32, MX_LAYOUT_32x1, MX_LAYOUT_32x32};
    static const mx_scale_rule rules[4] = {MX_SCALE_FLOOR, MX_SCALE_EVEN, MX_SCALE_CEIL, MX_SCALE_DITHER};
    int ncase = 0;
    for (int li = 0; li < 3; li++)
        for (int ri = 0; ri < 4; ri++)
            for (int sr = 0; sr < 2; sr++) {
                g_fail_case = 0;
                const int kind = (li + ri + sr) % 5, rows = 64 + 32 * (ri & 1), cols = 96 + 32 * li;
                const size_t n = (size_t)rows * cols;
                vecf x = fmt_input(n, kind, cols), yc(n);
                mx_qopts o = {lay[li], rules[ri], sr ? MX_ROUND_SR : MX_ROUND_RNE, 0xd17eull + (uint64_t)ri, 3u + (uint32_t)li};
                int64_t clipped = 0;
                MX(mx_fakequant_fp4(x.data(), yc.data(), rows, cols, &o, &clipped));
                char what[96];
                snprintf(what, sizeof what, "fp4 ref %s %s %s kind %d", mx_layout_name(o.layout), mx_scale_name(o.scale),
                         sr ? "sr" : "rne", kind);
                const mx_scale_rule rule = o.scale;
                check_case(
                    what, x, yc, n / (li == 2 ? 1024 : 32), clipped,
                    [&](float* dx, float*, uint16_t* dh, float* dy, unsigned long long* dc) {
                        return mxg_fakequant_fp4_ref(dx, rows, cols, &o, dh, dy, dc, dc + 2, NULL);
                    },
                    /* q x 2^e, exact in BF16; the decoded value is mx_fp4_scaled of it (dither: x 4/3, one rounding) */
                    [rule](uint16_t h, float) { return mx_fp4_scaled(mx_bf16_to_f32(h), 1.0f, rule); }, any_value);
                if (g_fail_case) g_fail++; else g_pass++;
                ncase++;
            }
    printf("  fp4 reference-form cases: %d (layouts 1x32 32x1 32x32, floor even ceil dither, RNE and SR)\n", ncase);
}

void test_rotate(const char* filter) {
    if (!wanted("rotate", "rotate")) return;
    static const int ns[6] = {2, 16, 32, 64, 128, 256};
    int ncase = 0;
    for (int k = 0; k < 6; k++)
        for (int rnd = 0; rnd < 2; rnd++) {
            g_fail_case = 0;
            /* n < 32: 41 rows of 48, so the groups do not fill the last warp (k_hadamard_lanes' tail) */
            const int rows = ns[k] < 32 ? 41 : 40, cols = ns[k] < 32 ? 48 : 512;
            const size_t n = (size_t)rows * cols;
            vecf x = randn(n, 1.0f), xc = x;
            MX(mx_hadamard_rotate(xc.data(), rows, cols, 1, ns[k], rnd, 0xabcdefull, 17u));
            float* dx = dalloc<float>(n);
            CK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
            MX(mxg_hadamard_rotate(dx, rows, cols, ns[k], rnd, 0xabcdefull, 17u, NULL));
            CK(cudaDeviceSynchronize());
            auto xg = d2h(dx, n);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += !same_f(xg[i], xc[i]);
            if (bad) fail("rotate h%d%s: %zu of %zu values differ from mx_hadamard_rotate", ns[k], rnd ? " random" : "", bad, n);
            CK(cudaFree(dx));
            if (g_fail_case) g_fail++; else g_pass++;
            ncase++;
        }
    printf("  rotation cases: %d (n 2, 16, 32, 64, 128, 256; plain and random signs)\n", ncase);
}
