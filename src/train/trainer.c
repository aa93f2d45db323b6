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
 * Where the steps run (CPU or GPU, one or N ranks) is the engine's business
 * (engine.h): mx_train_run reads the same for all.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "mxlm/config.h"
#include "mxlm/data.h"
#include "mxlm/engine.h"
#include "mxlm/hf.h"
#include "mxlm/json.h"
#include "mxlm/tokrec.h"
#include "mxlm/trainer.h"
#include "mxlm/util.h"

int mx_train_config_set_recipe(mx_train_config* c, const char* s) {
    mx_recipe r;
    int rc = mx_recipe_parse(s, &r);
    if (rc) return rc;
    snprintf(c->recipe, sizeof c->recipe, "%s", s);
    c->rec = r;
    return MX_OK;
}

void mx_train_config_default(mx_train_config* c) {
    memset(c, 0, sizeof *c);
    mx_model_preset("tiny", &c->model);
    mx_train_config_set_recipe(c, "mxfp4-fdw-h16");
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
const char* const mx_attn_names[] = {"auto", "simt", "gemm", "tf32", "flash", NULL};
const char* const mx_head_names[] = {"auto", "fp32", "bf16", NULL};
const char* const mx_gemm_names[] = {"fast", "exact", NULL};
const char* const mx_nonfinite_names[] = {"abort", "skip", NULL};

#define ADD(...) do { int k_ = snprintf(buf + (len < n ? len : n), len < n ? n - len : 0, __VA_ARGS__); \
                      if (k_ > 0) len += (size_t)k_; } while (0)

/* A string option's value as config.txt holds it (quoted and escaped where needed: config.h). */
static const char* cv(char* b, size_t n, const char* v) {
    mx_config_value_write(v, b, n);
    return b;
}

int mx_train_config_text(const mx_train_config* c, int trajectory_only, char* buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    const mx_model_config* m = &c->model;
    char q[4400];
    if (!trajectory_only) ADD("preset = %s\n", cv(q, sizeof q, m->name));
    ADD("vocab = %d\ndim = %d\nlayers = %d\nheads = %d\nkv-heads = %d\nffn = %d\ncontext = %d\n", m->vocab, m->dim,
        m->n_layers, m->n_heads, m->n_kv_heads, m->ffn, m->seq_len);
    ADD("rope-theta = %.9g\nnorm-eps = %.9g\n", (double)m->rope_theta, (double)m->norm_eps);
    ADD("recipe = %s\nbf16-first = %d\nbf16-last = %d\n", cv(q, sizeof q, c->recipe), c->bf16_first, c->bf16_last);
    /* the fingerprint's "steps" is the schedule's length: an extended run (a larger --steps) keeps its own */
    const int64_t sched = c->sched_steps > 0 ? c->sched_steps : c->steps;
    ADD("batch = %d\nseq = %d\naccum = %d\nsteps = %lld\nseed = %llu\n", c->batch, c->seq, c->accum,
        (long long)(trajectory_only ? sched : c->steps), (unsigned long long)c->seed);
    if (!trajectory_only && sched != c->steps) ADD("schedule-steps = %lld\n", (long long)sched);
    char d[7][32];
    ADD("lr = %s\nmin-lr-frac = %s\nwarmup = %lld\n", dbl(d[0], c->lr), dbl(d[1], c->min_lr_frac), (long long)c->warmup);
    ADD("beta1 = %s\nbeta2 = %s\nadam-eps = %s\nweight-decay = %s\nclip = %s\n", dbl(d[2], c->adamw.beta1),
        dbl(d[3], c->adamw.beta2), dbl(d[4], c->adamw.eps), dbl(d[5], c->adamw.weight_decay), dbl(d[6], c->clip));
    ADD("train = %s\n", cv(q, sizeof q, c->train));
    if (c->gpus > 1) ADD("gpus = %d\n", c->gpus); /* the step's batch is gpus x batch x accum */
    if (c->init_from[0]) ADD("init-from = %s\n", cv(q, sizeof q, c->init_from));
    if (c->head == MX_HEAD_BF16) ADD("head = bf16\n"); /* resolved by mx_train_run; fp32 (the default) unwritten */
    if (!trajectory_only) {
        ADD("device = %s\ngemm = %s\nrecompute = %d\nattn = %s\n", mx_device_names[c->device],
            mx_gemm_names[c->gemm_exact != 0], c->recompute, mx_attn_names[c->attn]);
        ADD("val = %s\nval-tokens = %lld\n", cv(q, sizeof q, c->val), (long long)c->val_tokens);
        ADD("eval-every = %lld\nckpt-every = %lld\ntelemetry-every = %lld\n", (long long)c->eval_every,
            (long long)c->ckpt_every, (long long)c->telemetry_every);
        ADD("target-loss = %s\nkeep-ckpts = %d\n", dbl(d[0], c->target_loss), c->keep_ckpts);
        ADD("on-nonfinite = %s\nmax-skips = %lld\nspike-window = %d\nspike-z = %s\nskip-spikes = %d\n",
            mx_nonfinite_names[c->on_nonfinite], (long long)c->max_skips, c->spike_window,
            dbl(d[1], c->spike_z), c->skip_spikes);
    }
    if (c->run_id) ADD("run-id = %016llx\n", (unsigned long long)c->run_id); /* the last line (checkpoint.c) */
    return (int)len;
}

/* ---- small file helpers -------------------------------------------------------- */

static int file_exists(const char* p) { struct stat st; return stat(p, &st) == 0; }

