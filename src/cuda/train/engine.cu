/*
 * engine.cu: the GPU engine of the trainer (engine.h), the twin of
 * src/train/engine.c. Host code only: it runs the GPU model (mxg_llama,
 * gpu_model.h) with the trainer's steps; the weights, gradients and AdamW
 * moments live on the device, the host model keeps a copy of the weights (and
 * m, v) for checkpoints, refreshed by sync_to_host before each save.
 *
 * Data parallel (c->comm set): this rank of `world`; the AdamW moments of this
 * rank's shard ([nshard], host copies of the device's). A checkpoint of a run
 * over W > 1 GPUs: each rank r > 0 writes its shard of the moments to
 * CKPT.rank<r> (fsync, rename); once all are written, rank 0 assembles the
 * full moments from them and its own shard and writes CKPT, the usual single
 * file (it is the completion marker: a directory without it has no
 * checkpoint at that step); then the shard files are removed. A checkpoint is
 * thus the same file whatever the GPU count.
 *
 * Also the GPU side of the engine interface's other doors: a loaded model's
 * forward (mxlm eval: mx_engine_create_eval), sampling (mx_engine_generate),
 * the device's name, the benchmarks and joining the NCCL job (mx_dist_join).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "mxlm/engine.h"
#include "mxlm/gpu.h"
#include "mxlm/gpu_model.h"
#include "mxlm/util.h"

namespace {

struct gpu_engine {
    mxg_llama* g;
    mxg_comm* comm;    /* NULL: no NCCL */
    float *sm, *sv;    /* [nshard] this rank's shard of the moments (world > 1) */
    size_t nshard;
    int64_t used0;     /* device memory in use before the model (the CUDA context, other processes) */
};

gpu_engine* G(mx_engine* e) { return (gpu_engine*)e->impl; }

#define SHARD_MAGIC "MXLMSHD1"
struct shard_header {
    char magic[8];
    int64_t step;
    int32_t world, rank;
    uint64_t nshard;
    uint32_t crc, pad;
};

/* CRC-32 of a shard file's payload (the moments after the header). */
uint32_t shard_crc(const char* buf, size_t n) {
    return (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef*)buf + sizeof(shard_header), (uInt)(2 * n * 4));
}

/* A collective: every rank's rc; an error when any rank failed. */
int all_ok(mx_engine* e, int rc) {
    gpu_engine* ge = G(e);
    if (!ge->comm) return rc;
    double mine = rc ? 1.0 : 0.0, all[64];
    int err = mxg_comm_allgather_host(ge->comm, &mine, all, 8);
    if (rc || err) return rc ? rc : err;
    for (int q = 0; q < e->world; q++)
        if (all[q] != 0.0) return mx_fail(MX_EIO, "data parallel: rank %d failed (its log says why)", q);
    return MX_OK;
}

int write_shard(mx_engine* e, const char* path, int64_t step) {
    gpu_engine* ge = G(e);
    size_t n = ge->nshard, bytes = sizeof(shard_header) + 2 * n * 4;
    char* buf = (char*)malloc(bytes);
    if (!buf) return mx_fail(MX_ENOMEM, "checkpoint: out of memory for the moment shard");
    shard_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, SHARD_MAGIC, 8);
    h.step = step;
    h.world = e->world;
    h.rank = e->rank;
    h.nshard = n;
    memcpy(buf + sizeof h, ge->sm, n * 4);
    memcpy(buf + sizeof h + n * 4, ge->sv, n * 4);
    h.crc = shard_crc(buf, n);
    memcpy(buf, &h, sizeof h);
    int rc = mx_write_atomic(path, buf, bytes);
    free(buf);
    return rc;
}

