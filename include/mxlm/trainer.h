/*
 * trainer.h: the trainer (src/train/: trainer.c and its parts): the CPU reference, or the GPU model of
 * gpu_model.h in the CUDA build (--device); AdamW, the learning-rate
 * schedule, the data loader over llm.c shards, evaluation, checkpoints,
 * telemetry and the training loop that ties them together.
 *
 * Step numbering: step k is the k-th optimizer update (k = 1..steps). A
 * training line of metrics.jsonl with "step": k reports the loss of the batch
 * that update k used; an evaluation line with "step": k is measured after k
 * updates (step 0: the initial weights). A checkpoint of step k holds the
 * state after k updates.
 *
 * Library code: returns errors (mx_fail), writes only into the run directory,
 * never prints; the CLI prints through the progress callback.
 */
#ifndef MXLM_TRAINER_H
#define MXLM_TRAINER_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/adamw.h"
#include "mxlm/model.h"
#include "mxlm/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Positive returns of mx_train_run (negative ones are mx_err). */
#define MX_DIVERGED 3     /* NaN/Inf loss, gradient or validation loss, or too many skipped updates */
#define MX_NOT_CONVERGED 4 /* the step budget ran out before --target-loss was reached */
#define MX_LIMITS 5       /* refused up front: the run does not fit the memory or the disk */
#define MX_STOPPED 6      /* SIGINT/SIGTERM: stopped at a step boundary with a checkpoint (res->signal) */

/* --on-nonfinite */
enum { MX_NONFINITE_ABORT = 0, MX_NONFINITE_SKIP = 1 };
/* Longest loss window of the spike detector (checkpointed). */
#define MX_SPIKE_WINDOW_MAX 1024

/* ---- schedule and optimizer ------------------------------------------------ */

/* Learning rate for the update that follows `s` completed updates (s = 0 ..
 * total-1): linear warmup peak*(s+1)/warmup for s < warmup, then cosine from
 * peak down to min_frac*peak at s = total. */
double mx_lr_at(int64_t s, int64_t total, int64_t warmup, double peak, double min_frac);

/* AdamW (mx_adamw_config, mx_sum_squares, mx_adamw_update): adamw.h */

/* ---- data ------------------------------------------------------------------ */

/* A set of shards seen as one token stream; windows of T+1 tokens never
 * straddle two shards. */
typedef struct {
    int n;               /* shards */
    mx_shard* shards;    /* [n] */
    int64_t* first;      /* [n+1] prefix sums of the number of window starts per shard */
    int T;
    int vocab;
} mx_loader;

/* Open every file matching the glob `pattern` (sorted), for windows of T+1
 * tokens. Refuses shards too short for one window, and any token id >= vocab
 * (one pass over every shard at open: the error names the file and offset). */
int mx_loader_open(mx_loader* l, const char* pattern, int T, int vocab);
void mx_loader_close(mx_loader* l);
int64_t mx_loader_n_windows(const mx_loader* l);
/* Tokens of window w (start position w within the concatenated starts) into
 * inp [T] and tgt [T] (tgt = inp shifted by one). Token ids >= vocab are an
 * error naming the file and offset. */
int mx_loader_window(const mx_loader* l, int64_t w, int32_t* inp, int32_t* tgt);
/* The training sample with counter s: window index from
 * mx_rand_u32(seed, MX_RNG_DATA, 0, 2s) and (.., 2s+1). */
int64_t mx_loader_sample(const mx_loader* l, uint64_t seed, int64_t s);
/* The validation set: non-overlapping windows at starts 0, T, 2T, ... of
 * each shard in order (stride T), the first `count` of them. */
int64_t mx_loader_n_val_windows(const mx_loader* l);
int mx_loader_val_window(const mx_loader* l, int64_t i, int32_t* inp, int32_t* tgt);
/* The validation windows evaluated (the trainer's and eval's): min(val_tokens / T, n_windows) rounded down to
 * whole batches of B (val_tokens 0: every window) into *n. MX_EUSAGE when --val-tokens gives fewer than one
 * batch (the message says the least that does), MX_EINVAL when the set (named `set`) has fewer windows than
 * one batch. n_windows INT64_MAX checks the option alone (before any shard is read). */
int mx_val_windows(int64_t n_windows, int64_t val_tokens, int T, int B, const char* set, int64_t* n);

/* ---- the run ----------------------------------------------------------------- */

