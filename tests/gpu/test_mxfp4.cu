/*
 * test_mxfp4.cu: mx/mxfp4.cu (fused rotation + MXFP4 quantize, fold, dequantize) against
 * src/mx/mxfp4.c and src/mx/hadamard.c: bit-exact codes, scales, folded E4M3 bytes, float scales
 * and counters, for every layout, rotation (none, hN, rhN, n = 2..256), rounding (rne, sr),
 * scale rule, input type (f32, bf16), on fresh random inputs with outliers, zero blocks, tiny
 * and huge blocks, NaN and Inf, on shapes with partial tiles; outputs poisoned with two
 * patterns first (run program); the quantizer's telemetry against linear.c's (layers program).
 */
#include "test.cuh"

/* x[rows, cols]: normal values with per-32x32-region exponent shifts, outliers,
 * zero regions, tiny (subnormal-scale) and huge regions, and (if `specials`)
 * one NaN, +Inf and -Inf. */
static void gen_input(float* x, int rows, int cols, int specials) {
    int rr = (rows + 31) / 32, rc = (cols + 31) / 32;
    std::vector<float> shift((size_t)rr * rc);
    for (auto& s : shift) {
        double u = rndu();
        if (u < 0.08) s = 0.0f;                       // zero region
        else if (u < 0.12) s = ldexpf(1.0f, -135);    // subnormal territory
        else if (u < 0.15) s = ldexpf(1.0f, 120);     // huge
        else s = ldexpf(1.0f, (int)(rndu() * 40) - 20);
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double v = rndn() * shift[(size_t)(r / 32) * rc + c / 32];
            if (rndu() < 0.01) v *= 1000.0;  // outliers
            x[(size_t)r * cols + c] = (float)v;
        }
    if (specials && rows * cols > 64) {
        x[rnd64() % ((size_t)rows * cols)] = NAN;
        x[rnd64() % ((size_t)rows * cols)] = INFINITY;
        x[rnd64() % ((size_t)rows * cols)] = -INFINITY;
    }
}

/* ---- host fold reference: mx_fold_mxfp4 (src/mx/fold.c), the ROUND rule (the fast path's) ---- */
static void host_fold(const mx_fp4* t, int dir, int outer, std::vector<uint8_t>& e4, std::vector<float>& fs, long long* oow) {
    int R = dir ? t->cols : t->rows, K = dir ? t->rows : t->cols;
    e4.assign((size_t)R * K, 0);
    fs.assign(outer ? (size_t)R : (size_t)R * (K / 128), 0.0f);
    size_t n = 0;
    if (mx_fold_mxfp4(t, dir, outer ? MX_FOLD_OUTER : MX_FOLD_VEC128, MX_FOLD_ROUND, e4.data(), fs.data(), NULL, 0, &n))
        fail("host fold: %s", mx_last_error());
    *oow = (long long)n;
}

static size_t g_refold_rounded = 0, g_refold_blocks = 0; /* VEC128 -> OUTER over the cases (test_quant's line) */

/* ---- one quantizer case ---- */
struct QCase {
    int rows, cols, bf16;
    mxg_qspec s[2];  // [0] row-direction spec, [1] column-direction (layout 32x1 or 32x32 axis 0)
    int use[2], fold[2];
    int outer;  // row-direction fold with OUTER scales (one pass)
};

