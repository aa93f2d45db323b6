/* sizes.c: one precision study per model size, side by side (study.h, `mxlm study sizes`, docs/study.md).
 * Each size's study is computed as `mxlm study report` computes it; then, per recipe and size, with d_i the
 * paired differences (recipe run - baseline run of seed i) over the n seeds that pair:
 *
 *   mean = sum d_i / n,  sd = sqrt(sum (d_i - mean)^2 / (n - 1)),  se = sd / sqrt(n)
 *   t = mean / se,  p = P(|T| >= |t|) for Student's T with n - 1 degrees of freedom (mx_study_t_p)
 *
 * for the paired token overhead (d_i = ttt / the baseline's ttt - 1), the final validation loss and the
 * contrasts between two recipes (mx_study_recipe_vs); and the figure of the overhead against model size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/model.h"
#include "mxlm/study.h"
#include "mxlm/util.h"
#include "study/internal.h"

static const char* const k_default_contrasts[2] = {"mxfp4-fdw-h16:mxfp4-fdw-rh16", "mxfp4-fdw-h32:mxfp4-fdw-h16"};

/* ---- loading ------------------------------------------------------------------------------- */

static int n_finished(const mx_study* s) {
    int n = 0;
    for (int i = 0; i < s->n_runs; i++) n += study_status_finished(s->runs[i].status);
    return n;
}

/* Load and compute one size: 0, or an error code with the reason in e->note (the study freed). */
static int load_size(mx_sizes_entry* e, const char* baseline) {
    mx_study* s = &e->study;
    int rc = mx_study_load(e->dir, s);
    if (!rc && !n_finished(s)) rc = mx_fail(MX_EINVAL, "no finished run (%d started)", s->n_runs);
    if (!rc) {
        mx_study_opts o;
        char recorded[256];
        mx_study_opts_from(s, &o, recorded, sizeof recorded, baseline, 0, 0, NULL);
        rc = mx_study_compute(s, &o);
    }
    if (rc) {
        snprintf(e->note, sizeof e->note, "%s", mx_last_error());
        mx_study_free(s);
        return rc;
    }
    mx_model_config m;
    study_run_model(&s->runs[0], &m);
    e->params = mx_model_n_params_nonembed(&m);
    e->loaded = 1;
    return MX_OK;
}

/* Every loaded size has the same baseline: 0 (z->baseline set), or an error naming two that differ. */
static int same_baseline(mx_sizes* z) {
    const mx_sizes_entry* first = NULL;
    for (int i = 0; i < z->n_sizes; i++) {
        const mx_sizes_entry* e = &z->sizes[i];
        if (!e->loaded) continue;
        if (!first) first = e;
        else if (strcmp(e->study.baseline, first->study.baseline))
            return mx_fail(MX_EINVAL, "study sizes: the sizes' baselines differ (%s: %s, %s: %s); give --baseline",
                           first->label, first->study.baseline, e->label, e->study.baseline);
    }
    snprintf(z->baseline, sizeof z->baseline, "%s", first->study.baseline);
    return MX_OK;
}

int mx_sizes_load(mx_sizes* z, const char* const* labels, const char* const* dirs, int n, const char* baseline,
                  int allow_missing) {
    memset(z, 0, sizeof *z);
    if (n < 1) return mx_fail(MX_EINVAL, "study sizes: no size given");
    if (!(z->sizes = calloc((size_t)n, sizeof *z->sizes))) return mx_fail(MX_ENOMEM, "study sizes: out of memory");
    z->n_sizes = n;
    int rc = MX_OK;
    for (int i = 0; i < n && !rc; i++) {
        mx_sizes_entry* e = &z->sizes[i];
        if (strlen(labels[i]) >= sizeof e->label || mx_pathf(e->dir, sizeof e->dir, "%s", dirs[i])) {
            rc = mx_fail(MX_EINVAL, "study sizes: %.64s: a label of at most %zu bytes and a path of at most %zu",
                         labels[i], sizeof e->label - 1, sizeof e->dir - 1);
            break;
        }
        snprintf(e->label, sizeof e->label, "%s", labels[i]);
        rc = load_size(e, baseline);
        if (rc && rc != MX_ENOMEM && allow_missing) rc = MX_OK; /* skipped: its note says why */
        else if (rc) rc = mx_fail(rc, "study sizes: %s (%s): %s", e->label, e->dir, e->note);
        z->n_loaded += e->loaded;
    }
    if (!rc && !z->n_loaded) rc = mx_fail(MX_EINVAL, "study sizes: none of the %d sizes has a study to report", n);
    if (!rc) rc = same_baseline(z);
    if (rc) mx_sizes_free(z);
    return rc;
}