typedef struct {
    mx_model_config model;
    char recipe[256];     /* the recipe as given (config.txt, the fingerprint) */
    mx_recipe rec;        /* recipe parsed, once (mx_train_config_set_recipe): what the trainer and the engines run */
    int bf16_first, bf16_last;
    int batch;            /* B sequences per micro-batch */
    int seq;              /* T tokens per sequence (<= model.seq_len) */
    int accum;            /* micro-batches per optimizer step */
    int64_t steps;
    int64_t sched_steps;  /* the LR schedule's length (0: steps); an extended run keeps its original one, the
                             steps past it run at the floor min_lr_frac * lr (the fingerprint's "steps") */
    uint64_t seed;
    double lr, min_lr_frac;
    int64_t warmup;
    mx_adamw_config adamw;
    double clip;          /* global-norm clip (0: none) */
    char train[1024], val[1024]; /* shard globs */
    int64_t val_tokens;   /* validation tokens (rounded down to whole batches) */
    int64_t eval_every;   /* steps; 0: step 0 and the last step only */
    int64_t ckpt_every;   /* steps; 0: only at --halt-at and at the end */
    int64_t telemetry_every; /* steps; 0: off */
    double target_loss;   /* <= 0: none */
    int64_t halt_at;      /* 0: none; else stop after this step with a checkpoint */
    int resume;
    char ckpt[1024];      /* --resume --ckpt FILE: resume from this checkpoint ("": the latest in out) */
    int keep_ckpts;       /* checkpoints kept in the run directory (>= 1) */
    char out[1024];       /* run directory */
    int64_t debug_nan_at; /* test hook: poison a weight before this step (0: off) */
    /* Divergence policies (not part of the fingerprint: a resume may change them). */
    int on_nonfinite;     /* MX_NONFINITE_ABORT or MX_NONFINITE_SKIP */
    int64_t max_skips;    /* skipped updates (non-finite + spikes) allowed; one more ends the run as diverged */
    int spike_window;     /* training losses in the z-score window (0: detector off; <= MX_SPIKE_WINDOW_MAX) */
    double spike_z;       /* a loss with z = (loss - mean) / std above this is a spike */
    int skip_spikes;      /* 1: a spike's update is skipped (counted like a non-finite skip) */
    int64_t debug_nan_grad_at; /* test hook: one NaN gradient element at this step (0: off) */
    int64_t debug_spike_at;    /* test hook: this step's targets scrambled (a real loss spike; 0: off) */
    /* Limits checked before anything is allocated. */
    int ignore_limits;    /* 1: warn instead of refusing (memory, disk space) */
    int64_t mem_limit;    /* bytes treated as available (0: MemAvailable of /proc/meminfo) */
    /* Where it runs (not part of the fingerprint: a run may resume on the other device). */
    int device;           /* MX_DEVICE_AUTO (the GPU when the CUDA build finds one), _CPU, _CUDA */
    int gemm_exact;       /* GPU MXFP4 GEMMs: 0 the fast path (E4M3 fold + FP8 GEMM), 1 exact emulation (BF16) */
    char init_from[1024]; /* "": seeded init; else a Hugging Face Llama directory (safetensors + config.json) */
    uint64_t run_id;      /* the run's id: random at creation (0: none yet, or a run made before run ids); the
                           * last line of config.txt and of every checkpoint's fingerprint, "run-id = %016llx" */
    int no_final_ckpt;    /* 1: no checkpoint at the last step (benchmarks) */
    int head;             /* LM head GEMMs: MX_HEAD_AUTO (BF16 on the GPU unless the recipe is all fp32, FP32 on
                             the CPU), MX_HEAD_FP32, MX_HEAD_BF16 (BF16 operands, FP32 accumulation) */
    int attn;             /* GPU attention: MX_ATTN_AUTO (flash where the head dim is 64 or 128, else tf32), _FLASH
                             (flash attention on BF16 tensor cores, T x T never stored), _SIMT (FP32 SIMT kernels,
                             T x T never stored), _GEMM (cuBLASLt FP32 GEMMs, one sequence's scores at a time),
                             _TF32 (the same on TF32 tensor cores) */
    int recompute;        /* GPU: recompute the RMSNorm outputs and the SwiGLU product in the backward */
    /* Data parallelism (docs/multigpu.md): `gpus` ranks, one process per GPU, each drawing its own micro-batches
     * (rank r of step k, micro-batch a takes the samples a 1-GPU run with accum x gpus takes at micro-batch
     * a*gpus + r). gpus > 1 is part of the trajectory (the fingerprint). */
    int gpus;             /* world size (1: one GPU or the CPU) */
    int nccl;             /* 1: the NCCL engine (ZeRO-1) even with one GPU */
    void* comm;           /* this rank's mxg_comm (CUDA build; set by the CLI); NULL: no NCCL */
    int64_t sample_every; /* steps; 0: off. A sample event (kind 3) with the host copy of the weights every N
                             steps (not part of the fingerprint: printing a sample changes no number) */
} mx_train_config;