static void run_qcase(const QCase& qc, const char* name) {
    int rows = qc.rows, cols = qc.cols;
    size_t n = (size_t)rows * cols;
    std::vector<float> x(n);
    gen_input(x.data(), rows, cols, 1);
    std::vector<uint16_t> xb(n);
    if (qc.bf16)
        for (size_t i = 0; i < n; i++) { xb[i] = mx_bf16_from_f32(x[i]); x[i] = mx_bf16_to_f32(xb[i]); }
    void* dx = qc.bf16 ? (void*)dalloc<uint16_t>(n) : (void*)dalloc<float>(n);
    if (qc.bf16) CK(cudaMemcpy(dx, xb.data(), n * 2, cudaMemcpyHostToDevice));
    else CK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));

    /* CPU reference per direction */
    mx_fp4 ref[2];
    long long ref_clip[2] = {0, 0};
    for (int d = 0; d < 2; d++) {
        if (!qc.use[d]) continue;
        const mxg_qspec& s = qc.s[d];
        std::vector<float> y(x);
        if (s.had_n) MX(mx_hadamard_rotate(y.data(), rows, cols, d == 0 ? 1 : 0, s.had_n, s.had_random, s.had_seed, s.rot_id));
        mx_qopts o = {s.layout, s.scale, s.round, s.seed, s.tensor_id};
        MX(mx_fp4_alloc(&ref[d], rows, cols, s.layout));
        MX(mx_quantize_fp4(y.data(), rows, cols, &o, &ref[d]));
        ref_clip[d] = ref[d].n_clipped_blocks;
    }
    size_t ncode = n / 2;
    /* pass 0: the general kernels only (mxg_quant_set_fast(0)); 1: the fast kernel where it applies;
     * 2: the same with the folded outputs alone (no codes or scales where there is a fold: the
     * trainer's fast path). Each against the CPU, with a different poison. */
    const int any_fold = (qc.use[0] && qc.fold[0]) || (qc.use[1] && qc.fold[1]);
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 2 && !any_fold) break;
        mxg_quant_set_fast(pass > 0);
        uint8_t poison = pass == 1 ? 0x54 : 0xAB;
        mxg_qout out[2];
        memset(out, 0, sizeof out);
        size_t nsc[2];
        for (int d = 0; d < 2; d++) {
            if (!qc.use[d]) continue;
            nsc[d] = mx_fp4_n_scales(rows, cols, qc.s[d].layout);
            out[d].counters = dalloc<unsigned long long>(2);
            CK(cudaMemset(out[d].counters, 0, 16));
            if (!(pass == 2 && qc.fold[d])) {
                out[d].codes = dalloc<uint8_t>(ncode);
                out[d].scales = dalloc<uint8_t>(nsc[d]);
                CK(cudaMemset(out[d].codes, poison, ncode));
                CK(cudaMemset(out[d].scales, poison, nsc[d]));
            }
            if (qc.fold[d]) {
                out[d].e4m3 = dalloc<uint8_t>(n);
                out[d].fscale = dalloc<float>(n / 128 + rows);
                CK(cudaMemset(out[d].e4m3, poison, n));
                CK(cudaMemset(out[d].fscale, poison, (n / 128 + rows) * 4));
                if (d == 0 && qc.outer) out[d].fold = MXG_FOLD_OUTER;
            }
        }
        MX(mxg_quantize(dx, qc.bf16 ? MXG_BF16 : MXG_F32, rows, cols, qc.use[0] ? &qc.s[0] : NULL, qc.use[0] ? &out[0] : NULL,
                        qc.use[1] ? &qc.s[1] : NULL, qc.use[1] ? &out[1] : NULL, NULL));
        CK(cudaDeviceSynchronize());
        for (int d = 0; d < 2; d++) {
            if (!qc.use[d]) continue;
            auto cnt = d2h(out[d].counters, 2);
            int i = -1;
            if (out[d].codes) {
                auto codes = d2h(out[d].codes, ncode);
                auto scales = d2h(out[d].scales, nsc[d]);
                i = first_diff(codes.data(), ref[d].codes, ncode);
                if (i >= 0) fail("%s pass %d dir %d: code byte %d = 0x%02x, CPU 0x%02x", name, pass, d, i, codes[i], ref[d].codes[i]);
                i = first_diff(scales.data(), ref[d].scales, nsc[d]);
                if (i >= 0) fail("%s pass %d dir %d: scale %d = 0x%02x, CPU 0x%02x", name, pass, d, i, scales[i], ref[d].scales[i]);
            }
            if ((long long)cnt[0] != ref_clip[d]) fail("%s dir %d: clipped blocks %llu, CPU %lld", name, d, cnt[0], ref_clip[d]);
            if (qc.fold[d]) {
                std::vector<uint8_t> e4;
                std::vector<float> fs;
                long long oow;
                int outer = d == 0 && qc.outer;
                size_t nfs0 = outer ? (size_t)rows : n / 128;
                host_fold(&ref[d], d, outer, e4, fs, &oow);
                auto ge4 = d2h(out[d].e4m3, n);
                auto gfs = d2h(out[d].fscale, nfs0);
                i = first_diff(ge4.data(), e4.data(), n);
                if (i >= 0) fail("%s pass %d dir %d: e4m3 byte %d = 0x%02x, expected 0x%02x", name, pass, d, i, ge4[i], e4[i]);
                if (memcmp(gfs.data(), fs.data(), nfs0 * 4)) fail("%s dir %d: %s float scales differ", name, d, outer ? "OUTER" : "VEC128");
                if ((long long)cnt[1] != oow) fail("%s dir %d: out-of-window blocks %llu, expected %lld", name, d, cnt[1], oow);
                /* mxg_fold from the packed GPU tensor: VEC128 and OUTER */
                if (pass == 0) {
                    mxg_fp4 t = {rows, cols, qc.s[d].layout, out[d].codes, out[d].scales};
                    int axis = d == 0 ? 1 : 0;
                    for (int outer = 0; outer < 2; outer++) {
                        int R = d ? cols : rows;
                        size_t nfs = outer ? (size_t)R : n / 128;
                        uint8_t* de4 = dalloc<uint8_t>(n);
                        float* dfs = dalloc<float>(nfs);
                        unsigned long long* dc = dalloc<unsigned long long>(2);
                        CK(cudaMemset(de4, poison, n));
                        CK(cudaMemset(dfs, poison, nfs * 4));
                        CK(cudaMemset(dc, 0, 16));
                        MX(mxg_fold(&t, axis, outer ? MXG_FOLD_OUTER : MXG_FOLD_VEC128, de4, dfs, dc, NULL));
                        CK(cudaDeviceSynchronize());
                        host_fold(&ref[d], d, outer, e4, fs, &oow);
                        auto h4 = d2h(de4, n);
                        auto hf = d2h(dfs, nfs);
                        auto hc = d2h(dc, 2);
                        i = first_diff(h4.data(), e4.data(), n);
                        if (i >= 0) fail("%s dir %d: mxg_fold(%s) byte %d = 0x%02x, expected 0x%02x", name, d, outer ? "outer" : "vec128", i, h4[i], e4[i]);
                        if (memcmp(hf.data(), fs.data(), nfs * 4)) fail("%s dir %d: mxg_fold(%s) float scales differ", name, d, outer ? "outer" : "vec128");
                        if ((long long)hc[1] != oow) fail("%s dir %d: mxg_fold oow %llu, expected %lld", name, d, hc[1], oow);
                        const int K = d ? rows : cols;
                        if (!outer && K % 128 == 0) {
                            /* VEC128 -> OUTER (mxg_fold_outer_from_vec128) against fold.c's from these very bytes,
                             * out of place and in place; these inputs span ~300 binades: many blocks round */
                            std::vector<uint8_t> e4o(n), flo(n / 32);
                            std::vector<float> fso(R);
                            size_t nr = 0;
                            if (mx_fold_outer_from_vec128(e4.data(), fs.data(), R, K, e4o.data(), fso.data(), flo.data(), &nr))
                                fail("host VEC128 -> OUTER: %s", mx_last_error());
                            uint8_t* do4 = dalloc<uint8_t>(n);
                            uint8_t* dfl = dalloc<uint8_t>(n / 32);
                            float* dfo = dalloc<float>((size_t)R + 4);
                            CK(cudaMemset(do4, poison, n));
                            CK(cudaMemset(dfl, poison, n / 32));
                            CK(cudaMemset(dfo, poison, ((size_t)R + 4) * 4));
                            CK(cudaMemset(dc, 0, 16));
                            MX(mxg_fold_outer_from_vec128(de4, dfs, R, K, do4, dfo, dfl, dc, NULL));
                            CK(cudaDeviceSynchronize());
                            auto o4 = d2h(do4, n);
                            auto of = d2h(dfo, (size_t)R);
                            auto oc = d2h(dc, 2);
                            auto ofl = d2h(dfl, n / 32);
                            if (first_diff(ofl.data(), flo.data(), n / 32) >= 0) fail("%s dir %d: VEC128 -> OUTER flags differ", name, d);
                            MX(mxg_fold_outer_from_vec128(de4, dfs, R, K, de4, dfo, NULL, NULL, NULL)); /* in place */
                            CK(cudaDeviceSynchronize());
                            auto i4 = d2h(de4, n);
                            i = first_diff(o4.data(), e4o.data(), n);
                            if (i >= 0) fail("%s dir %d: VEC128 -> OUTER byte %d = 0x%02x, expected 0x%02x", name, d, i, o4[i], e4o[i]);
                            if (first_diff(i4.data(), e4o.data(), n) >= 0) fail("%s dir %d: VEC128 -> OUTER in place differs", name, d);
                            if (memcmp(of.data(), fso.data(), (size_t)R * 4)) fail("%s dir %d: VEC128 -> OUTER float scales differ", name, d);
                            if (oc[1] != (unsigned long long)nr) fail("%s dir %d: VEC128 -> OUTER rounded blocks %llu, expected %zu", name, d, oc[1], nr);
                            g_refold_rounded += nr;
                            g_refold_blocks += n / 32;
                            CK(cudaFree(do4)); CK(cudaFree(dfo)); CK(cudaFree(dfl));
                        }
                        CK(cudaFree(de4)); CK(cudaFree(dfs)); CK(cudaFree(dc));
                    }
                    /* exact dequantization to BF16 */
                    int R = d ? cols : rows, K = d ? rows : cols;
                    uint16_t* db = dalloc<uint16_t>(n);
                    CK(cudaMemset(db, poison, n * 2));
                    MX(mxg_dequant_bf16(&t, axis, db, NULL));
                    CK(cudaDeviceSynchronize());
                    auto hb = d2h(db, n);
                    std::vector<float> y(n);
                    MX(mx_dequantize_fp4(&ref[d], y.data()));
                    int bad = 0;
                    for (int ii = 0; ii < R && !bad; ii++)
                        for (int k = 0; k < K; k++) {
                            float want = d ? y[(size_t)k * cols + ii] : y[(size_t)ii * cols + k];
                            float got = mx_bf16_to_f32(hb[(size_t)ii * K + k]);
                            if (!(got == want || (got != got && want != want))) {
                                fail("%s dir %d: dequant bf16 [%d,%d] = %g, CPU %g", name, d, ii, k, got, want);
                                bad = 1;
                                break;
                            }
                        }
                    CK(cudaFree(db));
                }
            }
            CK(cudaFree(out[d].codes)); CK(cudaFree(out[d].scales)); CK(cudaFree(out[d].counters));
            if (qc.fold[d]) { CK(cudaFree(out[d].e4m3)); CK(cudaFree(out[d].fscale)); }
        }
        mxg_quant_set_fast(1);
    }
    for (int d = 0; d < 2; d++)
        if (qc.use[d]) mx_fp4_free(&ref[d]);
    CK(cudaFree(dx));
}

