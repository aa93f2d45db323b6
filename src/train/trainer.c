/* trainer.c: the training loop and the run directory.
 *
 *   DIR/config.txt      the resolved configuration ("key = value", loadable with --config)
 *   DIR/metrics.jsonl   training, evaluation, telemetry and status lines
 *   DIR/ckpt-%08d.bin   checkpoints (checkpoint.c)
 *   DIR/summary.json    the outcome
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mxlm/data.h"
#include "mxlm/train.h"

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
    if (!trajectory_only) {
        ADD("val = %s\nval-tokens = %lld\n", c->val, (long long)c->val_tokens);
        ADD("eval-every = %lld\nckpt-every = %lld\ntelemetry-every = %lld\n", (long long)c->eval_every,
            (long long)c->ckpt_every, (long long)c->telemetry_every);
        ADD("target-loss = %s\nkeep-ckpts = %d\n", dbl(d[0], c->target_loss), c->keep_ckpts);
    }
    return (int)len;
}

/* ---- small file helpers -------------------------------------------------------- */

static int mkdirs(const char* path) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char* s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) return mx_fail(MX_EIO, "%s: cannot create: %s", p, strerror(errno));
            *s = '/';
        }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return mx_fail(MX_EIO, "%s: cannot create: %s", p, strerror(errno));
    return MX_OK;
}

static int write_atomic(const char* path, const char* data, size_t n) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return mx_fail(MX_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t done = 0;
    int err = 0;
    while (done < n && !err) {
        ssize_t k = write(fd, data + done, n - done);
        if (k < 0 && errno != EINTR) err = errno;
        if (k > 0) done += (size_t)k;
    }
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) { unlink(tmp); return mx_fail(MX_EIO, "%s: cannot write: %s", path, strerror(err)); }
    return MX_OK;
}

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
        if (!s || strstr(line, "\"status\"")) continue;
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
    rc = write_atomic(path, out, len);
    free(out);
    return rc;
}

static void prune_ckpts(const char* dir, int keep) {
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
    FILE* metrics;
    char fingerprint[8192];
    int64_t n_val;        /* validation windows */
} run_state;

static void run_free(run_state* r) {
    if (r->metrics) fclose(r->metrics);
    mx_llama_free(&r->model);
    if (r->train.shards) mx_loader_close(&r->train);
    if (r->val.shards) mx_loader_close(&r->val);
    free(r->m);
    free(r->v);
    free(r->inp);
    free(r->tgt);
}

static int do_eval(run_state* r, int64_t step, int64_t tokens, float* out, mx_train_result* res, mx_train_cb cb,
                   void* user, double t0) {
    float vl = 0.0f;
    int rc = mx_evaluate(&r->model, &r->val, r->n_val, r->c.batch, r->c.seq, &vl);
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
    fflush(r->metrics);
    *out = vl;
    emit(cb, user, (mx_train_event){.kind = 1, .step = step, .steps = r->c.steps, .tokens = tokens, .val_loss = vl,
                                    .elapsed_s = now_s() - t0});
    return MX_OK;
}

static const char* fnum(char* b, size_t n, double x) {
    if (isfinite(x)) snprintf(b, n, "%.9g", x); else snprintf(b, n, "null"); /* NaN is not JSON */
    return b;
}

static void write_summary(run_state* r, mx_train_result* res) {
    char buf[1024], a[32], b[32], t[32];
    int k = snprintf(buf, sizeof buf,
                     "{\"status\":\"%s\",\"step\":%lld,\"tokens\":%lld,\"val_loss0\":%s,\"val_loss\":%s,"
                     "\"tokens_to_target\":%lld,\"seconds\":%.3f,\"tok_per_s\":%s,\"recipe\":\"%s\",\"preset\":\"%s\"}\n",
                     res->status, (long long)res->step, (long long)res->tokens, fnum(a, sizeof a, res->val_loss0),
                     fnum(b, sizeof b, res->val_loss), (long long)res->tokens_to_target, res->seconds,
                     fnum(t, sizeof t, res->tok_per_s), r->c.recipe, r->c.model.name);
    if (k < 0 || k >= (int)sizeof buf) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.json", r->c.out);
    write_atomic(path, buf, (size_t)k);
}

