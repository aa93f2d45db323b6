/* study.c: the study harness's runs (study.h, docs/study.md). Reads run directories written by the trainer
 * (config.txt "key = value" lines; metrics.jsonl: training lines with "loss" and "tok_per_s", evaluation
 * lines with "val_loss", telemetry lines with "type":"telemetry", event lines with "event", the final
 * "status" line) and the study directory of them. The statistics: stats.c; the report (results.md,
 * paired.json, loss.svg, telemetry.svg): report.c; the runs' processes: scheduler.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mxlm/config.h"
#include "mxlm/json.h"
#include "mxlm/study.h"
#include "mxlm/util.h"
#include "study/internal.h"

/* ---- a growing string ------------------------------------------------------------ */

char* study_sb_take(mx_sbuf* b) {
    if (b->oom) { free(b->s); return NULL; }
    if (!b->s) return strdup("");
    return b->s;
}

/* ---- files ---------------------------------------------------------------------- */

static char* read_text(const char* path) {
    FILE* f = mx_fopen_input(path, NULL);
    if (!f) return NULL;
    mx_sbuf b = {0};
    char chunk[8192];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) mx_sb_printf(&b, "%.*s", (int)k, chunk);
    fclose(f);
    return study_sb_take(&b);
}

/* The value of "key = value" in config text (copied into out); 0 if absent. */
int study_cfg_get(const char* text, const char* key, char* out, size_t n) { return mx_config_get(text, key, out, n); }

int64_t study_cfg_i64(const char* text, const char* key, int64_t dflt) {
    char v[64];
    return study_cfg_get(text, key, v, sizeof v) ? strtoll(v, NULL, 10) : dflt;
}

/* ---- one run ---------------------------------------------------------------------- */

/* A metrics line's JSON (the one reader, json.h); -1 when it does not parse (skipped). */
static int parse_line(const char* line, size_t len, mx_json* o) {
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    return mx_json_parse(line, len, o, NULL, 0);
}

static void copy_str(const mx_json* o, const char* key, char* out, size_t n) {
    const char* v = mx_json_str(o, key);
    snprintf(out, n, "%s", v ? v : "");
}

