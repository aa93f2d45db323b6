/*
 * test_rmsnorm.cu: nn/rmsnorm.cu against src/nn/rmsnorm.c (layers program).
 */
#include "test.cuh"

/* ---- RMSNorm ---- */
void test_rmsnorm(int N, int D) {
    char name[96];
    snprintf(name, sizeof name, "rmsnorm N%d D%d", N, D);
    if (!wanted(name)) return;
    begin(name);
    const float eps = 1e-5f;
    vecf x = randn((size_t)N * D, 1.0f), w = randn(D, 0.3f), dout = randn((size_t)N * D, 1.0f);
    for (auto& e : w) e += 1.0f;
    for (int n = 0; n < N; n += 7) for (int i = 0; i < D; i++) x[(size_t)n * D + i] *= 40.0f; /* varied scales */
    vecf out_c((size_t)N * D), rstd_c(N), dx0 = randn((size_t)N * D, 0.1f), dw0 = randn(D, 0.1f);
    mx_rmsnorm_forward(out_c.data(), rstd_c.data(), x.data(), w.data(), N, D, eps);
    vecf dx_c = dx0, dw_c = dw0;
    mx_rmsnorm_backward(dx_c.data(), dw_c.data(), dout.data(), x.data(), w.data(), rstd_c.data(), N, D);

    Dev dxin(x.size() * 4), dwt(D * 4), dout_d(dout.size() * 4), dout_f(x.size() * 4), drstd(N * 4);
    Dev ddx(x.size() * 4), ddw(D * 4), ws(mxg_rmsnorm_backward_workspace(N, D) * 4);
    up(dxin, x); up(dwt, w); up(dout_d, dout);
    MXC(mxg_rmsnorm_forward(dout_f.f(), drstd.f(), dxin.f(), dwt.f(), N, D, eps, NULL));
    vecf rstd_g = downf(drstd, N);
    compare("forward rstd", rstd_g, rstd_c, ELEM, 1e-6);
    compare("forward out", downf(dout_f, x.size()), out_c, ELEM, 1e-6);
    {
        Dev d16(x.size() * 2), dr16(N * 4);
        MXC(mxg_rmsnorm_forward_bf16(d16.h(), dr16.f(), dxin.f(), dwt.f(), N, D, eps, NULL));
        same_as_bf16("forward out (bf16)", down<uint16_t>(d16, x.size()), downf(dout_f, x.size()));
        same_bytes("forward rstd (bf16)", downf(dr16, N).data(), rstd_g.data(), (size_t)N * 4);
    }
    /* the backward from the CPU's rstd, so that dw can be checked bit for bit */
    up(drstd, rstd_c);
    /* runs 0, 1: the default (the two-pass kernels); 2: one pass (where D % 4 == 0, D <= 4096); 3, 4: runs 0 and
     * 2 with dx's amax (mxg_rmsnorm_backward_amax: the same dx, and the largest |dx| bits of it; the word starts
     * at a value above every float's, which the call must clear) */
    vecf rdx[5], rdw[5];
    Dev am(4);
    for (int r = 0; r < 5; r++) {
        up(ddx, dx0); up(ddw, dw0);
        MXC(mxg_rmsnorm_config(r == 2 || r == 4 ? 1 : 0));
        CK(cudaMemset(am.p, 0xff, 4));
        if (r < 3) MXC(mxg_rmsnorm_backward(ddx.f(), ddw.f(), dout_d.f(), dxin.f(), dwt.f(), drstd.f(), N, D, ws.f(), NULL));
        else MXC(mxg_rmsnorm_backward_amax(ddx.f(), ddw.f(), dout_d.f(), dxin.f(), dwt.f(), drstd.f(), N, D, ws.f(), am.f(),
                                           NULL));
        rdx[r] = downf(ddx, x.size());
        rdw[r] = downf(ddw, D);
        if (r < 3) continue;
        uint32_t want = 0, got = down<uint32_t>(am, 1)[0];
        for (float v : rdx[r]) want = std::max(want, mx_f2u(v) & 0x7fffffffu);
        printf("    dx amax (%s)        %08x, want %08x\n", r == 3 ? "2-pass" : "1-pass", got, want);
        if (got != want) fail("dx amax %08x, want %08x (run %d)", got, want, r);
        same_bytes(r == 3 ? "backward dx with amax" : "backward dx with amax (1-pass)", rdx[r].data(), rdx[r == 3 ? 0 : 2].data(),
                   rdx[r].size() * 4);
    }
    MXC(mxg_rmsnorm_config(0));
    compare("backward dx", rdx[0], dx_c, ELEM, 1e-5);
    compare("backward dw", rdw[0], dw_c, EXACT, 0);
    compare("backward dx (1-pass)", rdx[2], dx_c, ELEM, 1e-5);
    compare("backward dw (1-pass)", rdw[2], dw_c, EXACT, 0);
    same_bytes("backward dx", rdx[0].data(), rdx[1].data(), rdx[0].size() * 4);
    same_bytes("backward dw", rdw[0].data(), rdw[1].data(), rdw[0].size() * 4);
    end();
}