/* Keep metrics lines with "step" <= last and no status/summary line (resume). */
static int truncate_metrics(const char* path, int64_t last) {
    FILE* f = mx_fopen_input(path, NULL);
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
    FILE* f = mx_fopen_input(path, NULL);
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

/* Does a metrics file hold a training step's line (a run that started training)? */
static int metrics_has_steps(const char* path) {
    FILE* f = mx_fopen_input(path, NULL);
    if (!f) return 0;
    char line[4096];
    int yes = 0;
    while (!yes && fgets(line, sizeof line, f)) yes = strstr(line, "\"loss\":") && !strstr(line, "\"event\"");
    fclose(f);
    return yes;
}

/* Did the run record its outcome at `step` (summary.json: "budget" or "converged" at that step)? */
static int summary_final_at(const char* dir, int64_t step) {
    char p[1200], b[4096], want[64];
    if (mx_pathf(p, sizeof p, "%s/summary.json", dir)) return 0;
    FILE* f = mx_fopen_input(p, NULL);
    if (!f) return 0;
    size_t k = fread(b, 1, sizeof b - 1, f);
    fclose(f);
    b[k] = 0;
    snprintf(want, sizeof want, "\"step\":%lld,", (long long)step);
    return strstr(b, want) && (strstr(b, "\"status\":\"budget\"") || strstr(b, "\"status\":\"converged\""));
}

/* --resume --ckpt of an older checkpoint: the newer ones are moved aside (NAME.superseded), not deleted,
 * so that pruning keeps the new branch's checkpoints. Returns how many. */
static int supersede_newer(const char* dir, int64_t step) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "ckpt-", 5)) continue;
        char* end = NULL;
        long long s = strtoll(e->d_name + 5, &end, 10);
        if (end == e->d_name + 5 || strcmp(end, ".bin") || s <= step) continue;
        char a[1400], b[1500];
        if (mx_pathf(a, sizeof a, "%s/%s", dir, e->d_name)) continue;
        if (mx_pathf(b, sizeof b, "%s.superseded", a)) continue;
        if (rename(a, b) == 0) n++;
    }
    closedir(d);
    return n;
}

/* SIGINT / SIGTERM: a flag the loop reads at each step boundary. */
static volatile sig_atomic_t g_stop_signal;
static void on_stop_signal(int sig) { g_stop_signal = sig; }

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
            if (mx_pathf(p, sizeof p, "%s/ckpt-%08lld.bin", dir, steps[i])) continue;
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
        if (mx_pathf(p, sizeof p, "%s/%s", dir, e->d_name)) continue;
        if (unlink(p) == 0) n++;
    }
    closedir(d);
    return n;
}

/* Write, fsync and remove a small file: a directory that cannot take one
 * (permissions, read-only, full disk, file size limit) is reported now. */
static int probe_dir(const char* dir) {
    char p[1200];
    if (mx_pathf(p, sizeof p, "%s/.probe.%d", dir, (int)getpid())) return MX_EINVAL;
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
    char b[32];
    fprintf(f, ",\"%s\":%s", key, mx_json_number(b, sizeof b, x, 9));
}

static void emit(mx_train_cb cb, void* user, mx_train_event ev) {
    if (cb) cb(&ev, user);
}

/* ---- the run --------------------------------------------------------------------- */

typedef struct {
    mx_train_config c;
    mx_train_cb cb;
    void* user;
    char msg[1600];       /* the progress message being built */
    /* where it runs: this rank of `world` (rank 0 alone writes the run directory's files: io) */
    int rank, world, io, on_gpu;
    mx_engine* eng;
    /* the host model and its training state */
    mx_llama model;
    mx_loader train, val;
    float *m, *v;         /* [n_params] AdamW moments */
    int32_t *inp, *tgt;   /* [B, T] */
    mx_linear_state* lsave; /* [L * 7] linear states before the step (restored when it is skipped) */
    size_t nls;           /* linear layers (L * 7) */
    int64_t n_val;        /* validation windows */
    mx_ckpt_meta* meta;   /* step, samples, tokens, counters, the spike window (checkpointed) */
    /* the run directory */
    FILE* metrics;
    int lock_fd;
    int made_dir;         /* this trainer created the run directory: removed when refused before the first step */
    int resume, restart;  /* continuing from `latest`; --resume of a run without a checkpoint yet */
    int finished;         /* --resume of a run whose outcome is recorded: nothing to do, nothing written */
    int64_t ckpt_step;    /* the step of the newest checkpoint written or loaded (-1: none) */
    char ckpt_path[1200]; /* and its file */
    char latest[1200], mpath[1200], cpath[1200];
    char fingerprint[8192];
    mx_mem_estimate est;
    /* progress */
    double t0, train_s;
    int64_t tokens_this_run;
} run_state;

static void say(run_state* r) { emit(r->cb, r->user, (mx_train_event){.kind = 2, .msg = r->msg}); }

static void run_free(run_state* r) {
    if (r->metrics) fclose(r->metrics);
    r->metrics = NULL;
    mx_engine_free(r->eng);
    r->eng = NULL;
    mx_llama_free(&r->model);
    if (r->train.shards) mx_loader_close(&r->train);
    if (r->val.shards) mx_loader_close(&r->val);
    free(r->m);
    free(r->v);
    free(r->inp);
    free(r->tgt);
    free(r->lsave);
    r->m = r->v = NULL;
    r->inp = r->tgt = NULL;
    r->lsave = NULL;
    if (r->lock_fd > 0) close(r->lock_fd); /* releases the flock */
    r->lock_fd = -1;
}

static int metrics_flush(run_state* r) {
    if (fflush(r->metrics) != 0 || ferror(r->metrics))
        return mx_fail(MX_EIO, "%s/metrics.jsonl: cannot write: %s", r->c.out, strerror(errno));
    return MX_OK;
}

static int do_eval(run_state* r, int64_t step, int64_t tokens, float* out, mx_train_result* res) {
    float vl = 0.0f;
    int rc = r->eng->ops->evaluate(r->eng, &r->val, r->n_val, r->c.batch, r->c.seq, &vl);
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
    emit(r->cb, r->user, (mx_train_event){.kind = 1, .step = step, .steps = r->c.steps, .tokens = tokens,
                                          .val_loss = vl, .elapsed_s = now_s() - r->t0});
    return MX_OK;
}