/* Rank 0: the full moments from every rank's shard (rank 0's own in sm/sv). */
int gather_moments(mx_engine* e, const char* ckpt, int64_t step) {
    gpu_engine* ge = G(e);
    int rc = mxg_llama_shard_copy(ge->g, 0, e->m, ge->sm, 1);
    if (!rc) rc = mxg_llama_shard_copy(ge->g, 0, e->v, ge->sv, 1);
    size_t n = ge->nshard, bytes = sizeof(shard_header) + 2 * n * 4;
    char* buf = rc ? NULL : (char*)malloc(bytes);
    if (!rc && !buf) rc = mx_fail(MX_ENOMEM, "checkpoint: out of memory for a moment shard");
    for (int q = 1; q < e->world && !rc; q++) {
        char p[1300];
        snprintf(p, sizeof p, "%s.rank%d", ckpt, q);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) { rc = mx_fail(MX_EIO, "%s: cannot open: %s", p, strerror(errno)); break; }
        rc = mx_pread_all(fd, buf, bytes, 0);
        close(fd);
        if (rc) break;
        shard_header h;
        memcpy(&h, buf, sizeof h);
        if (memcmp(h.magic, SHARD_MAGIC, 8) || h.step != step || h.world != e->world || h.rank != q ||
            h.nshard != n || h.crc != shard_crc(buf, n))
            rc = mx_fail(MX_EFORMAT, "%s: not rank %d's moment shard of step %lld (or corrupt)", p, q, (long long)step);
        if (!rc) rc = mxg_llama_shard_copy(ge->g, q, e->m, (float*)(buf + sizeof h), 1);
        if (!rc) rc = mxg_llama_shard_copy(ge->g, q, e->v, (float*)(buf + sizeof h + n * 4), 1);
    }
    free(buf);
    return rc;
}

/* ---- the ops ---- */

int zero_grad(mx_engine* e) { return mxg_llama_zero_grad(G(e)->g); }

int micro_step(mx_engine* e, const int32_t* inp, const int32_t* tgt, uint64_t step, float grad_scale, int last,
               float* loss) {
    if (G(e)->comm) mxg_llama_set_sync(G(e)->g, last); /* the last micro-batch reduces the gradients */
    return mxg_llama_forward_backward(G(e)->g, inp, tgt, step, grad_scale, loss);
}

/* the device totals copied into model->lstate[].op when turned off */
int telemetry(mx_engine* e, int on) {
    e->model->telemetry = on;
    int rc = mxg_llama_set_telemetry(G(e)->g, on);
    if (!rc && !on) rc = mxg_llama_telemetry_read(G(e)->g, e->model->lstate);
    return rc;
}

int grad_sumsq(mx_engine* e, double* ss) { return mxg_llama_grad_sumsq(G(e)->g, ss); }

int reduce_loss(mx_engine* e, double* lsum) {
    if (!G(e)->comm) return MX_OK;
    double all[64];
    int rc = mxg_comm_allgather_host(G(e)->comm, lsum, all, 8);
    if (rc) return rc;
    *lsum = 0.0;
    for (int q = 0; q < e->world; q++) *lsum += all[q];
    return MX_OK;
}

int adamw(mx_engine* e, const mx_adamw_config* c, double lr, float gscale, int64_t t) {
    return mxg_llama_adamw(G(e)->g, c, lr, gscale, t);
}

int batch_loss(void* g, const int32_t* inp, const int32_t* tgt, float* loss) {
    return mxg_llama_loss((mxg_llama*)g, inp, tgt, 0, loss, NULL);
}

int evaluate(mx_engine* e, const mx_loader* val, int64_t n_windows, int B, int T, float* loss) {
    return mx_evaluate_batches(batch_loss, G(e)->g, val, n_windows, B, T, loss);
}

int sync_to_host(mx_engine* e) {
    gpu_engine* ge = G(e);
    return mxg_llama_download(ge->g, e->model->params, ge->sm ? ge->sm : e->m, ge->sv ? ge->sv : e->v);
}

int save(mx_engine* e, const char* path, const mx_ckpt_meta* meta, const char* fingerprint) {
    int rc = sync_to_host(e);
    if (e->world > 1) {
        char sp[1300];
        snprintf(sp, sizeof sp, "%s.rank%d", path, e->rank);
        if (!rc && e->rank) rc = write_shard(e, sp, meta->step);
        rc = all_ok(e, rc); /* every shard is on disk */
        if (!rc && !e->rank) rc = gather_moments(e, path, meta->step);
        if (!rc && !e->rank) rc = mx_ckpt_save(path, e->model, e->m, e->v, meta, fingerprint);
        rc = all_ok(e, rc); /* the checkpoint is complete */
        if (e->rank) unlink(sp);
        return rc;
    }
    return rc ? rc : mx_ckpt_save(path, e->model, e->m, e->v, meta, fingerprint);
}

int poke(mx_engine* e, int which, size_t off, float val) { return mxg_llama_poke(G(e)->g, which, off, val); }

