/* stats.c: the study's measurements (study.h, docs/study.md): the target, tokens-to-target,
 * did-not-converge, overheads, throughput ratios and the paired statistics against the baseline. */
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

#include "mxlm/json.h"
#include "mxlm/study.h"
#include "mxlm/util.h"
#include "mxlm/trainer.h"
#include "study/internal.h"

int study_recipe_full_mxfp4(const char* name) {
    mx_recipe r;
    if (mx_recipe_parse(name, &r)) return 0;
    return r.g[MX_FPROP].fmt == MX_FMT_MXFP4 && r.g[MX_DGRAD].fmt == MX_FMT_MXFP4 && r.g[MX_WGRAD].fmt == MX_FMT_MXFP4;
}

mx_study_recipe* study_find_recipe(const mx_study* s, const char* name) {
    for (int i = 0; i < s->n_recipes; i++)
        if (!strcmp(s->recipes[i].recipe, name)) return &s->recipes[i];
    return NULL;
}

/* The finished run of `recipe` with `seed` (NULL: none). */
static const mx_study_run* seed_run(const mx_study* s, const char* recipe, uint64_t seed) {
    for (int j = 0; j < s->n_runs; j++)
        if (!strcmp(s->runs[j].recipe, recipe) && s->runs[j].seed == seed && s->runs[j].finished) return &s->runs[j];
    return NULL;
}

/* r's validation loss at the evaluation of exactly `tokens` (NaN: none). */
static double loss_at(const mx_study_run* r, int64_t tokens) {
    for (int q = 0; q < r->n_evals; q++)
        if (r->evals[q].tokens == tokens) return r->evals[q].val_loss;
    return NAN;
}

/* The first evaluation at or after `tokens` (NULL: none). */
static const mx_study_eval* eval_at(const mx_study_run* r, double tokens) {
    for (int i = 0; i < r->n_evals; i++)
        if ((double)r->evals[i].tokens >= tokens) return &r->evals[i];
    return NULL;
}

/* The baseline run's evaluation that defines a target: the first at or after target_frac of its budget
 * (NULL: r is not a finished, non-diverged run of the baseline, or has no such evaluation). */
static const mx_study_eval* baseline_mark(const mx_study* s, const mx_study_run* r) {
    if (strcmp(r->recipe, s->baseline) || !study_status_finished(r->status) || !strcmp(r->status, "diverged")) return NULL;
    for (int j = 0; j < r->n_evals; j++)
        if (!isfinite(r->evals[j].val_loss)) return NULL;
    return eval_at(r, s->opts.target_frac * (double)r->budget_tokens);
}

void mx_study_stat_of(const double* x, int n, mx_study_stat* st) {
    st->n = n;
    st->mean = st->sd = st->se = NAN;
    if (n < 1) return;
    double m = 0;
    for (int i = 0; i < n; i++) m += x[i];
    m /= n;
    st->mean = m;
    if (n < 2) return;
    double v = 0;
    for (int i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    st->sd = sqrt(v / (n - 1));
    st->se = st->sd / sqrt((double)n);
}

int mx_study_stat_beyond_2se(const mx_study_stat* st) {
    return st->n >= 2 && isfinite(st->mean) && isfinite(st->se) && fabs(st->mean) > 2.0 * st->se;
}

/* The regularized incomplete beta I_x(a, b) by its continued fraction (modified Lentz), for x < (a+1)/(a+b+2);
 * the caller uses the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) otherwise. */
static double betacf(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    if (fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 300; m++) {
        const double m2 = 2.0 * m;
        double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2)); /* the even step */
        d = 1 + num * d; if (fabs(d) < tiny) d = tiny;
        c = 1 + num / c; if (fabs(c) < tiny) c = tiny;
        d = 1 / d; h *= d * c;
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1)); /* the odd step */
        d = 1 + num * d; if (fabs(d) < tiny) d = tiny;
        c = 1 + num / c; if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return h;
}