static int cmp_dbl(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

const char* const study_ops[MX_STUDY_OPS] = {"fprop_a", "fprop_b", "dgrad_a", "dgrad_b", "wgrad_a", "wgrad_b"};

/* Telemetry sums of the current step (means taken when the step is complete). */
typedef struct {
    double s[MX_STUDY_OPS], c[MX_STUDY_OPS];
    int ns[MX_STUDY_OPS];
    double os[3], omin[3]; /* the products: sum and minimum over the linears */
    int on[3], omin_layer[3];
    char omin_linear[3][16];
} tele_acc;

const char* const study_gemms[3] = {"fprop", "dgrad", "wgrad"};

static void tele_close(mx_study_tele* t, const tele_acc* a) {
    for (int o = 0; o < MX_STUDY_OPS; o++) {
        t->sqnr_db[o] = a->ns[o] ? a->s[o] / a->ns[o] : NAN;
        t->clipped[o] = a->ns[o] ? a->c[o] / a->ns[o] : NAN;
    }
    for (int g = 0; g < 3; g++) {
        t->out_db[g] = a->on[g] ? a->os[g] / a->on[g] : NAN;
        t->out_min_db[g] = a->on[g] ? a->omin[g] : NAN;
        t->out_min_layer[g] = a->on[g] ? a->omin_layer[g] : -1;
        snprintf(t->out_min_linear[g], sizeof t->out_min_linear[g], "%s", a->on[g] ? a->omin_linear[g] : "");
    }
}

/* One line of metrics.jsonl into r (training, evaluation, telemetry or status; events skipped). */
static int metrics_line(mx_study_run* r, const mx_json* jo, tele_acc* acc, double** tps, int* ntps, int* cap_tps,
                        int* cap_ev, int* cap_te, int* cap_tl) {
    if (mx_json_get(jo, "event")) return MX_OK; /* spike and target events */
    int has;
    double step = mx_json_num(jo, "step", &has);
    if (has && isfinite(step)) r->last_step = (int64_t)step;
    double tokens = mx_json_num(jo, "tokens", &has);
    if (has && isfinite(tokens)) r->last_tokens = (int64_t)tokens;
    const char* type = mx_json_str(jo, "type");
    if (mx_json_get(jo, "status")) {
        copy_str(jo, "status", r->status, sizeof r->status);
        copy_str(jo, "reason", r->reason, sizeof r->reason);
    } else if (type && !strcmp(type, "telemetry")) {
        int64_t s = (int64_t)step;
        if (!r->n_tele || r->tele[r->n_tele - 1].step != s) {
            if (r->n_tele) tele_close(&r->tele[r->n_tele - 1], acc);
            memset(acc, 0, sizeof *acc);
            if (r->n_tele == *cap_te) {
                *cap_te = *cap_te ? 2 * *cap_te : 64;
                void* p = realloc(r->tele, sizeof(mx_study_tele) * (size_t)*cap_te);
                if (!p) return MX_ENOMEM;
                r->tele = p;
            }
            r->tele[r->n_tele++].step = s;
        }
        for (int o = 0; o < MX_STUDY_OPS; o++) {
            char key[32];
            snprintf(key, sizeof key, "%s_sqnr_db", study_ops[o]);
            double q = mx_json_num(jo, key, NULL);
            snprintf(key, sizeof key, "%s_clipped", study_ops[o]);
            double c = mx_json_num(jo, key, NULL);
            if (isfinite(q)) { acc->s[o] += q; acc->c[o] += isfinite(c) ? c : 0; acc->ns[o]++; }
        }
        for (int g = 0; g < 3; g++) {
            char key[32];
            snprintf(key, sizeof key, "%s_out_sqnr_db", study_gemms[g]);
            double q = mx_json_num(jo, key, NULL);
            if (!isfinite(q)) continue;
            if (!acc->on[g] || q < acc->omin[g]) {
                acc->omin[g] = q;
                acc->omin_layer[g] = (int)mx_json_num(jo, "layer", NULL);
                copy_str(jo, "linear", acc->omin_linear[g], sizeof acc->omin_linear[g]);
            }
            acc->os[g] += q;
            acc->on[g]++;
        }
    } else if (mx_json_get(jo, "val_loss")) {
        if (r->n_evals == *cap_ev) {
            *cap_ev = *cap_ev ? 2 * *cap_ev : 64;
            void* p = realloc(r->evals, sizeof(mx_study_eval) * (size_t)*cap_ev);
            if (!p) return MX_ENOMEM;
            r->evals = p;
        }
        double v = mx_json_num(jo, "val_loss", NULL);
        r->evals[r->n_evals++] = (mx_study_eval){(int64_t)step, (int64_t)tokens, isfinite(v) ? v : NAN};
    } else if (mx_json_get(jo, "loss")) {
        if (r->n_train_loss == *cap_tl) { /* the training curve (mxlm plot) */
            *cap_tl = *cap_tl ? 2 * *cap_tl : 256;
            void* p = realloc(r->train_loss, sizeof(mx_study_eval) * (size_t)*cap_tl);
            if (!p) return MX_ENOMEM;
            r->train_loss = p;
        }
        double lo = mx_json_num(jo, "loss", NULL);
        r->train_loss[r->n_train_loss++] = (mx_study_eval){(int64_t)step, (int64_t)tokens, isfinite(lo) ? lo : NAN};
        double t = mx_json_num(jo, "tok_per_s", &has);
        if (!has || !isfinite(t)) return MX_OK;
        if (*ntps == *cap_tps) {
            *cap_tps = *cap_tps ? 2 * *cap_tps : 256;
            void* p = realloc(*tps, sizeof(double) * (size_t)*cap_tps);
            if (!p) return MX_ENOMEM;
            *tps = p;
        }
        (*tps)[(*ntps)++] = t;
    }
    return MX_OK;
}

/* A run's metrics as a stream: DIR/metrics.jsonl, else DIR/metrics.jsonl.gz (a finished run committed
 * compressed, as docs/results/ keeps them: gzip -9n DIR/metrics.jsonl), read whole into *mem (freed by
 * the caller after fclose). NULL: neither file (a run not started), or an empty or unreadable .gz. */
static FILE* open_metrics(const char* dir, char** mem) {
    char p[1200];
    *mem = NULL;
    if (mx_pathf(p, sizeof p, "%s/metrics.jsonl", dir)) return NULL;
    FILE* f = mx_fopen_input(p, NULL);
    if (f || errno != ENOENT) return f;
    if (mx_pathf(p, sizeof p, "%s/metrics.jsonl.gz", dir)) return NULL;
    const int fd = mx_open_input(p, NULL);
    gzFile z = fd < 0 ? NULL : gzdopen(fd, "rb");
    if (!z) { if (fd >= 0) close(fd); return NULL; }
    size_t n = 0, cap = 0;
    char* buf = NULL;
    for (;;) {
        if (cap - n < 65536) {
            char* nb = (char*)realloc(buf, cap * 2 + 65536);
            if (!nb) break;
            buf = nb;
            cap = cap * 2 + 65536;
        }
        int k = gzread(z, buf + n, (unsigned)(cap - n));
        if (k <= 0) break;
        n += (size_t)k;
    }
    gzclose(z);
    f = n ? fmemopen(buf, n, "r") : NULL;
    if (!f) free(buf);
    else *mem = buf;
    return f;
}

static int load_metrics(mx_study_run* r, FILE* f) {
    char* line = NULL;
    size_t lcap = 0;
    ssize_t k;
    double* tps = NULL;
    int ntps = 0, cap_tps = 0, cap_ev = 0, cap_te = 0, cap_tl = 0, rc = MX_OK;
    tele_acc acc;
    memset(&acc, 0, sizeof acc);
    while ((k = getline(&line, &lcap, f)) > 0 && !rc) {
        if (line[k - 1] != '\n') break; /* a torn last line (a run being written or killed) */
        mx_json jo;
        if (parse_line(line, (size_t)k, &jo)) continue;
        rc = metrics_line(r, &jo, &acc, &tps, &ntps, &cap_tps, &cap_ev, &cap_te, &cap_tl);
        mx_json_free(&jo);
    }
    if (r->n_tele) tele_close(&r->tele[r->n_tele - 1], &acc);
    free(line);
    r->n_train = ntps;
    r->tok_per_s = NAN;
    if (ntps) {
        qsort(tps, (size_t)ntps, sizeof(double), cmp_dbl);
        r->tok_per_s = ntps % 2 ? tps[ntps / 2] : 0.5 * (tps[ntps / 2 - 1] + tps[ntps / 2]);
    }
    free(tps);
    if (rc) return mx_fail(rc, "%s/metrics.jsonl: out of memory", r->dir);
    return MX_OK;
}

void mx_study_run_free(mx_study_run* r) {
    free(r->config);
    free(r->evals);
    free(r->tele);
    free(r->train_loss);
    memset(r, 0, sizeof *r);
}

int mx_study_load_run(const char* dir, mx_study_run* r) {
    memset(r, 0, sizeof *r);
    if (mx_pathf(r->dir, sizeof r->dir, "%s", dir)) return MX_EINVAL;
    const char* base = strrchr(dir, '/');
    snprintf(r->name, sizeof r->name, "%s", base && base[1] ? base + 1 : dir);
    r->tokens_to_target = -1;
    r->overhead = r->tok_per_s = NAN;
    char p[1200];
    if (mx_pathf(p, sizeof p, "%s/config.txt", dir)) return MX_EINVAL;
    r->config = read_text(p);
    if (!r->config) return mx_fail(MX_EIO, "%s: cannot read: %s", p, strerror(errno));
    study_cfg_get(r->config, "recipe", r->recipe, sizeof r->recipe);
    study_cfg_get(r->config, "preset", r->preset, sizeof r->preset);
    if (!r->recipe[0]) { mx_study_run_free(r); return mx_fail(MX_EFORMAT, "%s: no 'recipe' line", p); }
    r->seed = (uint64_t)study_cfg_i64(r->config, "seed", 0);
    r->steps = study_cfg_i64(r->config, "steps", 0);
    r->tokens_per_step = study_cfg_i64(r->config, "batch", 0) * study_cfg_i64(r->config, "seq", 0) * study_cfg_i64(r->config, "accum", 1) *
                         study_cfg_i64(r->config, "gpus", 1); /* data parallel: every GPU's micro-batches */
    int64_t sched = study_cfg_i64(r->config, "schedule-steps", 0); /* an extended run: its budget is its schedule's */
    r->budget_tokens = (sched > 0 && sched < r->steps ? sched : r->steps) * r->tokens_per_step;
    char* mem;
    FILE* f = open_metrics(dir, &mem);
    if (!f) return MX_OK; /* not started yet */
    int rc = load_metrics(r, f);
    fclose(f);
    free(mem);
    if (rc) mx_study_run_free(r);
    return rc;
}

int study_status_finished(const char* s) {
    return !strcmp(s, "converged") || !strcmp(s, "budget") || !strcmp(s, "diverged");
}

int mx_study_run_state(const char* dir) {
    char p[1200], *mem;
    struct stat st;
    FILE* f = open_metrics(dir, &mem);
    int started = f != NULL;
    if (!started) {
        if (mx_pathf(p, sizeof p, "%s/config.txt", dir)) return 0;
        started = stat(p, &st) == 0;
        if (mx_pathf(p, sizeof p, "%s/.lock", dir)) return started;
        started = started || stat(p, &st) == 0;
        return started;
    }
    char line[4096], status[16] = "";
    mx_json o;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"status\":") && strchr(line, '\n') && !parse_line(line, strlen(line), &o)) {
            if (mx_json_get(&o, "status")) copy_str(&o, "status", status, sizeof status);
            mx_json_free(&o);
        }
    fclose(f);
    free(mem);
    return study_status_finished(status) ? 2 : 1;
}

