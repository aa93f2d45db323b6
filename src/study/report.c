/* report.c: the study's report (study.h): results.md (Markdown), paired.json and the figures loss.svg
 * and telemetry.svg (the SVG renderer, also for mxlm plot). */
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

/* ---- Markdown ---------------------------------------------------------------------- */

static const char* pct(char* b, size_t n, double x) {
    if (!isfinite(x)) { snprintf(b, n, "-"); return b; }
    double v = round(x * 1000.0) / 10.0;
    snprintf(b, n, "%+.1f%%", v == 0 ? 0.0 : v);
    return b;
}

static const char* num(char* b, size_t n, const char* fmt, double x) {
    if (!isfinite(x)) snprintf(b, n, "-");
    else snprintf(b, n, fmt, x);
    return b;
}

/* Appended to a cell that counts runs as not converged: how many of them ended before the limit. */
static void short_note(const mx_study_recipe* R, char* b, size_t n) {
    size_t l = strlen(b);
    if (R->n_short) snprintf(b + l, n - l, " (%d not run on to the limit)", R->n_short);
}

/* A recipe's Table 1 cell: overhead with spread, or "did not converge". */
static void overhead_cell(const mx_study_recipe* R, char* b, size_t n) {
    char o[32], lo[32], hi[32];
    if (!R->n_reached) {
        snprintf(b, n, R->n_finished ? "did not converge (%d/%d seeds)" : "not finished", R->n_finished, R->n_runs);
        short_note(R, b, n);
        return;
    }
    if (!isfinite(R->overhead)) { snprintf(b, n, "reached (no baseline)"); return; }
    if (R->n_reached > 1)
        snprintf(b, n, "%s (%s..%s, %d seeds)", pct(o, sizeof o, R->overhead), pct(lo, sizeof lo, R->overhead_min),
                 pct(hi, sizeof hi, R->overhead_max), R->n_reached);
    else snprintf(b, n, "%s (1 seed)", pct(o, sizeof o, R->overhead));
    if (R->n_reached < R->n_finished) {
        size_t l = strlen(b);
        snprintf(b + l, n - l, "; %d/%d did not converge", R->n_finished - R->n_reached, R->n_finished);
        short_note(R, b, n);
    }
}

/* A statistic as "mean ± sd (se X, n N)" (n 1: "mean (n 1)"; n 0: "-"); scale 100 and unit "%" for percentages. */
const char* study_stat_cell(char* b, size_t n, const mx_study_stat* st, const char* fmt, double scale, const char* unit) {
    char m[48], d[48], e[48];
    if (st->n < 1 || !isfinite(st->mean)) { snprintf(b, n, "-"); return b; }
    double mv = st->mean * scale;
    if (fabs(mv) < 5e-13) mv = 0; /* no negative zero */
    snprintf(m, sizeof m, fmt, mv);
    if (st->n < 2) { snprintf(b, n, "%s%s (n 1)", m, unit); return b; }
    char df2[18]; /* sd and se: the mean's format without its sign flag */
    snprintf(df2, sizeof df2, "%%%s", fmt[1] == '+' ? fmt + 2 : fmt + 1);
    snprintf(d, sizeof d, df2, st->sd * scale);
    snprintf(e, sizeof e, df2, st->se * scale);
    snprintf(b, n, "%s%s ± %s%s (se %s%s, n %d)", m, unit, d, unit, e, unit, st->n);
    return b;
}

double study_t_p(const mx_study_stat* st, double* t) {
    double tv = st->n >= 2 && st->se > 0 ? st->mean / st->se : NAN;
    if (fabs(tv) < 0.005) tv = 0; /* no "-0.00" */
    if (t) *t = tv;
    return mx_study_t_p(tv, st->n - 1);
}

/* One row of "Recipe against recipe": a - ref by seed (the header first, once). */
static void vs_row(const mx_study* s, mx_sbuf* b, const char* a, const char* ref, int* head) {
    if (!study_find_recipe(s, a) || !study_find_recipe(s, ref)) return;
    double d[64];
    uint64_t sd[64];
    mx_study_stat st;
    int n = mx_study_recipe_vs(s, a, ref, d, sd, 64, &st);
    if (!*head) {
        mx_sb_printf(b, "\n## Recipe against recipe (same seed)\n\n"
                     "Each MXFP4 stage against the one before it (the GEMM it adds), each stabilizer against its plain "
                     "recipe, the deterministic rotations against the random one, and each stabilized stage against the "
                     "plain stage before it: per seed where both runs finished "
                     "without diverging, the first recipe's validation loss minus the second's at their common budget; "
                     "mean ± sd (se, n), and the two-sided p of the mean under Student's t with n - 1 degrees of freedom "
                     "(with n = 3, 2 se is p = 0.18 and p = 0.05 takes 4.3 se).\n\n"
                     "| recipe - recipe | per seed | mean ± sd (se, n) | t | p |\n|---|---|---|---|---|\n");
        *head = 1;
    }
    char c[160], t[32], pv[32], ps[512];
    size_t l = 0;
    ps[0] = 0;
    for (int q = 0; q < n && l + 40 < sizeof ps; q++)
        l += (size_t)snprintf(ps + l, sizeof ps - l, "%ss%llu %+.4f", q ? ", " : "", (unsigned long long)sd[q], d[q]);
    double tv;
    const double p = study_t_p(&st, &tv);
    mx_sb_printf(b, "| %s - %s | %s | %s | %s | %s |\n", a, ref, n ? ps : "-",
                 study_stat_cell(c, sizeof c, &st, "%+.4f", 1, ""), num(t, sizeof t, tv == 0 ? "%.2f" : "%+.2f", tv),
                 num(pv, sizeof pv, "%.3f", p));
}

/* "Recipe against recipe": the questions of the paper's hypotheses (which GEMM costs, which stabilizer
 * helps, whether the rotation needs its randomness), answered by seed rather than through two noisy
 * differences from the baseline. The stages mxfp4-f, -fd, -fdw each against the one before; every recipe
 * named stage + a stabilizer suffix against the stage; the deterministic rotations against -rh16; and each
 * stabilized stage against the plain stage before it (whether the stabilizer pays for the GEMM it adds). */
static void vs_section(const mx_study* s, mx_sbuf* b) {
    static const char* stages[3] = {"mxfp4-f", "mxfp4-fd", "mxfp4-fdw"};
    static const char* stabs[6] = {"-sr", "-rh16", "-h16", "-h32", "-h16-2d", "-h16-even"};
    int head = 0;
    for (int i = 1; i < 3; i++) vs_row(s, b, stages[i], stages[i - 1], &head);
    for (int i = 0; i < 3; i++)
        for (int pass = 0; pass < 2; pass++) /* 0: against the plain stage; 1: against its -rh16 */
            for (int j = pass ? 2 : 0; j < 6; j++) {
                char a[96], ref[96];
                snprintf(a, sizeof a, "%s%s", stages[i], stabs[j]);
                snprintf(ref, sizeof ref, "%s%s", stages[i], pass ? "-rh16" : "");
                vs_row(s, b, a, ref, &head);
            }
    for (int i = 1; i < 3; i++)
        for (int j = 0; j < 6; j++) {
            char a[96];
            snprintf(a, sizeof a, "%s%s", stages[i], stabs[j]);
            vs_row(s, b, a, stages[i - 1], &head);
        }
}

