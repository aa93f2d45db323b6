/* test_study.c: the study harness. Synthetic run directories with known
 * curves (written here) give exact tokens-to-target, default target,
 * overheads, spread, did-not-converge (diverged, never reached, reached
 * beyond the budget), throughput ratios and the report's table rows; then a
 * tiny real study through `mxlm study run` end to end (skip, resume). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mxlm/json.h"
#include "mxlm/study.h"
#include "mxlm/trainer.h"
#include "test.h"

/* The model lines of a fake run's config.txt: the tiny preset. */
static const char* k_fake_model =
    "preset = tiny\nvocab = 4096\ndim = 128\nlayers = 4\nheads = 4\nkv-heads = 2\nffn = 384\ncontext = 128\n";

/* A run directory TMP/<study>/<name>: config.txt (`model`'s lines, 100 tokens per step), the
 * evaluations `loss[0..n)` at tokens 0, 100, 200, ... (NAN: logged null),
 * training lines with the given tok/s (cycled), and a status line unless NULL. */
static void fake_run_of(const char* model, const char* study, const char* name, const char* recipe, int seed, int steps,
                        const double* loss, int n, const double* tps, int ntps, const char* status) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s/%s", test_tmpdir(), study, name);
    REQUIRE(test_sh("mkdir -p '%s'", p) == 0);
    char f[600];
    snprintf(f, sizeof f, "%s/config.txt", p);
    FILE* c = fopen(f, "w");
    REQUIRE(c);
    fprintf(c, "%srecipe = %s\nbatch = 1\nseq = 100\naccum = 1\nsteps = %d\nseed = %d\nlr = 0.003\nwarmup = 1\n"
               "eval-every = 1\n", model, recipe, steps, seed);
    fclose(c);
    snprintf(f, sizeof f, "%s/metrics.jsonl", p);
    FILE* m = fopen(f, "w");
    REQUIRE(m);
    for (int i = 0; i < n; i++) {
        if (i > 0) /* a training line before each evaluation; tok/s from the list */
            fprintf(m, "{\"step\":%d,\"tokens\":%d,\"loss\":%.9g,\"lr\":0.001,\"grad_norm\":1,\"tok_per_s\":%.9g}\n", i,
                    100 * i, isfinite(loss[i]) ? loss[i] : 9.0, tps[(i - 1) % ntps]);
        if (isfinite(loss[i])) fprintf(m, "{\"step\":%d,\"tokens\":%d,\"val_loss\":%.9g}\n", i, 100 * i, loss[i]);
        else fprintf(m, "{\"step\":%d,\"tokens\":%d,\"val_loss\":null}\n", i, 100 * i);
    }
    /* an event line and a target event must not count as evaluations */
    fprintf(m, "{\"event\":\"spike\",\"step\":1,\"loss\":0.5,\"z\":7,\"window_mean\":1,\"window_std\":0.1,\"skipped\":false}\n");
    if (status) fprintf(m, "{\"status\":\"%s\",\"step\":%d,\"tokens\":%d,\"reason\":\"\"}\n", status, n - 1, 100 * (n - 1));
    fclose(m);
}

/* fake_run_of with the tiny preset's model. */
static void fake_run(const char* study, const char* name, const char* recipe, int seed, int steps, const double* loss,
                     int n, const double* tps, int ntps, const char* status) {
    fake_run_of(k_fake_model, study, name, recipe, seed, steps, loss, n, tps, ntps, status);
}

/* The synthetic study of the tests below (written once). Baseline fp8, budget
 * 1000 tokens: 80% = 800 tokens; fp8 s1 has 3.0 there, s2 3.25 -> target 3.125;
 * fp8 reaches it at 700 (s1) and 900 (s2): mean 800. */
static void fake_study(void) {
    static int done;
    if (done) return;
    done = 1;
    const double fp8_1[] = {8, 6, 5, 4.5, 4, 3.75, 3.5, 3.125, 3.0, 2.9, 2.8};
    const double fp8_2[] = {8, 6, 5, 4.5, 4.25, 4, 3.75, 3.5, 3.25, 3.125, 3.0};
    const double fp8_3[] = {8, 6, 5, 2.0, 2.0}; /* killed (no status): ignored */
    const double h16_1[] = {8, 6, 5, 4.5, 4.25, 4, 3.75, 3.5, 3.3, 3.2, 3.1};        /* 1000: +25% */
    const double h16_2[] = {8, 6, 5, 4.5, 4.25, 4, 3.75, 3.5, 3.25, 3.0, 2.95};      /* 900: +12.5% */
    const double bf16_1[] = {8, 6, 5, 4.5, 4, 3.75, 3.5, 3.25, 3.125, 3.0, 2.9};     /* 800: +0% */
    const double sr_1[] = {8, 6, 5, NAN};                                           /* diverged */
    const double rh_1[] = {8, 6, 5, 4.5, 4, 3.75, 3.5, 3.5, 3.5, 3.5, 3.5};         /* never reaches */
    double fdw_1[21], fd_1[31];                                                     /* 1700: +112.5%; 2500 > 2000 */
    for (int i = 0; i < 21; i++) fdw_1[i] = i < 17 ? 8.0 - 0.25 * i : 3.0;
    for (int i = 0; i < 31; i++) fd_1[i] = i < 25 ? 8.0 - 0.125 * i : 3.0;
    const double tp_fp8_1[] = {90, 110}, tp_fp8_2[] = {100}, tp_bf16[] = {100, 300, 200};
    const double tp_h16_1[] = {121, 119, 500, 1}, tp_h16_2[] = {120};
    fake_run("fake", "fp8-s1", "fp8", 1, 10, fp8_1, 11, tp_fp8_1, 2, "budget");
    fake_run("fake", "fp8-s2", "fp8", 2, 10, fp8_2, 11, tp_fp8_2, 1, "budget");
    fake_run("fake", "fp8-s3", "fp8", 3, 10, fp8_3, 5, tp_fp8_2, 1, NULL);
    fake_run("fake", "mxfp4-fdw-h16-s1", "mxfp4-fdw-h16", 1, 10, h16_1, 11, tp_h16_1, 4, "budget");
    fake_run("fake", "mxfp4-fdw-h16-s2", "mxfp4-fdw-h16", 2, 10, h16_2, 11, tp_h16_2, 1, "converged");
    fake_run("fake", "bf16-s1", "bf16", 1, 10, bf16_1, 11, tp_bf16, 3, "budget");
    fake_run("fake", "mxfp4-fdw-sr-s1", "mxfp4-fdw-sr", 1, 10, sr_1, 4, tp_bf16, 3, "diverged");
    fake_run("fake", "mxfp4-fdw-rh16-s1", "mxfp4-fdw-rh16", 1, 10, rh_1, 11, tp_bf16, 3, "budget");
    fake_run("fake", "mxfp4-fdw-s1", "mxfp4-fdw", 1, 20, fdw_1, 21, tp_bf16, 3, "budget");
    fake_run("fake", "mxfp4-fd-s1", "mxfp4-fd", 1, 30, fd_1, 31, tp_bf16, 3, "budget");
    /* telemetry of h16 s1: two linears at step 5 (a null and an inf are skipped), one at step 10 */
    char f[512];
    snprintf(f, sizeof f, "%s/fake/mxfp4-fdw-h16-s1/metrics.jsonl", test_tmpdir());
    FILE* m = fopen(f, "a");
    REQUIRE(m);
    fprintf(m, "{\"type\":\"telemetry\",\"step\":5,\"layer\":0,\"linear\":\"q\",\"fprop_a_sqnr_db\":10,\"fprop_a_clipped\":0.5,"
               "\"wgrad_b_sqnr_db\":null,\"wgrad_b_clipped\":0,\"fprop_out_sqnr_db\":12,\"dgrad_out_sqnr_db\":9,"
               "\"wgrad_out_sqnr_db\":6}\n");
    fprintf(m, "{\"type\":\"telemetry\",\"step\":5,\"layer\":0,\"linear\":\"k\",\"fprop_a_sqnr_db\":20,\"fprop_a_clipped\":0.25,"
               "\"wgrad_b_sqnr_db\":1e999,\"wgrad_b_clipped\":0,\"fprop_out_sqnr_db\":14,\"dgrad_out_sqnr_db\":3,"
               "\"wgrad_out_sqnr_db\":4}\n");
    fprintf(m, "{\"type\":\"telemetry\",\"step\":10,\"layer\":0,\"linear\":\"q\",\"fprop_a_sqnr_db\":12,\"fprop_a_clipped\":0,"
               "\"wgrad_b_sqnr_db\":7,\"wgrad_b_clipped\":0,\"fprop_out_sqnr_db\":10,\"dgrad_out_sqnr_db\":8,"
               "\"wgrad_out_sqnr_db\":7.5}\n");
    fclose(m);
}

static const mx_study_run* run_named(const mx_study* s, const char* name) {
    for (int i = 0; i < s->n_runs; i++)
        if (!strcmp(s->runs[i].name, name)) return &s->runs[i];
    return NULL;
}
static const mx_study_recipe* recipe_named(const mx_study* s, const char* name) {
    for (int i = 0; i < s->n_recipes; i++)
        if (!strcmp(s->recipes[i].recipe, name)) return &s->recipes[i];
    return NULL;
}