enum { MX_DEVICE_AUTO = 0, MX_DEVICE_CPU = 1, MX_DEVICE_CUDA = 2 };
enum { MX_HEAD_AUTO = 0, MX_HEAD_FP32 = 1, MX_HEAD_BF16 = 2 };
enum { MX_ATTN_AUTO = 0, MX_ATTN_SIMT = 1, MX_ATTN_GEMM = 2, MX_ATTN_TF32 = 3, MX_ATTN_FLASH = 4 };
/* The option words of those enums (and of --on-nonfinite, --gemm), indexed by value and
 * NULL-terminated: the CLI parses with them, config.txt is written with them. */
extern const char* const mx_device_names[];    /* auto cpu cuda */
extern const char* const mx_attn_names[];      /* auto simt gemm tf32 flash */
extern const char* const mx_head_names[];      /* auto fp32 bf16 */
extern const char* const mx_gemm_names[];      /* fast exact (index: gemm_exact) */
extern const char* const mx_nonfinite_names[]; /* abort skip */

void mx_train_config_default(mx_train_config* c); /* tiny preset, mxfp4-fdw-h16 */
/* c->recipe = s and c->rec its parse (the one parse of a run's recipe); MX_EINVAL with the message when s does
 * not parse (nothing changed). */
int mx_train_config_set_recipe(mx_train_config* c, const char* s);
/* mx_train_gpu_attn (c->attn as the GPU model's attention implementation): engine.h. */
/* Canonical "key = value" lines of the whole config (the run directory's
 * config.txt); `trajectory_only`: only what changes the numbers (the
 * checkpoint's fingerprint). Returns the length (snprintf semantics). */
int mx_train_config_text(const mx_train_config* c, int trajectory_only, char* buf, size_t n);

/* What the progress callback sees. */
typedef struct {
    int kind;             /* 0: training step, 1: evaluation, 2: message, 3: sample (--sample-every) */
    int64_t step, steps, tokens;
    float loss, val_loss;
    double lr, grad_norm, tok_per_s, elapsed_s;
    const char* msg;
    const mx_llama* model; /* kind 3: the model with the current weights on the host (CPU copy on the GPU) */
} mx_train_event;
typedef void (*mx_train_cb)(const mx_train_event* e, void* user);

typedef struct {
    /* "converged" (--target-loss reached), "budget" (all steps done, target not
     * reached or none), "halted" (--halt-at), "diverged", "error" */
    const char* status;
    const char* reason;   /* why it diverged ("" otherwise) */
    int64_t step, tokens;
    int64_t skipped_nonfinite, skipped_spikes, spikes; /* over the whole run, resumes included */
    float val_loss0, val_loss;  /* first (step 0) and last evaluation */
    int64_t tokens_to_target;   /* -1: not reached */
    double seconds, tok_per_s;
    int signal;                 /* MX_STOPPED: the signal (SIGINT, SIGTERM) */
    char ckpt[1200];            /* MX_STOPPED: the checkpoint written */
} mx_train_result;

/* Train as configured. Returns 0 (converged, budget without a target, or
 * halted; "finished": a --resume of a run whose outcome is recorded, nothing
 * written), MX_STOPPED (SIGINT/SIGTERM: a checkpoint at the next step boundary,
 * status "stopped"; one process only, the handlers are installed for the run's
 * duration), MX_DIVERGED, MX_NOT_CONVERGED, MX_LIMITS (refused before
 * allocating: mx_last_error says why), or a negative mx_err (bad config,
 * data, checkpoint, I/O: nothing in the run directory is overwritten when a
 * resume is refused; a failed checkpoint write leaves the previous one). */
int mx_train_run(const mx_train_config* c, mx_train_result* res, mx_train_cb cb, void* user);

/* ---- checkpoints --------------------------------------------------------------- */

typedef struct {
    int64_t step, sample, tokens;   /* updates done, training samples drawn, tokens seen */
    float val_loss0;                /* step-0 validation loss */
    int64_t tokens_to_target;       /* -1: not yet */
    /* version 2 (version 1 files load with these zero) */
    int64_t skipped_nonfinite, skipped_spikes, spikes;
    int32_t n_window;               /* losses in window[] (oldest first) */
    float window[MX_SPIKE_WINDOW_MAX]; /* the spike detector's recent training losses */
    uint64_t run_id;                /* the run the checkpoint belongs to (its fingerprint's run-id; 0: none) */
} mx_ckpt_meta;