void test_quant(const char* filter) {
    const int shapes[][2] = {{32, 32}, {128, 256}, {96, 160}, {256, 384}, {160, 96}, {512, 256}, {384, 640}};
    const int hads[] = {0, 2, 4, 8, 16, 32, 64, 128, 256};
    int ncase = 0;
    for (int it = 0; it < 260; it++) {
        QCase qc;
        memset(&qc, 0, sizeof qc);
        int si = it % 7;
        qc.rows = shapes[si][0];
        qc.cols = shapes[si][1];
        qc.bf16 = (it / 7) % 2;
        int mode = it % 5;  // 0: both 1D, 1: row only, 2: col only, 3: 32x32 row-dir + 32x1, 4: 1x32 + 32x32 col-dir
        qc.use[0] = mode != 2;
        qc.use[1] = mode != 1;
        for (int d = 0; d < 2; d++) {
            mxg_qspec& s = qc.s[d];
            s.layout = d == 0 ? MX_LAYOUT_1x32 : MX_LAYOUT_32x1;
            if (mode == 3 && d == 0) { s.layout = MX_LAYOUT_32x32; s.had_axis = 1; }
            if (mode == 4 && d == 1) { s.layout = MX_LAYOUT_32x32; s.had_axis = 0; }
            s.scale = (mx_scale_rule)(rnd64() % 3);
            s.round = (mx_round)(rnd64() % 2);
            s.seed = rnd64();
            s.tensor_id = (uint32_t)rnd64();
            int len = d == 0 ? qc.cols : qc.rows;
            int h = hads[rnd64() % 9];
            if (it % 3 == 0) h = 16;  // the studied sizes, often
            if (it % 3 == 1) h = 32;
            while (h && len % h) h >>= 1;
            if (h == 1) h = 0;
            s.had_n = h;
            s.had_random = h ? (int)(rnd64() % 2) : 0;
            s.had_seed = rnd64();
            s.rot_id = (uint32_t)rnd64();
            qc.fold[d] = qc.use[d] && len % 128 == 0;
        }
        qc.outer = mode == 1 && (it / 5) % 2 && qc.s[0].had_n <= 32;
        char name[160];
        snprintf(name, sizeof name, "quant[%d] %dx%d %s row:%s/%s/%s/h%d%s%s col:%s/%s/%s/h%d%s", it, qc.rows, qc.cols,
                 qc.bf16 ? "bf16" : "f32", qc.use[0] ? mx_layout_name(qc.s[0].layout) : "-", mx_scale_name(qc.s[0].scale),
                 mx_round_name(qc.s[0].round), qc.s[0].had_n, qc.s[0].had_random ? "r" : "", qc.outer ? "/outer" : "",
                 qc.use[1] ? mx_layout_name(qc.s[1].layout) : "-", mx_scale_name(qc.s[1].scale), mx_round_name(qc.s[1].round),
                 qc.s[1].had_n, qc.s[1].had_random ? "r" : "");
        if (!wanted(name, "quant")) continue;
        g_fail_case = 0;
        run_qcase(qc, name);
        ncase++;
        if (g_fail_case) { g_fail++; fprintf(stderr, "  fail %s\n", name); }
        else g_pass++;
    }
    /* edge shapes: 1x32 with an odd row count, 32x1 with an odd column count */
    const int edge[][3] = {{7, 64, 0}, {1, 32, 0}, {33, 96, 0}, {64, 5, 1}, {32, 1, 1}, {96, 33, 1}};
    for (int e = 0; e < 6; e++) {
        for (int bf = 0; bf < 2; bf++) {
            QCase qc;
            memset(&qc, 0, sizeof qc);
            qc.rows = edge[e][0]; qc.cols = edge[e][1]; qc.bf16 = bf;
            int d = edge[e][2];
            qc.use[d] = 1;
            mxg_qspec& s = qc.s[d];
            s.layout = d ? MX_LAYOUT_32x1 : MX_LAYOUT_1x32;
            s.scale = (mx_scale_rule)(e % 3);
            s.round = (mx_round)bf;
            s.seed = rnd64();
            s.tensor_id = 7;
            s.had_n = 16; s.had_random = e & 1; s.had_seed = 99; s.rot_id = 3;
            char name[96];
            snprintf(name, sizeof name, "quant-edge %dx%d dir %d %s", qc.rows, qc.cols, d, bf ? "bf16" : "f32");
            if (!wanted(name, "quant")) continue;
            g_fail_case = 0;
            run_qcase(qc, name);
            if (g_fail_case) { g_fail++; fprintf(stderr, "  fail %s\n", name); } else g_pass++;
        }
    }
    /* the one-pass OUTER row fold at the trainer's row lengths (k_qouter: tiles of 512 / nbr whole rows, rows not a
     * multiple of that, nbr 112 and 20 not dividing 512; cols / 32 > 512 takes k_qrow), RNE, h0 / h16 / h32 */
    /* (the last two shapes, h16 only: more tiles than the grid's CTAs, so the persistent loop swaps its buffers) */
    const int outer_sh[][2] = {{45, 1024}, {13, 3584}, {7, 8192}, {33, 640}, {3, 20480}, {9000, 1024}, {20000, 640}};
    const int outer_h[] = {0, 16, 32};
    for (int e = 0; e < 7; e++)
        for (int bf = 0; bf < 2; bf++)
            for (int hi = e < 5 ? 0 : 1; hi < (e < 5 ? 3 : 2); hi++) {
                QCase qc;
                memset(&qc, 0, sizeof qc);
                qc.rows = outer_sh[e][0]; qc.cols = outer_sh[e][1]; qc.bf16 = bf;
                qc.use[0] = qc.fold[0] = qc.outer = 1;
                mxg_qspec& s = qc.s[0];
                s.layout = MX_LAYOUT_1x32;
                s.scale = (mx_scale_rule)((e + hi) % 3);
                s.round = MX_ROUND_RNE;
                s.seed = rnd64();
                s.tensor_id = 11;
                s.had_n = outer_h[hi];
                s.had_axis = 1;
                char name[96];
                snprintf(name, sizeof name, "quant-outer %dx%d %s h%d %s", qc.rows, qc.cols, bf ? "bf16" : "f32", s.had_n,
                         mx_scale_name(s.scale));
                if (!wanted(name, "quant")) continue;
                g_fail_case = 0;
                run_qcase(qc, name);
                if (g_fail_case) { g_fail++; fprintf(stderr, "  fail %s\n", name); } else g_pass++;
            }
    printf("  quantizer cases run: %d (+ edge shapes, + the OUTER row folds)\n", ncase);
    if (g_refold_blocks) { /* the VEC128 -> OUTER checks inside them: rounding must have been exercised */
        printf("  VEC128 -> OUTER: %zu of %zu blocks rounded over the cases, each the CPU's bytes\n", g_refold_rounded,
               g_refold_blocks);
        if (!g_refold_rounded) { g_fail++; fprintf(stderr, "  fail VEC128 -> OUTER: no block rounded (nothing tested)\n"); }
    }
}