TEST(study_known_curves) {
    fake_study();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fake", test_tmpdir());
    mx_study s;
    REQUIRE(mx_study_load(dir, &s) == 0);
    CHECK_EQ_INT(s.n_runs, 10);
    mx_study_opts po; /* first the pooled target: one for every run */
    mx_study_opts_default(&po);
    po.pooled = 1;
    REQUIRE(mx_study_compute(&s, &po) == 0);
    CHECK_SAME_F((float)s.target, 3.125f);
    CHECK_EQ_INT(s.baseline_budget, 1000);
    CHECK_NEAR(s.budget_limit, 2000, 0);
    CHECK_NEAR(s.baseline_ttt, 800, 0);
    CHECK(!strcmp(s.runs[0].recipe, "fp8")); /* the baseline first */
    const mx_study_run* r;
    REQUIRE((r = run_named(&s, "fp8-s1")));
    CHECK_NEAR(r->tokens_to_target, 700, 0); /* 3.125 exactly at 700 */
    CHECK_NEAR(r->overhead, -0.125, 1e-15);
    CHECK_NEAR(r->tok_per_s, 100, 0); /* median of 90, 110, 90, ... */
    REQUIRE((r = run_named(&s, "fp8-s2")));
    CHECK_NEAR(r->tokens_to_target, 900, 0);
    CHECK_NEAR(r->overhead, 0.125, 1e-15);
    REQUIRE((r = run_named(&s, "fp8-s3")));
    CHECK(!r->finished && !r->reached);
    CHECK_NEAR(r->tokens_to_target, 262.5, 1e-9); /* 5.0 at 200, 2.0 at 300: 200 + 100 x 1.875/3; not finished */
    REQUIRE((r = run_named(&s, "mxfp4-fdw-h16-s1")));
    CHECK_NEAR(r->tokens_to_target, 975, 1e-9); /* 3.2 at 900, 3.1 at 1000: 900 + 100 x 0.075/0.1 */
    CHECK_NEAR(r->overhead, 0.21875, 1e-12);    /* 975 / 800 - 1 */
    CHECK_NEAR(r->tok_per_s, 120, 0); /* median of 121, 119, 500, 1, 121, 119, 500, 1, 121, 119 */
    CHECK_EQ_INT(r->n_train, 10);
    CHECK_EQ_INT(r->last_step, 10);
    CHECK_EQ_INT(r->last_tokens, 1000);
    REQUIRE(r->n_tele == 2);
    CHECK_EQ_INT(r->tele[0].step, 5);
    CHECK_NEAR(r->tele[0].sqnr_db[0], 15, 0);
    CHECK_NEAR(r->tele[0].clipped[0], 0.375, 0);
    CHECK(isnan(r->tele[0].sqnr_db[5])); /* null and inf only */
    CHECK(isnan(r->tele[0].sqnr_db[1])); /* absent */
    CHECK_NEAR(r->tele[1].sqnr_db[5], 7, 0);
    /* the products: mean and lowest linear per step */
    CHECK(r->tele[0].out_db[0] == 13 && r->tele[0].out_db[1] == 6 && r->tele[0].out_db[2] == 5);
    CHECK(r->tele[0].out_min_db[2] == 4 && r->tele[0].out_min_layer[2] == 0 && !strcmp(r->tele[0].out_min_linear[2], "k"));
    CHECK(r->tele[1].out_db[2] == 7.5 && r->tele[1].out_min_db[1] == 8);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-sr-s1")));
    CHECK(r->finished && r->diverged && !r->reached);
    CHECK_NEAR(r->tokens_to_target, -1, 0);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-rh16-s1")));
    CHECK(r->finished && !r->diverged && !r->reached);
    CHECK_NEAR(r->tokens_to_target, -1, 0);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-s1")));
    CHECK(r->reached);
    CHECK_NEAR(r->tokens_to_target, 1687.5, 1e-9); /* 4.0 at 1600, 3.0 at 1700: 1600 + 100 x 0.875 */
    CHECK_NEAR(r->overhead, 1.109375, 1e-12);      /* 1687.5 / 800 - 1 */
    REQUIRE((r = run_named(&s, "mxfp4-fd-s1")));
    CHECK_NEAR(r->tokens_to_target, 2493.75, 1e-9); /* 5.0 at 2400, 3.0 at 2500; beyond 2 x 1000: did not converge */
    CHECK(r->finished && !r->reached && isnan(r->overhead));
    /* the losses are paired at the baseline's budget (fp8 s1 ends at 1000 tokens with 2.8), not at a longer
     * run's own end, and whether or not the target was reached; a diverged run is not paired */
    CHECK(r->lpaired && !r->paired);
    CHECK_NEAR(r->d_final, 6.75 - 2.8, 1e-12); /* fd s1 at 1000 tokens: 8 - 0.125 x 10 */
    REQUIRE((r = run_named(&s, "mxfp4-fdw-s1")));
    CHECK(r->lpaired && r->paired);
    CHECK_NEAR(r->d_final, 5.5 - 2.8, 1e-12);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-rh16-s1")));
    CHECK(r->lpaired && !r->paired);
    CHECK_NEAR(r->d_final, 3.5 - 2.8, 1e-12);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-sr-s1")));
    CHECK(!r->lpaired && isnan(r->d_final));

    const mx_study_recipe* R;
    REQUIRE((R = recipe_named(&s, "fp8")));
    CHECK_EQ_INT(R->n_runs, 3);
    CHECK_EQ_INT(R->n_finished, 2);
    CHECK_EQ_INT(R->n_reached, 2);
    CHECK_NEAR(R->overhead, 0, 1e-15);
    CHECK_NEAR(R->overhead_min, -0.125, 1e-15);
    CHECK_NEAR(R->overhead_max, 0.125, 1e-15);
    CHECK_NEAR(R->final_loss, 2.9, 1e-15);
    CHECK_NEAR(R->tok_per_s, 100, 0); /* runs' medians 100, 100 and 100 */
    REQUIRE((R = recipe_named(&s, "mxfp4-fdw-h16")));
    CHECK(R->full_mxfp4);
    CHECK_NEAR(R->ttt_mean, 912.5, 1e-9);     /* s1 975; s2: 3.25 at 800, 3.0 at 900: 800 + 100 x 0.5 = 850 */
    CHECK_NEAR(R->overhead, 0.140625, 1e-12); /* (0.21875 + 0.0625) / 2 */
    CHECK_NEAR(R->overhead_min, 0.0625, 1e-12);
    CHECK_NEAR(R->overhead_max, 0.21875, 1e-12);
    CHECK_NEAR(R->vs_baseline, 1.2, 1e-12);
    CHECK_NEAR(R->vs_bf16, 0.6, 1e-12);
    CHECK_NEAR(R->end_to_end, 1.2 / 1.140625, 1e-12);
    /* paired with fp8 of the same seed: s1 975 / 700 - 1, s2 850 / 900 - 1 */
    CHECK_EQ_INT(R->n_pairs, 2);
    CHECK_NEAR(R->p_overhead.mean, (975.0 / 700 - 1 + 850.0 / 900 - 1) / 2, 1e-12);
    CHECK_NEAR(R->p_overhead.se, fabs(975.0 / 700 - 850.0 / 900) / 2, 1e-12); /* n 2: se = |a - b| / 2 */
    REQUIRE((R = recipe_named(&s, "bf16")));
    CHECK(!R->full_mxfp4);
    CHECK_NEAR(R->overhead, 0, 1e-15);
    CHECK_NEAR(R->vs_baseline, 2, 1e-12);
    CHECK_NEAR(R->end_to_end, 2, 1e-12);
    REQUIRE((R = recipe_named(&s, "mxfp4-fdw-sr")));
    CHECK(R->n_reached == 0 && R->n_finished == 1 && isnan(R->overhead) && isnan(R->end_to_end));
    CHECK(strstr(s.warning, "token budget") != NULL); /* fdw and fd ran longer */

    /* the default, per seed: seed 1's runs aim at fp8 s1's 3.0, seed 2's at fp8 s2's 3.25 (both at 800 tokens),
     * seed 3 (no finished fp8 run) at their mean 3.125 */
    REQUIRE(mx_study_compute(&s, NULL) == 0);
    CHECK_SAME_F((float)s.target, 3.125f);
    CHECK(strstr(s.target_rule, "per seed") && strstr(s.target_rule, "seed 1: 3 at 800 tokens; seed 2: 3.25 at 800"));
    CHECK_NEAR(s.baseline_ttt, 800, 0); /* 3.0 at 800 (s1), 3.25 at 800 (s2) */
    REQUIRE((r = run_named(&s, "fp8-s1")));
    CHECK(r->target == 3.0 && r->tokens_to_target == 800 && r->overhead == 0);
    REQUIRE((r = run_named(&s, "fp8-s2")));
    CHECK(r->target == 3.25 && r->tokens_to_target == 800);
    REQUIRE((r = run_named(&s, "fp8-s3")));
    CHECK(r->target == 3.125 && !r->finished && !r->short_run);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-h16-s1")));
    CHECK(r->target == 3.0 && r->tokens_to_target < 0 && !r->reached);
    CHECK(r->short_run); /* ended at 1000 tokens, the limit is 2000: it might still get there */
    REQUIRE((r = run_named(&s, "mxfp4-fdw-h16-s2")));
    CHECK(r->target == 3.25 && r->tokens_to_target == 800 && r->reached && r->p_overhead == 0);
    REQUIRE((r = run_named(&s, "bf16-s1")));
    CHECK_NEAR(r->tokens_to_target, 900, 0); /* 3.0 at 900 */
    CHECK_NEAR(r->overhead, 0.125, 1e-15);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-s1")));
    CHECK(r->reached && r->tokens_to_target == 1700 && !r->short_run);
    REQUIRE((r = run_named(&s, "mxfp4-fd-s1")));
    CHECK(!r->reached && !r->short_run && r->tokens_to_target == 2500); /* beyond the limit: not short */
    REQUIRE((r = run_named(&s, "mxfp4-fdw-sr-s1")));
    CHECK(r->diverged && !r->short_run);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-rh16-s1")));
    CHECK(r->short_run);
    REQUIRE((R = recipe_named(&s, "mxfp4-fdw-h16")));
    CHECK(R->n_reached == 1 && R->n_short == 1 && R->n_pairs == 1 && R->n_dnc == 1);

    /* a given target: 3.5 is reached by fp8 at 600 (s1) and 700 (s2), by rh16 at 600 */
    mx_study_opts o;
    mx_study_opts_default(&o);
    o.target = 3.5;
    REQUIRE(mx_study_compute(&s, &o) == 0);
    CHECK_NEAR(s.baseline_ttt, 650, 0);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-rh16-s1")));
    CHECK(r->reached);
    CHECK_NEAR(r->tokens_to_target, 600, 0);
    /* the budget factor: at 1.5 x 1000 tokens mxfp4-fdw (1700) no longer converges */
    mx_study_opts_default(&o);
    o.budget_factor = 1.5;
    REQUIRE(mx_study_compute(&s, &o) == 0);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-s1")));
    CHECK(!r->reached);
    /* another baseline: bf16's single seed; its loss at 800 tokens is 3.125 too */
    mx_study_opts_default(&o);
    o.baseline = "bf16";
    REQUIRE(mx_study_compute(&s, &o) == 0);
    CHECK(!strcmp(s.runs[0].recipe, "bf16"));
    CHECK_SAME_F((float)s.target, 3.125f);
    CHECK_NEAR(s.baseline_ttt, 800, 0);
    /* no baseline runs and no target: refused with a message */
    o.baseline = "nonesuch";
    CHECK(mx_study_compute(&s, &o) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "nonesuch") != NULL);
    mx_study_free(&s);
}

static int file_has(const char* path, const char* needle);

/* Tokens-to-target by linear interpolation between evaluations (mx_study_cross). */
/* Student's t, two-sided: closed forms for 1 and 2 degrees of freedom, table quantiles for more. */
TEST(study_t_pvalue) {
    CHECK_NEAR(mx_study_t_p(1.0, 1), 0.5, 1e-12);                       /* 1 - (2/pi) atan(1) */
    CHECK_NEAR(mx_study_t_p(-1.0, 1), 0.5, 1e-12);                      /* symmetric */
    CHECK_NEAR(mx_study_t_p(2.0, 2), 1 - 2 / sqrt(6.0), 1e-12);         /* 1 - t / sqrt(2 + t^2) = 0.1835 */
    CHECK_NEAR(mx_study_t_p(4.302652730, 2), 0.05, 1e-9);               /* t(0.975, 2) */
    CHECK_NEAR(mx_study_t_p(2.570581836, 5), 0.05, 1e-9);               /* t(0.975, 5) */
    CHECK_NEAR(mx_study_t_p(2.228138852, 10), 0.05, 1e-9);              /* t(0.975, 10) */
    CHECK_NEAR(mx_study_t_p(2.042272456, 30), 0.05, 1e-9);              /* t(0.975, 30) */
    CHECK_NEAR(mx_study_t_p(3.169272673, 10), 0.01, 1e-9);              /* t(0.995, 10) */
    CHECK_NEAR(mx_study_t_p(0.0, 7), 1.0, 1e-12);
    CHECK(mx_study_t_p(INFINITY, 3) == 0 && isnan(mx_study_t_p(1.0, 0)) && isnan(mx_study_t_p(NAN, 3)));
}

TEST(study_cross_interpolates) {
    const mx_study_eval a[] = {{0, 0, 8}, {1, 100, 4}, {2, 200, 2}, {3, 300, 1}};
    CHECK_NEAR(mx_study_cross(a, 4, 3.0), 150, 1e-12);  /* 4 at 100, 2 at 200: 100 + 100 x (4 - 3) / (4 - 2) */
    CHECK_NEAR(mx_study_cross(a, 4, 2.0), 200, 0);      /* exactly at an evaluation: its tokens */
    CHECK_NEAR(mx_study_cross(a, 4, 1.25), 275, 1e-12); /* 200 + 100 x 0.75 / 1 (not 300, the first under it) */
    CHECK_NEAR(mx_study_cross(a, 4, 9.0), 0, 0);        /* the first evaluation already at or below */
    CHECK_NEAR(mx_study_cross(a, 4, 0.5), -1, 0);       /* never reached */
    const mx_study_eval b[] = {{0, 0, 8}, {1, 100, NAN}, {2, 200, 1}};
    CHECK_NEAR(mx_study_cross(b, 3, 3.0), -1, 0);       /* a non-finite evaluation comes first */
    /* mean, sd (n - 1), se = sd / sqrt(n) */
    const double x[] = {0.1, 0.2, 0.3};
    mx_study_stat st;
    mx_study_stat_of(x, 3, &st);
    CHECK_NEAR(st.mean, 0.2, 1e-15);
    CHECK_NEAR(st.sd, 0.1, 1e-15);                       /* sqrt((0.01 + 0 + 0.01) / 2) */
    CHECK_NEAR(st.se, 0.1 / sqrt(3.0), 1e-15);
    CHECK(mx_study_stat_beyond_2se(&st));                /* 0.2 > 2 x 0.0577 */
    mx_study_stat_of(x, 1, &st);
    CHECK(st.n == 1 && st.mean == 0.1 && isnan(st.sd) && isnan(st.se) && !mx_study_stat_beyond_2se(&st));
}

/* A second synthetic study for the paired statistics: budget 1000 tokens (10 steps x 100), evaluations every
 * 100 tokens, the target given as 3.0. Tokens-to-target (interpolated):
 *   fp8  s1: 3.2 at 400, 2.8 at 500   -> 400 + 100 x 0.2/0.4  = 450
 *        s2: 3.0 at 500               -> 500 (an evaluation exactly at the target)
 *        s3: 3.1 at 500, 2.9 at 600   -> 500 + 100 x 0.1/0.2  = 550
 *   h16  s1: 3.19 at 400, 2.99 at 500 -> 400 + 100 x 0.19/0.2 = 495   (first evaluation under: 500)
 *        s2: 3.0 at 600               -> 600
 *        s3: 3.03 at 700, 2.83 at 800 -> 700 + 100 x 0.03/0.2 = 715   (first evaluation under: 800)
 *   paired overhead: 495/450 - 1 = 0.1, 600/500 - 1 = 0.2, 715/550 - 1 = 0.3: mean 0.2, sd 0.1, se 0.1/sqrt 3
 *   tokens-to-target - fp8's: 45, 100, 165: mean 103.333..., sd sqrt((58.333^2 + 3.333^2 + 61.667^2) / 2)
 *     = sqrt(3608.333) = 60.069, se 34.681
 *   final val loss - fp8's: 2.45 - 2.4, 2.58 - 2.5, 2.71 - 2.6 = 0.05, 0.08, 0.11: mean 0.08, sd 0.03, se 0.0173
 *   bf16 s1 495 (as h16 s1, final 2.41), s2 450 (as fp8 s1, final 2.49), s3 = fp8 s3: overheads 0.1, -0.1, 0:
 *     mean 0, sd 0.1; final differences 0.01, -0.01, 0: mean 0, sd 0.01: nothing beyond 2 se
 *   sr   s1 crosses at 450 but logs a null evaluation later (non-finite: did not converge), s2 never gets below
 *        3.2 (did not converge), s3: 3.0 at 800 -> 800/550 - 1 = 0.4545 (one target pair: no sd, no se); the
 *        losses pair s2 and s3 (finished, finite, target or not): final 3.2 - 2.5, 2.8 - 2.6 = 0.7, 0.2:
 *        mean 0.45, sd 0.5 / sqrt 2, se 0.25 (not beyond: 0.45 < 0.5)
 *   rh16 s4: reached, but there is no fp8 s4 (no pair) */
static void paired_study(void) {
    static int done;
    if (done) return;
    done = 1;
    const double tp[] = {100};
    const double fp8_1[] = {8, 6, 5, 4, 3.2, 2.8, 2.7, 2.6, 2.5, 2.45, 2.4};
    const double fp8_2[] = {8, 6, 5, 4, 3.4, 3.0, 2.8, 2.7, 2.6, 2.55, 2.5};
    const double fp8_3[] = {8, 6, 5, 4, 3.5, 3.1, 2.9, 2.8, 2.7, 2.65, 2.6};
    const double h16_1[] = {8, 6, 5, 4, 3.19, 2.99, 2.8, 2.7, 2.6, 2.5, 2.45};
    const double h16_2[] = {8, 6, 5, 4, 3.5, 3.25, 3.0, 2.8, 2.7, 2.6, 2.58};
    const double h16_3[] = {8, 6, 5, 4, 3.6, 3.3, 3.2, 3.03, 2.83, 2.75, 2.71};
    const double bf16_1[] = {8, 6, 5, 4, 3.19, 2.99, 2.8, 2.7, 2.6, 2.5, 2.41};
    const double bf16_2[] = {8, 6, 5, 4, 3.2, 2.8, 2.7, 2.6, 2.5, 2.45, 2.49};
    const double sr_1[] = {8, 6, 5, 4, 3.2, 2.8, NAN};
    const double sr_2[] = {8, 6, 5, 4, 3.4, 3.2, 3.2, 3.2, 3.2, 3.2, 3.2};
    const double sr_3[] = {8, 6, 5, 4, 3.5, 3.4, 3.3, 3.2, 3.0, 2.9, 2.8};
    fake_run("paired", "fp8-s1", "fp8", 1, 10, fp8_1, 11, tp, 1, "budget");
    fake_run("paired", "fp8-s2", "fp8", 2, 10, fp8_2, 11, tp, 1, "budget");
    fake_run("paired", "fp8-s3", "fp8", 3, 10, fp8_3, 11, tp, 1, "budget");
    fake_run("paired", "mxfp4-fdw-h16-s1", "mxfp4-fdw-h16", 1, 10, h16_1, 11, tp, 1, "budget");
    fake_run("paired", "mxfp4-fdw-h16-s2", "mxfp4-fdw-h16", 2, 10, h16_2, 11, tp, 1, "budget");
    fake_run("paired", "mxfp4-fdw-h16-s3", "mxfp4-fdw-h16", 3, 10, h16_3, 11, tp, 1, "budget");
    fake_run("paired", "bf16-s1", "bf16", 1, 10, bf16_1, 11, tp, 1, "budget");
    fake_run("paired", "bf16-s2", "bf16", 2, 10, bf16_2, 11, tp, 1, "budget");
    fake_run("paired", "bf16-s3", "bf16", 3, 10, fp8_3, 11, tp, 1, "budget");
    fake_run("paired", "mxfp4-fdw-sr-s1", "mxfp4-fdw-sr", 1, 10, sr_1, 7, tp, 1, "budget");
    fake_run("paired", "mxfp4-fdw-sr-s2", "mxfp4-fdw-sr", 2, 10, sr_2, 11, tp, 1, "budget");
    fake_run("paired", "mxfp4-fdw-sr-s3", "mxfp4-fdw-sr", 3, 10, sr_3, 11, tp, 1, "budget");
    fake_run("paired", "mxfp4-fdw-rh16-s4", "mxfp4-fdw-rh16", 4, 10, fp8_1, 11, tp, 1, "budget");
}