static double ibeta(double a, double b, double x) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    const double lf = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    if (x < (a + 1) / (a + b + 2)) return exp(lf) * betacf(a, b, x) / a;
    return 1 - exp(lf) * betacf(b, a, 1 - x) / b;
}

double mx_study_t_p(double t, int df) {
    if (df < 1 || isnan(t)) return NAN;
    if (isinf(t)) return 0;
    const double v = df;
    return ibeta(v / 2, 0.5, v / (v + t * t)); /* P(|T| >= |t|) = I_{v/(v+t^2)}(v/2, 1/2) */
}

int mx_study_recipe_vs(const mx_study* s, const char* a, const char* b, double* d, uint64_t* seeds, int max_d,
                       mx_study_stat* st) {
    int n = 0;
    for (int i = 0; i < s->n_runs && n < max_d; i++) {
        const mx_study_run* ra = &s->runs[i];
        if (strcmp(ra->recipe, a) || !ra->finished || ra->diverged) continue;
        const mx_study_run* rb = seed_run(s, b, ra->seed);
        if (!rb || rb->diverged) continue;
        const int64_t T = ra->budget_tokens < rb->budget_tokens ? ra->budget_tokens : rb->budget_tokens;
        const double la = loss_at(ra, T), lb = loss_at(rb, T);
        if (!isfinite(la) || !isfinite(lb)) continue;
        if (seeds) seeds[n] = ra->seed;
        d[n++] = la - lb;
    }
    mx_study_stat_of(d, n, st);
    return n;
}

double mx_study_cross(const mx_study_eval* e, int n, double target) {
    for (int j = 0; j < n; j++) {
        if (!isfinite(e[j].val_loss)) return -1;
        if (e[j].val_loss > target) continue;
        if (j == 0) return (double)e[0].tokens;
        /* e[j-1] is above the target, e[j] at or below: the straight line between them */
        double t0 = (double)e[j - 1].tokens, t1 = (double)e[j].tokens, l0 = e[j - 1].val_loss, l1 = e[j].val_loss;
        return t0 + (t1 - t0) * (l0 - target) / (l0 - l1);
    }
    return -1;
}