static const char* fnum(char* b, size_t n, double x) { return mx_json_number(b, n, x, 9); }

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
    if (mx_pathf(path, sizeof path, "%s/summary.json", r->c.out)) return;
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


/* ---- before anything is created: the config, the engine, the limits ---------------------- */

/* A shard glob that matches nothing is refused here, before the run directory is made (the loader
 * would find it only after). */
static int shards_match(const char* what, const char* pattern) {
    glob_t g;
    const int gr = glob(pattern, 0, NULL, &g);
    int rc = MX_OK;
    for (size_t i = 0; gr == 0 && i < g.gl_pathc && !rc; i++) rc = mx_check_input(g.gl_pathv[i], "shard");
    if (gr == 0) globfree(&g);
    if (rc) return rc; /* a FIFO or a device among the shards: refused now, not a hang in open() later */
    if (gr == GLOB_NOMATCH) return mx_fail(MX_EIO, "train: --%s %s: no shard matches (nothing was created)", what, pattern);
    if (gr != 0) return mx_fail(MX_EIO, "train: --%s %s: cannot expand the pattern", what, pattern);
    return MX_OK;
}

/* A new run's id: 64 random bits (/dev/urandom; else the clock and the pid), never 0. */
static uint64_t new_run_id(void) {
    uint64_t x = 0;
    FILE* f = fopen("/dev/urandom", "rb");
    if (!f || fread(&x, sizeof x, 1, f) != 1) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        x = ((uint64_t)t.tv_sec * 1000000007ull) ^ (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 32);
    }
    if (f) fclose(f);
    return x ? x : 1;
}

/* --ckpt and --init-from's files: regular files (or absent: reported where they are read), checked before
 * the run directory is made. */
static int inputs_are_files(const mx_train_config* c) {
    int rc = c->ckpt[0] ? mx_check_input(c->ckpt, "checkpoint") : MX_OK;
    static const char* const hf[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2 && !rc && c->init_from[0]; i++) {
        char p[1200];
        rc = mx_pathf(p, sizeof p, "%s/%s", c->init_from, hf[i]);
        if (!rc) rc = mx_check_input(p, NULL);
    }
    return rc;
}

static int check_config(run_state* r) {
    mx_train_config* c = &r->c;
    if (!c->run_id && !c->resume) c->run_id = new_run_id(); /* a resumed run keeps config.txt's */
    mx_engine_ranks(c, &r->rank, &r->world);
    if (c->gpus < 1) c->gpus = 1;
    if (!c->comm && c->gpus > 1)
        return mx_fail(MX_EINVAL, "train: gpus = %d needs the NCCL engine (mxlm train --gpus N, or mpirun; CUDA "
                                  "build)", c->gpus);
    if (c->comm && c->gpus != r->world)
        return mx_fail(MX_EINVAL, "train: gpus = %d but %d ranks were started", c->gpus, r->world);
    r->io = r->rank == 0;
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
    int rc = shards_match("train", c->train);
    if (!rc) rc = shards_match("val", c->val);
    if (!rc) rc = inputs_are_files(c);
    if (rc) return rc;
    return mx_model_config_check(&c->model);
}

/* The engine (CPU or GPU) and what follows from it: the LM head's precision (part of the fingerprint). */
static int choose_engine(run_state* r) {
    mx_train_config* c = &r->c;
    mx_train_config_text(c, 1, r->fingerprint, sizeof r->fingerprint);
    r->on_gpu = mx_engine_pick(c, r->msg, sizeof r->msg);
    if (r->on_gpu < 0) return r->on_gpu;
    if (c->comm && !r->on_gpu) return mx_fail(MX_EINVAL, "train: the NCCL engine (--gpus, --nccl) needs --device cuda");
    say(r);
    if (c->head == MX_HEAD_AUTO) {
        c->head = mx_engine_head_bf16(c, r->on_gpu) ? MX_HEAD_BF16 : MX_HEAD_FP32;
        mx_train_config_text(c, 1, r->fingerprint, sizeof r->fingerprint);
    }
    return MX_OK;
}

/* Memory (the GPU's, then the host's), before anything is allocated or created. */
static int check_memory(run_state* r) {
    const mx_train_config* c = &r->c;
    mx_train_config ce = *c;
    char peek[1200];
    ce.resume = c->resume && mx_ckpt_latest(c->out, peek, sizeof peek);
    const int resume_est = ce.resume;
    mx_mem_estimate* est = &r->est;
    mx_train_estimate(&ce, est);
    if (r->on_gpu) { /* the host keeps the weights, moments (and an unused gradient array) only */
        est->acts = est->scratch = 0;
        est->total = est->params + est->grads + est->adam + est->resume;
    }
    int rc = mx_engine_check_memory(c, r->on_gpu, r->world, r->msg, sizeof r->msg);
    if (r->msg[0]) say(r);
    if (rc) return rc;
    int64_t avail = c->mem_limit > 0 ? c->mem_limit : mx_mem_available();
    char rpart[64] = "";
    if (resume_est) snprintf(rpart, sizeof rpart, ", checkpoint read %.1f", mib(est->resume));
    char apart[96];
    if (avail >= 0) snprintf(apart, sizeof apart, "%s %.0f MiB", c->mem_limit > 0 ? "limit" : "available", mib(avail));
    else snprintf(apart, sizeof apart, "available memory unknown");
    snprintf(r->msg, sizeof r->msg,
             "memory: %.1f MiB estimated (parameters %.1f, gradients %.1f, AdamW %.1f, activations %.1f, scratch %.1f%s), "
             "%s; a checkpoint is %.1f MiB",
             mib(est->total), mib(est->params), mib(est->grads), mib(est->adam), mib(est->acts), mib(est->scratch), rpart,
             apart, mib(est->ckpt_bytes));
    say(r);
    if (avail >= 0 && est->total > avail) {
        if (!c->ignore_limits) {
            mx_fail(MX_ENOMEM,
                    "train: %s with batch %d x %d needs about %.1f MiB of memory (parameters %.1f, gradients %.1f, "
                    "AdamW %.1f, activations %.1f, scratch %.1f MiB) but %.1f MiB are available (%s); use a smaller "
                    "--batch/--seq or preset, or --ignore-limits",
                    c->model.name, c->batch, c->seq, mib(est->total), mib(est->params), mib(est->grads),
                    mib(est->adam), mib(est->acts), mib(est->scratch), mib(avail),
                    c->mem_limit > 0 ? "--mem-limit-mib" : "MemAvailable in /proc/meminfo");
            return MX_LIMITS;
        }
        emit(r->cb, r->user, (mx_train_event){.kind = 2, .msg = "warning: the estimate exceeds the available memory "
                                                                "(--ignore-limits: going on)"});
    }
    return MX_OK;
}

