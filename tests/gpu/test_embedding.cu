/*
 * test_embedding.cu: nn/embedding.cu against src/nn/embedding.c (layers program).
 */
#include "test.cuh"

/* ---- embedding: forward and backward bit-identical ---- */
void test_embedding(int N, int D, int V) {
    char name[96];
    snprintf(name, sizeof name, "embedding N%d D%d V%d", N, D, V);
    if (!wanted(name)) return;
    begin(name);
    std::vector<int32_t> tok(N);
    for (int n = 0; n < N; n++) tok[n] = rndu() < 0.3 ? 7 % V : (int32_t)(rnd64() % V); /* a hot token */
    vecf table = randn((size_t)V * D, 1.0f), dout = randn((size_t)N * D, 1.0f), dtab0 = randn((size_t)V * D, 0.1f);
    vecf out_c((size_t)N * D), dtab_c = dtab0;
    mx_embedding_forward(out_c.data(), tok.data(), table.data(), N, D);
    mx_embedding_backward(dtab_c.data(), dout.data(), tok.data(), N, D);

    Dev dtok(N * 4), dtable(table.size() * 4), dout_d(dout.size() * 4), dout_f(out_c.size() * 4), ddt(dtab0.size() * 4);
    size_t wsb = mxg_embedding_backward_workspace(N, V);
    Dev ws(wsb);
    up(dtok, tok); up(dtable, table); up(dout_d, dout); up(ddt, dtab0);
    MXC(mxg_embedding_forward(dout_f.f(), dtok.i(), dtable.f(), N, D, NULL));
    compare("forward out", downf(dout_f, out_c.size()), out_c, EXACT, 0);
    vecf runs[2];
    for (int r = 0; r < 2; r++) {
        up(ddt, dtab0);
        MXC(mxg_embedding_backward(ddt.f(), dout_d.f(), dtok.i(), N, D, V, ws.p, wsb, NULL));
        runs[r] = downf(ddt, dtab0.size());
    }
    compare("backward dtable", runs[0], dtab_c, EXACT, 0);
    same_bytes("backward dtable", runs[0].data(), runs[1].data(), runs[0].size() * 4);
    end();
}