/* The paired differences of every recipe against the baseline's run of the same seed. */
static int compute_paired(mx_study* s) {
    const char* B = s->baseline;
    double* tmp = malloc(sizeof(double) * (size_t)(3 * s->n_runs + 1));
    if (!tmp) return mx_fail(MX_ENOMEM, "study: out of memory");
    for (int i = 0; i < s->n_runs; i++) {
        mx_study_run* r = &s->runs[i];
        r->lpaired = r->paired = 0;
        r->d_final = r->d_ttt = r->p_overhead = NAN;
    }
    for (int k = 0; k < s->n_recipes; k++) {
        mx_study_recipe* R = &s->recipes[k];
        mx_study_stat none = {0, NAN, NAN, NAN};
        R->d_final = R->d_ttt = R->p_overhead = none;
        if (!strcmp(R->recipe, B)) continue;
        const mx_study_run* grid = NULL; /* the first loss-paired baseline run: its evaluations are the points */
        int np = 0, nl = 0;
        for (int i = 0; i < s->n_runs; i++) {
            mx_study_run* r = &s->runs[i];
            if (strcmp(r->recipe, R->recipe) || !r->finished) continue;
            const mx_study_run* b = seed_run(s, B, r->seed);
            /* the losses: at the baseline's last evaluation, found among r's by its token count */
            if (b && !b->diverged && !r->diverged && b->n_evals > 0) {
                const mx_study_eval* be = &b->evals[b->n_evals - 1];
                const double l = loss_at(r, be->tokens);
                r->lpaired = !isnan(l);
                r->d_final = r->lpaired ? l - be->val_loss : NAN;
                if (r->lpaired && !grid) grid = b;
                nl += r->lpaired;
            }
            if (!r->reached) { R->n_dnc++; continue; }
            if (!b || !b->reached || !(b->tokens_to_target > 0)) { R->n_nobase++; continue; }
            r->paired = 1;
            r->d_ttt = r->tokens_to_target - b->tokens_to_target;
            r->p_overhead = r->tokens_to_target / b->tokens_to_target - 1.0;
            np++;
        }
        R->n_pairs = np;
        R->n_lpairs = nl;
        int m = 0;
        for (int i = 0; i < s->n_runs; i++)
            if (s->runs[i].lpaired && !strcmp(s->runs[i].recipe, R->recipe)) tmp[m++] = s->runs[i].d_final;
        mx_study_stat_of(tmp, m, &R->d_final);
        m = 0;
        for (int i = 0; i < s->n_runs; i++)
            if (s->runs[i].paired && !strcmp(s->runs[i].recipe, R->recipe)) tmp[m++] = s->runs[i].d_ttt;
        mx_study_stat_of(tmp, m, &R->d_ttt);
        m = 0;
        for (int i = 0; i < s->n_runs; i++)
            if (s->runs[i].paired && !strcmp(s->runs[i].recipe, R->recipe)) tmp[m++] = s->runs[i].p_overhead;
        mx_study_stat_of(tmp, m, &R->p_overhead);
        if (!grid) continue;
        R->pt_tokens = malloc(sizeof(int64_t) * (size_t)grid->n_evals);
        R->d_loss = malloc(sizeof(mx_study_stat) * (size_t)grid->n_evals);
        if (!R->pt_tokens || !R->d_loss) { free(tmp); return mx_fail(MX_ENOMEM, "study: out of memory"); }
        R->n_points = grid->n_evals;
        for (int p = 0; p < grid->n_evals; p++) {
            int64_t T = grid->evals[p].tokens;
            R->pt_tokens[p] = T;
            m = 0;
            for (int i = 0; i < s->n_runs; i++) {
                const mx_study_run* r = &s->runs[i];
                if (!r->lpaired || strcmp(r->recipe, R->recipe)) continue;
                const double lr = loss_at(r, T), lb = loss_at(seed_run(s, B, r->seed), T);
                if (isfinite(lr) && isfinite(lb)) tmp[m++] = lr - lb;
            }
            mx_study_stat_of(tmp, m, &R->d_loss[p]);
        }
    }
    free(tmp);
    return MX_OK;
}