/* ---- the run directory: created, locked, probed, checked for a run to resume ---------------- */

static int open_run_dir(run_state* r) {
    const mx_train_config* c = &r->c;
    if (c->resume && !file_exists(c->out)) return mx_fail(MX_EINVAL, "train: --resume: no checkpoint in %s", c->out);
    r->made_dir = r->io && !file_exists(c->out);
    int rc = mx_mkdirs(c->out);
    if (rc) return rc;
    if (mx_pathf(r->mpath, sizeof r->mpath, "%s/metrics.jsonl", c->out)) return MX_EINVAL;
    if (mx_pathf(r->cpath, sizeof r->cpath, "%s/config.txt", c->out)) return MX_EINVAL;
    if (!r->io) { /* rank 0 checked the directory; the checkpoints are the same files for all */
        r->resume = c->resume && mx_ckpt_latest(c->out, r->latest, sizeof r->latest);
        return MX_OK;
    }
    char lpath[1200];
    if (mx_pathf(lpath, sizeof lpath, "%s/.lock", c->out)) return MX_EINVAL;
    const int had_lock = file_exists(lpath); /* a trainer started here before */
    rc = mx_lock_take(lpath, &r->lock_fd);
    if (rc < 0) return mx_fail(MX_EIO, "%s: the run directory cannot be written (%s)", c->out, mx_last_error());
    if (rc > 0) return mx_fail(MX_EINVAL, "train: another mxlm train is running in %s", c->out);
    rc = probe_dir(c->out);
    if (rc) return rc;
    mx_crash_point("locked", 0);

    /* refuse before touching anything in the run directory */
    int have_ckpt = mx_ckpt_latest(c->out, r->latest, sizeof r->latest);
    if (c->ckpt[0]) { /* --resume --ckpt FILE */
        if (!c->resume) return mx_fail(MX_EINVAL, "train: --ckpt %s needs --resume", c->ckpt);
        if (!file_exists(c->ckpt)) return mx_fail(MX_EINVAL, "train: --ckpt %s: no such file", c->ckpt);
        if (mx_pathf(r->latest, sizeof r->latest, "%s", c->ckpt)) return MX_EINVAL;
        have_ckpt = 1;
    }
    /* restart: --resume of a run killed before its first checkpoint (or before any file) */
    if (c->resume && !have_ckpt) {
        if (!file_exists(r->mpath) && !file_exists(r->cpath) && !had_lock)
            return mx_fail(MX_EINVAL, "train: --resume: no checkpoint in %s", c->out);
        r->restart = 1;
    }
    /* a run that never completed a step (it failed at the step-0 evaluation, say) does not block the
     * corrected command: it starts over */
    if (!c->resume && (have_ckpt || metrics_has_steps(r->mpath)))
        return mx_fail(MX_EINVAL, "train: %s already holds a run (use --resume to continue it, or another --out)",
                       c->out);
    if (!c->resume && file_exists(r->mpath)) r->restart = 1;
    r->resume = c->resume && !r->restart;

    /* disk: room for one checkpoint at least */
    struct statvfs sv;
    if (statvfs(c->out, &sv) == 0) {
        int64_t free_b = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
        if (free_b < r->est.ckpt_bytes && !c->ignore_limits) {
            mx_fail(MX_EIO, "train: %s has %.1f MiB free, less than one checkpoint (%.1f MiB); free space or use "
                            "--ignore-limits", c->out, mib(free_b), mib(r->est.ckpt_bytes));
            return MX_LIMITS;
        }
        if (free_b < (int64_t)(c->keep_ckpts + 1) * r->est.ckpt_bytes) {
            snprintf(r->msg, sizeof r->msg, "warning: %s has %.1f MiB free, less than %d checkpoints (--keep %d, plus "
                     "the one being written) of %.1f MiB", c->out, mib(free_b), c->keep_ckpts + 1, c->keep_ckpts,
                     mib(r->est.ckpt_bytes));
            say(r);
        }
    }
    return MX_OK;
}

/* ---- the state: model, data, moments; from the checkpoint, HF weights or the seed; the engine ---- */

/* Bytes of the files a shard glob matches (0: none). */
static int64_t shard_bytes(const char* pattern) {
    glob_t g;
    int64_t n = 0;
    if (glob(pattern, 0, NULL, &g) != 0) return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) == 0) n += (int64_t)st.st_size;
    }
    globfree(&g);
    return n;
}

/* The step-like options of a resumed run against the checkpoint's step: --steps not below it, the positions
 * (--halt-at, the --debug-*-at hooks; 0: off) past it, else they would never be reached. MX_EUSAGE (2). */
static int check_resume_steps(const mx_train_config* c, const mx_ckpt_meta* meta, const char* ckpt) {
    const struct { const char* name; int64_t v; int position; } opt[] = {
        {"steps", c->steps, 0}, {"halt-at", c->halt_at, 1}, {"debug-nan-at", c->debug_nan_at, 1},
        {"debug-nan-grad-at", c->debug_nan_grad_at, 1}, {"debug-spike-at", c->debug_spike_at, 1}};
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
        if (opt[i].position ? !(opt[i].v > 0 && opt[i].v <= meta->step) : opt[i].v >= meta->step) continue;
        return mx_fail(MX_EUSAGE, "train: --%s %lld is %s the checkpoint's step %lld (%s)%s", opt[i].name,
                       (long long)opt[i].v, opt[i].position ? "not past" : "below", (long long)meta->step, ckpt,
                       opt[i].position ? ": it would never be reached; give a later step, or resume an older "
                                         "checkpoint (--ckpt)" : "");
    }
    return MX_OK;
}

