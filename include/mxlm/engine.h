/*
 * engine.h: the one door to the GPU: the interface the trainer (src/train/trainer.c)
 * talks to, and mxlm eval, sample, info and bench (no #ifdef MXLM_CUDA outside the
 * engines and src/cuda). An
 * engine runs the model's steps where the run goes: the CPU reference model
 * (src/train/engine.c) or its GPU twin over the mxg_* API of gpu_model.h
 * (src/cuda/train/engine.cu, CUDA build only; the CPU build's stubs refuse
 * with a message). The trainer keeps the host model (mx_llama: the weights
 * and the linear states that checkpoints and telemetry lines read) and the
 * AdamW moments; a GPU engine keeps the working copies on the device and
 * makes the host's current on sync_to_host (before a checkpoint).
 *
 * Data parallel (CUDA build, c->comm set): rank `rank` of `world`; the
 * engine's collectives (loss, all_ok, the checkpoint's moment shards) are
 * made inside it, so the trainer's loop is the same for one or N GPUs.
 *
 * The recipe is c->rec, parsed once (mx_train_config_set_recipe) by whoever fills the config.
 *
 * Every function returns 0 (MX_OK) or a negative mx_err with a message
 * (mx_fail); none prints.
 */
#ifndef MXLM_ENGINE_H
#define MXLM_ENGINE_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/decode.h"
#include "mxlm/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mx_engine mx_engine;

typedef struct {
    const char* name; /* "cpu", "cuda" */
    /* the step: gradients zeroed, then per micro-batch (inp, tgt [B, T]) forward + backward with the loss
     * gradient scaled by grad_scale (`last`: the step's last micro-batch, where data parallelism reduces) */
    int (*zero_grad)(mx_engine* e);
    int (*micro_step)(mx_engine* e, const int32_t* inp, const int32_t* tgt, uint64_t step, float grad_scale, int last,
                      float* loss);
    /* per-GEMM telemetry of the micro-batches: on before them, off after (then the stats are in
     * model->lstate[].op, where mx_telemetry_write reads them) */
    int (*telemetry)(mx_engine* e, int on);
    int (*grad_sumsq)(mx_engine* e, double* ss);
    /* *lsum: this rank's sum of micro-batch losses -> every rank's, added in rank order */
    int (*reduce_loss)(mx_engine* e, double* lsum);
    int (*adamw)(mx_engine* e, const mx_adamw_config* c, double lr, float gscale, int64_t t);
    /* mean validation loss over the first n_windows windows of val, in batches of B x T */
    int (*evaluate)(mx_engine* e, const mx_loader* val, int64_t n_windows, int B, int T, float* loss);
    /* host copies (model params, m, v) made current */
    int (*sync_to_host)(mx_engine* e);
    /* a checkpoint of the host state at path (synced first; with several ranks, the moment shards
     * gathered: the same file whatever the GPU count) */
    int (*save)(mx_engine* e, const char* path, const mx_ckpt_meta* meta, const char* fingerprint);
    /* test hooks: one weight (which 0) or gradient (1) element */
    int (*poke)(mx_engine* e, int which, size_t offset, float value);
    /* a line for the log at the end (profile), or 0 */
    int (*report)(mx_engine* e, char* buf, size_t n);
    /* the per-token losses of one batch (inp, tgt [B, T]) into out [B*T] (mxlm eval on text) */
    int (*token_losses)(mx_engine* e, const int32_t* inp, const int32_t* tgt, float* out);
    void (*free)(mx_engine* e);
} mx_engine_ops;

struct mx_engine {
    const mx_engine_ops* ops;
    const mx_train_config* c;
    mx_llama* model;      /* the host model */
    float *m, *v;         /* [n_params] host AdamW moments */
    int rank, world;
    void* impl;           /* the implementation's state */
};

/* This process's rank and world size (1 without NCCL). */
void mx_engine_ranks(const mx_train_config* c, int* rank, int* world);
/* Where the run goes: 1 the GPU, 0 the CPU (what: the log line saying so, and why), or a negative
 * mx_err (--device cuda without a usable GPU or CUDA build, a recipe the GPU does not run: the
 * format table's GPU columns). */
int mx_engine_pick(const mx_train_config* c, char* what, size_t n);
/* MX_EINVAL with the message, or MX_OK: whether the GPU runs this recipe and attention choice (the
 * format table's GPU columns; --attn flash needs head dim 64 or 128). Host code only: `mxlm train
 * --device cuda` asks it before anything is created or any GPU probed (a usage error, exit 2). */
int mx_engine_gpu_check(const mx_train_config* c);
/* The LM head's precision when --head auto: BF16 on the GPU unless the recipe is all FP32 (and no
 * block is kept in BF16), FP32 on the CPU. */
