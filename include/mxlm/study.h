/*
 * study.h: the study harness (src/study/study.c). A study is a folder of run
 * directories written by `mxlm train` (one per recipe and seed); from their
 * config.txt and metrics.jsonl it computes the paper's measurements and
 * writes the report:
 *
 *   target loss        --target, or the baseline's validation loss at 80% of
 *                      its token budget (the first evaluation at or after
 *                      0.8 x budget tokens): per seed (the default: each run's
 *                      target is its seed's baseline run's, so that the
 *                      seed-to-seed spread of the loss does not decide what is
 *                      reached; runs of a seed without a baseline run take the
 *                      mean), or pooled (the mean over the baseline's seeds)
 *   tokens-to-target   the loss curve interpolated linearly in tokens between the last
 *                      evaluation above the target and the first at or below it
 *   did not converge   diverged, or the target not reached within
 *                      budget_factor x the baseline's budget (and the run's own)
 *   token overhead     tokens-to-target / the baseline's mean tokens-to-target - 1,
 *                      per seed; per recipe the mean, min and max over its seeds
 *   step throughput    median tok/s of a run's training lines; per recipe the
 *                      mean over its runs; ratios vs the baseline and vs bf16
 *   end-to-end ratio   throughput ratio vs the baseline / (1 + overhead)
 *   paired differences per recipe and seed, against the baseline's run of the same seed
 *                      (both reached the target): final validation loss, validation loss
 *                      at every evaluation, tokens-to-target (tokens and as an overhead
 *                      ttt / baseline ttt - 1); over the seeds the mean, the standard
 *                      deviation (n - 1) and the standard error sd / sqrt(n)
 *
 *   DIR/results.md     Table 1 and Table 2 (Markdown), the runs and their commands
 *   DIR/loss.svg       validation loss against tokens, every run
 *   DIR/telemetry.svg  per-GEMM-operand SQNR over steps (full-MXFP4 recipes)
 *
 * Library code: errors via mx_fail, nothing printed. docs/study.md has the
 * exact rules.
 */
#ifndef MXLM_STUDY_H
#define MXLM_STUDY_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "mxlm/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MX_STUDY_OPS 6 /* telemetry operands: fprop a/b, dgrad a/b, wgrad a/b */

typedef struct {
    int64_t step, tokens;
    double val_loss;       /* NaN: the run logged null (non-finite) */
} mx_study_eval;

typedef struct {
    int64_t step;
    double sqnr_db[MX_STUDY_OPS]; /* mean over the layers' linears (finite values only; NaN: none) */
    double clipped[MX_STUDY_OPS]; /* mean clipped-block fraction */
    /* the products' SQNR (`<gemm>_out_sqnr_db`, [fprop, dgrad, wgrad]): mean and minimum over the linears
     * (finite values only; NaN: none logged), and where the minimum is */
    double out_db[3], out_min_db[3];
    int out_min_layer[3];
    char out_min_linear[3][16];
} mx_study_tele;

/* Chmiel et al.'s criterion for a product's SQNR (mx_study_tele.out_db): 20 log10(sqrt 3) dB. */
#define MX_STUDY_GNR_DB 4.7712125472

typedef struct {
    char dir[1024];        /* the run directory */
    char name[256];        /* its name inside the study folder */
    char recipe[256];
    char preset[64];
    uint64_t seed;
    int64_t steps, tokens_per_step, budget_tokens; /* config.txt: steps, batch x seq x accum, and the budget:
                                                    * schedule-steps (an extended run's) or steps x tokens per step */
    char* config;          /* config.txt as read (malloc'ed) */
    /* metrics.jsonl */
    char status[16];       /* converged, budget, diverged, halted, error; "": no status line (running or killed) */
    char reason[256];
    int64_t last_step, last_tokens; /* of the last line with a step */
    mx_study_eval* evals;  /* [n_evals] in file order */
    int n_evals;
    double tok_per_s;      /* median of the training lines' tok_per_s (NaN: none) */
    int n_train;           /* training lines */
    mx_study_tele* tele;   /* [n_tele] one per telemetry step */
    int n_tele;
    mx_study_eval* train_loss; /* [n_train_loss] the training lines in file order (.val_loss: the training loss) */
    int n_train_loss;
    /* set by mx_study_compute */
    int finished;          /* status converged, budget or diverged */
    int diverged;
    double target;         /* this run's target loss (its seed's baseline run's, or the pooled one) */
    double tokens_to_target; /* interpolated between evaluations (-1: no evaluation at or below the target) */
    int reached;           /* finished, not diverged, tokens_to_target within the budget limit */
    int short_run;         /* finished, not diverged, not reached, and ended before the budget limit: the
                            * target may lie between its end and the limit (mxlm study run --extend) */
    double overhead;       /* tokens_to_target / baseline mean - 1 (NaN: undefined) */
    /* paired with the baseline's run of the same seed. Losses (lpaired): both finished without diverging,
     * compared at the baseline's evaluations (an extended run's later ones left out), whether or not
     * they reached the target (leaving out the seeds that did not would flatter a recipe). Tokens
     * (paired): both reached the target. NaN: not paired. */
    int lpaired, paired;
    double d_final;        /* validation loss at the baseline's last evaluation - the baseline's (lpaired) */
    double d_ttt;          /* tokens-to-target - the baseline's (tokens) */
    double p_overhead;     /* tokens-to-target / the baseline's - 1 */
} mx_study_run;

