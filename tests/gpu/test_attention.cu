/*
 * test_attention.cu: nn/attention.cu (SIMT) and nn/attention_gemm.cu (cuBLASLt FP32 / TF32)
 * against src/nn/attention.c (layers program).
 */
#include "test.cuh"

/* ---- attention ---- */
/* mode 0: the flash kernels; 1: cuBLASLt FP32 GEMMs; 2: TF32 GEMMs (looser: 10-bit operands) */
void test_attention(int B, int T, int H, int KV, int hd, int mode) {
    char name[96];
    snprintf(name, sizeof name, "attention%s B%d T%d H%d/%d hd%d", mode == 1 ? " gemm" : mode == 2 ? " tf32" : "", B, T,
             H, KV, hd);
    if (!wanted(name)) return;
    begin(name);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd;
    /* scores of a few units: peaked and flat rows both occur */
    vecf q = randn(nq, 1.5f), k = randn(nk, 1.5f), v = randn(nk, 1.0f), dout = randn(nq, 1.0f);
    vecf out_c(nq), att((size_t)B * H * T * T), dq_c(nq), dk_c(nk), dv_c(nk);
    mx_attention_forward(out_c.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, KV, hd);
    mx_attention_backward(dq_c.data(), dk_c.data(), dv_c.data(), dout.data(), att.data(), q.data(), k.data(),
                          v.data(), B, T, H, KV, hd);
    Dev dq_(nq * 4), dk_(nk * 4), dv_(nk * 4), dgo(nq * 4), dout_(nq * 4), dlse((size_t)B * H * T * 4);
    Dev ddq(nq * 4), ddk(nk * 4), ddv(nk * 4), ddelta((size_t)B * H * T * 4);
    Dev dws(mxg_attention_gemm_workspace(T, H) * 4);
    up(dq_, q); up(dk_, k); up(dv_, v); up(dgo, dout);
    vecf o[2], gq[2], gk[2], gv[2];
    for (int r = 0; r < 2; r++) {
        CK(cudaMemset(dout_.p, 0xff, nq * 4)); /* NaN poison: every element must be written */
        CK(cudaMemset(ddq.p, 0xff, nq * 4)); CK(cudaMemset(ddk.p, 0xff, nk * 4)); CK(cudaMemset(ddv.p, 0xff, nk * 4));
        if (mode == 0) {
            MXC(mxg_attention_forward(dout_.f(), dlse.f(), dq_.f(), dk_.f(), dv_.f(), B, T, H, KV, hd, NULL));
            MXC(mxg_attention_backward(ddq.f(), ddk.f(), ddv.f(), ddelta.f(), dgo.f(), dout_.f(), dlse.f(), dq_.f(),
                                       dk_.f(), dv_.f(), B, T, H, KV, hd, NULL));
        } else {
            MXC(mxg_attention_forward_gemm(dout_.f(), dlse.f(), dq_.f(), dk_.f(), dv_.f(), B, T, H, KV, hd, dws.f(),
                                           mode == 2, NULL));
            MXC(mxg_attention_backward_gemm(ddq.f(), ddk.f(), ddv.f(), ddelta.f(), dgo.f(), dout_.f(), dlse.f(), dq_.f(),
                                            dk_.f(), dv_.f(), B, T, H, KV, hd, dws.f(), mode == 2, NULL));
        }
        o[r] = downf(dout_, nq); gq[r] = downf(ddq, nq); gk[r] = downf(ddk, nk); gv[r] = downf(ddv, nk);
    }
    /* forward: online softmax and CUDA's expf against the CPU's two-pass softmax */
    const double tf = mode == 2 ? 300.0 : 1.0; /* TF32: ~2^-11 relative per operand */
    compare("forward out", o[0], out_c, NORM, 1e-5 * tf);
    /* backward: p recomputed from the log-sum-exp, sums over T (and the group) in another order */
    compare("backward dq", gq[0], dq_c, NORM, 2e-5 * tf);
    compare("backward dk", gk[0], dk_c, NORM, 2e-5 * tf);
    compare("backward dv", gv[0], dv_c, NORM, 2e-5 * tf);
    same_bytes("forward out", o[0].data(), o[1].data(), nq * 4);
    same_bytes("backward dq", gq[0].data(), gq[1].data(), nq * 4);
    same_bytes("backward dk", gk[0].data(), gk[1].data(), nk * 4);
    same_bytes("backward dv", gv[0].data(), gv[1].data(), nk * 4);
    /* the log-sum-exp against the CPU's probabilities: p[t][t] = exp(s_tt - lse_t) */
    vecf lse = downf(dlse, (size_t)B * H * T), pd((size_t)B * H * T), pc((size_t)B * H * T);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float* qt = &q[((size_t)(b * T + t) * H + h) * hd];
                const float* kt = &k[((size_t)(b * T + t) * KV + h / (H / KV)) * hd];
                double s = 0;
                for (int i = 0; i < hd; i++) s += (double)qt[i] * kt[i];
                size_t row = ((size_t)b * H + h) * T + t;
                pd[row] = (float)exp(s * scale - lse[row]);
                pc[row] = att[row * T + t];
            }
    compare("lse (diagonal p)", pd, pc, NORM, 1e-5 * tf);
    end();
}