void mx_sizes_free(mx_sizes* z) {
    for (int i = 0; i < z->n_sizes; i++) mx_study_free(&z->sizes[i].study);
    free(z->sizes);
    memset(z, 0, sizeof *z);
}

/* ---- Markdown ------------------------------------------------------------------------------ */

/* The distinct seeds of a study's runs, ascending: "1,2,3". */
static void seed_list(mx_sbuf* b, const mx_study* s) {
    uint64_t prev = 0;
    for (int any = 0;; any = 1) {
        int found = 0;
        uint64_t next = 0;
        for (int i = 0; i < s->n_runs; i++) {
            const uint64_t v = s->runs[i].seed;
            if ((!any || v > prev) && (!found || v < next)) next = v, found = 1;
        }
        if (!found) return;
        mx_sb_printf(b, "%s%llu", any ? "," : "", (unsigned long long)next);
        prev = next;
    }
}

/* The distinct `machine = ` lines of a study's study.txt, separated by "; ". */
static void machine_list(mx_sbuf* b, const mx_study* s) {
    int n = 0;
    for (const char* p = s->study_txt; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const size_t l = strcspn(p, "\n");
        if (strncmp(p, "machine = ", 10) || study_line_seen(s->study_txt, p, l)) continue;
        mx_sb_printf(b, "%s%.*s", n++ ? "; " : "", (int)l - 10, p + 10);
    }
    if (!n) mx_sb_printf(b, "not recorded");
}

/* A size's setup line: its model (the first run's, as the report's Model line), tokens, seeds, machines. */
static void setup_line(mx_sbuf* b, const mx_sizes_entry* e) {
    mx_sb_printf(b, "- **%s** (`%s`): ", e->label, e->dir);
    if (!e->loaded) { mx_sb_printf(b, "skipped (--allow-missing): %s.\n", e->note); return; }
    const mx_study* s = &e->study;
    const mx_study_run* r = &s->runs[0];
    mx_model_config m;
    study_run_model(r, &m);
    char d[512];
    mx_model_config_describe(&m, d, sizeof d);
    mx_sb_printf(b, "%s; %lld parameters without the embedding and head (%lld in all); %lld tokens per run (%lld "
                    "steps x %lld tokens); seeds ", d, (long long)e->params, (long long)mx_model_n_params(&m),
                 (long long)r->budget_tokens, (long long)r->steps, (long long)r->tokens_per_step);
    seed_list(b, s);
    mx_sb_printf(b, " (%d runs, %d recipes); machine: ", s->n_runs, s->n_recipes);
    machine_list(b, s);
    if (s->warning[0]) mx_sb_printf(b, "; warning: %s", s->warning);
    mx_sb_printf(b, ".\n");
}

int mx_sizes_ran(const mx_sizes* z, const char* r) {
    for (int i = 0; i < z->n_sizes; i++)
        for (int k = 0; k < z->sizes[i].study.n_recipes; k++)
            if (!strcmp(z->sizes[i].study.recipes[k].recipe, r)) return 1;
    return 0;
}

/* The rows: z->only's recipes that some size ran, in its order, where it is set; else the recipes of the loaded
 * sizes, in the order they first appear; never the baseline (*names[] point into the studies or z->only,
 * malloc'ed): their number, -1 when out of memory. */