TEST(study_paired_statistics) {
    paired_study();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/paired", test_tmpdir());
    mx_study s;
    REQUIRE(mx_study_load(dir, &s) == 0);
    mx_study_opts o;
    mx_study_opts_default(&o);
    o.target = 3.0;
    REQUIRE(mx_study_compute(&s, &o) == 0);
    const double tol = 1e-9; /* the decimal losses are not exact in binary */
    const mx_study_run* r;
    REQUIRE((r = run_named(&s, "fp8-s1")));
    CHECK_NEAR(r->tokens_to_target, 450, tol);
    REQUIRE((r = run_named(&s, "fp8-s2")));
    CHECK_NEAR(r->tokens_to_target, 500, tol);
    REQUIRE((r = run_named(&s, "fp8-s3")));
    CHECK_NEAR(r->tokens_to_target, 550, tol);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-h16-s1")));
    CHECK_NEAR(r->tokens_to_target, 495, tol);
    CHECK(r->paired);
    CHECK_NEAR(r->p_overhead, 0.1, tol);
    CHECK_NEAR(r->d_ttt, 45, tol);
    CHECK_NEAR(r->d_final, 0.05, tol);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-h16-s3")));
    CHECK_NEAR(r->tokens_to_target, 715, tol);
    CHECK_NEAR(r->p_overhead, 0.3, tol);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-sr-s1")));
    CHECK(r->diverged && !r->reached && !r->paired && !r->lpaired); /* crossed at 450, then a null evaluation */
    CHECK_NEAR(r->tokens_to_target, 450, tol);
    REQUIRE((r = run_named(&s, "mxfp4-fdw-sr-s2")));
    CHECK(!r->diverged && !r->reached && r->tokens_to_target < 0);
    CHECK(r->lpaired && !r->paired); /* its losses count, its tokens cannot */
    CHECK_NEAR(r->d_final, 0.7, tol);

    const mx_study_recipe* R;
    REQUIRE((R = recipe_named(&s, "mxfp4-fdw-h16")));
    CHECK_EQ_INT(R->n_pairs, 3);
    CHECK_EQ_INT(R->n_dnc, 0);
    CHECK_EQ_INT(R->p_overhead.n, 3);
    CHECK_NEAR(R->p_overhead.mean, 0.2, tol);
    CHECK_NEAR(R->p_overhead.sd, 0.1, tol);
    CHECK_NEAR(R->p_overhead.se, 0.1 / sqrt(3.0), tol);
    CHECK(mx_study_stat_beyond_2se(&R->p_overhead));
    CHECK_NEAR(R->d_ttt.mean, 310.0 / 3, tol);                    /* (45 + 100 + 165) / 3 */
    CHECK_NEAR(R->d_ttt.sd, sqrt(21650.0 / 3 / 2), tol);         /* sum of squares 7216.667 = 21650 / 3 */
    CHECK_NEAR(R->d_ttt.se, sqrt(21650.0 / 3 / 2) / sqrt(3.0), tol);
    CHECK_NEAR(R->d_final.mean, 0.08, tol);
    CHECK_NEAR(R->d_final.sd, 0.03, tol);
    CHECK_NEAR(R->d_final.se, 0.03 / sqrt(3.0), tol);
    REQUIRE(R->n_points == 11);
    CHECK_EQ_INT(R->pt_tokens[4], 400);
    /* at 400 tokens: 3.19 - 3.2, 3.5 - 3.4, 3.6 - 3.5 = -0.01, 0.1, 0.1: mean 0.19/3, sd sqrt(0.0080667/2) */
    CHECK_NEAR(R->d_loss[4].mean, 0.19 / 3, tol);
    /* deviations -0.22/3, 0.11/3, 0.11/3: sum of squares (0.0484 + 2 x 0.0121) / 9 = 0.0726 / 9 */
    CHECK_NEAR(R->d_loss[4].sd, sqrt(0.0726 / 9 / 2), tol);
    CHECK(!mx_study_stat_beyond_2se(&R->d_loss[4])); /* 0.0633 < 2 x 0.0367 */
    /* at 600 tokens: 0.1, 0.2, 0.3: mean 0.2, se 0.0577: beyond */
    CHECK_NEAR(R->d_loss[6].mean, 0.2, tol);
    CHECK(mx_study_stat_beyond_2se(&R->d_loss[6]));
    CHECK_NEAR(R->d_loss[0].mean, 0, 0); /* step 0: the same initial weights, the same loss */
    CHECK(!mx_study_stat_beyond_2se(&R->d_loss[0]));
    REQUIRE((R = recipe_named(&s, "bf16")));
    CHECK_EQ_INT(R->n_pairs, 3);
    CHECK_NEAR(R->p_overhead.mean, 0, tol);
    CHECK_NEAR(R->p_overhead.sd, 0.1, tol);
    CHECK_NEAR(R->d_final.mean, 0, tol);
    CHECK_NEAR(R->d_final.sd, 0.01, tol);
    CHECK(!mx_study_stat_beyond_2se(&R->p_overhead) && !mx_study_stat_beyond_2se(&R->d_final));
    double dv[8];
    uint64_t sv[8];
    mx_study_stat vs;
    /* h16 - bf16 by seed at 1000 tokens: 2.45 - 2.41, 2.58 - 2.49, 2.71 - 2.6 */
    CHECK_EQ_INT(mx_study_recipe_vs(&s, "mxfp4-fdw-h16", "bf16", dv, sv, 8, &vs), 3);
    CHECK(sv[0] == 1 && sv[1] == 2 && sv[2] == 3);
    CHECK_NEAR(dv[0], 0.04, tol);
    CHECK_NEAR(dv[1], 0.09, tol);
    CHECK_NEAR(vs.mean, 0.24 / 3, tol);
    /* sr - h16: s1 diverged, s2 3.2 - 2.58, s3 2.8 - 2.71 */
    CHECK_EQ_INT(mx_study_recipe_vs(&s, "mxfp4-fdw-sr", "mxfp4-fdw-h16", dv, sv, 8, &vs), 2);
    CHECK(sv[0] == 2 && sv[1] == 3);
    CHECK_NEAR(vs.mean, (0.62 + 0.09) / 2, tol);
    CHECK_EQ_INT(mx_study_recipe_vs(&s, "mxfp4-fdw-rh16", "fp8", dv, sv, 8, &vs), 0); /* s4 has no fp8 */
    REQUIRE((R = recipe_named(&s, "mxfp4-fdw-sr")));
    CHECK_EQ_INT(R->n_pairs, 1);
    CHECK_EQ_INT(R->n_lpairs, 2);
    CHECK_EQ_INT(R->n_dnc, 2); /* the non-finite one and the one that never reached 3.0 */
    CHECK_NEAR(R->d_final.mean, 0.45, tol);
    CHECK_NEAR(R->d_final.sd, 0.5 / sqrt(2.0), tol);
    CHECK_NEAR(R->d_final.se, 0.25, tol);
    CHECK_NEAR(R->p_overhead.mean, 800.0 / 550 - 1, tol);
    CHECK(isnan(R->p_overhead.sd) && isnan(R->p_overhead.se));
    REQUIRE((R = recipe_named(&s, "mxfp4-fdw-rh16")));
    CHECK(R->n_pairs == 0 && R->n_lpairs == 0 && R->n_nobase == 1 && R->p_overhead.n == 0 && R->d_final.n == 0);
    REQUIRE((R = recipe_named(&s, "fp8")));
    CHECK_EQ_INT(R->n_pairs, 0); /* the baseline is not paired with itself */
    mx_study_free(&s);

    /* the same through `mxlm study report`: the rows, the statement, paired.json */
    const char* t = test_tmpdir();
    REQUIRE(test_sh("%s study report %s/paired --target 3 > %s/paired.log 2>&1", test_mxlm_bin(), t, t) == 0);
    char md[512];
    snprintf(md, sizeof md, "%s/paired/results.md", t);
    CHECK(file_has(md, "| mxfp4-fdw-h16 | 3 / 3 | 0/3 | +0.0800 ± 0.0300 (se 0.0173, n 3) | +103 ± 60 (se 35, n 3) | "
                       "+20.0% ± 10.0% (se 5.8%, n 3) |"));
    /* bf16 tokens: 45, -50, 0: mean -5/3, deviations 46.67, -48.33, 1.67: sd sqrt(4516.67 / 2) = 47.5, se 27.4 */
    CHECK(file_has(md, "| bf16 | 3 / 3 | 0/3 | +0.0000 ± 0.0100 (se 0.0058, n 3) | -2 ± 48 (se 27, n 3) | "
                       "+0.0% ± 10.0% (se 5.8%, n 3) |"));
    /* sr: losses of s2 and s3 (0.7, 0.2), tokens of s3 - fp8 s3 (800 - 550) */
    CHECK(file_has(md, "| mxfp4-fdw-sr | 2 / 1 | 2/3 | +0.4500 ± 0.3536 (se 0.2500, n 2) | +250 (n 1) | +45.5% (n 1) |"));
    CHECK(file_has(md, "| mxfp4-fdw-rh16 | 0 / 0 | 0/1 (1 without a baseline pair) | - | - | - |"));
    /* 0.08 / 0.01732 = 4.6 se; 103.3 / 34.68 = 3.0 se; 0.2 / 0.0577 = 3.5 se; per evaluation beyond at 500-1000
     * tokens (500: 2.99 - 2.8, 3.25 - 3.0, 3.3 - 3.1 = 0.19, 0.25, 0.2: mean 0.2133 > 2 x 0.0186; 700: 0.1, 0.1,
     * 0.23: mean 0.1433 > 2 x 0.0433; 800: 0.1, 0.1, 0.13; 900: 0.05, 0.05, 0.1), not at 0-300 (all 0: se 0) nor
     * at 400 (0.0633 < 2 x 0.0367); sr (s2, s3) - fp8 at 400..1000: (0, 0), (0.2, 0.3), (0.4, 0.4), (0.5, 0.4),
     * (0.6, 0.3), (0.65, 0.25), (0.7, 0.2): beyond (mean > |a - b|) at 500..900 */
    CHECK(file_has(md, "**Beyond two standard errors** (|mean| > 2 se, n >= 2): mxfp4-fdw-h16 final val loss "
                       "+0.0800 ± 0.0300 (se 0.0173, n 3) (4.6 se, above fp8); mxfp4-fdw-h16 tokens-to-target "
                       "+103 ± 60 (se 35, n 3) (3.0 se, above fp8); mxfp4-fdw-h16 paired overhead +20.0% ± 10.0% "
                       "(se 5.8%, n 3) (3.5 se, above fp8); mxfp4-fdw-h16 val loss at 6 of 11 evaluations with n >= 2; "
                       "mxfp4-fdw-sr val loss at 5 of 11 evaluations with n >= 2."));
    CHECK(file_has(md, "| Fprop + Dgrad + Wgrad |  | +45.5% (n 1); 2/3 did not converge (1 not run on to the limit) | "
                       "no paired seed | "
                       "+20.0% ± 10.0% (se 5.8%, n 3) |"));
    CHECK(file_has(md, "| fp8 | baseline (0 by definition) | | | |"));
    CHECK(file_has(md, "| 600 | +0.0000 ± 0.1000 (se 0.0577, n 3) | +0.2000 ± 0.1000 (se 0.0577, n 3) | "
                       "+0.4000 ± 0.0000 (se 0.0000, n 2) |"));
    /* at 600: bf16 0.1, -0.1, 0; h16 0.1, 0.2, 0.3; sr s2 3.2 - 2.8, s3 3.3 - 2.9 */
    char js[512];
    snprintf(js, sizeof js, "%s/paired/paired.json", t);
    size_t n = 0;
    char* text = test_read_file(js, &n);
    REQUIRE(text);
    mx_json doc;
    REQUIRE(mx_json_parse(text, n, &doc, NULL, 0) == 0);
    const mx_json* recs = mx_json_get(&doc, "recipes");
    REQUIRE(recs && recs->t == MX_JSON_ARR);
    int found = 0;
    for (int i = 0; i < recs->n; i++) {
        const mx_json* e = &recs->v[i];
        const char* name = mx_json_str(e, "recipe");
        if (!name || strcmp(name, "mxfp4-fdw-h16")) continue;
        const mx_json* po = mx_json_get(e, "p_overhead");
        REQUIRE(po);
        CHECK_NEAR(mx_json_num(po, "mean", NULL), 0.2, tol);
        CHECK_NEAR(mx_json_num(po, "sd", NULL), 0.1, tol);
        CHECK_NEAR(mx_json_num(po, "se", NULL), 0.1 / sqrt(3.0), tol);
        const mx_json* b2 = mx_json_get(po, "beyond_2se");
        CHECK(b2 && b2->t == MX_JSON_BOOL);
        found = 1;
    }
    CHECK(found);
    mx_json_free(&doc);
    free(text);
    char svg[512];
    snprintf(svg, sizeof svg, "%s/paired/loss.svg", t);
    CHECK(file_has(svg, "<title>mxfp4-fdw-h16: min-max over seeds</title></polygon>"));
    CHECK(file_has(svg, "band: min-max over seeds"));
    CHECK(file_has(svg, "<title>mxfp4-fdw-sr-s1</title>")); /* the non-finite run drawn alone */
}

static int file_has(const char* path, const char* needle) {
    size_t n = 0;
    char* t = test_read_file(path, &n);
    int ok = t && strstr(t, needle) != NULL;
    if (!ok) fprintf(stderr, "    %s lacks: %s\n", path, needle);
    free(t);
    return ok;
}