/* The paired overhead of a recipe (the paper's grid): mean ± sd (se, n), and the seeds that did not converge. */
void study_paired_cell(const mx_study_recipe* R, const char* B, char* b, size_t n) {
    if (!strcmp(R->recipe, B)) { snprintf(b, n, "baseline (0 by definition)"); return; }
    int fin = R->n_pairs + R->n_dnc + R->n_nobase;
    if (!R->n_pairs) {
        if (R->n_dnc) snprintf(b, n, "did not converge (%d/%d seeds)", R->n_dnc, fin);
        else snprintf(b, n, R->n_finished ? "no paired seed" : "not finished");
        if (R->n_dnc) short_note(R, b, n);
        return;
    }
    study_stat_cell(b, n, &R->p_overhead, "%+.1f", 100, "%");
    size_t l = strlen(b);
    if (R->n_dnc) {
        snprintf(b + l, n - l, "; %d/%d did not converge", R->n_dnc, fin);
        short_note(R, b, n);
    }
}

/* Whether a run's telemetry has the products' SQNR (`<gemm>_out_sqnr_db`). */
static int has_products(const mx_study_run* r) {
    for (int t = 0; t < r->n_tele; t++)
        if (isfinite(r->tele[t].out_db[2])) return 1;
    return 0;
}

/* Series o of a telemetry step: the six operands' SQNR, then (MX_STUDY_OPS + g) the products'. */
static double tele_series(const mx_study_tele* te, int o) {
    return o < MX_STUDY_OPS ? te->sqnr_db[o] : te->out_db[o - MX_STUDY_OPS];
}

/* The products' SQNR against Chmiel et al.'s criterion (runs that logged it: `--telemetry-every` with this
 * telemetry): per run, each GEMM's mean over the linears at the first and the last telemetry step, the lowest
 * single linear over all steps (and where), and the first step at which a linear fell below the criterion. */
static void gnr_section(mx_sbuf* b, const mx_study* s) {
    int any = 0;
    for (int i = 0; i < s->n_runs && !any; i++) any = has_products(&s->runs[i]);
    if (!any) return;
    mx_sb_printf(b, "\n## Products against the quantization noise (Chmiel et al. 2025)\n\n"
                    "Per GEMM, the SQNR of its product against the product of the unquantized operands, 20 log10 "
                    "||C|| / ||Cq - C|| (the noise this GEMM's own quantization adds; for Wgrad the gradient-to-noise "
                    "ratio): the mean over the linears at the first and the last telemetry step, the lowest linear "
                    "of any step, and the first step at which a linear fell below sqrt(3) (%.2f dB), the point "
                    "past which Chmiel et al. find quantized training stops making progress.\n\n"
                    "| run | fprop (first -> last, dB) | dgrad | wgrad | lowest wgrad linear | first wgrad below "
                    "%.2f dB | first dgrad below |\n|---|---|---|---|---|---|---|\n", MX_STUDY_GNR_DB, MX_STUDY_GNR_DB);
    for (int i = 0; i < s->n_runs; i++) {
        const mx_study_run* r = &s->runs[i];
        if (!r->n_tele || !isfinite(r->tele[r->n_tele - 1].out_db[2])) continue;
        const mx_study_tele *t0 = &r->tele[0], *t1 = &r->tele[r->n_tele - 1];
        mx_sb_printf(b, "| %s |", r->name);
        for (int g = 0; g < 3; g++) mx_sb_printf(b, " %.2f -> %.2f |", t0->out_db[g], t1->out_db[g]);
        const mx_study_tele* lo = NULL;
        int64_t below[3] = {-1, -1, -1};
        for (int t = 0; t < r->n_tele; t++) {
            const mx_study_tele* e = &r->tele[t];
            if (isfinite(e->out_min_db[2]) && (!lo || e->out_min_db[2] < lo->out_min_db[2])) lo = e;
            for (int g = 1; g < 3; g++)
                if (below[g] < 0 && e->out_min_db[g] < MX_STUDY_GNR_DB) below[g] = e->step;
        }
        if (lo) mx_sb_printf(b, " %.2f (step %lld, layer %d %s) |", lo->out_min_db[2], (long long)lo->step,
                             lo->out_min_layer[2], lo->out_min_linear[2]);
        else mx_sb_printf(b, " - |");
        for (int g = 2; g >= 1; g--)
            if (below[g] >= 0) mx_sb_printf(b, " step %lld |", (long long)below[g]);
            else mx_sb_printf(b, " never |");
        mx_sb_printf(b, "\n");
    }
}

/* `s` quoted for a POSIX shell when it needs it. */
static void sh_word(mx_sbuf* b, const char* s) {
    int plain = *s != 0;
    for (const char* c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("._+-/=:,@%", *c)))
            plain = 0;
    if (plain) { mx_sb_printf(b, "%s", s); return; }
    mx_sb_printf(b, "'");
    for (const char* c = s; *c; c++)
        if (*c == '\'') mx_sb_printf(b, "'\\''");
        else mx_sb_printf(b, "%c", *c);
    mx_sb_printf(b, "'");
}

/* The mxlm train command of a run: its config.txt's keys that differ from the defaults of its preset. */
static void run_command(mx_sbuf* b, const mx_study_run* r) {
    mx_train_config d;
    mx_train_config_default(&d);
    if (r->preset[0]) mx_model_preset(r->preset, &d.model);
    static char dtext[16384];
    mx_train_config_text(&d, 0, dtext, sizeof dtext);
    mx_sb_printf(b, "mxlm train --preset ");
    sh_word(b, r->preset[0] ? r->preset : "tiny");
    mx_sb_printf(b, " --recipe ");
    sh_word(b, r->recipe);
    mx_sb_printf(b, " --seed %llu --steps %lld", (unsigned long long)r->seed, (long long)r->steps);
    for (const char* p = r->config; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        size_t kl = strcspn(p, " =\n");
        char key[64], val[1100], dv[1100];
        if (!kl || kl >= sizeof key) continue;
        snprintf(key, sizeof key, "%.*s", (int)kl, p);
        if (!strcmp(key, "preset") || !strcmp(key, "recipe") || !strcmp(key, "seed") || !strcmp(key, "steps"))
            continue;
        if (!study_cfg_get(p, key, val, sizeof val)) continue;
        if (study_cfg_get(dtext, key, dv, sizeof dv) && !strcmp(dv, val)) continue;
        mx_sb_printf(b, " --%s ", key);
        sh_word(b, val);
    }
    mx_sb_printf(b, " --out ");
    sh_word(b, r->dir);
}

void study_run_model(const mx_study_run* r, mx_model_config* m) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%.31s", r->preset);
    m->vocab = (int)study_cfg_i64(r->config, "vocab", 0);
    m->dim = (int)study_cfg_i64(r->config, "dim", 0);
    m->n_layers = (int)study_cfg_i64(r->config, "layers", 0);
    m->n_heads = (int)study_cfg_i64(r->config, "heads", 0);
    m->n_kv_heads = (int)study_cfg_i64(r->config, "kv-heads", 0);
    m->ffn = (int)study_cfg_i64(r->config, "ffn", 0);
    m->seq_len = (int)study_cfg_i64(r->config, "context", 0);
    char v[64];
    m->rope_theta = study_cfg_get(r->config, "rope-theta", v, sizeof v) ? strtof(v, NULL) : 500000.0f;
    m->norm_eps = study_cfg_get(r->config, "norm-eps", v, sizeof v) ? strtof(v, NULL) : 1e-5f;
}

