/* study.c: ./mxlm study - run a set of recipes x seeds with `mxlm train` (this
 * same binary, as child processes) and report the paper's measurements from
 * the run directories (src/study/study.c, docs/study.md). */
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
#include "mxlm/recipe.h"
#include "mxlm/study.h"
#include "mxlm/util.h"

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

/* A fraction as a percentage rounded to 0.1, without a negative zero. */
static double pct1(double x) {
    double v = round(x * 1000.0) / 10.0;
    return v == 0 ? 0.0 : v;
}

/* --target-rule: 0 per seed, 1 pooled, -1 neither */
static int parse_rule(const char* v) { return !strcmp(v, "seed") ? 0 : !strcmp(v, "pooled") ? 1 : -1; }

/* The report's options from the command line (NULL / 0: the defaults; the baseline recorded in study.txt). */
static void report_opts(const mx_study* s, mx_study_opts* o, char* recorded, size_t nrec, const char* baseline,
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
    if (rule) o->pooled = parse_rule(rule) == 1;
}

static int render(const char* dir, const char* baseline, double target, double factor, const char* rule) {
    mx_study s;
    if (mx_study_load(dir, &s)) { fprintf(stderr, "mxlm study: %s\n", mx_last_error()); return 1; }
    mx_study_opts o;
    char recorded[256];
    report_opts(&s, &o, recorded, sizeof recorded, baseline, target, factor, rule);
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
    if (rule && parse_rule(rule) < 0) {
        fprintf(stderr, "mxlm study report: --target-rule: '%s' is not seed or pooled\n", rule);
        return 2;
    }
    return render(pos[0], baseline, target, factor, rule);
}

/* ---- study run ---------------------------------------------------------------------- */

/* One train command of `study run`: recipe k, seed j; steps > 0: --extend it to that many steps (fresh: no
 * checkpoint at its last step, so from step 0 with --schedule-steps sched, the old directory kept as .short). */
typedef struct { int k, j, fresh; int64_t steps, sched; } study_job;

/* The --extend jobs: this command's runs that ended before the did-not-converge limit without reaching their
 * target (mx_study_run.short_run), each to ceil(limit / tokens per step) steps. Returns their number, or -1
 * (printed) when the study cannot be computed. */
/* The longest --out of a study: its run folders (--out/NAME, NAME up to 300 bytes) and their files fit. */
#define MX_STUDY_OUT_MAX 800

static int extend_jobs(const char* out, const char* baseline, double target, double factor, const char* rule,
                       char* const* recipes, int n_rec, const uint64_t* seeds, int n_seeds, study_job* jobs) {
    mx_study s;
    if (mx_study_load(out, &s)) { fprintf(stderr, "mxlm study run: --extend: %s\n", mx_last_error()); return -1; }
    mx_study_opts o;
    char recorded[256];
    report_opts(&s, &o, recorded, sizeof recorded, baseline, target, factor, rule);
    if (mx_study_compute(&s, &o)) {
        fprintf(stderr, "mxlm study run: --extend: %s\n", mx_last_error());
        mx_study_free(&s);
        return -1;
    }
    if (!isfinite(s.budget_limit)) { /* the limit is budget-factor x the baseline's budget */
        fprintf(stderr, "mxlm study run: --extend: no finished run of the baseline %s, so no did-not-converge limit "
                        "to train on to: nothing extended\n", s.baseline);
        mx_study_free(&s);
        return 0;
    }
    int n = 0;
    for (int i = 0; i < s.n_runs; i++) {
        const mx_study_run* r = &s.runs[i];
        if (!r->short_run || r->tokens_per_step <= 0) continue;
        int k = 0, j = 0;
        while (k < n_rec && strcmp(recipes[k], r->recipe)) k++;
        while (j < n_seeds && seeds[j] != r->seed) j++;
        char name[300];
        if (k < n_rec) mx_study_run_name(recipes[k], r->seed, name, sizeof name);
        if (k == n_rec || j == n_seeds || strcmp(name, r->name)) continue; /* not one of this command's runs */
        study_job* J = &jobs[n++];
        J->k = k;
        J->j = j;
        J->steps = (int64_t)ceil(s.budget_limit / (double)r->tokens_per_step);
        J->sched = r->budget_tokens / r->tokens_per_step; /* its schedule's steps (of an earlier extension too) */
        char ck[1400];
        if (mx_pathf(ck, sizeof ck, "%s/%s/ckpt-%08lld.bin", out, r->name, (long long)r->last_step)) continue;
        J->fresh = access(ck, F_OK) != 0;
        printf("study: --extend: %s seed %llu: target %.6g not reached by its end (%lld tokens); on to %lld steps "
               "(%.0f tokens)%s\n", r->recipe, (unsigned long long)r->seed, r->target, (long long)r->last_tokens,
               (long long)J->steps, (double)J->steps * (double)r->tokens_per_step,
               J->fresh ? ", from step 0 (no checkpoint at its last step)" : "");
    }
    mx_study_free(&s);
    return n;
}