/* ---- the branch-free E2M1 rounding against mx_e2m1_rne on all 2^32 floats ---- */
void test_e2m1(void) {
    if (!wanted("e2m1-exhaustive", "e2m1")) return;
    {
        unsigned long long bad = 1;
        g_fail_case = 0;
        MXC(mxg_selftest_e2m1(&bad));
        printf("  e2m1 RNE, all 2^32 floats: %llu mismatches with mx_e2m1_rne\n", bad);
        if (bad) fail("branch-free E2M1 rounding differs from mx_e2m1_rne on %llu inputs", bad);
        if (g_fail_case) g_fail++; else g_pass++;
    }
    {
        unsigned long long bad[6] = {1, 1, 1, 1, 1, 1};
        g_fail_case = 0;
        MXC(mxg_selftest_round(bad));
        printf("  fast quantizer arithmetic, all 2^32 floats: E2M1 code %llu, folded E4M3 byte %llu (|y| < 8); "
               "hardware E4M3 %llu, E5M2 %llu (non-NaN); BF16 %llu, BF16 pairs %llu mismatches\n", bad[0], bad[1],
               bad[2], bad[3], bad[4], bad[5]);
        if (bad[4] || bad[5]) fail("the BF16 conversion instructions differ from mx_bf16_from_f32_int on %llu / %llu inputs", bad[4], bad[5]);
        if (bad[0] || bad[1]) fail("the fast E2M1 rounding / packing / fold differs from mx_e2m1_rne / mx_e4m3_encode on %llu / %llu inputs", bad[0], bad[1]);
        if (bad[2] || bad[3]) fail("the hardware FP8 conversion differs from mx_e4m3/e5m2_encode on %llu / %llu inputs", bad[2], bad[3]);
        if (g_fail_case) g_fail++; else g_pass++;
    }
}