static int load_state(run_state* r, mx_train_result* res) {
    const mx_train_config* c = &r->c;
    const int B = c->batch, T = c->seq;
    int rc = mx_llama_create(&r->model, &c->model, &c->rec, c->bf16_first, c->bf16_last, c->seed);
    r->model.head_bf16 = c->head == MX_HEAD_BF16;
    const int64_t big = shard_bytes(c->train) + shard_bytes(c->val);
    if (big > ((int64_t)1 << 30)) { /* one pass over the ids at open: say so when it takes a while */
        snprintf(r->msg, sizeof r->msg, "checking the token ids of %.1f GiB of shards against the vocabulary (%d)",
                 (double)big / (double)((int64_t)1 << 30), c->model.vocab);
        say(r);
    }
    if (!rc) rc = mx_loader_open(&r->train, c->train, T, c->model.vocab);
    if (!rc) rc = mx_loader_open(&r->val, c->val, T, c->model.vocab);
    if (rc) return rc;
    rc = mx_val_windows(mx_loader_n_val_windows(&r->val), c->val_tokens, T, B, c->val, &r->n_val);
    if (rc) return rc;
    size_t np = r->model.n_params;
    r->nls = (size_t)c->model.n_layers * MX_LIN_PER_BLOCK;
    r->m = calloc(np, sizeof(float));
    r->v = calloc(np, sizeof(float));
    r->inp = malloc(sizeof(int32_t) * B * T);
    r->tgt = malloc(sizeof(int32_t) * B * T);
    r->lsave = malloc(sizeof(mx_linear_state) * r->nls);
    if (!r->m || !r->v || !r->inp || !r->tgt || !r->lsave) return mx_fail(MX_ENOMEM, "train: out of memory");

    static mx_ckpt_meta meta; /* large (the loss window); one run at a time per process */
    memset(&meta, 0, sizeof meta);
    meta.tokens_to_target = -1;
    meta.val_loss0 = NAN;
    r->meta = &meta;
    if (r->resume) {
        rc = mx_ckpt_load(r->latest, &r->model, r->m, r->v, &meta, r->fingerprint);
        if (rc) return rc;
        rc = check_resume_steps(c, &meta, r->latest);
        if (rc) return rc;
        if (!meta.run_id && c->run_id) {
            snprintf(r->msg, sizeof r->msg, "note: %s records no run id (written before runs had one): taken as "
                     "this run's", r->latest);
            say(r);
        }
        r->ckpt_step = meta.step;
        if (mx_pathf(r->ckpt_path, sizeof r->ckpt_path, "%s", r->latest)) return MX_EINVAL;
        r->finished = meta.step == c->steps && !c->ckpt[0] && summary_final_at(c->out, meta.step);
        if (r->finished) return MX_OK; /* nothing is written: no engine */
        res->tokens_to_target = meta.tokens_to_target;
        res->val_loss0 = meta.val_loss0;
    } else if (c->init_from[0]) {
        rc = mx_hf_load(c->init_from, &r->model); /* checks config.json against the model; nothing loaded on refusal */
        if (rc) return rc;
        snprintf(r->msg, sizeof r->msg, "initial weights from %s", c->init_from);
        say(r);
    } else {
        mx_llama_init_weights(&r->model, c->seed);
    }
    return mx_engine_create(&r->eng, r->on_gpu, c, &r->model, r->m, r->v);
}

/* config.txt, metrics.jsonl (cut back to the checkpoint on a resume), the stale temporaries removed. */
static int write_run_files(run_state* r, mx_train_result* res, int* stale) {
    const mx_train_config* c = &r->c;
    int rc = MX_OK;
    *stale = r->io ? remove_stale_temps(c->out) : 0;
    if (r->resume && r->io && c->ckpt[0]) {
        int ns = supersede_newer(c->out, r->meta->step);
        if (ns) {
            snprintf(r->msg, sizeof r->msg, "--ckpt: %d newer checkpoint%s moved aside (ckpt-N.bin.superseded)", ns,
                     ns > 1 ? "s" : "");
            say(r);
        }
    }
    if (r->resume && r->io) rc = truncate_metrics(r->mpath, r->meta->step);
    if (r->resume && !rc) res->val_loss = last_val_loss(r->mpath); /* a run resumed at its end reports it */
    else if (r->restart && r->io) rc = truncate_metrics(r->mpath, -1);
    char text[8192];
    int tl = mx_train_config_text(c, 0, text, sizeof text);
    if (!rc && r->io) rc = mx_write_atomic(r->cpath, text, (size_t)(tl < (int)sizeof text ? tl : (int)sizeof text - 1));
    /* the tokenizer of the training shards (tokrec.h) for eval / sample: RUN/tokenizer.txt */
    if (!rc && r->io && !r->resume && r->train.n > 0) {
        int tr = mx_tokrec_record_run(c->out, &r->train.shards[0]);
        if (tr < 0) rc = tr;
    }
    if (rc) return rc;
    r->metrics = fopen(r->io ? r->mpath : "/dev/null", "a"); /* other ranks: their lines go nowhere */
    if (!r->metrics) return mx_fail(MX_EIO, "%s: cannot open: %s", r->mpath, strerror(errno));
    return MX_OK;
}