static void model_line(mx_sbuf* b, const mx_study_run* r) {
    mx_model_config m;
    study_run_model(r, &m);
    char d[512];
    mx_model_config_describe(&m, d, sizeof d);
    mx_sb_printf(b, "- **Model**: %s; %lld parameters (%lld without the embedding and head).\n", d,
              (long long)mx_model_n_params(&m), (long long)mx_model_n_params_nonembed(&m));
    char lr[64] = "?", wu[64] = "?", fl[64] = "?", dev[64] = "?";
    study_cfg_get(r->config, "lr", lr, sizeof lr);
    study_cfg_get(r->config, "warmup", wu, sizeof wu);
    study_cfg_get(r->config, "min-lr-frac", fl, sizeof fl);
    study_cfg_get(r->config, "device", dev, sizeof dev);
    mx_sb_printf(b, "- **Tokens**: %lld per run (%lld steps x %lld tokens: batch %lld x seq %lld x accum %lld).\n",
              (long long)r->budget_tokens, (long long)r->steps, (long long)r->tokens_per_step,
              (long long)study_cfg_i64(r->config, "batch", 0), (long long)study_cfg_i64(r->config, "seq", 0),
              (long long)study_cfg_i64(r->config, "accum", 1));
    mx_sb_printf(b, "- **Schedule**: AdamW, peak LR %s, %s warmup steps, cosine to %sx the peak; evaluation every %lld "
                 "steps on %lld validation tokens; device %s.\n", lr, wu, fl,
              (long long)study_cfg_i64(r->config, "eval-every", 0), (long long)study_cfg_i64(r->config, "val-tokens", 0), dev);
}

/* Does the line p[0..l) occur as a whole line of text before p? */
int study_line_seen(const char* text, const char* p, size_t l) {
    for (const char* q = text; q < p; q = strchr(q, '\n'), q = q ? q + 1 : p)
        if (strcspn(q, "\n") == l && !strncmp(q, p, l)) return 1;
    return 0;
}

/* Table 2's note on how the runs were timed, from study.txt's "parallel = N" / "slots = a,b,..." lines
 * (mxlm study run --parallel): *maxpar the most runs at a time, the return 1 when a slots line names one
 * device twice (runs shared a GPU), *slots that line. */
static int shared_slots(const char* text, int* maxpar, char* slots, size_t n) {
    int shared = 0;
    *maxpar = 1;
    slots[0] = 0;
    for (const char* p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        size_t l = strcspn(p, "\n");
        if (!strncmp(p, "parallel = ", 11)) {
            int v = atoi(p + 11);
            if (v > *maxpar) *maxpar = v;
        } else if (!strncmp(p, "slots = ", 8)) {
            char e[256][32];
            int ne = 0, rep = 0;
            for (const char* q = p + 8; q < p + l && ne < 256;) {
                size_t k = strcspn(q, ",\n");
                if (q + k > p + l) k = (size_t)(p + l - q);
                snprintf(e[ne], sizeof e[ne], "%.*s", (int)(k < 31 ? k : 31), q);
                for (int j = 0; j < ne; j++) rep |= !strcmp(e[j], e[ne]);
                ne++;
                q += k + (q + k < p + l);
            }
            if (rep && !shared) snprintf(slots, n, "%.*s", (int)(l - 8), p + 8);
            shared |= rep;
        }
    }
    return shared;
}

