/* train.c: ./mxlm train - the trainer (src/train/: on the CPU or, in the CUDA build, the GPU; the
 * data-parallel launcher is src/train/launch.c).
 * Options come from --config FILE ("key = value" lines, the names of the
 * flags) and then the command line, which overrides the file. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/using.h"
#include "mxlm/config.h"
#include "mxlm/engine.h"
#include "mxlm/linear_plan.h"
#include "mxlm/tokrec.h"
#include "mxlm/trainer.h"
#include "mxlm/util.h"

typedef struct {
    int tty, log_every;
    int64_t last_step;
    const char* out;      /* run directory and seed: --sample-every */
    uint64_t seed;
} progress;

static void fmt_eta(char* b, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) { snprintf(b, n, "?"); return; }
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(b, n, "%dh%02dm", t / 3600, t / 60 % 60);
    else snprintf(b, n, "%dm%02ds", t / 60, t % 60);
}

static void on_event(const mx_train_event* e, void* user) {
    progress* p = user;
    if (e->kind == 3) { /* --sample-every (src/cli/using.c) */
        if (p->tty && p->last_step) printf("\n");
        p->last_step = 0;
        cli_train_sample(e, p->out, p->seed);
    } else if (e->kind == 2) {
        printf("%s%s\n", p->tty && p->last_step ? "\n" : "", e->msg);
        p->last_step = 0;
    } else if (e->kind == 1) {
        printf("%sstep %lld/%lld  tokens %lld  val_loss %.9g\n", p->tty && p->last_step ? "\n" : "", (long long)e->step,
               (long long)e->steps, (long long)e->tokens, (double)e->val_loss);
        p->last_step = 0;
    } else {
        char eta[32];
        double per = e->elapsed_s / (double)(e->step ? e->step : 1);
        fmt_eta(eta, sizeof eta, per * (double)(e->steps - e->step));
        if (p->tty) {
            printf("\rstep %lld/%lld  loss %.6f  lr %.2e  gnorm %.3f  %.0f tok/s  ETA %s   ", (long long)e->step,
                   (long long)e->steps, (double)e->loss, e->lr, e->grad_norm, e->tok_per_s, eta);
            p->last_step = e->step;
        } else if (e->step % p->log_every == 0 || e->step == e->steps || !isfinite(e->loss)) {
            printf("step %lld/%lld  loss %.9g  lr %.6g  grad_norm %.6g  tok/s %.0f  eta %s\n", (long long)e->step,
                   (long long)e->steps, (double)e->loss, e->lr, e->grad_norm, e->tok_per_s, eta);
        }
    }
    fflush(stdout);
}

/* Read a config file into argv-style tokens ("--key=value", "--flag"); the
 * grammar is in include/mxlm/config.h. The keys are train_main's options
 * (tests/test_config.c checks this table against `mxlm train --help`). */
static const mx_config_key k_train_keys[] = {
        {"preset", 0}, {"recipe", 0}, {"steps", 0}, {"seed", 0}, {"out", 0}, {"batch", 0}, {"seq", 0},
        {"accum", 0}, {"lr", 0}, {"min-lr-frac", 0}, {"warmup", 0}, {"beta1", 0}, {"beta2", 0}, {"adam-eps", 0},
        {"weight-decay", 0}, {"clip", 0}, {"train", 0}, {"val", 0}, {"val-tokens", 0}, {"eval-every", 0},
        {"eval-every-tokens", 0}, {"ckpt-every", 0}, {"keep-ckpts", 0}, {"keep", 0}, {"telemetry-every", 0},
        {"target-loss", 0}, {"halt-at", 0}, {"resume", 1}, {"bf16-first", 0}, {"bf16-last", 0}, {"vocab", 0},
        {"dim", 0}, {"layers", 0}, {"heads", 0}, {"kv-heads", 0}, {"ffn", 0}, {"context", 0}, {"rope-theta", 0},
        {"norm-eps", 0}, {"device", 0}, {"gemm", 0}, {"init-from", 0}, {"threads", 0}, {"log-every", 0},
        {"describe", 1}, {"on-nonfinite", 0}, {"max-skips", 0}, {"spike-window", 0}, {"spike-z", 0},
        {"skip-spikes", 1}, {"ignore-limits", 1}, {"recompute", 0}, {"gpus", 0}, {"nccl", 0}, {"final-ckpt", 0}, {"head", 0}, {"attn", 0}, {"mem-limit-mib", 0}, {"debug-nan-at", 0},
        {"sample-every", 0}, {"debug-nan-grad-at", 0}, {"debug-spike-at", 0}, {"schedule-steps", 0}, {"ckpt", 0}, {"run-id", 0},
        {"list-recipes", 1}, {NULL, 0}};
static int load_config(const char* path, char*** out, int* nout, const mx_config_key** keys_out) {
    if (keys_out) *keys_out = k_train_keys;
    if (mx_config_load(path, k_train_keys, out, nout)) {
        fprintf(stderr, "mxlm train: %s\n", mx_last_error());
        return 2;
    }
    return 0;
}

static int train_main(int argc, char** argv, const char* config_path);

/* A path option into its field of the configuration: 0, or 2 (a usage error) when it does not fit. */
static int cfg_path(char* dst, size_t n, const char* v) { return cli_pathf("train", dst, n, "%s", v); }