/* An extension from step 0 that did not finish (killed, failed): the run it was to replace (DIR.short) goes back
 * to DIR, the unfinished one aside as DIR.failedK (the report skips both). Returns 1 when it restored one. */
static int restore_short(const char* rundir) {
    char aside[1300], failed[1320];
    if (mx_pathf(aside, sizeof aside, "%s.short", rundir)) return 0;
    if (access(aside, F_OK) != 0 || mx_study_run_state(rundir) == 2) return 0;
    if (access(rundir, F_OK) == 0) {
        for (int k = 1; k < 1000; k++) {
            if (mx_pathf(failed, sizeof failed, "%s.failed%d", rundir, k)) return 0;
            if (access(failed, F_OK) != 0) break;
        }
        if (rename(rundir, failed)) return 0;
    }
    if (rename(aside, rundir)) return 0;
    printf("study: %s: an extension from step 0 did not finish; the run it was to replace is back\n", rundir);
    return 1;
}

/* After an extension from step 0: are its evaluations up to the old run's end those of the old run (DIR.short)?
 * They should be (the same seed, schedule and code); a difference means another binary or device. */
static void same_start(const char* rundir, const mx_study_run* r) {
    char aside[1300];
    if (mx_pathf(aside, sizeof aside, "%s.short", rundir)) return;
    mx_study_run o;
    if (mx_study_load_run(aside, &o)) return;
    int same = 0, diff = 0;
    for (int a = 0; a < o.n_evals; a++)
        for (int b = 0; b < r->n_evals; b++)
            if (r->evals[b].tokens == o.evals[a].tokens) {
                if (r->evals[b].val_loss == o.evals[a].val_loss) same++;
                else diff++;
                break;
            }
    printf("study:   its first %lld tokens against the run it extends (%s): %d evaluations identical, %d different%s\n",
           (long long)o.last_tokens, aside, same, diff, diff ? " (another binary or device?)" : "");
    mx_study_run_free(&o);
}

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

static void machine_text(char* b, size_t n) {
    char line[512], model[256] = "unknown CPU";
    FILE* f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    snprintf(b, n, "%s, %ld cores", model, sysconf(_SC_NPROCESSORS_ONLN));
}


static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Run exe with args (NULL-terminated), output to `log` (NULL: /dev/null) appended.
 * The study passes /proc/self/exe: the very binary that runs, even when ./mxlm
 * is rebuilt while a study goes on.
 * Returns the exit status, 128 + signal when killed, -1 when it could not start. */
static pid_t spawn_start(const char* exe, char** args, const char* log, const char* cvd) {
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* the trainer ends with the study (killed by a time limit, say): no orphan keeps the run's lock */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(127);
        if (cvd && setenv("CUDA_VISIBLE_DEVICES", cvd, 1)) _exit(127); /* --parallel: this run's GPU */
        int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || (log && dup2(fd, 2) < 0)) _exit(127);
        close(fd);
        execv(exe, args);
        _exit(127);
    }
    return pid;
}

static int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1; }

static int spawn(const char* exe, char** args, const char* log) {
    pid_t pid = spawn_start(exe, args, log, NULL);
    if (pid < 0) return -1;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return exit_code(st);
}