char* mx_study_markdown(const mx_study* s) {
    mx_sbuf b = {0};
    char t1[64], t2[64], t3[64], t4[64], t5[64], cell[160];
    const char* B = s->baseline;
    mx_sb_printf(&b, "# Study: %s\n\n", s->dir);
    /* the setup, from the first run (the baseline's when there is one) */
    mx_sb_printf(&b, "## Setup\n\n");
    model_line(&b, &s->runs[0]);
    mx_sb_printf(&b, "- **Seeds**:");
    for (int k = 0; k < s->n_recipes; k++) {
        mx_sb_printf(&b, "%s %s", k ? ";" : "", s->recipes[k].recipe);
        int first = 1;
        for (int i = 0; i < s->n_runs; i++)
            if (!strcmp(s->runs[i].recipe, s->recipes[k].recipe)) {
                mx_sb_printf(&b, "%s%llu", first ? " " : ",", (unsigned long long)s->runs[i].seed);
                first = 0;
            }
    }
    mx_sb_printf(&b, ".\n");
    if (s->warning[0]) mx_sb_printf(&b, "- **Warning**: %s.\n", s->warning);
    for (const char* p = s->study_txt; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        size_t l = strcspn(p, "\n");
        if (study_line_seen(s->study_txt, p, l)) continue; /* a study run again (continued) */
        if (!strncmp(p, "machine = ", 10)) mx_sb_printf(&b, "- **Machine**: %.*s.\n", (int)l - 10, p + 10);
        if (!strncmp(p, "command = ", 10)) mx_sb_printf(&b, "- **Study command**: `%.*s`\n", (int)l - 10, p + 10);
    }
    if (s->opts.target > 0 || s->opts.pooled)
        mx_sb_printf(&b, "- **Target**: validation loss %s nats: %s.\n", num(t1, sizeof t1, "%.6g", s->target), s->target_rule);
    else mx_sb_printf(&b, "- **Target**: %s.\n", s->target_rule);
    if (isfinite(s->budget_limit))
        mx_sb_printf(&b, "- **Budget**: a run that does not reach its target within %.9g tokens (%.9gx the baseline's %lld) "
                      "or diverges did not converge. A run that ended before that limit without reaching its target "
                      "is counted as not converged too, and marked \"not run on to the limit\" (`mxlm study run "
                      "--extend` trains such runs on to it).\n", s->budget_limit, s->opts.budget_factor,
                  (long long)s->baseline_budget);
    mx_sb_printf(&b, "- **Baseline** %s: mean tokens-to-target %s.\n\n", B, num(t1, sizeof t1, "%.0f", s->baseline_ttt));

    /* Table 1 */
    mx_sb_printf(&b, "## Table 1: token overhead vs %s to reach the target\n\n", B);
    mx_sb_printf(&b, "| recipe | MXFP4 in all GEMMs | seeds reached / finished / runs | tokens to target (mean) | "
                  "overhead vs %s (min..max) | final val loss |\n|---|---|---|---|---|---|\n", B);
    for (int k = 0; k < s->n_recipes; k++) {
        const mx_study_recipe* R = &s->recipes[k];
        overhead_cell(R, cell, sizeof cell);
        mx_sb_printf(&b, "| %s%s | %s | %d / %d / %d | %s | %s | %s |\n", R->recipe, strcmp(R->recipe, B) ? "" : " (baseline)",
                  R->full_mxfp4 ? "yes" : "no", R->n_reached, R->n_finished, R->n_runs,
                  num(t1, sizeof t1, "%.0f", R->ttt_mean), cell, num(t2, sizeof t2, "%.4f", R->final_loss));
    }
    /* the paper's grid, when its recipes are here */
    static const char* rows[3][2] = {{"mxfp4-f", "Fprop"}, {"mxfp4-fd", "Fprop + Dgrad"},
                                     {"mxfp4-fdw", "Fprop + Dgrad + Wgrad"}};
    static const char* cols[4] = {"", "-sr", "-rh16", "-h16"};
    int any = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            char n[64];
            snprintf(n, sizeof n, "%s%s", rows[i][0], cols[j]);
            for (int k = 0; k < s->n_recipes; k++) any |= !strcmp(s->recipes[k].recipe, n);
        }
    if (any) {
        mx_sb_printf(&b, "\nIn the paper's layout: the paired token overhead vs %s (per seed, tokens-to-target / %s's "
                      "of the same seed - 1; mean ± standard deviation over the seeds, standard error, number of "
                      "pairs; seeds that did not converge are counted, not averaged). Recipes outside the grid are "
                      "extra rows:\n\n"
                      "| MXFP4 enabled in | plain | + stochastic rounding | + random Hadamard | + deterministic H16 |\n"
                      "|---|---|---|---|---|\n", B, B);
        for (int i = 0; i < 3; i++) {
            mx_sb_printf(&b, "| %s |", rows[i][1]);
            for (int j = 0; j < 4; j++) {
                char n[64];
                snprintf(n, sizeof n, "%s%s", rows[i][0], cols[j]);
                const mx_study_recipe* R = NULL;
                for (int k = 0; k < s->n_recipes; k++)
                    if (!strcmp(s->recipes[k].recipe, n)) R = &s->recipes[k];
                if (R) study_paired_cell(R, B, cell, sizeof cell);
                mx_sb_printf(&b, " %s |", R ? cell : "");
            }
            mx_sb_printf(&b, "\n");
        }
        for (int k = 0; k < s->n_recipes; k++) { /* the other recipes */
            int in_grid = 0;
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 4; j++) {
                    char n[64];
                    snprintf(n, sizeof n, "%s%s", rows[i][0], cols[j]);
                    in_grid |= !strcmp(s->recipes[k].recipe, n);
                }
            if (in_grid) continue;
            study_paired_cell(&s->recipes[k], B, cell, sizeof cell);
            mx_sb_printf(&b, "| %s | %s | | | |\n", s->recipes[k].recipe, cell);
        }
    }

    /* paired differences */
    mx_sb_printf(&b, "\n## Paired differences vs %s (same seed)\n\n"
                  "Per recipe and seed: this recipe's run minus %s's run of the same seed (the same initial weights "
                  "and data order); mean ± standard deviation (n - 1) over the seeds, standard error sd / sqrt(n), "
                  "n pairs. Validation losses: every seed where both runs finished without diverging, whether or not "
                  "it reached the target, compared at the same token counts (%s's evaluations: a run trained on to "
                  "the limit is compared at %s's budget). Tokens-to-target (interpolated linearly between "
                  "evaluations) and overhead: the seeds where both reached the target; a seed that did not converge "
                  "is counted in its column, not averaged.\n\n"
                  "| recipe | seeds paired (loss / target) | did not converge | final val loss - %s | "
                  "tokens-to-target - %s | paired overhead |\n"
                  "|---|---|---|---|---|---|\n", B, B, B, B, B, B);
    int any_pair = 0;
    for (int k = 0; k < s->n_recipes; k++) {
        const mx_study_recipe* R = &s->recipes[k];
        if (!strcmp(R->recipe, B)) continue;
        char c1[160], c2[160], c3[160];
        int fin = R->n_pairs + R->n_dnc + R->n_nobase;
        char nob[64] = "";
        if (R->n_nobase) snprintf(nob, sizeof nob, " (%d without a baseline pair)", R->n_nobase);
        mx_sb_printf(&b, "| %s | %d / %d | %d/%d%s | %s | %s | %s |\n", R->recipe, R->n_lpairs, R->n_pairs, R->n_dnc,
                     fin, nob,
                  study_stat_cell(c1, sizeof c1, &R->d_final, "%+.4f", 1, ""),
                  study_stat_cell(c2, sizeof c2, &R->d_ttt, "%+.0f", 1, ""),
                  study_stat_cell(c3, sizeof c3, &R->p_overhead, "%+.1f", 100, "%"));
        any_pair |= R->n_pairs > 0 || R->n_lpairs > 0;
    }
    /* the statement */
    mx_sb_printf(&b, "\n**Beyond two standard errors** (|mean| > 2 se, n >= 2):");
    int nb = 0;
    for (int k = 0; k < s->n_recipes; k++) {
        const mx_study_recipe* R = &s->recipes[k];
        if (!strcmp(R->recipe, B)) continue;
        const mx_study_stat* sts[3] = {&R->d_final, &R->d_ttt, &R->p_overhead};
        static const char* what[3] = {"final val loss", "tokens-to-target", "paired overhead"};
        for (int q = 0; q < 3; q++) {
            if (!mx_study_stat_beyond_2se(sts[q])) continue;
            char c[160];
            study_stat_cell(c, sizeof c, sts[q], q == 0 ? "%+.4f" : q == 1 ? "%+.0f" : "%+.1f", q == 2 ? 100 : 1, q == 2 ? "%" : "");
            mx_sb_printf(&b, "%s %s %s %s (%.1f se, %s %s)", nb ? ";" : "", R->recipe, what[q], c,
                      fabs(sts[q]->mean) / sts[q]->se, sts[q]->mean > 0 ? "above" : "below", B);
            nb++;
        }
        int ne = 0, nt = 0;
        for (int p = 0; p < R->n_points; p++) {
            nt += R->d_loss[p].n >= 2;
            ne += mx_study_stat_beyond_2se(&R->d_loss[p]);
        }
        if (ne) {
            mx_sb_printf(&b, "%s %s val loss at %d of %d evaluations with n >= 2", nb ? ";" : "", R->recipe, ne, nt);
            nb++;
        }
    }
    mx_sb_printf(&b, "%s\n", nb ? "." : " none.");
    if (!any_pair) mx_sb_printf(&b, "\n(No recipe has a seed paired with %s.)\n", B);

    /* the loss difference at every evaluation */
    int maxp = 0;
    for (int k = 0; k < s->n_recipes; k++) maxp = s->recipes[k].n_points > maxp ? s->recipes[k].n_points : maxp;
    if (maxp) {
        mx_sb_printf(&b, "\nValidation loss - %s's at every evaluation (same seed; mean ± sd (se, n)):\n\n| tokens |", B);
        int nc = 0;
        for (int k = 0; k < s->n_recipes; k++)
            if (s->recipes[k].n_points) { mx_sb_printf(&b, " %s |", s->recipes[k].recipe); nc++; }
        mx_sb_printf(&b, "\n|---|");
        for (int k = 0; k < nc; k++) mx_sb_printf(&b, "---|");
        mx_sb_printf(&b, "\n");
        const mx_study_recipe* G = NULL;
        for (int k = 0; k < s->n_recipes && !G; k++)
            if (s->recipes[k].n_points == maxp) G = &s->recipes[k];
        for (int p = 0; p < maxp; p++) {
            int64_t T = G->pt_tokens[p];
            mx_sb_printf(&b, "| %lld |", (long long)T);
            for (int k = 0; k < s->n_recipes; k++) {
                const mx_study_recipe* R = &s->recipes[k];
                if (!R->n_points) continue;
                const mx_study_stat* st = NULL;
                for (int q = 0; q < R->n_points && !st; q++)
                    if (R->pt_tokens[q] == T) st = &R->d_loss[q];
                char c[160];
                mx_sb_printf(&b, " %s |", st ? study_stat_cell(c, sizeof c, st, "%+.4f", 1, "") : "-");
            }
            mx_sb_printf(&b, "\n");
        }
    }

    vs_section(s, &b);

    /* Table 2 */
    const int col16 = strcmp(B, "bf16") != 0; /* a "vs bf16" column besides "vs baseline" */
    mx_sb_printf(&b, "\n## Table 2: step throughput and end-to-end tokens-to-target throughput\n\n");
    {
        int maxpar = 1;
        char slots[256];
        if (shared_slots(s->study_txt, &maxpar, slots, sizeof slots))
            mx_sb_printf(&b, "**Not speed measurements.** Up to %d runs of this study ran at a time with slots on the "
                          "same device (CUDA_VISIBLE_DEVICES per slot: %s; study.txt): each run's tok/s is its share "
                          "of a device whose other users changed as runs started and ended, so the throughput and "
                          "end-to-end columns here compare nothing. Speed is measured alone (bench/, docs/gpu.md).\n\n",
                          maxpar, slots);
        else if (maxpar > 1)
            mx_sb_printf(&b, "Up to %d runs ran at a time, one per slot (CUDA_VISIBLE_DEVICES per slot in study.txt); "
                          "runs on the CPU shared its cores (each its share of the threads), and their tok/s are not "
                          "speed measurements.\n\n", maxpar);
    }
    mx_sb_printf(&b, "| recipe | step throughput (tok/s, median) | vs %s |%s token overhead | end-to-end vs %s |\n"
                  "|---|---|---|---|---|%s\n", B, col16 ? " vs bf16 |" : "", B, col16 ? "---|" : "");
    for (int k = 0; k < s->n_recipes; k++) {
        const mx_study_recipe* R = &s->recipes[k];
        const char* e2e = R->n_finished && !R->n_reached ? "did not converge" : num(t4, sizeof t4, "%.3fx", R->end_to_end);
        mx_sb_printf(&b, "| %s | %s | %s |", R->recipe, num(t1, sizeof t1, "%.0f", R->tok_per_s),
                  num(t2, sizeof t2, "%.3fx", R->vs_baseline));
        if (col16) mx_sb_printf(&b, " %s |", num(t3, sizeof t3, "%.3fx", R->vs_bf16));
        mx_sb_printf(&b, " %s | %s |\n", pct(cell, sizeof cell, R->overhead), e2e);
    }

    gnr_section(&b, s);

    /* the runs */
    mx_sb_printf(&b, "\n## Runs\n\n| run | recipe | seed | status | tokens | final val loss | tokens to target | "
                  "overhead | median tok/s | target |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < s->n_runs; i++) {
        const mx_study_run* r = &s->runs[i];
        char st[320];
        if (r->status[0]) snprintf(st, sizeof st, "%s%s%s", r->status, r->reason[0] ? ": " : "", r->reason);
        else snprintf(st, sizeof st, "not finished");
        if (r->finished && !r->reached) {
            size_t l = strlen(st);
            snprintf(st + l, sizeof st - l, r->diverged ? " (did not converge)"
                                            : r->tokens_to_target >= 0 ? " (target beyond the budget: did not converge)"
                                            : r->short_run ? " (target not reached: did not converge; not run on to the limit)"
                                                           : " (target not reached: did not converge)");
        }
        double fl = r->n_evals ? r->evals[r->n_evals - 1].val_loss : NAN;
        mx_sb_printf(&b, "| %s | %s | %llu | %s | %lld | %s | %s | %s | %s | %s |\n", r->name, r->recipe,
                  (unsigned long long)r->seed, st, (long long)r->last_tokens, num(t1, sizeof t1, "%.4f", fl),
                  r->tokens_to_target >= 0 ? num(t2, sizeof t2, "%.0f", r->tokens_to_target) : "-",
                  pct(t3, sizeof t3, r->overhead), num(t4, sizeof t4, "%.0f", r->tok_per_s),
                  num(t5, sizeof t5, "%.6g", r->target));
    }
    mx_sb_printf(&b, "\nCommands (each run's config.txt, as `mxlm train` flags that differ from the preset's defaults):\n\n");
    for (int i = 0; i < s->n_runs; i++) {
        mx_sb_printf(&b, "- `");
        run_command(&b, &s->runs[i]);
        mx_sb_printf(&b, "`\n");
    }
    mx_sb_printf(&b, "\n## Figures\n\n![validation loss against tokens](loss.svg)\n");
    for (int i = 0; i < s->n_runs; i++)
        if (s->runs[i].n_tele && study_recipe_full_mxfp4(s->runs[i].recipe)) {
            mx_sb_printf(&b, "\n![per-GEMM quantization SQNR over steps](telemetry.svg)\n");
            break;
        }
    return study_sb_take(&b);
}