/* mxg_quantize with stats directly: a row-direction and a column-direction output from one read
 * (k_quant's two passes; the linear layer uses only the row direction), against the CPU's
 * rotation + mx_fakequant_fp4 + the same sums. */
void test_quant_telemetry(mx_layout l0, mx_layout l1, int had_n, int rnd, int sr, int rows, int cols) {
    char name[160];
    snprintf(name, sizeof name, "quant telemetry %s+%s h%d%s%s %dx%d", mx_layout_name(l0), mx_layout_name(l1), had_n,
             rnd ? " rh" : "", sr ? " sr" : "", rows, cols);
    if (!wanted(name)) return;
    begin(name);
    vecf x = randn((size_t)rows * cols, 1.0f);
    x[3] = 50.0f;
    x[(size_t)cols * 40 + 17] = -30.0f;
    Dev dx(x.size() * 4), codes(2 * x.size()), scales(2 * x.size() / 32 + 64), dst(2 * sizeof(mxg_opstats));
    up(dx, x);
    CK(cudaMemset(dst.p, 0, 2 * sizeof(mxg_opstats)));
    const mx_layout lay[2] = {l0, l1};
    mxg_qspec sp[2];
    mxg_qout qo[2];
    for (int k = 0; k < 2; k++) {
        memset(&sp[k], 0, sizeof sp[k]);
        memset(&qo[k], 0, sizeof qo[k]);
        sp[k].layout = lay[k];
        sp[k].scale = MX_SCALE_FLOOR;
        sp[k].round = sr ? MX_ROUND_SR : MX_ROUND_RNE;
        sp[k].seed = 77;
        sp[k].tensor_id = 4 + k;
        sp[k].had_n = had_n;
        sp[k].had_axis = k == 0 ? 1 : 0; /* 32x32: output 0 along rows, 1 along columns */
        sp[k].had_random = rnd;
        sp[k].had_seed = 99;
        sp[k].rot_id = 2;
        qo[k].codes = (uint8_t*)codes.p + k * x.size();
        qo[k].scales = (uint8_t*)scales.p + k * (x.size() / 32 + 32);
        qo[k].stats = (mxg_opstats*)dst.p + k;
    }
    MXC(mxg_quantize(dx.p, MXG_F32, rows, cols, &sp[0], &qo[0], &sp[1], &qo[1], NULL));
    std::vector<mxg_opstats> gs = down<mxg_opstats>(dst, 2);
    double wsig = 0, werr = 0;
    for (int k = 0; k < 2; k++) {
        int axis = k == 0 ? 1 : 0;
        vecf r = x, q(x.size());
        if (had_n) MXC(mx_hadamard_rotate(r.data(), rows, cols, axis, had_n, rnd, 99, 2));
        mx_qopts qq = {lay[k], MX_SCALE_FLOOR, sr ? MX_ROUND_SR : MX_ROUND_RNE, 77, (uint32_t)(4 + k)};
        int64_t clipped = 0;
        MXC(mx_fakequant_fp4(r.data(), q.data(), rows, cols, &qq, &clipped));
        mx_operand_stats c;
        memset(&c, 0, sizeof c);
        for (size_t i = 0; i < r.size(); i++) {
            if (!isfinite(r[i])) { c.nonfinite++; continue; }
            double d = (double)r[i] - (double)q[i];
            c.sig2 += (double)r[i] * r[i];
            c.err2 += d * d;
        }
        c.blocks = (int64_t)mx_fp4_n_scales(rows, cols, lay[k]);
        c.clipped = clipped;
        char what[64];
        snprintf(what, sizeof what, "output %d (%s)", k, mx_layout_name(lay[k]));
        check_opstats(what, &gs[k], &c, 1e-6, 0, 0, &wsig, &werr, 1);
        if (!(c.clipped > 0)) fail("%s: no clipped block in the reference (the outliers should clip)", what);
    }
    end();
}

/* ---- quantize-on-produce: mxg_quantize_swiglu_bwd against the SwiGLU backward, then mxg_quantize ----
 * The fused kernel's four outputs (dgate and dup, each in both directions, folded E4M3 + VEC128 scales)
 * must be the bytes of mxg_swiglu_backward followed by mxg_quantize (the fast kernel, itself bit for bit
 * the CPU's in test_quant), with the trainer's specs: the column direction with sr_tn, rotations h16 /
 * rh16 / h32 / none, every scale rule, different seeds and rotation ids per tensor; inputs with zero,
 * tiny and huge regions, outliers, NaN and Inf; outputs poisoned first; counters equal. The last four
 * from BF16 inputs (mxg_quantize_swiglu_bwd_bf16 against mxg_swiglu_backward_bf16, then mxg_quantize of its
 * BF16 outputs: the GPU model's act16). Then the shapes and specs it refuses (mxg_quantize_swiglu_ok: SR,
 * rotation > 32, dims not multiples of 128). */
