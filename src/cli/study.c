/* study.c: ./mxlm study - run a set of recipes x seeds with `mxlm train` (this
 * same binary, as child processes: src/study/scheduler.c) and report the paper's
 * measurements from the run directories (src/study/, docs/study.md). This file
 * parses and checks the command line. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "mxlm/recipe.h"
#include "mxlm/study.h"
#include "mxlm/util.h"

/* The longest --out of a study: its run folders (--out/NAME, NAME up to 300 bytes) and their files fit. */
#define MX_STUDY_OUT_MAX 800

static const char* k_run_usage =
    "run --out DIR --recipes R1,R2,... [--recipe R ...] [--seeds 1,2] [report options] [mxlm train options...]\n"
    "  Runs `mxlm train` once per recipe and seed into DIR/<recipe>-s<seed>/ (its output in train.log there),\n"
    "  one after the other; a finished run is skipped, an interrupted one continued with --resume. Every\n"
    "  option that is not the study's own is passed to mxlm train as it is (--preset, --steps, --train, --val,\n"
    "  --batch, --seq, --eval-every, --device, ...). Then writes DIR/results.md, DIR/loss.svg, DIR/telemetry.svg.\n"
    "  --recipes LIST   recipes separated by commas      --recipe R     one more recipe, as it is (may hold commas)\n"
    "  --seeds LIST     seeds separated by commas (default 1)\n"
    "  --machine TEXT   the hardware, for the report (default: the CPU model and core count)\n"
    "  --dry-run        print the train commands and exit\n"
    "  --extend         then train on every run of these recipes and seeds that ended before the did-not-converge\n"
    "                   limit (budget-factor x the baseline's tokens) without reaching its target, to that limit\n"
    "                   (--resume from its last checkpoint, else from step 0 with its schedule, the old directory\n"
    "                   kept as DIR/<run>.short); steps past the run's own schedule at its floor learning rate\n"
    "  --parallel N     N runs at a time, one per GPU (run i sees CUDA_VISIBLE_DEVICES=i, or the i-th entry of\n"
    "                   the study's own CUDA_VISIBLE_DEVICES); each run gets --threads T/N (T: --threads, else\n"
    "                   the cores); on the CPU build that is N concurrent CPU runs (default 1)\n"
    "  report options: --baseline R (default fp8; recorded in DIR/study.txt for the report), --target X,\n"
    "  --target-rule seed|pooled, --budget-factor F (see mxlm study report --help)";
static const char* k_report_usage =
    "report DIR [--baseline fp8] [--target X] [--target-rule seed|pooled] [--budget-factor 2]\n"
    "  Re-renders DIR/results.md, DIR/paired.json, DIR/loss.svg and DIR/telemetry.svg from the run directories\n"
    "  in DIR, without training. Baseline: --baseline, else the last `baseline = ` of DIR/study.txt, else fp8.\n"
    "  Target: --target X, or the baseline's validation loss at the first evaluation at or after 80% of its\n"
    "  token budget: per seed (default: a run's target is its seed's baseline run's; seeds without one take\n"
    "  the mean) or pooled (the mean over the baseline's seeds, for every run). Tokens-to-target: the loss\n"
    "  curve interpolated linearly between evaluations. A run did\n"
    "  not converge when it diverged or did not reach the target within budget-factor x the baseline's token\n"
    "  budget. Paired differences vs the baseline's run of the same seed: mean, sd, se. Definitions: docs/study.md.";