int mx_study_compute(mx_study* s, const mx_study_opts* o) {
    mx_study_opts dflt;
    mx_study_opts_default(&dflt);
    s->opts = o ? *o : dflt;
    if (!s->opts.baseline || !s->opts.baseline[0]) s->opts.baseline = dflt.baseline;
    if (!(s->opts.budget_factor > 0)) s->opts.budget_factor = dflt.budget_factor;
    if (!(s->opts.target_frac > 0 && s->opts.target_frac <= 1)) s->opts.target_frac = dflt.target_frac;
    snprintf(s->baseline, sizeof s->baseline, "%s", s->opts.baseline);
    const char* B = s->baseline;
    study_sort_runs(s, B);
    s->opts.baseline = s->baseline;

    /* recipes in report order */
    study_free_recipes(s);
    s->recipes = calloc((size_t)s->n_runs, sizeof *s->recipes);
    s->n_recipes = 0;
    if (!s->recipes) return mx_fail(MX_ENOMEM, "study: out of memory");
    for (int i = 0; i < s->n_runs; i++)
        if (!study_find_recipe(s, s->runs[i].recipe)) {
            mx_study_recipe* R = &s->recipes[s->n_recipes++];
            snprintf(R->recipe, sizeof R->recipe, "%s", s->runs[i].recipe);
            R->full_mxfp4 = study_recipe_full_mxfp4(R->recipe);
        }

    /* per run: finished, diverged */
    s->warning[0] = 0;
    int n_base = 0;
    double budget_sum = 0;
    for (int i = 0; i < s->n_runs; i++) {
        mx_study_run* r = &s->runs[i];
        r->finished = study_status_finished(r->status);
        r->diverged = !strcmp(r->status, "diverged");
        for (int j = 0; j < r->n_evals; j++)
            if (!isfinite(r->evals[j].val_loss)) r->diverged = 1; /* a null evaluation is divergence too */
        r->tokens_to_target = -1;
        r->reached = 0;
        r->overhead = NAN;
        if (!strcmp(r->recipe, B) && r->finished) { n_base++; budget_sum += (double)r->budget_tokens; }
        if (r->budget_tokens != s->runs[0].budget_tokens && !s->warning[0])
            snprintf(s->warning, sizeof s->warning, "the runs differ in token budget (%.200s: %lld, %.200s: %lld)",
                     s->runs[0].name, (long long)s->runs[0].budget_tokens, r->name, (long long)r->budget_tokens);
    }
    s->baseline_budget = n_base ? (int64_t)llround(budget_sum / n_base) : 0;
    s->budget_limit = n_base ? s->opts.budget_factor * (double)s->baseline_budget : INFINITY;

    /* the target: given; else the baseline's loss at target_frac of its budget, per seed or pooled */
    s->target = NAN;
    for (int i = 0; i < s->n_runs; i++) s->runs[i].target = NAN;
    if (s->opts.target > 0) {
        s->target = s->opts.target;
        snprintf(s->target_rule, sizeof s->target_rule, "given (--target %.9g)", s->target);
        for (int i = 0; i < s->n_runs; i++) s->runs[i].target = s->target;
    } else {
        mx_sbuf why = {0};
        double sum = 0;
        int used = 0;
        for (int i = 0; i < s->n_runs; i++) {
            const mx_study_run* r = &s->runs[i];
            const mx_study_eval* e = baseline_mark(s, r);
            if (!e) continue;
            sum += e->val_loss;
            mx_sb_printf(&why, "%sseed %llu: %.9g at %lld tokens", used ? "; " : "", (unsigned long long)r->seed,
                      e->val_loss, (long long)e->tokens);
            used++;
        }
        char* w = study_sb_take(&why);
        if (!used) {
            free(w);
            snprintf(s->target_rule, sizeof s->target_rule, "undefined");
            return mx_fail(MX_EINVAL, "study: no target loss: the baseline '%s' has no finished, non-diverged run "
                                      "with an evaluation at or after %.0f%% of its budget (give --target LOSS or "
                                      "--baseline RECIPE)", B, 100 * s->opts.target_frac);
        }
        s->target = sum / used;
        int n_other = 0; /* runs of a seed without a baseline target: the pooled one */
        for (int i = 0; i < s->n_runs; i++) {
            mx_study_run* r = &s->runs[i];
            const mx_study_eval* e = NULL;
            for (int j = 0; j < s->n_runs && !s->opts.pooled && !e; j++)
                if (s->runs[j].seed == r->seed) e = baseline_mark(s, &s->runs[j]);
            r->target = e ? e->val_loss : s->target;
            n_other += !e && !s->opts.pooled;
        }
        if (s->opts.pooled)
            snprintf(s->target_rule, sizeof s->target_rule,
                     "pooled: the mean over %d %s seed%s of the validation loss at the first evaluation at or after "
                     "%.0f%% of the budget (%s)", used, B, used > 1 ? "s" : "", 100 * s->opts.target_frac, w ? w : "");
        else
            snprintf(s->target_rule, sizeof s->target_rule,
                     "per seed: each run's target is the validation loss of the %s run of its seed at the first "
                     "evaluation at or after %.0f%% of the budget (%s)%s%.9g%s", B, 100 * s->opts.target_frac,
                     w ? w : "", n_other ? "; runs of the other seeds take the mean, " : "; mean ",
                     s->target, n_other ? "" : " (the figure's line)");
        free(w);
    }

    /* tokens-to-target, did not converge */
    for (int i = 0; i < s->n_runs; i++) {
        mx_study_run* r = &s->runs[i];
        r->tokens_to_target = mx_study_cross(r->evals, r->n_evals, r->target);
        r->reached = r->finished && !r->diverged && r->tokens_to_target >= 0 && r->tokens_to_target <= s->budget_limit;
        r->short_run = r->finished && !r->diverged && !r->reached && r->tokens_to_target < 0 &&
                       (double)r->last_tokens < s->budget_limit;
    }
    /* the baseline's mean tokens-to-target */
    double bsum = 0;
    int bn = 0;
    for (int i = 0; i < s->n_runs; i++)
        if (!strcmp(s->runs[i].recipe, B) && s->runs[i].reached) { bsum += s->runs[i].tokens_to_target; bn++; }
    s->baseline_ttt = bn && bsum > 0 ? bsum / bn : NAN;
    for (int i = 0; i < s->n_runs; i++) {
        mx_study_run* r = &s->runs[i];
        if (r->reached && isfinite(s->baseline_ttt)) r->overhead = r->tokens_to_target / s->baseline_ttt - 1.0;
    }

    /* per recipe */
    for (int k = 0; k < s->n_recipes; k++) {
        mx_study_recipe* R = &s->recipes[k];
        double tsum = 0, osum = 0, psum = 0, lsum = 0;
        int np = 0, nl = 0;
        R->overhead_min = INFINITY;
        R->overhead_max = -INFINITY;
        for (int i = 0; i < s->n_runs; i++) {
            const mx_study_run* r = &s->runs[i];
            if (strcmp(r->recipe, R->recipe)) continue;
            R->n_runs++;
            R->n_finished += r->finished;
            R->n_short += r->short_run;
            if (isfinite(r->tok_per_s)) { psum += r->tok_per_s; np++; }
            if (r->finished && !r->diverged && r->n_evals) { lsum += r->evals[r->n_evals - 1].val_loss; nl++; }
            if (!r->reached) continue;
            R->n_reached++;
            tsum += r->tokens_to_target;
            if (isfinite(r->overhead)) {
                osum += r->overhead;
                if (r->overhead < R->overhead_min) R->overhead_min = r->overhead;
                if (r->overhead > R->overhead_max) R->overhead_max = r->overhead;
            }
        }
        R->ttt_mean = R->n_reached ? tsum / R->n_reached : NAN;
        R->overhead = R->n_reached && isfinite(s->baseline_ttt) ? osum / R->n_reached : NAN;
        if (!isfinite(R->overhead)) R->overhead_min = R->overhead_max = NAN;
        R->tok_per_s = np ? psum / np : NAN;
        R->final_loss = nl ? lsum / nl : NAN;
    }
    const mx_study_recipe* RB = study_find_recipe(s, B);
    const mx_study_recipe* R16 = study_find_recipe(s, "bf16");
    for (int k = 0; k < s->n_recipes; k++) {
        mx_study_recipe* R = &s->recipes[k];
        R->vs_baseline = RB && RB->tok_per_s > 0 ? R->tok_per_s / RB->tok_per_s : NAN;
        R->vs_bf16 = R16 && R16->tok_per_s > 0 ? R->tok_per_s / R16->tok_per_s : NAN;
        R->end_to_end = R->vs_baseline / (1.0 + R->overhead); /* NaN when either is */
    }
    return compute_paired(s);
}

int mx_study_parse_rule(const char* v) { return !strcmp(v, "seed") ? 0 : !strcmp(v, "pooled") ? 1 : -1; }

void mx_study_opts_from(const mx_study* s, mx_study_opts* o, char* recorded, size_t nrec, const char* baseline,
                        double target, double factor, const char* rule) {
    mx_study_opts_default(o);
    recorded[0] = 0;
    for (const char* p = s->study_txt; !baseline && p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, "baseline = ", 11)) /* the last one: the latest study run */
            snprintf(recorded, nrec, "%.*s", (int)strcspn(p + 11, "\n"), p + 11);
    if (baseline) o->baseline = baseline;
    else if (recorded[0]) o->baseline = recorded;
    if (target > 0) o->target = target;
    if (factor > 0) o->budget_factor = factor;
    if (rule) o->pooled = mx_study_parse_rule(rule) == 1;
}