int mx_engine_head_bf16(const mx_train_config* c, int on_gpu);
/* The GPU's memory for the run, before anything is allocated: the log line in msg (empty on the
 * CPU); MX_LIMITS (with the message) when it does not fit and c->ignore_limits is not set. */
int mx_engine_check_memory(const mx_train_config* c, int on_gpu, int world, char* msg, size_t n);
/* The engine for a run: `model` created, with its weights and (m, v) loaded or initialized. */
int mx_engine_create(mx_engine** e, int on_gpu, const mx_train_config* c, mx_llama* model, float* m, float* v);
void mx_engine_free(mx_engine* e);

/* ---- a loaded model where it runs (mxlm eval, mxlm sample, mxlm info, mxlm bench): the same door ---- */
/* 1 in the CUDA build (a GPU engine exists), 0 in the CPU build. */
int mx_engine_gpu_built(void);
/* The GPU's name into info: 1 a usable GPU, 0 none (info: why), -1 the CPU build (info: how to build one). */
int mx_engine_gpu_info(char* info, size_t n);
/* An engine for the forward only (mxlm eval): `model` with its weights (model->step: the CPU's linear
 * layers' step), c: the model (c->model), c->rec, bf16_first/last, seed, batch x seq, gemm_exact, attn,
 * head (MX_HEAD_BF16 or not). Its ops: evaluate, token_losses, free. */
int mx_engine_create_eval(mx_engine** e, int on_gpu, const mx_train_config* c, mx_llama* model);
/* mx_generate (decode.h) on the CPU or, on_gpu, with the forward and the cache on the GPU (gemm_exact: its
 * MXFP4 GEMMs exact); MX_EIO where there is no usable GPU. */
int mx_engine_generate(int on_gpu, const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new,
                       const mx_sample_opts* o, int32_t eot, int32_t* out, int* n_out, int gemm_exact);
/* `mxlm bench NAME` (quant, hadamard, gemm): the GPU benchmarks (CUDA build; MX_EINVAL in the CPU build). */
int mx_engine_gpu_bench(const char* name, int rows, int cols, int M, int N, int K, int iters);

/* The GPU model's attention implementation for c->attn (0 SIMT kernels, 1 GEMM FP32, 2 GEMM TF32;
 * gpu_model.h). */
int mx_train_gpu_attn(const mx_train_config* c);
/* `mxlm train --describe`'s GPU lines (memory with and without --recompute, ZeRO-1) into buf; 0
 * bytes in the CPU build. */
int mx_engine_describe_gpu(const mx_train_config* c, char* buf, size_t n);

/* ---- the GPU implementation (src/cuda/train/engine.cu; stubs in the CPU build) ---- */
void mx_engine_gpu_ranks(void* comm, int* rank, int* world);
int mx_engine_gpu_check_memory(const mx_train_config* c, int world, char* msg, size_t n);
int mx_engine_gpu_create(mx_engine* e);
int mx_engine_gpu_create_eval(mx_engine* e);
int mx_engine_gpu_generate(const mx_llama* m, const int32_t* prompt, int n_prompt, int n_new, const mx_sample_opts* o,
                           int32_t eot, int32_t* out, int* n_out, int gemm_exact);

/* ---- data-parallel processes (src/train/launch.c) ---- */
/* A note while launching or waiting (rank failures), for the CLI to print. */
typedef void (*mx_launch_note)(const char* line, int is_error, void* user);
/* 1 where this build runs data parallel (the CUDA build). */
int mx_dist_available(void);
/* This process's rank, world size, local rank and job token from the environment: MXLM_RANK /
 * MXLM_WORLD / MXLM_LOCAL_RANK (set by mx_launch_ranks), else OpenMPI's OMPI_COMM_WORLD_*; world 0:
 * not a rank. The token names the job (the NCCL id file). MX_EINVAL with a message when malformed. */
int mx_dist_env(int* rank, int* world, int* local, const char** token);
/* `mxlm train --gpus N`: N copies of this command (argv[1..argc) after "mxlm train"), rank r on GPU r,
 * rank 0's output here, rank r's in OUT/rank<r>.log. The first rank to fail stops the others.
 * Returns the exit status (that rank's, else rank 0's), or a negative mx_err before any started. */
int mx_launch_ranks(int n, int argc, char** argv, const char* out, mx_launch_note note, void* user);
/* Join the job: rank 0 makes the NCCL id and leaves it in OUT/.nccl-id.<token>, the others wait for it
 * (MXLM_DIST_TIMEOUT seconds, default 600); *comm: the communicator (an mxg_comm*). CUDA build only. */
int mx_dist_join(const char* out, int rank, int world, int local, const char* token, void** comm);
/* End this rank's communicator (abort: the others may wait in a collective). */
void mx_dist_leave(void* comm, int abort);

#ifdef __cplusplus
}
#endif
#endif