/* The run's device memory (in use at the end less before the model: every buffer is kept to the end,
 * so this is the peak; comparable to PyTorch's max_memory_allocated, which counts no context), then
 * the MXLM_GPU_PROFILE split where profiling is on. */
int report(mx_engine* e, char* buf, size_t n) {
    gpu_engine* ge = G(e);
    int64_t fr = 0, tot = 0;
    if (n < 2 || mxg_mem_info(&fr, &tot) != MX_OK) return mxg_profile_report(buf, n);
    int k = snprintf(buf, n, "GPU memory: %.1f MiB peak (the run's device memory: model %.1f MiB, then cuBLASLt and "
                             "attention scratch; the CUDA context not counted)",
                     (double)(tot - fr - ge->used0) / 1048576.0, (double)mxg_llama_device_bytes(ge->g) / 1048576.0);
    if (k > 0 && (size_t)k + 2 < n && mxg_profile_report(buf + k + 1, n - (size_t)k - 1)) buf[k] = '\n';
    const size_t used = strlen(buf); /* then MXLM_GPU_OOW_PROBE's counts where it is on */
    if (used + 2 < n && mxg_linear_oow_report(buf + used + 1, n - used - 1)) buf[used] = '\n';
    return 1;
}

/* as the trainer's evaluation: step 0 */
int token_losses(mx_engine* e, const int32_t* inp, const int32_t* tgt, float* out) {
    float lo = 0.0f;
    return mxg_llama_loss(G(e)->g, inp, tgt, 0, &lo, out);
}

void free_engine(mx_engine* e) {
    gpu_engine* ge = G(e);
    if (!ge) return;
    if (ge->g) mxg_llama_free(ge->g);
    free(ge->sm);
    free(ge->sv);
    free(ge);
    e->impl = NULL;
}

const mx_engine_ops k_gpu_ops = {
    "cuda", zero_grad, micro_step, telemetry, grad_sumsq, reduce_loss, adamw,
    evaluate, sync_to_host, save, poke, report, token_losses, free_engine,
};

double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

}  // namespace

extern "C" void mx_engine_gpu_ranks(void* comm, int* rank, int* world) {
    *world = mxg_comm_world((mxg_comm*)comm);
    *rank = mxg_comm_rank((mxg_comm*)comm);
}

extern "C" int mx_engine_gpu_built(void) { return 1; }

extern "C" int mx_engine_gpu_info(char* info, size_t n) { return mxg_device_info(info, n) == 0; }

/* BF16 storage of the activations (mxg_llama_create's act16) as mxg_llama_act16_default gives it for the
 * recipe (bf16, fp8, fast-path MXFP4); not where telemetry is asked for (it measures
 * the FP32 operands). */
static int act16_of(const mx_train_config* c, const mx_recipe* r) {
    return c->telemetry_every == 0 && mxg_llama_act16_default(r);
}

/* Gradients in activation memory (mxg_llama_create_dist's share_grads): with one micro-batch a step on one GPU. */
static int share_grads_of(const mx_train_config* c, int world) { return c->accum == 1 && world <= 1 && !c->comm; }

/* The estimate for c (its recipe parsed once: c->rec). */
static void estimate(const mx_train_config* c, int recompute, int world, mxg_mem_estimate* ge) {
    mxg_llama_estimate(&c->model, &c->rec, c->batch, c->seq, recompute, act16_of(c, &c->rec),
                       mx_train_gpu_attn(c), share_grads_of(c, world), ge);
}

extern "C" int mx_engine_gpu_check_memory(const mx_train_config* c, int world, char* msg, size_t n) {
    const int B = c->batch, T = c->seq;
    mxg_mem_estimate ge;
    estimate(c, c->recompute, world, &ge);
    if (world > 1) { /* ZeRO-1: this GPU's shard of the moments */
        ge.total -= ge.adam - ge.adam / world;
        ge.adam /= world;
    }
    int64_t gfree = 0, gtotal = 0;
    int have = mxg_mem_info(&gfree, &gtotal) == 0;
    snprintf(msg, n, "GPU memory: %.1f MiB estimated (weights %.1f, gradients %.1f, AdamW %.1f, "
             "activations %.1f%s, scratch %.1f), %.0f MiB free of %.0f", mib(ge.total), mib(ge.params),
             mib(ge.grads), mib(ge.adam), mib(ge.acts), c->recompute ? " with recompute" : "", mib(ge.scratch),
             mib(gfree), mib(gtotal));
    if (have && ge.total > gfree && !c->ignore_limits) {
        mx_fail(MX_ENOMEM, "train: %s with batch %d x %d needs about %.1f MiB of GPU memory (weights %.1f, "
                "gradients %.1f, AdamW %.1f, activations %.1f, scratch %.1f MiB) but %.1f MiB are free; use a "
                "smaller --batch/--seq, --recompute 1, another preset, or --ignore-limits", c->model.name, B, T,
                mib(ge.total), mib(ge.params), mib(ge.grads), mib(ge.adam), mib(ge.acts), mib(ge.scratch),
                mib(gfree));
        return MX_LIMITS;
    }
    return MX_OK;
}