/* Mean, standard deviation (n - 1 in the denominator) and standard error sd / sqrt(n) of n values;
 * sd and se NaN when n < 2, all NaN when n == 0. */
typedef struct { int n; double mean, sd, se; } mx_study_stat;
void mx_study_stat_of(const double* x, int n, mx_study_stat* st);
/* |mean| > 2 se with n >= 2 (a difference that exceeds two standard errors). */
int mx_study_stat_beyond_2se(const mx_study_stat* st);
/* Two-sided p-value of a t statistic with df degrees of freedom (Student's t: the mean of n paired
 * differences over its standard error has df = n - 1): P(|T| >= |t|). NaN for df < 1 or a NaN t. */
double mx_study_t_p(double t, int df);
/* Tokens at which the loss curve first crosses `target`: linear interpolation in tokens between the
 * last evaluation above the target and the first at or below it (the first evaluation's tokens when it
 * is already at or below); -1 when no evaluation gets there or a non-finite one comes first. */
double mx_study_cross(const mx_study_eval* e, int n, double target);

typedef struct {
    char recipe[256];
    int n_runs, n_finished, n_reached;
    int full_mxfp4;        /* all three GEMMs in MXFP4 */
    double ttt_mean;       /* mean tokens-to-target over the seeds that reached it (NaN: none) */
    double overhead, overhead_min, overhead_max; /* over the seeds that reached it (NaN: none) */
    double tok_per_s;      /* mean of the runs' median tok/s (NaN: none) */
    double vs_baseline, vs_bf16; /* throughput ratios (NaN: undefined) */
    double end_to_end;     /* vs_baseline / (1 + overhead) (NaN: undefined) */
    double final_loss;     /* mean last validation loss of the finished, not diverged runs */
    /* paired with the baseline by seed (not for the baseline itself) */
    int n_lpairs;          /* seeds where both runs finished without diverging (the loss differences) */
    int n_pairs;           /* seeds where both this recipe's and the baseline's run reached the target */
    int n_dnc;             /* finished seeds of this recipe that did not converge (reported as such) */
    int n_short;           /* of its runs, those not run on to the limit (mx_study_run.short_run) */
    int n_nobase;          /* seeds of this recipe that reached it but whose baseline seed did not (or is absent) */
    mx_study_stat d_final, d_ttt, p_overhead; /* d_final over the loss pairs, the others over the target pairs */
    int n_points;          /* the baseline's evaluations (of its first loss-paired seed) */
    int64_t* pt_tokens;    /* [n_points] their token counts */
    mx_study_stat* d_loss; /* [n_points] paired validation-loss difference at each (same token count) */
} mx_study_recipe;

typedef struct {
    const char* baseline;  /* recipe name (default "fp8") */
    double target;         /* > 0: the target loss; else the default rule */
    double budget_factor;  /* did not converge beyond this x the baseline's budget (default 2) */
    double target_frac;    /* the default rule's fraction of the baseline budget (default 0.8) */
    int pooled;            /* the default rule: 0 per seed (default), 1 the mean over the baseline's seeds */
} mx_study_opts;

typedef struct {
    char dir[1024];
    mx_study_run* runs;    /* [n_runs] sorted: recipe order, then seed */
    int n_runs;
    mx_study_recipe* recipes; /* [n_recipes] the baseline first, then study.txt's order, then by name */
    int n_recipes;
    char* study_txt;       /* DIR/study.txt (commands of `mxlm study run`), NULL if absent */
    /* set by mx_study_compute */
    mx_study_opts opts;
    char baseline[256];
    double target;         /* the pooled target (per seed: the mean of the seeds' targets); NaN: undefined */
    char target_rule[1024]; /* how the target was obtained, in words */
    int64_t baseline_budget;  /* tokens (0: no baseline run) */
    double budget_limit;   /* tokens; a run must reach the target within it (inf: no baseline) */
    double baseline_ttt;   /* mean tokens-to-target of the baseline (NaN: undefined) */
    char warning[512];     /* runs that differ in model or budget ("" none) */
} mx_study;

