/* engine.c: the engine interface (engine.h): where a run goes (device, LM head
 * precision, GPU memory), and the CPU engine, which runs the reference model
 * (mx_llama) in place. The GPU engine is src/cuda/train/engine.cu; in the CPU
 * build the stubs at the end stand for it and refuse with a message. */
#include "mxlm/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/linear_plan.h"

/* ---- where the run goes ------------------------------------------------------------ */

void mx_engine_ranks(const mx_train_config* c, int* rank, int* world) {
    *rank = 0;
    *world = 1;
    if (c->comm) mx_engine_gpu_ranks(c->comm, rank, world);
}

int mx_train_gpu_attn(const mx_train_config* c) {
    const int hd = c->model.n_heads > 0 ? c->model.dim / c->model.n_heads : 0;
    switch (c->attn) {
    case MX_ATTN_SIMT: return 0;
    case MX_ATTN_GEMM: return 1;
    case MX_ATTN_TF32: return 2;
    case MX_ATTN_FLASH: return 3;
    /* auto: the flash kernels on BF16 tensor cores where they run (head dim 64 or 128: every preset but
     * tiny), else TF32 tensor cores through cuBLASLt (the spec allows reduced-precision attention products) */
    default: return hd == 64 || hd == 128 ? 3 : 2;
    }
}

int mx_engine_pick(const mx_train_config* c, char* what, size_t n) {
    char info[512];
    int have = mx_engine_gpu_info(info, sizeof info);
    if (have < 0) { /* the CPU build */
        if (c->device == MX_DEVICE_CUDA) return mx_fail(MX_EINVAL, "train: --device cuda: %s", info);
        snprintf(what, n, "device: CPU");
        return 0;
    }
    if (c->device == MX_DEVICE_CUDA && !have) return mx_fail(MX_EINVAL, "train: --device cuda: no usable GPU: %s", info);
    if (c->device == MX_DEVICE_CPU || !have) {
        if (c->device == MX_DEVICE_AUTO) snprintf(what, n, "device: CPU (no usable GPU: %s)", info);
        else snprintf(what, n, "device: CPU");
        return 0;
    }
    int rc = mx_engine_gpu_check(c);
    if (rc) return rc;
    static const char* const k_attn_what[] = {"simt (FP32 SIMT kernels)", "gemm (cuBLASLt FP32)",
                                              "tf32 (cuBLASLt TF32 tensor cores)", "flash (BF16 tensor cores)"};
    snprintf(what, n, "device: GPU %s; MXFP4 GEMMs %s; attention %s", info,
             c->gemm_exact ? "exact (dequantized to BF16, BF16 GEMM)" : "fast (E4M3 fold, FP8 GEMM)",
             k_attn_what[mx_train_gpu_attn(c)]);
    return 1;
}

int mx_engine_gpu_check(const mx_train_config* c) {
    const mx_recipe* rec = &c->rec;
    /* what the GPU runs: the format table's GPU columns (linear_plan.h), the same the GPU layer refuses */
    for (int g = 0; g < 3; g++)
        if (mx_gemm_gpu_refusal(rec, (mx_gemm_id)g) == 1)
            return mx_fail(MX_EINVAL, "train: recipe %s: %s has no GPU path (use --device cpu)", c->recipe,
                           mx_format_name(rec->g[g].fmt));
    for (int g = 0; g < 3; g++)
        if (mx_gemm_gpu_refusal(rec, (mx_gemm_id)g) == 3)
            return mx_fail(MX_EINVAL, "train: recipe %s: FP8 delayed scaling is CPU-only for now (use --device cpu, or "
                                      "fp8 with current scaling)", c->recipe);
    for (int g = 0; g < 3; g++)
        if (mx_gemm_gpu_refusal(rec, (mx_gemm_id)g) == 2) {
            char ok[96];
            return mx_fail(MX_EINVAL, "train: recipe %s: the GPU rotates %s operands only (use --device cpu)", c->recipe,
                           mx_format_list(mx_format_gpu_rotates, ok, sizeof ok));
        }
    const int hd = c->model.dim / c->model.n_heads;
    if (c->attn == MX_ATTN_FLASH && hd != 64 && hd != 128)
        return mx_fail(MX_EINVAL, "train: --attn flash runs head dims 64 and 128; preset %s has %d (use --attn auto, "
                                  "tf32, gemm or simt)", c->model.name, hd);
    return MX_OK;
}

