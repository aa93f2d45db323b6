/*
 * test_llama.cu: the model: the GPU layers composed as src/nn/llama.c, nn/llama.cu against the
 * CPU model, and its telemetry (layers program).
 */
#include "test.cuh"

/* ---- the whole model (tiny preset shape, fp32 recipe) composed from the GPU layers ----
 * The skeleton of the GPU trainer's step: the block linears are plain FP32 GEMMs
 * (mxg_sgemm), the CPU model runs the "fp32" recipe. Loss and every parameter
 * gradient against mx_llama_forward / mx_llama_backward on the same weights and batch. */
struct GpuLin { /* Y = X W^T; dX += dY W; dW += dY^T X */
    static int fwd(const float* X, const float* W, float* Y, int M, int K, int N) {
        return mxg_sgemm(0, 1, M, N, K, X, K, W, K, Y, N, 0, NULL);
    }
    static int bwd(const float* X, const float* W, const float* dY, float* dX, float* dW, int M, int K, int N) {
        int rc = mxg_sgemm(0, 0, M, K, N, dY, N, W, K, dX, K, 1, NULL);
        return rc ? rc : mxg_sgemm(1, 0, N, K, M, dY, N, X, K, dW, K, 1, NULL);
    }
};

static int gpu_model_step(const mx_llama* m, const float* P, float* G, const int32_t* tok, const int32_t* tgt, int B,
                          int T, const float* rc_cos, const float* rc_sin, float* losses, float* loss) {
    const mx_model_config* c = &m->cfg;
    const int N = B * T, D = c->dim, L = c->n_layers, V = c->vocab, F = c->ffn, H = c->n_heads, KV = c->n_kv_heads;
    const int hd = D / H, QD = H * hd, KD = KV * hd, Nc = 96;
    const size_t ND = (size_t)N * D;
#define OFF(t) (m->info[t].offset)
    Dev x((L + 1) * ND * 4), xn1(L * ND * 4), r1((size_t)L * N * 4), q((size_t)L * N * QD * 4), k((size_t)L * N * KD * 4),
        v((size_t)L * N * KD * 4), lse((size_t)L * B * H * T * 4), ao((size_t)L * N * QD * 4), xmid(L * ND * 4),
        xn2(L * ND * 4), r2((size_t)L * N * 4), gate((size_t)L * N * F * 4), upb((size_t)L * N * F * 4),
        hid((size_t)L * N * F * 4), xnf(ND * 4), rf(N * 4), tmp(ND * 4), chunk((size_t)Nc * V * 4), dx(ND * 4),
        dxn(ND * 4), dq((size_t)N * QD * 4), dk((size_t)N * KD * 4), dv((size_t)N * KD * 4), dao((size_t)N * QD * 4),
        dgate((size_t)N * F * 4), dup((size_t)N * F * 4), dhid((size_t)N * F * 4), delta((size_t)B * H * T * 4),
        wsr(mxg_rmsnorm_backward_workspace(N, D) * 4), wse(mxg_embedding_backward_workspace(N, V)), dmean(4);
    int rc = 0;
#define RUN(call) do { if (!rc) rc = (call); } while (0)
    RUN(mxg_embedding_forward(x.f(), tok, P + OFF(MX_P_EMBED), N, D, NULL));
    for (int l = 0; l < L; l++) {
        float *xl = x.f() + l * ND, *xn1l = xn1.f() + l * ND, *ql = q.f() + (size_t)l * N * QD;
        float *kl = k.f() + (size_t)l * N * KD, *vl = v.f() + (size_t)l * N * KD, *aol = ao.f() + (size_t)l * N * QD;
        float *xm = xmid.f() + l * ND, *xn2l = xn2.f() + l * ND, *gl = gate.f() + (size_t)l * N * F;
        float *ul = upb.f() + (size_t)l * N * F, *hl = hid.f() + (size_t)l * N * F;
        RUN(mxg_rmsnorm_forward(xn1l, r1.f() + (size_t)l * N, xl, P + OFF(MX_P_ATTN_NORM) + (size_t)l * D, N, D,
                                c->norm_eps, NULL));
        RUN(GpuLin::fwd(xn1l, P + OFF(MX_P_WQ) + (size_t)l * QD * D, ql, N, D, QD));
        RUN(GpuLin::fwd(xn1l, P + OFF(MX_P_WK) + (size_t)l * KD * D, kl, N, D, KD));
        RUN(GpuLin::fwd(xn1l, P + OFF(MX_P_WV) + (size_t)l * KD * D, vl, N, D, KD));
        RUN(mxg_rope_forward(ql, rc_cos, rc_sin, B, T, H, hd, NULL));
        RUN(mxg_rope_forward(kl, rc_cos, rc_sin, B, T, KV, hd, NULL));
        RUN(mxg_attention_forward(aol, lse.f() + (size_t)l * B * H * T, ql, kl, vl, B, T, H, KV, hd, NULL));
        RUN(GpuLin::fwd(aol, P + OFF(MX_P_WO) + (size_t)l * D * QD, tmp.f(), N, QD, D));
        RUN(mxg_add(xm, xl, tmp.f(), ND, NULL));
        RUN(mxg_rmsnorm_forward(xn2l, r2.f() + (size_t)l * N, xm, P + OFF(MX_P_FFN_NORM) + (size_t)l * D, N, D,
                                c->norm_eps, NULL));
        RUN(GpuLin::fwd(xn2l, P + OFF(MX_P_WGATE) + (size_t)l * F * D, gl, N, D, F));
        RUN(GpuLin::fwd(xn2l, P + OFF(MX_P_WUP) + (size_t)l * F * D, ul, N, D, F));
        RUN(mxg_swiglu_forward(hl, gl, ul, (size_t)N * F, NULL));
        RUN(GpuLin::fwd(hl, P + OFF(MX_P_WDOWN) + (size_t)l * D * F, tmp.f(), N, F, D));
        RUN(mxg_add(x.f() + (l + 1) * ND, xm, tmp.f(), ND, NULL));
    }
    float* xL = x.f() + L * ND;
    RUN(mxg_rmsnorm_forward(xnf.f(), rf.f(), xL, P + OFF(MX_P_FINAL_NORM), N, D, c->norm_eps, NULL));
    /* head + loss + dlogits per chunk of rows: dxnf into dxn, dhead += */
    RUN(mxg_lm_head_xent(xnf.f(), P + OFF(MX_P_HEAD), tgt, N, D, V, 1.0f / N, losses, dxn.f(), G + OFF(MX_P_HEAD),
                         chunk.f(), Nc, NULL));
    RUN(mxg_mean(losses, N, dmean.f(), NULL));
    CK(cudaMemset(dx.p, 0, ND * 4));
    RUN(mxg_rmsnorm_backward(dx.f(), G + OFF(MX_P_FINAL_NORM), dxn.f(), xL, P + OFF(MX_P_FINAL_NORM), rf.f(), N, D,
                             wsr.f(), NULL));
    for (int l = L - 1; l >= 0; l--) {
        float *xl = x.f() + l * ND, *xn1l = xn1.f() + l * ND, *ql = q.f() + (size_t)l * N * QD;
        float *kl = k.f() + (size_t)l * N * KD, *vl = v.f() + (size_t)l * N * KD, *aol = ao.f() + (size_t)l * N * QD;
        float *xm = xmid.f() + l * ND, *xn2l = xn2.f() + l * ND, *gl = gate.f() + (size_t)l * N * F;
        float *ul = upb.f() + (size_t)l * N * F, *hl = hid.f() + (size_t)l * N * F;
        CK(cudaMemset(dhid.p, 0, (size_t)N * F * 4));
        RUN(GpuLin::bwd(hl, P + OFF(MX_P_WDOWN) + (size_t)l * D * F, dx.f(), dhid.f(),
                        G + OFF(MX_P_WDOWN) + (size_t)l * D * F, N, F, D));
        RUN(mxg_swiglu_backward(dgate.f(), dup.f(), dhid.f(), gl, ul, (size_t)N * F, NULL));
        CK(cudaMemset(dxn.p, 0, ND * 4));
        RUN(GpuLin::bwd(xn2l, P + OFF(MX_P_WGATE) + (size_t)l * F * D, dgate.f(), dxn.f(),
                        G + OFF(MX_P_WGATE) + (size_t)l * F * D, N, D, F));
        RUN(GpuLin::bwd(xn2l, P + OFF(MX_P_WUP) + (size_t)l * F * D, dup.f(), dxn.f(),
                        G + OFF(MX_P_WUP) + (size_t)l * F * D, N, D, F));
        RUN(mxg_rmsnorm_backward(dx.f(), G + OFF(MX_P_FFN_NORM) + (size_t)l * D, dxn.f(), xm,
                                 P + OFF(MX_P_FFN_NORM) + (size_t)l * D, r2.f() + (size_t)l * N, N, D, wsr.f(), NULL));
        CK(cudaMemset(dao.p, 0, (size_t)N * QD * 4));
        RUN(GpuLin::bwd(aol, P + OFF(MX_P_WO) + (size_t)l * D * QD, dx.f(), dao.f(),
                        G + OFF(MX_P_WO) + (size_t)l * D * QD, N, QD, D));
        RUN(mxg_attention_backward(dq.f(), dk.f(), dv.f(), delta.f(), dao.f(), aol, lse.f() + (size_t)l * B * H * T,
                                   ql, kl, vl, B, T, H, KV, hd, NULL));
        RUN(mxg_rope_backward(dq.f(), rc_cos, rc_sin, B, T, H, hd, NULL));
        RUN(mxg_rope_backward(dk.f(), rc_cos, rc_sin, B, T, KV, hd, NULL));
        CK(cudaMemset(dxn.p, 0, ND * 4));
        RUN(GpuLin::bwd(xn1l, P + OFF(MX_P_WQ) + (size_t)l * QD * D, dq.f(), dxn.f(),
                        G + OFF(MX_P_WQ) + (size_t)l * QD * D, N, D, QD));
        RUN(GpuLin::bwd(xn1l, P + OFF(MX_P_WK) + (size_t)l * KD * D, dk.f(), dxn.f(),
                        G + OFF(MX_P_WK) + (size_t)l * KD * D, N, D, KD));
        RUN(GpuLin::bwd(xn1l, P + OFF(MX_P_WV) + (size_t)l * KD * D, dv.f(), dxn.f(),
                        G + OFF(MX_P_WV) + (size_t)l * KD * D, N, D, KD));
        RUN(mxg_rmsnorm_backward(dx.f(), G + OFF(MX_P_ATTN_NORM) + (size_t)l * D, dxn.f(), xl,
                                 P + OFF(MX_P_ATTN_NORM) + (size_t)l * D, r1.f() + (size_t)l * N, N, D, wsr.f(), NULL));
    }
    RUN(mxg_embedding_backward(G + OFF(MX_P_EMBED), dx.f(), tok, N, D, V, wse.p, wse.bytes, NULL));
    *loss = down<float>(dmean, 1)[0];
#undef RUN
#undef OFF
    return rc;
}