void test_quant_swiglu(const char* filter) {
    (void)filter;
    /* 2048 x 1280: 160 tiles, more than the resident CTAs, so a CTA loops over several (signs, scl_c and
     * counters carried from tile to tile) */
    const int shapes[][2] = {{128, 128}, {256, 384}, {384, 256}, {128, 1024}, {2048, 1280}};
    const int hads[] = {16, 32, 8, 0, 16, 32, 8};
    for (int it = 0; it < 14; it++) {
        const int rows = shapes[it % 5][0], cols = shapes[it % 5][1];
        char name[96];
        const int h = hads[it % 7], rnd = h && (it % 4 == 1 || it % 4 == 2), bf = it >= 10;
        snprintf(name, sizeof name, "quant-swiglu %dx%d %s%d%s", rows, cols, rnd ? "rh" : "h", h, bf ? " bf16" : "");
        if (!wanted(name, "quant")) continue;
        g_fail_case = 0;
        const size_t n = (size_t)rows * cols;
        std::vector<float> gate(n), upv(n), dh(n);
        gen_input(gate.data(), rows, cols, it % 2); /* NaN, +Inf, -Inf (silu(-Inf) = NaN) where it is odd */
        gen_input(upv.data(), rows, cols, it % 2);
        gen_input(dh.data(), rows, cols, it % 2);
        for (size_t i = 0; i < n; i++) /* finite gates within +-30 (the sigmoid's interesting range) */
            if (isfinite(gate[i])) gate[i] = fmaxf(fminf(gate[i], 30.0f), -30.0f);
        float *dg = dalloc<float>(n), *du = dalloc<float>(n), *dd = dalloc<float>(n);
        float *tg = dalloc<float>(n), *tu = dalloc<float>(n);
        CK(cudaMemcpy(dg, gate.data(), n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(du, upv.data(), n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dd, dh.data(), n * 4, cudaMemcpyHostToDevice));
        /* the BF16 cases' inputs and the plain backward's outputs (the same buffers' first halves) */
        uint16_t *dg16 = (uint16_t*)tg, *du16 = (uint16_t*)tu, *dd16 = dalloc<uint16_t>(n);
        uint16_t *ig16 = dalloc<uint16_t>(n), *iu16 = dalloc<uint16_t>(n);
        if (bf) {
            MXC(mxg_to_bf16(dg, n, ig16, NULL));
            MXC(mxg_to_bf16(du, n, iu16, NULL));
            MXC(mxg_to_bf16(dd, n, dd16, NULL));
        }
        mxg_qspec spec[2][2];
        for (int t = 0; t < 2; t++)
            for (int d = 0; d < 2; d++) {
                mxg_qspec& s = spec[t][d];
                memset(&s, 0, sizeof s);
                s.layout = d ? MX_LAYOUT_32x1 : MX_LAYOUT_1x32;
                s.scale = (mx_scale_rule)((it + t) % 3);
                s.round = MX_ROUND_RNE;
                s.seed = rnd64();
                s.tensor_id = (uint32_t)rnd64();
                s.had_n = h;
                s.had_axis = 1;
                s.had_random = rnd;
                s.had_seed = 1234 + it;
                s.rot_id = (uint32_t)(7 * t + 3 * d + 1);
                s.sr_tn = d;
            }
        /* [way][t][d]: way 0 the plain backward then mxg_quantize, 1 the fused kernel */
        uint8_t* e4[2][2][2];
        float* fs[2][2][2];
        unsigned long long* cnt[2];
        mxg_qout out[2][2][2];
        for (int w = 0; w < 2; w++) {
            cnt[w] = dalloc<unsigned long long>(2);
            CK(cudaMemset(cnt[w], 0, 16));
            for (int t = 0; t < 2; t++)
                for (int d = 0; d < 2; d++) {
                    e4[w][t][d] = dalloc<uint8_t>(n);
                    fs[w][t][d] = dalloc<float>(n / 128);
                    CK(cudaMemset(e4[w][t][d], w ? 0x5A : 0xA5, n));
                    CK(cudaMemset(fs[w][t][d], w ? 0x5A : 0xA5, n / 128 * 4));
                    memset(&out[w][t][d], 0, sizeof out[w][t][d]);
                    out[w][t][d].e4m3 = e4[w][t][d];
                    out[w][t][d].fscale = fs[w][t][d];
                    out[w][t][d].counters = cnt[w];
                    out[w][t][d].fold = MXG_FOLD_VEC128;
                }
        }
        if (bf) MXC(mxg_swiglu_backward_bf16(dg16, du16, dd16, ig16, iu16, n, NULL));
        else MXC(mxg_swiglu_backward(tg, tu, dd, dg, du, n, NULL));
        for (int t = 0; t < 2; t++)
            MXC(mxg_quantize(bf ? (const void*)(t ? du16 : dg16) : (const void*)(t ? tu : tg), bf ? MXG_BF16 : MXG_F32,
                             rows, cols, &spec[t][0], &out[0][t][0], &spec[t][1], &out[0][t][1], NULL));
        const mxg_qspec* sp[2][2] = {{&spec[0][0], &spec[0][1]}, {&spec[1][0], &spec[1][1]}};
        const mxg_qout* op[2][2] = {{&out[1][0][0], &out[1][0][1]}, {&out[1][1][0], &out[1][1][1]}};
        if (!mxg_quantize_swiglu_ok(rows, cols, sp, op)) fail("%s: refused", name);
        else if (bf) MXC(mxg_quantize_swiglu_bwd_bf16(dd16, ig16, iu16, rows, cols, sp, op, NULL));
        else MXC(mxg_quantize_swiglu_bwd(dd, dg, du, rows, cols, sp, op, NULL));
        CK(cudaDeviceSynchronize());
        for (int t = 0; t < 2; t++)
            for (int d = 0; d < 2; d++) {
                auto a = d2h(e4[0][t][d], n), b = d2h(e4[1][t][d], n);
                auto fa = d2h(fs[0][t][d], n / 128), fb = d2h(fs[1][t][d], n / 128);
                const int i = first_diff(a.data(), b.data(), n);
                if (i >= 0) fail("%s: %s %s E4M3 byte %d: fused 0x%02x, plain 0x%02x", name, t ? "dup" : "dgate",
                                 d ? "column" : "row", i, b[i], a[i]);
                if (memcmp(fa.data(), fb.data(), n / 128 * 4))
                    fail("%s: %s %s scales differ", name, t ? "dup" : "dgate", d ? "column" : "row");
            }
        auto ca = d2h(cnt[0], 2), cb = d2h(cnt[1], 2);
        if (ca[0] != cb[0] || ca[1] != cb[1])
            fail("%s: counters %llu/%llu fused against %llu/%llu", name, cb[0], cb[1], ca[0], ca[1]);
        if (!g_fail_case) printf("    %-34s 4 outputs identical to backward + quantize (%llu clipped)\n", name, ca[0]);
        for (int w = 0; w < 2; w++) {
            cudaFree(cnt[w]);
            for (int t = 0; t < 2; t++)
                for (int d = 0; d < 2; d++) { cudaFree(e4[w][t][d]); cudaFree(fs[w][t][d]); }
        }
        cudaFree(dg); cudaFree(du); cudaFree(dd); cudaFree(tg); cudaFree(tu);
        cudaFree(dd16); cudaFree(ig16); cudaFree(iu16);
        if (g_fail_case) g_fail++;
        else g_pass++;
    }
    if (!wanted("quant-swiglu refusals", "quant")) return;
    g_fail_case = 0;
    mxg_qspec s[2][2];
    mxg_qout o[2][2];
    memset(s, 0, sizeof s);
    memset(o, 0, sizeof o);
    uint8_t* e = dalloc<uint8_t>(256 * 256);
    float* f = dalloc<float>(256 * 2);
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < 2; d++) {
            s[t][d].layout = d ? MX_LAYOUT_32x1 : MX_LAYOUT_1x32;
            s[t][d].had_n = 16;
            s[t][d].sr_tn = d;
            o[t][d].e4m3 = e;
            o[t][d].fscale = f;
        }
    const mxg_qspec* sp[2][2] = {{&s[0][0], &s[0][1]}, {&s[1][0], &s[1][1]}};
    const mxg_qout* op[2][2] = {{&o[0][0], &o[0][1]}, {&o[1][0], &o[1][1]}};
    if (!mxg_quantize_swiglu_ok(256, 256, sp, op)) fail("quant-swiglu: 256x256 h16 RNE refused");
    if (mxg_quantize_swiglu_ok(256, 160, sp, op)) fail("quant-swiglu: 160 columns accepted");
    s[1][0].round = MX_ROUND_SR;
    if (mxg_quantize_swiglu_ok(256, 256, sp, op)) fail("quant-swiglu: SR accepted");
    s[1][0].round = MX_ROUND_RNE;
    s[0][1].had_n = 64;
    if (mxg_quantize_swiglu_ok(256, 256, sp, op)) fail("quant-swiglu: h64 accepted");
    s[0][1].had_n = 16;
    o[1][1].e4m3 = NULL;
    if (mxg_quantize_swiglu_ok(256, 256, sp, op)) fail("quant-swiglu: an output without E4M3 accepted");
    if (mxg_quantize_swiglu_bwd(f, f, f, 256, 256, sp, op, NULL) != MX_EINVAL) fail("quant-swiglu: not refused");
    cudaFree(e);
    cudaFree(f);
    if (g_fail_case) g_fail++;
    else { g_pass++; printf("    quant-swiglu refusals: SR, h64, 160 columns, a missing output\n"); }
}