int mx_engine_head_bf16(const mx_train_config* c, int on_gpu) {
    return on_gpu && mx_recipe_head_bf16(&c->rec, c->bf16_first, c->bf16_last);
}

int mx_engine_check_memory(const mx_train_config* c, int on_gpu, int world, char* msg, size_t n) {
    if (n) msg[0] = 0;
    return on_gpu ? mx_engine_gpu_check_memory(c, world, msg, n) : MX_OK;
}

/* ---- the CPU engine: the reference model, in place ------------------------------------ */

static int cpu_zero_grad(mx_engine* e) {
    mx_llama_zero_grad(e->model);
    return MX_OK;
}

static int cpu_micro_step(mx_engine* e, const int32_t* inp, const int32_t* tgt, uint64_t step, float grad_scale,
                          int last, float* loss) {
    (void)last;
    e->model->step = step;
    int rc = mx_llama_forward(e->model, inp, tgt, e->c->batch, e->c->seq, loss);
    return rc ? rc : mx_llama_backward(e->model, inp, tgt, grad_scale);
}

static int cpu_telemetry(mx_engine* e, int on) {
    e->model->telemetry = on; /* the stats were reset by mx_telemetry_reset */
    return MX_OK;
}

static int cpu_grad_sumsq(mx_engine* e, double* ss) {
    *ss = mx_sum_squares(e->model->grads, e->model->n_params);
    return MX_OK;
}

static int cpu_reduce_loss(mx_engine* e, double* lsum) {
    (void)e; (void)lsum; /* one process */
    return MX_OK;
}

static int cpu_adamw(mx_engine* e, const mx_adamw_config* c, double lr, float gscale, int64_t t) {
    mx_adamw_update(e->model, e->m, e->v, c, lr, gscale, t);
    return MX_OK;
}

static int cpu_evaluate(mx_engine* e, const mx_loader* val, int64_t n_windows, int B, int T, float* loss) {
    return mx_evaluate(e->model, val, n_windows, B, T, loss);
}

static int cpu_sync_to_host(mx_engine* e) {
    (void)e; /* the host model is the model */
    return MX_OK;
}

static int cpu_save(mx_engine* e, const char* path, const mx_ckpt_meta* meta, const char* fingerprint) {
    return mx_ckpt_save(path, e->model, e->m, e->v, meta, fingerprint);
}

static int cpu_poke(mx_engine* e, int which, size_t off, float val) {
    (which ? e->model->grads : e->model->params)[off] = val;
    return MX_OK;
}

static int cpu_report(mx_engine* e, char* buf, size_t n) {
    (void)e; (void)buf; (void)n;
    return 0;
}

static int cpu_token_losses(mx_engine* e, const int32_t* inp, const int32_t* tgt, float* out) {
    float lo = 0.0f;
    int rc = mx_llama_forward(e->model, inp, tgt, e->c->batch, e->c->seq, &lo);
    if (!rc) memcpy(out, e->model->losses, sizeof(float) * (size_t)e->c->batch * e->c->seq);
    return rc;
}

static void cpu_free(mx_engine* e) { (void)e; /* the trainer owns the model */ }

static const mx_engine_ops k_cpu_ops = {
    "cpu", cpu_zero_grad, cpu_micro_step, cpu_telemetry, cpu_grad_sumsq, cpu_reduce_loss, cpu_adamw,
    cpu_evaluate, cpu_sync_to_host, cpu_save, cpu_poke, cpu_report, cpu_token_losses, cpu_free,
};

