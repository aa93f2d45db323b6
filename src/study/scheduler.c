/* scheduler.c: `mxlm study run`'s runs (study.h: mx_study_schedule): one `mxlm train` process per recipe
 * and seed (fork + exec of this very binary, /proc/self/exe), up to `parallel` at a time (a slot per GPU,
 * CUDA_VISIBLE_DEVICES), a finished run skipped, an interrupted one resumed; then, with --extend, the runs
 * that ended short of the did-not-converge limit trained on to it. The CLI (src/cli/study.c) parses the
 * command; this file writes DIR/study.txt and the run directories, its progress lines to the plan's
 * streams. */
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

#include "mxlm/study.h"
#include "mxlm/util.h"

/* One train command of `study run`: recipe k, seed j; steps > 0: --extend it to that many steps (fresh: no
 * checkpoint at its last step, so from step 0 with --schedule-steps sched, the old directory kept as .short). */
typedef struct { int k, j, fresh; int64_t steps, sched; } study_job;

/* The --extend jobs: this command's runs that ended before the did-not-converge limit without reaching their
 * target (mx_study_run.short_run), each to ceil(limit / tokens per step) steps. Returns their number, or -1
 * (printed) when the study cannot be computed. */
static int extend_jobs(FILE* fo, FILE* fe, const char* out, const char* baseline, double target, double factor,
                       const char* rule, char* const* recipes, int n_rec, const uint64_t* seeds, int n_seeds,
                       study_job* jobs) {
    mx_study s;
    if (mx_study_load(out, &s)) { fprintf(fe, "mxlm study run: --extend: %s\n", mx_last_error()); return -1; }
    mx_study_opts o;
    char recorded[256];
    mx_study_opts_from(&s, &o, recorded, sizeof recorded, baseline, target, factor, rule);
    if (mx_study_compute(&s, &o)) {
        fprintf(fe, "mxlm study run: --extend: %s\n", mx_last_error());
        mx_study_free(&s);
        return -1;
    }
    if (!isfinite(s.budget_limit)) { /* the limit is budget-factor x the baseline's budget */
        fprintf(fe, "mxlm study run: --extend: no finished run of the baseline %s, so no did-not-converge limit "
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
        fprintf(fo, "study: --extend: %s seed %llu: target %.6g not reached by its end (%lld tokens); on to %lld steps "
               "(%.0f tokens)%s\n", r->recipe, (unsigned long long)r->seed, r->target, (long long)r->last_tokens,
               (long long)J->steps, (double)J->steps * (double)r->tokens_per_step,
               J->fresh ? ", from step 0 (no checkpoint at its last step)" : "");
    }
    mx_study_free(&s);
    return n;
}

/* An extension from step 0 that did not finish (killed, failed): the run it was to replace (DIR.short) goes back
 * to DIR, the unfinished one aside as DIR.failedK (the report skips both). Returns 1 when it restored one. */
static int restore_short(FILE* fo, const char* rundir) {
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
    fprintf(fo, "study: %s: an extension from step 0 did not finish; the run it was to replace is back\n", rundir);
    return 1;
}

/* After an extension from step 0: are its evaluations up to the old run's end those of the old run (DIR.short)?
 * They should be (the same seed, schedule and code); a difference means another binary or device. */
static void same_start(FILE* fo, const char* rundir, const mx_study_run* r) {
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
    fprintf(fo, "study:   its first %lld tokens against the run it extends (%s): %d evaluations identical, %d different%s\n",
           (long long)o.last_tokens, aside, same, diff, diff ? " (another binary or device?)" : "");
    mx_study_run_free(&o);
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

static void print_log_tail(FILE* fe, const char* log) {
    FILE* f = mx_fopen_input(log, NULL);
    if (!f) return;
    char lines[3][1024] = {"", "", ""}, line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) snprintf(lines[n++ % 3], sizeof lines[0], "%s", line);
    fclose(f);
    for (int k = n > 3 ? n - 3 : 0; k < n; k++) fprintf(fe, "    %s", lines[k % 3]);
}

int mx_study_schedule(const mx_study_plan* P, int* errors_out, int* stopped_out) {
    FILE* fo = P->out_f ? P->out_f : stdout;
    FILE* fe = P->err_f ? P->err_f : stderr;
    const char *out = P->out, *baseline = P->baseline, *machine = P->machine, *rule = P->rule;
    const double target = P->target, factor = P->factor;
    const int dry = P->dry, extend = P->extend, n_rec = P->n_rec, n_seeds = P->n_seeds, n_pass = P->n_pass;
    const int parallel = P->parallel, n_cvd = P->n_cvd, argc = P->argc;
    char* const* recipes = P->recipes;
    char* const* pass = P->pass;
    char* const* cvd_list = P->cvd;
    char* const* argv = P->argv;
    const uint64_t* seeds = P->seeds;
    char thr_s[32];
    snprintf(thr_s, sizeof thr_s, "%s", P->threads ? P->threads : "");
    int rc = 0;
    char exe[1024];
    ssize_t el = rc ? 0 : readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!rc && el <= 0) { fprintf(fe, "mxlm study run: cannot find this program (/proc/self/exe)\n"); rc = 1; }
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
            fprintf(fe, "mxlm study run: mxlm train refused the options for recipe %s (exit %d)\n", recipes[k], st);
            rc = 2;
        }
    }
    if (!rc && !dry) {
        if (mx_mkdirs(out)) { fprintf(fe, "mxlm study run: %s\n", mx_last_error()); rc = 1; }
    }
    if (!rc && !dry) { /* study.txt: what was asked, appended on every invocation */
        char p[1200], mach[512];
        if (mx_pathf(p, sizeof p, "%s/study.txt", out)) return 2;
        FILE* f = fopen(p, "a");
        if (!f) { fprintf(fe, "mxlm study run: %s: cannot write: %s\n", p, strerror(errno)); rc = 1; }
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
            if (fclose(f)) { fprintf(fe, "mxlm study run: %s: cannot write\n", p); rc = 1; }
        }
    }
    if (!rc && !baseline) baseline = "fp8";
    if (!rc && target <= 0) {
        int has = 0;
        for (int k = 0; k < n_rec; k++) has |= !strcmp(recipes[k], baseline);
        if (!has) fprintf(fe, "mxlm study run: warning: the baseline %s is not among the recipes (give --baseline "
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
            total = extend_jobs(fo, fe, out, baseline, target, factor, rule, recipes, n_rec, seeds, n_seeds, jobs);
            if (total < 0) { rc = 1; break; }
            next = 0;
            fprintf(fo, "study: --extend: %d run%s to train on to the did-not-converge limit\n", total, total == 1 ? "" : "s");
        }
        while (!rc && !stopped && next < total && running < parallel) {
            int jb = next++, k = jobs[jb].k, j = jobs[jb].j, n = jb + 1;
            const study_job* J = &jobs[jb];
            mx_study_run_name(recipes[k], seeds[j], name, sizeof name);
            if (mx_pathf(rundir, sizeof rundir, "%s/%s", out, name)) return 2;
            snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seeds[j]);
            if (!J->steps) restore_short(fo, rundir); /* an extension of an earlier invocation cut short */
            int state = J->steps ? (J->fresh ? 0 : 1) : mx_study_run_state(rundir);
            if (J->steps && J->fresh) { /* no checkpoint to resume: the run again from step 0, kept aside */
                char aside[1300];
                if (mx_pathf(aside, sizeof aside, "%s.short", rundir)) return 2;
                if (access(aside, F_OK) == 0 || rename(rundir, aside)) {
                    fprintf(fe, "mxlm study run: --extend: cannot move %s aside to %s (%s)\n", rundir, aside,
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
                fprintf(fo, "%s", exe);
                for (int i = 1; i < a; i++) fprintf(fo, " %s", args[i]);
                fprintf(fo, "%s\n", state == 2 ? "   # finished" : "");
                continue;
            }
            if (state == 2) {
                fprintf(fo, "study: [%d/%d] %s seed %llu: finished, skipped (%s)\n", n, total, recipes[k],
                       (unsigned long long)seeds[j], rundir);
                continue;
            }
            int q = 0;
            while (slot_pid[q]) q++;
            if (mx_pathf(log, sizeof log, "%s/train.log", rundir)) return 2;
            if (mx_mkdirs(rundir)) {
                fprintf(fe, "mxlm study run: %s\n", mx_last_error());
                rc = 1;
                break;
            }
            pid_t pid = spawn_start("/proc/self/exe", args, log, parallel > 1 ? slot_cvd[q] : NULL);
            if (pid < 0) {
                fprintf(fe, "mxlm study run: cannot start mxlm train: %s\n", strerror(errno));
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
                fprintf(fo, "study: [%d/%d] %s seed %llu: %s %s (log %s) on slot %d (CUDA_VISIBLE_DEVICES=%s, --threads %s)\n",
                       n, total, recipes[k], (unsigned long long)seeds[j], what, rundir, log, q, slot_cvd[q], thr_s);
            else
                fprintf(fo, "study: [%d/%d] %s seed %llu: %s %s (log %s)\n", n, total, recipes[k],
                       (unsigned long long)seeds[j], what, rundir, log);
            fflush(stdout);
        }
        if (!running) continue; /* the phase is over: the top of the loop ends it */
        int wst = 0;
        pid_t done = waitpid(-1, &wst, 0);
        if (done < 0) {
            if (errno == EINTR) continue;
            fprintf(fe, "mxlm study run: waitpid: %s\n", strerror(errno));
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
            fprintf(fo, "study: [%d/%d] %s seed %llu: %s at step %lld, %lld tokens, val loss %.4f, %.1f s, %.0f tok/s\n", n,
                   total, recipes[k], (unsigned long long)seeds[j], loaded ? r.status : "?",
                   loaded ? (long long)r.last_step : -1LL, loaded ? (long long)r.last_tokens : -1LL, vl, dt,
                   loaded ? r.tok_per_s : NAN);
            if (loaded && jobs[jb].steps && jobs[jb].fresh) same_start(fo, rundir, &r);
        } else {
            fprintf(fe, "study: [%d/%d] %s seed %llu: mxlm train failed (exit %d); the end of %s:\n", n, total,
                    recipes[k], (unsigned long long)seeds[j], st, log);
            print_log_tail(fe, log);
            if (jobs[jb].steps && jobs[jb].fresh) restore_short(fo, rundir);
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
    free(args);
    *errors_out = errors;
    *stopped_out = stopped;
    return rc;
}