static int bad_num(const char* opt, double x, const char* want) {
    fprintf(stderr, "mxlm train: --%s %.17g: %s\n", opt, x, want);
    return 2;
}

/* --run-id: 1 to 16 hex digits, not 0 (2 and a message when not). */
static int parse_run_id(const char* s, uint64_t* out) {
    char* end = NULL;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 16);
    if (errno || end == s || *end || strlen(s) > 16 || !x || *s == '-' || *s == '+' || isspace((unsigned char)*s)) {
        fprintf(stderr, "mxlm train: --run-id '%s': 1 to 16 hex digits, not 0\n", s);
        return 2;
    }
    *out = x;
    return 0;
}

/* Ranges of the numeric options (NaN and Inf included), before anything is created: 2 with the option named. */
static int check_numbers(const mx_train_config* c, int log_every, int vocab, int dim, int layers,
                         int heads, int kvh, int ffn, int context, double rope_theta, double norm_eps,
                         int64_t eval_every_tokens, int64_t mem_limit_mib) {
    if (!(isfinite(c->lr) && c->lr > 0 && c->lr <= 10)) return bad_num("lr", c->lr, "must be in (0, 10]");
    if (!(c->min_lr_frac >= 0 && c->min_lr_frac <= 1)) return bad_num("min-lr-frac", c->min_lr_frac, "must be in [0, 1]");
    if (!(c->adamw.beta1 >= 0 && c->adamw.beta1 < 1)) return bad_num("beta1", c->adamw.beta1, "must be in [0, 1)");
    if (!(c->adamw.beta2 >= 0 && c->adamw.beta2 < 1)) return bad_num("beta2", c->adamw.beta2, "must be in [0, 1)");
    if (!(isfinite(c->adamw.eps) && c->adamw.eps > 0 && c->adamw.eps < 1))
        return bad_num("adam-eps", c->adamw.eps, "must be in (0, 1)");
    if (!(isfinite(c->adamw.weight_decay) && c->adamw.weight_decay >= 0 && c->adamw.weight_decay <= 10))
        return bad_num("weight-decay", c->adamw.weight_decay, "must be in [0, 10]");
    if (!(isfinite(c->clip) && c->clip >= 0)) return bad_num("clip", c->clip, "must be >= 0 (0: off)");
    if (!(isfinite(c->target_loss) && c->target_loss >= 0)) return bad_num("target-loss", c->target_loss, "must be >= 0");
    if (!(isfinite(c->spike_z) && c->spike_z > 0)) return bad_num("spike-z", c->spike_z, "must be > 0");
    if (!(isfinite(rope_theta) && rope_theta >= 0)) return bad_num("rope-theta", rope_theta, "must be > 0");
    if (!(isfinite(norm_eps) && norm_eps >= 0 && norm_eps < 1)) return bad_num("norm-eps", norm_eps, "must be in (0, 1)");
    const struct { const char* name; int64_t v, lo, hi; } in[] = {
        {"steps", c->steps, 1, INT64_MAX / 2},
        {"schedule-steps", c->sched_steps, 0, INT64_MAX / 2},
        {"batch", c->batch, 1, 1 << 20},
        {"seq", c->seq, 0, 1 << 24},
        {"accum", c->accum, 1, 1 << 20},
        {"val-tokens", c->val_tokens, 1, INT64_MAX / 2},
        {"eval-every", c->eval_every, 0, INT64_MAX / 2},
        {"eval-every-tokens", eval_every_tokens, 0, INT64_MAX / 2},
        {"ckpt-every", c->ckpt_every, 0, INT64_MAX / 2},
        {"keep-ckpts", c->keep_ckpts, 1, 1000},
        {"telemetry-every", c->telemetry_every, 0, INT64_MAX / 2},
        {"halt-at", c->halt_at, 0, INT64_MAX / 2},
        {"bf16-first", c->bf16_first, 0, 1 << 16},
        {"bf16-last", c->bf16_last, 0, 1 << 16},
        {"max-skips", c->max_skips, 0, INT64_MAX / 2},
        {"spike-window", c->spike_window, 0, MX_SPIKE_WINDOW_MAX},
        {"sample-every", c->sample_every, 0, INT64_MAX / 2},
        {"log-every", log_every, 0, INT32_MAX},
        {"vocab", vocab, 0, 1 << 24},
        {"dim", dim, 0, 1 << 20},
        {"layers", layers, 0, 4096},
        {"heads", heads, 0, 1 << 16},
        {"kv-heads", kvh, 0, 1 << 16},
        {"ffn", ffn, 0, 1 << 22},
        {"context", context, 0, 1 << 24},
        {"mem-limit-mib", mem_limit_mib, 0, INT64_MAX / (1 << 21)},
        {"debug-nan-at", c->debug_nan_at, 0, INT64_MAX / 2},
        {"debug-nan-grad-at", c->debug_nan_grad_at, 0, INT64_MAX / 2},
        {"debug-spike-at", c->debug_spike_at, 0, INT64_MAX / 2},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        if (in[i].v < in[i].lo || in[i].v > in[i].hi) {
            fprintf(stderr, "mxlm train: --%s %lld: must be in [%lld, %lld]%s\n", in[i].name, (long long)in[i].v,
                    (long long)in[i].lo, (long long)in[i].hi, in[i].lo == 0 ? " (0: off / the default)" : "");
            return 2;
        }
    if (c->spike_window == 1) { fprintf(stderr, "mxlm train: --spike-window 1: 0 (off) or 2..%d\n", MX_SPIKE_WINDOW_MAX); return 2; }
    return 0;
}

/* The model against the run's shape and the recipe: the context, the kept BF16 blocks against the layers,
 * and every GEMM of every linear layer under the recipe (block multiples of 32 for MXFP4 including the
 * tokens of a micro-batch, the rotation size), before anything is created. */
static int check_shapes(const mx_train_config* c, const mx_recipe* r) {
    const mx_model_config* m = &c->model;
    if (c->seq > m->seq_len) {
        fprintf(stderr, "mxlm train: --seq %d exceeds the model's context %d (--context)\n", c->seq, m->seq_len);
        return 2;
    }
    if (c->bf16_first + c->bf16_last > m->n_layers) {
        fprintf(stderr, "mxlm train: --bf16-first %d + --bf16-last %d exceed the model's %d layers\n", c->bf16_first,
                c->bf16_last, m->n_layers);
        return 2;
    }
    if (c->halt_at > c->steps) {
        fprintf(stderr, "mxlm train: --halt-at %lld is past --steps %lld\n", (long long)c->halt_at, (long long)c->steps);
        return 2;
    }
    if (c->bf16_first + c->bf16_last == m->n_layers) return 0; /* every block in BF16 */
    const int kvd = m->dim / m->n_heads * m->n_kv_heads;
    const int64_t BT = (int64_t)c->batch * c->seq;
    const struct { const char* name; int in, out; } lin[] = {
        {"wq", m->dim, m->dim}, {"wk", m->dim, kvd}, {"wo", m->dim, m->dim}, {"w1", m->dim, m->ffn}, {"w2", m->ffn, m->dim}};
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        const int Ma[3] = {(int)BT, (int)BT, lin[i].out}, Nb[3] = {lin[i].out, lin[i].in, lin[i].in},
                  R[3] = {lin[i].in, lin[i].out, (int)BT};
        for (int g = 0; g < 3; g++)
            if (mx_gemm_check_dims((mx_gemm_id)g, &r->g[g], Ma[g], Nb[g], R[g])) {
                fprintf(stderr, "mxlm train: --recipe %s with this model (dim %d, ffn %d, kv dim %d) and --batch %d x "
                                "--seq %d (%lld tokens per micro-batch), layer %s: %s\n", c->recipe, m->dim, m->ffn,
                        kvd, c->batch, c->seq, (long long)BT, lin[i].name, mx_last_error());
                return 2;
            }
    }
    return 0;
}