/* ---- JSON ----------------------------------------------------------------------------- */

static void js_num(mx_sbuf* b, double x) {
    char t[32];
    mx_sb_printf(b, "%s", mx_json_number(t, sizeof t, x, 17));
}

/* ,"key":x */
static void js_key_num(mx_sbuf* b, const char* key, double x) {
    mx_sb_printf(b, ",\"%s\":", key);
    js_num(b, x);
}

static void js_str(mx_sbuf* b, const char* t) {
    mx_sb_printf(b, "\"");
    for (; *t; t++)
        if (*t == '"' || *t == '\\') mx_sb_printf(b, "\\%c", *t);
        else if ((unsigned char)*t < 0x20) mx_sb_printf(b, "\\u%04x", (unsigned char)*t);
        else mx_sb_printf(b, "%c", *t);
    mx_sb_printf(b, "\"");
}

static void js_stat(mx_sbuf* b, const char* key, const mx_study_stat* st) {
    mx_sb_printf(b, "\"%s\":{\"n\":%d,\"mean\":", key, st->n);
    js_num(b, st->mean);
    js_key_num(b, "sd", st->sd);
    js_key_num(b, "se", st->se);
    mx_sb_printf(b, ",\"beyond_2se\":%s}", mx_study_stat_beyond_2se(st) ? "true" : "false");
}