int mx_train_run(const mx_train_config* cfg, mx_train_result* res, mx_train_cb cb, void* user) {
    run_state R;
    memset(&R, 0, sizeof R);
    run_state* r = &R;
    r->c = *cfg;
    mx_train_config* c = &r->c;
    memset(res, 0, sizeof *res);
    res->status = "error";
    res->tokens_to_target = -1;
    res->val_loss0 = res->val_loss = NAN;
    if (c->seq <= 0) c->seq = c->model.seq_len;
    if (c->warmup < 0) c->warmup = c->steps / 20 > 0 ? c->steps / 20 : 1;
    if (c->keep_ckpts < 1) c->keep_ckpts = 1;
    if (c->batch <= 0 || c->accum <= 0 || c->steps <= 0)
        return mx_fail(MX_EINVAL, "train: batch, accum and steps must be positive");
    if (c->seq > c->model.seq_len)
        return mx_fail(MX_EINVAL, "train: seq %d exceeds the model's context %d", c->seq, c->model.seq_len);
    const int B = c->batch, T = c->seq;
    const int64_t tok_step = (int64_t)B * T * c->accum;

    mx_recipe recipe;
    int rc = mx_recipe_parse(c->recipe, &recipe);
    if (rc) return rc;
    mx_train_config_text(c, 1, r->fingerprint, sizeof r->fingerprint);

    /* refuse before touching anything in the run directory */
    char latest[1200], mpath[1200];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", c->out);
    int have_ckpt = mx_ckpt_latest(c->out, latest, sizeof latest);
    if (c->resume && !have_ckpt) return mx_fail(MX_EINVAL, "train: --resume: no checkpoint in %s", c->out);
    if (!c->resume && (have_ckpt || file_exists(mpath)))
        return mx_fail(MX_EINVAL, "train: %s already holds a run (use --resume to continue it, or another --out)",
                       c->out);

    rc = mx_llama_create(&r->model, &c->model, &recipe, c->bf16_first, c->bf16_last, c->seed);
    if (!rc) rc = mx_llama_alloc_acts(&r->model, B, T);
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
    r->m = calloc(np, sizeof(float));
    r->v = calloc(np, sizeof(float));
    r->inp = malloc(sizeof(int32_t) * B * T);
    r->tgt = malloc(sizeof(int32_t) * B * T);
    if (!r->m || !r->v || !r->inp || !r->tgt) { run_free(r); return mx_fail(MX_ENOMEM, "train: out of memory"); }

    mx_ckpt_meta meta = {.tokens_to_target = -1, .val_loss0 = NAN};
    if (c->resume) {
        rc = mx_ckpt_load(latest, &r->model, r->m, r->v, &meta, r->fingerprint);
        if (rc) { run_free(r); return rc; }
        res->tokens_to_target = meta.tokens_to_target;
        res->val_loss0 = meta.val_loss0;
    } else {
        mx_llama_init_weights(&r->model, c->seed);
    }
    rc = mkdirs(c->out);
    if (!rc && c->resume) rc = truncate_metrics(mpath, meta.step);
    char text[8192];
    int tl = mx_train_config_text(c, 0, text, sizeof text);
    char cpath[1200];
    snprintf(cpath, sizeof cpath, "%s/config.txt", c->out);
    if (!rc) rc = write_atomic(cpath, text, (size_t)(tl < (int)sizeof text ? tl : (int)sizeof text - 1));
    if (rc) { run_free(r); return rc; }
    r->metrics = fopen(mpath, "a");
    if (!r->metrics) { run_free(r); return mx_fail(MX_EIO, "%s: cannot open: %s", mpath, strerror(errno)); }

    char msg[1600];
    snprintf(msg, sizeof msg, "%s %s: %lld parameters, %lld tokens/step (%d x %d x %d), %lld val tokens%s",
             c->model.name, c->recipe, (long long)np, (long long)tok_step, B, T, c->accum, (long long)(r->n_val * T),
             c->resume ? ", resumed" : "");
    emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    if (c->resume) {
        snprintf(msg, sizeof msg, "resumed from %s (step %lld)", latest, (long long)meta.step);
        emit(cb, user, (mx_train_event){.kind = 2, .msg = msg});
    }

    double t0 = now_s(), train_s = 0.0;
    int64_t step = meta.step, sample = meta.sample, tokens = meta.tokens, tokens_this_run = 0;
    float vl = NAN;
    if (!c->resume) {
        rc = do_eval(r, 0, 0, &vl, res, cb, user, t0);
        if (rc) goto fail;
        meta.val_loss0 = res->val_loss0 = vl;
        res->val_loss = vl;
        if (!isfinite(vl)) { res->status = "diverged"; goto diverged; }
    }
    mx_llama* M = &r->model;
    while (step < c->steps) {
        int64_t k = step + 1; /* this update */
        double ts = now_s();
        if (c->debug_nan_at == k) M->params[M->info[MX_P_WQ].offset] = NAN;
        int tele = c->telemetry_every > 0 && k % c->telemetry_every == 0;
        if (tele) mx_telemetry_reset(M);
        M->telemetry = tele;
        mx_llama_zero_grad(M);
        double lsum = 0.0;
        for (int a = 0; a < c->accum; a++) {
            M->step = (uint64_t)(k - 1) * (uint64_t)c->accum + (uint64_t)a;
            for (int b = 0; b < B && !rc; b++)
                rc = mx_loader_window(&r->train, mx_loader_sample(&r->train, c->seed, sample++), r->inp + b * T,
                                      r->tgt + b * T);
            float lo = 0.0f;
            if (!rc) rc = mx_llama_forward(M, r->inp, r->tgt, B, T, &lo);
            if (!rc) rc = mx_llama_backward(M, r->inp, r->tgt, 1.0f / (float)tok_step);
            if (rc) goto fail;
            lsum += lo;
        }
        M->telemetry = 0;
        float loss = (float)(lsum / c->accum);
        double gn = sqrt(mx_sum_squares(M->grads, np));
        double lr = mx_lr_at(k - 1, c->steps, c->warmup, c->lr, c->min_lr_frac);
        int bad = !isfinite(loss) || !isfinite(gn);
        if (!bad) {
            float gscale = (c->clip > 0 && gn > c->clip) ? (float)(c->clip / gn) : 1.0f;
            mx_adamw_update(M, r->m, r->v, &c->adamw, lr, gscale, k);
        }
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
        fprintf(r->metrics, "}\n");
        if (tele) rc = mx_telemetry_write(M, k, r->metrics);
        fflush(r->metrics);
        if (rc) goto fail;
        emit(cb, user, (mx_train_event){.kind = 0, .step = k, .steps = c->steps, .tokens = tokens, .loss = loss,
                                        .lr = lr, .grad_norm = gn, .tok_per_s = tok_step / dt,
                                        .elapsed_s = now_s() - t0});
        if (bad) { res->status = "diverged"; goto diverged; }
        if ((c->eval_every > 0 && k % c->eval_every == 0) || k == c->steps) {
            rc = do_eval(r, k, tokens, &vl, res, cb, user, t0);
            if (rc) goto fail;
            res->val_loss = vl;
            if (!isfinite(vl)) { res->status = "diverged"; goto diverged; }
        }
        int halt = c->halt_at > 0 && k == c->halt_at;
        if ((c->ckpt_every > 0 && k % c->ckpt_every == 0) || halt || k == c->steps) {
            char path[1200];
            snprintf(path, sizeof path, "%s/ckpt-%08lld.bin", c->out, (long long)k);
            meta.step = k;
            meta.sample = sample;
            meta.tokens = tokens;
            meta.tokens_to_target = res->tokens_to_target;
            rc = mx_ckpt_save(path, M, r->m, r->v, &meta, r->fingerprint);
            if (rc) goto fail;
            prune_ckpts(c->out, c->keep_ckpts);
        }
        if (halt) break;
    }
    res->status = step >= c->steps ? "done" : "halted";
    res->step = step;
    res->tokens = tokens;
    res->seconds = now_s() - t0;
    res->tok_per_s = train_s > 0 ? tokens_this_run / train_s : 0;
    fprintf(r->metrics, "{\"status\":\"%s\",\"step\":%lld,\"tokens\":%lld}\n", res->status, (long long)step,
            (long long)tokens);
    write_summary(r, res);
    run_free(r);
    return MX_OK;
diverged:
    res->step = step;
    res->tokens = tokens;
    res->seconds = now_s() - t0;
    res->tok_per_s = train_s > 0 ? tokens_this_run / train_s : 0;
    fprintf(r->metrics, "{\"status\":\"diverged\",\"step\":%lld,\"tokens\":%lld}\n", (long long)step, (long long)tokens);
    write_summary(r, res);
    run_free(r);
    return MX_DIVERGED;
fail:
    run_free(r);
    return rc ? rc : mx_fail(MX_EINVAL, "train: failed");
}
