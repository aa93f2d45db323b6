/*
 * test_adamw.cu: train/adamw.cu (sum of squares, AdamW) against src/train/adamw.c (layers program).
 */
#include "test.cuh"

/* ---- global norm ---- */
void test_sum_squares(size_t n) {
    char name[96];
    snprintf(name, sizeof name, "sum-squares n%zu", n);
    if (!wanted(name)) return;
    begin(name);
    vecf g = randn(n, 1e-3f);
    for (size_t i = 0; i < n; i += 997) g[i] *= 1000.0f;
    const double ref = mx_sum_squares(g.data(), n);
    const size_t nch = mxg_sum_squares_workspace(n);
    std::vector<double> part_c(nch);
    for (size_t c = 0; c < nch; c++) { /* mx_sum_squares's partials */
        double s = 0;
        for (size_t i = c * 4096; i < n && i < (c + 1) * 4096; i++) s += (double)g[i] * g[i];
        part_c[c] = s;
    }
    Dev dg(n * 4), ws(nch * 8), out(8);
    up(dg, g);
    double res[2];
    for (int r = 0; r < 2; r++) {
        MXC(mxg_sum_squares(dg.f(), n, out.d(), ws.d(), NULL));
        res[r] = down<double>(out, 1)[0];
    }
    std::vector<double> part_g = down<double>(ws, nch);
    if (memcmp(part_g.data(), part_c.data(), nch * 8)) fail("chunk partials differ from the CPU's");
    else printf("    chunk partials         exact: %zu/%zu bit-identical\n", nch, nch);
    const double rel = fabs(res[0] - ref) / ref;
    printf("    total                  %.17g vs CPU %.17g: rel %.3g (tol 1e-13)\n", res[0], ref, rel);
    if (!(rel <= 1e-13)) fail("sum of squares off by %.3g relative", rel);
    same_bytes("total", &res[0], &res[1], 8);
    end();
}

/* The tiny preset's layout (no weights of its own: m's arrays are the caller's) and random weights, gradients
 * and moments on it. */
static int tiny_state(mx_llama* m, vecf& p, vecf& g, vecf& mm, vecf& vv) {
    memset(m, 0, sizeof *m);
    if (mx_model_preset("tiny", &m->cfg)) {
        fail("preset: %s", mx_last_error());
        return 1;
    }
    m->n_params = mx_param_layout(&m->cfg, m->info);
    const size_t n = m->n_params;
    p = randn(n, 0.02f);
    g = randn(n, 1e-3f);
    mm = randn(n, 1e-4f);
    vv.assign(n, 0.0f);
    for (auto& e : vv) e = 1e-7f * fabsf(rndnf());
    return 0;
}

/* ---- AdamW on the tiny preset's layout: bit-identical ---- */
void test_adamw(void) {
    const char* name = "adamw tiny";
    if (!wanted(name)) return;
    begin(name);
    mx_llama m;
    vecf p, g, mm, vv;
    if (tiny_state(&m, p, g, mm, vv)) { end(); return; }
    const size_t n = m.n_params;
    mx_adamw_config c = {0.9, 0.95, 1e-5, 0.1};
    vecf pc = p, mc = mm, vc = vv;
    m.params = pc.data();
    m.grads = g.data();
    Dev dp(n * 4), dgr(n * 4), dm(n * 4), dv(n * 4);
    up(dp, p); up(dgr, g); up(dm, mm); up(dv, vv);
    for (int64_t t = 3; t <= 4; t++) { /* two updates: bias corrections of steps 3 and 4 */
        mx_adamw_update(&m, mc.data(), vc.data(), &c, 1e-3 * t, 0.7f, t);
        MXC(mxg_adamw_update(m.info, dp.f(), dgr.f(), dm.f(), dv.f(), &c, 1e-3 * t, 0.7f, t, NULL));
    }
    compare("params", downf(dp, n), pc, EXACT, 0);
    compare("m", downf(dm, n), mc, EXACT, 0);
    compare("v", downf(dv, n), vc, EXACT, 0);
    { /* with BF16 copies of two kinds: the same update, the copies the RNE of the new weights */
        Dev dp2(n * 4), dm2(n * 4), dv2(n * 4), c16(n * 2);
        up(dp2, p); up(dm2, mm); up(dv2, vv);
        CK(cudaMemset(c16.p, 0xff, n * 2));
        uint16_t* copy[MX_P_COUNT] = {};
        copy[MX_P_WQ] = c16.h() + m.info[MX_P_WQ].offset;
        copy[MX_P_HEAD] = c16.h() + m.info[MX_P_HEAD].offset;
        for (int64_t t = 3; t <= 4; t++)
            MXC(mxg_adamw_update_bf16(m.info, dp2.f(), dgr.f(), dm2.f(), dv2.f(), &c, 1e-3 * t, 0.7f, t, copy, NULL));
        compare("params (with copies)", downf(dp2, n), pc, EXACT, 0);
        std::vector<uint16_t> h = down<uint16_t>(c16, n);
        size_t bad = 0, checked = 0;
        for (int k = 0; k < MX_P_COUNT; k++)
            for (size_t i = m.info[k].offset; i < m.info[k].offset + m.info[k].numel; i++) {
                const uint16_t want = copy[k] ? mx_bf16_from_f32(pc[i]) : (uint16_t)0xffff; /* others untouched */
                bad += h[i] != want;
                checked++;
            }
        if (bad) fail("BF16 copies: %zu of %zu differ", bad, checked);
        else printf("    %-22s %zu/%zu as expected (RNE of the new weights; other kinds untouched)\n", "BF16 copies",
                    checked, checked);
    }
    end();
}

