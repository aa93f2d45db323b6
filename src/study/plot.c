/* plot.c: the figure of `mxlm plot` (study.h): the loss curves of any run
 * directories against tokens, and their telemetry, drawn with the study
 * report's SVG renderer (src/study/study.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/study.h"
#include "study/internal.h"


static char* take(mx_sbuf* b) {
    if (b->oom) { free(b->s); return NULL; }
    return b->s;
}

/* The loss panel's ranges: x over every point; y from the lowest point to the highest one after the start
 * (step 0's validation loss and the first 10% of each run's training tokens are left off the top, as the
 * study's figure does; the clip path cuts them). */
static void loss_range(const mx_study_run* runs, int n, mx_svg_frame* f) {
    double ylo = INFINITY, yhi = -INFINITY, yall = -INFINITY;
    f->x0 = INFINITY, f->x1 = -INFINITY;
    for (int i = 0; i < n; i++) {
        const mx_study_run* r = &runs[i];
        double last = 0;
        for (int j = 0; j < r->n_train_loss; j++) last = fmax(last, (double)r->train_loss[j].tokens);
        for (int j = 0; j < r->n_evals; j++) last = fmax(last, (double)r->evals[j].tokens);
        for (int pass = 0; pass < 2; pass++) {
            const mx_study_eval* e = pass ? r->evals : r->train_loss;
            int m = pass ? r->n_evals : r->n_train_loss;
            for (int j = 0; j < m; j++) {
                if (!isfinite(e[j].val_loss)) continue;
                f->x0 = fmin(f->x0, (double)e[j].tokens);
                f->x1 = fmax(f->x1, (double)e[j].tokens);
                ylo = fmin(ylo, e[j].val_loss);
                yall = fmax(yall, e[j].val_loss);
                int early = pass ? e[j].tokens <= 0 : (double)e[j].tokens < 0.1 * last;
                if (!early) yhi = fmax(yhi, e[j].val_loss);
            }
        }
    }
    if (!(yhi > -INFINITY)) yhi = yall;
    if (!(ylo < INFINITY)) ylo = 0, yhi = 1;
    if (!(yhi > ylo)) yhi = ylo + 1;
    if (!(f->x0 < f->x1)) f->x0 = 0, f->x1 = f->x1 > 0 ? f->x1 : 1;
    double pad = (yhi - ylo) * 0.05 + 1e-6;
    f->y0 = ylo - pad;
    f->y1 = yhi + pad;
}

static void polyline(mx_sbuf* b, const mx_svg_frame* f, const mx_study_eval* e, int m, const char* col, double width,
                     const char* extra, int clip) {
    mx_sb_printf(b, "<polyline clip-path=\"url(#c%d)\" fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s points=\"",
                 clip, col, width, extra);
    for (int j = 0; j < m; j++)
        if (isfinite(e[j].val_loss))
            mx_sb_printf(b, "%.1f,%.1f ", mx_svg_x(f, (double)e[j].tokens), mx_svg_y(f, e[j].val_loss));
    mx_sb_printf(b, "\"/>\n");
}