/* The exact fix-up (mxg_fold_outer_fixup) against fold.c's mx_fold_outer_fixup, bit for bit: A [M, K] and B [N, K]
 * quantized and folded on the host (128-groups over 24 binades, row 0's first two 23 apart; the VEC128 form
 * exact), re-expressed OUTER with their flags, C a random FP32 matrix standing for the GEMM's A_o B_o^T; and the
 * fixed C against the exact product. */
static void fix_operand(int R, int K, std::vector<uint8_t>& v, std::vector<float>& fs, std::vector<uint8_t>& o,
                        std::vector<float>& fo, std::vector<uint8_t>& fl, size_t* nr) {
    std::vector<float> x((size_t)R * K);
    for (int r = 0; r < R; r++)
        for (int g = 0; g < K / 128; g++) {
            /* row 0's second group 23 binades below its first: OUTER's row scale leaves its blocks below E4M3's
             * range, so that some block rounds whatever the seed (the 16-row case once drew none: H100, 2026-12-07) */
            const int d = (int)(rndu() * 24), u = r == 0 && g < 2 ? 23 * g : d;
            for (int b = 0; b < 4; b++) {
                const float m = ldexpf(1.0f, -u - (int)(rndu() * 4));
                for (int j = 0; j < 32; j++) x[(size_t)r * K + g * 128 + b * 32 + j] = (float)(rndu() * 2 - 1) * m;
            }
        }
    mx_fp4 t;
    mx_qopts q = {MX_LAYOUT_1x32, MX_SCALE_FLOOR, MX_ROUND_RNE, 0, 0};
    MX(mx_fp4_alloc(&t, R, K, MX_LAYOUT_1x32));
    MX(mx_quantize_fp4(x.data(), R, K, &q, &t));
    v.assign((size_t)R * K, 0); o.assign((size_t)R * K, 0); fl.assign((size_t)R * K / 32, 0);
    fs.assign((size_t)R * (K / 128), 0.0f); fo.assign(R, 0.0f);
    size_t nv = 0;
    MX(mx_fold_mxfp4(&t, 0, MX_FOLD_VEC128, MX_FOLD_ROUND, v.data(), fs.data(), NULL, 0, &nv));
    MX(mx_fold_outer_from_vec128(v.data(), fs.data(), R, K, o.data(), fo.data(), fl.data(), nr));
    mx_fp4_free(&t);
}

