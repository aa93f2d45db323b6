/* internal.h: what the study harness's files (study.c: runs, stats.c: statistics, report.c: the report,
 * plot.c) share; not part of the library's interface (study.h). */
#ifndef MXLM_STUDY_INTERNAL_H
#define MXLM_STUDY_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "mxlm/model.h"
#include "mxlm/study.h"

/* metrics.jsonl's telemetry operands and GEMMs, in mx_study_tele order */
extern const char* const study_ops[MX_STUDY_OPS];
extern const char* const study_gemms[3];

/* study.c */
char* study_sb_take(mx_sbuf* b); /* b's string (malloc'ed; "" when empty), NULL after an allocation failure */
int study_cfg_get(const char* text, const char* key, char* out, size_t n); /* config.txt's "key = value" */
int64_t study_cfg_i64(const char* text, const char* key, int64_t dflt);
int study_status_finished(const char* status);
void study_free_recipes(mx_study* s);
void study_sort_runs(mx_study* s, const char* baseline);

/* stats.c */
int study_recipe_full_mxfp4(const char* name);
mx_study_recipe* study_find_recipe(const mx_study* s, const char* name);

/* report.c: the report's cells and pieces, for the report across sizes (sizes.c) */
/* A statistic as "mean ± sd (se X, n N)" ("mean (n 1)"; "-" for none), the mean in fmt (e.g. "%+.4f"), sd and se
 * in fmt without its sign, each x scale followed by unit ("%" with scale 100 for percentages). Returns b. */
const char* study_stat_cell(char* b, size_t n, const mx_study_stat* st, const char* fmt, double scale, const char* unit);
/* A recipe's paired overhead vs the baseline B: study_stat_cell of p_overhead, with "; k/n did not converge"
 * where seeds did not, or "did not converge (k/n seeds)", "no paired seed", "not finished". */
void study_paired_cell(const mx_study_recipe* R, const char* B, char* b, size_t n);
/* The two-sided p of a paired mean, t = mean / se with n - 1 degrees of freedom (NaN: n < 2 or se 0), *t as the
 * report prints it (|t| < 0.005 as 0, and p of that). */
double study_t_p(const mx_study_stat* st, double* t);
/* The model of a run, from its config.txt (the report's Model line). */
void study_run_model(const mx_study_run* r, mx_model_config* m);
/* Does the line p[0..l) occur as a whole line of text before p? */
int study_line_seen(const char* text, const char* p, size_t l);
/* x with a B, M or k suffix where it is that large (an axis's tick labels). Returns b. */
const char* study_short_num(char* b, size_t n, double x);

#endif