/* The training shards, the validation shards, the run resumed (its tokenizer.txt) and --init-from's export (its
 * tokenizer.txt) must share one tokenizer (tokrec.h), checked before the run directory is made: 2 when not. */
static int check_tokenizers(const mx_train_config* c) {
    char tw[1100], vw[1100], rw[1300], iw[1300];
    snprintf(tw, sizeof tw, "--train %s", c->train);
    snprintf(vw, sizeof vw, "--val %s", c->val);
    snprintf(rw, sizeof rw, "the run %s (tokenizer.txt)", c->out);
    snprintf(iw, sizeof iw, "--init-from %s (tokenizer.txt)", c->init_from);
    const mx_tok_source src[4] = {{tw, c->train, NULL, NULL}, {vw, c->val, NULL, NULL},
                                  {rw, NULL, c->resume ? c->out : NULL, NULL},
                                  {iw, NULL, c->init_from[0] ? c->init_from : NULL, NULL}};
    if (mx_tokrec_agree(src, 4) == 0) return 0;
    fprintf(stderr, "mxlm train: %s (nothing was created)\n", mx_last_error());
    return 2;
}

/* Notes of the data-parallel launcher (engine.h): progress on stdout, a rank's failure on stderr. */
static void launch_note(const char* line, int is_error, void* user) {
    (void)user;
    if (is_error) fprintf(stderr, "mxlm train: %s\n", line);
    else printf("%s\n", line);
    fflush(is_error ? stderr : stdout);
}