/* n token ids from a small alphabet (repeated tokens) and n targets over the vocabulary. */
static void draw_tokens(int n, int vocab, std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
    tok.resize(n);
    tgt.resize(n);
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(rnd64() % 64);
        tgt[i] = (int32_t)(rnd64() % vocab);
    }
}

/* The CPU model's forward and backward of B x T tokens (the loss weighted 1/N) into *loss; 0, or 1 with the test
 * failed, m freed and the test ended. */
static int cpu_pass(mx_llama* m, const int32_t* tok, const int32_t* tgt, int B, int T, float* loss) {
    if (!mx_llama_forward(m, tok, tgt, B, T, loss) && !mx_llama_backward(m, tok, tgt, 1.0f / (B * T))) return 0;
    fail("CPU model: %s", mx_last_error());
    mx_llama_free(m);
    end();
    return 1;
}

void test_model(int B, int T) {
    char name[96];
    snprintf(name, sizeof name, "model tiny fp32 B%d T%d", B, T);
    if (!wanted(name)) return;
    begin(name);
    mx_model_config cfg;
    mx_recipe rec;
    mx_llama m;
    if (mx_model_preset("tiny", &cfg) || mx_recipe_parse("fp32", &rec) || mx_llama_create(&m, &cfg, &rec, 0, 0, 7)) {
        fail("model: %s", mx_last_error());
        end();
        return;
    }
    mx_llama_init_weights(&m, 7);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += 0.01f * rndnf(); /* norms away from 1 */
    const int N = B * T, hd = cfg.dim / cfg.n_heads;
    std::vector<int32_t> tok, tgt;
    draw_tokens(N, cfg.vocab, tok, tgt);
    float loss_c = 0;
    mx_llama_zero_grad(&m);
    if (cpu_pass(&m, tok.data(), tgt.data(), B, T, &loss_c)) return;
    vecf losses_c(m.losses, m.losses + N);
    vecf cs((size_t)T * hd / 2), sn((size_t)T * hd / 2);
    mx_rope_tables(cs.data(), sn.data(), T, hd, cfg.rope_theta);
    Dev dP(m.n_params * 4), dG(m.n_params * 4), dtok(N * 4), dtgt(N * 4), dcos(cs.size() * 4), dsin(sn.size() * 4),
        dloss(N * 4);
    up(dP, vecf(m.params, m.params + m.n_params));
    up(dtok, tok); up(dtgt, tgt); up(dcos, cs); up(dsin, sn);
    vecf grads[2], losses[2];
    float loss_g[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
        CK(cudaMemset(dG.p, 0, m.n_params * 4));
        MXC(gpu_model_step(&m, dP.f(), dG.f(), dtok.i(), dtgt.i(), B, T, dcos.f(), dsin.f(), dloss.f(), &loss_g[r]));
        grads[r] = downf(dG, m.n_params);
        losses[r] = downf(dloss, N);
    }
    /* FP32 everywhere on both sides; they differ in summation orders (cuBLASLt, attention,
     * reductions) and in expf: normwise 1e-4 per tensor, loss 1e-5 relative */
    printf("    loss                   GPU %.9g CPU %.9g\n", (double)loss_g[0], (double)loss_c);
    if (!(fabs(loss_g[0] - loss_c) <= 1e-5 * fabs(loss_c))) fail("loss differs");
    compare("token losses", losses[0], losses_c, NORM, 1e-5);
    for (int t = 0; t < MX_P_COUNT; t++) {
        const mx_param_info* in = &m.info[t];
        vecf gg(grads[0].begin() + in->offset, grads[0].begin() + in->offset + in->numel);
        vecf gc(m.grads + in->offset, m.grads + in->offset + in->numel);
        char what[64];
        snprintf(what, sizeof what, "grad %s", in->name);
        compare(what, gg, gc, NORM, 1e-4);
    }
    same_bytes("all gradients", grads[0].data(), grads[1].data(), m.n_params * 4);
    same_bytes("loss", &loss_g[0], &loss_g[1], 4);
    mx_llama_free(&m);
    end();
}