static void print_log_tail(const char* log) {
    FILE* f = mx_fopen_input(log, NULL);
    if (!f) return;
    char lines[3][1024] = {"", "", ""}, line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) snprintf(lines[n++ % 3], sizeof lines[0], "%s", line);
    fclose(f);
    for (int k = n > 3 ? n - 3 : 0; k < n; k++) fprintf(stderr, "    %s", lines[k % 3]);
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
    if (!rc && rule && parse_rule(rule) < 0) {
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
    char exe[1024];
    ssize_t el = rc ? 0 : readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!rc && el <= 0) { fprintf(stderr, "mxlm study run: cannot find this program (/proc/self/exe)\n"); rc = 1; }
    if (!rc) exe[el] = 0;

    /* argv of one train: mxlm train PASS... --recipe R --seed S --out DIR [--resume] */
    char** args = calloc((size_t)n_pass + 16, sizeof(char*));
    char seed_s[32], rundir[1200], name[300], log[1300];
    if (!args) rc = 1;
    int total = n_rec * n_seeds, errors = 0, stopped = 0;
    /* the options are checked once per recipe (mxlm train --describe) before anything runs */
    for (int k = 0; k < n_rec && !rc && !dry; k++) {
        int a = 0;
        args[a++] = "mxlm";
        args[a++] = "train";
        for (int j = 0; j < n_pass; j++) args[a++] = pass[j];
        if (thr_s[0]) { args[a++] = "--threads"; args[a++] = thr_s; }
        args[a++] = "--recipe";
        args[a++] = recipes[k];
        args[a++] = "--describe";
        args[a] = NULL;
        int st = spawn("/proc/self/exe", args, NULL);
        if (st) {
            fprintf(stderr, "mxlm study run: mxlm train refused the options for recipe %s (exit %d)\n", recipes[k], st);
            rc = 2;
        }
    }
    if (!rc && !dry) {
        if (mx_mkdirs(out)) { fprintf(stderr, "mxlm study run: %s\n", mx_last_error()); rc = 1; }
    }
    if (!rc && !dry) { /* study.txt: what was asked, appended on every invocation */
        char p[1200], mach[512];
        if (mx_pathf(p, sizeof p, "%s/study.txt", out)) return 2;
        FILE* f = fopen(p, "a");
        if (!f) { fprintf(stderr, "mxlm study run: %s: cannot write: %s\n", p, strerror(errno)); rc = 1; }
        else {
            if (machine) snprintf(mach, sizeof mach, "%s", machine);
            else machine_text(mach, sizeof mach);
            fprintf(f, "command = mxlm study run");
            for (int i = 1; i < argc; i++) {
                int q = strpbrk(argv[i], " \t'\"$;&|<>*?()") != NULL;
                fprintf(f, q ? " '%s'" : " %s", argv[i]);
            }
            time_t t = time(NULL);
            struct tm g;
            char date[64];
            strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&t, &g));
            fprintf(f, "\ndate = %s\nmachine = %s\nbaseline = %s\n", date, mach, baseline ? baseline : "fp8");
            if (parallel > 1) { /* the report's note on throughput: which slots shared a device */
                fprintf(f, "parallel = %d\nslots =", parallel);
                for (int i = 0; i < parallel; i++)
                    if (n_cvd >= parallel) fprintf(f, "%s%s", i ? "," : " ", cvd_list[i]);
                    else fprintf(f, "%s%d", i ? "," : " ", i);
                fprintf(f, "\n");
            }
            for (int k = 0; k < n_rec; k++) fprintf(f, "recipe = %s\n", recipes[k]);
            if (fclose(f)) { fprintf(stderr, "mxlm study run: %s: cannot write\n", p); rc = 1; }
        }
    }
    if (!rc && !baseline) baseline = "fp8";
    if (!rc && target <= 0) {
        int has = 0;
        for (int k = 0; k < n_rec; k++) has |= !strcmp(recipes[k], baseline);
        if (!has) fprintf(stderr, "mxlm study run: warning: the baseline %s is not among the recipes (give --baseline "
                                  "or --target, or the report needs its runs in %s)\n", baseline, out);
    }
    /* the runs: up to `parallel` at a time, in recipe x seed order; a slot is a GPU (and a share of the threads) */
    pid_t slot_pid[256];
    int slot_job[256];
    double slot_t0[256];
    char slot_cvd[256][32];
    for (int q = 0; q < parallel; q++) {
        slot_pid[q] = 0;
        snprintf(slot_cvd[q], sizeof slot_cvd[q], "%s", n_cvd ? cvd_list[q] : "");
        if (!n_cvd) snprintf(slot_cvd[q], sizeof slot_cvd[q], "%d", q);
    }
    /* the jobs: phase 0 every recipe x seed; phase 1 (--extend) the runs that ended before the
     * did-not-converge limit without reaching their target, trained on to it */
    study_job* jobs = calloc((size_t)total + 1, sizeof *jobs);
    char steps_s[32], sched_s[32];
    if (!jobs) rc = 1;
    for (int jb = 0; jb < total && jobs; jb++) { jobs[jb].k = jb / n_seeds; jobs[jb].j = jb % n_seeds; }
    int next = 0, running = 0, phase = 0;
    while (!rc) {
        if (!running && (next >= total || stopped)) { /* this phase is over */
            if (phase || !extend || dry || stopped || errors) break;
            phase = 1; /* every run of phase 0 is done: which ones to extend */
            total = extend_jobs(out, baseline, target, factor, rule, recipes, n_rec, seeds, n_seeds, jobs);
            if (total < 0) { rc = 1; break; }
            next = 0;
            printf("study: --extend: %d run%s to train on to the did-not-converge limit\n", total, total == 1 ? "" : "s");
        }
        while (!rc && !stopped && next < total && running < parallel) {
            int jb = next++, k = jobs[jb].k, j = jobs[jb].j, n = jb + 1;
            const study_job* J = &jobs[jb];
            mx_study_run_name(recipes[k], seeds[j], name, sizeof name);
            if (mx_pathf(rundir, sizeof rundir, "%s/%s", out, name)) return 2;
            snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seeds[j]);
            if (!J->steps) restore_short(rundir); /* an extension of an earlier invocation cut short */
            int state = J->steps ? (J->fresh ? 0 : 1) : mx_study_run_state(rundir);
            if (J->steps && J->fresh) { /* no checkpoint to resume: the run again from step 0, kept aside */
                char aside[1300];
                if (mx_pathf(aside, sizeof aside, "%s.short", rundir)) return 2;
                if (access(aside, F_OK) == 0 || rename(rundir, aside)) {
                    fprintf(stderr, "mxlm study run: --extend: cannot move %s aside to %s (%s)\n", rundir, aside,
                            access(aside, F_OK) == 0 ? "it exists" : strerror(errno));
                    rc = 1;
                    break;
                }
            }
            int a = 0;
            args[a++] = "mxlm";
            args[a++] = "train";
            for (int i = 0; i < n_pass; i++) {
                if (J->steps && !strcmp(pass[i], "--steps")) { i++; continue; } /* replaced below */
                if (J->steps && !strncmp(pass[i], "--steps=", 8)) continue;
                args[a++] = pass[i];
            }
            if (thr_s[0]) { args[a++] = "--threads"; args[a++] = thr_s; }
            args[a++] = "--recipe";
            args[a++] = recipes[k];
            args[a++] = "--seed";
            args[a++] = seed_s;
            args[a++] = "--out";
            args[a++] = rundir;
            if (state == 1) args[a++] = "--resume";
            if (J->steps) {
                snprintf(steps_s, sizeof steps_s, "%lld", (long long)J->steps);
                args[a++] = "--steps";
                args[a++] = steps_s;
            }
            if (J->steps && J->fresh) { /* the original schedule: steps past it at the floor, as a resume does */
                snprintf(sched_s, sizeof sched_s, "%lld", (long long)J->sched);
                args[a++] = "--schedule-steps";
                args[a++] = sched_s;
            }
            args[a] = NULL;
            if (dry) {
                printf("%s", exe);
                for (int i = 1; i < a; i++) printf(" %s", args[i]);
                printf("%s\n", state == 2 ? "   # finished" : "");
                continue;
            }
            if (state == 2) {
                printf("study: [%d/%d] %s seed %llu: finished, skipped (%s)\n", n, total, recipes[k],
                       (unsigned long long)seeds[j], rundir);
                continue;
            }
            int q = 0;
            while (slot_pid[q]) q++;
            if (mx_pathf(log, sizeof log, "%s/train.log", rundir)) return 2;
            if (mx_mkdirs(rundir)) {
                fprintf(stderr, "mxlm study run: %s\n", mx_last_error());
                rc = 1;
                break;
            }
            pid_t pid = spawn_start("/proc/self/exe", args, log, parallel > 1 ? slot_cvd[q] : NULL);
            if (pid < 0) {
                fprintf(stderr, "mxlm study run: cannot start mxlm train: %s\n", strerror(errno));
                rc = 1;
                break;
            }
            slot_pid[q] = pid;
            slot_job[q] = jb;
            slot_t0[q] = now_s();
            running++;
            const char* what = J->steps ? (J->fresh ? "extending (from step 0; no checkpoint)" : "extending")
                                        : state == 1 ? "resuming" : "training";
            if (parallel > 1)
                printf("study: [%d/%d] %s seed %llu: %s %s (log %s) on slot %d (CUDA_VISIBLE_DEVICES=%s, --threads %s)\n",
                       n, total, recipes[k], (unsigned long long)seeds[j], what, rundir, log, q, slot_cvd[q], thr_s);
            else
                printf("study: [%d/%d] %s seed %llu: %s %s (log %s)\n", n, total, recipes[k],
                       (unsigned long long)seeds[j], what, rundir, log);
            fflush(stdout);
        }
        if (!running) continue; /* the phase is over: the top of the loop ends it */
        int wst = 0;
        pid_t done = waitpid(-1, &wst, 0);
        if (done < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "mxlm study run: waitpid: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        int q = 0;
        while (q < parallel && slot_pid[q] != done) q++;
        if (q == parallel) continue; /* not one of ours */
        slot_pid[q] = 0;
        running--;
        int jb = slot_job[q], k = jobs[jb].k, j = jobs[jb].j, n = jb + 1, st = exit_code(wst);
        double dt = now_s() - slot_t0[q];
        mx_study_run_name(recipes[k], seeds[j], name, sizeof name);
        if (mx_pathf(rundir, sizeof rundir, "%s/%s", out, name)) return 2;
        if (mx_pathf(log, sizeof log, "%s/train.log", rundir)) return 2;
        mx_study_run r;
        int loaded = mx_study_load_run(rundir, &r) == 0;
        if (st == 0 || st == 3 || st == 4) {
            double vl = loaded && r.n_evals ? r.evals[r.n_evals - 1].val_loss : NAN;
            printf("study: [%d/%d] %s seed %llu: %s at step %lld, %lld tokens, val loss %.4f, %.1f s, %.0f tok/s\n", n,
                   total, recipes[k], (unsigned long long)seeds[j], loaded ? r.status : "?",
                   loaded ? (long long)r.last_step : -1LL, loaded ? (long long)r.last_tokens : -1LL, vl, dt,
                   loaded ? r.tok_per_s : NAN);
            if (loaded && jobs[jb].steps && jobs[jb].fresh) same_start(rundir, &r);
        } else {
            fprintf(stderr, "study: [%d/%d] %s seed %llu: mxlm train failed (exit %d); the end of %s:\n", n, total,
                    recipes[k], (unsigned long long)seeds[j], st, log);
            print_log_tail(log);
            if (jobs[jb].steps && jobs[jb].fresh) restore_short(rundir);
            errors++;
            if (st == 2 || st == 128 + SIGINT || st == 128 + SIGTERM || st < 0) stopped = 1; /* no new runs; wait for the others */
        }
        if (loaded) mx_study_run_free(&r);
        fflush(stdout);
    }
    while (running) { /* an error above: the started runs end first (they hold their locks) */
        int wst;
        pid_t done = waitpid(-1, &wst, 0);
        if (done < 0 && errno != EINTR) break;
        for (int q = 0; q < parallel; q++)
            if (done > 0 && slot_pid[q] == done) { slot_pid[q] = 0; running--; }
    }
    free(jobs);
    free(cvd_copy);
    free(args);
    free(pass);
    free(sl);
    for (int k = 0; k < n_lists; k++) free(lists[k]);
    if (rc || dry) return rc;
    if (stopped) { fprintf(stderr, "mxlm study run: stopped; run the same command again to continue\n"); return 1; }
    int r2 = render(out, baseline, target, factor, rule);
    if (errors) fprintf(stderr, "mxlm study run: %d run%s failed (see above)\n", errors, errors > 1 ? "s" : "");
    return errors || r2 ? 1 : 0;
}

int cmd_study(int argc, char** argv) {
    if (argc >= 2 && !strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "report")) return cmd_report(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: mxlm study %s\n\n       mxlm study %s\n", k_run_usage, k_report_usage);
        return 0;
    }
    fprintf(stderr, "usage: mxlm study run ... | mxlm study report DIR ...  (mxlm study --help)\n");
    return 2;
}