void mx_study_opts_default(mx_study_opts* o);
/* --target-rule: 0 per seed, 1 pooled, -1 neither. */
int mx_study_parse_rule(const char* v);
/* The report's options from the command line (NULL / 0: the defaults; the baseline recorded in s's
 * study.txt, its last `baseline = ` line, into recorded[nrec] when none is given). */
void mx_study_opts_from(const mx_study* s, mx_study_opts* o, char* recorded, size_t nrec, const char* baseline,
                        double target, double factor, const char* rule);

/* Read one run directory (config.txt required, metrics.jsonl optional). */
int mx_study_load_run(const char* dir, mx_study_run* r);
void mx_study_run_free(mx_study_run* r);

/* Read every run directory directly under dir (those holding a config.txt). */
int mx_study_load(const char* dir, mx_study* s);
/* Target, tokens-to-target, did-not-converge, overheads and ratios. Fails when
 * no target can be had (no --target and no finished baseline run with an
 * evaluation at or after 80% of its budget). */
int mx_study_compute(mx_study* s, const mx_study_opts* o);
/* The paired statistics as JSON (malloc'ed; NULL: out of memory): DIR/paired.json. */
char* mx_study_json(const mx_study* s);
/* Recipe a against recipe b by seed: each seed where both finished without diverging, a's validation
 * loss minus b's at the smaller of their budgets (an evaluation at exactly that token count in both);
 * d[seed index] for up to max_d seeds (seeds[] their seeds), the stat over them. Returns n. */
int mx_study_recipe_vs(const mx_study* s, const char* a, const char* b, double* d, uint64_t* seeds, int max_d,
                       mx_study_stat* st);
/* results.md (Markdown), paired.json, loss.svg and, when there is telemetry, telemetry.svg in s->dir. */
int mx_study_write_report(const mx_study* s);
/* The Markdown report as a malloc'ed string (NULL: out of memory). */
char* mx_study_markdown(const mx_study* s);
void mx_study_free(mx_study* s);

/* The run directory name of a recipe and seed: "<recipe>-s<seed>", characters
 * other than [A-Za-z0-9._+-] replaced by '_'. */
void mx_study_run_name(const char* recipe, uint64_t seed, char* buf, size_t n);
/* 0: nothing there; 1: a run was started (continue it with --resume);
 * 2: finished (its metrics.jsonl ends with a converged, budget or diverged status). */
int mx_study_run_state(const char* dir);

/* ---- mxlm study run's runs (src/study/scheduler.c) ---- */
typedef struct {
    const char* out;        /* the study directory */
    const char* baseline;   /* the baseline recipe (study.txt, --extend's limit) */
    const char* machine;    /* the hardware for study.txt (NULL: the CPU model and core count) */
    double target, factor;  /* report options (0: the defaults) */
    const char* rule;       /* --target-rule (NULL: the default) */
    int dry, extend;        /* print the train commands only; then train the short runs on to the limit */
    char* const* recipes;   /* [n_rec] */
    int n_rec;
    const uint64_t* seeds;  /* [n_seeds] */
    int n_seeds;
    char* const* pass;      /* [n_pass] the mxlm train options passed on */
    int n_pass;
    int parallel;           /* runs at a time, a slot (a GPU) each */
    const char* threads;    /* --threads of every run ("" or NULL: not given) */
    char* const* cvd;       /* [n_cvd] the study's own CUDA_VISIBLE_DEVICES entries (0: slot i is device i) */
    int n_cvd;
    int argc;               /* the command (argv[1..argc) after "mxlm study"), for study.txt */
    char* const* argv;
    FILE *out_f, *err_f;    /* progress lines and errors (NULL: stdout, stderr) */
} mx_study_plan;
/* Every recipe x seed of the plan, each an `mxlm train` process of this binary (its options checked once per
 * recipe with --describe first): 0, 2 (mxlm train refused the options) or 1 (a run-time failure; printed).
 * *errors: the runs that failed; *stopped: 1 when one failed so that no new runs were started. */
int mx_study_schedule(const mx_study_plan* p, int* errors, int* stopped);

/* ---- the report's SVG renderer, for other figures (mxlm plot, src/study/plot.c) ---- */
typedef struct { double x0, x1, y0, y1; int L, T, W, H; } mx_svg_frame; /* data range and plot area (pixels) */
double mx_svg_x(const mx_svg_frame* f, double x); /* data -> pixels */
double mx_svg_y(const mx_svg_frame* f, double y);
void mx_svg_begin(mx_sbuf* b, int w, int h);      /* <svg ...> and a white background */
/* Frame, grid, tick labels, axis labels and title of a plot area, and its clip path "c<id>". */
void mx_svg_axes(mx_sbuf* b, const mx_svg_frame* f, const char* xlabel, const char* ylabel, const char* title, int id);
/* The same with the x ticks at xt[0..nx) (data units) labelled xl[] (XML-escaped), instead of every multiple of a
 * 1-2-5 step: for a log axis, plot log10 x and label the ticks with the values. */