void mx_study_run_name(const char* recipe, uint64_t seed, char* buf, size_t n) {
    snprintf(buf, n, "%s-s%llu", recipe, (unsigned long long)seed);
    for (char* c = buf; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("._+-", *c)))
            *c = '_';
}

/* ---- the study ---------------------------------------------------------------------- */

void mx_study_opts_default(mx_study_opts* o) {
    o->baseline = "fp8";
    o->target = 0;
    o->budget_factor = 2.0;
    o->target_frac = 0.8;
    o->pooled = 0;
}

void study_free_recipes(mx_study* s) {
    for (int k = 0; k < s->n_recipes; k++) {
        free(s->recipes[k].pt_tokens);
        free(s->recipes[k].d_loss);
    }
    free(s->recipes);
    s->recipes = NULL;
    s->n_recipes = 0;
}

void mx_study_free(mx_study* s) {
    for (int i = 0; i < s->n_runs; i++) mx_study_run_free(&s->runs[i]);
    free(s->runs);
    study_free_recipes(s);
    free(s->study_txt);
    memset(s, 0, sizeof *s);
}

/* Position of a recipe in the report: the baseline, then study.txt's "recipe = " lines, then by name. */
static int recipe_rank(const mx_study* s, const char* recipe, const char* baseline) {
    if (baseline && !strcmp(recipe, baseline)) return 0;
    int i = 1;
    for (const char* p = s->study_txt; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, "recipe = ", 9)) continue;
        size_t l = strcspn(p + 9, "\n");
        if (strlen(recipe) == l && !strncmp(p + 9, recipe, l)) return i;
        i++;
    }
    return 1 << 20;
}