/* ---- the GPU model (src/cuda/model.cu) against the CPU model on the same weights and batch ----
 * Loss, per-token losses, logits and every parameter gradient within the
 * stated tolerances (normwise, relative to the largest reference element);
 * two GPU runs and the recompute variant give identical bytes. */
void test_gpu_model(const char* recipe, int exact, double tol_loss, double tol_grad, int head16, int attn) {
    char name[128];
    snprintf(name, sizeof name, "gpu model tiny %s %s%s%s", recipe, exact ? "exact" : "fast", head16 ? " bf16-head" : "",
             attn == 1 ? " attn-gemm" : attn == 2 ? " attn-tf32" : attn == 3 ? " attn-flash hd64" : "");
    if (!wanted(name)) return;
    begin(name);
    mx_model_config cfg;
    mx_recipe rec;
    mx_llama m;
    int bad = mx_model_preset("tiny", &cfg);
    if (attn == MXG_ATTN_FLASH) { /* the flash kernels run head dims 64 and 128: tiny with 2 heads of 64 */
        cfg.n_heads = 2;
        cfg.n_kv_heads = 1;
    }
    if (bad || mx_recipe_parse(recipe, &rec) || mx_llama_create(&m, &cfg, &rec, 0, 0, 7)) {
        fail("model: %s", mx_last_error());
        end();
        return;
    }
    mx_llama_init_weights(&m, 7);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += 0.01f * rndnf();
    m.head_bf16 = head16;
    const int B = 2, T = 64, N = B * T;
    const uint64_t step = 5;
    std::vector<int32_t> tok, tgt;
    draw_tokens(N, cfg.vocab, tok, tgt);
    float loss_c = 0;
    m.step = step;
    mx_llama_zero_grad(&m);
    if (cpu_pass(&m, tok.data(), tgt.data(), B, T, &loss_c)) return;
    vecf losses_c(m.losses, m.losses + N);
    /* act16 (GPU runs 3, 4) against the CPU model with the same BF16 rounding points (mx_llama.act16: the
     * linears' inputs, gate, up, dhid, dgate, dup; fp8 and MXFP4 then quantize the BF16 values); for recipes it
     * cannot serve (mx_act16_possible), the same bytes as run 0 */
    const int a16 = mx_act16_possible(&rec);
    vecf grads_c16, losses_c16;
    float loss_c16 = loss_c;
    if (a16) {
        vecf keep(m.grads, m.grads + m.n_params);
        m.act16 = MX_ACT16_FFN | (attn == MXG_ATTN_FLASH ? MX_ACT16_ATTN : 0); /* the GPU's att16 with flash */
        mx_llama_zero_grad(&m);
        if (mx_llama_forward(&m, tok.data(), tgt.data(), B, T, &loss_c16) ||
            mx_llama_backward(&m, tok.data(), tgt.data(), 1.0f / N))
            fail("CPU model (act16): %s", mx_last_error());
        grads_c16.assign(m.grads, m.grads + m.n_params);
        losses_c16.assign(m.losses, m.losses + N);
        m.act16 = 0;
        memcpy(m.grads, keep.data(), m.n_params * 4);
        double d2 = 0, c2 = 0;
        for (size_t i = 0; i < m.n_params; i++) {
            d2 += ((double)grads_c16[i] - keep[i]) * ((double)grads_c16[i] - keep[i]);
            c2 += (double)keep[i] * keep[i];
        }
        /* the rounding points must change something (else the comparison below tests nothing) */
        printf("    CPU act16 vs FP32      loss %.9g vs %.9g, gradients differ by %.3g normwise\n", (double)loss_c16,
               (double)loss_c, sqrt(d2 / c2));
        if (!(d2 > 0)) fail("CPU act16 changed no gradient");
    }
    vecf grads[6], losses[6];
    float loss_g[6] = {0, 0, 0, 0, 0, 0};
    /* run 0 and 1: the same model twice; 2: recompute; 3: BF16 storage (act16: a no-op but where
     * mx_act16_possible); 4: both; 5: run 0 with MXLM_GPU_FUSE_SWIGLU=0 (run 0's SwiGLU backward makes dgate's and dup's
     * MXFP4 operands where the recipe quantizes them fast, the default; run 5's linears quantize the FP32
     * tensors: the same bytes) */
    for (int r = 0; r < 6; r++) {
        mxg_llama* g = NULL;
        const long long fused0 = mxg_llama_fused_swiglu_calls();
        if (r == 5) setenv("MXLM_GPU_FUSE_SWIGLU", "0", 1); /* read when the model is made */
        const int rc = mxg_llama_create(&g, &cfg, &rec, 0, 0, 7, B, T, exact, r == 2 || r == 4, r == 3 || r == 4, attn);
        unsetenv("MXLM_GPU_FUSE_SWIGLU");
        MXC(rc);
        MXC(mxg_llama_upload(g, m.params, NULL, NULL));
        MXC(mxg_llama_set_head_bf16(g, head16)); /* the CPU model's head precision */
        for (int rep = 0; rep < (r == 1 ? 2 : 1); rep++) {
            MXC(mxg_llama_zero_grad(g));
            MXC(mxg_llama_forward_backward(g, tok.data(), tgt.data(), step, 1.0f / N, &loss_g[r]));
        }
        grads[r].resize(m.n_params);
        MXC(mxg_llama_download_grads(g, grads[r].data()));
        losses[r].resize(N);
        float lo = 0;
        MXC(mxg_llama_loss(g, tok.data(), tgt.data(), step, &lo, losses[r].data()));
        if (memcmp(&lo, &loss_g[r], 4)) fail("loss-only forward %.9g differs from the training forward %.9g", lo, loss_g[r]);
        if (r == 0) {
            vecf lg((size_t)N * cfg.vocab);
            MXC(mxg_llama_logits(g, tok.data(), step, lg.data()));
            MXC(mx_llama_forward(&m, tok.data(), NULL, B, T, NULL));
            vecf lc(m.logits, m.logits + (size_t)N * cfg.vocab);
            if (!head16) compare("logits", lg, lc, FROB, tol_grad); /* mxg_llama_logits: FP32 head only */
        }
        if (r == 0 || r == 5) { /* run 0: the fused path ran wherever the linears would have quantized dY fast
                                 * themselves; run 5 (turned off): nowhere */
            mxg_linear_ctx lc;
            memset(&lc, 0, sizeof lc);
            lc.recipe = &rec;
            lc.exact = exact;
            mxg_qspec sp[2];
            const long long want = r == 0 && mxg_linear_dy_specs(&lc, N, cfg.ffn, sp) ? cfg.n_layers : 0;
            const long long got = mxg_llama_fused_swiglu_calls() - fused0;
            printf("    fused SwiGLU backwards %lld (run %d; want %lld: one per layer where the recipe takes them, %s)\n",
                   got, r, want, r == 0 ? "the default" : "MXLM_GPU_FUSE_SWIGLU=0");
            if (got != want) fail("fused SwiGLU backwards (run %d): %lld, want %lld", r, got, want);
        }
        mxg_llama_free(g);
    }
    printf("    loss                   GPU %.9g CPU %.9g (rel %.3g, tol %.1g)\n", (double)loss_g[0], (double)loss_c,
           fabs(loss_g[0] - loss_c) / fabs(loss_c), tol_loss);
    if (!(fabs(loss_g[0] - loss_c) <= tol_loss * fabs(loss_c))) fail("loss differs");
    compare("token losses", losses[0], losses_c, FROB, tol_loss * 10);
    double worst = 0;
    for (int t = 0; t < MX_P_COUNT; t++) {
        const mx_param_info* in = &m.info[t];
        vecf gg(grads[0].begin() + in->offset, grads[0].begin() + in->offset + in->numel);
        vecf gcv(m.grads + in->offset, m.grads + in->offset + in->numel);
        char what[64];
        snprintf(what, sizeof what, "grad %s", in->name);
        compare(what, gg, gcv, FROB, tol_grad);
        double d2 = 0, c2 = 0;
        for (size_t i = 0; i < gg.size(); i++) { d2 += ((double)gg[i] - gcv[i]) * ((double)gg[i] - gcv[i]); c2 += (double)gcv[i] * gcv[i]; }
        if (c2 > 0) worst = fmax(worst, sqrt(d2 / c2));
    }
    printf("    worst gradient error   %.3g (||gpu - cpu|| / ||cpu|| of a tensor; tol %.1g)\n", worst, tol_grad);
    same_bytes("gradients (2 runs)", grads[0].data(), grads[1].data(), m.n_params * 4);
    same_bytes("gradients (recompute)", grads[0].data(), grads[2].data(), m.n_params * 4);
    same_bytes("loss (2 runs)", &loss_g[0], &loss_g[1], 4);
    same_bytes("token losses", losses[0].data(), losses[2].data(), (size_t)N * 4);
    if (a16) { /* the act16 GPU model against the act16 CPU model, at the same tolerances */
        printf("    loss (act16)           GPU %.9g CPU %.9g (rel %.3g)\n", (double)loss_g[3], (double)loss_c16,
               fabs(loss_g[3] - loss_c16) / fabs(loss_c16));
        if (!(fabs(loss_g[3] - loss_c16) <= tol_loss * fabs(loss_c16))) fail("loss (act16) differs");
        compare("token losses (act16)", losses[3], losses_c16, FROB, tol_loss * 10);
        for (int t = 0; t < MX_P_COUNT; t++) {
            const mx_param_info* in = &m.info[t];
            vecf gg(grads[3].begin() + in->offset, grads[3].begin() + in->offset + in->numel);
            vecf gcv(grads_c16.begin() + in->offset, grads_c16.begin() + in->offset + in->numel);
            char what[64];
            snprintf(what, sizeof what, "grad %s (act16)", in->name);
            compare(what, gg, gcv, FROB, tol_grad);
        }
    } else {
        same_bytes("gradients (act16)", grads[0].data(), grads[3].data(), m.n_params * 4);
        same_bytes("token losses (act16)", losses[0].data(), losses[3].data(), (size_t)N * 4);
    }
    same_bytes("gradients (act16 + recompute)", grads[3].data(), grads[4].data(), m.n_params * 4);
    same_bytes("gradients (fused SwiGLU q vs not)", grads[0].data(), grads[5].data(), m.n_params * 4);
    same_bytes("loss (fused SwiGLU q vs not)", &loss_g[0], &loss_g[5], 4);
    mx_llama_free(&m);
    end();
}