char* mx_study_json(const mx_study* s) {
    mx_sbuf b = {0};
    mx_sb_printf(&b, "{\"baseline\":");
    js_str(&b, s->baseline);
    js_key_num(&b, "target", s->target);
    js_key_num(&b, "budget_limit", s->budget_limit);
    mx_sb_printf(&b, ",\"runs\":[");
    for (int i = 0; i < s->n_runs; i++) {
        const mx_study_run* r = &s->runs[i];
        mx_sb_printf(&b, "%s\n{\"name\":", i ? "," : "");
        js_str(&b, r->name);
        mx_sb_printf(&b, ",\"recipe\":");
        js_str(&b, r->recipe);
        mx_sb_printf(&b, ",\"seed\":%llu,\"finished\":%s,\"diverged\":%s,\"reached\":%s,\"tokens_to_target\":",
                  (unsigned long long)r->seed, r->finished ? "true" : "false", r->diverged ? "true" : "false",
                  r->reached ? "true" : "false");
        js_num(&b, r->tokens_to_target >= 0 ? r->tokens_to_target : NAN);
        js_key_num(&b, "overhead", r->overhead);
        mx_sb_printf(&b, ",\"loss_paired\":%s,\"paired\":%s,\"d_final\":", r->lpaired ? "true" : "false",
                     r->paired ? "true" : "false");
        js_num(&b, r->d_final);
        js_key_num(&b, "d_ttt", r->d_ttt);
        js_key_num(&b, "p_overhead", r->p_overhead);
        mx_sb_printf(&b, "}");
    }
    mx_sb_printf(&b, "],\n\"recipes\":[");
    for (int k = 0; k < s->n_recipes; k++) {
        const mx_study_recipe* R = &s->recipes[k];
        mx_sb_printf(&b, "%s\n{\"recipe\":", k ? "," : "");
        js_str(&b, R->recipe);
        mx_sb_printf(&b, ",\"baseline\":%s,\"n_loss_pairs\":%d,\"n_pairs\":%d,\"n_dnc\":%d,\"n_nobase\":%d,",
                     strcmp(R->recipe, s->baseline) ? "false" : "true", R->n_lpairs, R->n_pairs, R->n_dnc, R->n_nobase);
        js_stat(&b, "d_final", &R->d_final);
        mx_sb_printf(&b, ",");
        js_stat(&b, "d_ttt", &R->d_ttt);
        mx_sb_printf(&b, ",");
        js_stat(&b, "p_overhead", &R->p_overhead);
        mx_sb_printf(&b, ",\"d_loss\":[");
        for (int p = 0; p < R->n_points; p++) {
            mx_sb_printf(&b, "%s{\"tokens\":%lld,", p ? "," : "", (long long)R->pt_tokens[p]);
            js_stat(&b, "d", &R->d_loss[p]);
            mx_sb_printf(&b, "}");
        }
        mx_sb_printf(&b, "]}");
    }
    mx_sb_printf(&b, "]}\n");
    return study_sb_take(&b);
}

/* ---- SVG ------------------------------------------------------------------------------ */

static const char* k_colors[10] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

/* A "nice" tick step (1, 2 or 5 x 10^k) giving about n ticks over [lo, hi]. */
static double tick_step(double lo, double hi, int n) {
    double raw = (hi - lo) / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

const char* study_short_num(char* b, size_t n, double x) {
    double a = fabs(x);
    if (a >= 1e9) snprintf(b, n, "%gB", x / 1e9);
    else if (a >= 1e6) snprintf(b, n, "%gM", x / 1e6);
    else if (a >= 1e4) snprintf(b, n, "%gk", x / 1e3);
    else snprintf(b, n, "%g", x);
    return b;
}

typedef mx_svg_frame frame; /* data range and plot area (pixels); study.h */

static double fx(const frame* f, double x) { return f->L + (x - f->x0) / (f->x1 - f->x0) * f->W; }
static double fy(const frame* f, double y) { return f->T + f->H - (y - f->y0) / (f->y1 - f->y0) * f->H; }

static void xml_text(mx_sbuf* b, const char* s);

/* An x grid line at data x and its tick label. */
static void x_tick(mx_sbuf* b, const frame* f, double x, const char* label) {
    mx_sb_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%d\" "
                 "text-anchor=\"middle\">", fx(f, x), f->T, fx(f, x), f->T + f->H, fx(f, x), f->T + f->H + 16);
    xml_text(b, label);
    mx_sb_printf(b, "</text>\n");
}

/* Axes, grid and tick labels of a plot area, and its clip path `id`: the x ticks at xt[0..nx) labelled xl[], or
 * (nx < 0) at every multiple of a 1-2-5 step. */
static void svg_axes_at(mx_sbuf* b, const frame* f, const char* xlabel, const char* ylabel, const char* title, int id,
                        const double* xt, const char* const* xl, int nx) {
    char t[32];
    mx_sb_printf(b, "<clipPath id=\"c%d\"><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/></clipPath>\n", id, f->L, f->T,
              f->W, f->H);
    mx_sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#000\"/>\n", f->L, f->T, f->W,
              f->H);
    double xs = tick_step(f->x0, f->x1, 6), ys = tick_step(f->y0, f->y1, 6);
    for (double x = ceil(f->x0 / xs) * xs; nx < 0 && x <= f->x1 + 1e-9 * xs; x += xs)
        x_tick(b, f, x, study_short_num(t, sizeof t, fabs(x) < 1e-9 * xs ? 0 : x));
    for (int i = 0; i < nx; i++) x_tick(b, f, xt[i], xl[i]);
    for (double y = ceil(f->y0 / ys) * ys; y <= f->y1 + 1e-9 * ys; y += ys)
        mx_sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" "
                     "text-anchor=\"end\">%g</text>\n", f->L, fy(f, y), f->L + f->W, fy(f, y), f->L - 5, fy(f, y) + 4,
                  fabs(y) < 1e-9 * ys ? 0 : y);
    mx_sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", f->L + f->W / 2, f->T + f->H + 34, xlabel);
    mx_sb_printf(b, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", f->L - 42,
              f->T + f->H / 2, ylabel);
    mx_sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>\n", f->L + f->W / 2,
              f->T - 8, title);
}

static void svg_axes(mx_sbuf* b, const frame* f, const char* xlabel, const char* ylabel, const char* title, int id) {
    svg_axes_at(b, f, xlabel, ylabel, title, id, NULL, NULL, -1);
}

static void svg_begin(mx_sbuf* b, int w, int h) {
    mx_sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                 "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
              w, h, w, h, w, h);
}

static void xml_text(mx_sbuf* b, const char* s) {
    for (; *s; s++)
        if (*s == '<') mx_sb_printf(b, "&lt;");
        else if (*s == '>') mx_sb_printf(b, "&gt;");
        else if (*s == '&') mx_sb_printf(b, "&amp;");
        else mx_sb_printf(b, "%c", *s);
}

