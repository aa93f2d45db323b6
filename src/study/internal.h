/* internal.h: what the study harness's files (study.c: runs, stats.c: statistics, report.c: the report,
 * plot.c) share; not part of the library's interface (study.h). */
#ifndef MXLM_STUDY_INTERNAL_H
#define MXLM_STUDY_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
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

#endif