/* The GPU model (mxg_llama_set_telemetry / mxg_llama_telemetry_read) against the CPU model's
 * lstate[].op after the same two micro-batches. The activations and gradients differ from the CPU's
 * in the summation order (test_gpu_model's tolerances), so the quantized operands differ in their
 * last bits: sig2 within tol_sig (relative), the SQNR within tol_db dB, clipped blocks within 2% of
 * the blocks + 2, blocks equal. A lost micro-batch, operand or linear gives sig2 errors near 1 (0.5)
 * and a missing rotation an SQNR dB away. */
/* Test `name` begun (1 when not wanted) with the tiny preset's CPU model of the recipe, initialised with seed 7
 * and perturbed by `noise` x N(0, 1) (so that the weights are not the symmetric initial ones); 1 with a failure
 * recorded and the test ended. */
/* hd64: 2 heads of 64 (one KV head), the head dim the flash kernels run (MXG_ATTN_FLASH). */
static int tiny_model(const char* name, const char* recipe, float noise, mx_model_config* cfg, mx_recipe* rec,
                      mx_llama* m, int hd64 = 0) {
    if (!wanted(name)) return 1;
    begin(name);
    const int bad = mx_model_preset("tiny", cfg);
    if (hd64) {
        cfg->n_heads = 2;
        cfg->n_kv_heads = 1;
    }
    if (bad || mx_recipe_parse(recipe, rec) || mx_llama_create(m, cfg, rec, 0, 0, 7)) {
        fail("model: %s", mx_last_error());
        end();
        return 1;
    }
    mx_llama_init_weights(m, 7);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] += noise * rndnf();
    return 0;
}