static char* loss_svg(const mx_study* s) {
    frame f = {INFINITY, -INFINITY, INFINITY, -INFINITY, 70, 40, 620, 380};
    for (int i = 0; i < s->n_runs; i++)
        for (int j = 0; j < s->runs[i].n_evals; j++) {
            const mx_study_eval* e = &s->runs[i].evals[j];
            if (!isfinite(e->val_loss)) continue;
            f.x0 = fmin(f.x0, (double)e->tokens);
            f.x1 = fmax(f.x1, (double)e->tokens);
            if (e->tokens > 0) { f.y0 = fmin(f.y0, e->val_loss); f.y1 = fmax(f.y1, e->val_loss); } /* step 0 off scale */
        }
    if (!(f.y0 < INFINITY)) f.y0 = 0, f.y1 = 1;
    if (isfinite(s->target)) f.y0 = fmin(f.y0, s->target);
    if (!(f.x0 < f.x1)) f.x0 = 0, f.x1 = f.x0 + 1;
    double pad = (f.y1 - f.y0) * 0.05 + 1e-6;
    f.y0 -= pad;
    f.y1 += pad;
    int legend_h = 18 * s->n_recipes + 50;
    mx_sbuf b = {0};
    svg_begin(&b, 900, 480 > f.T + legend_h + 40 ? 480 : f.T + legend_h + 40);
    svg_axes(&b, &f, "tokens", "validation loss (nats)", "Figures 1-2: validation loss against tokens (mean and min-max band over seeds)", 0);
    if (isfinite(s->target))
        mx_sb_printf(&b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#000\" stroke-dasharray=\"6,4\"/>"
                      "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">target %.4g</text>\n", f.L, fy(&f, s->target),
                  f.L + f.W, fy(&f, s->target), f.L + f.W - 4, fy(&f, s->target) - 4, s->target);
    /* per recipe: the mean over its seeds at each evaluation's token count, and the band from the minimum
     * to the maximum over the seeds (where two or more have that evaluation); diverged runs drawn alone */
    int64_t* toks = malloc(sizeof(int64_t) * 1024);
    int tcap = 1024;
    for (int k = 0; k < s->n_recipes && toks; k++) {
        const char* col = k_colors[k % 10];
        const char* dash = k >= 10 ? " stroke-dasharray=\"4,2\"" : "";
        int nt = 0;
        for (int i = 0; i < s->n_runs && toks; i++) {
            const mx_study_run* r = &s->runs[i];
            if (strcmp(r->recipe, s->recipes[k].recipe) || r->diverged) continue;
            for (int j = 0; j < r->n_evals && toks; j++) {
                int seen = 0;
                for (int q = 0; q < nt && !seen; q++) seen = toks[q] == r->evals[j].tokens;
                if (seen) continue;
                if (nt == tcap) {
                    int64_t* t2 = realloc(toks, sizeof(int64_t) * (size_t)(tcap *= 2));
                    if (!t2) { free(toks); toks = NULL; break; }
                    toks = t2;
                }
                toks[nt++] = r->evals[j].tokens;
            }
        }
        if (!toks) break;
        for (int q = 1; q < nt; q++) /* sort (insertion: the lists are short and nearly sorted) */
            for (int w = q; w > 0 && toks[w - 1] > toks[w]; w--) { int64_t t = toks[w]; toks[w] = toks[w - 1]; toks[w - 1] = t; }
        mx_sbuf mean = {0};
        double* band = malloc(sizeof(double) * 3 * (size_t)(nt + 1)); /* x, min, max of the points with 2+ seeds */
        int nband = 0;
        for (int q = 0; q < nt; q++) {
            double mn = INFINITY, mxv = -INFINITY, sum = 0;
            int c = 0;
            for (int i = 0; i < s->n_runs; i++) {
                const mx_study_run* r = &s->runs[i];
                if (strcmp(r->recipe, s->recipes[k].recipe) || r->diverged) continue;
                for (int j = 0; j < r->n_evals; j++)
                    if (r->evals[j].tokens == toks[q] && isfinite(r->evals[j].val_loss)) {
                        double v = r->evals[j].val_loss;
                        mn = fmin(mn, v);
                        mxv = fmax(mxv, v);
                        sum += v;
                        c++;
                        break;
                    }
            }
            if (!c) continue;
            double X = fx(&f, (double)toks[q]);
            mx_sb_printf(&mean, "%.1f,%.1f ", X, fy(&f, sum / c));
            if (c >= 2 && band) {
                band[3 * nband] = X;
                band[3 * nband + 1] = fy(&f, mn);
                band[3 * nband + 2] = fy(&f, mxv);
                nband++;
            }
        }
        if (nband >= 2) { /* the band: the minima forward, the maxima back */
            mx_sb_printf(&b, "<polygon clip-path=\"url(#c0)\" fill=\"%s\" fill-opacity=\"0.18\" stroke=\"none\" points=\"", col);
            for (int q = 0; q < nband; q++) mx_sb_printf(&b, "%.1f,%.1f ", band[3 * q], band[3 * q + 1]);
            for (int q = nband - 1; q >= 0; q--) mx_sb_printf(&b, "%.1f,%.1f ", band[3 * q], band[3 * q + 2]);
            mx_sb_printf(&b, "\"><title>%s: min-max over seeds</title></polygon>\n", s->recipes[k].recipe);
        }
        free(band);
        mx_sb_printf(&b, "<polyline clip-path=\"url(#c0)\" fill=\"none\" stroke=\"%s\"%s stroke-width=\"2\" points=\"%s\">"
                      "<title>%s: mean over seeds</title></polyline>\n", col, dash, mean.s ? mean.s : "",
                  s->recipes[k].recipe);
        free(mean.s);
    }
    free(toks);
    for (int i = 0; i < s->n_runs; i++) { /* diverged runs: their own thin curve, a cross where it ends */
        const mx_study_run* r = &s->runs[i];
        if (!r->diverged) continue;
        int k = 0;
        while (k < s->n_recipes && strcmp(s->recipes[k].recipe, r->recipe)) k++;
        const char* col = k_colors[k % 10];
        mx_sb_printf(&b, "<polyline clip-path=\"url(#c0)\" fill=\"none\" stroke=\"%s\" stroke-width=\"1\" points=\"", col);
        double lx = NAN, ly = NAN;
        for (int j = 0; j < r->n_evals; j++) {
            const mx_study_eval* e = &r->evals[j];
            if (!isfinite(e->val_loss)) break;
            lx = fx(&f, (double)e->tokens);
            ly = fy(&f, e->val_loss);
            mx_sb_printf(&b, "%.1f,%.1f ", lx, ly);
        }
        mx_sb_printf(&b, "\"><title>%s</title></polyline>\n", r->name);
        if (isfinite(lx))
            mx_sb_printf(&b, "<path d=\"M%.1f %.1fl8 8m0 -8l-8 8\" stroke=\"%s\" stroke-width=\"2\"/>\n", lx - 4,
                      fmin(fmax(ly, (double)f.T), (double)(f.T + f.H)) - 4, col);
    }
    int lx = f.L + f.W + 15, ly = f.T + 5;
    for (int k = 0; k < s->n_recipes; k++) {
        mx_sb_printf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"%s/><text x=\"%d\" "
                      "y=\"%d\">", lx, ly + 18 * k, lx + 20, ly + 18 * k, k_colors[k % 10],
                  k >= 10 ? " stroke-dasharray=\"4,2\"" : "", lx + 26, ly + 18 * k + 4);
        xml_text(&b, s->recipes[k].recipe);
        mx_sb_printf(&b, "</text>\n");
    }
    int any_div = 0;
    for (int i = 0; i < s->n_runs; i++) any_div |= s->runs[i].diverged;
    mx_sb_printf(&b, "<text x=\"%d\" y=\"%d\">line: mean over seeds</text>\n<text x=\"%d\" y=\"%d\">band: min-max over "
                  "seeds</text>\n", lx, ly + 18 * s->n_recipes + 4, lx, ly + 18 * s->n_recipes + 22);
    if (any_div) mx_sb_printf(&b, "<text x=\"%d\" y=\"%d\">x: diverged</text>\n", lx, ly + 18 * s->n_recipes + 40);
    mx_sb_printf(&b, "</svg>\n");
    return study_sb_take(&b);
}