void mx_svg_axes_xticks(mx_sbuf* b, const mx_svg_frame* f, const char* xlabel, const char* ylabel, const char* title,
                        int id, const double* xt, const char* const* xl, int nx);
void mx_svg_text(mx_sbuf* b, const char* s);      /* s XML-escaped */
const char* mx_svg_color(int k);                  /* the report's 10 colours, k mod 10 */

/* ---- one precision study per model size (src/study/sizes.c; `mxlm study sizes`) ----
 * Each size is a study folder, loaded and computed as `mxlm study report` computes it (mx_study_load,
 * mx_study_opts_from with the baseline given or the one its study.txt records, mx_study_compute), nothing
 * written into it; the report puts the sizes side by side:
 *
 *   paired overhead    per recipe and size the recipe's p_overhead vs the baseline (mean ± sd (se, n) over the
 *                      seeds where both reached the target), or did not converge (k/n seeds)
 *   final loss         per recipe and size d_final (the recipe's final validation loss - the baseline's, same
 *                      seed) with p, the two-sided paired t-test: t = mean / se, se = sd / sqrt(n), df = n - 1
 *   contrasts          per A:B and size mx_study_recipe_vs(A, B): A's final loss - B's by seed, mean ± sd
 *                      (se, n) and p as above
 *   the figure         paired overhead (%) against non-embedding parameters (log scale), ± 1 se */
typedef struct {
    char label[64];         /* the size's name in the tables and on the x axis, e.g. "60m" */
    char dir[1024];         /* its study folder */
    int loaded;             /* 1: computed; 0: skipped (allow_missing), why in note */
    char note[1400];
    mx_study study;         /* (loaded) */
    int64_t params;         /* non-embedding parameters of its first run's model (config.txt) */
} mx_sizes_entry;

typedef struct {
    mx_sizes_entry* sizes;  /* [n_sizes] in the order given */
    int n_sizes, n_loaded;
    char baseline[256];     /* the studies' baseline (the same in all) */
    const char* const* only; /* the caller's: the rows, these recipes in this order (n_only 0: every recipe) */
    int n_only;
} mx_sizes;

/* Load and compute the sizes labels[i] = dirs[i] (baseline NULL: each its recorded one, else fp8). A folder that
 * cannot be read, holds no finished run or gives no target is an error naming it (MX_EINVAL / MX_EIO), or with
 * allow_missing a skipped size (its note says why; an error when none is left); so are baselines that differ. */
int mx_sizes_load(mx_sizes* z, const char* const* labels, const char* const* dirs, int n, const char* baseline,
                  int allow_missing);
/* The report (Markdown, malloc'ed; NULL: out of memory): a setup line per size (a note per skipped one), the
 * paired-overhead and final-loss tables (rows: the recipes of all sizes but the baseline, in the order they
 * first appear; columns: the sizes; "-": not run there), the contrasts[nc] "A:B" (NULL: the defaults
 * mxfp4-fdw-h16:mxfp4-fdw-rh16 and mxfp4-fdw-h32:mxfp4-fdw-h16; a row only where a size has both) and the
 * definitions. A recipe name may hold ':' itself: A:B splits at the first ':' whose two sides are recipes of
 * one size (else at the first ':'). */
char* mx_sizes_markdown(const mx_sizes* z, const char* const* contrasts, int nc);
/* The figure (SVG, malloc'ed; NULL: out of memory): per recipe the paired overhead (%) at each size against
 * log10 of its non-embedding parameters, a line through the sizes in order, markers (filled: every finished
 * seed paired; hollow: some did not converge), ± 1 se bars, and an x at the top where no seed converged. */
char* mx_sizes_svg(const mx_sizes* z);
/* Whether some loaded size of z ran recipe r (a check of z->only's names). */
int mx_sizes_ran(const mx_sizes* z, const char* r);
void mx_sizes_free(mx_sizes* z);

/* `mxlm plot`: training loss (thin) and validation loss (thick, dots) against tokens of any runs (loaded with
 * mx_study_load_run), one colour per run; with telemetry, one panel per run that has telemetry: the mean SQNR
 * of each GEMM operand against tokens. A malloc'ed SVG document (NULL: out of memory). */
char* mx_plot_svg(const mx_study_run* runs, int n, int telemetry, const char* title);

/* One of these SVG documents as a PNG image (src/study/raster.c: a rasterizer for the SVG subset that
 * src/study writes, not for SVG in general): *png malloc'ed, *n bytes. */
int mx_svg_png(const char* svg, unsigned char** png, size_t* n);
/* 8-bit RGB pixels rgb[h][w][3] as a PNG file image (zlib deflate). */
int mx_png_encode(const unsigned char* rgb, int w, int h, unsigned char** png, size_t* n);

#ifdef __cplusplus
}
#endif
#endif
