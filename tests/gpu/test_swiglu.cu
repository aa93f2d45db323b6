/*
 * test_swiglu.cu: nn/swiglu.cu against src/nn/swiglu.c (layers program).
 */
#include "test.cuh"

/* ---- SwiGLU ---- */
void test_swiglu(size_t n) {
    char name[96];
    snprintf(name, sizeof name, "swiglu n%zu", n);
    if (!wanted(name)) return;
    begin(name);
    vecf g = randn(n, 3.0f), u = randn(n, 1.0f), dh = randn(n, 1.0f), h_c(n), dg_c(n), du_c(n);
    mx_swiglu_forward(h_c.data(), g.data(), u.data(), n);
    mx_swiglu_backward(dg_c.data(), du_c.data(), dh.data(), g.data(), u.data(), n);
    Dev dg(n * 4), du(n * 4), ddh(n * 4), dhh(n * 4), ddg(n * 4), ddu(n * 4);
    up(dg, g); up(du, u); up(ddh, dh);
    MXC(mxg_swiglu_forward(dhh.f(), dg.f(), du.f(), n, NULL));
    MXC(mxg_swiglu_backward(ddg.f(), ddu.f(), ddh.f(), dg.f(), du.f(), n, NULL));
    /* CUDA's expf is within 2 ulp of the CPU's: elementwise 1e-5; dgate normwise (1 + g (1 - s)
     * cancels near silu' = 0, where an ulp of s is large relative to the result) */
    compare("forward h", downf(dhh, n), h_c, ELEM, 1e-5);
    {   /* BF16 in and out (act16): the FP32 kernels on the widened BF16 inputs, rounded; n % 8 == 0
         * runs the 8-wide kernels, other n the one-element ones */
        std::vector<uint16_t> g16(n), u16(n), dh16(n);
        vecf gw(n), uw(n), dhw(n);
        for (size_t i = 0; i < n; i++) {
            g16[i] = mx_bf16_from_f32(g[i]); gw[i] = mx_bf16_to_f32(g16[i]);
            u16[i] = mx_bf16_from_f32(u[i]); uw[i] = mx_bf16_to_f32(u16[i]);
            dh16[i] = mx_bf16_from_f32(dh[i]); dhw[i] = mx_bf16_to_f32(dh16[i]);
        }
        Dev dg16(n * 2), du16(n * 2), ddh16(n * 2), dgw(n * 4), duw(n * 4), ddhw(n * 4), hw(n * 4), dgo(n * 4),
            duo(n * 4);
        up(dg16, g16); up(du16, u16); up(ddh16, dh16); up(dgw, gw); up(duw, uw); up(ddhw, dhw);
        MXC(mxg_swiglu_forward(hw.f(), dgw.f(), duw.f(), n, NULL));
        MXC(mxg_swiglu_backward(dgo.f(), duo.f(), ddhw.f(), dgw.f(), duw.f(), n, NULL));
        Dev h16(n * 2), og16(n * 2), ou16(n * 2);
        MXC(mxg_swiglu_forward_bf16(h16.h(), dg16.h(), du16.h(), n, NULL));
        same_as_bf16("forward h (bf16)", down<uint16_t>(h16, n), downf(hw, n));
        MXC(mxg_swiglu_backward_bf16(og16.h(), ou16.h(), ddh16.h(), dg16.h(), du16.h(), n, NULL));
        same_as_bf16("backward dgate (bf16)", down<uint16_t>(og16, n), downf(dgo, n));
        same_as_bf16("backward dup (bf16)", down<uint16_t>(ou16, n), downf(duo, n));
        if (n % 8 == 0) { /* the _amax forms: the same bytes, and their outputs' amax (k_amax's: the |x| bits' max) */
            auto amax_of = [](const std::vector<uint16_t>& v) {
                uint32_t m = 0;
                for (uint16_t b : v) m = std::max(m, (uint32_t)(b & 0x7fffu) << 16);
                return m;
            };
            Dev a16(n * 2), b16(n * 2), c16(n * 2), am(16);
            CK(cudaMemset(am.p, 0xff, 16)); /* zeroed by the calls */
            MXC(mxg_swiglu_forward_bf16_amax(a16.h(), dg16.h(), du16.h(), n, am.f(), NULL));
            MXC(mxg_swiglu_backward_bf16_amax(b16.h(), c16.h(), ddh16.h(), dg16.h(), du16.h(), n, am.f() + 1, NULL));
            const auto h = down<uint16_t>(h16, n), og = down<uint16_t>(og16, n), ou = down<uint16_t>(ou16, n);
            if (down<uint16_t>(a16, n) != h || down<uint16_t>(b16, n) != og || down<uint16_t>(c16, n) != ou)
                fail("the _amax forms' outputs differ from the plain kernels'");
            std::vector<uint32_t> got(3);
            CK(cudaMemcpy(got.data(), am.p, 12, cudaMemcpyDeviceToHost));
            const uint32_t want[3] = {amax_of(h), amax_of(og), amax_of(ou)};
            printf("    amax h / dgate / dup 0x%08x 0x%08x 0x%08x (want 0x%08x 0x%08x 0x%08x)\n", got[0], got[1], got[2],
                   want[0], want[1], want[2]);
            for (int k = 0; k < 3; k++)
                if (got[k] != want[k]) fail("amax %d: 0x%08x, want 0x%08x", k, got[k], want[k]);
        } else { /* refused where the 8-wide kernels cannot run (nothing written) */
            Dev t16(n * 2), am(16);
            if (mxg_swiglu_forward_bf16_amax(t16.h(), dg16.h(), du16.h(), n, am.f(), NULL) == MX_OK)
                fail("mxg_swiglu_forward_bf16_amax took n %% 8 != 0");
            else printf("    refused                %s\n", mx_last_error());
        }
    }
    compare("backward dgate", downf(ddg, n), dg_c, NORM, 1e-6);
    compare("backward dup", downf(ddu, n), du_c, ELEM, 1e-5);
    Dev dsum(n * 4);
    MXC(mxg_add(dsum.f(), dg.f(), du.f(), n, NULL));
    vecf s_c(n);
    for (size_t i = 0; i < n; i++) s_c[i] = g[i] + u[i];
    compare("add", downf(dsum, n), s_c, EXACT, 0);
    end();
}