static const char* k_sizes_usage =
    "sizes [--out FILE.md] [--svg FILE.svg] [--baseline R] [--recipes R1,R2,...] [--contrast A:B ...] [--allow-missing]\n"
    "      LABEL=DIR ...\n"
    "  One study per model size, side by side: each DIR a study folder (mxlm study run), LABEL the size's name\n"
    "  (e.g. 60m=runs/study60m), each computed as `mxlm study report DIR` computes it (nothing written into DIR).\n"
    "  Markdown to --out (else standard output): a setup line per size; per recipe (rows) and size (columns) the\n"
    "  paired token overhead vs the baseline, and the final validation loss - the baseline's with p (two-sided\n"
    "  paired t-test); per contrast A:B (--contrast, repeatable; default mxfp4-fdw-h16:mxfp4-fdw-rh16 and\n"
    "  mxfp4-fdw-h32:mxfp4-fdw-h16) A's final loss - B's by seed. --svg: the paired overhead against the\n"
    "  non-embedding parameters (log scale). --baseline R: every size's baseline (default: the one each study.txt\n"
    "  records, else fp8; the sizes' must agree). --allow-missing: a DIR that is missing, has no finished run or\n"
    "  no target yet is skipped with a note (default: an error, exit 1). --recipes: the rows and the figure's lines,\n"
    "  these recipes in this order (each run by some size; default: every recipe but the baseline). Definitions:\n"
    "  docs/study.md.";

/* A fraction as a percentage rounded to 0.1, without a negative zero. */
static double pct1(double x) {
    double v = round(x * 1000.0) / 10.0;
    return v == 0 ? 0.0 : v;
}

static int render(const char* dir, const char* baseline, double target, double factor, const char* rule) {
    mx_study s;
    if (mx_study_load(dir, &s)) { fprintf(stderr, "mxlm study: %s\n", mx_last_error()); return 1; }
    mx_study_opts o;
    char recorded[256];
    mx_study_opts_from(&s, &o, recorded, sizeof recorded, baseline, target, factor, rule);
    int rc = mx_study_compute(&s, &o);
    if (rc && s.n_runs && !isfinite(s.target)) { /* no target (no baseline run yet): what there is, then the error */
        printf("study: %d runs, no target loss yet; where each run is:\n", s.n_runs);
        for (int i = 0; i < s.n_runs; i++) {
            const mx_study_run* r = &s.runs[i];
            printf("  %-28s %-10s step %lld, %lld tokens", r->name, r->status[0] ? r->status : "unfinished",
                   (long long)r->last_step, (long long)r->last_tokens);
            if (r->n_evals) printf(", val loss %.4f at %lld tokens", r->evals[r->n_evals - 1].val_loss,
                                   (long long)r->evals[r->n_evals - 1].tokens);
            printf("\n");
        }
    }
    if (!rc) rc = mx_study_write_report(&s);
    if (rc) { fprintf(stderr, "mxlm study: %s\n", mx_last_error()); mx_study_free(&s); return 1; }
    printf("study: %d runs, %d recipes; target loss %.6g (%s)\n", s.n_runs, s.n_recipes, s.target, s.target_rule);
    for (int k = 0; k < s.n_recipes; k++) {
        const mx_study_recipe* R = &s.recipes[k];
        printf("  %-24s reached %d/%d", R->recipe, R->n_reached, R->n_runs);
        if (R->n_reached && isfinite(R->overhead))
            printf("  overhead %+.1f%% (%+.1f%%..%+.1f%%)", pct1(R->overhead), pct1(R->overhead_min),
                   pct1(R->overhead_max));
        else if (R->n_finished && !R->n_reached) printf("  did not converge");
        if (R->n_pairs >= 2)
            printf("  paired %+.1f%% +- %.1f%% (se %.1f%%, n %d)%s", pct1(R->p_overhead.mean), pct1(R->p_overhead.sd),
                   pct1(R->p_overhead.se), R->n_pairs, mx_study_stat_beyond_2se(&R->p_overhead) ? " beyond 2 se" : "");
        else if (R->n_pairs == 1) printf("  paired %+.1f%% (n 1)", pct1(R->p_overhead.mean));
        if (isfinite(R->tok_per_s)) printf("  %.0f tok/s", R->tok_per_s);
        if (isfinite(R->vs_baseline)) printf(" (%.3fx)", R->vs_baseline);
        if (isfinite(R->end_to_end)) printf("  end-to-end %.3fx", R->end_to_end);
        printf("\n");
    }
    char tp[1200];
    if (mx_pathf(tp, sizeof tp, "%s/telemetry.svg", dir)) tp[0] = 0;
    printf("wrote %s/results.md, %s/paired.json, %s/loss.svg%s%s\n", dir, dir, dir, access(tp, F_OK) == 0 ? ", " : "",
           access(tp, F_OK) == 0 ? tp : "");
    mx_study_free(&s);
    return 0;
}