/* what: 0 the training engine, 1 the forward only (mx_engine_create_eval) */
static int create(mx_engine** out, int what, int on_gpu, const mx_train_config* c, mx_llama* model, float* m, float* v) {
    *out = NULL;
    mx_engine* e = calloc(1, sizeof *e);
    if (!e) return mx_fail(MX_ENOMEM, "train: out of memory");
    e->c = c;
    e->model = model;
    e->m = m;
    e->v = v;
    mx_engine_ranks(c, &e->rank, &e->world);
    e->ops = &k_cpu_ops; /* the GPU engine's create replaces them */
    int rc = MX_OK;
    if (on_gpu) rc = what ? mx_engine_gpu_create_eval(e) : mx_engine_gpu_create(e);
    else if (!what) rc = mx_llama_alloc_acts(model, c->batch, c->seq);
    if (rc) { mx_engine_free(e); return rc; }
    *out = e;
    return MX_OK;
}

int mx_engine_create(mx_engine** out, int on_gpu, const mx_train_config* c, mx_llama* model, float* m, float* v) {
    return create(out, 0, on_gpu, c, model, m, v);
}

int mx_engine_create_eval(mx_engine** out, int on_gpu, const mx_train_config* c, mx_llama* model) {
    return create(out, 1, on_gpu, c, model, NULL, NULL);
}

int mx_engine_generate(int on_gpu, const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new,
                       const mx_sample_opts* o, int32_t eot, int32_t* out, int* n_out, int gemm_exact) {
    if (!on_gpu) return mx_generate(m, prompt, n_prompt, n_new, o, eot, out, n_out);
    char info[256];
    if (mx_engine_gpu_info(info, sizeof info) != 1) return mx_fail(MX_EIO, "--device cuda: no usable GPU: %s", info);
    return mx_engine_gpu_generate(m, prompt, n_prompt, n_new, o, eot, out, n_out, gemm_exact);
}

void mx_engine_free(mx_engine* e) {
    if (e && e->ops && e->ops->free) e->ops->free(e);
    free(e);
}

/* ---- the CPU build: no GPU engine (the one place the build picks it) ------------------------ */
#ifndef MXLM_CUDA
#define NO_CUDA "this mxlm was built without CUDA (build it with make cuda)"
int mx_engine_gpu_built(void) { return 0; }
void mx_engine_gpu_ranks(void* comm, int* rank, int* world) { (void)comm; *rank = 0; *world = 1; }
int mx_engine_gpu_info(char* info, size_t n) {
    snprintf(info, n, NO_CUDA);
    return -1;
}
int mx_engine_gpu_check_memory(const mx_train_config* c, int world, char* msg, size_t n) {
    return mx_fail(MX_EINVAL, "train: the GPU engine: " NO_CUDA);
}
int mx_engine_gpu_create(mx_engine* e) {
    return mx_fail(MX_EINVAL, "train: the GPU engine: " NO_CUDA);
}
int mx_engine_gpu_create_eval(mx_engine* e) { return mx_engine_gpu_create(e); }
int mx_engine_gpu_generate(const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new, const mx_sample_opts* o,
                           int32_t eot, int32_t* out, int* n_out, int gemm_exact) {
    return mx_fail(MX_EINVAL, "the GPU engine: " NO_CUDA);
}
int mx_engine_gpu_bench(const char* name, int rows, int cols, int M, int N, int K, int iters) {
    return mx_fail(MX_EINVAL, "GPU benchmarks need the CUDA build (make cuda)");
}
int mx_dist_available(void) { return 0; }
int mx_dist_join(const char* out, int rank, int world, int local, const char* token, void** comm) {
    return mx_fail(MX_EINVAL, "--gpus/--nccl (or an MPI launch) need the CUDA build (make cuda)");
}
void mx_dist_leave(void* comm, int abort) { (void)comm; (void)abort; }
int mx_engine_describe_gpu(const mx_train_config* c, char* buf, size_t n) {
    if (n) buf[0] = 0;
    return 0;
}
#endif