static void announce(run_state* r, int stale) {
    const mx_train_config* c = &r->c;
    const int64_t tok_step = (int64_t)c->batch * c->seq * c->accum * r->world;
    snprintf(r->msg, sizeof r->msg, "%s %s: %lld parameters, %lld tokens/step (%d x %d x %d), %lld val tokens%s",
             c->model.name, c->recipe, (long long)r->model.n_params, (long long)tok_step, c->batch, c->seq, c->accum,
             (long long)(r->n_val * c->seq), r->resume ? ", resumed" : "");
    say(r);
    if (stale) {
        snprintf(r->msg, sizeof r->msg, "removed %d temporary file%s left by an interrupted run", stale,
                 stale > 1 ? "s" : "");
        say(r);
    }
    if (r->resume) {
        snprintf(r->msg, sizeof r->msg, "resumed from %s (step %lld)", r->latest, (long long)r->meta->step);
        say(r);
    } else if (r->restart) {
        snprintf(r->msg, sizeof r->msg,
                 "no checkpoint in %s yet (the run stopped before its first one): restarting from step 0", c->out);
        say(r);
    }
}

/* ---- one training step ------------------------------------------------------------------- */

/* What a step did. */
typedef struct {
    float loss;
    double lr, gn, dt;
    int bad, spike;          /* non-finite loss or gradient; a loss spike */
    const char* skipped;     /* NULL, "nonfinite" or "spike": the update was not applied */
    double z, zmean, zsd;    /* the spike detector's z-score and window */
    int tele;                /* telemetry measured this step */
} step_out;

/* The step's micro-batches, forward and backward: the gradients and the mean loss (every rank's). */
static int micro_batches(run_state* r, int64_t k, double* lsum) {
    const mx_train_config* c = &r->c;
    const int B = c->batch, T = c->seq, W = r->world;
    const int64_t tok_step = (int64_t)B * T * c->accum * W;
    const int64_t sample0 = r->meta->sample;
    int rc = r->eng->ops->zero_grad(r->eng);
    *lsum = 0.0;
    for (int a = 0; a < c->accum && !rc; a++) {
        /* the global micro-batch: rank r's a-th is a one-GPU run's (a*W + r)-th of this step */
        const int64_t u = (int64_t)a * W + r->rank;
        uint64_t mstep = (uint64_t)(k - 1) * (uint64_t)c->accum * (uint64_t)W + (uint64_t)u;
        for (int b = 0; b < B && !rc; b++)
            rc = mx_loader_window(&r->train, mx_loader_sample(&r->train, c->seed, sample0 + u * B + b), r->inp + b * T,
                                  r->tgt + b * T);
        if (c->debug_spike_at == k) /* test hook: targets scrambled, a real loss spike */
            for (int i = 0; i < B * T; i++)
                r->tgt[i] = (int32_t)(((uint32_t)i * 2654435761u + (uint32_t)k * 40503u) % (uint32_t)c->model.vocab);
        float lo = 0.0f;
        if (!rc) rc = r->eng->ops->micro_step(r->eng, r->inp, r->tgt, mstep, 1.0f / (float)tok_step, a == c->accum - 1, &lo);
        if (!rc) *lsum += lo;
    }
    r->meta->sample = sample0 + (int64_t)c->accum * W * B;
    return rc;
}

/* Non-finite or a spike: is the update skipped? (the counters of meta) */
static void judge(run_state* r, step_out* s) {
    const mx_train_config* c = &r->c;
    mx_ckpt_meta* meta = r->meta;
    s->bad = !isfinite(s->loss) || !isfinite(s->gn);
    if (s->bad) {
        if (c->on_nonfinite == MX_NONFINITE_SKIP) {
            s->skipped = "nonfinite";
            meta->skipped_nonfinite++;
        }
        return;
    }
    s->z = window_z(meta, c->spike_window, s->loss, &s->zmean, &s->zsd);
    s->spike = s->z > c->spike_z;
    if (s->spike) {
        meta->spikes++;
        if (c->skip_spikes) { s->skipped = "spike"; meta->skipped_spikes++; }
    }
}

/* Update k: micro-batches, gradient norm, the loss and the update (clipped AdamW), or its skip. */
static int train_step(run_state* r, int64_t k, step_out* s) {
    const mx_train_config* c = &r->c;
    mx_engine* e = r->eng;
    mx_llama* M = &r->model;
    int rc = MX_OK;
    memset(s, 0, sizeof *s);
    double ts = now_s();
    if (c->debug_nan_at == k) rc = e->ops->poke(e, 0, M->info[MX_P_WQ].offset, NAN);
    s->tele = c->telemetry_every > 0 && k % c->telemetry_every == 0;
    if (s->tele) mx_telemetry_reset(M);
    if (s->tele && !rc) rc = e->ops->telemetry(e, 1);
    memcpy(r->lsave, M->lstate, sizeof(mx_linear_state) * r->nls);
    double lsum = 0.0;
    if (!rc) rc = micro_batches(r, k, &lsum);
    if (s->tele && !rc) rc = e->ops->telemetry(e, 0);
    if (rc) return rc;
    if (c->debug_nan_grad_at == k) rc = e->ops->poke(e, 1, M->info[MX_P_WO].offset, NAN);
    mx_crash_point("step", k);
    double ss = 0.0;
    if (!rc) rc = e->ops->grad_sumsq(e, &ss); /* with NCCL: after the step's reductions (one collective at a time) */
    if (!rc) rc = e->ops->reduce_loss(e, &lsum); /* the step's loss: every rank's sum, added in rank order */
    if (rc) return rc;
    s->loss = (float)(lsum / ((double)c->accum * r->world));
    s->gn = sqrt(ss);
    /* past the schedule's length (an extended run): the floor */
    s->lr = mx_lr_at(k - 1, c->sched_steps > 0 ? c->sched_steps : c->steps, c->warmup, c->lr, c->min_lr_frac);
    judge(r, s);
    if (!s->bad && !s->skipped) {
        float gscale = (c->clip > 0 && s->gn > c->clip) ? (float)(c->clip / s->gn) : 1.0f;
        /* bias correction counts the updates applied (skipped ones are not) */
        int64_t t = k - r->meta->skipped_nonfinite - r->meta->skipped_spikes;
        rc = e->ops->adamw(e, &c->adamw, s->lr, gscale, t);
        if (rc) return rc;
        window_push(r->meta, c->spike_window, s->loss);
    } else if (s->skipped) {
        memcpy(M->lstate, r->lsave, sizeof(mx_linear_state) * r->nls); /* as if the batch had not been seen */
    }
    mx_crash_point("update", k);
    s->dt = now_s() - ts;
    return MX_OK;
}