/* *out = the index of `val` in names (NULL-terminated); else a usage error listing them (2). */
static int choice(const char* opt, const char* val, const char* const* names, int* out) {
    char list[256] = "";
    int n = 0;
    for (; names[n]; n++)
        if (!strcmp(val, names[n])) { *out = n; return 0; }
    for (int i = 0; i < n; i++) {
        size_t k = strlen(list);
        snprintf(list + k, sizeof list - k, "%s'%s'", i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    }
    fprintf(stderr, "mxlm train: --%s: %s, not '%s'\n", opt, list, val);
    return 2;
}

/* One option of a token list: its key (without dashes, into key[n]) and value ("1" for a flag); returns the
 * tokens used (0: not an option). */
static int token_opt(char** t, int n, int i, const mx_config_key* keys, char* key, size_t kn, const char** val) {
    if (strncmp(t[i], "--", 2) || !t[i][2]) return 0;
    const char* a = t[i] + 2;
    const char* eq = strchr(a, '=');
    size_t kl = eq ? (size_t)(eq - a) : strlen(a);
    snprintf(key, kn, "%.*s", (int)kl, a);
    if (eq) { *val = eq + 1; return 1; }
    for (const mx_config_key* k = keys; k->name; k++)
        if (!strcmp(k->name, key)) {
            if (k->flag) { *val = "1"; return 1; }
            if (i + 1 < n) { *val = t[i + 1]; return 2; }
            break;
        }
    *val = "";
    return 1;
}

/* Keys a resumed run may change (they change no number of the trajectory, or --steps: an extension). */
static int resume_may_change(const char* k) {
    static const char* const ok[] = {"steps", "device", "gemm", "recompute", "attn", "eval-every", "ckpt-every",
                                     "telemetry-every", "target-loss", "keep-ckpts", "on-nonfinite", "max-skips",
                                     "spike-window", "spike-z", "skip-spikes", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(ok[i], k)) return 1;
    return 0;
}

static int same_value(const char* key, const char* a, const char* b) {
    if (!strcmp(key, "run-id")) return strtoull(a, NULL, 16) == strtoull(b, NULL, 16); /* hex, any width */
    char *ea = NULL, *eb = NULL;
    double x = strtod(a, &ea), y = strtod(b, &eb);
    if (ea != a && !*ea && eb != b && !*eb) return x == y || (x != x && y != y);
    return !strcmp(a, b);
}

/* --resume: the run's own config.txt is the base of the options (docs/training.md). When the run has a
 * checkpoint, an option given with --resume must agree with it (the ones of resume_may_change excepted):
 * refused by name (2). --steps other than the run's keeps the run's schedule (--schedule-steps). */
static int resume_base(char** u, int nu, char*** base, int* nbase) {
    const mx_config_key* keys = k_train_keys;
    const char* out = "runs/tiny";
    const char* ckpt = NULL;
    char key[64];
    const char* val;
    for (int i = 0; i < nu;) {
        int k = token_opt(u, nu, i, keys, key, sizeof key, &val);
        if (!k) { i++; continue; }
        if (!strcmp(key, "out")) out = val;
        if (!strcmp(key, "ckpt")) ckpt = val;
        i += k;
    }
    char cpath[1200], latest[1200];
    if (cli_pathf("train", cpath, sizeof cpath, "%s/config.txt", out)) return 2;
    struct stat st;
    if (stat(cpath, &st) != 0) { /* nothing recorded: the trainer decides (restart, or no run) - unless it has
                                  * checkpoints, whose configuration is lost: no option is to blame */
        const int e = errno;
        /* (a --ckpt that is no regular file is no checkpoint: the trainer refuses it as an input) */
        if (!mx_ckpt_latest(out, latest, sizeof latest) && !(ckpt && stat(ckpt, &st) == 0 && S_ISREG(st.st_mode)))
            return 0;
        fprintf(stderr, "mxlm train: --resume: %s has checkpoints but no config.txt (%s: %s): the run's configuration "
                        "is lost, so it cannot be resumed; put its config.txt back\n", out, cpath, strerror(e));
        return 1;
    }
    char** t = NULL;
    int nt = 0;
    int rc = load_config(cpath, &t, &nt, NULL);
    if (rc) return rc;
    const int has_ckpt = ckpt || mx_ckpt_latest(out, latest, sizeof latest);
    const char* run_steps = NULL;
    const char* run_sched = NULL;
    for (int i = 0; i < nt; i++) {
        if (!strncmp(t[i], "--steps=", 8)) run_steps = t[i] + 8;
        if (!strncmp(t[i], "--schedule-steps=", 17)) run_sched = t[i] + 17;
    }
    /* the schedule stays the run's: inject --schedule-steps (a no-op when --steps stays the same) */
    char** b = malloc(sizeof(char*) * (size_t)(nt + 1));
    if (!b) return 1;
    for (int i = 0; i < nt; i++) b[i] = t[i];
    free(t);
    if (!run_sched && run_steps) {
        char inj[64];
        snprintf(inj, sizeof inj, "--schedule-steps=%s", run_steps);
        b[nt++] = strdup(inj);
    }
    *base = b;
    *nbase = nt;
    if (!has_ckpt) return 0; /* the run never checkpointed: the command's options are the corrected ones */
    for (int i = 0; i < nu;) {
        int k = token_opt(u, nu, i, keys, key, sizeof key, &val);
        if (!k) { i++; continue; }
        i += k;
        if (resume_may_change(key)) continue;
        int later = 0; /* only the value that counts: the last one given */
        for (int j = i; j < nu && !later;) {
            char k2[64];
            const char* v2;
            int kk = token_opt(u, nu, j, keys, k2, sizeof k2, &v2);
            if (!kk) { j++; continue; }
            later = !strcmp(k2, key);
            j += kk;
        }
        if (later) continue;
        char want[80];
        snprintf(want, sizeof want, "--%s=", key);
        for (int j = 0; j < nt; j++) {
            const char* rv = NULL;
            if (!strncmp(b[j], want, strlen(want))) rv = b[j] + strlen(want);
            else if (!strcmp(b[j] + 2, key) && !strncmp(b[j], "--", 2)) rv = "1";
            if (rv && !same_value(key, rv, val)) {
                fprintf(stderr, "mxlm train: --resume: --%s %s differs from the run's %s = %s (%s); a resumed run "
                                "keeps its configuration (drop --%s, or train into another --out)\n",
                        key, val, key, rv, cpath, key);
                return 2;
            }
        }
    }
    return 0;
}

/* --config first, then the command line over it; with --resume the run's config.txt below both */
int cmd_train(int argc, char** argv) {
    const char* config = NULL;
    int resume = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9)) config = argv[i] + 9;
        if (!strcmp(argv[i], "--resume")) resume = 1;
    }
    char** cf = NULL;
    int ncf = 0;
    if (config && cli_path_check("train", "config", config)) return 2;
    int rc = config ? load_config(config, &cf, &ncf, NULL) : 0;
    if (rc) return rc;
    for (int i = 0; i < ncf; i++) resume |= !strcmp(cf[i], "--resume");
    char** all = malloc(sizeof(char*) * (size_t)(ncf + argc + 1));
    if (!all) return 1;
    int nall = 0;
    for (int i = 0; i < ncf; i++) all[nall++] = cf[i];
    for (int i = 1; i < argc; i++) all[nall++] = argv[i];
    char** base = NULL;
    int nbase = 0;
    if (resume && (rc = resume_base(all, nall, &base, &nbase))) {
        for (int i = 0; i < nbase; i++) free(base[i]);
        free(base);
        free(all);
        for (int i = 0; i < ncf; i++) free(cf[i]);
        free(cf);
        return rc;
    }
    char** full = malloc(sizeof(char*) * (size_t)(nbase + nall + 2));
    if (!full) return 1;
    int nfull = 0;
    full[nfull++] = argv[0];
    for (int i = 0; i < nbase; i++) full[nfull++] = base[i];
    for (int i = 0; i < nall; i++) full[nfull++] = all[i];
    rc = train_main(nfull, full, config);
    for (int i = 0; i < ncf; i++) free(cf[i]);
    for (int i = 0; i < nbase; i++) free(base[i]);
    free(cf);
    free(base);
    free(all);
    free(full);
    return rc;
}

