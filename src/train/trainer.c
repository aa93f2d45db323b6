/* trainer.c: the training loop and the run directory.
 *
 *   DIR/config.txt      the resolved configuration ("key = value", loadable with --config)
 *   DIR/metrics.jsonl   training, evaluation, telemetry and status lines
 *   DIR/ckpt-%08d.bin   checkpoints (checkpoint.c)
 *   DIR/summary.json    the outcome
 *   DIR/.lock           held (flock) while a trainer runs in DIR
 * Reliability (docs/reliability.md): limits checked before allocating, stale
 * temporaries of a killed run removed, --resume of a run killed before its
 * first checkpoint restarts it, non-finite / spike policies, final status.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "mxlm/data.h"
#include "mxlm/hf.h"
#include "mxlm/tokrec.h"
#include "mxlm/train.h"
#include "mxlm/util.h"
#ifdef MXLM_CUDA
#include "mxlm/gpu.h"
#include "mxlm/gpu_model.h"
#endif

void mx_train_config_default(mx_train_config* c) {
    memset(c, 0, sizeof *c);
    mx_model_preset("tiny", &c->model);
    snprintf(c->recipe, sizeof c->recipe, "mxfp4-fdw-h16");
    c->batch = 8;
    c->seq = 0; /* 0: the model's context */
    c->accum = 1;
    c->steps = 200;
    c->seed = 1;
    c->lr = 3e-3;
    c->min_lr_frac = 0.1;
    c->warmup = -1; /* -1: steps / 20 */
    c->adamw = (mx_adamw_config){0.9, 0.95, 1e-5, 0.1};
    c->clip = 1.0;
    snprintf(c->train, sizeof c->train, "%s", MX_TINY_TRAIN);
    snprintf(c->val, sizeof c->val, "%s", MX_TINY_VAL);
    c->val_tokens = 8192;
    c->eval_every = 25;
    c->ckpt_every = 0;
    c->telemetry_every = 0;
    c->target_loss = 0;
    c->keep_ckpts = 2;
    c->on_nonfinite = MX_NONFINITE_ABORT;
    c->max_skips = 10;
    c->spike_window = 50;
    c->spike_z = 6.0;
    c->gpus = 1;
    snprintf(c->out, sizeof c->out, "runs/tiny");
}

/* The shortest of %.15g / %.16g / %.17g that reads back to x exactly. */
static const char* dbl(char* b, double x) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(b, 32, "%.*g", prec, x);
        if (strtod(b, NULL) == x) break;
    }
    return b;
}

const char* const mx_device_names[] = {"auto", "cpu", "cuda", NULL};
const char* const mx_attn_names[] = {"auto", "flash", "gemm", "tf32", NULL};
const char* const mx_head_names[] = {"auto", "fp32", "bf16", NULL};
const char* const mx_gemm_names[] = {"fast", "exact", NULL};
const char* const mx_nonfinite_names[] = {"abort", "skip", NULL};

#define ADD(...) do { int k_ = snprintf(buf + (len < n ? len : n), len < n ? n - len : 0, __VA_ARGS__); \
                      if (k_ > 0) len += (size_t)k_; } while (0)

int mx_train_config_text(const mx_train_config* c, int trajectory_only, char* buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    const mx_model_config* m = &c->model;
    if (!trajectory_only) ADD("preset = %s\n", m->name);
    ADD("vocab = %d\ndim = %d\nlayers = %d\nheads = %d\nkv-heads = %d\nffn = %d\ncontext = %d\n", m->vocab, m->dim,
        m->n_layers, m->n_heads, m->n_kv_heads, m->ffn, m->seq_len);
    ADD("rope-theta = %.9g\nnorm-eps = %.9g\n", (double)m->rope_theta, (double)m->norm_eps);
    ADD("recipe = %s\nbf16-first = %d\nbf16-last = %d\n", c->recipe, c->bf16_first, c->bf16_last);
    ADD("batch = %d\nseq = %d\naccum = %d\nsteps = %lld\nseed = %llu\n", c->batch, c->seq, c->accum,
        (long long)c->steps, (unsigned long long)c->seed);
    char d[7][32];
    ADD("lr = %s\nmin-lr-frac = %s\nwarmup = %lld\n", dbl(d[0], c->lr), dbl(d[1], c->min_lr_frac), (long long)c->warmup);
    ADD("beta1 = %s\nbeta2 = %s\nadam-eps = %s\nweight-decay = %s\nclip = %s\n", dbl(d[2], c->adamw.beta1),
        dbl(d[3], c->adamw.beta2), dbl(d[4], c->adamw.eps), dbl(d[5], c->adamw.weight_decay), dbl(d[6], c->clip));
    ADD("train = %s\n", c->train);
    if (c->gpus > 1) ADD("gpus = %d\n", c->gpus); /* the step's batch is gpus x batch x accum */
    if (c->init_from[0]) ADD("init-from = %s\n", c->init_from);
    if (c->head == MX_HEAD_BF16) ADD("head = bf16\n"); /* resolved by mx_train_run; fp32 (the default) unwritten */
    if (!trajectory_only) {
        ADD("device = %s\ngemm = %s\nrecompute = %d\nattn = %s\n", mx_device_names[c->device],
            mx_gemm_names[c->gemm_exact != 0], c->recompute, mx_attn_names[c->attn]);
        ADD("val = %s\nval-tokens = %lld\n", c->val, (long long)c->val_tokens);
        ADD("eval-every = %lld\nckpt-every = %lld\ntelemetry-every = %lld\n", (long long)c->eval_every,
            (long long)c->ckpt_every, (long long)c->telemetry_every);
        ADD("target-loss = %s\nkeep-ckpts = %d\n", dbl(d[0], c->target_loss), c->keep_ckpts);
        ADD("on-nonfinite = %s\nmax-skips = %lld\nspike-window = %d\nspike-z = %s\nskip-spikes = %d\n",
            mx_nonfinite_names[c->on_nonfinite], (long long)c->max_skips, c->spike_window,
            dbl(d[1], c->spike_z), c->skip_spikes);
    }
    return (int)len;
}

/* ---- small file helpers -------------------------------------------------------- */

static int file_exists(const char* p) { struct stat st; return stat(p, &st) == 0; }

/* Keep metrics lines with "step" <= last and no status/summary line (resume). */
static int truncate_metrics(const char* path, int64_t last) {
    FILE* f = fopen(path, "r");
    if (!f) return MX_OK;
    size_t cap = 1 << 16, len = 0;
    char* out = malloc(cap);
    char* line = NULL;
    size_t lcap = 0;
    ssize_t k;
    int rc = MX_OK;
    while (out && (k = getline(&line, &lcap, f)) > 0) {
        const char* s = strstr(line, "\"step\":");
        if (!s || strstr(line, "\"status\"") || line[k - 1] != '\n') continue; /* a torn last line too */
        if (strtoll(s + 7, NULL, 10) > last) continue;
        if (len + (size_t)k + 1 > cap) {
            cap = (len + (size_t)k + 1) * 2;
            char* o2 = realloc(out, cap);
            if (!o2) { free(out); out = NULL; break; }
            out = o2;
        }
        memcpy(out + len, line, (size_t)k);
        len += (size_t)k;
    }
    free(line);
    fclose(f);
    if (!out) return mx_fail(MX_ENOMEM, "metrics: out of memory");
    rc = mx_write_atomic(path, out, len);
    free(out);
    return rc;
}

