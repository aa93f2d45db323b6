/*
 * test_rope.cu: nn/rope.cu against src/nn/rope.c (layers program).
 */
#include "test.cuh"

/* ---- RoPE: bit-identical both ways ---- */
void test_rope(int B, int T, int nh, int hd) {
    char name[96];
    snprintf(name, sizeof name, "rope B%d T%d heads%d hd%d", B, T, nh, hd);
    if (!wanted(name)) return;
    begin(name);
    const size_t n = (size_t)B * T * nh * hd;
    vecf cs((size_t)T * hd / 2), sn((size_t)T * hd / 2);
    mx_rope_tables(cs.data(), sn.data(), T, hd, 500000.0f);
    vecf x = randn(n, 1.0f), g = randn(n, 1.0f), x_c = x, g_c = g;
    mx_rope_forward(x_c.data(), cs.data(), sn.data(), B, T, nh, hd);
    mx_rope_backward(g_c.data(), cs.data(), sn.data(), B, T, nh, hd);
    Dev dc(cs.size() * 4), ds(sn.size() * 4), dx(n * 4), dg(n * 4);
    up(dc, cs); up(ds, sn); up(dx, x); up(dg, g);
    MXC(mxg_rope_forward(dx.f(), dc.f(), ds.f(), B, T, nh, hd, NULL));
    MXC(mxg_rope_backward(dg.f(), dc.f(), ds.f(), B, T, nh, hd, NULL));
    compare("forward", downf(dx, n), x_c, EXACT, 0);
    compare("backward", downf(dg, n), g_c, EXACT, 0);
    { /* BF16 in place: the CPU's rotation of the widened BF16 values, rounded */
        std::vector<uint16_t> x16(n), g16(n);
        vecf xw(n), gw(n);
        for (size_t i = 0; i < n; i++) {
            x16[i] = mx_bf16_from_f32(x[i]); xw[i] = mx_bf16_to_f32(x16[i]);
            g16[i] = mx_bf16_from_f32(g[i]); gw[i] = mx_bf16_to_f32(g16[i]);
        }
        mx_rope_forward(xw.data(), cs.data(), sn.data(), B, T, nh, hd);
        mx_rope_backward(gw.data(), cs.data(), sn.data(), B, T, nh, hd);
        Dev dx16(n * 2), dg16(n * 2);
        up(dx16, x16); up(dg16, g16);
        MXC(mxg_rope_forward_bf16(dx16.h(), dc.f(), ds.f(), B, T, nh, hd, NULL));
        MXC(mxg_rope_backward_bf16(dg16.h(), dc.f(), ds.f(), B, T, nh, hd, NULL));
        same_as_bf16("forward (bf16)", down<uint16_t>(dx16, n), xw);
        same_as_bf16("backward (bf16)", down<uint16_t>(dg16, n), gw);
        /* with the amax (the word starts above every float's: the call clears it): the same bytes, and the
         * largest |dx| bits of them widened */
        Dev da16(n * 2), am(4);
        up(da16, g16);
        CK(cudaMemset(am.p, 0xff, 4));
        MXC(mxg_rope_backward_bf16_amax(da16.h(), dc.f(), ds.f(), B, T, nh, hd, am.f(), NULL));
        const std::vector<uint16_t> o = down<uint16_t>(da16, n), o0 = down<uint16_t>(dg16, n);
        same_bytes("backward (bf16) with amax", o.data(), o0.data(), n * 2);
        uint32_t want = 0, got = down<uint32_t>(am, 1)[0];
        for (uint16_t h : o) want = std::max(want, ((uint32_t)h << 16) & 0x7fffffffu);
        printf("    backward amax          %08x, want %08x\n", got, want);
        if (got != want) fail("backward amax %08x, want %08x", got, want);
    }
    end();
}
