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

/* ---- AdamW on the tiny preset's layout: bit-identical ---- */
void test_adamw(void) {
    const char* name = "adamw tiny";
    if (!wanted(name)) return;
    begin(name);
    mx_llama m;
    memset(&m, 0, sizeof m);
    if (mx_model_preset("tiny", &m.cfg)) { fail("preset: %s", mx_last_error()); end(); return; }
    m.n_params = mx_param_layout(&m.cfg, m.info);
    const size_t n = m.n_params;
    vecf p = randn(n, 0.02f), g = randn(n, 1e-3f), mm = randn(n, 1e-4f), vv(n);
    for (auto& e : vv) e = 1e-7f * fabsf(rndnf());
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