TEST(study_report_rows) {
    fake_study();
    const char* t = test_tmpdir();
    REQUIRE(test_sh("%s study report %s/fake --target-rule pooled > %s/fake.log 2>&1", test_mxlm_bin(), t, t) == 0);
    char md[512];
    snprintf(md, sizeof md, "%s/fake/results.md", t);
    CHECK(file_has(md, "| fp8 (baseline) | no | 2 / 2 / 3 | 800 | +0.0% (-12.5%..+12.5%, 2 seeds) | 2.9000 |"));
    CHECK(file_has(md, "| mxfp4-fdw-h16 | yes | 2 / 2 / 2 | 912 | +14.1% (+6.3%..+21.9%, 2 seeds) | 3.0250 |"));
    CHECK(file_has(md, "| bf16 | no | 1 / 1 / 1 | 800 | +0.0% (1 seed) | 2.9000 |"));
    CHECK(file_has(md, "| mxfp4-fdw-sr | yes | 0 / 1 / 1 | - | did not converge (1/1 seeds) | - |"));
    CHECK(file_has(md, "| mxfp4-fdw-rh16 | yes | 0 / 1 / 1 | - | did not converge (1/1 seeds) (1 not run on to the "
                       "limit) | 3.5000 |"));
    CHECK(file_has(md, "| mxfp4-fdw | yes | 1 / 1 / 1 | 1688 | +110.9% (1 seed) | 3.0000 |"));
    CHECK(file_has(md, "| mxfp4-fd | no | 0 / 1 / 1 | - | did not converge (1/1 seeds) | 3.0000 |"));
    /* the paper's grid */
    /* the paper's grid: paired overheads; fdw s1 1687.5 / 700 - 1 = +141.1%; h16 (+39.29%, -5.56%): mean +16.9%,
     * sd |a - b| / sqrt 2 = 31.7%, se |a - b| / 2 = 22.4% */
    CHECK(file_has(md, "| Fprop + Dgrad + Wgrad | +141.1% (n 1) | did not converge (1/1 seeds) | "
                       "did not converge (1/1 seeds) (1 not run on to the limit) | +16.9% ± 31.7% (se 22.4%, n 2) |"));
    CHECK(file_has(md, "| bf16 | +14.3% (n 1) | | | |")); /* an extra row: 800 / 700 - 1 */
    /* recipe against recipe at the common budget (1000 tokens: fdw ran 2000): rh16 3.5 - fdw 5.5, h16 s1
     * 3.1 - 5.5 (s2 has no fdw run), h16 - rh16 3.1 - 3.5; sr diverged: no seed */
    CHECK(file_has(md, "| mxfp4-fdw - mxfp4-fd | s1 -2.5000 | -2.5000 (n 1) | - | - |")); /* 3.0 - 5.5 at 2000 */
    CHECK(file_has(md, "| mxfp4-fdw-sr - mxfp4-fdw | - | - | - | - |"));
    CHECK(file_has(md, "| mxfp4-fdw-rh16 - mxfp4-fdw | s1 -2.0000 | -2.0000 (n 1) | - | - |"));
    CHECK(file_has(md, "| mxfp4-fdw-h16 - mxfp4-fdw | s1 -2.4000 | -2.4000 (n 1) | - | - |"));
    CHECK(file_has(md, "| mxfp4-fdw-h16 - mxfp4-fdw-rh16 | s1 -0.4000 | -0.4000 (n 1) | - | - |"));
    /* a stabilized stage against the plain stage before it, at 1000 tokens: h16 3.1 - fd 6.75 (8 - 0.125 x 10),
     * rh16 3.5 - 6.75; sr diverged */
    CHECK(file_has(md, "| mxfp4-fdw-h16 - mxfp4-fd | s1 -3.6500 | -3.6500 (n 1) | - | - |"));
    CHECK(file_has(md, "| mxfp4-fdw-rh16 - mxfp4-fd | s1 -3.2500 | -3.2500 (n 1) | - | - |"));
    CHECK(file_has(md, "| mxfp4-fdw-sr - mxfp4-fd | - | - | - | - |"));
    /* Table 2 */
    CHECK(file_has(md, "| mxfp4-fdw-h16 | 120 | 1.200x | 0.600x | +14.1% | 1.052x |"));
    CHECK(file_has(md, "| bf16 | 200 | 2.000x | 1.000x | +0.0% | 2.000x |"));
    CHECK(file_has(md, "| mxfp4-fdw-sr | 200 | 2.000x | 1.000x | - | did not converge |"));
    /* runs, target, commands */
    CHECK(file_has(md, "| mxfp4-fd-s1 | mxfp4-fd | 1 | budget (target beyond the budget: did not converge) | 3000 |"));
    CHECK(file_has(md, "| fp8-s3 | fp8 | 3 | not finished | 400 |"));
    CHECK(file_has(md, "validation loss 3.125 nats: pooled: the mean over 2 fp8 seeds"));
    CHECK(file_has(md, "seed 1: 3 at 800 tokens; seed 2: 3.25 at 800 tokens"));
    CHECK(file_has(md, "mxlm train --preset tiny --recipe mxfp4-fdw-h16 --seed 2 --steps 10 --batch 1 --seq 100"));
    /* the products against Chmiel et al.'s sqrt(3): wgrad 4 (layer 0 k) and dgrad 3 below 4.77 dB at step 5 */
    CHECK(file_has(md, "| mxfp4-fdw-h16-s1 | 13.00 -> 10.00 | 6.00 -> 8.00 | 5.00 -> 7.50 | 4.00 (step 5, layer 0 k) | "
                       "step 5 | step 5 |"));
    char svg[512];
    snprintf(svg, sizeof svg, "%s/fake/loss.svg", t);
    CHECK(file_has(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    CHECK(file_has(svg, ">mxfp4-fdw-rh16</text>"));
    CHECK(file_has(svg, "x: diverged"));
    CHECK(file_has(svg, "</svg>\n"));
    snprintf(svg, sizeof svg, "%s/fake/telemetry.svg", t);
    CHECK(file_has(svg, ">mxfp4-fdw-h16-s1</text>"));
    CHECK(file_has(svg, ">wgrad product</text>")); /* the products' SQNR, dashed, and the sqrt(3) line */
    CHECK(file_has(svg, "stroke=\"#000\" stroke-dasharray=\"2,2\""));
    /* --target and --baseline from the command line; a missing directory is an error */
    REQUIRE(test_sh("%s study report %s/fake --target 3.5 --baseline bf16 > %s/fake2.log 2>&1", test_mxlm_bin(), t, t) == 0);
    CHECK(file_has(md, "validation loss 3.5 nats: given (--target 3.5)"));
    CHECK(file_has(md, "| bf16 (baseline) | no | 1 / 1 / 1 | 600 |"));
    CHECK_EQ_INT(test_sh("%s study report %s/nothing-here > %s/fake3.log 2>&1", test_mxlm_bin(), t, t), 1);
    CHECK(test_log_has("fake3", "cannot open"));
    CHECK_EQ_INT(test_sh("%s study report %s/fake --baseline nonesuch > %s/fake4.log 2>&1", test_mxlm_bin(), t, t), 1);
    CHECK(test_log_has("fake4", "no target loss"));
    CHECK(test_log_has("fake4", "runs, no target loss yet; where each run is:")); /* and then each run */
    CHECK(test_log_has("fake4", "  mxfp4-fdw-h16-s1             budget     step "));
    /* the default target rule, per seed: h16 s1 never gets to fp8 s1's 3.0 and ended at half the limit */
    REQUIRE(test_sh("%s study report %s/fake > %s/fake5.log 2>&1", test_mxlm_bin(), t, t) == 0);
    CHECK(file_has(md, "- **Target**: per seed: each run's target is the validation loss of the fp8 run of its seed at "
                       "the first evaluation at or after 80% of the budget (seed 1: 3 at 800 tokens; seed 2: 3.25 at 800 "
                       "tokens); runs of the other seeds take the mean, 3.125."));
    CHECK(file_has(md, "| mxfp4-fdw-h16 | yes | 1 / 2 / 2 | 800 | +0.0% (1 seed); 1/2 did not converge (1 not run on "
                       "to the limit) |"));
    CHECK(file_has(md, "| mxfp4-fdw-h16-s1 | mxfp4-fdw-h16 | 1 | budget (target not reached: did not converge; not run "
                       "on to the limit) | 1000 | 3.1000 | - | - | 120 | 3 |"));
    CHECK(file_has(md, "| mxfp4-fdw-h16-s2 | mxfp4-fdw-h16 | 2 | converged | 1000 | 2.9500 | 800 | +0.0% | 120 | 3.25 |"));
    CHECK_EQ_INT(test_sh("%s study report %s/fake --target-rule mean > %s/fake6.log 2>&1", test_mxlm_bin(), t, t), 2);
}

/* A tiny real study: 2 recipes x 1 seed, 10 steps of a micro model on synthetic shards. */
#define STUDY_TRAIN "--vocab 256 --dim 32 --layers 1 --heads 1 --kv-heads 1 --ffn 64 --context 16 --batch 2 " \
                    "--val-tokens 64 --lr 1e-2 --steps 10 --eval-every 2 --telemetry-every 5 --threads 2"

TEST(study_run_end_to_end) {
    test_sentence_shards("study_", 4242, 20000, 2000);
    const char* t = test_tmpdir();
    const char* bin = test_mxlm_bin();
    REQUIRE(test_sh("%s study run --out %s/real --recipes bf16,mxfp4-fdw-h16 --seeds 1 --baseline bf16 " STUDY_TRAIN
                    " --train %s/study_train.bin --val %s/study_val.bin > %s/real.log 2>&1", bin, t, t, t, t) == 0);
    CHECK(test_log_has("real", "[1/2] bf16 seed 1: training"));
    CHECK(test_log_has("real", "[2/2] mxfp4-fdw-h16 seed 1: budget at step 10, 320 tokens"));
    char p[512];
    snprintf(p, sizeof p, "%s/real/results.md", t);
    CHECK(file_has(p, "| bf16 (baseline) | no | 1 / 1 / 1 |"));
    CHECK(file_has(p, "| mxfp4-fdw-h16 | yes | "));
    CHECK(file_has(p, "- **Tokens**: 320 per run (10 steps x 32 tokens: batch 2 x seq 16 x accum 1)."));
    CHECK(file_has(p, "--recipe mxfp4-fdw-h16 --seed 1 --steps 10"));
    snprintf(p, sizeof p, "%s/real/telemetry.svg", t);
    CHECK(file_has(p, ">mxfp4-fdw-h16-s1</text>"));
    mx_study s;
    snprintf(p, sizeof p, "%s/real", t);
    REQUIRE(mx_study_load(p, &s) == 0);
    mx_study_opts o;
    mx_study_opts_default(&o);
    o.baseline = "bf16";
    REQUIRE(mx_study_compute(&s, &o) == 0);
    REQUIRE(s.n_runs == 2);
    for (int i = 0; i < 2; i++) {
        CHECK(!strcmp(s.runs[i].status, "budget"));
        CHECK_EQ_INT(s.runs[i].n_evals, 6); /* steps 0, 2, ..., 10 */
        CHECK_EQ_INT(s.runs[i].n_train, 10);
    }
    /* the default target: bf16's loss at the first evaluation at or after 256 tokens (step 8) */
    CHECK_SAME_F((float)s.target, (float)s.runs[0].evals[4].val_loss);
    CHECK_EQ_INT(s.runs[0].evals[4].tokens, 256);
    CHECK(s.runs[0].tokens_to_target > 0 && s.runs[0].tokens_to_target <= 256);
    CHECK(s.runs[1].n_tele == 2);
    double bf16_last = s.runs[0].evals[5].val_loss;
    mx_study_free(&s);

    /* again: both finished, skipped; the report is re-rendered */
    REQUIRE(test_sh("%s study run --out %s/real --recipes bf16,mxfp4-fdw-h16 --seeds 1 --baseline bf16 " STUDY_TRAIN
                    " --train %s/study_train.bin --val %s/study_val.bin > %s/real2.log 2>&1", bin, t, t, t, t) == 0);
    CHECK(test_log_has("real2", "[1/2] bf16 seed 1: finished, skipped"));
    CHECK(test_log_has("real2", "[2/2] mxfp4-fdw-h16 seed 1: finished, skipped"));
    snprintf(p, sizeof p, "%s/real/results.md", t);
    size_t n = 0;
    char* md = test_read_file(p, &n);
    REQUIRE(md);
    int ncmd = 0;
    for (const char* q = md; (q = strstr(q, "**Study command**")); q++) ncmd++;
    CHECK_EQ_INT(ncmd, 1); /* the same command twice in study.txt, once in the report */
    free(md);
    snprintf(p, sizeof p, "%s/real/study.txt", t);
    md = test_read_file(p, &n);
    REQUIRE(md);
    ncmd = 0;
    for (const char* q = md; (q = strstr(q, "command = mxlm study run --out")); q++) ncmd++;
    CHECK_EQ_INT(ncmd, 2);
    free(md);

    /* the report alone takes the baseline the study recorded (study.txt: baseline = bf16), not fp8 */
    REQUIRE(test_sh("%s study report %s/real > %s/real3.log 2>&1", bin, t, t) == 0);
    CHECK(test_log_has("real3", "per seed: each run's target is the validation loss of the bf16 run of its seed"));
    snprintf(p, sizeof p, "%s/real/results.md", t);
    CHECK(file_has(p, "| bf16 (baseline) | no | 1 / 1 / 1 |"));
    /* --dry-run: the commands, nothing run */
    REQUIRE(test_sh("%s study run --dry-run --out %s/real --recipes bf16,fp8 --seeds 1 " STUDY_TRAIN " > %s/dry.log 2>&1",
                    bin, t, t) == 0);
    CHECK(test_log_has("dry", " --recipe bf16 --seed 1 --out "));
    CHECK(test_log_has("dry", "/real/bf16-s1   # finished"));
    CHECK(test_log_has("dry", " --recipe fp8 --seed 1 --out "));
    snprintf(p, sizeof p, "%s/real/fp8-s1", t);
    struct stat st;
    CHECK(stat(p, &st) != 0);

    /* an interrupted run is continued with --resume, to the same bits */
    REQUIRE(test_sh("%s train --recipe bf16 --seed 1 " STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin "
                    "--halt-at 4 --out %s/resumed/bf16-s1 > %s/halt.log 2>&1", bin, t, t, t, t) == 0);
    REQUIRE(test_sh("%s study run --out %s/resumed --recipes bf16 --seeds 1 --baseline bf16 " STUDY_TRAIN
                    " --train %s/study_train.bin --val %s/study_val.bin > %s/resumed.log 2>&1", bin, t, t, t, t) == 0);
    CHECK(test_log_has("resumed", "[1/1] bf16 seed 1: resuming"));
    snprintf(p, sizeof p, "%s/resumed", t);
    REQUIRE(mx_study_load(p, &s) == 0);
    REQUIRE(s.n_runs == 1 && s.runs[0].n_evals == 6);
    CHECK(!strcmp(s.runs[0].status, "budget"));
    CHECK_SAME_F((float)s.runs[0].evals[5].val_loss, (float)bf16_last);
    mx_study_free(&s);

    /* refusals: an unknown recipe, a train option train does not know, --seed (the study's) */
    CHECK_EQ_INT(test_sh("%s study run --out %s/bad --recipes bf16,nonesuch " STUDY_TRAIN " > %s/bad1.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("bad1", "nonesuch"));
    CHECK_EQ_INT(test_sh("%s study run --out %s/bad --recipes bf16 --no-such-option 3 > %s/bad2.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("bad2", "no-such-option"));
    CHECK_EQ_INT(test_sh("%s study run --out %s/bad --recipes bf16 --seed 3 > %s/bad3.log 2>&1", bin, t, t), 2);
    CHECK_EQ_INT(test_sh("%s study run --out %s/bad --recipes bf16 --target=-1 > %s/bad4.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("bad4", "--target: '-1' is not a positive number"));
    snprintf(p, sizeof p, "%s/bad", t);
    CHECK(stat(p, &st) != 0); /* nothing created by a refused study */
}

/* --extend: runs that ended before the did-not-converge limit without reaching their target are trained on to
 * it; with a checkpoint by --resume, without one from step 0 (the old directory kept as .short, its evaluations
 * reproduced); both equal to a run made directly with --steps 15 --schedule-steps 10. */
TEST(study_run_extend) {
    test_sentence_shards("study_", 4242, 20000, 2000);
    const char* t = test_tmpdir();
    const char* bin = test_mxlm_bin();
    /* target 0.5: never reached in 10 steps; limit 1.5 x 320 = 480 tokens = 15 steps */
    REQUIRE(test_sh("%s study run --out %s/ext --recipes bf16,mxfp4-fdw-h16 --seeds 1 --baseline bf16 --target 0.5 "
                    "--budget-factor 1.5 " STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin > %s/ext1.log 2>&1",
                    bin, t, t, t, t) == 0);
    char p[512];
    snprintf(p, sizeof p, "%s/ext/results.md", t);
    CHECK(file_has(p, "| mxfp4-fdw-h16 | yes | 0 / 1 / 1 | - | did not converge (1/1 seeds) (1 not run on to the limit) |"));
    CHECK(file_has(p, "(target not reached: did not converge; not run on to the limit)"));
    snprintf(p, sizeof p, "%s/ext/mxfp4-fdw-h16-s1/ckpt-00000010.bin", t);
    REQUIRE(remove(p) == 0); /* this one goes again from step 0 */
    REQUIRE(test_sh("%s study run --out %s/ext --recipes bf16,mxfp4-fdw-h16 --seeds 1 --baseline bf16 --target 0.5 "
                    "--budget-factor 1.5 --extend " STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin "
                    "> %s/ext2.log 2>&1", bin, t, t, t, t) == 0);
    CHECK(test_log_has("ext2", "[1/2] bf16 seed 1: finished, skipped"));
    CHECK(test_log_has("ext2", "--extend: 2 runs to train on"));
    CHECK(test_log_has("ext2", "bf16 seed 1: target 0.5 not reached by its end (320 tokens); on to 15 steps (480 tokens)\n"));
    CHECK(test_log_has("ext2", "[1/2] bf16 seed 1: extending "));
    CHECK(test_log_has("ext2", "[2/2] mxfp4-fdw-h16 seed 1: extending (from step 0; no checkpoint) "));
    CHECK(test_log_has("ext2", "[2/2] mxfp4-fdw-h16 seed 1: budget at step 15, 480 tokens"));
    CHECK(test_log_has("ext2", "6 evaluations identical, 0 different")); /* steps 0, 2, ..., 10 */
    snprintf(p, sizeof p, "%s/ext/results.md", t);
    CHECK(file_has(p, "| mxfp4-fdw-h16 | yes | 0 / 1 / 1 | - | did not converge (1/1 seeds) |"));
    mx_study s;
    snprintf(p, sizeof p, "%s/ext", t);
    REQUIRE(mx_study_load(p, &s) == 0);
    REQUIRE(s.n_runs == 2); /* mxfp4-fdw-h16-s1.short is not a run of the study */
    mx_study_opts o;
    mx_study_opts_default(&o);
    o.baseline = "bf16";
    o.target = 0.5;
    o.budget_factor = 1.5;
    REQUIRE(mx_study_compute(&s, &o) == 0);
    /* each equal to a run made directly with the extended length and the original schedule */
    for (int i = 0; i < 2; i++) {
        const mx_study_run* r = &s.runs[i];
        CHECK(!strcmp(r->status, "budget") && r->last_step == 15 && !r->short_run && !r->reached);
        REQUIRE(test_sh("%s train --recipe %s --seed 1 " STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin "
                        "--steps 15 --schedule-steps 10 --out %s/ext-direct-%d > %s/ext-direct.log 2>&1", bin, r->recipe,
                        t, t, t, i, t) == 0);
        char d[512];
        snprintf(d, sizeof d, "%s/ext-direct-%d", t, i);
        mx_study_run q;
        REQUIRE(mx_study_load_run(d, &q) == 0);
        REQUIRE(q.n_evals == r->n_evals);
        int same = 1;
        for (int e = 0; e < q.n_evals; e++) same &= q.evals[e].val_loss == r->evals[e].val_loss;
        CHECK(same);
        mx_study_run_free(&q);
    }
    mx_study_free(&s);
    /* nothing left to extend */
    REQUIRE(test_sh("%s study run --out %s/ext --recipes bf16,mxfp4-fdw-h16 --seeds 1 --baseline bf16 --target 0.5 "
                    "--budget-factor 1.5 --extend " STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin "
                    "> %s/ext3.log 2>&1", bin, t, t, t, t) == 0);
    CHECK(test_log_has("ext3", "--extend: 0 runs to train on"));
    /* an extension from step 0 cut short (its directory unfinished, the old run aside as .short): the next
     * invocation puts the old run back (the unfinished one aside as .failed1, which the report skips) */
    snprintf(p, sizeof p, "%s/ext/bf16-s1", t);
    char q[600];
    snprintf(q, sizeof q, "%s.short", p);
    REQUIRE(rename(p, q) == 0);
    REQUIRE(test_sh("mkdir -p %s && cp %s/config.txt %s/", p, q, p) == 0);
    REQUIRE(test_sh("%s study run --out %s/ext --recipes bf16,mxfp4-fdw-h16 --seeds 1 --baseline bf16 --target 0.5 "
                    "--budget-factor 1.5 " STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin > %s/ext5.log 2>&1",
                    bin, t, t, t, t) == 0);
    CHECK(test_log_has("ext5", "an extension from step 0 did not finish; the run it was to replace is back"));
    CHECK(test_log_has("ext5", "[1/2] bf16 seed 1: finished, skipped"));
    CHECK(test_sh("test -d %s.failed1 && ! test -e %s.short", p, p) == 0);
    snprintf(p, sizeof p, "%s/ext", t);
    REQUIRE(mx_study_load(p, &s) == 0);
    CHECK_EQ_INT(s.n_runs, 2);
    mx_study_free(&s);
    /* --extend without a finished baseline run: no limit to train on to, said, nothing extended, exit 0 */
    REQUIRE(test_sh("%s study run --out %s/ext_nb --recipes mxfp4-fdw-h16 --seeds 1 --target 0.5 " STUDY_TRAIN
                    " --train %s/study_train.bin --val %s/study_val.bin --extend > %s/ext6.log 2>&1", bin, t, t, t, t) == 0);
    CHECK(test_log_has("ext6", "no finished run of the baseline fp8, so no did-not-converge limit"));
    CHECK(test_log_has("ext6", "--extend: 0 runs to train on"));
    CHECK_EQ_INT(test_sh("%s study run --out %s/ext --recipes bf16 --target-rule median > %s/ext4.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("ext4", "--target-rule: 'median' is not seed or pooled"));
}

/* --parallel 2 on the CPU: two runs at a time, each with half the threads (--threads 2 -> 1 each) and its own
 * CUDA_VISIBLE_DEVICES slot; an interrupted run among them is resumed; the losses are those of a run alone.
 * (On a GPU host each slot is one GPU; that test is for the GPU machine, not here.) */
TEST(study_run_parallel) {
    test_sentence_shards("study_", 4242, 20000, 2000);
    const char* t = test_tmpdir();
    const char* bin = test_mxlm_bin();
    /* bf16 seed 2 interrupted at step 4 before the study starts */
    REQUIRE(test_sh("%s train --recipe bf16 --seed 2 " STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin "
                    "--halt-at 4 --out %s/par/bf16-s2 > %s/par_halt.log 2>&1", bin, t, t, t, t) == 0);
    /* the reference: bf16 seed 1 trained alone with 2 threads */
    REQUIRE(test_sh("%s train --recipe bf16 --seed 1 " STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin "
                    "--out %s/par_ref > %s/par_ref.log 2>&1", bin, t, t, t, t) == 0);
    REQUIRE(test_sh("%s study run --out %s/par --recipes bf16,mxfp4-fdw-h16 --seeds 1,2 --baseline bf16 --parallel 2 "
                    STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin > %s/par.log 2>&1", bin, t, t, t, t) == 0);
    CHECK(test_log_has("par", "[1/4] bf16 seed 1: training "));
    CHECK(test_log_has("par", "on slot 0 (CUDA_VISIBLE_DEVICES=0, --threads 1)"));
    CHECK(test_log_has("par", "[2/4] bf16 seed 2: resuming "));
    CHECK(test_log_has("par", "on slot 1 (CUDA_VISIBLE_DEVICES=1, --threads 1)"));
    CHECK(test_log_has("par", "[4/4] mxfp4-fdw-h16 seed 2: budget at step 10, 320 tokens"));
    /* two at a time: the second run started before the first one ended */
    char p[512];
    snprintf(p, sizeof p, "%s/par.log", t);
    size_t n = 0;
    char* lg = test_read_file(p, &n);
    REQUIRE(lg);
    const char *s2 = strstr(lg, "[2/4] bf16 seed 2: resuming"), *end1 = strstr(lg, ": budget at step 10");
    CHECK(s2 && end1 && s2 < end1);
    free(lg);
    mx_study s;
    snprintf(p, sizeof p, "%s/par", t);
    REQUIRE(mx_study_load(p, &s) == 0);
    REQUIRE(s.n_runs == 4);
    for (int i = 0; i < 4; i++) {
        CHECK(!strcmp(s.runs[i].status, "budget"));
        CHECK_EQ_INT(s.runs[i].n_evals, 6);
    }
    mx_study_run ref;
    snprintf(p, sizeof p, "%s/par_ref", t);
    REQUIRE(mx_study_load_run(p, &ref) == 0);
    const mx_study_run* b1 = run_named(&s, "bf16-s1");
    REQUIRE(b1 && ref.n_evals == 6);
    CHECK_SAME_F((float)b1->evals[5].val_loss, (float)ref.evals[5].val_loss); /* 1 thread in parallel = 2 threads alone */
    mx_study_run_free(&ref);
    /* study.txt records the slots (no CUDA_VISIBLE_DEVICES given: slot i is device i), and the report says
     * that the runs' tok/s were taken two at a time; with two slots on one device it says they measure nothing */
    snprintf(p, sizeof p, "%s/par/study.txt", t);
    CHECK(test_sh("grep -qx 'parallel = 2' %s && grep -Eq '^slots = [^,]+,[^,]+$' %s", p, p) == 0);
    char* md = mx_study_markdown(&s);
    REQUIRE(md);
    CHECK(strstr(md, "Up to 2 runs ran at a time, one per slot") != NULL);
    CHECK(strstr(md, "Not speed measurements") == NULL);
    free(md);
    mx_study_free(&s);
    REQUIRE(test_sh("cp %s %s.orig && printf 'parallel = 3\\nslots = 0,1,0\\n' >> %s", p, p, p) == 0);
    snprintf(p, sizeof p, "%s/par", t);
    REQUIRE(mx_study_load(p, &s) == 0);
    md = mx_study_markdown(&s);
    REQUIRE(md);
    CHECK(strstr(md, "**Not speed measurements.** Up to 3 runs of this study ran at a time with slots on the same "
                     "device (CUDA_VISIBLE_DEVICES per slot: 0,1,0;") != NULL);
    free(md);
    mx_study_free(&s);
    REQUIRE(test_sh("mv %s/par/study.txt.orig %s/par/study.txt", t, t) == 0);
    /* again: all four finished, skipped */
    REQUIRE(test_sh("%s study run --out %s/par --recipes bf16,mxfp4-fdw-h16 --seeds 1,2 --baseline bf16 --parallel 2 "
                    STUDY_TRAIN " --train %s/study_train.bin --val %s/study_val.bin > %s/par2.log 2>&1", bin, t, t, t, t) == 0);
    CHECK(test_log_has("par2", "[4/4] mxfp4-fdw-h16 seed 2: finished, skipped"));
    /* refused before anything runs (exit 2, a message, nothing created) */
    CHECK_EQ_INT(test_sh("%s study run --out %s/parbad --recipes bf16 --parallel 0 " STUDY_TRAIN " > %s/pb1.log 2>&1",
                         bin, t, t), 2);
    CHECK(test_log_has("pb1", "--parallel: '0' is not a number of runs at a time"));
    CHECK_EQ_INT(test_sh("%s study run --out %s/parbad --recipes bf16 --parallel two " STUDY_TRAIN " > %s/pb2.log 2>&1",
                         bin, t, t), 2);
    CHECK_EQ_INT(test_sh("%s study run --out %s/parbad --recipes bf16 --parallel 2 --gpus 2 " STUDY_TRAIN
                         " > %s/pb3.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("pb3", "does not combine with --gpus"));
    CHECK_EQ_INT(test_sh("CUDA_VISIBLE_DEVICES=3 %s study run --out %s/parbad --recipes bf16 --parallel 2 " STUDY_TRAIN
                         " > %s/pb4.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("pb4", "CUDA_VISIBLE_DEVICES=3 lists 1 device"));
    CHECK_EQ_INT(test_sh("%s study run --out %s/parbad --recipes bf16 --parallel 2 " STUDY_TRAIN
                         " --threads 0 > %s/pb5.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("pb5", "--threads 0: must be in [1, 4096]")); /* the shared check (cli.c) */
    /* empty list entries, a recipe or seed twice (one run directory each): refused */
    static const char* const lists[][2] = {
        {"--recipes ,bf16", "an empty entry"},          {"--recipes bf16,,fp8", "an empty entry"},
        {"--recipes bf16 --seeds 1,", "an empty entry"}, {"--recipes bf16,fp8,bf16", "share the run directory"},
        {"--recipes bf16 --recipe bf16", "share the run directory"}, {"--recipes bf16 --seeds 1,2,1", "seed 1 given twice"},
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        CHECKF(test_sh("%s study run --out %s/parbad %s " STUDY_TRAIN " > %s/pb6.log 2>&1", bin, t, lists[i][0], t) == 2,
               "%s: not exit 2", lists[i][0]);
        CHECKF(test_log_has("pb6", lists[i][1]), "%s: message", lists[i][0]);
    }
    struct stat st;
    snprintf(p, sizeof p, "%s/parbad", t);
    CHECK(stat(p, &st) != 0);
}

/* The study killed (SIGKILL) while its trainer is paused after the step-50 checkpoint (a test
 * crash point): the trainer goes with it (no orphan holds the run's lock), and the same command
 * continues the run from that checkpoint to the end. */
TEST(study_run_killed_resumes) {
    test_sentence_shards("study_", 4242, 20000, 2000);
    const char* t = test_tmpdir();
    const char* bin = test_mxlm_bin();
    char args[2048], dir[512];
    snprintf(args, sizeof args, "--out %s/killed --recipes bf16 --seeds 1 --baseline bf16 --vocab 256 --dim 32 --layers 1 "
             "--heads 1 --kv-heads 1 --ffn 64 --context 16 --batch 2 --val-tokens 64 --steps 100 --eval-every 25 "
             "--ckpt-every 50 --threads 1 --train %s/study_train.bin --val %s/study_val.bin", t, t, t);
    snprintf(dir, sizeof dir, "%s/killed/bf16-s1", t);
    REQUIRE(test_sh("exec 2>/dev/null; MXLM_TEST_CRASH=ckpt-pruned@50:pause %s study run %s > %s/killed1.log 2>&1 & "
                    "P=$!; i=0; while ! grep -q paused %s/train.log 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; "
                    "i=$((i+1)); done; C=$(sed -n 's/.*(pid \\([0-9]*\\)), paused.*/\\1/p' %s/train.log); "
                    "kill -9 $P; wait $P; s=$?; i=0; " /* then wait (10 s at most) for the trainer to end */
                    "while [ -n \"$C\" ] && [ -e /proc/$C ] && ! grep -q '^State:.*Z' /proc/$C/status && [ $i -lt 200 ]; "
                    "do sleep 0.05; i=$((i+1)); done; exit $s", bin, args, t, dir, dir) == 137);
    CHECK_EQ_INT(mx_study_run_state(dir), 1); /* started, not finished */
    char log[600];
    snprintf(log, sizeof log, "%s/train.log", dir);
    REQUIRE(file_has(log, "test crash point ckpt-pruned@50 reached (pid "));
    REQUIRE(test_sh("%s study run %s > %s/killed2.log 2>&1", bin, args, t) == 0);
    CHECK(test_log_has("killed2", "[1/1] bf16 seed 1: resuming"));
    CHECK_EQ_INT(mx_study_run_state(dir), 2);
    CHECK(file_has(log, "resumed from ") && file_has(log, "(step 50)"));
    mx_study_run r;
    REQUIRE(mx_study_load_run(dir, &r) == 0);
    CHECK(!strcmp(r.status, "budget"));
    CHECK_EQ_INT(r.n_train, 100);
    CHECK_EQ_INT(r.n_evals, 5); /* steps 0, 25, 50, 75, 100 */
    /* committed compressed (docs/results keeps metrics.jsonl.gz): the same run read back, finished */
    REQUIRE(test_sh("gzip -9n %s/metrics.jsonl && test -f %s/metrics.jsonl.gz && test ! -e %s/metrics.jsonl", dir, dir,
                    dir) == 0);
    CHECK_EQ_INT(mx_study_run_state(dir), 2);
    mx_study_run z;
    REQUIRE(mx_study_load_run(dir, &z) == 0);
    CHECK(!strcmp(z.status, "budget"));
    CHECK_EQ_INT(z.n_train, r.n_train);
    CHECK_EQ_INT(z.n_evals, r.n_evals);
    CHECK(z.n_evals == r.n_evals && !memcmp(z.evals, r.evals, (size_t)r.n_evals * sizeof *r.evals));
    CHECK(z.n_train_loss == r.n_train_loss && r.n_train_loss > 0 &&
          !memcmp(z.train_loss, r.train_loss, (size_t)r.n_train_loss * sizeof *r.train_loss));
    mx_study_run_free(&z);
    mx_study_run_free(&r);
}

/* A data-parallel run's budget counts every GPU's micro-batches (config.txt `gpus`, written when > 1). */
TEST(study_budget_counts_gpus) {
    const char* t = test_tmpdir();
    REQUIRE(test_sh("mkdir -p %s/dp/a %s/dp/b", t, t) == 0);
    REQUIRE(test_sh("printf 'recipe = fp8\\nbatch = 4\\nseq = 100\\naccum = 2\\nsteps = 10\\nseed = 1\\n' > %s/dp/a/config.txt",
                    t) == 0);
    REQUIRE(test_sh("printf 'recipe = fp8\\nbatch = 4\\nseq = 100\\naccum = 2\\nsteps = 10\\nseed = 1\\ngpus = 4\\n' > "
                    "%s/dp/b/config.txt", t) == 0);
    char d[512];
    mx_study_run a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    snprintf(d, sizeof d, "%s/dp/a", t);
    REQUIRE(mx_study_load_run(d, &a) == MX_OK);
    snprintf(d, sizeof d, "%s/dp/b", t);
    REQUIRE(mx_study_load_run(d, &b) == MX_OK);
    CHECK_EQ_INT(a.tokens_per_step, 800);
    CHECK_EQ_INT(a.budget_tokens, 8000);
    CHECK_EQ_INT(b.tokens_per_step, 3200);
    CHECK_EQ_INT(b.budget_tokens, 32000);
    mx_study_run_free(&a);
    mx_study_run_free(&b);
}

/* A PNG's chunks (signature, IHDR, IDAT, IEND, every CRC-32), inflated: rgb [h][w][3] (malloc'ed). */
static unsigned char* png_pixels(const unsigned char* png, size_t n, int* w, int* h) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 8 || memcmp(png, sig, 8)) return NULL;
    unsigned char* z = NULL;
    size_t zn = 0, k = 8;
    *w = *h = 0;
    int end = 0;
    while (k + 12 <= n && !end) {
        uint32_t len = (uint32_t)png[k] << 24 | (uint32_t)png[k + 1] << 16 | (uint32_t)png[k + 2] << 8 | png[k + 3];
        if (k + 12 + len > n) break;
        const unsigned char* type = png + k + 4;
        uint32_t crc = (uint32_t)png[k + 8 + len] << 24 | (uint32_t)png[k + 9 + len] << 16 |
                       (uint32_t)png[k + 10 + len] << 8 | png[k + 11 + len];
        if ((uint32_t)crc32(crc32(0L, Z_NULL, 0), type, len + 4) != crc) { free(z); return NULL; }
        if (!memcmp(type, "IHDR", 4)) {
            *w = (int)((uint32_t)type[4] << 24 | (uint32_t)type[5] << 16 | (uint32_t)type[6] << 8 | type[7]);
            *h = (int)((uint32_t)type[8] << 24 | (uint32_t)type[9] << 16 | (uint32_t)type[10] << 8 | type[11]);
            if (type[12] != 8 || type[13] != 2) { free(z); return NULL; } /* 8-bit RGB */
        } else if (!memcmp(type, "IDAT", 4)) {
            unsigned char* q = realloc(z, zn + len);
            if (!q) { free(z); return NULL; }
            z = q;
            memcpy(z + zn, type + 4, len);
            zn += len;
        } else if (!memcmp(type, "IEND", 4)) end = 1;
        k += 12 + len;
    }
    if (!end || *w <= 0 || *h <= 0) { free(z); return NULL; }
    uLongf rn = (uLongf)*h * (3 * (uLongf)*w + 1);
    unsigned char* raw = malloc(rn);
    unsigned char* rgb = malloc((size_t)*w * *h * 3);
    if (!raw || !rgb || uncompress(raw, &rn, z, zn) != Z_OK || rn != (uLongf)*h * (3 * (uLongf)*w + 1)) {
        free(z); free(raw); free(rgb);
        return NULL;
    }
    for (int y = 0; y < *h; y++) {
        if (raw[(size_t)y * (3 * *w + 1)] != 0) { free(z); free(raw); free(rgb); return NULL; } /* filter none */
        memcpy(rgb + (size_t)y * 3 * *w, raw + (size_t)y * (3 * *w + 1) + 1, 3 * (size_t)*w);
    }
    free(z);
    free(raw);
    return rgb;
}

/* PNG output (issue 19: mxlm plot --out FILE.png): mx_svg_png on a hand-written figure of the SVG the study
 * writes (a background, a clip rectangle, a thick line, a dashed line, a clipped polyline, a translucent
 * polygon, a disc, text), checked pixel by pixel; then `mxlm plot --out x.png` on a run. */
TEST(plot_png) {
    const char* svg =
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"60\" height=\"40\" viewBox=\"0 0 60 40\">\n"
        "<rect width=\"60\" height=\"40\" fill=\"#fff\"/>\n"
        "<clipPath id=\"c0\"><rect x=\"0\" y=\"0\" width=\"30\" height=\"40\"/></clipPath>\n"
        "<line x1=\"0\" y1=\"5\" x2=\"60\" y2=\"5\" stroke=\"#f00\" stroke-width=\"3\"/>\n"
        "<line x1=\"0\" y1=\"12.5\" x2=\"60\" y2=\"12.5\" stroke=\"#000\" stroke-dasharray=\"4,4\"/>\n"
        "<polyline clip-path=\"url(#c0)\" fill=\"none\" stroke=\"#0000ff\" stroke-width=\"3\" points=\"0,20 60,20 \"/>\n"
        "<polygon fill=\"#00ff00\" fill-opacity=\"0.5\" stroke=\"none\" points=\"40,30 50,30 50,38 40,38\"/>\n"
        "<circle cx=\"10\" cy=\"32\" r=\"3\" fill=\"#000\"><title>a dot</title></circle>\n"
        "<text x=\"20\" y=\"38\">A&amp;</text>\n"
        "</svg>\n";
    unsigned char* png = NULL;
    size_t n = 0;
    REQUIRE(mx_svg_png(svg, &png, &n) == 0);
    int w = 0, h = 0;
    unsigned char* px = png_pixels(png, n, &w, &h);
    REQUIRE(px);
    CHECK(w == 60 && h == 40);
#define PX(x, y, k) px[((size_t)(y) * w + (x)) * 3 + (k)]
    CHECK(PX(30, 5, 0) == 255 && PX(30, 5, 1) == 0 && PX(30, 5, 2) == 0);       /* the red line's middle */
    CHECK(PX(30, 1, 0) == 255 && PX(30, 1, 1) == 255 && PX(30, 1, 2) == 255);   /* white above it */
    CHECK(PX(1, 12, 0) < 128 && PX(5, 12, 0) == 255 && PX(9, 12, 0) < 128);   /* dashes 4 on, 4 off */
    CHECK(PX(15, 20, 2) == 255 && PX(15, 20, 0) == 0);                          /* blue inside the clip */
    CHECK(PX(45, 20, 0) == 255 && PX(45, 20, 2) == 255);                        /* clipped: white */
    CHECK(PX(45, 34, 0) == 128 && PX(45, 34, 1) == 255 && PX(45, 34, 2) == 128); /* green at half opacity */
    CHECK(PX(10, 32, 0) == 0);                                                  /* the disc */
    int ink = 0; /* "A&": glyph pixels in the text's box (x 20..31, rows 31..37) */
    for (int y = 31; y < 38; y++)
        for (int x = 20; x < 32; x++) ink += PX(x, y, 0) == 0;
    CHECK(ink > 15 && ink < 60);
#undef PX
    free(px);
    free(png);
    CHECK(mx_svg_png("<rect width=\"2\"/>", &png, &n) == MX_EINVAL && !png); /* no <svg> */
    CHECK(mx_svg_png("<svg width=\"4\" height=\"4\"><svg width=\"4\" height=\"4\"></svg></svg>", &png, &n) == MX_EINVAL &&
          !png); /* a second <svg> */
    CHECK(mx_svg_png("<svg width=\"4\" height=\"4\"><line x1=\"nan\" y1=\"1e300\" x2=\"-1e300\" y2=\"2\" "
                     "stroke=\"#000\"/></svg>", &png, &n) == 0); /* absurd coordinates: clamped, nothing drawn out of range */
    free(png);

    /* the CLI: a run's figure as PNG, the same size as its SVG; another extension is a usage error */
    fake_study();
    const char* t = test_tmpdir();
    REQUIRE(test_sh("%s plot %s/fake/fp8-s1 %s/fake/mxfp4-fdw-h16-s1 --telemetry --out %s/fig.png > %s/png.log 2>&1",
                    test_mxlm_bin(), t, t, t, t) == 0);
    char p[512];
    snprintf(p, sizeof p, "%s/fig.png", t);
    png = (unsigned char*)test_read_file(p, &n);
    REQUIRE(png);
    px = png_pixels(png, n, &w, &h);
    CHECK(px && w == 1000 && h > 500);
    int blue = 0; /* the first run's colour, #1f77b4 */
    for (int i = 0; px && i < w * h; i++) blue += px[3 * i] == 0x1f && px[3 * i + 1] == 0x77 && px[3 * i + 2] == 0xb4;
    CHECK(blue > 50);
    free(px);
    free(png);
    CHECK_EQ_INT(test_sh("%s plot %s/fake/fp8-s1 --out %s/fig.jpg > %s/png2.log 2>&1", test_mxlm_bin(), t, t, t), 2);
    CHECK(test_log_has("png2", "give a name ending in .svg or .png"));
    snprintf(p, sizeof p, "%s/fig.jpg", t);
    CHECK(access(p, F_OK) != 0);
}

/* tools/compare_runs.py (the GPU-vs-CPU curve check of tests/gpu/curves.sh): one pair is checked on its own
 * mean |train loss difference| and final validation difference; several pairs (seeds) on the means of
 * the two over the pairs. Pair 1 differs by 0.1 everywhere, pairs 2 and 3 by 0.01: pair 1 alone fails
 * tolerances 0.05 / 0.06, the three together pass (means 0.04), pair 1 twice fails; --tol-first holds each
 * pair's first steps to it (pair 1's 0.1 fails 0.05 where the means pass); --identical holds only
 * where every pair is the same bits; an odd number of runs is a usage error. */
TEST(compare_runs_pairs_of_seeds) {
    const double base[] = {8, 6, 5, 4.5, 4};
    double hi[5], lo[5];
    for (int i = 0; i < 5; i++) hi[i] = base[i] + 0.1, lo[i] = base[i] + 0.01;
    const double tps[] = {1000};
    fake_run("cmp", "a1", "fp8", 1, 4, base, 5, tps, 1, "budget");
    fake_run("cmp", "b1", "fp8", 1, 4, hi, 5, tps, 1, "budget");
    fake_run("cmp", "a2", "fp8", 2, 4, base, 5, tps, 1, "budget");
    fake_run("cmp", "b2", "fp8", 2, 4, lo, 5, tps, 1, "budget");
    fake_run("cmp", "a3", "fp8", 3, 4, base, 5, tps, 1, "budget");
    fake_run("cmp", "b3", "fp8", 3, 4, lo, 5, tps, 1, "budget");
    const char* t = test_tmpdir();
    const char* tol = "--tol-train 0.05 --tol-val 0.06 > /dev/null";
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a1 %s/cmp/b1 %s", t, t, tol), 1);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a2 %s/cmp/b2 %s", t, t, tol), 0);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a1 %s/cmp/b1 %s/cmp/a2 %s/cmp/b2 %s/cmp/a3 %s/cmp/b3 %s",
                         t, t, t, t, t, t, tol), 0);
    CHECK(test_sh("python3 tools/compare_runs.py %s/cmp/a1 %s/cmp/b1 %s/cmp/a2 %s/cmp/b2 %s/cmp/a3 %s/cmp/b3 --tol-train "
                  "0.05 --tol-val 0.06 | tail -1 | grep -q '^PASS: mean over 3 pairs: mean |train loss diff| 0.04 .*"
                  "final |val diff| 0.04 '", t, t, t, t, t, t) == 0);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a1 %s/cmp/b1 %s/cmp/a1 %s/cmp/b1 %s", t, t, t, t, tol), 1);
    /* --tol-first: every pair's first steps; pair 1's 0.1 fails 0.05 though the means pass, 0.2 holds */
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a1 %s/cmp/b1 %s/cmp/a2 %s/cmp/b2 %s/cmp/a3 %s/cmp/b3 "
                         "--tol-first 0.05 %s", t, t, t, t, t, t, tol), 1);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a1 %s/cmp/b1 %s/cmp/a2 %s/cmp/b2 %s/cmp/a3 %s/cmp/b3 "
                         "--tol-first 0.2 %s", t, t, t, t, t, t, tol), 0);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a2 %s/cmp/b2 --tol-first 0.005 %s", t, t, tol), 1);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a2 %s/cmp/b2 --tol-first 0.02 %s", t, t, tol), 0);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a2 %s/cmp/a2 %s/cmp/a3 %s/cmp/a3 --identical > /dev/null",
                         t, t, t, t), 0);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a2 %s/cmp/a2 %s/cmp/a2 %s/cmp/b2 --identical > /dev/null",
                         t, t, t, t), 1);
    CHECK_EQ_INT(test_sh("python3 tools/compare_runs.py %s/cmp/a1 %s/cmp/b1 %s/cmp/a2 2> /dev/null", t, t, t), 2);
}

/* ---- mxlm study sizes ---------------------------------------------------------------------------------------- */

/* One size of the sizes tests: TMP/sizes_<name>/, the tiny preset at width `dim` (FFN 3 dim), fp8 and recipe[r] for
 * seeds 1..3 (a[r][s] NAN: no run of that seed), 10 steps x 100 tokens, the straight curves
 *   fp8     L(t) = 8 + c_s - 0.005 t        (c = 0, 0.1, -0.1), evaluated at t = 0, 100, ..., 1000
 *   recipe  L(t) = 8 + c_s + a - 0.005 t
 * fp8's target is its loss at 800 tokens (80% of 1000), 4 + c_s, reached at 800; the recipe reaches it at
 * 800 + 200 a (on a straight line the interpolation is exact): a paired overhead of a / 4, and a final-loss
 * difference of a; a > 1 does not get there in its 1000 tokens (did not converge, not run on to the limit). */
static void sizes_study(const char* name, int dim, const char* const* recipe, const double (*a)[3], int nr) {
    char model[256], study[64];
    snprintf(model, sizeof model, "preset = tiny\nvocab = 4096\ndim = %d\nlayers = 4\nheads = 4\nkv-heads = 2\n"
                                  "ffn = %d\ncontext = 128\n", dim, 3 * dim);
    snprintf(study, sizeof study, "sizes_%s", name);
    const double c[3] = {0, 0.1, -0.1}, tp[] = {100};
    for (int r = -1; r < nr; r++)
        for (int s = 0; s < 3; s++) {
            if (r >= 0 && isnan(a[r][s])) continue;
            double loss[11];
            for (int i = 0; i <= 10; i++) loss[i] = 8 + c[s] + (r >= 0 ? a[r][s] : 0) - 0.5 * i;
            char run[128];
            snprintf(run, sizeof run, "%s-s%d", r >= 0 ? recipe[r] : "fp8", s + 1);
            fake_run_of(model, study, run, r >= 0 ? recipe[r] : "fp8", s + 1, 10, loss, 11, tp, 1, "budget");
        }
}

/* Three sizes (written once):
 *   s (dim 64, 197184 non-embedding parameters): h16 a = 0.2, 0.4, 0.6; rh16 0.3, 0.4, 0.8; h32 seed 1 only, 0.4
 *   m (dim 128, 787584): h16 0.1, 0.1, 0.4; bf16+fdw:fmt=mxfp4,had=h16 (MXFP4 with H16 written out) seed 1, 0.3
 *   l (dim 256, 3148032): h16 0.2, 1.5 (did not converge), 0.6; rh16 0.5, 0.5, 0.8; sr 2, 2.5, 3 (none converged)
 * and sizes_running (an fp8 run without a status line: nothing finished), sizes_other (baseline bf16). */
static void sizes_studies(void) {
    static int done;
    if (done) return;
    done = 1;
    static const char* const sr[3] = {"mxfp4-fdw-h16", "mxfp4-fdw-rh16", "mxfp4-fdw-h32"};
    static const double sa[3][3] = {{0.2, 0.4, 0.6}, {0.3, 0.4, 0.8}, {0.4, NAN, NAN}};
    sizes_study("s", 64, sr, sa, 3);
    static const char* const mr[2] = {"mxfp4-fdw-h16", "bf16+fdw:fmt=mxfp4,had=h16"}; /* a name with ':' */
    static const double ma[2][3] = {{0.1, 0.1, 0.4}, {0.3, NAN, NAN}};
    sizes_study("m", 128, mr, ma, 2);
    static const char* const lr[3] = {"mxfp4-fdw-h16", "mxfp4-fdw-rh16", "mxfp4-fdw-sr"};
    static const double la[3][3] = {{0.2, 1.5, 0.6}, {0.5, 0.5, 0.8}, {2, 2.5, 3}};
    sizes_study("l", 256, lr, la, 3);
    const char* t = test_tmpdir();
    REQUIRE(test_sh("printf 'machine = box A\\nbaseline = fp8\\nmachine = box A\\nmachine = box B\\n' > %s/sizes_s/study.txt",
                    t) == 0);
    const double run[] = {8, 7, 6}, tp[] = {100};
    fake_run("sizes_running", "fp8-s1", "fp8", 1, 10, run, 3, tp, 1, NULL);
    const double other[] = {8, 7, 6, 5, 4, 3, 3, 3, 3, 3, 3};
    fake_run("sizes_other", "bf16-s1", "bf16", 1, 10, other, 11, tp, 1, "budget");
    REQUIRE(test_sh("echo 'baseline = bf16' > %s/sizes_other/study.txt", t) == 0);
}

/* Two-sided p of Student's t with 2 degrees of freedom: 1 - |t| / sqrt(2 + t^2). */
static double t_p2(double t) { return 1 - fabs(t) / sqrt(2 + t * t); }

TEST(study_sizes_tables) {
    sizes_studies();
    const char* t = test_tmpdir();
    char d[3][512];
    const char* labels[3] = {"l", "s", "m"}; /* columns in this order; the figure by parameters */
    const char* dirs[3] = {d[0], d[1], d[2]};
    for (int i = 0; i < 3; i++) snprintf(d[i], sizeof d[i], "%s/sizes_%s", t, labels[i]);
    mx_sizes z;
    REQUIRE(mx_sizes_load(&z, labels, dirs, 3, NULL, 0) == 0);
    CHECK(z.n_sizes == 3 && z.n_loaded == 3 && !strcmp(z.baseline, "fp8"));
    CHECK_EQ_INT(z.sizes[0].params, 3148032);
    CHECK_EQ_INT(z.sizes[1].params, 197184);
    CHECK_EQ_INT(z.sizes[2].params, 787584);
    /* the studies as `study report` computes them: s's h16 overheads 0.05, 0.10, 0.15, final-loss differences a */
    const mx_study_recipe* R;
    REQUIRE((R = recipe_named(&z.sizes[1].study, "mxfp4-fdw-h16")));
    CHECK_EQ_INT(R->n_pairs, 3);
    CHECK_NEAR(R->p_overhead.mean, 0.1, 1e-9);
    CHECK_NEAR(R->p_overhead.sd, 0.05, 1e-9);
    CHECK_NEAR(R->d_final.mean, 0.4, 1e-9);
    CHECK_NEAR(R->d_final.se, 0.2 / sqrt(3.0), 1e-9);
    char* md = mx_sizes_markdown(&z, NULL, 0);
    REQUIRE(md);
    /* the setup: model, parameters, tokens, seeds, the distinct machine lines */
    CHECK(strstr(md, "- **s** (`") && strstr(md, "/sizes_s`): tiny: V 4096 D 64 L 4 H 4/2 (head dim 16) F 192 T 128"));
    CHECK(strstr(md, "; 197184 parameters without the embedding and head (721472 in all); 1000 tokens per run (10 steps "
                     "x 100 tokens); seeds 1,2,3 (10 runs, 4 recipes); machine: box A; box B.\n"));
    CHECK(strstr(md, "(7 runs, 3 recipes); machine: not recorded.\n"));
    /* rows: l's recipes, then s's h32 (the order they first appear); columns l, s, m */
    CHECK(strstr(md, "## Paired token overhead vs fp8\n"));
    const char* h16 = strstr(md, "| mxfp4-fdw-h16 | +10.0% ± 7.1% (se 5.0%, n 2); 1/3 did not converge (1 not run on to "
                                 "the limit) | +10.0% ± 5.0% (se 2.9%, n 3) | +5.0% ± 4.3% (se 2.5%, n 3) |\n");
    const char* rh16 = strstr(md, "| mxfp4-fdw-rh16 | +15.0% ± 4.3% (se 2.5%, n 3) | +12.5% ± 6.6% (se 3.8%, n 3) | - |\n");
    const char* sr = strstr(md, "| mxfp4-fdw-sr | did not converge (3/3 seeds) (3 not run on to the limit) | - | - |\n");
    const char* h32 = strstr(md, "| mxfp4-fdw-h32 | - | +10.0% (n 1) | - |\n");
    CHECK(strstr(md, "| recipe | l | s | m |\n|---|---|---|---|\n"));
    CHECK(h16 && rh16 && sr && h32 && h16 < rh16 && rh16 < sr && sr < h32);
    CHECK(!strstr(md, "| fp8 |")); /* the baseline is no row */
    /* final loss - fp8's with p: s 0.2, 0.4, 0.6 (t = 0.4 / (0.2 / sqrt 3) = 2 sqrt 3); m 0.1, 0.1, 0.4 (t = 2) */
    char want[512];
    snprintf(want, sizeof want, "| mxfp4-fdw-h16 | +0.7667 ± 0.6658 (se 0.3844, n 3); p %.3f | +0.4000 ± 0.2000 "
             "(se 0.1155, n 3); p %.3f | +0.2000 ± 0.1732 (se 0.1000, n 3); p %.3f |\n",
             t_p2((2.3 / 3) / (sqrt(798.0 / 1800) / sqrt(3.0))), t_p2(2 * sqrt(3.0)), t_p2(2.0));
    CHECK(strstr(md, want));
    CHECK(strstr(md, "; p 0.074 |") && strstr(md, "; p 0.184 |\n")); /* 1 - 2 sqrt 3 / sqrt 14, 1 - 2 / sqrt 6 */
    snprintf(want, sizeof want, "| mxfp4-fdw-sr | +2.5000 ± 0.5000 (se 0.2887, n 3); p %.3f | - | - |\n", t_p2(5 * sqrt(3.0)));
    CHECK(strstr(md, want)); /* none reached the target; all three loss-paired: t = 2.5 / (0.5 / sqrt 3) */
    CHECK(strstr(md, "| mxfp4-fdw-sr | +2.5000 ± 0.5000 (se 0.2887, n 3); p 0.013 | - | - |\n"));
    CHECK(strstr(md, "| mxfp4-fdw-h32 | - | +0.4000 (n 1); p - | - |\n"));
    /* the default contrasts: h16 - rh16 by seed, s: -0.1, 0, -0.2 (t = -sqrt 3); l: -0.3, 1.0, -0.2; h32 - h16 s1 */
    snprintf(want, sizeof want, "| mxfp4-fdw-h16 - mxfp4-fdw-rh16 | +0.1667 ± 0.7234 (se 0.4177, n 3); p %.3f | -0.1000 "
             "± 0.1000 (se 0.0577, n 3); p %.3f | - |\n", t_p2((0.5 / 3) / (sqrt(942.0 / 1800) / sqrt(3.0))), t_p2(sqrt(3.0)));
    CHECK(strstr(md, want));
    CHECK(strstr(md, "-0.1000 ± 0.1000 (se 0.0577, n 3); p 0.225 |")); /* 1 - sqrt 3 / sqrt 5 */
    CHECK(strstr(md, "| mxfp4-fdw-h32 - mxfp4-fdw-h16 | - | +0.2000 (n 1); p - | - |\n"));
    CHECK(!strstr(md, "Not at any size"));
    CHECK(strstr(md, "## Definitions\n") && strstr(md, "se = sd / sqrt(n)"));
    free(md);
    /* given contrasts, one with a name no size has (a note), one no size has both of (the same note) */
    const char* con[3] = {"mxfp4-fdw-rh16:mxfp4-fdw-h16", "nonesuch:fp8", "mxfp4-fdw-sr:mxfp4-fdw-h32"};
    REQUIRE((md = mx_sizes_markdown(&z, con, 3)));
    CHECK(strstr(md, "| mxfp4-fdw-rh16 - mxfp4-fdw-h16 | -0.1667 ± 0.7234 (se 0.4177, n 3); p "));
    CHECK(strstr(md, "\nNot at any size: nonesuch:fp8, mxfp4-fdw-sr:mxfp4-fdw-h32.\n"));
    CHECK(!strstr(md, "| mxfp4-fdw-h32 - mxfp4-fdw-h16 |"));
    free(md);
    /* A:B where A holds ':' itself: split where both sides are recipes of one size (m: seed 1, 0.3 - 0.1) */
    const char* colon[1] = {"bf16+fdw:fmt=mxfp4,had=h16:mxfp4-fdw-h16"};
    REQUIRE((md = mx_sizes_markdown(&z, colon, 1)));
    CHECK(strstr(md, "| bf16+fdw:fmt=mxfp4,had=h16 - mxfp4-fdw-h16 | - | - | +0.2000 (n 1); p - |\n"));
    CHECK(strstr(md, "| bf16+fdw:fmt=mxfp4,had=h16 | - | - | +7.5% (n 1) |\n")); /* a row of its own, last */
    free(md);
    /* the figure: ticks by parameters (s, m, l), a hollow marker where a seed did not converge, an x where none did */
    char* svg = mx_sizes_svg(&z);
    REQUIRE(svg);
    const char *ts = strstr(svg, ">s (197k)</text>"), *tm = strstr(svg, ">m (788k)</text>"),
               *tl = strstr(svg, ">l (3.15M)</text>");
    CHECK(ts && tm && tl && ts < tm && tm < tl);
    CHECK(strstr(svg, "fill=\"#fff\" stroke=\"#1f77b4\" stroke-width=\"1.5\"><title>mxfp4-fdw-h16 at l: +10.0% ± 7.1% "
                      "(se 5.0%, n 2); 1/3 did not converge (1 not run on to the limit)</title></circle>"));
    CHECK(strstr(svg, "<title>mxfp4-fdw-sr at l: did not converge (3/3 seeds) (3 not run on to the limit)</title></path>"));
    CHECK(strstr(svg, "<title>mxfp4-fdw-h32 at s: +10.0% (n 1)</title></circle>"));
    CHECK(strstr(svg, ">paired token overhead vs fp8 (%)</text>") && strstr(svg, "</svg>\n"));
    free(svg);
    mx_sizes_free(&z);

    /* a size with nothing finished: an error naming it, or skipped with a note; differing baselines; none left */
    const char* l2[2] = {"s", "run"};
    char drun[512], doth[512];
    snprintf(drun, sizeof drun, "%s/sizes_running", t);
    snprintf(doth, sizeof doth, "%s/sizes_other", t);
    const char* d2[2] = {d[1], drun};
    CHECK(mx_sizes_load(&z, l2, d2, 2, NULL, 0) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "run (") && strstr(mx_last_error(), "sizes_running): no finished run (1 started)"));
    REQUIRE(mx_sizes_load(&z, l2, d2, 2, NULL, 1) == 0);
    CHECK(z.n_loaded == 1 && !z.sizes[1].loaded);
    REQUIRE((md = mx_sizes_markdown(&z, NULL, 0)));
    CHECK(strstr(md, "/sizes_running`): skipped (--allow-missing): no finished run (1 started).\n"));
    CHECK(strstr(md, "| recipe | s |\n"));
    free(md);
    mx_sizes_free(&z);
    d2[1] = doth;
    CHECK(mx_sizes_load(&z, l2, d2, 2, NULL, 0) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "the sizes' baselines differ (s: fp8, run: bf16); give --baseline"));
    d2[0] = drun;
    CHECK(mx_sizes_load(&z, l2, d2, 1, NULL, 1) == MX_EINVAL);
    CHECK(strstr(mx_last_error(), "none of the 1 sizes"));
}