static int recipe_union(const mx_sizes* z, const char*** names) {
    int cap = 1 + z->n_only, n = 0;
    for (int i = 0; i < z->n_sizes; i++) cap += z->sizes[i].study.n_recipes;
    const char** v = malloc(sizeof(char*) * (size_t)cap);
    if (!v) return -1;
    for (int j = 0; j < z->n_only; j++)
        if (strcmp(z->only[j], z->baseline) && mx_sizes_ran(z, z->only[j])) v[n++] = z->only[j];
    for (int i = 0; i < z->n_sizes && !z->n_only; i++)
        for (int k = 0; k < z->sizes[i].study.n_recipes; k++) {
            const char* name = z->sizes[i].study.recipes[k].recipe;
            int seen = !strcmp(name, z->baseline);
            for (int j = 0; j < n && !seen; j++) seen = !strcmp(v[j], name);
            if (!seen) v[n++] = name;
        }
    *names = v;
    return n;
}

/* A table's header: `first`, then a column per loaded size. */
static void table_head(mx_sbuf* b, const mx_sizes* z, const char* first) {
    mx_sb_printf(b, "| %s |", first);
    for (int i = 0; i < z->n_sizes; i++)
        if (z->sizes[i].loaded) mx_sb_printf(b, " %s |", z->sizes[i].label);
    mx_sb_printf(b, "\n|---|");
    for (int i = 0; i < z->n_sizes; i++)
        if (z->sizes[i].loaded) mx_sb_printf(b, "---|");
    mx_sb_printf(b, "\n");
}

/* Paired loss differences (n >= 1): "mean ± sd (se, n); p P", p the two-sided paired t-test ("p -": n < 2). */
static void stat_p_cell(char* b, size_t n, const mx_study_stat* st) {
    char c[160], pv[16] = "-";
    const double p = study_t_p(st, NULL);
    if (isfinite(p)) snprintf(pv, sizeof pv, "%.3f", p);
    snprintf(b, n, "%s; p %s", study_stat_cell(c, sizeof c, st, "%+.4f", 1, ""), pv);
}

/* A loss cell: the recipe's final validation loss - the baseline's by seed with p, or "no paired seed". */
static void loss_cell(const mx_study_recipe* R, const char* B, char* b, size_t n) {
    if (R->d_final.n) stat_p_cell(b, n, &R->d_final);
    else snprintf(b, n, "no paired seed");
}

/* A table's header and rows: a row per recipe names[r], a column per loaded size, the cell cell(R) where the size
 * has the recipe, else "-". */
static void recipe_table(mx_sbuf* b, const mx_sizes* z, const char* const* names, int nn,
                         void (*cell)(const mx_study_recipe* R, const char* B, char* b, size_t n)) {
    table_head(b, z, "recipe");
    for (int r = 0; r < nn; r++) {
        mx_sb_printf(b, "| %s |", names[r]);
        for (int i = 0; i < z->n_sizes; i++) {
            if (!z->sizes[i].loaded) continue;
            const mx_study_recipe* R = study_find_recipe(&z->sizes[i].study, names[r]);
            char c[256] = "-";
            if (R) cell(R, z->baseline, c, sizeof c);
            mx_sb_printf(b, " %s |", c);
        }
        mx_sb_printf(b, "\n");
    }
}

/* The two tables vs the baseline: the paired token overhead, and the final validation loss with p. */
static void baseline_tables(mx_sbuf* b, const mx_sizes* z, const char* const* names, int nn) {
    const char* B = z->baseline;
    mx_sb_printf(b, "\n## Paired token overhead vs %s\n\n"
                    "Per seed, tokens-to-target / %s's of the same seed - 1 (each size its own target); mean ± sd "
                    "(se, n pairs) over the seeds where both reached the target; seeds that did not converge are "
                    "counted, not averaged; \"-\": not run at that size.\n\n", B, B);
    recipe_table(b, z, names, nn, study_paired_cell);
    mx_sb_printf(b, "\n## Final validation loss - %s (paired by seed)\n\n"
                    "Per seed, the recipe's validation loss at %s's last evaluation minus %s's, over the seeds where "
                    "both finished without diverging (reached the target or not); mean ± sd (se, n) and p, the "
                    "two-sided paired t-test.\n\n", B, B, B);
    recipe_table(b, z, names, nn, loss_cell);
}