static int cmd_report(int argc, char** argv) {
    const char *baseline = NULL, *rule = NULL;
    double target = 0, factor = 0;
    const cli_opt opts[] = {
        {"baseline", OPT_STR, &baseline, "the baseline recipe (default fp8)"},
        {"target", OPT_DOUBLE, &target, "target validation loss (default: the baseline's at 80% of its budget)"},
        {"budget-factor", OPT_DOUBLE, &factor, "did not converge beyond this x the baseline's tokens (default 2)"},
        {"target-rule", OPT_STR, &rule, "seed (each seed its baseline run's target; default) or pooled (their mean)"},
    };
    char* pos[64];
    int npos = 0;
    int rc = cli_parse(argc, argv, "study", k_report_usage, opts, 4, pos, &npos);
    if (rc) return rc == 1 ? 0 : rc;
    if (npos != 1) { fprintf(stderr, "mxlm study report: give one study directory\n"); return 2; }
    if (rule && mx_study_parse_rule(rule) < 0) {
        fprintf(stderr, "mxlm study report: --target-rule: '%s' is not seed or pooled\n", rule);
        return 2;
    }
    return render(pos[0], baseline, target, factor, rule);
}

/* ---- study run ---------------------------------------------------------------------- */

/* argv[*i] is --name VALUE or --name=VALUE: the value (advancing *i), else NULL. */
static const char* own_opt(int argc, char** argv, int* i, const char* name, int* missing) {
    const char* a = argv[*i];
    size_t l = strlen(name);
    if (strncmp(a, "--", 2) || strncmp(a + 2, name, l)) return NULL;
    if (a[2 + l] == '=') return a + 3 + l;
    if (a[2 + l]) return NULL;
    if (*i + 1 >= argc) { *missing = 1; return NULL; }
    return argv[++*i];
}

/* A positive number: 0, else 1 (not one). */
static int pos_number(const char* v, double* out) {
    char* end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end || !(x > 0) || !isfinite(x)) return 1;
    *out = x;
    return 0;
}

