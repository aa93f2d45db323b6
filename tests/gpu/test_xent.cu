/*
 * test_xent.cu: nn/xent.cu (cross-entropy, the LM head's chunk loop) against src/nn/xent.c and
 * the CPU head (layers program).
 */
#include "test.cuh"

/* ---- cross-entropy ---- */
void test_xent(int N, int V) {
    char name[96];
    snprintf(name, sizeof name, "xent N%d V%d", N, V);
    if (!wanted(name)) return;
    begin(name);
    vecf z = randn((size_t)N * V, 3.0f);
    std::vector<int32_t> tgt(N);
    for (auto& t : tgt) t = (int32_t)(rnd64() % V);
    const float scale = 1.0f / N;
    vecf p_c = z, loss_c(N);
    const float mean_c = mx_xent_forward(p_c.data(), loss_c.data(), tgt.data(), N, V);
    vecf dl_c = p_c;
    mx_xent_backward(dl_c.data(), tgt.data(), N, V, scale);
    Dev dz(z.size() * 4), dt(N * 4), dloss(N * 4), dmean(4);
    up(dt, tgt);
    up(dz, z);
    MXC(mxg_xent_forward(dz.f(), dloss.f(), dt.i(), N, V, NULL));
    MXC(mxg_mean(dloss.f(), N, dmean.f(), NULL));
    /* probabilities elementwise (expf within 2 ulp); losses and dlogits normwise: p - 1 and
     * log(sum) - z_t cancel, so an ulp of p or of the sum is large relative to a small result */
    compare("forward probs", downf(dz, z.size()), p_c, ELEM, 1e-5);
    compare("forward losses", downf(dloss, N), loss_c, NORM, 1e-6);
    compare("mean loss", downf(dmean, 1), vecf(1, mean_c), ELEM, 1e-5);
    MXC(mxg_xent_backward(dz.f(), dt.i(), N, V, scale, NULL));
    compare("backward dlogits", downf(dz, z.size()), dl_c, NORM, 2e-6);
    vecf fused[2];
    for (int r = 0; r < 2; r++) {
        up(dz, z);
        MXC(mxg_xent_fused(dz.f(), dloss.f(), dt.i(), N, V, scale, NULL));
        fused[r] = downf(dz, z.size());
    }
    compare("fused dlogits", fused[0], dl_c, NORM, 2e-6);
    const vecf loss_g = downf(dloss, N);
    compare("fused losses", loss_g, loss_c, NORM, 1e-6);
    same_bytes("fused dlogits", fused[0].data(), fused[1].data(), z.size() * 4);
    /* the BF16 form (the LM head's): the logits untouched, every dlogit the RNE rounding of the
     * FP32 one above, bit for bit, and the same losses */
    Dev d16(z.size() * 2);
    up(dz, z);
    MXC(mxg_xent_fused_bf16(dz.f(), d16.h(), dloss.f(), dt.i(), N, V, scale, NULL));
    compare("bf16: logits kept", downf(dz, z.size()), z, EXACT, 0);
    same_as_bf16("bf16 dlogits", down<uint16_t>(d16, z.size()), fused[0]);
    same_bytes("bf16: losses", downf(dloss, N).data(), loss_g.data(), N * 4);
    /* written over the logits (the LM head's chunk: no second buffer): row r's BF16 dlogits in the first
     * half of its FP32 bytes, the same values */
    up(dz, z);
    MXC(mxg_xent_fused_bf16(dz.f(), (uint16_t*)dz.f(), dloss.f(), dt.i(), N, V, scale, NULL));
    const std::vector<uint16_t> over = down<uint16_t>(dz, z.size() * 2);
    std::vector<uint16_t> rows((size_t)N * V);
    for (int n = 0; n < N; n++) memcpy(&rows[(size_t)n * V], &over[(size_t)n * 2 * V], (size_t)V * 2);
    same_as_bf16("bf16 dlogits over logits", rows, fused[0]);
    same_bytes("bf16 over logits: losses", downf(dloss, N).data(), loss_g.data(), N * 4);
    end();
}

/* ---- LM head + loss over row chunks (cuBLASLt FP32 GEMMs) ---- */
void test_lm_head(int N, int D, int V, int Nc) {
    char name[96];
    snprintf(name, sizeof name, "lm-head N%d D%d V%d chunk%d", N, D, V, Nc);
    if (!wanted(name)) return;
    begin(name);
    vecf x = randn((size_t)N * D, 1.0f), w = randn((size_t)V * D, 0.2f), dw0 = randn((size_t)V * D, 0.01f);
    std::vector<int32_t> tgt(N);
    for (auto& t : tgt) t = (int32_t)(rnd64() % V);
    const float scale = 1.0f / N;
    /* CPU: logits in FP64 rounded to float, the CPU loss layer, products in FP64 */
    vecf z((size_t)N * V), loss_c(N), dx_c((size_t)N * D), dw_c = dw0;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) {
            double s = 0;
            for (int i = 0; i < D; i++) s += (double)x[(size_t)n * D + i] * w[(size_t)j * D + i];
            z[(size_t)n * V + j] = (float)s;
        }
    mx_xent_forward(z.data(), loss_c.data(), tgt.data(), N, V);
    mx_xent_backward(z.data(), tgt.data(), N, V, scale);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < D; i++) {
            double s = 0;
            for (int j = 0; j < V; j++) s += (double)z[(size_t)n * V + j] * w[(size_t)j * D + i];
            dx_c[(size_t)n * D + i] = (float)s;
        }
    for (int j = 0; j < V; j++)
        for (int i = 0; i < D; i++) {
            double s = dw0[(size_t)j * D + i];
            for (int n = 0; n < N; n++) s += (double)z[(size_t)n * V + j] * x[(size_t)n * D + i];
            dw_c[(size_t)j * D + i] = (float)s;
        }
    Dev dx(x.size() * 4), dw(w.size() * 4), dt(N * 4), dloss(N * 4), ddx(x.size() * 4), ddw(w.size() * 4),
        chunk((size_t)Nc * V * 4);
    up(dx, x); up(dw, w); up(dt, tgt);
    vecf rl[2], rdx[2], rdw[2];
    for (int r = 0; r < 2; r++) {
        up(ddw, dw0);
        MXC(mxg_lm_head_xent(dx.f(), dw.f(), dt.i(), N, D, V, scale, dloss.f(), ddx.f(), ddw.f(), chunk.f(), Nc, NULL));
        rl[r] = downf(dloss, N); rdx[r] = downf(ddx, x.size()); rdw[r] = downf(ddw, w.size());
    }
    /* FP32 GEMMs (K = D, V or the chunk) against FP64 products */
    compare("losses", rl[0], loss_c, NORM, 1e-5);
    compare("dxnf", rdx[0], dx_c, NORM, 1e-5);
    compare("dhead", rdw[0], dw_c, NORM, 1e-5);
    same_bytes("losses", rl[0].data(), rl[1].data(), N * 4);
    same_bytes("dxnf", rdx[0].data(), rdx[1].data(), x.size() * 4);
    same_bytes("dhead", rdw[0].data(), rdw[1].data(), w.size() * 4);
    /* loss only (evaluation): the same losses, dhead untouched */
    up(ddw, dw0);
    MXC(mxg_lm_head_xent(dx.f(), dw.f(), dt.i(), N, D, V, scale, dloss.f(), NULL, ddw.f(), chunk.f(), Nc, NULL));
    same_bytes("losses (loss only)", rl[0].data(), downf(dloss, N).data(), N * 4);
    compare("dhead (loss only)", downf(ddw, w.size()), dw0, EXACT, 0);
    end();
}