/* Does some loaded size have both recipe a and recipe b? */
static int have_both(const mx_sizes* z, const char* a, const char* b) {
    for (int i = 0; i < z->n_sizes; i++)
        if (z->sizes[i].loaded && study_find_recipe(&z->sizes[i].study, a) && study_find_recipe(&z->sizes[i].study, b))
            return 1;
    return 0;
}

/* spec "A:B" into a and b[n]: at the first ':' whose two sides are recipes of one loaded size, else at the first
 * ':' with a non-empty side each. 0, or -1 when there is none. */
static int contrast_split(const mx_sizes* z, const char* spec, char* a, char* b, size_t n) {
    int first = -1;
    for (const char* c = strchr(spec, ':'); c; c = strchr(c + 1, ':')) {
        const size_t la = (size_t)(c - spec);
        if (!la || !c[1] || la >= n || strlen(c + 1) >= n) continue;
        if (first < 0) first = (int)la;
        snprintf(a, n, "%.*s", (int)la, spec);
        snprintf(b, n, "%s", c + 1);
        if (have_both(z, a, b)) return 0;
    }
    if (first < 0) return -1;
    snprintf(a, n, "%.*s", first, spec);
    snprintf(b, n, "%s", spec + first + 1);
    return 0;
}

/* One contrast's row into rows (a cell per size: A - B by seed, "-" where the size lacks either recipe): 1, or 0
 * when no size has both. d: room for any study's runs. */
static int contrast_row(mx_sbuf* rows, const mx_sizes* z, const char* a, const char* r, double* d, int max_d) {
    if (!have_both(z, a, r)) return 0;
    mx_sb_printf(rows, "| %s - %s |", a, r);
    for (int i = 0; i < z->n_sizes; i++) {
        const mx_study* s = &z->sizes[i].study;
        if (!z->sizes[i].loaded) continue;
        char cell[256] = "-";
        mx_study_stat st;
        if (study_find_recipe(s, a) && study_find_recipe(s, r)) {
            if (mx_study_recipe_vs(s, a, r, d, NULL, max_d, &st)) stat_p_cell(cell, sizeof cell, &st);
            else snprintf(cell, sizeof cell, "no common seed");
        }
        mx_sb_printf(rows, " %s |", cell);
    }
    mx_sb_printf(rows, "\n");
    return 1;
}

/* The contrasts: per "A:B" and size, A's final loss - B's by seed (given ones that no size has: a note). */
static int contrast_section(mx_sbuf* b, const mx_sizes* z, const char* const* specs, int nc) {
    const int given = specs != NULL;
    if (!given) specs = k_default_contrasts, nc = 2;
    int max_d = 1;
    for (int i = 0; i < z->n_sizes; i++) max_d = z->sizes[i].study.n_runs > max_d ? z->sizes[i].study.n_runs : max_d;
    double* d = malloc(sizeof(double) * (size_t)max_d);
    if (!d) return -1;
    mx_sbuf rows = {0}, absent = {0};
    int nrows = 0, nabsent = 0;
    for (int c = 0; c < nc; c++) {
        char a[256], r[256];
        if (!contrast_split(z, specs[c], a, r, sizeof a) && contrast_row(&rows, z, a, r, d, max_d)) nrows++;
        else if (given) mx_sb_printf(&absent, "%s%s", nabsent++ ? ", " : "", specs[c]);
    }
    free(d);
    mx_sb_printf(b, "\n## Recipe against recipe (paired by seed)\n\n");
    if (nrows) {
        mx_sb_printf(b, "Per seed, the first recipe's validation loss minus the second's at their common budget, over "
                        "the seeds where both finished without diverging; mean ± sd (se, n) and p, the two-sided "
                        "paired t-test; \"-\": the size lacks either recipe.\n\n");
        table_head(b, z, "recipe - recipe");
        mx_sb_printf(b, "%s", rows.s ? rows.s : "");
    } else mx_sb_printf(b, "No size has both recipes of a contrast.\n");
    if (nabsent) mx_sb_printf(b, "\nNot at any size: %s.\n", absent.s ? absent.s : "");
    const int oom = rows.oom || absent.oom;
    free(rows.s);
    free(absent.s);
    return oom ? -1 : 0;
}