static int split_list(char* s, char** out, int max) {
    int n = 0;
    for (char* t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = t;
    return n;
}

/* The comma-separated entries of an option's value (--recipes, --seeds): -1 for an empty entry (",a",
 * "a,,b", "a,") or more than max entries. */
static int split_strict(char* s, char** out, int max) {
    int n = 0;
    for (char* t = s;;) {
        char* c = strchr(t, ',');
        if (c) *c = 0;
        if (!*t || n == max) return -1;
        out[n++] = t;
        if (!c) return n;
        t = c + 1;
    }
}

static int cmd_run(int argc, char** argv) {
    const char *out = NULL, *baseline = NULL, *machine = NULL, *seeds_s = "1";
    const char *parallel_s = NULL, *threads_s = NULL;
    double target = 0, factor = 0;
    const char* rule = NULL;
    int dry = 0, extend = 0, n_rec = 0, n_pass = 0, gpus_opt = 0;
    char* recipes[256];
    char** pass = calloc((size_t)argc + 16, sizeof(char*)); /* the train options, then ours */
    if (!pass) return 1;
    char* lists[64];
    int n_lists = 0;
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v, *bad = NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: mxlm study %s\n", k_run_usage);
            free(pass);
            return 0;
        }
        if (!strcmp(argv[i], "--dry-run")) { dry = 1; continue; }
        if (!strcmp(argv[i], "--extend")) { extend = 1; continue; }
        if ((v = own_opt(argc, argv, &i, "out", &missing))) {
            out = v;
            if (cli_path_check("study run", "out", v)) { free(pass); return 2; }
        }
        else if ((v = own_opt(argc, argv, &i, "target-rule", &missing))) rule = v;
        else if ((v = own_opt(argc, argv, &i, "recipes", &missing))) { if (n_lists < 64) lists[n_lists++] = (char*)v; }
        else if ((v = own_opt(argc, argv, &i, "recipe", &missing))) { if (n_rec < 256) recipes[n_rec++] = (char*)v; }
        else if ((v = own_opt(argc, argv, &i, "seeds", &missing))) seeds_s = v;
        else if ((v = own_opt(argc, argv, &i, "baseline", &missing))) baseline = v;
        else if ((v = own_opt(argc, argv, &i, "machine", &missing))) machine = v;
        else if ((v = own_opt(argc, argv, &i, "parallel", &missing))) parallel_s = v;
        else if ((v = own_opt(argc, argv, &i, "threads", &missing))) { /* per run; see --parallel */
            threads_s = v;
            if (cli_common_set("study run", "threads", v)) { free(pass); return 2; } /* the shared check (cli.c) */
        }
        else if ((v = own_opt(argc, argv, &i, "target", &missing))) { if (pos_number(v, &target)) bad = "--target"; }
        else if ((v = own_opt(argc, argv, &i, "budget-factor", &missing))) {
            if (pos_number(v, &factor)) bad = "--budget-factor";
        }
        else if (!missing) {
            static const char* mine[] = {"--seed", "--out", "--resume", "--describe"};
            for (int k = 0; k < 4; k++) {
                size_t l = strlen(mine[k]);
                if (!strncmp(argv[i], mine[k], l) && (!argv[i][l] || argv[i][l] == '=')) {
                    fprintf(stderr, "mxlm study run: %s is set by the study (use --seeds, --out); not allowed\n",
                            mine[k]);
                    free(pass);
                    return 2;
                }
            }
            if (!strncmp(argv[i], "--gpus", 6) && (!argv[i][6] || argv[i][6] == '=')) {
                const char* g = argv[i][6] == '=' ? argv[i] + 7 : i + 1 < argc ? argv[i + 1] : "";
                gpus_opt = atoi(g) > 1;
            }
            pass[n_pass++] = argv[i];
        }
        if (missing) { fprintf(stderr, "mxlm study run: %s needs a value\n", argv[i]); free(pass); return 2; }
        if (bad) {
            fprintf(stderr, "mxlm study run: %s: '%s' is not a positive number\n", bad, v);
            free(pass);
            return 2;
        }
    }
    if (out && strlen(out) > MX_STUDY_OUT_MAX) { /* its runs' folders and logs must fit (issue 48, class 4) */
        fprintf(stderr, "mxlm study run: --out: a path of %zu bytes; a study folder takes at most %d\n", strlen(out),
                MX_STUDY_OUT_MAX);
        free(pass);
        return 2;
    }
    int list_bad = 0;
    for (int k = 0; k < n_lists; k++) { /* copies: split_strict writes into them */
        char* tmp[256];
        const char* given = lists[k];
        if (!(lists[k] = strdup(lists[k]))) { n_lists = k; break; }
        int m = split_strict(lists[k], tmp, 256);
        if (m < 0 || n_rec + m > 256) {
            if (!list_bad) fprintf(stderr, "mxlm study run: --recipes '%s': an empty entry, or more than 256 recipes\n", given);
            list_bad = 1;
            continue;
        }
        for (int j = 0; j < m; j++) recipes[n_rec++] = tmp[j];
    }
    uint64_t seeds[256];
    int n_seeds = 0;
    char* sl = strdup(seeds_s);
    char* sv[256];
    int ns = sl ? split_strict(sl, sv, 256) : 0;
    int rc = list_bad ? 2 : 0;
    if (!rc && ns < 0) {
        fprintf(stderr, "mxlm study run: --seeds '%s': an empty entry, or more than 256 seeds\n", seeds_s);
        rc = 2;
    }
    for (int k = 0; k < ns && !rc; k++) {
        char* end = NULL;
        errno = 0;
        unsigned long long x = strtoull(sv[k], &end, 10);
        if (errno || end == sv[k] || *end || sv[k][0] == '-') {
            fprintf(stderr, "mxlm study run: --seeds: '%s' is not a seed\n", sv[k]);
            rc = 2;
        }
        seeds[n_seeds++] = x;
    }
    if (!rc && !out) { fprintf(stderr, "mxlm study run: --out DIR is required\n"); rc = 2; }
    if (!rc && rule && mx_study_parse_rule(rule) < 0) {
        fprintf(stderr, "mxlm study run: --target-rule: '%s' is not seed or pooled\n", rule);
        rc = 2;
    }
    if (!rc && (!n_rec || !n_seeds)) { fprintf(stderr, "mxlm study run: give --recipes and --seeds\n"); rc = 2; }
    for (int k = 0; k < n_rec && !rc; k++) {
        mx_recipe r;
        if (mx_recipe_parse(recipes[k], &r)) { fprintf(stderr, "mxlm study run: %s\n", mx_last_error()); rc = 2; }
    }
    /* one run directory per recipe and seed: a recipe or seed given twice (or two recipes whose directory
     * names are the same) would run twice into one directory (at once, with --parallel) */
    for (int k = 0; k < n_rec && !rc; k++)
        for (int j = 0; j < k && !rc; j++) {
            char a[512], b[512];
            mx_study_run_name(recipes[k], 1, a, sizeof a);
            mx_study_run_name(recipes[j], 1, b, sizeof b);
            if (!strcmp(a, b)) {
                fprintf(stderr, "mxlm study run: recipes '%s' and '%s' share the run directory %s (a recipe given "
                                "twice?)\n", recipes[j], recipes[k], a);
                rc = 2;
            }
        }
    for (int k = 0; k < n_seeds && !rc; k++)
        for (int j = 0; j < k && !rc; j++)
            if (seeds[k] == seeds[j]) {
                fprintf(stderr, "mxlm study run: --seeds: seed %llu given twice\n", (unsigned long long)seeds[k]);
                rc = 2;
            }
    /* --parallel N: N runs at a time, one per GPU (CUDA_VISIBLE_DEVICES), each with 1/N of the CPU threads */
    int parallel = 1, threads = 0;
    char* cvd_list[256];
    int n_cvd = 0;
    char* cvd_copy = NULL;
    if (!rc && parallel_s) {
        char* end = NULL;
        long x = strtol(parallel_s, &end, 10);
        if (end == parallel_s || *end || x < 1 || x > 256) {
            fprintf(stderr, "mxlm study run: --parallel: '%s' is not a number of runs at a time (1..256)\n", parallel_s);
            rc = 2;
        } else parallel = (int)x;
    }
    threads = cli_threads(); /* checked as parsed */
    if (!rc && parallel > 1 && gpus_opt) {
        fprintf(stderr, "mxlm study run: --parallel runs one single-GPU run per GPU; it does not combine with --gpus\n");
        rc = 2;
    }
    const char* env_cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!rc && parallel > 1 && env_cvd && *env_cvd) { /* the study's own GPU list: slot i gets its i-th entry */
        cvd_copy = strdup(env_cvd);
        n_cvd = cvd_copy ? split_list(cvd_copy, cvd_list, 256) : 0;
        if (n_cvd < parallel) {
            fprintf(stderr, "mxlm study run: --parallel %d, but CUDA_VISIBLE_DEVICES=%s lists %d device%s\n", parallel,
                    env_cvd, n_cvd, n_cvd == 1 ? "" : "s");
            rc = 2;
        }
    }
    char thr_s[32] = "";
    if (parallel > 1) { /* every run a share of the threads (given with --threads, else the cores) */
        long cores = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
        long per = cores / parallel;
        snprintf(thr_s, sizeof thr_s, "%ld", per < 1 ? 1 : per);
    } else if (threads_s) snprintf(thr_s, sizeof thr_s, "%s", threads_s);
    mx_study_plan plan = {
        .out = out, .baseline = baseline ? baseline : "fp8", .machine = machine, .target = target, .factor = factor,
        .rule = rule, .dry = dry, .extend = extend, .recipes = recipes, .n_rec = n_rec, .seeds = seeds,
        .n_seeds = n_seeds, .pass = pass, .n_pass = n_pass, .parallel = parallel, .threads = thr_s,
        .cvd = cvd_list, .n_cvd = n_cvd, .argc = argc, .argv = argv, .out_f = stdout, .err_f = stderr,
    };
    int errors = 0, stopped = 0;
    if (!rc) rc = mx_study_schedule(&plan, &errors, &stopped);
    baseline = plan.baseline;
    free(cvd_copy);
    free(pass);
    free(sl);
    for (int k = 0; k < n_lists; k++) free(lists[k]);
    if (rc || dry) return rc;
    if (stopped) { fprintf(stderr, "mxlm study run: stopped; run the same command again to continue\n"); return 1; }
    int r2 = render(out, baseline, target, factor, rule);
    if (errors) fprintf(stderr, "mxlm study run: %d run%s failed (see above)\n", errors, errors > 1 ? "s" : "");
    return errors || r2 ? 1 : 0;
}