void test_outer_fixup(void) {
    const int shapes[][3] = {{64, 48, 512}, {130, 72, 1024}, {16, 300, 256}};
    for (auto& sh : shapes) {
        const int M = sh[0], N = sh[1], K = sh[2];
        char name[96];
        snprintf(name, sizeof name, "outer-fixup %dx%dx%d", M, N, K);
        if (!wanted(name, "quant")) continue;
        g_fail_case = 0;
        std::vector<uint8_t> av, ao, afl, bv, bo, bfl;
        std::vector<float> afs, afo, bfs, bfo;
        size_t na = 0, nb = 0;
        fix_operand(M, K, av, afs, ao, afo, afl, &na);
        fix_operand(N, K, bv, bfs, bo, bfo, bfl, &nb);
        std::vector<float> C((size_t)M * N);
        for (auto& c : C) c = (float)(rndn() * 1e-3);
        std::vector<float> Cc(C);
        MX(mx_fold_outer_fixup(Cc.data(), M, N, K, av.data(), afs.data(), ao.data(), afo.data(), afl.data(), bv.data(),
                               bfs.data(), bo.data(), bfo.data(), bfl.data()));
        auto up8 = [](const std::vector<uint8_t>& h) { uint8_t* d = dalloc<uint8_t>(h.size()); CK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice)); return d; };
        auto upf = [](const std::vector<float>& h) { float* d = dalloc<float>(h.size()); CK(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice)); return d; };
        uint8_t *dav = up8(av), *dao = up8(ao), *dafl = up8(afl), *dbv = up8(bv), *dbo = up8(bo), *dbfl = up8(bfl);
        float *dafs = upf(afs), *dafo = upf(afo), *dbfs = upf(bfs), *dbfo = upf(bfo), *dC = upf(C);
        MX(mxg_fold_outer_fixup(dC, M, N, K, dav, dafs, dao, dafo, dafl, dbv, dbfs, dbo, dbfo, dbfl, NULL));
        CK(cudaDeviceSynchronize());
        auto Cg = d2h(dC, C.size());
        size_t diff = 0, changed = 0;
        for (size_t i = 0; i < C.size(); i++) {
            diff += memcmp(&Cg[i], &Cc[i], 4) != 0;
            changed += Cc[i] != C[i];
        }
        printf("    %s: %zu / %zu blocks of A / B rounded, %zu of %zu entries of C fixed, GPU %s\n", name, na, nb, changed,
               C.size(), diff ? "DIFFERENT" : "the CPU's bytes");
        if (diff) fail("%s: %zu entries differ from fold.c's", name, diff);
        if (!na || !nb || !changed) fail("%s: nothing rounded or fixed (the case tests nothing)", name);
        for (void* p : {(void*)dav, (void*)dao, (void*)dafl, (void*)dbv, (void*)dbo, (void*)dbfl, (void*)dafs, (void*)dafo,
                        (void*)dbfs, (void*)dbfo, (void*)dC})
            CK(cudaFree(p));
        if (g_fail_case) { g_fail++; fprintf(stderr, "  fail %s\n", name); } else g_pass++;
    }
}

/* Every E4M3 code at every shift 0..63 through mxg_fold_outer_from_vec128 (k_fold_outer's rescale_word, the
 * hardware conversions) against fold.c's mx_fold_outer_from_vec128 (mx_e4m3_rescale's integer steps): rows of
 * 128 groups, group g's scale 2^(20 - g / 2) (the row's largest is group 0's, so group g shifts by g / 2), the
 * 256 codes over each pair of groups in an order that moves with the row; bytes, row scales, flags and the
 * count of rounded blocks. */
void test_outer_rescale(void) {
    const char* name = "outer-rescale every code x shift 0..63";
    if (!wanted(name, "quant")) return;
    g_fail_case = 0;
    const int R = 4, G = 128, K = 128 * G;
    const size_t n = (size_t)R * K;
    std::vector<uint8_t> v(n), o(n), fl(n / 32);
    std::vector<float> fs((size_t)G * R), fo(R);
    for (int i = 0; i < R; i++)
        for (int g = 0; g < G; g++) {
            fs[(size_t)g * R + i] = mx_exp2i(20 - g / 2);
            for (int j = 0; j < 128; j++) v[(size_t)i * K + g * 128 + j] = (uint8_t)(j + 128 * (g % 2) + 37 * i);
        }
    size_t nr = 0;
    MX(mx_fold_outer_from_vec128(v.data(), fs.data(), R, K, o.data(), fo.data(), fl.data(), &nr));
    uint8_t *dv = dalloc<uint8_t>(n), *dofs = dalloc<uint8_t>(n), *dfl = dalloc<uint8_t>(n / 32);
    float *dfs = dalloc<float>(fs.size()), *dfo = dalloc<float>((size_t)R + 4);
    unsigned long long* dc = dalloc<unsigned long long>(2);
    CK(cudaMemcpy(dv, v.data(), n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dfs, fs.data(), fs.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dofs, 0x5a, n));
    CK(cudaMemset(dfl, 0x5a, n / 32));
    CK(cudaMemset(dc, 0, 16));
    MX(mxg_fold_outer_from_vec128(dv, dfs, R, K, dofs, dfo, dfl, dc, NULL));
    CK(cudaDeviceSynchronize());
    auto go = d2h(dofs, n);
    auto gf = d2h(dfl, n / 32);
    auto gs = d2h(dfo, (size_t)R);
    auto gc = d2h(dc, 2);
    const int i = first_diff(go.data(), o.data(), n);
    if (i >= 0)
        fail("%s: byte %d (code 0x%02x, shift %d) = 0x%02x, expected 0x%02x", name, i, v[i], (i % K) / 256, go[i], o[i]);
    if (first_diff(gf.data(), fl.data(), n / 32) >= 0) fail("%s: flags differ", name);
    if (memcmp(gs.data(), fo.data(), (size_t)R * 4)) fail("%s: row scales differ", name);
    if (gc[1] != (unsigned long long)nr) fail("%s: rounded blocks %llu, expected %zu", name, gc[1], nr);
    if (!nr || nr == n / 32) fail("%s: %zu of %zu blocks rounded (the case tests one branch only)", name, nr, n / 32);
    printf("    %s: %zu of %zu blocks rounded, GPU %s\n", name, nr, n / 32, i >= 0 ? "DIFFERENT" : "the CPU's bytes");
    for (void* p : {(void*)dv, (void*)dofs, (void*)dfl, (void*)dfs, (void*)dfo, (void*)dc}) CK(cudaFree(p));
    if (g_fail_case) { g_fail++; fprintf(stderr, "  fail %s\n", name); } else g_pass++;
}