/* Remove all but the newest `keep` (>= 1) checkpoints; called only after the
 * newest was written and renamed, so at least one valid checkpoint remains. */
/* The last validation loss in a metrics file (NaN: none). */
static float last_val_loss(const char* path) {
    FILE* f = fopen(path, "r");
    float v = NAN;
    if (!f) return v;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char* s = strstr(line, "\"val_loss\":");
        if (s && !strstr(line, "\"event\"")) v = strncmp(s + 11, "null", 4) ? strtof(s + 11, NULL) : NAN;
    }
    fclose(f);
    return v;
}

static void prune_ckpts(const char* dir, int keep) {
    if (keep < 1) keep = 1;
    DIR* d = opendir(dir);
    if (!d) return;
    long long steps[4096];
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) && n < 4096) {
        if (strncmp(e->d_name, "ckpt-", 5)) continue;
        char* end = NULL;
        long long s = strtoll(e->d_name + 5, &end, 10);
        if (end != e->d_name + 5 && !strcmp(end, ".bin")) steps[n++] = s;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer >= keep) {
            char p[1200];
            snprintf(p, sizeof p, "%s/ckpt-%08lld.bin", dir, steps[i]);
            unlink(p);
        }
    }
}

/* Temporaries a killed trainer left ("NAME.tmp.PID" of our files); removed
 * while holding the directory's lock. Returns how many. */
static int remove_stale_temps(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        int probe = !strncmp(e->d_name, ".probe.", 7);
        if (!strstr(e->d_name, ".tmp.") && !probe) continue;
        int ours = probe || !strncmp(e->d_name, "ckpt-", 5) || !strncmp(e->d_name, "metrics.jsonl.", 14) ||
                   !strncmp(e->d_name, "summary.json.", 13) || !strncmp(e->d_name, "config.txt.", 11) ||
                   !strncmp(e->d_name, "tokenizer.txt.", 14);
        if (!ours) continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) == 0) n++;
    }
    closedir(d);
    return n;
}

/* Write, fsync and remove a small file: a directory that cannot take one
 * (permissions, read-only, full disk, file size limit) is reported now. */
static int probe_dir(const char* dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/.probe.%d", dir, (int)getpid());
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return mx_fail(MX_EIO, "%s: the run directory cannot be written: %s", dir, strerror(errno));
    static const char zeros[65536];
    int err = 0;
    size_t done = 0;
    while (done < sizeof zeros && !err) {
        ssize_t k = write(fd, zeros + done, sizeof zeros - done);
        if (k < 0 && errno != EINTR) err = errno;
        if (k > 0) done += (size_t)k;
    }
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    unlink(p);
    if (err) return mx_fail(MX_EIO, "%s: the run directory cannot be written (a 64 KiB test file failed: %s)", dir,
                            strerror(err));
    return MX_OK;
}

static double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void jnum(FILE* f, const char* key, double x) {
    if (isfinite(x)) fprintf(f, ",\"%s\":%.9g", key, x);
    else fprintf(f, ",\"%s\":null", key);
}

static void emit(mx_train_cb cb, void* user, mx_train_event ev) {
    if (cb) cb(&ev, user);
}

/* ---- the run --------------------------------------------------------------------- */

typedef struct {
    mx_train_config c;
    mx_llama model;
    mx_loader train, val;
    float *m, *v;         /* [n_params] AdamW moments */
    int32_t *inp, *tgt;   /* [B, T] */
    mx_linear_state* lsave; /* [L * 7] linear states before the step (restored when it is skipped) */
    FILE* metrics;
    int lock_fd;
    char fingerprint[8192];
    int64_t n_val;        /* validation windows */
    void* gpu;            /* mxg_llama* when the run is on the GPU (CUDA build), else NULL */
    /* data parallel (CUDA build, c.comm set): this rank of `world`; the AdamW moments of this rank's shard
     * ([nshard], host copies of the device's); rank 0 alone writes the run directory's files */
    int rank, world;
    float *sm, *sv;
    size_t nshard;
} run_state;

/* ---- the engine: the CPU model (mx_llama) or its GPU twin (mxg_llama) ------------
 * On the GPU the weights, gradients and AdamW moments live on the device; the
 * host model keeps a copy of the weights (and m, v) for checkpoints, refreshed
 * before each save. */
#ifdef MXLM_CUDA
#define GPU(r) ((mxg_llama*)(r)->gpu)
#endif

static int eng_zero_grad(run_state* r) {
#ifdef MXLM_CUDA
    if (r->gpu) return mxg_llama_zero_grad(GPU(r));
#endif
    mx_llama_zero_grad(&r->model);
    return MX_OK;
}

static int eng_micro_step(run_state* r, uint64_t step, float grad_scale, int last, float* loss) {
#ifdef MXLM_CUDA
    if (r->gpu) {
        if (r->c.comm) mxg_llama_set_sync(GPU(r), last); /* the last micro-batch reduces the gradients */
        return mxg_llama_forward_backward(GPU(r), r->inp, r->tgt, step, grad_scale, loss);
    }
#endif
    (void)last;
    r->model.step = step;
    int rc = mx_llama_forward(&r->model, r->inp, r->tgt, r->c.batch, r->c.seq, loss);
    return rc ? rc : mx_llama_backward(&r->model, r->inp, r->tgt, grad_scale);
}

/* Per-GEMM telemetry of the step's micro-batches: on before them (the CPU's stats were
 * reset by mx_telemetry_reset), off after; on the GPU the device totals are then
 * copied into model.lstate[].op, where mx_telemetry_write reads them. */
static int eng_telemetry(run_state* r, int on) {
    r->model.telemetry = on;
#ifdef MXLM_CUDA
    if (r->gpu) {
        int rc = mxg_llama_set_telemetry(GPU(r), on);
        if (!rc && !on) rc = mxg_llama_telemetry_read(GPU(r), r->model.lstate);
        return rc;
    }
#endif
    return MX_OK;
}

static int eng_grad_sumsq(run_state* r, double* ss) {
#ifdef MXLM_CUDA
    if (r->gpu) return mxg_llama_grad_sumsq(GPU(r), ss);
#endif
    *ss = mx_sum_squares(r->model.grads, r->model.n_params);
    return MX_OK;
}

static int eng_adamw(run_state* r, double lr, float gscale, int64_t t) {
#ifdef MXLM_CUDA
    if (r->gpu) return mxg_llama_adamw(GPU(r), &r->c.adamw, lr, gscale, t);
#endif
    mx_adamw_update(&r->model, r->m, r->v, &r->c.adamw, lr, gscale, t);
    return MX_OK;
}