/* ---- study sizes ------------------------------------------------------------------------- */

#define MX_SIZES_MAX 64 /* sizes of one report */

/* A LABEL=DIR argument split into its two (a copy in buf; label: 1..63 bytes, no '|' or control characters, a
 * table's cell): 0, or 2 with a message. */
static int size_arg(const char* a, char* buf, size_t n, const char** label, const char** dir) {
    const char* eq = strchr(a, '=');
    snprintf(buf, n, "%s", a);
    if (!eq || eq == a || !eq[1] || (size_t)(eq - a) > 63) {
        fprintf(stderr, "mxlm study sizes: '%s': give LABEL=DIR (a label of 1..63 bytes and a study folder)\n", a);
        return 2;
    }
    for (const char* c = a; c < eq; c++)
        if (*c == '|' || (unsigned char)*c < 0x20) {
            fprintf(stderr, "mxlm study sizes: '%.*s': a label without '|' or control characters\n", (int)(eq - a), a);
            return 2;
        }
    buf[eq - a] = 0;
    *label = buf;
    *dir = buf + (eq - a) + 1;
    return cli_path_check("study sizes", NULL, *dir);
}

/* labels[n] is not one of labels[0..n): 0, else 2 with a message. */
static int label_new(const char* const* labels, int n) {
    for (int j = 0; j < n; j++)
        if (!strcmp(labels[j], labels[n])) {
            fprintf(stderr, "mxlm study sizes: the label %s given twice\n", labels[n]);
            return 2;
        }
    return 0;
}