/* tol_sig / tol_db: Fprop's operands and products; tol_sig_bwd / tol_db_bwd: Dgrad's and Wgrad's, which a rounding
 * flip in a quantized model can move by percents (bench/sr_sensitivity.c: on the CPU, weights changed by 1e-7 x
 * uniform, one draw in eight to three in eight moves the Dgrad dY operands of mxfp4-fdw-h16 / mxfp4-fdw-sr by up
 * to 4.3% in sig2 and 0.26 dB, their Fprop X by 0.2% and 0.013 dB; the H200 saw 1.9% and 0.44 dB once) */
void test_model_telemetry(const char* recipe, int exact, double tol_sig, double tol_db, double tol_sig_bwd,
                          double tol_db_bwd) {
    char name[128];
    snprintf(name, sizeof name, "gpu model telemetry tiny %s %s", recipe, exact ? "exact" : "fast");
    mx_model_config cfg;
    mx_recipe rec;
    mx_llama m;
    if (tiny_model(name, recipe, 0.01f, &cfg, &rec, &m)) return;
    m.head_bf16 = 0;
    const int B = 2, T = 64, N = B * T;
    const uint64_t step = 5;
    std::vector<int32_t> tok, tgt;
    draw_tokens(2 * N, cfg.vocab, tok, tgt);
    const int nl = cfg.n_layers * MX_LIN_PER_BLOCK;
    mx_telemetry_reset(&m);
    m.telemetry = 1;
    mx_llama_zero_grad(&m);
    for (int a = 0; a < 2; a++) {
        float lo = 0;
        m.step = step + a;
        if (cpu_pass(&m, tok.data() + a * N, tgt.data() + a * N, B, T, &lo)) return;
    }
    m.telemetry = 0;
    std::vector<mx_linear_state> gl(nl);
    memset(gl.data(), 0, nl * sizeof(mx_linear_state));
    mxg_llama* g = NULL;
    MXC(mxg_llama_create(&g, &cfg, &rec, 0, 0, 7, B, T, exact, 0, 0, 0));
    if (g) {
        MXC(mxg_llama_upload(g, m.params, NULL, NULL));
        MXC(mxg_llama_set_head_bf16(g, 0));
        MXC(mxg_llama_zero_grad(g));
        float lo = 0;
        MXC(mxg_llama_forward_backward(g, tok.data(), tgt.data(), step, 1.0f / N, &lo)); /* telemetry off: not counted */
        MXC(mxg_llama_set_telemetry(g, 1));
        for (int a = 0; a < 2; a++) MXC(mxg_llama_forward_backward(g, tok.data() + a * N, tgt.data() + a * N, step + a, 1.0f / N, &lo));
        MXC(mxg_llama_set_telemetry(g, 0));
        MXC(mxg_llama_loss(g, tok.data(), tgt.data(), step, &lo, NULL)); /* off again: not counted */
        MXC(mxg_llama_telemetry_read(g, gl.data()));
        mxg_llama_free(g);
    }
    double wsig = 0, werr = 0, wdb = 0;
    int shown = 0;
    for (int i = 0; i < nl; i++)
        for (int gg = 0; gg < 3; gg++)
            for (int o = 0; o < 2; o++) {
                const mx_operand_stats* c = &m.lstate[i].op[gg][o];
                const mx_operand_stats* s = &gl[i].op[gg][o];
                mxg_opstats gs = {s->sig2, s->err2, (unsigned long long)s->blocks, (unsigned long long)s->clipped,
                                  (unsigned long long)s->nonfinite};
                char what[64];
                snprintf(what, sizeof what, "L%d %s %s %c", i / MX_LIN_PER_BLOCK, mx_linear_name(i % MX_LIN_PER_BLOCK),
                         gg == 0 ? "fprop" : gg == 1 ? "dgrad" : "wgrad", o ? 'b' : 'a');
                long long tclip = (long long)(0.02 * (double)c->blocks) + 2;
                check_opstats(what, &gs, c, gg ? tol_sig_bwd : tol_sig, tclip, gg ? tol_db_bwd : tol_db, &wsig, &werr, shown < 6);
                shown++;
                double dg = sqnr_of(s->sig2, s->err2), dc = sqnr_of(c->sig2, c->err2);
                if (isfinite(dg) && isfinite(dc)) wdb = fmax(wdb, fabs(dg - dc));
                if (rec.g[gg].fmt != MX_FMT_FP32 && !(c->sig2 > 0)) fail("%s: the CPU recorded nothing", what);
            }
    printf("    %d operands (first 6 shown): worst sig2 rel %.3g (tol %.1g), err2 rel %.3g, SQNR diff %.3g dB (tol %.2g)\n",
           shown, wsig, tol_sig, werr, wdb, tol_db);
    /* where the two sides part, in the backward's order (last linear first): the first Dgrad dY whose sig2
     * differs by more than 1e-6 (a diagnosis for a failure above; FP32 summation order alone stays ~1e-8) */
    for (int i = nl - 1; i >= 0; i--) {
        const double r = rel_d(gl[i].op[1][0].sig2, m.lstate[i].op[1][0].sig2);
        if (r > 1e-6) {
            printf("    first dY (backward order) differing by > 1e-6: L%d %s dgrad a, sig2 rel %.3g\n", i / MX_LIN_PER_BLOCK,
                   mx_linear_name(i % MX_LIN_PER_BLOCK), r);
            break;
        }
    }
    /* the products (mx_linear_state.out, mxg_linear_ctx.gout): the same operands' products against their FP32
     * references, so the SQNR within the operands' tolerance */
    double psig = 0, perr = 0, pdb = 0;
    for (int i = 0; i < nl; i++)
        for (int gg = 0; gg < 3; gg++) {
            const mx_operand_stats *c = &m.lstate[i].out[gg], *s = &gl[i].out[gg];
            mxg_opstats gs = {s->sig2, s->err2, 0, 0, (unsigned long long)s->nonfinite};
            char what[64];
            snprintf(what, sizeof what, "L%d %s %s product", i / MX_LIN_PER_BLOCK, mx_linear_name(i % MX_LIN_PER_BLOCK),
                     gg == 0 ? "fprop" : gg == 1 ? "dgrad" : "wgrad");
            check_opstats(what, &gs, c, gg ? tol_sig_bwd : tol_sig, 0, gg ? tol_db_bwd : tol_db, &psig, &perr, i == 0);
            double dg = sqnr_of(s->sig2, s->err2), dc = sqnr_of(c->sig2, c->err2);
            if (isfinite(dg) && isfinite(dc)) pdb = fmax(pdb, fabs(dg - dc));
            if (rec.g[gg].fmt != MX_FMT_FP32 && !(c->sig2 > 0 && s->sig2 > 0)) fail("%s: nothing recorded", what);
        }
    printf("    products: worst sig2 rel %.3g, SQNR diff %.3g dB (tol %.2g)\n", psig, pdb, tol_db);
    mx_llama_free(&m);
    end();
}