/* The step's metrics lines (training, spike event, telemetry) and its progress events. */
static int log_step(run_state* r, int64_t k, const step_out* s) {
    const mx_train_config* c = &r->c;
    const int64_t tok_step = (int64_t)c->batch * c->seq * c->accum * r->world, tokens = r->meta->tokens;
    FILE* f = r->metrics;
    fprintf(f, "{\"step\":%lld,\"tokens\":%lld", (long long)k, (long long)tokens);
    jnum(f, "loss", s->loss);
    jnum(f, "lr", s->lr);
    jnum(f, "grad_norm", s->gn);
    jnum(f, "tok_per_s", tok_step / s->dt);
    if (s->skipped) fprintf(f, ",\"skipped\":\"%s\"", s->skipped);
    fprintf(f, "}\n");
    if (s->spike) {
        fprintf(f, "{\"event\":\"spike\",\"step\":%lld", (long long)k);
        jnum(f, "loss", s->loss);
        jnum(f, "z", s->z);
        jnum(f, "window_mean", s->zmean);
        jnum(f, "window_std", s->zsd);
        fprintf(f, ",\"skipped\":%s}\n", s->skipped ? "true" : "false");
    }
    int rc = s->tele ? mx_telemetry_write(&r->model, k, f) : MX_OK;
    if (!rc) rc = metrics_flush(r);
    if (rc) return rc;
    mx_crash_point("metrics", k);
    emit(r->cb, r->user, (mx_train_event){.kind = 0, .step = k, .steps = c->steps, .tokens = tokens, .loss = s->loss,
                                          .lr = s->lr, .grad_norm = s->gn, .tok_per_s = tok_step / s->dt,
                                          .elapsed_s = now_s() - r->t0});
    if (s->spike) {
        snprintf(r->msg, sizeof r->msg,
                 "loss spike at step %lld: loss %.4f, z %.1f over the last %d (mean %.4f, std %.4f)%s", (long long)k,
                 (double)s->loss, s->z, c->spike_window, s->zmean, s->zsd, s->skipped ? ": update skipped" : "");
        say(r);
    }
    if (s->skipped && !s->spike) {
        snprintf(r->msg, sizeof r->msg, "step %lld: non-finite loss or gradient, update skipped (%lld skipped so far)",
                 (long long)k, (long long)(r->meta->skipped_nonfinite + r->meta->skipped_spikes));
        say(r);
    }
    return MX_OK;
}

/* The checkpoint of step k (the engine makes the host copies current, gathers shards), then pruning. */
static int checkpoint(run_state* r, int64_t k, const mx_train_result* res) {
    char path[1200];
    if (mx_pathf(path, sizeof path, "%s/ckpt-%08lld.bin", r->c.out, (long long)k)) return MX_EINVAL;
    r->meta->step = k;
    r->meta->tokens_to_target = res->tokens_to_target;
    int rc = r->eng->ops->save(r->eng, path, r->meta, r->fingerprint);
    if (rc) return rc;
    if (r->io) prune_ckpts(r->c.out, r->c.keep_ckpts);
    r->ckpt_step = k;
    if (mx_pathf(r->ckpt_path, sizeof r->ckpt_path, "%s", path)) return MX_EINVAL;
    mx_crash_point("ckpt-pruned", k);
    return MX_OK;
}

/* ---- the outcome ------------------------------------------------------------------------ */

static int finish(run_state* r, mx_train_result* res, const char* status, int rc) {
    res->status = status;
    res->step = r->meta ? r->meta->step : 0;
    res->tokens = r->meta ? r->meta->tokens : 0;
    res->seconds = now_s() - r->t0;
    if (rc >= 0) res->tok_per_s = r->train_s > 0 ? r->tokens_this_run / r->train_s : 0;
    if (rc < 0) {
        /* keep the message: the outcome files may fail to write too (full disk) */
        static char err[1024];
        snprintf(err, sizeof err, "%s", mx_last_error());
        res->reason = err;
        write_outcome(r, res, r->est.total);
        run_free(r);
        mx_fail(rc, "%s", err);
        return rc;
    }
    write_outcome(r, res, r->est.total);
    run_free(r);
    return rc;
}

/* The files a trainer writes before its first step, then the directory itself (rmdir: only when that left it
 * empty, so nothing else is ever removed). */