/* --contrast A:B: a ':' with a recipe name on each side (0), else 2 with a message. */
static int contrast_arg(const char* v) {
    const char* c = strchr(v, ':');
    if (c && c != v && strrchr(v, ':')[1]) return 0;
    fprintf(stderr, "mxlm study sizes: --contrast '%s': give A:B, two recipes\n", v);
    return 2;
}

/* The sizes' report: Markdown to out (NULL: standard output), the figure to svg_path (NULL: none). 0 or 1. */
static int write_sizes(const mx_sizes* z, const char* out, const char* svg_path, const char* const* con, int nc) {
    char* md = mx_sizes_markdown(z, con, nc);
    char* svg = svg_path ? mx_sizes_svg(z) : NULL;
    int rc = !md || (svg_path && !svg);
    if (rc) fprintf(stderr, "mxlm study sizes: out of memory\n");
    /* both files staged before either is renamed: a destination that cannot be written leaves neither */
    mx_outfile of[2];
    const char* path[2] = {out, svg_path};
    const char* data[2] = {md, svg};
    int open_n = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        if (!path[k]) continue;
        if (mx_out_open(&of[k], path[k]) == MX_OK) {
            open_n |= 1 << k;
            mx_out_write(&of[k], data[k], strlen(data[k]));
            rc = mx_out_sync(&of[k], path[k]) != MX_OK;
        } else
            rc = 1;
    }
    for (int k = 0; k < 2; k++)
        if (open_n >> k & 1) {
            if (rc) mx_out_abort(&of[k]);
            else rc = mx_out_commit(&of[k], path[k]) != MX_OK;
        }
    if (rc && (out || svg_path)) fprintf(stderr, "mxlm study sizes: %s (nothing written)\n", mx_last_error());
    if (!rc && !out) fputs(md, stdout);
    if (!rc && out)
        printf("study sizes: %d sizes (%d skipped), baseline %s; wrote %s%s%s\n", z->n_sizes, z->n_sizes - z->n_loaded,
               z->baseline, out, svg_path ? ", " : "", svg_path ? svg_path : "");
    free(md);
    free(svg);
    return rc;
}

