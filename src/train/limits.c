/* limits.c: what a run needs before it allocates anything (memory by part,
 * the checkpoint's size on disk), and what the machine has. */
#include <stdio.h>
#include <string.h>

#include "mxlm/trainer.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void mx_train_estimate(const mx_train_config* c, mx_mem_estimate* e) {
    memset(e, 0, sizeof *e);
    const mx_model_config* m = &c->model;
    const int64_t np = mx_model_n_params(m);
    const int64_t B = c->batch, T = c->seq > 0 ? c->seq : m->seq_len, N = B * T;
    const int64_t D = m->dim, L = m->n_layers, V = m->vocab, F = m->ffn, H = m->n_heads;
    const int64_t hd = H > 0 ? D / H : 0, QD = H * hd, KD = (int64_t)m->n_kv_heads * hd;
    const int64_t W = max64(max64(F, QD), D);
    e->params = np * 4;
    e->grads = np * 4;
    e->adam = 2 * np * 4;
    /* mx_llama_alloc_acts: the forward's saved tensors, the backward's buffers */
    int64_t a = (L + 1) * N * D + L * N * D + L * N + L * N * QD + 2 * L * N * KD + L * B * H * T * T + L * N * QD +
                2 * L * N * D + L * N + 3 * L * N * F + N * D + N + N * V + N + T * hd + 2 * N * D + 2 * N * QD +
                2 * N * KD + 3 * N * F + N * W + D * V + max64(V, D) * N;
    e->acts = a * 4;
    /* transient, at the widest GEMM: the recipe path copies both operands and
     * the backward transposes them (linear.c), the FP32 GEMM packs its B
     * operand (gemm.c); the head's GEMM reads [V, D] */
    int64_t lin = 2 * (N * W + F * D) + 2 * (N * W + F * D);
    e->scratch = 4 * max64(lin, V * D + N * max64(V, D));
    e->ckpt_bytes = 12 * np + L * 7 * 120 + 4 * MX_SPIKE_WINDOW_MAX + 16384; /* + the fingerprint text */
    e->resume = c->resume ? (int64_t)1 << 20 : 0; /* the loader streams: one 1 MiB buffer, no second copy */
    e->total = e->params + e->grads + e->adam + e->acts + e->scratch + e->resume + 2 * N * 4 * 2;
}

int64_t mx_mem_available(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}