static void definitions(mx_sbuf* b, const char* B) {
    mx_sb_printf(b, "\n## Definitions\n\n"
                    "Each size is its own study, computed as `mxlm study report DIR` computes it with the defaults "
                    "(docs/study.md): its own target loss per seed (%s's validation loss at the first evaluation at "
                    "or after 80%% of its budget), did not converge beyond 2x %s's budget. Pairing by seed: a "
                    "recipe's run and %s's run of the same seed share the initial weights and the data order, so each "
                    "difference is taken within a seed, then summarized over the n seeds that pair: the mean, the "
                    "standard deviation sd with n - 1 in the denominator, the standard error se = sd / sqrt(n). p is "
                    "two-sided, from Student's t with n - 1 degrees of freedom, t = mean / se (\"p -\" where n < 2); "
                    "with n = 3, 2 se is p = 0.18 and p = 0.05 takes 4.3 se.\n", B, B, B);
}

char* mx_sizes_markdown(const mx_sizes* z, const char* const* contrasts, int nc) {
    const char** names = NULL;
    const int nn = recipe_union(z, &names);
    if (nn < 0) return NULL;
    mx_sbuf b = {0};
    mx_sb_printf(&b, "# Precision across model sizes (baseline %s)\n\n## Setup\n\n", z->baseline);
    for (int i = 0; i < z->n_sizes; i++) setup_line(&b, &z->sizes[i]);
    baseline_tables(&b, z, names, nn);
    if (contrast_section(&b, z, contrasts, nc)) b.oom = 1;
    definitions(&b, z->baseline);
    free(names);
    return study_sb_take(&b);
}

/* ---- the figure ------------------------------------------------------------------------------ */

/* The loaded sizes with a parameter count into idx[], fewest parameters first (ties in the order given). */
static int sizes_by_params(const mx_sizes* z, int* idx) {
    int n = 0;
    for (int i = 0; i < z->n_sizes; i++) {
        if (!z->sizes[i].loaded || z->sizes[i].params <= 0) continue;
        int j = n++;
        for (; j > 0 && z->sizes[idx[j - 1]].params > z->sizes[i].params; j--) idx[j] = idx[j - 1];
        idx[j] = i;
    }
    return n;
}

/* A recipe at a size: 1, a point (*y and *se in %, se NaN for one pair; *partial: some seeds did not converge);
 * 2, did not converge (no pair, k seeds that did not); 0, nothing to draw (not run there, no pair). */
static int point_of(const mx_sizes_entry* e, const char* name, double* y, double* se, int* partial) {
    const mx_study_recipe* R = study_find_recipe(&e->study, name);
    if (!R) return 0;
    if (R->n_pairs && isfinite(R->p_overhead.mean)) {
        *y = 100 * R->p_overhead.mean;
        *se = 100 * R->p_overhead.se;
        *partial = R->n_dnc > 0;
        return 1;
    }
    return R->n_dnc ? 2 : 0;
}

/* The frame's ranges: x log10 of the parameters, padded; y every mean ± se and 0, padded, and room at the top
 * for the did-not-converge marks (14 px a recipe). */