/* study sizes' command line */
typedef struct {
    const char *out, *svg, *baseline;
    const char *labels[MX_SIZES_MAX], *dirs[MX_SIZES_MAX], *con[MX_SIZES_MAX], *only[MX_SIZES_MAX];
    int n, nc, allow, n_only;
} sizes_args;

/* --recipes LIST (split in place into buf): 0, or 2 with a message (an empty or repeated name, too many). */
static int set_only(sizes_args* a, const char* v, char* buf, size_t n) {
    if (strlen(v) >= n) { fprintf(stderr, "mxlm study sizes: --recipes: the list is too long\n"); return 2; }
    strcpy(buf, v);
    a->n_only = 0;
    for (char* p = buf;; p++) {
        char* e = strchr(p, ',');
        if (e) *e = 0;
        if (!*p) { fprintf(stderr, "mxlm study sizes: --recipes '%s': an empty recipe name\n", v); return 2; }
        for (int j = 0; j < a->n_only; j++)
            if (!strcmp(a->only[j], p)) { fprintf(stderr, "mxlm study sizes: --recipes: %s given twice\n", p); return 2; }
        if (a->n_only == MX_SIZES_MAX) { fprintf(stderr, "mxlm study sizes: --recipes: more than %d\n", MX_SIZES_MAX); return 2; }
        a->only[a->n_only++] = p;
        if (!e) return 0;
        p = e;
    }
}

/* Every --recipes name ran at some loaded size: 0, or 1 with a message naming one that did not. */
static int only_known(const mx_sizes* z) {
    for (int j = 0; j < z->n_only; j++)
        if (!mx_sizes_ran(z, z->only[j])) {
            fprintf(stderr, "mxlm study sizes: --recipes: %s was run at none of the sizes\n", z->only[j]);
            return 1;
        }
    return 0;
}

/* One --contrast more: 0, or 2 with a message. */
static int add_contrast(sizes_args* a, const char* v) {
    if (contrast_arg(v)) return 2;
    if (a->nc == MX_SIZES_MAX) { fprintf(stderr, "mxlm study sizes: more than %d contrasts\n", MX_SIZES_MAX); return 2; }
    a->con[a->nc++] = v;
    return 0;
}