/* e's GPU engine state, its ops the GPU's (NULL: out of memory, said). */
static gpu_engine* attach(mx_engine* e, const char* what) {
    gpu_engine* ge = (gpu_engine*)calloc(1, sizeof *ge);
    if (!ge) { mx_fail(MX_ENOMEM, "%s: out of memory", what); return NULL; }
    e->impl = ge;
    e->ops = &k_gpu_ops;
    return ge;
}

/* The GPU model from the host model's weights and (m, v) (zero, or from the checkpoint). */
extern "C" int mx_engine_gpu_create(mx_engine* e) {
    const mx_train_config* c = e->c;
    gpu_engine* ge = attach(e, "train");
    if (!ge) return MX_ENOMEM;
    ge->comm = (mxg_comm*)c->comm;
    int64_t fr = 0, tot = 0;
    if (mxg_mem_info(&fr, &tot) == MX_OK) ge->used0 = tot - fr;
    int rc = mxg_llama_create_dist(&ge->g, &c->model, &c->rec, c->bf16_first, c->bf16_last, c->seed, c->batch, c->seq,
                                   c->gemm_exact, c->recompute, act16_of(c, &c->rec), mx_train_gpu_attn(c),
                                   share_grads_of(c, e->world), ge->comm);
    if (!rc && e->world > 1) { /* this rank's shard of the moments */
        ge->nshard = mxg_llama_shard_size(ge->g);
        ge->sm = (float*)malloc(ge->nshard * 4);
        ge->sv = (float*)malloc(ge->nshard * 4);
        if (!ge->sm || !ge->sv) rc = mx_fail(MX_ENOMEM, "train: out of memory");
        if (!rc) rc = mxg_llama_shard_copy(ge->g, e->rank, e->m, ge->sm, 0);
        if (!rc) rc = mxg_llama_shard_copy(ge->g, e->rank, e->v, ge->sv, 0);
    }
    if (!rc) rc = mxg_llama_upload(ge->g, e->model->params, ge->sm ? ge->sm : e->m, ge->sv ? ge->sv : e->v);
    if (!rc) rc = mxg_llama_set_head_bf16(ge->g, c->head == MX_HEAD_BF16);
    return rc;
}

extern "C" int mx_engine_describe_gpu(const mx_train_config* c, char* buf, size_t n) {
    const double M = 1024.0 * 1024.0;
    size_t off = 0;
    if (n) buf[0] = 0;
#define PUT(...) do { if (off < n) off += (size_t)snprintf(buf + off, n - off, __VA_ARGS__); } while (0)
    for (int rcp = 0; rcp < 2; rcp++) {
        mxg_mem_estimate ge;
        estimate(c, rcp, 1, &ge);
        PUT("GPU     %.1f GiB estimated%s: weights %.1f, gradients %.1f, AdamW %.1f, activations %.1f, "
            "scratch %.1f\n", ge.total / (M * 1024), rcp ? " with --recompute 1" : "", ge.params / (M * 1024),
            ge.grads / (M * 1024), ge.adam / (M * 1024), ge.acts / (M * 1024), ge.scratch / (M * 1024));
        if (rcp) { /* ZeRO-1: AdamW moments sharded over N GPUs (the multi-GPU issue) */
            int64_t cap = (int64_t)141 << 30; /* H200 */
            for (int k = 1; k <= 64; k *= 2) {
                int64_t per = ge.total - ge.adam + ge.adam / k;
                if (per <= cap * 95 / 100 || k == 64) {
                    PUT("ZeRO-1  %.1f GiB per GPU with the moments sharded over %d GPU%s (%s an H200's 141 GiB)\n",
                        per / (M * 1024), k, k > 1 ? "s" : "", per <= cap * 95 / 100 ? "within 95% of" : "above");
                    break;
                }
            }
        }
    }
#undef PUT
    return (int)off;
}