/* One panel per full-MXFP4 run with telemetry: the mean SQNR of each GEMM operand over steps. */
static char* telemetry_svg(const mx_study* s) {
    int idx[256], n = 0;
    for (int i = 0; i < s->n_runs && n < 256; i++)
        if (s->runs[i].n_tele && study_recipe_full_mxfp4(s->runs[i].recipe)) idx[n++] = i;
    if (!n) return NULL;
    const int PW = 360, PH = 220, cols = n < 2 ? n : 2, rows = (n + cols - 1) / cols;
    mx_sbuf b = {0};
    svg_begin(&b, cols > 1 ? 40 + cols * (PW + 100) : 720, 80 + rows * (PH + 80));
    mx_sb_printf(&b, "<text x=\"20\" y=\"22\" font-weight=\"bold\">Quantization SQNR of each GEMM operand (dB, mean "
                  "over the layers and linears) against steps</text>\n");
    for (int o = 0; o < MX_STUDY_OPS; o++)
        mx_sb_printf(&b, "<line x1=\"%d\" y1=\"40\" x2=\"%d\" y2=\"40\" stroke=\"%s\" stroke-width=\"3\"/><text x=\"%d\" "
                      "y=\"44\">%s</text>\n", 20 + 110 * o, 40 + 110 * o, k_colors[o], 46 + 110 * o, study_ops[o]);
    /* the products' SQNR (<gemm>_out_sqnr_db), dashed, where the runs logged it */
    int prod = 0;
    for (int p = 0; p < n && !prod; p++) prod = has_products(&s->runs[idx[p]]);
    const int n_series = MX_STUDY_OPS + (prod ? 3 : 0);
    for (int g = 0; prod && g < 3; g++)
        mx_sb_printf(&b, "<line x1=\"%d\" y1=\"60\" x2=\"%d\" y2=\"60\" stroke=\"%s\" stroke-width=\"2\" "
                      "stroke-dasharray=\"5,3\"/><text x=\"%d\" y=\"64\">%s product</text>\n", 20 + 165 * g, 40 + 165 * g,
                      k_colors[6 + g], 46 + 165 * g, study_gemms[g]);
    /* one scale for every panel, so that runs compare at a glance */
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int p = 0; p < n; p++)
        for (int t = 0; t < s->runs[idx[p]].n_tele; t++)
            for (int o = 0; o < n_series; o++) {
                const mx_study_tele* te = &s->runs[idx[p]].tele[t];
                const double v = tele_series(te, o);
                if (!isfinite(v)) continue;
                x0 = fmin(x0, (double)te->step);
                x1 = fmax(x1, (double)te->step);
                y0 = fmin(y0, v);
                y1 = fmax(y1, v);
            }
    if (!(x0 < INFINITY)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    if (!(x0 < x1)) x0 -= 1, x1 += 1;
    double pad = (y1 - y0) * 0.05 + 0.5;
    for (int p = 0; p < n; p++) {
        const mx_study_run* r = &s->runs[idx[p]];
        frame f = {x0, x1, y0 - pad, y1 + pad, 70 + (p % cols) * (PW + 100), 90 + (p / cols) * (PH + 80), PW, PH};
        mx_sbuf title = {0};
        xml_text(&title, r->name);
        char* tt = study_sb_take(&title);
        svg_axes(&b, &f, "step", "SQNR (dB)", tt ? tt : "", p + 1);
        free(tt);
        for (int o = 0; o < n_series; o++) { /* the operands solid, the products dashed (colours 6..8) */
            mx_sb_printf(&b, "<polyline clip-path=\"url(#c%d)\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" %spoints=\"",
                      p + 1, k_colors[o], o < MX_STUDY_OPS ? "" : "stroke-dasharray=\"5,3\" ");
            for (int t = 0; t < r->n_tele; t++)
                if (isfinite(tele_series(&r->tele[t], o)))
                    mx_sb_printf(&b, "%.1f,%.1f ", fx(&f, (double)r->tele[t].step), fy(&f, tele_series(&r->tele[t], o)));
            mx_sb_printf(&b, "\"/>\n");
        }
        if (prod && f.y0 <= MX_STUDY_GNR_DB) /* Chmiel et al.'s criterion where the range reaches it */
            mx_sb_printf(&b, "<line clip-path=\"url(#c%d)\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#000\" "
                          "stroke-dasharray=\"2,2\"/>\n", p + 1, f.L, fy(&f, MX_STUDY_GNR_DB), f.L + f.W,
                          fy(&f, MX_STUDY_GNR_DB));
    }
    mx_sb_printf(&b, "</svg>\n");
    return study_sb_take(&b);
}

/* the renderer for other figures (study.h; mxlm plot) */
double mx_svg_x(const mx_svg_frame* f, double x) { return fx(f, x); }
double mx_svg_y(const mx_svg_frame* f, double y) { return fy(f, y); }
void mx_svg_begin(mx_sbuf* b, int w, int h) { svg_begin(b, w, h); }
void mx_svg_axes(mx_sbuf* b, const mx_svg_frame* f, const char* xlabel, const char* ylabel, const char* title, int id) {
    svg_axes(b, f, xlabel, ylabel, title, id);
}
void mx_svg_axes_xticks(mx_sbuf* b, const mx_svg_frame* f, const char* xlabel, const char* ylabel, const char* title,
                        int id, const double* xt, const char* const* xl, int nx) {
    svg_axes_at(b, f, xlabel, ylabel, title, id, xt, xl, nx < 0 ? 0 : nx);
}
void mx_svg_text(mx_sbuf* b, const char* s) { xml_text(b, s); }
const char* mx_svg_color(int k) { return k_colors[(k % 10 + 10) % 10]; }

int mx_study_write_report(const mx_study* s) {
    char p[1200];
    char* md = mx_study_markdown(s);
    char* svg = loss_svg(s);
    char* tel = telemetry_svg(s);
    char* js = mx_study_json(s);
    int rc = md && svg && js ? MX_OK : mx_fail(MX_ENOMEM, "study: out of memory");
    if (!rc) { rc = mx_pathf(p, sizeof p, "%s/paired.json", s->dir); if (!rc) rc = mx_write_atomic(p, js, strlen(js)); }
    if (!rc) { rc = mx_pathf(p, sizeof p, "%s/results.md", s->dir); if (!rc) rc = mx_write_atomic(p, md, strlen(md)); }
    if (!rc) { rc = mx_pathf(p, sizeof p, "%s/loss.svg", s->dir); if (!rc) rc = mx_write_atomic(p, svg, strlen(svg)); }
    if (!rc && tel) { rc = mx_pathf(p, sizeof p, "%s/telemetry.svg", s->dir); if (!rc) rc = mx_write_atomic(p, tel, strlen(tel)); }
    free(md);
    free(svg);
    free(tel);
    free(js);
    return rc;
}