/* --baseline R: 0, or 2 with a message for an empty name. */
static int set_baseline(sizes_args* a, const char* v) {
    a->baseline = v;
    if (*v) return 0;
    fprintf(stderr, "mxlm study sizes: --baseline: an empty recipe name\n");
    return 2;
}

/* One LABEL=DIR more (its copy in buf): 0, or 2 with a message. */
static int add_size(sizes_args* a, const char* v, char* buf, size_t n) {
    if (a->n == MX_SIZES_MAX) { fprintf(stderr, "mxlm study sizes: more than %d sizes\n", MX_SIZES_MAX); return 2; }
    if (size_arg(v, buf, n, &a->labels[a->n], &a->dirs[a->n])) return 2;
    return label_new(a->labels, a->n++);
}

/* study sizes' options and sizes: 0, -1 (--help: the usage printed) or 2 (a message printed). */
static int sizes_parse(int argc, char** argv, sizes_args* a) {
    static char copies[MX_SIZES_MAX][MX_PATH_LEN + 80]; /* the LABEL=DIR arguments, split */
    static char only_buf[16384];                        /* the --recipes list, split */
    memset(a, 0, sizeof *a);
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        int missing = 0;
        const char* v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: mxlm study %s\n", k_sizes_usage);
            return -1;
        }
        if (!strcmp(argv[i], "--allow-missing")) a->allow = 1;
        else if ((v = own_opt(argc, argv, &i, "out", &missing))) rc = cli_path_check("study sizes", "out", a->out = v);
        else if ((v = own_opt(argc, argv, &i, "svg", &missing))) rc = cli_path_check("study sizes", "svg", a->svg = v);
        else if ((v = own_opt(argc, argv, &i, "contrast", &missing))) rc = add_contrast(a, v);
        else if ((v = own_opt(argc, argv, &i, "baseline", &missing))) rc = set_baseline(a, v);
        else if ((v = own_opt(argc, argv, &i, "recipes", &missing))) rc = set_only(a, v, only_buf, sizeof only_buf);
        else if (missing) { fprintf(stderr, "mxlm study sizes: %s needs a value\n", argv[i]); rc = 2; }
        else if (!strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "mxlm study sizes: unknown option '%s' (see mxlm study sizes --help)\n", argv[i]);
            rc = 2;
        } else rc = add_size(a, argv[i], copies[a->n % MX_SIZES_MAX], sizeof copies[0]); /* (the 65th: refused) */
    }
    if (!rc && !a->n) {
        fprintf(stderr, "mxlm study sizes: give at least one LABEL=DIR (mxlm study sizes --help)\n");
        rc = 2;
    }
    const char* names[2] = {"--out", "--svg"}, *paths[2] = {a->out, a->svg};
    return rc ? rc : cli_paths_distinct("study sizes", names, paths, 2);
}

static int cmd_sizes(int argc, char** argv) {
    sizes_args a;
    int rc = sizes_parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    mx_sizes z;
    if (mx_sizes_load(&z, a.labels, a.dirs, a.n, a.baseline, a.allow)) {
        fprintf(stderr, "mxlm %s\n", mx_last_error());
        return 1;
    }
    z.only = a.only;
    z.n_only = a.n_only;
    rc = only_known(&z);
    if (!rc) rc = write_sizes(&z, a.out, a.svg, a.nc ? a.con : NULL, a.nc);
    mx_sizes_free(&z);
    return rc;
}

int cmd_study(int argc, char** argv) {
    if (argc >= 2 && !strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "report")) return cmd_report(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "sizes")) return cmd_sizes(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: mxlm study %s\n\n       mxlm study %s\n\n       mxlm study %s\n", k_run_usage, k_report_usage,
               k_sizes_usage);
        return 0;
    }
    fprintf(stderr, "usage: mxlm study run ... | mxlm study report DIR ... | mxlm study sizes LABEL=DIR ...  "
                    "(mxlm study --help)\n");
    return 2;
}
