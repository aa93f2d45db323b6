/*
 * test_linear.cu: nn/linear.cu against src/nn/linear.c: the quantized operands and the
 * per-GEMM telemetry (layers program).
 */
#include "mxlm/gpu_switches.h"
#include "test.cuh"

/* ---- one quantized linear layer: the GPU's MXFP4 operands bit-identical to the CPU's ----
 * For each GEMM the TN operands the CPU builds (transposes as linear.c),
 * rotated and quantized by the CPU library, against the codes and scales the
 * GPU linear layer (exact path) made; the GEMM results against the CPU's
 * (same quantized values, FP32 accumulation in another order). */
static vecf host_t(const vecf& x, int rows, int cols) {
    vecf t((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) t[(size_t)c * rows + r] = x[(size_t)r * cols + c];
    return t;
}

void test_linear_operands(const char* recipe) {
    char name[128];
    snprintf(name, sizeof name, "linear operands %s", recipe);
    if (!wanted(name)) return;
    begin(name);
    mx_recipe rec;
    if (mx_recipe_parse(recipe, &rec)) { fail("recipe: %s", mx_last_error()); end(); return; }
    const int M = 128, K = 128, N = 96;
    vecf X = randn((size_t)M * K, 1.0f), W = randn((size_t)N * K, 0.05f), dY = randn((size_t)M * N, 0.01f);
    X[5] = 40.0f; /* an outlier */
    Dev dX(X.size() * 4), dW(W.size() * 4), ddY(dY.size() * 4), dC((size_t)M * K * 4);
    up(dX, X); up(dW, W); up(ddY, dY);
    mxg_linws* ws = NULL;
    MXC(mxg_linws_create(&ws, (size_t)M * K, 0));
    const uint64_t seed = 11, step = 3;
    const uint32_t lid = 5;
    /* pass 0 exact, 1 fast (VEC128 scales), 2 fast with one scale per stored row (mxg_linear_ctx.outer_scales; fp8:
     * the same products; MXFP4: these inputs keep every block within 14 binades of its row's largest, the same
     * products too), 3 MXFP4's Fprop alone on OUTER scales (MXG_OUTER_MXFP4_FPROP: the one-pass fold), 4 the
     * default with W's operands made beforehand (mxg_linear_weight_operands, mxg_linear_ctx.wq: taken by Fprop,
     * and by Dgrad where its path takes them), 5 MXLM_GPU_OUTER=round (Fprop's one-pass fold, Dgrad's and Wgrad's
     * operands re-expressed without the fix-up: with these inputs the same products) */
    const size_t nfs = mxg_linear_weight_fs(N, K);
    Dev wq8a((size_t)N * K), wq8b((size_t)N * K), wfsa(nfs * 4), wfsb(nfs * 4), wsc(16 * 4);
    static const char* const paths[6] = {"exact", "fast", "fast outer", "fast outer fprop", "fast, W made before",
                                         "fast outer round"};
    for (int pass = 0; pass < 6; pass++) {
        const int exact = pass == 0;
        const char* path = paths[pass];
        mxg_linear_ctx gc = {&rec, seed, step, lid, exact, ws, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0};
        gc.outer_scales = pass == 2 ? MXG_OUTER_FP8 | MXG_OUTER_MXFP4 : pass == 3 ? MXG_OUTER_FP8 | MXG_OUTER_MXFP4_FPROP
                        : pass == 4 ? MXG_OUTER_FP8
                        : pass == 5 ? MXG_OUTER_FP8 | MXG_OUTER_MXFP4_FPROP | MXG_OUTER_MXFP4_ROUND : 0;
        mxg_wq wq;
        memset(&wq, 0, sizeof wq);
        if (pass == 4) {
            wq.q8[0] = (uint8_t*)wq8a.p; wq.q8[1] = (uint8_t*)wq8b.p;
            wq.fs[0] = wfsa.f(); wq.fs[1] = wfsb.f(); wq.sc = wsc.f();
            MXC(mxg_linear_weight_operands(&gc, dW.f(), N, K, NULL, &wq, NULL));
            gc.wq = &wq;
        }
        const long long hits0 = mxg_linear_wq_hits();
        mx_linear_ctx cc = {&rec, seed, lid, step, NULL, 0};
        for (int g = 0; g < 3; g++) {
            /* TN operands on the host, and the GPU call on the stored tensors */
            const vecf A = g == MX_FPROP ? X : g == MX_DGRAD ? dY : host_t(dY, M, N);
            const vecf Bm = g == MX_FPROP ? W : g == MX_DGRAD ? host_t(W, N, K) : host_t(X, M, K);
            const int Ma = g == MX_WGRAD ? N : M, Nb = g == MX_FPROP ? N : K, R = g == MX_FPROP ? K : g == MX_DGRAD ? N : M;
            auto gpu = [&](int acc) { /* the GPU call on the stored tensors */
                if (g == MX_FPROP) MXC(mxg_gemm_recipe_tn(&gc, MX_FPROP, dX.f(), 0, dW.f(), 0, dC.f(), Ma, Nb, R, acc, NULL));
                else if (g == MX_DGRAD) MXC(mxg_gemm_recipe_tn(&gc, MX_DGRAD, ddY.f(), 0, dW.f(), 1, dC.f(), Ma, Nb, R, acc, NULL));
                else MXC(mxg_gemm_recipe_tn(&gc, MX_WGRAD, ddY.f(), 1, dX.f(), 1, dC.f(), Ma, Nb, R, acc, NULL));
            };
            gpu(0);
            vecf Cg = downf(dC, (size_t)Ma * Nb), Cc((size_t)Ma * Nb);
            MXC(mx_gemm_recipe_tn(&cc, (mx_gemm_id)g, A.data(), Bm.data(), Cc.data(), Ma, Nb, R, 0));
            char what[64];
            snprintf(what, sizeof what, "%s %s", g == 0 ? "fprop" : g == 1 ? "dgrad" : "wgrad", path);
            /* fp8: cuBLASLt's FP8 accumulation, bound 2^-10 as in test_gpu.cu (measured 4.2e-4) */
            const double tol = rec.g[g].fmt == MX_FMT_FP8 ? ldexp(1.0, -10) : exact ? 1e-5 : 1e-4;
            compare(what, Cg, Cc, NORM, tol);
            /* accumulation (Wgrad over micro-batches, dX over the linears that read X): the same product added */
            gpu(1);
            MXC(mx_gemm_recipe_tn(&cc, (mx_gemm_id)g, A.data(), Bm.data(), Cc.data(), Ma, Nb, R, 1));
            snprintf(what, sizeof what, "%s %s, accumulated", g == 0 ? "fprop" : g == 1 ? "dgrad" : "wgrad", path);
            compare(what, downf(dC, (size_t)Ma * Nb), Cc, NORM, tol);
            const mx_gemm_recipe* q = &rec.g[g];
            /* the codes and scales of the MXFP4 kernels (the reference-form path of dither keeps none) */
            if (!exact || q->fmt != MX_FMT_MXFP4 || q->scale == MX_SCALE_DITHER) continue;
            uint64_t rs = seed + (rec.rh_mode == MX_RH_STEP ? step * 0x9E3779B97F4A7C15ull : 0);
            for (int o = 0; o < 2; o++) {
                vecf op = o ? Bm : A;
                int rows = o ? Nb : Ma;
                if (q->had_n) MXC(mx_hadamard_rotate(op.data(), rows, R, 1, q->had_n, q->had_random, rs, lid * 3u + (uint32_t)g));
                mx_qopts qo = {(o == 1 && g != MX_WGRAD && q->w2d) ? MX_LAYOUT_32x32 : MX_LAYOUT_1x32, q->scale,
                               o == 0 ? q->round_a : q->round_b, seed + step * 0x9E3779B97F4A7C15ull,
                               lid * 6u + (uint32_t)g * 2u + (uint32_t)o};
                mx_fp4 t;
                MXC(mx_fp4_alloc(&t, rows, R, qo.layout));
                MXC(mx_quantize_fp4(op.data(), rows, R, &qo, &t));
                mxg_fp4 gt;
                MXC(mxg_linws_last_fp4(ws, o, &gt));
                size_t nc = (size_t)rows * R / 2, ns = mx_fp4_n_scales(rows, R, qo.layout);
                std::vector<uint8_t> gc_(nc), gs(ns);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(gc_.data(), gt.codes, nc, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(gs.data(), gt.scales, ns, cudaMemcpyDeviceToHost));
                int same = gt.rows == rows && gt.cols == R && gt.layout == qo.layout && !memcmp(gc_.data(), t.codes, nc) &&
                           !memcmp(gs.data(), t.scales, ns);
                printf("    %-22s operand %c: %s (%zu codes bytes, %zu scales)\n", what, o ? 'b' : 'a',
                       same ? "codes and scales bit-identical to the CPU" : "DIFFERENT", nc, ns);
                if (!same) fail("%s operand %d: quantized operand differs from the CPU's", what, o);
                mx_fp4_free(&t);
            }
        }
        if (pass == 4) { /* W's operands taken: Fprop's (twice: plain and accumulated) wherever they were made */
            const long long hits = mxg_linear_wq_hits() - hits0, want = 2LL * (wq.valid[0] + wq.valid[1]);
            const int quantized = rec.g[MX_FPROP].fmt == MX_FMT_FP8 || mx_gemm_gpu_mxfp4(&rec, MX_FPROP);
            printf("    W's operands made before: Fprop %d, Dgrad %d; taken %lld (want %lld)\n", wq.valid[0], wq.valid[1],
                   hits, want);
            if (hits != want || (quantized && !wq.valid[0])) fail("W's operands taken %lld, want %lld", hits, want);
        }
    }
    mxg_linws_free(ws);
    end();
}

/* The fast path's OUTER scales where a block does fall outside the window: M = K = N = 256 (two 128-groups a
 * row), one 128-group of one TN row of each GEMM's planted 2^-24 below the rest (X's row 0, columns 128..255:
 * Fprop's a; W's rows 128..255 of column 0: row 0 of W^T, Dgrad's b; dY's rows 128..255 of column 0: row 0 of
 * dY^T, Wgrad's a). Its own 128-group keeps it exact on VEC128; one scale per row rounds its 4 blocks (to zero).
 * Per mode, the blocks counted outside the window per GEMM (vec128 0 0 0; fprop, the default, 4 0 0; round and
 * 1 (with the fix-up) 4 4 4) and each product against the CPU's within the fast path's bound (the planted
 * values' share of a product is below 2^-20). */
void test_linear_outer_round(const char* recipe) {
    char name[128];
    snprintf(name, sizeof name, "linear outer-scale rounding %s", recipe);
    if (!wanted(name)) return;
    begin(name);
    mx_recipe rec;
    if (mx_recipe_parse(recipe, &rec)) { fail("recipe: %s", mx_last_error()); end(); return; }
    const int M = 256, K = 256, N = 256;
    const float tiny = ldexpf(1.0f, -24);
    vecf X = randn((size_t)M * K, 1.0f), W = randn((size_t)N * K, 0.05f), dY = randn((size_t)M * N, 0.01f);
    for (int c = 128; c < 256; c++) X[c] *= tiny;
    for (int r = 128; r < 256; r++) { W[(size_t)r * K] *= tiny; dY[(size_t)r * N] *= tiny; }
    Dev dX(X.size() * 4), dW(W.size() * 4), ddY(dY.size() * 4), dC((size_t)M * N * 4);
    up(dX, X); up(dW, W); up(ddY, dY);
    mxg_linws* ws = NULL;
    MXC(mxg_linws_create(&ws, (size_t)M * K, 0));
    /* round:T: every GEMM here has Ma Nb / (Ma + Nb) = 128, so T = 128 re-expresses Dgrad's and Wgrad's operands
     * and T = 129 leaves them on VEC128 */
    const int R8 = MXG_OUTER_FP8 | MXG_OUTER_MXFP4_FPROP | MXG_OUTER_MXFP4_ROUND;
    const struct { const char* name; int bits, min; int want[3]; } modes[6] = {
        {"vec128", MXG_OUTER_FP8, 0, {0, 0, 0}},
        {"fprop", MXG_OUTER_FP8 | MXG_OUTER_MXFP4_FPROP, 0, {4, 0, 0}},
        {"round", R8, 0, {4, 4, 4}},
        {"round:128", R8, 128, {4, 4, 4}},
        {"round:129", R8, 129, {4, 0, 0}},
        {"1", MXG_OUTER_FP8 | MXG_OUTER_MXFP4, 0, {4, 4, 4}}};
    mx_linear_ctx cc = {&rec, 11, 5, 3, NULL, 0};
    for (int m = 0; m < 6 && ws; m++) {
        mxg_linear_ctx gc = {&rec, 11, 3, 5, 0, ws, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0};
        gc.outer_scales = modes[m].bits;
        gc.outer_min = modes[m].min;
        unsigned long long got[3];
        for (int g = 0; g < 3; g++) {
            const vecf A = g == MX_FPROP ? X : g == MX_DGRAD ? dY : host_t(dY, M, N);
            const vecf Bm = g == MX_FPROP ? W : g == MX_DGRAD ? host_t(W, N, K) : host_t(X, M, K);
            unsigned long long c0[2], c1[2];
            MXC(mxg_linws_counters(ws, c0));
            if (g == MX_FPROP) MXC(mxg_gemm_recipe_tn(&gc, MX_FPROP, dX.f(), 0, dW.f(), 0, dC.f(), M, N, K, 0, NULL));
            else if (g == MX_DGRAD) MXC(mxg_gemm_recipe_tn(&gc, MX_DGRAD, ddY.f(), 0, dW.f(), 1, dC.f(), M, K, N, 0, NULL));
            else MXC(mxg_gemm_recipe_tn(&gc, MX_WGRAD, ddY.f(), 1, dX.f(), 1, dC.f(), N, K, M, 0, NULL));
            MXC(mxg_linws_counters(ws, c1));
            got[g] = c1[1] - c0[1];
            vecf Cc((size_t)M * N);
            MXC(mx_gemm_recipe_tn(&cc, (mx_gemm_id)g, A.data(), Bm.data(), Cc.data(), M, N, K, 0));
            char what[64];
            snprintf(what, sizeof what, "%s outer=%s", g == 0 ? "fprop" : g == 1 ? "dgrad" : "wgrad", modes[m].name);
            compare(what, downf(dC, (size_t)M * N), Cc, NORM, 1e-4);
        }
        printf("    outer=%-9s blocks outside the window: fprop %llu dgrad %llu wgrad %llu (want %d %d %d)\n",
               modes[m].name, got[0], got[1], got[2], modes[m].want[0], modes[m].want[1], modes[m].want[2]);
        for (int g = 0; g < 3; g++)
            if (got[g] != (unsigned long long)modes[m].want[g])
                fail("outer=%s %s: %llu blocks outside the window, want %d", modes[m].name, mx_gemm_name((mx_gemm_id)g),
                     got[g], modes[m].want[g]);
    }
    mxg_linws_free(ws);
    end();
}

/* MXLM_GPU_OUTER's values as mxg_switches_read takes them (round:T's T into outer_min) and refuses them (MX_EINVAL,
 * the defaults left). */
void test_switches_outer(void) {
    const char* name = "gpu switches MXLM_GPU_OUTER";
    if (!wanted(name)) return;
    begin(name);
    const int R8 = MXG_OUTER_FP8 | MXG_OUTER_MXFP4_FPROP | MXG_OUTER_MXFP4_ROUND, F = MXG_OUTER_FP8 | MXG_OUTER_MXFP4_FPROP;
    const struct { const char* v; int rc, outer, min; } cases[] = {
        {"fprop", MX_OK, F, 0},        {"round", MX_OK, R8, 0},       {"round:900", MX_OK, R8, 900},
        {"round:0", MX_OK, R8, 0},     {"fp8", MX_OK, MXG_OUTER_FP8, 0}, {"round:", MX_EINVAL, F, 0},
        {"round:-3", MX_EINVAL, F, 0}, {"round:12x", MX_EINVAL, F, 0}, {"rounds", MX_EINVAL, F, 0}};
    const char* old = getenv("MXLM_GPU_OUTER");
    for (const auto& c : cases) {
        setenv("MXLM_GPU_OUTER", c.v, 1);
        mxg_switches sw;
        const int rc = mxg_switches_read(&sw);
        if (rc != c.rc || sw.outer != c.outer || sw.outer_min != c.min)
            fail("MXLM_GPU_OUTER=%s: rc %d outer %d min %d, want %d %d %d", c.v, rc, sw.outer, sw.outer_min, c.rc, c.outer,
                 c.min);
    }
    if (old) setenv("MXLM_GPU_OUTER", old, 1); else unsetenv("MXLM_GPU_OUTER");
    end();
}

/* The GPU linear layer (forward + backward, twice: steps s and s+1, both paths) with telemetry
 * against mx_linear_forward/backward with telemetry. nonfin: a NaN and an Inf in X. */
void test_linear_telemetry(const char* recipe, int M, int K, int N, int nonfin) {
    char name[160];
    snprintf(name, sizeof name, "linear telemetry %s %dx%dx%d%s", recipe, M, K, N, nonfin ? " nan+inf" : "");
    if (!wanted(name)) return;
    begin(name);
    mx_recipe rec;
    if (mx_recipe_parse(recipe, &rec)) { fail("recipe: %s", mx_last_error()); end(); return; }
    vecf X = randn((size_t)M * K, 1.0f), W = randn((size_t)N * K, 0.05f), dY = randn((size_t)M * N, 0.01f);
    X[5] = 40.0f;     /* an outlier: clipped blocks */
    W[3] = 0.9f;
    if (nonfin) { X[7] = NAN; X[(size_t)K + 70] = INFINITY; }
    Dev dX(X.size() * 4), dW(W.size() * 4), ddY(dY.size() * 4), dYo((size_t)M * N * 4), ddX(X.size() * 4),
        ddW(W.size() * 4), dst(6 * sizeof(mxg_opstats)), dgo(3 * sizeof(mxg_opstats));
    up(dX, X); up(dW, W); up(ddY, dY);
    size_t cap = (size_t)M * K;
    if ((size_t)N * K > cap) cap = (size_t)N * K;
    if ((size_t)M * N > cap) cap = (size_t)M * N;
    mxg_linws* ws = NULL;
    MXC(mxg_linws_create(&ws, cap, 0));
    const uint64_t seed = 11, step = 3;
    const uint32_t lid = 9;
    vecf Yc((size_t)M * N), dXc(X.size()), dWc(W.size());
    for (int exact = 1; exact >= 0 && ws; exact--) {
        mx_linear_state cs;
        memset(&cs, 0, sizeof cs);
        CK(cudaMemset(dst.p, 0, 6 * sizeof(mxg_opstats)));
        CK(cudaMemset(dgo.p, 0, 3 * sizeof(mxg_opstats)));
        CK(cudaMemset(ddX.p, 0, X.size() * 4));
        CK(cudaMemset(ddW.p, 0, W.size() * 4));
        std::fill(dXc.begin(), dXc.end(), 0.0f);
        std::fill(dWc.begin(), dWc.end(), 0.0f);
        for (int rep = 0; rep < 2; rep++) { /* two micro-batches: the stats accumulate */
            mxg_linear_ctx gc = {&rec, seed, step + rep, lid, exact, ws, (mxg_opstats*)dst.p, NULL, NULL, NULL, NULL, NULL, 0, 0,
                                 (mxg_opstats*)dgo.p, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0};
            mx_linear_ctx cc = {&rec, seed, lid, step + rep, &cs, 1};
            MXC(mxg_linear_forward(&gc, dX.f(), dW.f(), dYo.f(), M, K, N, NULL));
            MXC(mxg_linear_backward(&gc, dX.f(), dW.f(), ddY.f(), ddX.f(), ddW.f(), M, K, N, NULL));
            MXC(mx_linear_forward(&cc, X.data(), W.data(), Yc.data(), M, K, N));
            MXC(mx_linear_backward(&cc, X.data(), W.data(), dY.data(), dXc.data(), dWc.data(), M, K, N));
        }
        std::vector<mxg_opstats> gs = down<mxg_opstats>(dst, 6);
        double wsig = 0, werr = 0;
        for (int g = 0; g < 3; g++)
            for (int o = 0; o < 2; o++) {
                char what[64];
                snprintf(what, sizeof what, "%s %s %c", exact ? "exact" : "fast", g == 0 ? "fprop" : g == 1 ? "dgrad" : "wgrad",
                         o ? 'b' : 'a');
                const mx_operand_stats* c = &cs.op[g][o];
                check_opstats(what, &gs[g * 2 + o], c, 1e-6, 0, 0, &wsig, &werr, 1);
                /* not vacuous: every quantized operand was seen (FP32 GEMMs record nothing on both sides) */
                mx_format f = rec.g[g].fmt;
                if (f != MX_FMT_FP32 && !(c->sig2 > 0)) fail("%s: the CPU recorded nothing", what);
                if (f == MX_FMT_MXFP4 && c->blocks == 0) fail("%s: no MXFP4 blocks counted", what);
            }
        printf("    %-24s worst rel diff: sig2 %.3g err2 %.3g (tol 1e-6)\n", exact ? "exact path" : "fast path", wsig, werr);
        /* the products (gout, mx_linear_state.out): the same quantized operands, the sums in another order
         * (cuBLASLt's; FP8 accumulation on the fast path): sig2 within 1e-5, the SQNR within 0.05 dB */
        std::vector<mxg_opstats> go = down<mxg_opstats>(dgo, 3);
        double psig = 0, perr = 0;
        for (int g = 0; g < 3; g++) {
            char what[64];
            snprintf(what, sizeof what, "%s %s product", exact ? "exact" : "fast", g == 0 ? "fprop" : g == 1 ? "dgrad" : "wgrad");
            check_opstats(what, &go[g], &cs.out[g], 1e-5, 0, 0.05, &psig, &perr, 1);
            if (rec.g[g].fmt != MX_FMT_FP32 && !(cs.out[g].sig2 > 0 && cs.out[g].err2 > 0))
                fail("%s: the CPU recorded nothing", what);
        }
        /* and the layer's outputs are those of a run without telemetry */
        Dev tY((size_t)M * N * 4), tX(X.size() * 4), tW(W.size() * 4);
        CK(cudaMemset(tX.p, 0, X.size() * 4));
        CK(cudaMemset(tW.p, 0, W.size() * 4));
        for (int rep = 0; rep < 2; rep++) {
            mxg_linear_ctx gc = {&rec, seed, step + rep, lid, exact, ws, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0};
            MXC(mxg_linear_forward(&gc, dX.f(), dW.f(), tY.f(), M, K, N, NULL));
            MXC(mxg_linear_backward(&gc, dX.f(), dW.f(), ddY.f(), tX.f(), tW.f(), M, K, N, NULL));
        }
        vecf a = down<float>(dYo, (size_t)M * N), b = down<float>(tY, (size_t)M * N);
        vecf a2 = down<float>(ddX, X.size()), b2 = down<float>(tX, X.size());
        vecf a3 = down<float>(ddW, W.size()), b3 = down<float>(tW, W.size());
        if (memcmp(a.data(), b.data(), a.size() * 4) || memcmp(a2.data(), b2.data(), a2.size() * 4) ||
            memcmp(a3.data(), b3.data(), a3.size() * 4))
            fail("%s: the outputs with telemetry differ from those without", exact ? "exact" : "fast");
    }
    mxg_linws_free(ws);
    end();
}

/* ---- the linear layer's epilogue options (mxg_linear_ctx.res, .out16, .w16) ----
 * res: Y = res + X W^T, the same bytes as the product followed by the FP32 add (any format); out16:
 * the product rounded to BF16 (RNE), the same as rounding the FP32 product (BF16 GEMMs, and FP8 / MXFP4 ones
 * whose operands come from BF16 tensors, x16 / dy16: the GPU model's act16); w16: the weights given in BF16,
 * the same bytes as converting them (BF16 GEMMs). */
void test_linear_epilogues(const char* recipe) {
    char name[128];
    snprintf(name, sizeof name, "linear epilogues %s", recipe);
    if (!wanted(name)) return;
    begin(name);
    mx_recipe rec;
    if (mx_recipe_parse(recipe, &rec)) { fail("recipe: %s", mx_last_error()); end(); return; }
    const int M = 256, K = 128, N = 192;
    const size_t nx = (size_t)M * K, nw = (size_t)N * K, ny = (size_t)M * N;
    vecf X = randn(nx, 1.0f), W = randn(nw, 0.05f), R = randn(ny, 1.0f), dY = randn(ny, 0.01f);
    Dev dX(nx * 4), dW(nw * 4), dR(ny * 4), dYd(ny * 4), dY1(ny * 4), dY2(ny * 4), dXg(nx * 4);
    up(dX, X); up(dW, W); up(dR, R); up(dYd, dY);
    mxg_linws* ws = NULL;
    MXC(mxg_linws_create(&ws, nx > nw ? (nx > ny ? nx : ny) : (nw > ny ? nw : ny), mx_act16_applies(&rec)));
    mxg_linear_ctx c = {&rec, 11, 3, 5, 0, ws, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    MXC(mxg_linear_forward(&c, dX.f(), dW.f(), dY1.f(), M, K, N, NULL));
    vecf Y = downf(dY1, ny), Yr(ny);
    for (size_t i = 0; i < ny; i++) Yr[i] = R[i] + Y[i];
    c.res = dR.f();
    MXC(mxg_linear_forward(&c, dX.f(), dW.f(), dY2.f(), M, K, N, NULL));
    c.res = NULL;
    compare("Y = res + X W^T", downf(dY2, ny), Yr, EXACT, 0);
    if (mx_act16_applies(&rec)) {
        Dev h(ny * 2), w16(nw * 2), dx16(nx * 2);
        c.out16 = h.h();
        MXC(mxg_linear_forward(&c, dX.f(), dW.f(), NULL, M, K, N, NULL));
        same_as_bf16("Y in BF16", down<uint16_t>(h, ny), Y);
        MXC(mxg_to_bf16(dW.f(), nw, w16.h(), NULL));
        c.out16 = NULL;
        c.w16 = w16.h();
        MXC(mxg_linear_forward(&c, dX.f(), NULL, dY2.f(), M, K, N, NULL));
        compare("Y with BF16 W given", downf(dY2, ny), Y, EXACT, 0);
        /* the backward: dX = dY W (dx_acc 0) in FP32, then in BF16 */
        MXC(mxg_linear_backward_acc(&c, dX.f(), NULL, dYd.f(), dXg.f(), NULL, M, K, N, 0, NULL));
        vecf dXf = downf(dXg, nx);
        c.out16 = dx16.h();
        MXC(mxg_linear_backward_acc(&c, dX.f(), NULL, dYd.f(), NULL, NULL, M, K, N, 0, NULL));
        same_as_bf16("dX in BF16", down<uint16_t>(dx16, nx), dXf);
        c.w16 = NULL;
        /* a BF16 output with accumulation is refused */
        if (mxg_linear_backward_acc(&c, dX.f(), dW.f(), dYd.f(), NULL, NULL, M, K, N, 1, NULL) == MX_OK)
            fail("a BF16 dX with dx_acc 1 was accepted");
        c.out16 = NULL;
    } else if (mx_act16_possible(&rec)) {
        /* FP8 / MXFP4 from BF16 tensors (the GPU model's act16): X and dY given only in BF16 (x16, dy16) make the
         * operands their BF16 values make in FP32, so the same products; out16 the RNE of those. No new draws
         * (the cases after this one keep their inputs). */
        vecf Xr(nx), dYr(ny);
        for (size_t i = 0; i < nx; i++) Xr[i] = mx_round_bf16(X[i]);
        for (size_t i = 0; i < ny; i++) dYr[i] = mx_round_bf16(dY[i]);
        Dev xr(nx * 4), x16(nx * 2), dyr(ny * 4), dy16(ny * 2), h(ny * 2), dx16(nx * 2), dW1(nw * 4), dW2(nw * 4);
        up(xr, Xr); up(dyr, dYr);
        MXC(mxg_to_bf16(dX.f(), nx, x16.h(), NULL));
        MXC(mxg_to_bf16(dYd.f(), ny, dy16.h(), NULL));
        MXC(mxg_linear_forward(&c, xr.f(), dW.f(), dY1.f(), M, K, N, NULL));
        const vecf Y16 = downf(dY1, ny);
        c.x16 = x16.h();
        MXC(mxg_linear_forward(&c, NULL, dW.f(), dY2.f(), M, K, N, NULL));
        compare("Y from BF16 X", downf(dY2, ny), Y16, EXACT, 0);
        c.out16 = h.h();
        MXC(mxg_linear_forward(&c, NULL, dW.f(), NULL, M, K, N, NULL));
        same_as_bf16("Y in BF16 from BF16 X", down<uint16_t>(h, ny), Y16);
        c.out16 = NULL;
        c.x16 = NULL;
        /* the backward: dX (dx_acc 0) and dW (dw_first) from the FP32 copies of the BF16 values, then from BF16 */
        c.dw_first = 1;
        MXC(mxg_linear_backward_acc(&c, xr.f(), dW.f(), dyr.f(), dXg.f(), dW1.f(), M, K, N, 0, NULL));
        const vecf dXf = downf(dXg, nx), dWf = downf(dW1, nw);
        c.x16 = x16.h();
        c.dy16 = dy16.h();
        MXC(mxg_linear_backward_acc(&c, NULL, dW.f(), NULL, dXg.f(), dW2.f(), M, K, N, 0, NULL));
        compare("dX from BF16 dY", downf(dXg, nx), dXf, EXACT, 0);
        compare("dW from BF16 dY and X", downf(dW2, nw), dWf, EXACT, 0);
        c.out16 = dx16.h();
        MXC(mxg_linear_backward_acc(&c, NULL, dW.f(), NULL, NULL, NULL, M, K, N, 0, NULL));
        same_as_bf16("dX in BF16 from BF16 dY", down<uint16_t>(dx16, nx), dXf);
        if (mxg_linear_backward_acc(&c, NULL, dW.f(), NULL, NULL, NULL, M, K, N, 1, NULL) == MX_OK)
            fail("a BF16 dX with dx_acc 1 was accepted");
        c.out16 = NULL;
        c.x16 = c.dy16 = NULL;
        c.dw_first = 0;
        /* an operand missing with no BF16 copy is refused */
        if (mxg_linear_forward(&c, NULL, dW.f(), dY2.f(), M, K, N, NULL) == MX_OK) fail("a missing X was accepted");
    } else {
        Dev h(ny * 2);
        c.out16 = h.h();
        if (mxg_linear_forward(&c, dX.f(), dW.f(), NULL, M, K, N, NULL) == MX_OK)
            fail("a BF16 output of a %s GEMM was accepted", recipe);
        c.out16 = NULL;
    }
    mxg_linws_free(ws);
    end();
}