static int train_main(int argc, char** argv, const char* config_path) {
    mx_train_config c;
    mx_train_config_default(&c);
    const char *config = config_path, *preset = "tiny", *recipe = "mxfp4-fdw-h16", *train = NULL, *val = NULL, *out = NULL;
    int vocab = 0, dim = 0, layers = 0, heads = 0, kvh = 0, ffn = 0, context = 0, describe = 0;
    int log_every = 0;
    const char* on_nonfinite = NULL;
    const char *device = NULL, *gemm = NULL, *init_from = NULL;
    int final_ckpt = 1;
    const char* head = NULL;
    const char* attn = NULL;
    int64_t mem_limit_mib = 0;
    double rope_theta = 0, norm_eps = 0;
    int64_t eval_every_tokens = 0;
    int gpus = 0, nccl = 0;
    const char* ckpt = NULL;
    const char* run_id = NULL;
    int list_recipes = 0;
    c.warmup = INT64_MIN; /* not given: steps / 20 */
    const cli_opt opts[] = {
        {"config", OPT_PATH, &config, "config file of 'key = value' lines (flag names); flags override it"},
        {"preset", OPT_STR, &preset, "model: tiny, 20m, 60m, 125m, 350m, 1b, llama3.1-8b (default tiny)"},
        {"recipe", OPT_STR, &recipe, "precision recipe (default mxfp4-fdw-h16; see mxlm quant --help)"},
        {"steps", OPT_I64, &c.steps, "optimizer steps (default 200)"},
        {"seed", OPT_U64, &c.seed, "run seed: init, data order, SR bits (default 1)"},
        {"out", OPT_PATH, &out, "run directory (default runs/tiny)"},
        {"batch", OPT_INT, &c.batch, "sequences per micro-batch (default 8)"},
        {"seq", OPT_INT, &c.seq, "tokens per sequence (default: the model's context)"},
        {"accum", OPT_INT, &c.accum, "micro-batches per step (gradient accumulation, default 1)"},
        {"lr", OPT_DOUBLE, &c.lr, "peak learning rate (default 3e-3)"},
        {"min-lr-frac", OPT_DOUBLE, &c.min_lr_frac, "cosine floor as a fraction of the peak (default 0.1)"},
        {"warmup", OPT_I64, &c.warmup, "warmup steps (default steps/20)"},
        {"beta1", OPT_DOUBLE, &c.adamw.beta1, "AdamW beta1 (0.9)"},
        {"beta2", OPT_DOUBLE, &c.adamw.beta2, "AdamW beta2 (0.95)"},
        {"adam-eps", OPT_DOUBLE, &c.adamw.eps, "AdamW eps (1e-5)"},
        {"weight-decay", OPT_DOUBLE, &c.adamw.weight_decay, "weight decay on matrices (0.1)"},
        {"clip", OPT_DOUBLE, &c.clip, "global gradient-norm clip (1.0; 0 = off)"},
        {"train", OPT_PATH, &train, "training shards, a glob (default the embedded corpus)"},
        {"val", OPT_PATH, &val, "validation shards, a glob (default the embedded corpus)"},
        {"val-tokens", OPT_I64, &c.val_tokens, "validation tokens (default 8192)"},
        {"eval-every", OPT_I64, &c.eval_every, "evaluate every N steps (default 25; always at 0 and the end)"},
        {"eval-every-tokens", OPT_I64, &eval_every_tokens, "evaluate every N tokens (rounded up to whole steps)"},
        {"ckpt-every", OPT_I64, &c.ckpt_every, "checkpoint every N steps (default: only at the end / --halt-at)"},
        {"keep-ckpts", OPT_INT, &c.keep_ckpts, "checkpoints kept in the run directory (default 2, at least 1)"},
        {"keep", OPT_INT, &c.keep_ckpts, "the same as --keep-ckpts"},
        {"telemetry-every", OPT_I64, &c.telemetry_every, "per-GEMM quantization telemetry every N steps (0 = off)"},
        {"target-loss", OPT_DOUBLE, &c.target_loss, "record tokens-to-target at the first eval <= X"},
        {"halt-at", OPT_I64, &c.halt_at, "stop after step K with a checkpoint (a pre-empted job)"},
        {"resume", OPT_FLAG, &c.resume, "continue the run in --out from its latest checkpoint, with its config.txt "
                                        "(options given must agree, except --steps, which extends a run, and the "
                                        "device and policy options)"},
        {"ckpt", OPT_PATH, &ckpt, "with --resume: continue from this (older) checkpoint; newer ones are moved aside"},
        {"schedule-steps", OPT_I64, &c.sched_steps, "the LR schedule's length (default --steps; steps past it run at "
                                                   "the floor; set by --resume when --steps extends a run)"},
        {"run-id", OPT_STR, &run_id, "the run's id, 16 hex digits (default: random at creation; kept in config.txt and "
                                     "every checkpoint: --resume refuses another run's checkpoint)"},
        {"list-recipes", OPT_FLAG, &list_recipes, "print the named recipes, one per line with a description, and exit"},
        {"bf16-first", OPT_INT, &c.bf16_first, "keep the first K blocks in bf16"},
        {"bf16-last", OPT_INT, &c.bf16_last, "keep the last K blocks in bf16"},
        {"vocab", OPT_INT, &vocab, "override the preset's vocabulary size"},
        {"dim", OPT_INT, &dim, "override the model width"},
        {"layers", OPT_INT, &layers, "override the number of blocks"},
        {"heads", OPT_INT, &heads, "override the query heads"},
        {"kv-heads", OPT_INT, &kvh, "override the key/value heads"},
        {"ffn", OPT_INT, &ffn, "override the SwiGLU width"},
        {"context", OPT_INT, &context, "override the context length"},
        {"rope-theta", OPT_DOUBLE, &rope_theta, "override RoPE theta (500000)"},
        {"norm-eps", OPT_DOUBLE, &norm_eps, "override the RMSNorm eps (1e-5)"},
        {"device", OPT_STR, &device, "auto (default: the GPU when the CUDA build finds one), cpu or cuda"},
        {"gemm", OPT_STR, &gemm, "GPU MXFP4 GEMMs: fast (default: E4M3 fold + FP8 tensor cores) or exact "
                                 "(dequantize to BF16, BF16 GEMM)"},
        {"head", OPT_STR, &head, "LM head GEMMs: auto (default: bf16 on the GPU unless the recipe is fp32, fp32 on "
                                 "the CPU), fp32, or bf16 (BF16 operands, FP32 accumulation; CPU and GPU alike)"},
        {"attn", OPT_STR, &attn, "GPU attention: auto (default: flash where the head dim is 64 or 128, else tf32), "
                                 "flash (flash attention on BF16 tensor cores, scores never stored, deterministic), "
                                 "simt (FP32 SIMT kernels, scores never stored), gemm (cuBLASLt FP32 GEMMs, one "
                                 "sequence's scores at a time), tf32 (the same on TF32 tensor cores)"},
        {"final-ckpt", OPT_INT, &final_ckpt, "1 (default): a checkpoint after the last step; 0: none (benchmarks)"},
        {"recompute", OPT_INT, &c.recompute, "GPU: 1 recomputes the norms and SwiGLU products in the backward "
                                             "instead of keeping them per layer (less memory; same results)"},
        {"gpus", OPT_INT, &gpus, "data-parallel GPUs, one process each, NCCL + ZeRO-1 (default 1; under mpirun: "
                                 "the MPI world size)"},
        {"nccl", OPT_INT, &nccl, "1: the NCCL engine even on one GPU (world size 1; for checks)"},
        {"init-from", OPT_PATH, &init_from, "initial weights from a Hugging Face Llama directory (safetensors + "
                                           "config.json, e.g. from mxlm export --hf)"},
        {"log-every", OPT_INT, &log_every, "plain progress line every N steps when not a terminal (default 1)"},
        {"describe", OPT_FLAG, &describe, "print the model, its parameter count and the recipe, then exit"},
        {"on-nonfinite", OPT_STR, &on_nonfinite, "abort (default): a NaN/Inf loss or gradient ends the run; skip: "
                                                   "skip that update and go on"},
        {"max-skips", OPT_I64, &c.max_skips, "skipped updates allowed (non-finite + spikes, default 10); one more "
                                             "ends the run as diverged"},
        {"spike-window", OPT_INT, &c.spike_window, "loss-spike detector: z-score over the last N losses (default 50, "
                                                   "0 = off)"},
        {"spike-z", OPT_DOUBLE, &c.spike_z, "a training loss this many standard deviations above the window's mean "
                                            "is a spike (default 6)"},
        {"skip-spikes", OPT_FLAG, &c.skip_spikes, "skip the update of a spike step (default: log it only)"},
        {"ignore-limits", OPT_FLAG, &c.ignore_limits, "start even when the memory estimate exceeds the available RAM "
                                                      "or the disk cannot hold a checkpoint"},
        {"mem-limit-mib", OPT_I64, &mem_limit_mib, "treat this much memory as available instead of MemAvailable"},
        {"sample-every", OPT_I64, &c.sample_every, "print a short sample (48 tokens, CPU copy of the weights) every N "
                                                   "steps (default 0 = off)"},
        {"debug-nan-at", OPT_I64, &c.debug_nan_at, "(testing) poison a weight with NaN before step K"},
        {"debug-nan-grad-at", OPT_I64, &c.debug_nan_grad_at, "(testing) one NaN gradient element at step K"},
        {"debug-spike-at", OPT_I64, &c.debug_spike_at, "(testing) scramble step K's targets (a loss spike)"},
    };
    const int nopts = (int)(sizeof opts / sizeof opts[0]);
    const char* usage = "--preset P --recipe R --steps N --seed S --out DIR [options]";

    int rc = cli_parse(argc, argv, "train", usage, opts, nopts, NULL, NULL);
    if (rc) return rc == 1 ? 0 : rc;
    if (list_recipes) {
        for (const char* const* n = mx_recipe_names(); *n; n++) {
            mx_recipe lr;
            char rd[1024] = "";
            if (!mx_recipe_parse(*n, &lr)) mx_recipe_describe(&lr, rd, sizeof rd);
            printf("%-20s %s\n", *n, rd);
        }
        return 0;
    }
    if (run_id && parse_run_id(run_id, &c.run_id)) return 2;
    if (ckpt && cfg_path(c.ckpt, sizeof c.ckpt, ckpt)) return 2;
    if (ckpt && !c.resume) { fprintf(stderr, "mxlm train: --ckpt FILE needs --resume\n"); return 2; }
    if (c.warmup == INT64_MIN) c.warmup = -1;
    else if (c.warmup < -1) {
        fprintf(stderr, "mxlm train: --warmup %lld: must be >= 0 (or -1: steps / 20)\n", (long long)c.warmup);
        return 2;
    }
    if (check_numbers(&c, log_every, vocab, dim, layers, heads, kvh, ffn, context, rope_theta, norm_eps,
                      eval_every_tokens, mem_limit_mib))
        return 2;

    if (mx_model_preset(preset, &c.model)) { fprintf(stderr, "mxlm train: %s\n", mx_last_error()); return 2; }
    if (vocab) c.model.vocab = vocab;
    if (dim) c.model.dim = dim;
    if (layers) c.model.n_layers = layers;
    if (heads) c.model.n_heads = heads;
    if (kvh) c.model.n_kv_heads = kvh;
    if (ffn) c.model.ffn = ffn;
    if (context) c.model.seq_len = context;
    if (rope_theta > 0) c.model.rope_theta = (float)rope_theta;
    if (norm_eps > 0) c.model.norm_eps = (float)norm_eps;
    if (mx_model_config_check(&c.model)) { fprintf(stderr, "mxlm train: %s\n", mx_last_error()); return 2; }
    if ((train && cfg_path(c.train, sizeof c.train, train)) || (val && cfg_path(c.val, sizeof c.val, val)) ||
        (out && cfg_path(c.out, sizeof c.out, out)))
        return 2;
    if (c.seq <= 0) c.seq = c.model.seq_len;
    int drank = 0, dworld = 0, dlocal = 0;
    const char* dtoken = NULL;
    if (gpus < 0 || nccl < 0 || nccl > 1) { fprintf(stderr, "mxlm train: --gpus N (N >= 1), --nccl 0|1\n"); return 2; }
    if (mx_dist_env(&drank, &dworld, &dlocal, &dtoken)) { fprintf(stderr, "mxlm train: %s\n", mx_last_error()); return 2; }
    if (dworld > 0 && gpus > 0 && gpus != dworld) {
        fprintf(stderr, "mxlm train: --gpus %d but the job has %d ranks\n", gpus, dworld);
        return 2;
    }
    c.gpus = dworld > 0 ? dworld : gpus > 0 ? gpus : 1;
    c.nccl = nccl || dworld > 0;
    if (eval_every_tokens > 0) {
        int64_t per = (int64_t)c.batch * c.seq * c.accum * c.gpus;
        c.eval_every = (eval_every_tokens + per - 1) / per;
    }
    if (mx_train_config_set_recipe(&c, recipe)) { fprintf(stderr, "mxlm train: --recipe: %s\n", mx_last_error()); return 2; }
    if (check_shapes(&c, &c.rec)) return 2;
    if (device && !strcmp(device, "gpu")) device = "cuda";
    if ((on_nonfinite && choice("on-nonfinite", on_nonfinite, mx_nonfinite_names, &c.on_nonfinite)) ||
        (device && choice("device", device, mx_device_names, &c.device)) ||
        (gemm && choice("gemm", gemm, mx_gemm_names, &c.gemm_exact)) ||
        (attn && choice("attn", attn, mx_attn_names, &c.attn)) || (head && choice("head", head, mx_head_names, &c.head)))
        return 2;
    /* --device cuda with a recipe or attention the GPU does not run: a usage error, on any machine */
    if (c.device == MX_DEVICE_CUDA && mx_engine_gpu_check(&c)) {
        fprintf(stderr, "mxlm train: %s\n", mx_last_error());
        return 2;
    }
    if (init_from && cfg_path(c.init_from, sizeof c.init_from, init_from)) return 2;
    c.no_final_ckpt = !final_ckpt;
    if (mem_limit_mib < 0) { fprintf(stderr, "mxlm train: --mem-limit-mib must be positive\n"); return 2; }
    if (c.sample_every < 0) { fprintf(stderr, "mxlm train: --sample-every must be >= 0\n"); return 2; }
    c.mem_limit = mem_limit_mib * 1024 * 1024;

    if (describe) {
        char d[512], rd[1024];
        mx_model_config_describe(&c.model, d, sizeof d);
        mx_recipe_describe(&c.rec, rd, sizeof rd);
        printf("model   %s\n", d);
        printf("params  %lld total, %lld without the embedding and head\n", (long long)mx_model_n_params(&c.model),
               (long long)mx_model_n_params_nonembed(&c.model));
        printf("recipe  %s: %s\n", c.recipe, rd);
        if (c.gpus > 1)
            printf("batch   %d GPUs x %d x %d x %d = %lld tokens per step\n", c.gpus, c.batch, c.seq, c.accum,
                   (long long)c.gpus * c.batch * c.seq * c.accum);
        else
            printf("batch   %d x %d x %d = %lld tokens per step\n", c.batch, c.seq, c.accum,
                   (long long)c.batch * c.seq * c.accum);
        mx_mem_estimate e;
        mx_train_estimate(&c, &e);
        const double M = 1024.0 * 1024.0;
        printf("memory  %.1f MiB estimated: parameters %.1f, gradients %.1f, AdamW %.1f, activations %.1f, "
               "scratch %.1f; a checkpoint is %.1f MiB\n", e.total / M, e.params / M, e.grads / M, e.adam / M,
               e.acts / M, e.scratch / M, e.ckpt_bytes / M);
        char gpu[1024];
        if (mx_engine_describe_gpu(&c, gpu, sizeof gpu) > 0) fputs(gpu, stdout); /* the CUDA build */
        return 0;
    }

    if (check_tokenizers(&c)) return 2;
    if (c.gpus > 1 || c.nccl) {
        if (!mx_dist_available()) {
            fprintf(stderr, "mxlm train: --gpus/--nccl (or an MPI launch) need the CUDA build (make cuda)\n");
            return 2;
        }
        if (dworld == 0 && c.gpus > 1) {
            rc = mx_launch_ranks(c.gpus, argc, argv, c.out, launch_note, NULL);
            if (rc < 0) fprintf(stderr, "mxlm train: %s\n", mx_last_error());
            return rc == MX_EINVAL ? 2 : rc < 0 ? 1 : rc;
        }
        if (mx_dist_join(c.out, drank, dworld > 0 ? dworld : 1, dworld > 0 ? dlocal : 0, dtoken, &c.comm)) {
            fprintf(stderr, "mxlm train: %s\n", mx_last_error());
            return 1;
        }
        c.device = MX_DEVICE_CUDA;
    }
    progress p = {.tty = isatty(STDOUT_FILENO), .log_every = log_every > 0 ? log_every : 1, .out = c.out, .seed = c.seed};
    mx_train_result res;
    rc = mx_train_run(&c, &res, on_event, &p);
    if (c.comm) mx_dist_leave(c.comm, rc < 0); /* abort: the others may wait in a collective */
    if (p.tty && p.last_step) printf("\n");
    /* exit status (docs/reliability.md): 0 converged / budget without a target / halted, 1 error,
     * 2 usage, 3 diverged, 4 budget spent without reaching --target-loss, 5 refused by the limits */
    if (rc < 0) {
        fprintf(stderr, "mxlm train: %s\n", mx_last_error());
        return rc == MX_EUSAGE ? 2 : 1;
    }
    if (rc == MX_LIMITS) {
        fprintf(stderr, "mxlm train: %s\n", mx_last_error());
        return 5;
    }
    if (rc == MX_STOPPED) { /* 128 + the signal, as a shell reports a process that signal ended */
        fprintf(stderr, "mxlm train: stopped by %s after step %lld of %lld: checkpoint %s written; continue with: "
                        "mxlm train --out %s --resume\n", res.reason, (long long)res.step, (long long)c.steps,
                res.ckpt, c.out);
        return 128 + res.signal;
    }
    if (rc == MX_DIVERGED) {
        fprintf(stderr, "mxlm train: diverged at step %lld (%s); status in %s/metrics.jsonl\n", (long long)res.step,
                res.reason, c.out);
        return 3;
    }
    printf("%s: step %lld, %lld tokens, val loss %.4f -> %.4f (%.3fx), %.1f s, %.0f tok/s", res.status,
           (long long)res.step, (long long)res.tokens, (double)res.val_loss0, (double)res.val_loss,
           (double)(res.val_loss / res.val_loss0), res.seconds, res.tok_per_s);
    if (c.target_loss > 0) printf(", tokens to target %lld", (long long)res.tokens_to_target);
    if (res.skipped_nonfinite || res.skipped_spikes || res.spikes)
        printf(", %lld spikes, %lld updates skipped (%lld non-finite)", (long long)res.spikes,
               (long long)(res.skipped_nonfinite + res.skipped_spikes), (long long)res.skipped_nonfinite);
    printf("\nrun directory: %s\n", c.out);
    if (rc == MX_NOT_CONVERGED) /* every non-zero exit says why on stderr */
        fprintf(stderr, "mxlm train: --target-loss %g not reached in %lld steps (last val loss %.4f)\n", c.target_loss,
                (long long)res.step, (double)res.val_loss);
    return rc == MX_NOT_CONVERGED ? 4 : 0;
}