/* ---- the optimizer over spans (mxg_span_table: the model's gradients where they share memory with its
 * activations): the tiny layout cut into one span per (kind, layer) slice, each in its own allocation ---- */
void test_adamw_spans(void) {
    const char* name = "adamw spans tiny";
    if (!wanted(name)) return;
    begin(name);
    mx_llama m;
    vecf p, g, mm, vv;
    if (tiny_state(&m, p, g, mm, vv)) { end(); return; }
    const size_t n = m.n_params, L = (size_t)m.cfg.n_layers;
    for (size_t i = 0; i < n; i += 997) g[i] *= 1000.0f;
    mx_adamw_config c = {0.9, 0.95, 1e-5, 0.1};
    vecf pc = p, mc = mm, vc = vv;
    m.params = pc.data();
    m.grads = g.data();
    Dev dp(n * 4), dm(n * 4), dv(n * 4), c16(n * 2);
    up(dp, p); up(dm, mm); up(dv, vv);
    CK(cudaMemset(c16.p, 0xff, n * 2));
    /* the gradients scattered: slice s in its own allocation (so no span is next to another) */
    std::vector<mxg_span> sp;
    std::vector<Dev*> gs;
    std::vector<size_t> off;
    for (int k = 0; k < MX_P_COUNT; k++) {
        const mx_param_info* in = &m.info[k];
        const size_t ns = in->per_layer ? L : 1, len = in->numel / ns;
        for (size_t l = 0; l < ns; l++) {
            const size_t o = in->offset + l * len;
            gs.push_back(new Dev(len * 4 + 4));
            CK(cudaMemcpy(gs.back()->p, g.data() + o, len * 4, cudaMemcpyHostToDevice));
            const int copy = k == MX_P_WQ || k == MX_P_HEAD; /* BF16 copies of two kinds */
            sp.push_back({dp.f() + o, gs.back()->f(), dm.f() + o, dv.f() + o, copy ? c16.h() + o : NULL, len,
                          in->is_matrix, NULL});
            off.push_back(o);
        }
    }
    /* every other span with an amax word (mxg_span.amax), 0xffffffff where none is (never written) */
    Dev am(sp.size() * 4);
    CK(cudaMemset(am.p, 0xff, sp.size() * 4));
    for (size_t s = 0; s < sp.size(); s += 2) sp[s].amax = (unsigned*)am.p + s;
    mxg_span_table* t = NULL;
    MXC(mxg_span_table_create(&t, sp.data(), (int)sp.size()));
    if (t) {
        /* the sum of squares: each span's chunks of 4096 as mx_sum_squares of that span, bit for bit */
        std::vector<double> part_c;
        double ref = 0;
        for (size_t s = 0; s < sp.size(); s++) {
            for (size_t i0 = 0; i0 < sp[s].n; i0 += 4096) {
                double q = 0;
                for (size_t i = i0; i < sp[s].n && i < i0 + 4096; i++) q += (double)g[off[s] + i] * g[off[s] + i];
                part_c.push_back(q);
            }
            ref += mx_sum_squares(g.data() + off[s], sp[s].n);
        }
        const size_t nch = mxg_span_table_chunks(t);
        if (nch != part_c.size()) fail("chunks: %zu, want %zu", nch, part_c.size());
        Dev ws(nch * 8 + 8), out(8);
        double res[2] = {0, 0};
        for (int r = 0; r < 2; r++) {
            MXC(mxg_sum_squares_spans(t, out.d(), ws.d(), NULL));
            res[r] = down<double>(out, 1)[0];
        }
        std::vector<double> part_g = down<double>(ws, part_c.size());
        if (memcmp(part_g.data(), part_c.data(), part_c.size() * 8)) fail("span chunk partials differ from the CPU's");
        else printf("    chunk partials         %zu/%zu bit-identical (%zu spans)\n", nch, nch, sp.size());
        const double rel = fabs(res[0] - ref) / ref;
        printf("    total                  %.17g vs CPU %.17g: rel %.3g (tol 1e-13)\n", res[0], ref, rel);
        if (!(rel <= 1e-13)) fail("sum of squares off by %.3g relative", rel);
        same_bytes("total (2 runs)", &res[0], &res[1], 8);
        /* AdamW: the CPU's update of the whole layout, element for element */
        for (int64_t st = 3; st <= 4; st++) {
            mx_adamw_update(&m, mc.data(), vc.data(), &c, 1e-3 * st, 0.7f, st);
            for (size_t s = 0; s < sp.size(); s += 2) CK(cudaMemset((unsigned*)am.p + s, 0, 4)); /* raised from 0 */
            MXC(mxg_adamw_spans(t, &c, 1e-3 * st, 0.7f, st, NULL));
        }
        /* the amax words: the largest |p| bits of the span's updated weights (the CPU's), the others untouched */
        std::vector<uint32_t> ag = down<uint32_t>(am, sp.size());
        size_t bad_am = 0;
        for (size_t s = 0; s < sp.size(); s++) {
            uint32_t want = 0xffffffffu;
            if (s % 2 == 0) {
                want = 0;
                for (size_t i = 0; i < sp[s].n; i++) {
                    const uint32_t b = mx_f2u(pc[off[s] + i]) & 0x7fffffffu;
                    if (b > want) want = b;
                }
            }
            bad_am += ag[s] != want;
        }
        printf("    amax words             %zu/%zu as the CPU's\n", sp.size() - bad_am, sp.size());
        if (bad_am) fail("span amax: %zu of %zu words differ", bad_am, sp.size());
        compare("params", downf(dp, n), pc, EXACT, 0);
        compare("m", downf(dm, n), mc, EXACT, 0);
        compare("v", downf(dv, n), vc, EXACT, 0);
        std::vector<uint16_t> h = down<uint16_t>(c16, n);
        size_t bad = 0;
        for (int k = 0; k < MX_P_COUNT; k++)
            for (size_t i = m.info[k].offset; i < m.info[k].offset + m.info[k].numel; i++)
                bad += h[i] != (k == MX_P_WQ || k == MX_P_HEAD ? mx_bf16_from_f32(pc[i]) : (uint16_t)0xffff);
        if (bad) fail("BF16 copies: %zu of %zu differ", bad, n);
        mxg_span_table_free(t);
    }
    { /* one span over the whole array: mxg_sum_squares's bits */
        Dev dg(n * 4), ws(mxg_sum_squares_workspace(n) * 8 + 8), o1(8), o2(8);
        up(dg, g);
        mxg_span one = {dp.f(), dg.f(), dm.f(), dv.f(), NULL, n, 1, NULL};
        mxg_span_table* t1 = NULL;
        MXC(mxg_span_table_create(&t1, &one, 1));
        if (t1) {
            MXC(mxg_sum_squares_spans(t1, o1.d(), ws.d(), NULL));
            MXC(mxg_sum_squares(dg.f(), n, o2.d(), ws.d(), NULL));
            const double a = down<double>(o1, 1)[0], b = down<double>(o2, 1)[0];
            same_bytes("one span = mxg_sum_squares", &a, &b, 8);
            mxg_span_table_free(t1);
        }
    }
    for (Dev* d : gs) delete d;
    end();
}
