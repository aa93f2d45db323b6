/* plot.c: ./mxlm plot RUN... - training and validation loss against tokens
 * of any run directories (and their per-GEMM telemetry) as one SVG file,
 * drawn with the study report's renderer (mx_plot_svg, src/study/plot.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "mxlm/mx.h"
#include "mxlm/study.h"

static const char* k_usage =
    "RUN... [--out FILE.svg|FILE.png] [--telemetry] [--title TEXT]\n"
    "  One figure of the training loss (thin lines) and validation loss (thick, with dots) against tokens of\n"
    "  every RUN (run directories of mxlm train: config.txt + metrics.jsonl; runs being written are fine),\n"
    "  one colour each; --telemetry adds a panel per run that logged telemetry (--telemetry-every): the mean\n"
    "  SQNR of each GEMM operand against tokens. SVG, or PNG when the name ends in .png (the same figure,\n"
    "  rasterized by mxlm itself). Written atomically; exit status 0, 1 (a run cannot be read, the file\n"
    "  cannot be written), 2 usage error.";

int cmd_plot(int argc, char** argv) {
    const char *out = "plot.svg", *title = NULL;
    int telemetry = 0;
    const cli_opt opts[] = {
        {"out", OPT_PATH, &out, "the file to write: .svg or .png (default plot.svg)"},
        {"telemetry", OPT_FLAG, &telemetry, "add the per-GEMM telemetry of the runs that have it"},
        {"title", OPT_STR, &title, "the figure's title"},
    };
    char* pos[64];
    int npos = 0;
    int rc = cli_parse(argc, argv, "plot", k_usage, opts, (int)(sizeof opts / sizeof opts[0]), pos, &npos);
    if (rc) return rc == 1 ? 0 : rc;
    if (npos < 1) { fprintf(stderr, "mxlm plot: give one or more run directories (see mxlm plot --help)\n"); return 2; }
    size_t ol = strlen(out);
    const int png = ol >= 5 && !strcmp(out + ol - 4, ".png");
    if (ol < 5 || (strcmp(out + ol - 4, ".svg") && !png)) {
        fprintf(stderr, "mxlm plot: --out %s: give a name ending in .svg or .png\n", out);
        return 2;
    }
    mx_study_run* runs = calloc((size_t)npos, sizeof *runs);
    if (!runs) return 1;
    int n = 0;
    rc = 0;
    for (int i = 0; i < npos && !rc; i++) {
        if (mx_study_load_run(pos[i], &runs[i])) {
            fprintf(stderr, "mxlm plot: %s (not a run directory?)\n", mx_last_error());
            rc = 1;
        } else n++;
    }
    char* svg = rc ? NULL : mx_plot_svg(runs, n, telemetry, title);
    if (!rc && !svg) { fprintf(stderr, "mxlm plot: out of memory\n"); rc = 1; }
    unsigned char* img = NULL;
    size_t img_n = 0;
    if (!rc && png && mx_svg_png(svg, &img, &img_n)) { fprintf(stderr, "mxlm plot: %s\n", mx_last_error()); rc = 1; }
    if (!rc && cli_write_file_atomic(out, png ? (const char*)img : svg, png ? img_n : strlen(svg))) rc = 1;
    free(img);
    if (!rc) {
        int with_tele = 0;
        for (int i = 0; i < n; i++) {
            const mx_study_run* r = &runs[i];
            double last = r->n_evals ? r->evals[r->n_evals - 1].val_loss : 0;
            printf("%s: %s, %d training lines, %d evaluations", r->dir, r->recipe, r->n_train_loss, r->n_evals);
            if (r->n_evals) printf(", last val loss %.4f at %lld tokens", last, (long long)r->evals[r->n_evals - 1].tokens);
            if (r->n_tele) printf(", telemetry at %d steps", r->n_tele);
            printf("%s%s\n", r->status[0] ? ", " : " (running or stopped)", r->status);
            with_tele += r->n_tele > 0;
        }
        if (telemetry && !with_tele) fprintf(stderr, "mxlm plot: note: no run has telemetry (train with --telemetry-every N)\n");
        printf("wrote %s\n", out);
    }
    free(svg);
    for (int i = 0; i < n; i++) mx_study_run_free(&runs[i]);
    free(runs);
    return rc;
}