/* The GPU model for the forward only (mxlm eval), from the host model's weights: the run's attention, BF16
 * activations as the recipe's default, no recompute, no moments. */
extern "C" int mx_engine_gpu_create_eval(mx_engine* e) {
    const mx_train_config* c = e->c;
    gpu_engine* ge = attach(e, "eval");
    if (!ge) return MX_ENOMEM;
    int rc = mxg_llama_create(&ge->g, &c->model, &c->rec, c->bf16_first, c->bf16_last, c->seed, c->batch, c->seq,
                              c->gemm_exact, 0, mxg_llama_act16_default(&c->rec), mx_train_gpu_attn(c));
    if (!rc) rc = mxg_llama_upload(ge->g, e->model->params, NULL, NULL);
    if (!rc) rc = mxg_llama_set_head_bf16(ge->g, c->head == MX_HEAD_BF16);
    return rc;
}

extern "C" int mx_engine_gpu_generate(const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new,
                                      const mx_sample_opts* o, int32_t eot, int32_t* out, int* n_out, int gemm_exact) {
    return mxg_generate(m, prompt, n_prompt, n_new, o, eot, out, n_out, gemm_exact);
}

extern "C" int mx_engine_gpu_bench(const char* name, int rows, int cols, int M, int N, int K, int iters) {
    if (!strcmp(name, "quant")) return mxg_bench_quant(rows, cols, iters);
    if (!strcmp(name, "hadamard")) return mxg_bench_hadamard(rows, cols, iters);
    return mxg_bench_gemm(M, N, K, iters);
}

/* ---- joining the NCCL job (engine.h; the launcher is src/train/launch.c) ---- */

extern "C" int mx_dist_available(void) { return 1; }

extern "C" int mx_dist_join(const char* out, int rank, int world, int local, const char* token, void** comm) {
    char why[512];
    if (mxg_nccl_load(why, sizeof why)) return mx_fail(MX_EIO, "%s", why);
    if (mxg_select_device(local)) {
        snprintf(why, sizeof why, "%s", mx_last_error());
        return mx_fail(MX_EIO, "rank %d: %s", rank, why);
    }
    int rc = mx_mkdirs(out);
    if (rc) return rc;
    char tk[64], path[1200];
    snprintf(tk, sizeof tk, "%s", token ? token : "solo");
    for (char* p = tk; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') *p = '_';
    if (mx_pathf(path, sizeof path, "%s/.nccl-id.%s", out, tk)) return MX_EINVAL;
    unsigned char id[MXG_NCCL_ID_BYTES];
    if (rank == 0) {
        if (mxg_comm_unique_id(id) || mx_write_atomic(path, id, sizeof id)) {
            snprintf(why, sizeof why, "%s", mx_last_error());
            return mx_fail(MX_EIO, "rank 0: %s", why);
        }
    } else {
        int timeout = 600;
        const char* ts = getenv("MXLM_DIST_TIMEOUT");
        char* te = NULL;
        long tv = ts && *ts ? strtol(ts, &te, 10) : -1;
        if (ts && *ts && !*te && tv >= 0 && tv <= 1 << 20) timeout = (int)tv;
        int got = 0;
        for (long ms = 0; ms <= (long)timeout * 1000 && !got; ms += 20) {
            FILE* f = fopen(path, "rb");
            if (f) {
                got = fread(id, 1, sizeof id, f) == sizeof id;
                fclose(f);
            }
            if (!got) usleep(20000);
        }
        if (!got)
            return mx_fail(MX_EIO, "rank %d: no NCCL id from rank 0 in %s after %d s (is rank 0 running, with the "
                                   "same --out on a shared file system?)", rank, path, timeout);
    }
    mxg_comm* c = NULL;
    if (mxg_comm_create(&c, rank, world, id)) {
        snprintf(why, sizeof why, "%s", mx_last_error());
        return mx_fail(MX_EIO, "rank %d: %s", rank, why);
    }
    *comm = c;
    if (rank == 0) unlink(path);
    return 0;
}

extern "C" void mx_dist_leave(void* comm, int abort) {
    if (comm) mxg_comm_free((mxg_comm*)comm, abort);
}
