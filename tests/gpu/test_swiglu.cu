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
    {
        Dev d16(n * 2);
        MXC(mxg_swiglu_forward_bf16(d16.h(), dg.f(), du.f(), n, NULL));
        same_as_bf16("forward h (bf16)", down<uint16_t>(d16, n), downf(dhh, n));
        Dev g16(n * 2), u16(n * 2);
        MXC(mxg_swiglu_backward_bf16(g16.h(), u16.h(), ddh.f(), dg.f(), du.f(), n, NULL));
        same_as_bf16("backward dgate (bf16)", down<uint16_t>(g16, n), downf(ddg, n));
        same_as_bf16("backward dup (bf16)", down<uint16_t>(u16, n), downf(ddu, n));
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