/* Write params, AdamW moments, linear states (FP8 amax history), meta and the
 * config fingerprint to `path` atomically (temporary file, fsync, rename),
 * with a CRC-32 of the content. m, v [n_params]. */
int mx_ckpt_save(const char* path, const mx_llama* mdl, const float* m, const float* v, const mx_ckpt_meta* meta,
                 const char* fingerprint);
/* Load into an already created model of the same shape. Refuses (MX_EFORMAT,
 * with a message) a file that is truncated, fails its checksum, or whose
 * fingerprint differs from `fingerprint` (the message names the first
 * differing line), or that belongs to another run (both fingerprints end in a
 * run-id line and the ids differ; one without it, written before run ids, is
 * compared without the line and loaded with meta->run_id 0). Nothing is
 * modified on refusal. */
int mx_ckpt_load(const char* path, mx_llama* mdl, float* m, float* v, mx_ckpt_meta* meta, const char* fingerprint);
/* Only the parameters (and meta, when not NULL) of a checkpoint, without the
 * fingerprint check (export, inspection): the file's fingerprint text goes to
 * `fingerprint` (n bytes, when not NULL). Same file checks otherwise; the
 * model must have the checkpoint's parameter count. */
int mx_ckpt_load_params(const char* path, mx_llama* mdl, mx_ckpt_meta* meta, char* fingerprint, size_t n);
/* The checkpoint with the highest step in `dir` ("ckpt-%08lld.bin"), into
 * path; returns 1 if found, 0 if none. */
int mx_ckpt_latest(const char* dir, char* path, size_t n);

/* ---- limits ------------------------------------------------------------------- */

/* Bytes a run needs in RAM, by part (what mx_llama_create, mx_llama_alloc_acts,
 * the trainer and the linear layers' scratch allocate). Token shards are
 * mmap'ed (page cache) and not counted. */
typedef struct {
    int64_t params, grads, adam, acts, scratch, resume; /* resume: the loader's read buffer on --resume */
    int64_t total;
    int64_t ckpt_bytes;   /* one checkpoint file on disk */
} mx_mem_estimate;
void mx_train_estimate(const mx_train_config* c, mx_mem_estimate* e);
/* MemAvailable of /proc/meminfo in bytes (-1: unknown). */
int64_t mx_mem_available(void);

/* ---- test hooks ------------------------------------------------------------------ */

/* Crash points for the kill-and-resume tests. With MXLM_TEST_CRASH set to
 * "POINT@STEP[:ACTION]" (STEP a number or *), reaching POINT at STEP does
 * ACTION: kill (default: SIGKILL to itself), pause (a line on stderr, then
 * wait for a signal: the test kills it from outside), sleep=MS (slows it),
 * term / int (SIGTERM / SIGINT to itself: a graceful stop at a known moment).
 * Points: locked (STEP 0: the directory created and locked, nothing
 * written), start, step, update, metrics, eval, ckpt-open, ckpt-mid,
 * ckpt-written, ckpt-synced, ckpt-renamed, ckpt-pruned. */
void mx_crash_point(const char* point, int64_t step);

/* ---- telemetry ------------------------------------------------------------------ */

/* Zero the accumulated SQNR/clipping stats of every linear (keeps the FP8
 * amax history). */
void mx_telemetry_reset(mx_llama* mdl);
/* JSON lines (one per linear layer) of the accumulated stats, appended to f. */
int mx_telemetry_write(const mx_llama* mdl, int64_t step, void* file /* FILE* */);

/* Mean validation cross-entropy over the loader's first n_windows val
 * windows, in batches of B (n_windows a multiple of B). The model's linear
 * states are restored afterwards (evaluation does not touch FP8 history). */
int mx_evaluate(mx_llama* mdl, const mx_loader* val, int64_t n_windows, int B, int T, float* loss);
/* The loop of mx_evaluate for any engine: fn(ctx, inp [B, T], tgt [B, T], &mean loss) per batch;
 * *loss = the mean of the batch means (summed in double, in order). */
typedef int (*mx_batch_loss_fn)(void* ctx, const int32_t* inp, const int32_t* tgt, float* loss);
int mx_evaluate_batches(mx_batch_loss_fn fn, void* ctx, const mx_loader* val, int64_t n_windows, int B, int T,
                        float* loss);

#ifdef __cplusplus
}
#endif
#endif