static void remove_made_dir(const char* dir) {
    static const char* const files[] = {".lock", "config.txt", "tokenizer.txt", "metrics.jsonl", "summary.json"};
    char p[1200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* ---- the training run: set up, evaluate, step until the budget, the outcome ----------------- */

static int run_loop(run_state* r, mx_train_result* res);

int mx_train_run(const mx_train_config* cfg, mx_train_result* res, mx_train_cb cb, void* user) {
    run_state R;
    memset(&R, 0, sizeof R);
    run_state* r = &R;
    r->lock_fd = -1;
    r->ckpt_step = -1;
    r->c = *cfg;
    r->cb = cb;
    r->user = user;
    memset(res, 0, sizeof *res);
    res->status = "error";
    res->reason = "";
    res->tokens_to_target = -1;
    res->val_loss0 = res->val_loss = NAN;
    const mx_train_config* c = &r->c;

    int64_t nv;
    int rc = check_config(r);
    if (!rc) rc = choose_engine(r);
    if (!rc) rc = check_memory(r);
    if (!rc) rc = mx_val_windows(INT64_MAX, c->val_tokens, c->seq, c->batch, c->val, &nv); /* the option alone */
    if (rc) return rc;
    int stale = 0;
    rc = open_run_dir(r);
    if (!rc) rc = load_state(r, res);
    if (!rc && r->finished) { /* a resume of a finished run: nothing to do, nothing written */
        res->status = "finished";
        res->step = r->meta->step;
        res->tokens = r->meta->tokens;
        res->val_loss0 = r->meta->val_loss0;
        res->val_loss = last_val_loss(r->mpath);
        snprintf(r->msg, sizeof r->msg, "%s: the run is finished (step %lld of %lld); nothing written. A larger "
                 "--steps extends it (the steps past %lld at the schedule's floor)", c->out,
                 (long long)r->meta->step, (long long)c->steps, (long long)c->steps);
        say(r);
        run_free(r);
        return MX_OK;
    }
    if (!rc) rc = write_run_files(r, res, &stale);
    if (rc) { /* refused before the first step: a run directory this trainer made is not left behind */
        run_free(r);
        if (r->made_dir) remove_made_dir(c->out);
        return rc;
    }
    announce(r, stale);

    /* SIGINT / SIGTERM: a checkpoint at the next step boundary, then MX_STOPPED (one process only: the
     * ranks of a data-parallel run would stop at different steps; they keep the default action) */
    struct sigaction sa_new, sa_int, sa_term;
    const int handle_signals = r->world == 1;
    if (handle_signals) {
        memset(&sa_new, 0, sizeof sa_new);
        sa_new.sa_handler = on_stop_signal;
        sa_new.sa_flags = SA_RESTART;
        sigemptyset(&sa_new.sa_mask);
        g_stop_signal = 0;
        sigaction(SIGINT, &sa_new, &sa_int);
        sigaction(SIGTERM, &sa_new, &sa_term);
    }
    rc = run_loop(r, res);
    if (handle_signals) {
        sigaction(SIGINT, &sa_int, NULL);
        sigaction(SIGTERM, &sa_term, NULL);
    }
    return rc;
}

static int run_loop(run_state* r, mx_train_result* res) {
    const mx_train_config* c = &r->c;
    int rc = MX_OK;

    mx_ckpt_meta* meta = r->meta;
    r->t0 = now_s();
    const int64_t tok_step = (int64_t)c->batch * c->seq * c->accum * r->world;
    res->skipped_nonfinite = meta->skipped_nonfinite;
    res->skipped_spikes = meta->skipped_spikes;
    res->spikes = meta->spikes;
    float vl = NAN;
    if (!r->resume) {
        rc = do_eval(r, 0, 0, &vl, res);
        if (rc) return finish(r, res, "error", rc);
        meta->val_loss0 = res->val_loss0 = vl;
        res->val_loss = vl;
        if (!isfinite(vl)) { res->reason = "non-finite validation loss"; return finish(r, res, "diverged", MX_DIVERGED); }
    }
    mx_crash_point("start", meta->step);
    while (meta->step < c->steps) {
        if (g_stop_signal) { /* a step boundary: the checkpoint of this step (unless just written), then stop */
            const int sig = g_stop_signal;
            if (r->ckpt_step != meta->step) {
                rc = checkpoint(r, meta->step, res);
                if (rc) return finish(r, res, "error", rc);
            }
            res->signal = sig;
            snprintf(res->ckpt, sizeof res->ckpt, "%s", r->ckpt_path);
            res->reason = sig == SIGINT ? "SIGINT" : "SIGTERM";
            return finish(r, res, "stopped", MX_STOPPED);
        }
        const int64_t k = meta->step + 1; /* this update */
        step_out s;
        rc = train_step(r, k, &s);
        if (rc) return finish(r, res, "error", rc);
        res->skipped_nonfinite = meta->skipped_nonfinite;
        res->skipped_spikes = meta->skipped_spikes;
        res->spikes = meta->spikes;
        r->train_s += s.dt;
        meta->step = k;
        meta->tokens += tok_step;
        r->tokens_this_run += tok_step;
        rc = log_step(r, k, &s);
        if (rc) return finish(r, res, "error", rc);
        if (s.bad && !s.skipped) {
            res->reason = "non-finite loss or gradient";
            return finish(r, res, "diverged", MX_DIVERGED);
        }
        if (meta->skipped_nonfinite + meta->skipped_spikes > c->max_skips) {
            res->reason = "too many skipped updates (--max-skips)";
            return finish(r, res, "diverged", MX_DIVERGED);
        }
        if ((c->eval_every > 0 && k % c->eval_every == 0) || k == c->steps) {
            rc = do_eval(r, k, meta->tokens, &vl, res);
            if (rc) return finish(r, res, "error", rc);
            res->val_loss = vl;
            if (!isfinite(vl)) { res->reason = "non-finite validation loss"; return finish(r, res, "diverged", MX_DIVERGED); }
        }
        if (c->sample_every > 0 && k % c->sample_every == 0 && r->io) { /* --sample-every: from the host weights */
            rc = r->eng->ops->sync_to_host(r->eng);
            if (rc) return finish(r, res, "error", rc);
            emit(r->cb, r->user, (mx_train_event){.kind = 3, .step = k, .steps = c->steps, .tokens = meta->tokens,
                                                  .model = &r->model, .elapsed_s = now_s() - r->t0});
        }
        int halt = c->halt_at > 0 && k == c->halt_at;
        if ((c->ckpt_every > 0 && k % c->ckpt_every == 0) || halt || (k == c->steps && !c->no_final_ckpt)) {
            rc = checkpoint(r, k, res);
            if (rc) return finish(r, res, "error", rc);
        }
        if (halt) break;
    }
    if (r->eng->ops->report(r->eng, r->msg, sizeof r->msg)) say(r);
    const char* status = meta->step < c->steps ? "halted" : res->tokens_to_target >= 0 ? "converged" : "budget";
    if (meta->step >= c->steps && c->target_loss > 0 && res->tokens_to_target < 0) res->reason = "target loss not reached";
    return finish(r, res, status, !strcmp(status, "budget") && c->target_loss > 0 ? MX_NOT_CONVERGED : MX_OK);
}