char* mx_plot_svg(const mx_study_run* runs, int n, int telemetry, const char* title) {
    mx_svg_frame f = {0, 0, 0, 0, 70, 40, 620, 380};
    loss_range(runs, n, &f);
    int panels[256], np = 0;
    for (int i = 0; telemetry && i < n && np < 256; i++)
        if (runs[i].n_tele) panels[np++] = i;
    const int PW = 360, PH = 220, cols = np < 2 ? 1 : 2, rows = (np + cols - 1) / cols;
    const int legend_h = 18 * n + 50, loss_h = 40 + (legend_h > 420 ? legend_h : 420) + 40;
    const int tele_top = loss_h + 30, height = np ? tele_top + 50 + rows * (PH + 80) : loss_h;
    mx_sbuf b = {0};
    mx_svg_begin(&b, 1000, height);
    mx_sbuf tb = {0};
    mx_svg_text(&tb, title && *title ? title : "Training and validation loss against tokens");
    char* ttl = take(&tb);
    mx_svg_axes(&b, &f, "tokens", "loss (nats)", ttl ? ttl : "", 0);
    free(ttl);
    for (int i = 0; i < n; i++) {
        const mx_study_run* r = &runs[i];
        const char* col = mx_svg_color(i);
        const char* dash = i >= 10 ? " stroke-dasharray=\"4,2\"" : "";
        char extra[96];
        snprintf(extra, sizeof extra, " stroke-opacity=\"0.45\"%s", dash);
        polyline(&b, &f, r->train_loss, r->n_train_loss, col, 1.0, extra, 0);
        polyline(&b, &f, r->evals, r->n_evals, col, 2.2, dash, 0);
        for (int j = 0; j < r->n_evals; j++)
            if (isfinite(r->evals[j].val_loss))
                mx_sb_printf(&b, "<circle clip-path=\"url(#c0)\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                             mx_svg_x(&f, (double)r->evals[j].tokens), mx_svg_y(&f, r->evals[j].val_loss), col);
    }
    int lx = f.L + f.W + 15, ly = f.T + 5;
    mx_sb_printf(&b, "<text x=\"%d\" y=\"%d\">thin: training loss</text><text x=\"%d\" y=\"%d\">thick, dots: validation "
                     "loss</text>\n", lx, ly + 4, lx, ly + 22);
    for (int i = 0; i < n; i++) {
        const mx_study_run* r = &runs[i];
        double last = NAN;
        for (int j = 0; j < r->n_evals; j++) last = r->evals[j].val_loss;
        int y = ly + 44 + 18 * i;
        mx_sb_printf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"%s/><text x=\"%d\" "
                         "y=\"%d\">", lx, y, lx + 20, y, mx_svg_color(i), i >= 10 ? " stroke-dasharray=\"4,2\"" : "",
                     lx + 26, y + 4);
        mx_svg_text(&b, r->dir);
        if (isfinite(last)) mx_sb_printf(&b, " (%.4f)", last);
        mx_sb_printf(&b, "</text>\n");
    }
    if (np) {
        mx_sb_printf(&b, "<text x=\"20\" y=\"%d\" font-weight=\"bold\">Quantization SQNR of each GEMM operand (dB, mean over "
                         "the layers and linears) against tokens</text>\n", tele_top);
        for (int o = 0; o < MX_STUDY_OPS; o++)
            mx_sb_printf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/><text x=\"%d\" "
                             "y=\"%d\">%s</text>\n", 20 + 110 * o, tele_top + 18, 40 + 110 * o, tele_top + 18,
                         mx_svg_color(o), 46 + 110 * o, tele_top + 22, study_ops[o]);
        double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
        for (int p = 0; p < np; p++) {
            const mx_study_run* r = &runs[panels[p]];
            for (int t = 0; t < r->n_tele; t++)
                for (int o = 0; o < MX_STUDY_OPS; o++) {
                    if (!isfinite(r->tele[t].sqnr_db[o])) continue;
                    double x = (double)r->tele[t].step * (double)r->tokens_per_step;
                    x0 = fmin(x0, x), x1 = fmax(x1, x);
                    y0 = fmin(y0, r->tele[t].sqnr_db[o]), y1 = fmax(y1, r->tele[t].sqnr_db[o]);
                }
        }
        if (!(x0 < INFINITY)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
        if (!(x0 < x1)) x0 -= 1, x1 += 1;
        double pad = (y1 - y0) * 0.05 + 0.5;
        for (int p = 0; p < np; p++) {
            const mx_study_run* r = &runs[panels[p]];
            mx_svg_frame g = {x0, x1, y0 - pad, y1 + pad, 70 + (p % cols) * (PW + 100), tele_top + 60 + (p / cols) * (PH + 80),
                              PW, PH};
            mx_sbuf tt = {0};
            mx_svg_text(&tt, r->dir);
            char* ts = take(&tt);
            mx_svg_axes(&b, &g, "tokens", "SQNR (dB)", ts ? ts : "", p + 1);
            free(ts);
            for (int o = 0; o < MX_STUDY_OPS; o++) {
                mx_sb_printf(&b, "<polyline clip-path=\"url(#c%d)\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                                 "points=\"", p + 1, mx_svg_color(o));
                for (int t = 0; t < r->n_tele; t++)
                    if (isfinite(r->tele[t].sqnr_db[o]))
                        mx_sb_printf(&b, "%.1f,%.1f ", mx_svg_x(&g, (double)r->tele[t].step * (double)r->tokens_per_step),
                                     mx_svg_y(&g, r->tele[t].sqnr_db[o]));
                mx_sb_printf(&b, "\"/>\n");
            }
        }
    }
    mx_sb_printf(&b, "</svg>\n");
    return take(&b);
}