/* Test hooks: one weight (which 0) or gradient (1) element. */
static int eng_poke(run_state* r, int which, size_t off, float val) {
#ifdef MXLM_CUDA
    if (r->gpu) return mxg_llama_poke(GPU(r), which, off, val);
#endif
    (which ? r->model.grads : r->model.params)[off] = val;
    return MX_OK;
}

/* The host copy of the weights and moments made current (before a checkpoint). */
static int eng_to_host(run_state* r) {
#ifdef MXLM_CUDA
    if (r->gpu) return mxg_llama_download(GPU(r), r->model.params, r->sm ? r->sm : r->m, r->sv ? r->sv : r->v);
#endif
    (void)r;
    return MX_OK;
}

#ifdef MXLM_CUDA
static int gpu_batch_loss(void* g, const int32_t* inp, const int32_t* tgt, float* loss) {
    return mxg_llama_loss((mxg_llama*)g, inp, tgt, 0, loss, NULL);
}
#endif

static int eng_evaluate(run_state* r, float* loss) {
#ifdef MXLM_CUDA
    if (r->gpu) return mx_evaluate_batches(gpu_batch_loss, r->gpu, &r->val, r->n_val, r->c.batch, r->c.seq, loss);
#endif
    return mx_evaluate(&r->model, &r->val, r->n_val, r->c.batch, r->c.seq, loss);
}

int mx_train_gpu_attn(const mx_train_config* c) {
    switch (c->attn) {
    case MX_ATTN_FLASH: return 0;
    case MX_ATTN_GEMM: return 1;
    case MX_ATTN_TF32: return 2;
    default: return 2; /* auto: TF32 tensor cores through cuBLASLt (the spec allows reduced-precision attention products) */
    }
}

/* Decide where the run goes: 1 GPU, 0 CPU, or an error. */
static int eng_pick_device(const mx_train_config* c, const mx_recipe* rec, char* what, size_t n) {
#ifdef MXLM_CUDA
    char info[512];
    int have = mxg_device_info(info, sizeof info) == 0;
    if (c->device == MX_DEVICE_CUDA && !have)
        return mx_fail(MX_EINVAL, "train: --device cuda: no usable GPU: %s", info);
    if (c->device == MX_DEVICE_CPU || !have) {
        snprintf(what, n, "device: CPU%s", c->device == MX_DEVICE_AUTO ? " (no usable GPU: " : "");
        if (c->device == MX_DEVICE_AUTO) {
            size_t k = strlen(what);
            snprintf(what + k, n - k, "%s)", info);
        }
        return 0;
    }
    if (rec->fp8_scaling == MX_FP8_DELAYED && mx_recipe_uses(rec, MX_FMT_FP8))
        return mx_fail(MX_EINVAL, "train: recipe %s: FP8 delayed scaling is CPU-only for now (use --device cpu, or "
                                  "fp8 with current scaling)", c->recipe);
    for (int g = 0; g < 3; g++)
        if (rec->g[g].had_n && rec->g[g].fmt != MX_FMT_MXFP4)
            return mx_fail(MX_EINVAL, "train: recipe %s: the GPU rotates MXFP4 operands only (use --device cpu)",
                           c->recipe);
    snprintf(what, n, "device: GPU %s; MXFP4 GEMMs %s", info,
             c->gemm_exact ? "exact (dequantized to BF16, BF16 GEMM)" : "fast (E4M3 fold, FP8 GEMM)");
    return 1;
#else
    if (c->device == MX_DEVICE_CUDA)
        return mx_fail(MX_EINVAL, "train: --device cuda: this mxlm was built without CUDA (build it with make cuda)");
    (void)rec;
    snprintf(what, n, "device: CPU");
    return 0;
#endif
}

static void run_free(run_state* r) {
    if (r->metrics) fclose(r->metrics);
    r->metrics = NULL;
#ifdef MXLM_CUDA
    if (r->gpu) mxg_llama_free(GPU(r));
#endif
    r->gpu = NULL;
    mx_llama_free(&r->model);
    if (r->train.shards) mx_loader_close(&r->train);
    if (r->val.shards) mx_loader_close(&r->val);
    free(r->m);
    free(r->v);
    free(r->inp);
    free(r->tgt);
    free(r->lsave);
    free(r->sm);
    free(r->sv);
    if (r->lock_fd > 0) close(r->lock_fd); /* releases the flock */
    r->lock_fd = -1;
}

static int metrics_flush(run_state* r) {
    if (fflush(r->metrics) != 0 || ferror(r->metrics))
        return mx_fail(MX_EIO, "%s/metrics.jsonl: cannot write: %s", r->c.out, strerror(errno));
    return MX_OK;
}

static int do_eval(run_state* r, int64_t step, int64_t tokens, float* out, mx_train_result* res, mx_train_cb cb,
                   void* user, double t0) {
    float vl = 0.0f;
    int rc = eng_evaluate(r, &vl);
    if (rc) return rc;
    fprintf(r->metrics, "{\"step\":%lld,\"tokens\":%lld", (long long)step, (long long)tokens);
    jnum(r->metrics, "val_loss", vl);
    fprintf(r->metrics, "}\n");
    if (r->c.target_loss > 0 && res->tokens_to_target < 0 && vl <= r->c.target_loss) {
        res->tokens_to_target = tokens;
        fprintf(r->metrics, "{\"event\":\"target\",\"step\":%lld,\"tokens\":%lld", (long long)step, (long long)tokens);
        jnum(r->metrics, "val_loss", vl);
        jnum(r->metrics, "target_loss", r->c.target_loss);
        fprintf(r->metrics, "}\n");
    }
    rc = metrics_flush(r);
    if (rc) return rc;
    mx_crash_point("eval", step);
    *out = vl;
    emit(cb, user, (mx_train_event){.kind = 1, .step = step, .steps = r->c.steps, .tokens = tokens, .val_loss = vl,
                                    .elapsed_s = now_s() - t0});
    return MX_OK;
}

static const char* fnum(char* b, size_t n, double x) {
    if (isfinite(x)) snprintf(b, n, "%.9g", x); else snprintf(b, n, "null"); /* NaN is not JSON */
    return b;
}

static int64_t peak_rss(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (int64_t)u.ru_maxrss * 1024 : -1;
}

/* s as the inside of a JSON string. */
static const char* jstr(char* out, size_t n, const char* s) {
    size_t k = 0;
    for (; *s && k + 7 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') { out[k++] = '\\'; out[k++] = (char)ch; }
        else if (ch < 0x20) k += (size_t)snprintf(out + k, n - k, "\\u%04x", ch);
        else out[k++] = (char)ch;
    }
    out[k] = 0;
    return out;
}

/* The status line of metrics.jsonl and summary.json (best effort: the run's
 * outcome is also the return value and the exit status). */