static void sizes_range(const mx_sizes* z, const int* idx, int ns, const char* const* names, int nn, mx_svg_frame* f) {
    double lo = 0, hi = 0;
    int most_dnc = 0;
    for (int q = 0; q < ns; q++) {
        int dnc = 0;
        for (int r = 0; r < nn; r++) {
            double y, se;
            int partial, kind = point_of(&z->sizes[idx[q]], names[r], &y, &se, &partial);
            dnc += kind == 2;
            if (kind != 1) continue;
            const double e = isfinite(se) ? se : 0;
            lo = fmin(lo, y - e);
            hi = fmax(hi, y + e);
        }
        most_dnc = dnc > most_dnc ? dnc : most_dnc;
    }
    if (most_dnc > 20) most_dnc = 20;
    const double pad = hi > lo ? 0.08 * (hi - lo) : 1, span = hi - lo + 2 * pad;
    const double room = most_dnc ? 14.0 * most_dnc + 6 : 0;
    f->y0 = lo - pad;
    f->y1 = hi + pad + span * room / (f->H - room);
    f->x0 = log10((double)z->sizes[idx[0]].params);
    f->x1 = log10((double)z->sizes[idx[ns - 1]].params);
    const double xpad = f->x1 > f->x0 ? 0.12 * (f->x1 - f->x0) : 0.25;
    f->x0 -= xpad;
    f->x1 += xpad;
}

/* Recipe k of nn drawn this many pixels right of its size's x, so that the recipes' bars at a size stand apart. */
static double dodge(int k, int nn) {
    const double step = nn > 15 ? 60.0 / nn : 4.0;
    return (k - (nn - 1) / 2.0) * step;
}

/* A recipe's lines: through its points in size order, broken where it did not converge. */
static void recipe_lines(mx_sbuf* b, const mx_svg_frame* f, const mx_sizes* z, const int* idx, int ns,
                         const char* name, int k, int nn) {
    mx_sbuf pts = {0};
    int n = 0;
    for (int q = 0; q <= ns; q++) {
        double y, se;
        int partial, kind = q < ns ? point_of(&z->sizes[idx[q]], name, &y, &se, &partial) : 2;
        if (kind == 1) {
            const double X = mx_svg_x(f, log10((double)z->sizes[idx[q]].params)) + dodge(k, nn);
            mx_sb_printf(&pts, "%.1f,%.1f ", X, mx_svg_y(f, y));
            n++;
        }
        if (kind != 2) continue;
        if (n >= 2)
            mx_sb_printf(b, "<polyline clip-path=\"url(#c0)\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s "
                            "points=\"%s\"/>\n", mx_svg_color(k), k >= 10 ? " stroke-dasharray=\"4,2\"" : "",
                         pts.s ? pts.s : "");
        free(pts.s);
        memset(&pts, 0, sizeof pts);
        n = 0;
    }
}

/* A recipe's marks: per size a marker with its ± 1 se bar (hollow where some seeds did not converge), or an x at
 * the top where none converged (the slot'th of that size's, dnc[q] counting them). */
static void recipe_marks(mx_sbuf* b, const mx_svg_frame* f, const mx_sizes* z, const int* idx, int ns,
                         const char* name, int k, int nn, int* dnc) {
    const char* col = mx_svg_color(k);
    for (int q = 0; q < ns; q++) {
        const mx_sizes_entry* e = &z->sizes[idx[q]];
        double y, se;
        int partial, kind = point_of(e, name, &y, &se, &partial);
        if (!kind) continue;
        const double X = mx_svg_x(f, log10((double)e->params)) + dodge(k, nn);
        char cell[256];
        study_paired_cell(study_find_recipe(&e->study, name), z->baseline, cell, sizeof cell);
        if (kind == 2) {
            const double Y = f->T + 10 + 14 * dnc[q]++;
            mx_sb_printf(b, "<path d=\"M%.1f %.1fl8 8m0 -8l-8 8\" stroke=\"%s\" stroke-width=\"2\"><title>", X - 4, Y - 4,
                         col);
        } else {
            const double Y = mx_svg_y(f, y);
            if (isfinite(se)) {
                const double y0 = mx_svg_y(f, y - se), y1 = mx_svg_y(f, y + se);
                mx_sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", X, y0, X, y1, col);
                for (int c = 0; c < 2; c++)
                    mx_sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", X - 4,
                                 c ? y1 : y0, X + 4, c ? y1 : y0, col);
            }
            mx_sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\">"
                            "<title>", X, Y, partial ? "#fff" : col, col);
        }
        mx_svg_text(b, name);
        mx_sb_printf(b, " at %s: ", e->label);
        mx_svg_text(b, cell);
        mx_sb_printf(b, "</title></%s>\n", kind == 2 ? "path" : "circle");
    }
}