static const mx_study* g_sort; /* qsort has no context argument */
static const char* g_sort_base;
static int cmp_run(const void* a, const void* b) {
    const mx_study_run *x = a, *y = b;
    int rx = recipe_rank(g_sort, x->recipe, g_sort_base), ry = recipe_rank(g_sort, y->recipe, g_sort_base);
    if (rx != ry) return rx < ry ? -1 : 1;
    int c = strcmp(x->recipe, y->recipe);
    if (c) return c;
    if (x->seed != y->seed) return x->seed < y->seed ? -1 : 1;
    return strcmp(x->name, y->name);
}

void study_sort_runs(mx_study* s, const char* baseline) {
    g_sort = s;
    g_sort_base = baseline;
    if (s->n_runs > 1) qsort(s->runs, (size_t)s->n_runs, sizeof *s->runs, cmp_run);
}

static int cmp_name(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

int mx_study_load(const char* dir, mx_study* s) {
    memset(s, 0, sizeof *s);
    if (mx_pathf(s->dir, sizeof s->dir, "%s", dir)) return MX_EINVAL;
    DIR* d = opendir(dir);
    if (!d) return mx_fail(MX_EIO, "study: %s: cannot open: %s", dir, strerror(errno));
    char** names = NULL;
    int n = 0, cap = 0, rc = MX_OK;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t nl = strlen(e->d_name); /* DIR.short: a run `study run --extend` replaced (kept for comparison); */
        if (nl > 6 && !strcmp(e->d_name + nl - 6, ".short")) continue; /* DIR.failedK: an extension that failed */
        if (strstr(e->d_name, ".failed")) continue;
        char p[1400];
        struct stat st;
        if (mx_pathf(p, sizeof p, "%s/%s/config.txt", dir, e->d_name)) continue;
        if (stat(p, &st) != 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            void* q = realloc(names, sizeof(char*) * (size_t)cap);
            if (!q) { rc = MX_ENOMEM; break; }
            names = q;
        }
        if (!(names[n] = strdup(e->d_name))) { rc = MX_ENOMEM; break; }
        n++;
    }
    closedir(d);
    if (!rc && n) qsort(names, (size_t)n, sizeof(char*), cmp_name);
    if (!rc && n && !(s->runs = calloc((size_t)n, sizeof *s->runs))) rc = MX_ENOMEM;
    for (int i = 0; i < n && !rc; i++) {
        char p[1400];
        if (mx_pathf(p, sizeof p, "%s/%s", dir, names[i])) { rc = MX_EINVAL; break; };
        rc = mx_study_load_run(p, &s->runs[s->n_runs]);
        if (!rc) s->n_runs++;
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (rc == MX_ENOMEM) mx_fail(rc, "study: out of memory");
    if (rc) { mx_study_free(s); return rc; }
    if (!s->n_runs) { mx_study_free(s); return mx_fail(MX_EINVAL, "study: %s holds no run directory (none with a config.txt)", dir); }
    char p[1200];
    if (mx_pathf(p, sizeof p, "%s/study.txt", dir)) { mx_study_free(s); return MX_EINVAL; };
    s->study_txt = read_text(p);
    study_sort_runs(s, NULL);
    return MX_OK;
}