static void write_outcome(run_state* r, mx_train_result* res, int64_t mem_est) {
    if (r->rank) return; /* rank 0 writes the run's outcome */
    char why[1200];
    jstr(why, sizeof why, res->reason);
    if (r->metrics) {
        fprintf(r->metrics, "{\"status\":\"%s\",\"step\":%lld,\"tokens\":%lld,\"reason\":\"%s\"}\n", res->status,
                (long long)res->step, (long long)res->tokens, why);
        fflush(r->metrics);
    }
    char buf[4096], a[32], b[32], t[32];
    int k = snprintf(buf, sizeof buf,
                     "{\"status\":\"%s\",\"reason\":\"%s\",\"step\":%lld,\"tokens\":%lld,\"val_loss0\":%s,\"val_loss\":%s,"
                     "\"tokens_to_target\":%lld,\"seconds\":%.3f,\"tok_per_s\":%s,\"recipe\":\"%s\",\"preset\":\"%s\","
                     "\"skipped_nonfinite\":%lld,\"skipped_spikes\":%lld,\"spikes\":%lld,"
                     "\"mem_estimate_bytes\":%lld,\"peak_rss_bytes\":%lld}\n",
                     res->status, why, (long long)res->step, (long long)res->tokens,
                     fnum(a, sizeof a, res->val_loss0), fnum(b, sizeof b, res->val_loss),
                     (long long)res->tokens_to_target, res->seconds, fnum(t, sizeof t, res->tok_per_s), r->c.recipe,
                     r->c.model.name, (long long)res->skipped_nonfinite, (long long)res->skipped_spikes,
                     (long long)res->spikes, (long long)mem_est, (long long)peak_rss());
    if (k < 0 || k >= (int)sizeof buf) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.json", r->c.out);
    mx_write_atomic(path, buf, (size_t)k);
}

/* Append loss to the window of the last W (oldest first). */
static void window_push(mx_ckpt_meta* mt, int W, float loss) {
    if (W <= 0) return;
    if (mt->n_window > W) {
        memmove(mt->window, mt->window + (mt->n_window - W), sizeof(float) * (size_t)W);
        mt->n_window = W;
    }
    if (mt->n_window == W) {
        memmove(mt->window, mt->window + 1, sizeof(float) * (size_t)(W - 1));
        mt->n_window = W - 1;
    }
    mt->window[mt->n_window++] = loss;
}

/* z-score of loss against a full window of the last W losses (0 otherwise). */
static double window_z(const mx_ckpt_meta* mt, int W, float loss, double* mean, double* sd) {
    *mean = *sd = 0.0;
    if (W <= 1 || mt->n_window < W) return 0.0;
    const float* w = mt->window + (mt->n_window - W);
    double s = 0.0, s2 = 0.0;
    for (int i = 0; i < W; i++) s += w[i];
    *mean = s / W;
    for (int i = 0; i < W; i++) s2 += (w[i] - *mean) * (w[i] - *mean);
    *sd = sqrt(s2 / W);
    return *sd > 0 ? (loss - *mean) / *sd : 0.0;
}

/* ---- data parallel (CUDA build): collectives of the trainer and the checkpoint ----
 * A checkpoint of a run over W > 1 GPUs: each rank r > 0 writes its shard of
 * the AdamW moments to CKPT.rank<r> (fsync, rename); once all are written,
 * rank 0 assembles the full moments from them and its own shard and writes
 * CKPT, the usual single file (it is the completion marker: a directory
 * without it has no checkpoint at that step); then the shard files are
 * removed. A checkpoint is thus the same file whatever the GPU count. */
#ifdef MXLM_CUDA
#define SHARD_MAGIC "MXLMSHD1"
typedef struct {
    char magic[8];
    int64_t step;
    int32_t world, rank;
    uint64_t nshard;
    uint32_t crc, pad;
} shard_header;

/* CRC-32 of a shard file's payload (the moments after the header). */
static uint32_t shard_crc(const char* buf, size_t n) {
    return (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef*)buf + sizeof(shard_header), (uInt)(2 * n * 4));
}

/* A collective: every rank's rc; an error when any rank failed. */
static int dp_all_ok(run_state* r, int rc) {
    if (!r->c.comm) return rc;
    double mine = rc ? 1.0 : 0.0, all[64];
    int e = mxg_comm_allgather_host((mxg_comm*)r->c.comm, &mine, all, 8);
    if (rc || e) return rc ? rc : e;
    for (int q = 0; q < r->world; q++)
        if (all[q] != 0.0) return mx_fail(MX_EIO, "data parallel: rank %d failed (its log says why)", q);
    return MX_OK;
}

static int dp_write_shard(run_state* r, const char* path, int64_t step) {
    size_t n = r->nshard, bytes = sizeof(shard_header) + 2 * n * 4;
    char* buf = malloc(bytes);
    if (!buf) return mx_fail(MX_ENOMEM, "checkpoint: out of memory for the moment shard");
    shard_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, SHARD_MAGIC, 8);
    h.step = step;
    h.world = r->world;
    h.rank = r->rank;
    h.nshard = n;
    memcpy(buf + sizeof h, r->sm, n * 4);
    memcpy(buf + sizeof h + n * 4, r->sv, n * 4);
    h.crc = shard_crc(buf, n);
    memcpy(buf, &h, sizeof h);
    int rc = mx_write_atomic(path, buf, bytes);
    free(buf);
    return rc;
}

/* Rank 0: the full moments from every rank's shard (rank 0's own in r->sm/sv). */
static int dp_gather_moments(run_state* r, const char* ckpt, int64_t step) {
    mxg_llama* g = GPU(r);
    int rc = mxg_llama_shard_copy(g, 0, r->m, r->sm, 1);
    if (!rc) rc = mxg_llama_shard_copy(g, 0, r->v, r->sv, 1);
    size_t n = r->nshard, bytes = sizeof(shard_header) + 2 * n * 4;
    char* buf = rc ? NULL : malloc(bytes);
    if (!rc && !buf) rc = mx_fail(MX_ENOMEM, "checkpoint: out of memory for a moment shard");
    for (int q = 1; q < r->world && !rc; q++) {
        char p[1300];
        snprintf(p, sizeof p, "%s.rank%d", ckpt, q);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) { rc = mx_fail(MX_EIO, "%s: cannot open: %s", p, strerror(errno)); break; }
        rc = mx_pread_all(fd, buf, bytes, 0);
        close(fd);
        if (rc) break;
        shard_header h;
        memcpy(&h, buf, sizeof h);
        if (memcmp(h.magic, SHARD_MAGIC, 8) || h.step != step || h.world != r->world || h.rank != q || h.nshard != n ||
            h.crc != shard_crc(buf, n))
            rc = mx_fail(MX_EFORMAT, "%s: not rank %d's moment shard of step %lld (or corrupt)", p, q, (long long)step);
        if (!rc) rc = mxg_llama_shard_copy(g, q, r->m, (float*)(buf + sizeof h), 1);
        if (!rc) rc = mxg_llama_shard_copy(g, q, r->v, (float*)(buf + sizeof h + n * 4), 1);
    }
    free(buf);
    return rc;
}
#endif