/* s XML-escaped (malloc'ed; NULL: out of memory). */
static char* xml_escaped(const char* s) {
    mx_sbuf e = {0};
    mx_svg_text(&e, s);
    return study_sb_take(&e);
}

/* The legend right of the plot: a line per recipe, then what the marks mean. */
static void sizes_legend(mx_sbuf* b, const mx_svg_frame* f, const char* const* names, int nn) {
    const int lx = f->L + f->W + 15, ly = f->T + 5;
    for (int k = 0; k < nn; k++) {
        mx_sb_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"%s/><text x=\"%d\" "
                        "y=\"%d\">", lx, ly + 18 * k, lx + 20, ly + 18 * k, mx_svg_color(k),
                     k >= 10 ? " stroke-dasharray=\"4,2\"" : "", lx + 26, ly + 18 * k + 4);
        mx_svg_text(b, names[k]);
        mx_sb_printf(b, "</text>\n");
    }
    static const char* notes[4] = {"dot: mean over the paired seeds", "bar: 1 standard error",
                                   "hollow: some seeds did not converge", "x at the top: no seed converged"};
    for (int i = 0; i < 4; i++) mx_sb_printf(b, "<text x=\"%d\" y=\"%d\">%s</text>\n", lx, ly + 18 * (nn + i) + 4, notes[i]);
}

char* mx_sizes_svg(const mx_sizes* z) {
    const char** names = NULL;
    const int nn = recipe_union(z, &names);
    int* idx = malloc(sizeof(int) * (size_t)(z->n_sizes + 1));
    int* dnc = calloc((size_t)(z->n_sizes + 1), sizeof(int));
    const int ns = idx ? sizes_by_params(z, idx) : 0;
    if (nn < 0 || !idx || !dnc) { free(names); free(idx); free(dnc); return NULL; }
    mx_svg_frame f = {0, 1, -1, 1, 80, 40, 540, 380};
    if (ns) sizes_range(z, idx, ns, names, nn, &f);
    const int legend_h = 18 * (nn + 4) + 20;
    mx_sbuf b = {0};
    mx_svg_begin(&b, 900, f.T + (legend_h > f.H ? legend_h : f.H) + 50);
    double ticks[256]; /* the sizes' ticks: "60m (62.9M)" */
    char tl[256][96];
    const char* tlp[256];
    int nt = 0;
    for (; nt < ns && nt < 256; nt++) {
        const mx_sizes_entry* e = &z->sizes[idx[nt]];
        const double p = (double)e->params, u = pow(10, floor(log10(p)) - 2); /* 3 significant digits */
        char pn[32];
        ticks[nt] = log10(p);
        snprintf(tl[nt], sizeof tl[nt], "%s (%s)", e->label, study_short_num(pn, sizeof pn, round(p / u) * u));
        tlp[nt] = tl[nt];
    }
    char text[512];
    snprintf(text, sizeof text, "paired token overhead vs %s (%%)", z->baseline);
    char* ylabel = xml_escaped(text);
    snprintf(text, sizeof text, "Paired token overhead vs %s against model size (mean and 1 se over seeds)",
             z->baseline);
    char* title = xml_escaped(text);
    mx_svg_axes_xticks(&b, &f, "non-embedding parameters (log scale)", ylabel ? ylabel : "", title ? title : "", 0,
                       ticks, tlp, nt);
    free(ylabel);
    free(title);
    mx_sb_printf(&b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#000\" stroke-dasharray=\"6,4\"/>\n",
                 f.L, mx_svg_y(&f, 0), f.L + f.W, mx_svg_y(&f, 0));
    for (int k = 0; k < nn; k++) recipe_lines(&b, &f, z, idx, ns, names[k], k, nn);
    for (int k = 0; k < nn; k++) recipe_marks(&b, &f, z, idx, ns, names[k], k, nn, dnc);
    sizes_legend(&b, &f, names, nn);
    mx_sb_printf(&b, "</svg>\n");
    free(names);
    free(idx);
    free(dnc);
    return study_sb_take(&b);
}