TEST(study_sizes_command) {
    sizes_studies();
    const char* t = test_tmpdir();
    const char* bin = test_mxlm_bin();
    char sizes[2048];
    snprintf(sizes, sizeof sizes, "s=%s/sizes_s m=%s/sizes_m l=%s/sizes_l", t, t, t);
    REQUIRE(test_sh("%s study sizes --out %s/sz.md --svg %s/sz.svg %s > %s/sz1.log 2>&1", bin, t, t, sizes, t) == 0);
    CHECK(test_log_has("sz1", "study sizes: 3 sizes (0 skipped), baseline fp8; wrote "));
    char md[512], svg[512];
    snprintf(md, sizeof md, "%s/sz.md", t);
    snprintf(svg, sizeof svg, "%s/sz.svg", t);
    CHECK(file_has(md, "| recipe | s | m | l |\n"));
    CHECK(file_has(md, "| mxfp4-fdw-h16 | +10.0% ± 5.0% (se 2.9%, n 3) | +5.0% ± 4.3% (se 2.5%, n 3) | +10.0% ± 7.1% "
                       "(se 5.0%, n 2); 1/3 did not converge (1 not run on to the limit) |\n"));
    CHECK(file_has(md, "| mxfp4-fdw-sr | - | - | did not converge (3/3 seeds) (3 not run on to the limit) |\n"));
    CHECK(file_has(svg, ">s (197k)</text>"));
    /* the same input, the same bytes; standard output without --out is the same Markdown */
    REQUIRE(test_sh("%s study sizes --svg %s/sz2.svg %s > %s/sz2.md 2> %s/sz2.log", bin, t, sizes, t, t) == 0);
    CHECK_EQ_INT(test_sh("cmp -s %s/sz.svg %s/sz2.svg && cmp -s %s/sz.md %s/sz2.md", t, t, t, t), 0);
    /* --baseline and --contrast A:B (a recipe name may hold ':'; the split is where both sides are recipes) */
    REQUIRE(test_sh("%s study sizes --baseline fp8 --contrast mxfp4-fdw-rh16:mxfp4-fdw-h16 %s > %s/sz3.log 2>&1", bin, sizes,
                    t) == 0);
    CHECK(test_log_has("sz3", "| mxfp4-fdw-rh16 - mxfp4-fdw-h16 | +0.1000 ± 0.1000 (se 0.0577, n 3); p 0.225 | - |"));
    CHECK(!test_log_has("sz3", "| mxfp4-fdw-h16 - mxfp4-fdw-rh16 |")); /* given contrasts replace the defaults */
    /* --recipes: the rows, in the order given (the baseline never one); a name no size ran: exit 1, nothing written */
    REQUIRE(test_sh("%s study sizes --recipes mxfp4-fdw-sr,fp8,mxfp4-fdw-h16 --svg %s/szr.svg %s > %s/szr.log 2>&1", bin, t,
                    sizes, t) == 0);
    CHECK(test_log_has("szr", "| recipe | s | m | l |\n|---|---|---|---|\n| mxfp4-fdw-sr | - | - | did not converge"));
    CHECK(test_log_has("szr", "|\n| mxfp4-fdw-h16 | +10.0% ± 5.0% (se 2.9%, n 3) |"));
    CHECK(!test_log_has("szr", "| mxfp4-fdw-rh16 |"));
    CHECK(!test_log_has("szr", "| fp8 |"));
    snprintf(svg, sizeof svg, "%s/szr.svg", t);
    CHECK(file_has(svg, ">mxfp4-fdw-h16</text>") && !file_has(svg, ">mxfp4-fdw-rh16</text>"));
    REQUIRE(test_sh("rm -f %s/szx.md", t) == 0);
    CHECK_EQ_INT(test_sh("%s study sizes --recipes mxfp4-fdw-h16,nvfp4 --out %s/szx.md %s > %s/szr2.log 2>&1", bin, t,
                         sizes, t), 1);
    CHECK(test_log_has("szr2", "--recipes: nvfp4 was run at none of the sizes"));
    CHECK_EQ_INT(test_sh("test -e %s/szx.md", t), 1);
    /* a missing folder: exit 1 naming it, nothing written; --allow-missing: a note */
    REQUIRE(test_sh("rm -f %s/szx.md %s/szx.svg", t, t) == 0);
    CHECK_EQ_INT(test_sh("%s study sizes --out %s/szx.md --svg %s/szx.svg %s xl=%s/nothing-here > %s/sz4.log 2>&1", bin, t,
                         t, sizes, t, t), 1);
    CHECK(test_log_has("sz4", "mxlm study sizes: xl (") && test_log_has("sz4", "nothing-here): study: "));
    CHECK(test_log_has("sz4", "cannot open"));
    CHECK_EQ_INT(test_sh("test -e %s/szx.md || test -e %s/szx.svg", t, t), 1);
    CHECK_EQ_INT(test_sh("%s study sizes --out %s/szx.md s=%s/sizes_s r=%s/sizes_running > %s/sz5.log 2>&1", bin, t, t, t,
                         t), 1);
    CHECK(test_log_has("sz5", "r (") && test_log_has("sz5", "no finished run (1 started)"));
    CHECK_EQ_INT(test_sh("test -e %s/szx.md", t), 1);
    REQUIRE(test_sh("%s study sizes --allow-missing --out %s/szx.md %s xl=%s/nothing-here > %s/sz6.log 2>&1", bin, t, sizes,
                    t, t) == 0);
    CHECK(test_log_has("sz6", "4 sizes (1 skipped)"));
    snprintf(md, sizeof md, "%s/szx.md", t);
    CHECK(file_has(md, "/nothing-here`): skipped (--allow-missing): study: "));
    CHECK(file_has(md, "| recipe | s | m | l |\n"));
    /* a destination that cannot be written (its folder missing): exit 1 naming it, and the other file not
     * written either, whichever of the two fails */
    REQUIRE(test_sh("rm -f %s/szx.md %s/szx.svg", t, t) == 0);
    CHECK_EQ_INT(test_sh("%s study sizes --out %s/no-dir/a.md --svg %s/szx.svg %s > %s/sz7.log 2>&1", bin, t, t, sizes, t), 1);
    CHECK(test_log_has("sz7", "no-dir/a.md") && test_log_has("sz7", "(nothing written)"));
    CHECK_EQ_INT(test_sh("test -e %s/szx.svg", t), 1);
    CHECK_EQ_INT(test_sh("%s study sizes --out %s/szx.md --svg %s/no-dir/a.svg %s > %s/sz8.log 2>&1", bin, t, t, sizes, t), 1);
    CHECK(test_log_has("sz8", "no-dir/a.svg"));
    CHECK_EQ_INT(test_sh("test -e %s/szx.md", t), 1);
    CHECK_EQ_INT(test_sh("ls %s | grep -q 'szx\\.'", t), 1); /* no temporary left behind either */
    /* usage errors: exit 2, a message, nothing written */
    static const char* bad[][2] = {
        {"", "give at least one LABEL=DIR"},
        {"nolabel", "give LABEL=DIR"},
        {"=dir", "give LABEL=DIR"},
        {"s=", "give LABEL=DIR"},
        {"'a|b=dir'", "without '|'"},
        {"s=a s=b", "the label s given twice"},
        {"--contrast abc s=a", "--contrast 'abc': give A:B"},
        {"--contrast :b s=a", "give A:B"},
        {"--contrast a: s=a", "give A:B"},
        {"--bogus s=a", "unknown option '--bogus'"},
        {"--baseline '' s=a", "--baseline: an empty recipe name"},
        {"--recipes a,,b s=a", "--recipes 'a,,b': an empty recipe name"},
        {"--recipes a,b,a s=a", "--recipes: a given twice"},
        {"s=a --svg", "--svg needs a value"},
        {"--svg SAME --out SAME s=a", "name the same file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1200];
        if (strstr(bad[i][0], "SAME")) snprintf(args, sizeof args, "--svg %s/szu.md --out %s/szu.md s=a", t, t);
        else snprintf(args, sizeof args, "--out %s/szu.md %s", t, bad[i][0]);
        REQUIRE(test_sh("rm -f %s/szu.md", t) == 0);
        CHECKF(test_sh("%s study sizes %s > %s/szu.log 2>&1", bin, args, t) == 2, "exit status of: %s", args);
        CHECKF(test_log_has("szu", bad[i][1]), "%s: no '%s'", args, bad[i][1]);
        CHECK_EQ_INT(test_sh("test -e %s/szu.md", t), 1);
    }
    /* mxlm study --help lists it */
    REQUIRE(test_sh("%s study --help > %s/szh.log 2>&1", bin, t) == 0);
    CHECK(test_log_has("szh", "mxlm study sizes [--out FILE.md] [--svg FILE.svg]"));
}

/* The two committed H200 studies side by side: the numbers of their own results.md (Table 1's paired grid, the
 * paired differences, "Recipe against recipe"), and nothing written into them. */
TEST(study_sizes_real_studies) {
    const char* t = test_tmpdir();
    const char* r60 = "docs/results/study-60m-33m-h200/results.md";
    size_t n0 = 0, n1 = 0;
    char* before = test_read_file(r60, &n0);
    REQUIRE(before);
    REQUIRE(test_sh("%s study sizes --out %s/real_sizes.md --svg %s/real_sizes.svg 20m=docs/results/study-20m-16m-h200 "
                    "60m=docs/results/study-60m-33m-h200 > %s/real_sizes.log 2>&1", test_mxlm_bin(), t, t, t) == 0);
    char md[512];
    snprintf(md, sizeof md, "%s/real_sizes.md", t);
    CHECK(file_has(md, "- **60m** (`docs/results/study-60m-33m-h200`): 60m: V 50304 D 512 L 20 H 8/4 (head dim 64) F 1536 "
                       "T 1024, rope theta 500000, eps 1e-05; 62935552 parameters without the embedding and head "
                       "(114446848 in all); 32768000 tokens per run (2000 steps x 16384 tokens); seeds 1,2,3 (18 runs, "
                       "6 recipes); machine: NVIDIA H200, "));
    CHECK(file_has(md, "| mxfp4-fdw-h16 | +8.4% ± 4.2% (se 2.9%, n 2); 1/3 did not converge (1 not run on to the limit) | "
                       "+5.6% ± 4.3% (se 2.5%, n 3) |\n"));
    CHECK(file_has(md, "| mxfp4-fdw | +12.5% ± 10.1% (se 5.8%, n 3) | did not converge (3/3 seeds) (3 not run on to the "
                       "limit) |\n"));
    CHECK(file_has(md, "| mxfp4-fdw-h16 | +0.0736 ± 0.0719 (se 0.0415, n 3); p 0.218 | +0.0285 ± 0.0201 (se 0.0116, n 3); "
                       "p 0.133 |\n"));
    CHECK(file_has(md, "| mxfp4-fdw-h16 - mxfp4-fdw-rh16 | +0.0755 ± 0.0518 (se 0.0299, n 3); p 0.127 | -0.0130 ± 0.0169 "
                       "(se 0.0098, n 3); p 0.315 |\n"));
    CHECK(file_has(md, "| mxfp4-fdw-h32 - mxfp4-fdw-h16 | -0.1129 ± 0.0294 (se 0.0170, n 3); p 0.022 | - |\n"));
    char* after = test_read_file(r60, &n1);
    CHECK(after && n0 == n1 && !memcmp(before, after, n0));
    free(before);
    free(after);
}