/* Save the checkpoint of step k at `path` (host copies made current first). */
static int save_ckpt(run_state* r, const char* path, mx_ckpt_meta* meta) {
    int rc = eng_to_host(r);
#ifdef MXLM_CUDA
    if (r->world > 1) {
        char sp[1300];
        snprintf(sp, sizeof sp, "%s.rank%d", path, r->rank);
        if (!rc && r->rank) rc = dp_write_shard(r, sp, meta->step);
        rc = dp_all_ok(r, rc); /* every shard is on disk */
        if (!rc && !r->rank) rc = dp_gather_moments(r, path, meta->step);
        if (!rc && !r->rank) rc = mx_ckpt_save(path, &r->model, r->m, r->v, meta, r->fingerprint);
        rc = dp_all_ok(r, rc); /* the checkpoint is complete */
        if (r->rank) unlink(sp);
        return rc;
    }
#endif
    return rc ? rc : mx_ckpt_save(path, &r->model, r->m, r->v, meta, r->fingerprint);
}

int mx_train_run(const mx_train_config* cfg, mx_train_result* res, mx_train_cb cb, void* user) {
    run_state R;
    memset(&R, 0, sizeof R);
    R.lock_fd = -1;
    run_state* r = &R;
    r->c = *cfg;
    mx_train_config* c = &r->c;
    memset(res, 0, sizeof *res);
    res->status = "error";
    res->reason = "";
    res->tokens_to_target = -1;
    res->val_loss0 = res->val_loss = NAN;
    r->world = 1;
#ifdef MXLM_CUDA
    if (c->comm) {
        r->world = mxg_comm_world((mxg_comm*)c->comm);
        r->rank = mxg_comm_rank((mxg_comm*)c->comm);
    }
#endif
    if (c->gpus < 1) c->gpus = 1;
    if (!c->comm && c->gpus > 1)
        return mx_fail(MX_EINVAL, "train: gpus = %d needs the NCCL engine (mxlm train --gpus N, or mpirun; CUDA "
                                  "build)", c->gpus);
    if (c->comm && c->gpus != r->world)
        return mx_fail(MX_EINVAL, "train: gpus = %d but %d ranks were started", c->gpus, r->world);
    const int io = r->rank == 0; /* rank 0 writes the run directory */
    if (c->seq <= 0) c->seq = c->model.seq_len;
    if (c->warmup < 0) c->warmup = c->steps / 20 > 0 ? c->steps / 20 : 1;
    if (c->batch <= 0 || c->accum <= 0 || c->steps <= 0)
        return mx_fail(MX_EINVAL, "train: batch, accum and steps must be positive");
    if (c->seq > c->model.seq_len)
        return mx_fail(MX_EINVAL, "train: seq %d exceeds the model's context %d", c->seq, c->model.seq_len);
    if (c->keep_ckpts < 1)
        return mx_fail(MX_EINVAL, "train: --keep %d: at least 1 checkpoint must be kept", c->keep_ckpts);
    if (c->spike_window < 0 || c->spike_window == 1 || c->spike_window > MX_SPIKE_WINDOW_MAX)
        return mx_fail(MX_EINVAL, "train: --spike-window %d: 0 (off) or 2..%d", c->spike_window, MX_SPIKE_WINDOW_MAX);
    if (!(c->spike_z > 0)) return mx_fail(MX_EINVAL, "train: --spike-z must be positive");
    if (c->max_skips < 0) return mx_fail(MX_EINVAL, "train: --max-skips must be >= 0");
    const int B = c->batch, T = c->seq;
    const int W = r->world;
    const int64_t tok_step = (int64_t)B * T * c->accum * W;

    mx_recipe recipe;
    int rc = mx_recipe_parse(c->recipe, &recipe);
    if (rc) return rc;
    rc = mx_model_config_check(&c->model);
    if (rc) return rc;
    mx_train_config_text(c, 1, r->fingerprint, sizeof r->fingerprint);
    char msg[1600];
    const int on_gpu = eng_pick_device(c, &recipe, msg, sizeof msg);
    if (on_gpu < 0) return on_gpu;
    if (c->comm && !on_gpu) return mx_fail(MX_EINVAL, "train: the NCCL engine (--gpus, --nccl) needs --device cuda");
    emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    if (c->head == MX_HEAD_AUTO) { /* BF16 tensor cores for the head on the GPU, unless the recipe is all FP32 */
        int all32 = 1;
        for (int g = 0; g < 3; g++) all32 &= recipe.g[g].fmt == MX_FMT_FP32;
        c->head = on_gpu && !(all32 && c->bf16_first == 0 && c->bf16_last == 0) ? MX_HEAD_BF16 : MX_HEAD_FP32;
        mx_train_config_text(c, 1, r->fingerprint, sizeof r->fingerprint);
    }
    /* limits: memory, before anything is allocated or created */
    mx_mem_estimate est;
    mx_train_config ce = *c;
    char peek[1200];
    ce.resume = c->resume && mx_ckpt_latest(c->out, peek, sizeof peek);
    const int resume_est = ce.resume;
    mx_train_estimate(&ce, &est);
    if (on_gpu) { /* the host keeps the weights, moments (and an unused gradient array) only */
        est.acts = est.scratch = 0;
        est.total = est.params + est.grads + est.adam + est.resume;
    }
#ifdef MXLM_CUDA
    if (on_gpu) {
        mxg_mem_estimate ge;
        mxg_llama_estimate(&c->model, B, T, c->recompute, mx_train_gpu_attn(c), &ge);
        if (W > 1) { /* ZeRO-1: this GPU's shard of the moments */
            ge.total -= ge.adam - ge.adam / W;
            ge.adam /= W;
        }
        int64_t gfree = 0, gtotal = 0;
        int have = mxg_mem_info(&gfree, &gtotal) == 0;
        snprintf(msg, sizeof msg, "GPU memory: %.1f MiB estimated (weights %.1f, gradients %.1f, AdamW %.1f, "
                 "activations %.1f%s, scratch %.1f), %.0f MiB free of %.0f", mib(ge.total), mib(ge.params),
                 mib(ge.grads), mib(ge.adam), mib(ge.acts), c->recompute ? " with recompute" : "", mib(ge.scratch),
                 mib(gfree), mib(gtotal));
        emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
        if (have && ge.total > gfree && !c->ignore_limits) {
            mx_fail(MX_ENOMEM, "train: %s with batch %d x %d needs about %.1f MiB of GPU memory (weights %.1f, "
                    "gradients %.1f, AdamW %.1f, activations %.1f, scratch %.1f MiB) but %.1f MiB are free; use a "
                    "smaller --batch/--seq, --recompute 1, another preset, or --ignore-limits", c->model.name, B, T,
                    mib(ge.total), mib(ge.params), mib(ge.grads), mib(ge.adam), mib(ge.acts), mib(ge.scratch),
                    mib(gfree));
            return MX_LIMITS;
        }
    }
#endif
    int64_t avail = c->mem_limit > 0 ? c->mem_limit : mx_mem_available();
    char rpart[64] = "";
    if (resume_est) snprintf(rpart, sizeof rpart, ", checkpoint read %.1f", mib(est.resume));
    char apart[96];
    if (avail >= 0) snprintf(apart, sizeof apart, "%s %.0f MiB", c->mem_limit > 0 ? "limit" : "available", mib(avail));
    else snprintf(apart, sizeof apart, "available memory unknown");
    snprintf(msg, sizeof msg,
             "memory: %.1f MiB estimated (parameters %.1f, gradients %.1f, AdamW %.1f, activations %.1f, scratch %.1f%s), "
             "%s; a checkpoint is %.1f MiB",
             mib(est.total), mib(est.params), mib(est.grads), mib(est.adam), mib(est.acts), mib(est.scratch), rpart,
             apart, mib(est.ckpt_bytes));
    emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    if (avail >= 0 && est.total > avail) {
        if (!c->ignore_limits) {
            mx_fail(MX_ENOMEM,
                    "train: %s with batch %d x %d needs about %.1f MiB of memory (parameters %.1f, gradients %.1f, "
                    "AdamW %.1f, activations %.1f, scratch %.1f MiB) but %.1f MiB are available (%s); use a smaller "
                    "--batch/--seq or preset, or --ignore-limits",
                    c->model.name, B, T, mib(est.total), mib(est.params), mib(est.grads), mib(est.adam),
                    mib(est.acts), mib(est.scratch), mib(avail),
                    c->mem_limit > 0 ? "--mem-limit-mib" : "MemAvailable in /proc/meminfo");
            return MX_LIMITS;
        }
        emit(cb, user, (mx_train_event){.kind = 2, .msg = "warning: the estimate exceeds the available memory "
                                                          "(--ignore-limits: going on)"});
    }
    /* the run directory: created, locked, probed with a small write */
    if (c->resume && !file_exists(c->out)) return mx_fail(MX_EINVAL, "train: --resume: no checkpoint in %s", c->out);
    rc = mx_mkdirs(c->out);
    if (rc) return rc;
    char latest[1200], mpath[1200], cpath[1200];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", c->out);
    snprintf(cpath, sizeof cpath, "%s/config.txt", c->out);
    int have_ckpt = 0;
    int resume = 0, restart = 0;
    if (!io) { /* rank 0 checked the directory; the checkpoints are the same files for all */
        have_ckpt = mx_ckpt_latest(c->out, latest, sizeof latest);
        resume = c->resume && have_ckpt;
        goto dir_done;
    }
    char lpath[1200];
    snprintf(lpath, sizeof lpath, "%s/.lock", c->out);
    const int had_lock = file_exists(lpath); /* a trainer started here before */
    r->lock_fd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (r->lock_fd < 0) return mx_fail(MX_EIO, "%s: the run directory cannot be written: %s", c->out, strerror(errno));
    if (flock(r->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        run_free(r);
        return mx_fail(MX_EINVAL, "train: another mxlm train is running in %s", c->out);
    }
    rc = probe_dir(c->out);
    if (rc) { run_free(r); return rc; }
    mx_crash_point("locked", 0);

    /* refuse before touching anything in the run directory */
    have_ckpt = mx_ckpt_latest(c->out, latest, sizeof latest);
    /* restart: --resume of a run killed before its first checkpoint (or before any file) */
    if (c->resume && !have_ckpt) {
        if (!file_exists(mpath) && !file_exists(cpath) && !had_lock) {
            run_free(r);
            return mx_fail(MX_EINVAL, "train: --resume: no checkpoint in %s", c->out);
        }
        restart = 1;
    }
    if (!c->resume && (have_ckpt || file_exists(mpath))) {
        run_free(r);
        return mx_fail(MX_EINVAL, "train: %s already holds a run (use --resume to continue it, or another --out)",
                       c->out);
    }
    resume = c->resume && !restart;

    /* disk: room for one checkpoint at least */
    struct statvfs sv;
    if (statvfs(c->out, &sv) == 0) {
        int64_t free_b = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
        if (free_b < est.ckpt_bytes && !c->ignore_limits) {
            run_free(r);
            mx_fail(MX_EIO, "train: %s has %.1f MiB free, less than one checkpoint (%.1f MiB); free space or use "
                            "--ignore-limits", c->out, mib(free_b), mib(est.ckpt_bytes));
            return MX_LIMITS;
        }
        if (free_b < (int64_t)(c->keep_ckpts + 1) * est.ckpt_bytes) {
            snprintf(msg, sizeof msg, "warning: %s has %.1f MiB free, less than %d checkpoints (--keep %d, plus the one "
                     "being written) of %.1f MiB", c->out, mib(free_b), c->keep_ckpts + 1, c->keep_ckpts,
                     mib(est.ckpt_bytes));
            emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
        }
    }
dir_done:
    rc = mx_llama_create(&r->model, &c->model, &recipe, c->bf16_first, c->bf16_last, c->seed);
    r->model.head_bf16 = c->head == MX_HEAD_BF16;
    if (!rc && !on_gpu) rc = mx_llama_alloc_acts(&r->model, B, T);
    if (!rc) rc = mx_loader_open(&r->train, c->train, T, c->model.vocab);
    if (!rc) rc = mx_loader_open(&r->val, c->val, T, c->model.vocab);
    if (rc) { run_free(r); return rc; }
    int64_t nv = mx_loader_n_val_windows(&r->val), want = c->val_tokens / T;
    if (want > nv) want = nv;
    r->n_val = want / B * B;
    if (r->n_val <= 0) {
        run_free(r);
        return mx_fail(MX_EINVAL, "train: the validation set (%s) has %lld windows of %d, fewer than one batch of %d",
                       c->val, (long long)nv, T, B);
    }
    size_t np = r->model.n_params;
    size_t nls = (size_t)c->model.n_layers * MX_LIN_PER_BLOCK;
    r->m = calloc(np, sizeof(float));
    r->v = calloc(np, sizeof(float));
    r->inp = malloc(sizeof(int32_t) * B * T);
    r->tgt = malloc(sizeof(int32_t) * B * T);
    r->lsave = malloc(sizeof(mx_linear_state) * nls);
    if (!r->m || !r->v || !r->inp || !r->tgt || !r->lsave) {
        run_free(r);
        return mx_fail(MX_ENOMEM, "train: out of memory");
    }

    static mx_ckpt_meta meta; /* large (the loss window); one run at a time per process */
    memset(&meta, 0, sizeof meta);
    meta.tokens_to_target = -1;
    meta.val_loss0 = NAN;
    if (resume) {
        rc = mx_ckpt_load(latest, &r->model, r->m, r->v, &meta, r->fingerprint);
        if (rc) { run_free(r); return rc; }
        res->tokens_to_target = meta.tokens_to_target;
        res->val_loss0 = meta.val_loss0;
    } else if (c->init_from[0]) {
        rc = mx_hf_load(c->init_from, &r->model); /* checks config.json against the model; nothing loaded on refusal */
        if (rc) { run_free(r); return rc; }
        snprintf(msg, sizeof msg, "initial weights from %s", c->init_from);
        emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    } else {
        mx_llama_init_weights(&r->model, c->seed);
    }
#ifdef MXLM_CUDA
    if (on_gpu) {
        mxg_llama* g = NULL;
        rc = mxg_llama_create_dist(&g, &c->model, &recipe, c->bf16_first, c->bf16_last, c->seed, B, T, c->gemm_exact,
                                   c->recompute, mx_train_gpu_attn(c), (mxg_comm*)c->comm);
        r->gpu = g;
        if (!rc && W > 1) { /* this rank's shard of the moments (zero, or from the checkpoint) */
            r->nshard = mxg_llama_shard_size(g);
            r->sm = malloc(r->nshard * 4);
            r->sv = malloc(r->nshard * 4);
            if (!r->sm || !r->sv) rc = mx_fail(MX_ENOMEM, "train: out of memory");
            if (!rc) rc = mxg_llama_shard_copy(g, r->rank, r->m, r->sm, 0);
            if (!rc) rc = mxg_llama_shard_copy(g, r->rank, r->v, r->sv, 0);
        }
        if (!rc) rc = mxg_llama_upload(g, r->model.params, r->sm ? r->sm : r->m, r->sv ? r->sv : r->v);
        if (!rc) rc = mxg_llama_set_head_bf16(g, c->head == MX_HEAD_BF16);
        r->gpu = g;
        if (rc) { run_free(r); return rc; }
    }
#endif
    int stale = io ? remove_stale_temps(c->out) : 0;
    if (resume && io) rc = truncate_metrics(mpath, meta.step);
    if (resume && !rc) res->val_loss = last_val_loss(mpath); /* a run resumed at its end reports it */
    else if (restart && io) rc = truncate_metrics(mpath, -1);
    char text[8192];
    int tl = mx_train_config_text(c, 0, text, sizeof text);
    if (!rc && io) rc = mx_write_atomic(cpath, text, (size_t)(tl < (int)sizeof text ? tl : (int)sizeof text - 1));
    /* the tokenizer of the training shards (tokrec.h) for eval / sample: RUN/tokenizer.txt */
    if (!rc && io && !resume && r->train.n > 0) {
        int tr = mx_tokrec_record_run(c->out, &r->train.shards[0]);
        if (tr < 0) rc = tr;
    }
    if (rc) { run_free(r); return rc; }
    r->metrics = fopen(io ? mpath : "/dev/null", "a"); /* other ranks: their lines go nowhere */
    if (!r->metrics) { run_free(r); return mx_fail(MX_EIO, "%s: cannot open: %s", mpath, strerror(errno)); }

    snprintf(msg, sizeof msg, "%s %s: %lld parameters, %lld tokens/step (%d x %d x %d), %lld val tokens%s",
             c->model.name, c->recipe, (long long)np, (long long)tok_step, B, T, c->accum, (long long)(r->n_val * T),
             resume ? ", resumed" : "");
    emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    if (stale) {
        snprintf(msg, sizeof msg, "removed %d temporary file%s left by an interrupted run", stale, stale > 1 ? "s" : "");
        emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    }
    if (resume) {
        snprintf(msg, sizeof msg, "resumed from %s (step %lld)", latest, (long long)meta.step);
        emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    } else if (restart) {
        snprintf(msg, sizeof msg, "no checkpoint in %s yet (the run stopped before its first one): restarting from step 0",
                 c->out);
        emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    }

    double t0 = now_s(), train_s = 0.0;
    int64_t step = meta.step, sample = meta.sample, tokens = meta.tokens, tokens_this_run = 0;
    res->skipped_nonfinite = meta.skipped_nonfinite;
    res->skipped_spikes = meta.skipped_spikes;
    res->spikes = meta.spikes;
    int64_t mem_est = est.total;
    float vl = NAN;
    if (!resume) {
        rc = do_eval(r, 0, 0, &vl, res, cb, user, t0);
        if (rc) goto fail;
        meta.val_loss0 = res->val_loss0 = vl;
        res->val_loss = vl;
        if (!isfinite(vl)) { res->reason = "non-finite validation loss"; goto diverged; }
    }
    mx_crash_point("start", step);
    mx_llama* M = &r->model;
    while (step < c->steps) {
        int64_t k = step + 1; /* this update */
        double ts = now_s();
        if (c->debug_nan_at == k) rc = eng_poke(r, 0, M->info[MX_P_WQ].offset, NAN);
        int tele = c->telemetry_every > 0 && k % c->telemetry_every == 0;
        if (tele) mx_telemetry_reset(M);
        if (tele && !rc) rc = eng_telemetry(r, 1);
        memcpy(r->lsave, M->lstate, sizeof(mx_linear_state) * nls);
        if (!rc) rc = eng_zero_grad(r);
        double lsum = 0.0;
        const int64_t sample0 = sample;
        for (int a = 0; a < c->accum; a++) {
            /* the global micro-batch: rank r's a-th is a one-GPU run's (a*W + r)-th of this step */
            const int64_t u = (int64_t)a * W + r->rank;
            uint64_t mstep = (uint64_t)(k - 1) * (uint64_t)c->accum * (uint64_t)W + (uint64_t)u;
            for (int b = 0; b < B && !rc; b++)
                rc = mx_loader_window(&r->train, mx_loader_sample(&r->train, c->seed, sample0 + u * B + b),
                                      r->inp + b * T, r->tgt + b * T);
            if (c->debug_spike_at == k) /* test hook: targets scrambled, a real loss spike */
                for (int i = 0; i < B * T; i++)
                    r->tgt[i] = (int32_t)(((uint32_t)i * 2654435761u + (uint32_t)k * 40503u) % (uint32_t)c->model.vocab);
            float lo = 0.0f;
            if (!rc) rc = eng_micro_step(r, mstep, 1.0f / (float)tok_step, a == c->accum - 1, &lo);
            if (rc) goto fail;
            lsum += lo;
        }
        sample = sample0 + (int64_t)c->accum * W * B;
        if (tele && !rc) rc = eng_telemetry(r, 0);
        if (rc) goto fail;
        if (c->debug_nan_grad_at == k) rc = eng_poke(r, 1, M->info[MX_P_WO].offset, NAN);
        mx_crash_point("step", k);
        double ss = 0.0;
        if (!rc) rc = eng_grad_sumsq(r, &ss); /* with NCCL: after the step's reductions (one collective at a time) */
        if (rc) goto fail;
#ifdef MXLM_CUDA
        if (c->comm) { /* the step's loss: every rank's sum, added in rank order */
            double all[64];
            rc = mxg_comm_allgather_host((mxg_comm*)c->comm, &lsum, all, 8);
            if (rc) goto fail;
            lsum = 0.0;
            for (int q = 0; q < W; q++) lsum += all[q];
        }
#endif
        float loss = (float)(lsum / ((double)c->accum * W));
        double gn = sqrt(ss);
        double lr = mx_lr_at(k - 1, c->steps, c->warmup, c->lr, c->min_lr_frac);
        int bad = !isfinite(loss) || !isfinite(gn);
        const char* skipped = NULL;
        int spike = 0;
        double z = 0, zmean = 0, zsd = 0;
        if (bad) {
            if (c->on_nonfinite == MX_NONFINITE_SKIP) {
                skipped = "nonfinite";
                meta.skipped_nonfinite++;
            }
        } else {
            z = window_z(&meta, c->spike_window, loss, &zmean, &zsd);
            spike = z > c->spike_z;
            if (spike) {
                meta.spikes++;
                if (c->skip_spikes) { skipped = "spike"; meta.skipped_spikes++; }
            }
        }
        if (!bad && !skipped) {
            float gscale = (c->clip > 0 && gn > c->clip) ? (float)(c->clip / gn) : 1.0f;
            /* bias correction counts the updates applied (skipped ones are not) */
            int64_t t = k - meta.skipped_nonfinite - meta.skipped_spikes;
            rc = eng_adamw(r, lr, gscale, t);
            if (rc) goto fail;
            window_push(&meta, c->spike_window, loss);
        } else if (skipped) {
            memcpy(M->lstate, r->lsave, sizeof(mx_linear_state) * nls); /* as if the batch had not been seen */
        }
        mx_crash_point("update", k);
        res->skipped_nonfinite = meta.skipped_nonfinite;
        res->skipped_spikes = meta.skipped_spikes;
        res->spikes = meta.spikes;
        double dt = now_s() - ts;
        train_s += dt;
        step = k;
        tokens += tok_step;
        tokens_this_run += tok_step;
        fprintf(r->metrics, "{\"step\":%lld,\"tokens\":%lld", (long long)k, (long long)tokens);
        jnum(r->metrics, "loss", loss);
        jnum(r->metrics, "lr", lr);
        jnum(r->metrics, "grad_norm", gn);
        jnum(r->metrics, "tok_per_s", tok_step / dt);
        if (skipped) fprintf(r->metrics, ",\"skipped\":\"%s\"", skipped);
        fprintf(r->metrics, "}\n");
        if (spike) {
            fprintf(r->metrics, "{\"event\":\"spike\",\"step\":%lld", (long long)k);
            jnum(r->metrics, "loss", loss);
            jnum(r->metrics, "z", z);
            jnum(r->metrics, "window_mean", zmean);
            jnum(r->metrics, "window_std", zsd);
            fprintf(r->metrics, ",\"skipped\":%s}\n", skipped ? "true" : "false");
        }
        if (tele) rc = mx_telemetry_write(M, k, r->metrics);
        if (!rc) rc = metrics_flush(r);
        if (rc) goto fail;
        mx_crash_point("metrics", k);
        emit(cb, user, (mx_train_event){.kind = 0, .step = k, .steps = c->steps, .tokens = tokens, .loss = loss,
                                        .lr = lr, .grad_norm = gn, .tok_per_s = tok_step / dt,
                                        .elapsed_s = now_s() - t0});
        if (spike) {
            snprintf(msg, sizeof msg, "loss spike at step %lld: loss %.4f, z %.1f over the last %d (mean %.4f, std %.4f)%s",
                     (long long)k, (double)loss, z, c->spike_window, zmean, zsd,
                     skipped ? ": update skipped" : "");
            emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
        }
        if (bad && !skipped) { res->reason = "non-finite loss or gradient"; goto diverged; }
        if (skipped && !spike) {
            snprintf(msg, sizeof msg, "step %lld: non-finite loss or gradient, update skipped (%lld skipped so far)",
                     (long long)k, (long long)(meta.skipped_nonfinite + meta.skipped_spikes));
            emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
        }
        if (meta.skipped_nonfinite + meta.skipped_spikes > c->max_skips) {
            res->reason = "too many skipped updates (--max-skips)";
            goto diverged;
        }
        if ((c->eval_every > 0 && k % c->eval_every == 0) || k == c->steps) {
            rc = do_eval(r, k, tokens, &vl, res, cb, user, t0);
            if (rc) goto fail;
            res->val_loss = vl;
            if (!isfinite(vl)) { res->reason = "non-finite validation loss"; goto diverged; }
        }
        if (c->sample_every > 0 && k % c->sample_every == 0 && io) { /* --sample-every: from the host weights */
            rc = eng_to_host(r);
            if (rc) goto fail;
            emit(cb, user, (mx_train_event){.kind = 3, .step = k, .steps = c->steps, .tokens = tokens, .model = M,
                                            .elapsed_s = now_s() - t0});
        }
        int halt = c->halt_at > 0 && k == c->halt_at;
        if ((c->ckpt_every > 0 && k % c->ckpt_every == 0) || halt || (k == c->steps && !c->no_final_ckpt)) {
            char path[1200];
            snprintf(path, sizeof path, "%s/ckpt-%08lld.bin", c->out, (long long)k);
            meta.step = k;
            meta.sample = sample;
            meta.tokens = tokens;
            meta.tokens_to_target = res->tokens_to_target;
            rc = save_ckpt(r, path, &meta);
            if (rc) goto fail;
            if (io) prune_ckpts(c->out, c->keep_ckpts);
            mx_crash_point("ckpt-pruned", k);
        }
        if (halt) break;
    }
#ifdef MXLM_CUDA
    if (r->gpu && mxg_profile_report(msg, sizeof msg)) emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
#endif
    res->status = step < c->steps ? "halted" : res->tokens_to_target >= 0 ? "converged" : "budget";
    if (step >= c->steps && c->target_loss > 0 && res->tokens_to_target < 0) res->reason = "target loss not reached";
    res->step = step;
    res->tokens = tokens;
    res->seconds = now_s() - t0;
    res->tok_per_s = train_s > 0 ? tokens_this_run / train_s : 0;
    write_outcome(r, res, mem_est);
    run_free(r);
    return !strcmp(res->status, "budget") && c->target_loss > 0 ? MX_NOT_CONVERGED : MX_OK;
diverged:
    res->status = "diverged";
    res->step = step;
    res->tokens = tokens;
    res->seconds = now_s() - t0;
    res->tok_per_s = train_s > 0 ? tokens_this_run / train_s : 0;
    write_outcome(r, res, mem_est);
    run_free(r);
    return MX_DIVERGED;
fail:
    if (!rc) rc = mx_fail(MX_EINVAL, "train: failed");
    {
        /* keep the message: the outcome files may fail to write too (full disk) */
        static char err[1024];
        snprintf(err, sizeof err, "%s", mx_last_error());
        res->status = "error";
        res->reason = err;
        res->step = step;
        res->tokens = tokens;
        res->seconds = now_s() - t0;
        write_outcome(r, res, mem_est);
        run_free(r);
        mx_fail(rc, "%s", err);
    }
    return rc;
}