/* mxlm sample --device cuda (src/cuda/nn/decode.cu): the GPU decoder's logits against the CPU's
 * (mx_llama_decode) for a prompt of 9 tokens and 4 more one at a time, and for one call over all 13 positions;
 * the GPU's cache against its one call (its chunks of 9 and 1 rows run padded to 16 rows: decode.cu's lin)
 * within the CPU's own cache-vs-one-call difference + tol (a format with a per-tensor scale, fp8 or NVFP4,
 * quantizes a chunk of 9 rows and one of 13 differently on both sides: up to 0.23 of max |logit| measured for
 * nvfp4 on the H200, 2026-12-02; row-local formats: ~1e-7); greedy generation twice, the same ids. tol: max
 * |difference| over max |logit|. */
void test_gpu_decode(const char* recipe, int head16, double tol) {
    char name[128];
    snprintf(name, sizeof name, "gpu decode tiny %s%s", recipe, head16 ? " head16" : "");
    mx_model_config cfg;
    mx_recipe rec;
    mx_llama m;
    if (tiny_model(name, recipe, 0.02f, &cfg, &rec, &m)) return;
    m.head_bf16 = head16;
    const int NP = 9, NT = 13, V = cfg.vocab;
    std::vector<int32_t> tok(NT);
    for (int i = 0; i < NT; i++) tok[i] = (int32_t)(rnd64() % 200);
    vecf lc((size_t)NT * V), lg((size_t)NT * V), la((size_t)NT * V), lca((size_t)NT * V);
    mx_kv_cache kc, kca;
    mxg_kv_cache *gk = NULL, *ga = NULL;
    MXC(mx_kv_create(&kc, &m, NT));
    MXC(mx_kv_create(&kca, &m, NT));
    MXC(mxg_kv_create(&gk, &m, NT, 0));
    MXC(mxg_kv_create(&ga, &m, NT, 0));
    if (gk && ga) {
        MXC(mx_llama_decode(&kc, tok.data(), NP, lc.data(), 1));
        MXC(mxg_llama_decode(gk, tok.data(), NP, lg.data(), 1));
        for (int i = NP; i < NT; i++) {
            MXC(mx_llama_decode(&kc, &tok[i], 1, lc.data() + (size_t)i * V, 0));
            MXC(mxg_llama_decode(gk, &tok[i], 1, lg.data() + (size_t)i * V, 0));
        }
        MXC(mx_llama_decode(&kca, tok.data(), NT, lca.data(), 1));
        MXC(mxg_llama_decode(ga, tok.data(), NT, la.data(), 1));
        double scale = 0, dcpu = 0, dall = 0, dcache = 0, dcache_cpu = 0;
        for (size_t i = 0; i < lc.size(); i++) {
            scale = fmax(scale, fabs(lc[i]));
            dcpu = fmax(dcpu, fabs(lg[i] - lc[i]));
            dall = fmax(dall, fabs(la[i] - lca[i]));
            dcache = fmax(dcache, fabs(lg[i] - la[i]));
            dcache_cpu = fmax(dcache_cpu, fabs(lc[i] - lca[i]));
        }
        printf("    max |logit| %.4g; GPU vs CPU: cached %.3g, one call %.3g (relative %.3g, %.3g; tol %.2g); cache vs one call: "
               "GPU %.3g, CPU %.3g (relative %.3g, %.3g)\n",
               scale, dcpu, dall, dcpu / scale, dall / scale, tol, dcache, dcache_cpu, dcache / scale, dcache_cpu / scale);
        if (!(dcpu <= tol * scale)) fail("GPU decode vs CPU (cached): %.3g relative (tol %.2g)", dcpu / scale, tol);
        if (!(dall <= tol * scale)) fail("GPU decode vs CPU (one call): %.3g relative (tol %.2g)", dall / scale, tol);
        if (!(dcache <= dcache_cpu + tol * scale))
            fail("GPU cache vs one call: %.3g relative, the CPU's %.3g (tol: the CPU's + %.2g)", dcache / scale,
                 dcache_cpu / scale, tol);
        mx_sample_opts o = {0.0, 0, 1.0, 3};
        int32_t out1[8], out2[8];
        int n1 = 0, n2 = 0;
        MXC(mxg_generate(&m, tok.data(), NP, 8, &o, -1, out1, &n1, 0));
        MXC(mxg_generate(&m, tok.data(), NP, 8, &o, -1, out2, &n2, 0));
        if (n1 != 8 || n2 != 8 || memcmp(out1, out2, sizeof out1)) fail("greedy generation twice: different ids");
    }
    mxg_kv_free(gk);
    mxg_kv_free(ga);
    mx_kv_free(&kc);
    mx_kv_free(&kca);
    mx_llama_free(&m);
    end();
}

/* Gradients in activation memory (mxg_llama_create_dist's share_grads) against the model without: two steps
 * (forward_backward, the gradient norm, AdamW, an evaluation forward, then the second step's backward) give the
 * same losses, gradients and weights bit for bit, the norm within the chunking's last bits; the plan puts every
 * linear's weight gradient but the last block's down and the embedding's in the activations (B x T large
 * enough for that); and the model refuses what sharing cannot give: gradients read after a forward, and a
 * second backward without zero_grad. */
/* Two configurations of the tiny model (r 0 and 1: make(r) makes the model, after(r, g) checks it after the
 * steps), each run for two steps (zero_grad, forward_backward, the gradients; after the first their norm, AdamW
 * and an evaluation) on the same tokens, then their losses, gradients, evaluation losses and weights compared
 * byte for byte; the norms' relative difference into *ss_rel. */
template <class Make, class After>
static void two_runs(const mx_model_config& cfg, const mx_llama& m, Make make, After after, double* ss_rel) {
    const int B = 8, T = 128, N = B * T;
    std::vector<int32_t> tok(2 * N), tgt(2 * N);
    for (int n = 0; n < 2 * N; n++) {
        tok[n] = (int32_t)(rnd64() % cfg.vocab);
        tgt[n] = (int32_t)(rnd64() % cfg.vocab);
    }
    const mx_adamw_config ac = {0.9, 0.95, 1e-5, 0.1};
    vecf grads[2][2], params[2];
    float loss[2][2] = {{0, 0}, {0, 0}}, ev[2] = {0, 0};
    double ss[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
        mxg_llama* g = make(r);
        if (!g) return;
        MXC(mxg_llama_upload(g, m.params, NULL, NULL));
        MXC(mxg_llama_set_head_bf16(g, 1));
        for (int s = 0; s < 2; s++) {
            MXC(mxg_llama_zero_grad(g));
            MXC(mxg_llama_forward_backward(g, tok.data() + s * N, tgt.data() + s * N, 5 + s, 1.0f / N, &loss[r][s]));
            grads[r][s].resize(m.n_params);
            MXC(mxg_llama_download_grads(g, grads[r][s].data()));
            if (s == 0) {
                MXC(mxg_llama_grad_sumsq(g, &ss[r]));
                MXC(mxg_llama_adamw(g, &ac, 1e-3, 0.5f, 1));
                MXC(mxg_llama_loss(g, tok.data(), tgt.data(), 6, &ev[r], NULL)); /* an evaluation between the steps */
            }
        }
        params[r].resize(m.n_params);
        MXC(mxg_llama_download(g, params[r].data(), NULL, NULL));
        after(r, g, tok.data(), tgt.data());
        mxg_llama_free(g);
    }
    for (int s = 0; s < 2; s++) {
        char what[64];
        snprintf(what, sizeof what, "loss, step %d", s + 1);
        same_bytes(what, &loss[0][s], &loss[1][s], 4);
        snprintf(what, sizeof what, "gradients, step %d", s + 1);
        same_bytes(what, grads[0][s].data(), grads[1][s].data(), m.n_params * 4);
    }
    same_bytes("evaluation loss", &ev[0], &ev[1], 4);
    same_bytes("weights after AdamW", params[0].data(), params[1].data(), m.n_params * 4);
    *ss_rel = ss[0] > 0 ? fabs(ss[1] - ss[0]) / ss[0] : 1.0;
}

void test_model_shared_grads(const char* recipe, int act16) {
    char name[128];
    snprintf(name, sizeof name, "gpu model shared gradients tiny %s%s", recipe, act16 ? " act16" : "");
    mx_model_config cfg;
    mx_recipe rec;
    mx_llama m;
    if (tiny_model(name, recipe, 0.01f, &cfg, &rec, &m)) return;
    const int B = 8, T = 128, N = B * T;
    auto make = [&](int r) {
        mxg_llama* g = NULL;
        MXC(mxg_llama_create_dist(&g, &cfg, &rec, 0, 0, 7, B, T, 0, 0, act16, 0, r, NULL));
        return g;
    };
    auto after = [&](int r, mxg_llama* g, const int32_t* tok, const int32_t* tgt) {
        if (r != 1) return;
        /* the plan: all of the linears' and the embedding's gradients in activations, but the last down's */
        size_t want = m.info[MX_P_EMBED].numel * 4;
        for (int k = MX_P_WQ; k <= MX_P_WDOWN; k++)
            if (k != MX_P_FFN_NORM) want += m.info[k].numel * 4;
        want -= m.info[MX_P_WDOWN].numel / cfg.n_layers * 4;
        const long long got = (long long)mxg_llama_shared_grad_bytes(g);
        printf("    in activation memory   %lld bytes of gradients (want %zu)\n", got, want);
        if (got != (long long)want) fail("shared gradient bytes %lld, want %zu", got, want);
        /* what it refuses: the gradients after a forward, a second backward without zero_grad */
        float lo = 0;
        MXC(mxg_llama_loss(g, tok, tgt, 7, &lo, NULL));
        vecf tmp(m.n_params);
        double d = 0;
        if (mxg_llama_download_grads(g, tmp.data()) == MX_OK) fail("gradients read after a forward");
        if (mxg_llama_grad_sumsq(g, &d) == MX_OK) fail("gradient norm after a forward");
        MXC(mxg_llama_zero_grad(g));
        MXC(mxg_llama_forward_backward(g, tok, tgt, 7, 1.0f / N, &lo));
        if (mxg_llama_forward_backward(g, tok, tgt, 8, 1.0f / N, &lo) == MX_OK) fail("a second backward without zero_grad");
        else printf("    refused                %s\n", mx_last_error());
    };
    double rel = 1;
    two_runs(cfg, m, make, after, &rel);
    printf("    gradient norm^2        rel difference %.3g (tol 1e-12)\n", rel);
    if (!(rel <= 1e-12)) fail("gradient norm differs by %.3g", rel);
    mx_llama_free(&m);
    end();
}

/* FP8 casts without an amax pass of their own (MXLM_GPU_FP8_AMAX, the default: Wgrad's X^T from the amax its
 * Fprop left in mxg_linear_ctx.x8s; with BF16 storage the down projection's Fprop from h's amax and gate's and
 * up's Dgrad from dgate's and dup's, made by the SwiGLU kernels; down's and o's Dgrad from the residual gradient's,
 * made by the norms' backward; W's after the update from the amax the update made) against MXLM_GPU_FP8_AMAX=0 (each cast computes
 * its amax): two_runs' losses, gradients, evaluation and weights bit for bit, with FP32 and BF16 storage (act16),
 * and with recompute (the block inputs' norms recomputed into one buffer for every layer: each layer's Wgrad
 * must take its own layer's amax), and with the flash attention (flash; with act16 its BF16 tensors: q's and k's
 * Dgrad from dq's and dk's amax, made by the RoPE backward); the casts made so counted, and the Wgrads that take
 * X^T's codes from the forward's casts (with ask_xt: mxg_linear_ctx.x8t, asked for in the second run by MXLM_GPU_FP8_XT=1;
 * off under MXLM_GPU_FP8_AMAX=0 and with recompute). */
void test_model_fp8_amax(int act16, int recompute, int flash, int ask_xt) {
    /* its draws given back to the program's stream when it returns, so that the cases after it keep the inputs they
     * had before it was added (on other draws mxfp4-fdw-h16's act16 gradients part from the CPU's by 0.054-0.124
     * normwise against a tolerance of 0.05: H100, 2026-12-07; the GPU-vs-CPU expf ulps flip FP4 roundings) */
    struct Keep {
        uint64_t s = g_rng;
        ~Keep() { g_rng = s; }
    } keep;
    char name[128];
    snprintf(name, sizeof name, "gpu model fp8 casts from a made amax tiny act16 %d recompute %d%s%s", act16, recompute,
             flash ? " attn-flash hd64" : "", ask_xt ? " x8t" : "");
    mx_model_config cfg;
    mx_recipe rec;
    mx_llama m;
    if (tiny_model(name, "fp8", 0.01f, &cfg, &rec, &m, flash)) return;
    long long hits[2] = {0, 0}, h0 = 0, xt[2] = {0, 0}, t0 = 0;
    auto make = [&](int r) {
        if (!r) setenv("MXLM_GPU_FP8_AMAX", "0", 1); /* read when the model is made */
        if (r && ask_xt) setenv("MXLM_GPU_FP8_XT", "1", 1); /* x8t: off by default */
        mxg_llama* g = NULL;
        MXC(mxg_llama_create_dist(&g, &cfg, &rec, 0, 0, 7, 8, 128, 0, recompute, act16, flash ? MXG_ATTN_FLASH : 0, 1,
                                  NULL));
        unsetenv("MXLM_GPU_FP8_AMAX");
        unsetenv("MXLM_GPU_FP8_XT");
        h0 = mxg_linear_amax_hits();
        t0 = mxg_linear_x8t_hits();
        return g;
    };
    auto after = [&](int r, mxg_llama*, const int32_t*, const int32_t*) {
        hits[r] = mxg_linear_amax_hits() - h0;
        xt[r] = mxg_linear_x8t_hits() - t0;
    };
    double rel = 1;
    two_runs(cfg, m, make, after, &rel);
    /* a backward (two): a Wgrad X^T a block input (q/k/v share one) where the forward made none (x8t off, as with
     * recompute), down's and o's Dgrad, with act16 gate's and up's Dgrad; a forward (three: two steps and an evaluation):
     * q's and gate's Fprop (the norm outputs' amax), with act16 down's Fprop; the update (one): the 7 weights' casts;
     * with act16 and flash, q's and k's Dgrad. With x8t (and without recompute) every Wgrad takes X^T from the forward
     * (7 a layer a backward) */
    const bool x8t = ask_xt && !recompute;
    const long long want = (long long)cfg.n_layers * (2 * ((x8t ? 0 : 4) + 2 + (act16 ? 2 : 0) + (act16 && flash ? 2 : 0)) +
                                                      3 * (2 + (act16 ? 1 : 0)) + 7);
    const long long want_xt = x8t ? 2LL * 7 * cfg.n_layers : 0;
    printf("    casts from a made amax %lld without, %lld with (want 0, %lld); gradient norm^2 rel %.3g\n", hits[0],
           hits[1], want, rel);
    if (hits[0] != 0 || hits[1] != want) fail("casts from a made amax %lld / %lld, want 0 / %lld", hits[0], hits[1], want);
    printf("    Wgrad X^T from the forward's casts %lld without, %lld with (want 0, %lld)\n", xt[0], xt[1], want_xt);
    if (xt[0] != 0 || xt[1] != want_xt) fail("X^T from the forward %lld / %lld, want 0 / %lld", xt[0], xt[1], want_xt);
    if (rel != 0) fail("gradient norm differs by %.3g", rel);
    mx_llama_free(&m);
    end();
}

/* The weights' Fprop and Dgrad operands made once per update (mxg_linear_weight_operands, the default) against
 * MXLM_GPU_WCACHE=0 (each GEMM makes them): two_runs' losses, gradients, evaluation and weights bit for bit, and
 * the operands taken from the cache counted: every forward's Fprop (7 linears a layer), every backward's Dgrad
 * where the recipe's path takes them (fp8: all 7; MXFP4's fast path: where the reduction dim N is a multiple of
 * 128, in tiny all but k and v's 64); fp8's casts of W after the update from the amax the update made (7 a layer
 * more casts without an amax pass than without the cache: the evaluation's refresh; the first forward's has none). */
/* outer (NULL: the default, fprop): MXLM_GPU_OUTER for both runs. */
void test_model_wcache(const char* recipe, const char* outer) {
    char name[128];
    snprintf(name, sizeof name, "gpu model weight operands once per update tiny %s%s%s", recipe, outer ? " outer=" : "",
             outer ? outer : "");
    mx_model_config cfg;
    mx_recipe rec;
    mx_llama m;
    if (tiny_model(name, recipe, 0.01f, &cfg, &rec, &m)) return;
    long long hits[2] = {0, 0}, h0 = 0, am[2] = {0, 0}, a0 = 0;
    auto make = [&](int r) {
        if (!r) setenv("MXLM_GPU_WCACHE", "0", 1); /* read when the model is made */
        if (outer) setenv("MXLM_GPU_OUTER", outer, 1);
        mxg_llama* g = NULL;
        MXC(mxg_llama_create_dist(&g, &cfg, &rec, 0, 0, 7, 8, 128, 0, 0, 0, 0, 1, NULL));
        unsetenv("MXLM_GPU_WCACHE");
        h0 = mxg_linear_wq_hits();
        a0 = mxg_linear_amax_hits();
        return g;
    };
    auto after = [&](int r, mxg_llama*, const int32_t*, const int32_t*) {
        hits[r] = mxg_linear_wq_hits() - h0;
        am[r] = mxg_linear_amax_hits() - a0;
    };
    double rel = 1;
    two_runs(cfg, m, make, after, &rel);
    const int L = cfg.n_layers, fp8 = !strcmp(recipe, "fp8");
    const long long want = 3LL * 7 * L + 2LL * (fp8 ? 7 : 5) * L; /* 3 forwards' Fprop, 2 backwards' Dgrad */
    printf("    operands from the cache %lld without, %lld with (want 0, %lld); gradient norm^2 rel %.3g\n", hits[0],
           hits[1], want, rel);
    if (hits[0] != 0 || hits[1] != want) fail("weight operands taken %lld / %lld, want 0 / %lld", hits[0], hits[1], want);
    if (rel != 0) fail("gradient norm differs by %.3g", rel);
    const long long am_want = fp8 ? 7LL * L : 0;
    printf("    FP8 casts without an amax pass: %lld more with the cache (want %lld: W's from the update)\n",
           am[1] - am[0], am_want);
    if (am[1] - am[0] != am_want) fail("casts from a made amax: %lld more, want %lld", am[1] - am[0], am_want);
    mx_llama_free(&m);
    end();
}
