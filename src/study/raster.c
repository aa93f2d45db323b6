/* raster.c: the study's SVG figures as PNG images (study.h, mx_svg_png). A rasterizer for exactly the
 * SVG that src/study writes, not SVG in general: <svg width height>, <rect> (fill, stroke), <line>,
 * <polyline> (stroke, stroke-width, stroke-opacity, stroke-dasharray), <polygon> (fill, fill-opacity),
 * <circle>, <path> of M/m/L/l commands, <text> (x, y, text-anchor, font-weight bold, transform
 * "translate(X,Y) rotate(-90)"), <clipPath id> holding one <rect> and clip-path="url(#id)" on shapes,
 * <title> (skipped); colours #rgb, #rrggbb and none. Lines and discs are antialiased by their distance
 * to the pixel centre (a polyline's coverage is the maximum over its segments, so joints of translucent
 * lines are not painted twice), polygons are filled by pixel centres (even-odd), text is a 5x7 bitmap
 * font of this file (ASCII; other characters as '?'). Then PNG: 8-bit RGB, filter 0, zlib deflate,
 * CRC-32 from zlib. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "mxlm/mx.h"
#include "mxlm/study.h"

/* The 5x7 glyphs of ASCII 32..126: seven rows, bit 4 the leftmost column (drawn for mxlm). */
static const uint8_t k_font[95][7] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* ' ' */
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04}, /* '!' */
    {0x0a, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00}, /* '"' */
    {0x0a, 0x1f, 0x0a, 0x0a, 0x1f, 0x0a, 0x00}, /* '#' */
    {0x04, 0x0f, 0x14, 0x0e, 0x05, 0x1e, 0x04}, /* '$' */
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}, /* '%' */
    {0x0c, 0x12, 0x0c, 0x08, 0x15, 0x12, 0x0d}, /* '&' */
    {0x04, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00}, /* "'" */
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}, /* '(' */
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}, /* ')' */
    {0x00, 0x04, 0x15, 0x0e, 0x15, 0x04, 0x00}, /* '*' */
    {0x00, 0x04, 0x04, 0x1f, 0x04, 0x04, 0x00}, /* '+' */
    {0x00, 0x00, 0x00, 0x00, 0x0c, 0x04, 0x08}, /* ',' */
    {0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00}, /* '-' */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c}, /* '.' */
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}, /* '/' */
    {0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e}, /* '0' */
    {0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e}, /* '1' */
    {0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f}, /* '2' */
    {0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e}, /* '3' */
    {0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02}, /* '4' */
    {0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e}, /* '5' */
    {0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e}, /* '6' */
    {0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}, /* '7' */
    {0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e}, /* '8' */
    {0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c}, /* '9' */
    {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x0c, 0x00}, /* ':' */
    {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x04, 0x08}, /* ';' */
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02}, /* '<' */
    {0x00, 0x00, 0x1f, 0x00, 0x1f, 0x00, 0x00}, /* '=' */
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}, /* '>' */
    {0x0e, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04}, /* '?' */
    {0x0e, 0x11, 0x01, 0x0d, 0x15, 0x15, 0x0e}, /* '@' */
    {0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11}, /* 'A' */
    {0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e}, /* 'B' */
    {0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e}, /* 'C' */
    {0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c}, /* 'D' */
    {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f}, /* 'E' */
    {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10}, /* 'F' */
    {0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f}, /* 'G' */
    {0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11}, /* 'H' */
    {0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e}, /* 'I' */
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c}, /* 'J' */
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}, /* 'K' */
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f}, /* 'L' */
    {0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11}, /* 'M' */
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}, /* 'N' */
    {0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e}, /* 'O' */
    {0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10}, /* 'P' */
    {0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d}, /* 'Q' */
    {0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11}, /* 'R' */
    {0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e}, /* 'S' */
    {0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}, /* 'T' */
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e}, /* 'U' */
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04}, /* 'V' */
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a}, /* 'W' */
    {0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11}, /* 'X' */
    {0x11, 0x11, 0x0a, 0x04, 0x04, 0x04, 0x04}, /* 'Y' */
    {0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f}, /* 'Z' */
    {0x0e, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0e}, /* '[' */
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00}, /* '\\' */
    {0x0e, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0e}, /* ']' */
    {0x04, 0x0a, 0x11, 0x00, 0x00, 0x00, 0x00}, /* '^' */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1f}, /* '_' */
    {0x08, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00}, /* '`' */
    {0x00, 0x00, 0x0e, 0x01, 0x0f, 0x11, 0x0f}, /* 'a' */
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1e}, /* 'b' */
    {0x00, 0x00, 0x0e, 0x10, 0x10, 0x11, 0x0e}, /* 'c' */
    {0x01, 0x01, 0x0d, 0x13, 0x11, 0x11, 0x0f}, /* 'd' */
    {0x00, 0x00, 0x0e, 0x11, 0x1f, 0x10, 0x0e}, /* 'e' */
    {0x06, 0x09, 0x08, 0x1c, 0x08, 0x08, 0x08}, /* 'f' */
    {0x00, 0x00, 0x0f, 0x11, 0x0f, 0x01, 0x0e}, /* 'g' */
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}, /* 'h' */
    {0x04, 0x00, 0x0c, 0x04, 0x04, 0x04, 0x0e}, /* 'i' */
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0c}, /* 'j' */
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}, /* 'k' */
    {0x0c, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e}, /* 'l' */
    {0x00, 0x00, 0x1a, 0x15, 0x15, 0x11, 0x11}, /* 'm' */
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}, /* 'n' */
    {0x00, 0x00, 0x0e, 0x11, 0x11, 0x11, 0x0e}, /* 'o' */
    {0x00, 0x00, 0x1e, 0x11, 0x1e, 0x10, 0x10}, /* 'p' */
    {0x00, 0x00, 0x0d, 0x13, 0x0f, 0x01, 0x01}, /* 'q' */
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}, /* 'r' */
    {0x00, 0x00, 0x0e, 0x10, 0x0e, 0x01, 0x1e}, /* 's' */
    {0x08, 0x08, 0x1c, 0x08, 0x08, 0x09, 0x06}, /* 't' */
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0d}, /* 'u' */
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0a, 0x04}, /* 'v' */
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0a}, /* 'w' */
    {0x00, 0x00, 0x11, 0x0a, 0x04, 0x0a, 0x11}, /* 'x' */
    {0x00, 0x00, 0x11, 0x11, 0x0f, 0x01, 0x0e}, /* 'y' */
    {0x00, 0x00, 0x1f, 0x02, 0x04, 0x08, 0x1f}, /* 'z' */
    {0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02}, /* '{' */
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}, /* '|' */
    {0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08}, /* '}' */
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00}, /* '~' */

};

typedef struct {
    int w, h;
    float* px;          /* [h][w][3], 0..1 */
    float* mask;        /* [h][w] a polyline's coverage */
    int clip[4];        /* x0, y0, x1, y1 of the current element (pixels, [x0, x1) x [y0, y1)) */
} canvas;

typedef struct { char id[32]; double x, y, w, h; } clip_def;

/* A pixel coordinate from a double, clamped to [-8, 16400] first (NaN to -8): the figures are at most
 * 8192 pixels a side, and a float-to-int conversion out of range would be undefined. */
static int ipix(double v) { return !(v > -8) ? -8 : v > 16400 ? 16400 : (int)v; }

static void paint(canvas* c, int x, int y, const float col[3], float a) {
    if (x < c->clip[0] || y < c->clip[1] || x >= c->clip[2] || y >= c->clip[3] || !(a > 0)) return;
    if (a > 1) a = 1;
    float* p = c->px + ((size_t)y * c->w + x) * 3;
    for (int k = 0; k < 3; k++) p[k] += (col[k] - p[k]) * a;
}

/* "#rgb" or "#rrggbb" into col; 0 for none, an unknown colour or NULL (default_black: NULL is black). */
static int color(const char* s, float col[3], int default_black) {
    if (!s) {
        col[0] = col[1] = col[2] = 0;
        return default_black;
    }
    if (s[0] != '#') return 0;
    unsigned v[6];
    size_t n = strlen(s + 1);
    if (n != 3 && n != 6) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = (char)tolower((unsigned char)s[1 + i]);
        if (!isxdigit((unsigned char)ch)) return 0;
        v[i] = (unsigned)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
    }
    for (int k = 0; k < 3; k++) col[k] = (n == 3 ? (float)(v[k] * 17) : (float)(v[2 * k] * 16 + v[2 * k + 1])) / 255.0f;
    return 1;
}

/* ---- the element's attributes ---- */
typedef struct { const char* name[32]; char* val[32]; int n; } attrs;

static const char* get(const attrs* a, const char* name) {
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->name[i], name)) return a->val[i];
    return NULL;
}
static double num(const attrs* a, const char* name, double dflt) {
    const char* v = get(a, name);
    return v ? strtod(v, NULL) : dflt;
}

/* Parses the attributes of a tag (s at the first character after the name) into a, in place (the tag text
 * is a private copy); returns the character after '>' (or the end). */
static char* parse_attrs(char* s, attrs* a) {
    a->n = 0;
    while (*s && *s != '>') {
        while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '/') s++;
        if (*s == '>' || !*s) break;
        char* name = s;
        while (*s && *s != '=' && *s != ' ' && *s != '>') s++;
        if (*s != '=') continue;
        *s++ = 0;
        char q = *s;
        if (q != '"' && q != '\'') continue;
        char* v = ++s;
        while (*s && *s != q) s++;
        if (*s) *s++ = 0;
        if (a->n < 32) { a->name[a->n] = name; a->val[a->n] = v; a->n++; }
    }
    return *s ? s + 1 : s;
}

static void set_clip(canvas* c, const attrs* a, const clip_def* defs, int ndefs) {
    c->clip[0] = 0; c->clip[1] = 0; c->clip[2] = c->w; c->clip[3] = c->h;
    const char* cp = get(a, "clip-path");
    if (!cp || strncmp(cp, "url(#", 5)) return;
    for (int i = 0; i < ndefs; i++) {
        size_t l = strlen(defs[i].id);
        if (!strncmp(cp + 5, defs[i].id, l) && cp[5 + l] == ')') {
            c->clip[0] = ipix(fmax(0, ceil(defs[i].x - 0.5)));
            c->clip[1] = ipix(fmax(0, ceil(defs[i].y - 0.5)));
            c->clip[2] = ipix(fmin(c->w, ceil(defs[i].x + defs[i].w - 0.5)));
            c->clip[3] = ipix(fmin(c->h, ceil(defs[i].y + defs[i].h - 0.5)));
            return;
        }
    }
}

/* ---- strokes ---- */
typedef struct { int x0, y0, x1, y1; } box;

/* The coverage of a segment of half width hw into the mask (maximum), within the canvas. */
static void seg_cover(canvas* c, double ax, double ay, double bx, double by, double hw, box* touched) {
    int x0 = ipix(floor(fmin(ax, bx) - hw - 1)), x1 = ipix(ceil(fmax(ax, bx) + hw + 1));
    int y0 = ipix(floor(fmin(ay, by) - hw - 1)), y1 = ipix(ceil(fmax(ay, by) + hw + 1));
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > c->w) x1 = c->w;
    if (y1 > c->h) y1 = c->h;
    double dx = bx - ax, dy = by - ay, l2 = dx * dx + dy * dy;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            double px = x + 0.5 - ax, py = y + 0.5 - ay;
            double t = l2 > 0 ? (px * dx + py * dy) / l2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = px - t * dx, ey = py - t * dy;
            double cov = hw + 0.5 - sqrt(ex * ex + ey * ey);
            if (cov <= 0) continue;
            float* m = &c->mask[(size_t)y * c->w + x];
            if (cov > *m) *m = (float)(cov > 1 ? 1 : cov);
        }
    if (x0 < touched->x0) touched->x0 = x0;
    if (y0 < touched->y0) touched->y0 = y0;
    if (x1 > touched->x1) touched->x1 = x1;
    if (y1 > touched->y1) touched->y1 = y1;
}

/* A stroke of the points xy[n] (x, y pairs): width, colour, opacity, dash pattern (NULL: solid). */
static void stroke(canvas* c, const double* xy, int n, double width, const float col[3], float alpha, const char* dash) {
    double pat[8];
    int np = 0;
    for (const char* p = dash; p && *p && np < 8;) {
        char* e;
        double v = strtod(p, &e);
        if (e == p) break;
        if (v > 0) pat[np++] = v;
        p = e;
        while (*p == ',' || *p == ' ') p++;
    }
    if (np % 2) np = 0; /* an odd list would repeat itself twice; not written by the study */
    double hw = fmax(width, 1.0) / 2;
    box t = {c->w, c->h, 0, 0};
    int k = 0;
    double left = np ? pat[0] : 0;
    for (int i = 0; i + 1 < n; i++) {
        double ax = xy[2 * i], ay = xy[2 * i + 1], bx = xy[2 * i + 2], by = xy[2 * i + 3];
        double len = hypot(bx - ax, by - ay), done = 0;
        if (!np) { seg_cover(c, ax, ay, bx, by, hw, &t); continue; }
        while (done < len) { /* the dashes: on where k is even */
            double step = fmin(left, len - done);
            if (k % 2 == 0) {
                double f0 = done / len, f1 = (done + step) / len;
                seg_cover(c, ax + f0 * (bx - ax), ay + f0 * (by - ay), ax + f1 * (bx - ax), ay + f1 * (by - ay), hw, &t);
            }
            done += step;
            left -= step;
            if (left <= 1e-9) { k = (k + 1) % np; left = pat[k]; }
        }
    }
    for (int y = t.y0; y < t.y1; y++)
        for (int x = t.x0; x < t.x1; x++) {
            float* m = &c->mask[(size_t)y * c->w + x];
            if (*m > 0) paint(c, x, y, col, *m * alpha);
            *m = 0;
        }
}

/* "x,y x,y ..." into a malloc'ed array; n points. */
static double* points(const char* s, int* n) {
    *n = 0;
    if (!s) return NULL;
    size_t cap = 64;
    double* p = malloc(cap * sizeof *p);
    while (p && *s) {
        char* e;
        double v = strtod(s, &e);
        if (e == s) { s++; continue; }
        if ((size_t)*n * 2 + 2 > cap) {
            double* q = realloc(p, (cap *= 2) * sizeof *p);
            if (!q) { free(p); return NULL; }
            p = q;
        }
        s = e;
        while (*s == ',' || *s == ' ') s++;
        double w = strtod(s, &e);
        if (e == s) break;
        p[2 * *n] = v;
        p[2 * *n + 1] = w;
        (*n)++;
        s = e;
        while (*s == ',' || *s == ' ' || *s == '\n') s++;
    }
    return p;
}

static void fill_polygon(canvas* c, const double* xy, int n, const float col[3], float alpha) {
    if (n < 3) return;
    double ylo = xy[1], yhi = xy[1];
    for (int i = 1; i < n; i++) { ylo = fmin(ylo, xy[2 * i + 1]); yhi = fmax(yhi, xy[2 * i + 1]); }
    double* xs = malloc((size_t)n * sizeof *xs);
    if (!xs) return;
    for (int y = ipix(fmax(0, floor(ylo))); y < ipix(fmin(c->h, ceil(yhi) + 1)); y++) {
        double cy = y + 0.5;
        int m = 0;
        for (int i = 0; i < n; i++) {
            int j = (i + 1) % n;
            double y0 = xy[2 * i + 1], y1 = xy[2 * j + 1];
            if ((y0 <= cy && y1 > cy) || (y1 <= cy && y0 > cy))
                xs[m++] = xy[2 * i] + (cy - y0) / (y1 - y0) * (xy[2 * j] - xy[2 * i]);
        }
        for (int a = 1; a < m; a++) /* insertion sort: a handful per row */
            for (int b = a; b > 0 && xs[b - 1] > xs[b]; b--) { double t = xs[b]; xs[b] = xs[b - 1]; xs[b - 1] = t; }
        for (int a = 0; a + 1 < m; a += 2)
            for (int x = ipix(fmax(0, ceil(xs[a] - 0.5))); x < ipix(fmin(c->w, ceil(xs[a + 1] - 0.5))); x++)
                paint(c, x, y, col, alpha);
    }
    free(xs);
}

/* ---- text ---- */
static void glyph(canvas* c, int ch, double x, double y, int rot, double tx, double ty, const float col[3], int bold) {
    if (ch < 32 || ch > 126) ch = '?';
    const uint8_t* g = k_font[ch - 32];
    for (int r = 0; r < 7; r++)
        for (int k = 0; k < 5 + bold; k++) {
            int on = (k < 5 && (g[r] >> (4 - k)) & 1) || (bold && k > 0 && (g[r] >> (5 - k)) & 1);
            if (!on) continue;
            double u = x + k, v = y - 7 + r; /* the glyph's top-left pixel at (x, y - 7): it sits on the baseline y */
            if (rot) paint(c, ipix(floor(tx + v)), ipix(floor(ty - u - 1)), col, 1.0f); /* rotate(-90): (u, v) -> (v, -u) */
            else paint(c, ipix(floor(u)), ipix(floor(v)), col, 1.0f);
        }
}

/* Decodes the text's entities and UTF-8 (a non-ASCII character as '?') into out. */
static int text_chars(const char* s, const char* end, char* out, int cap) {
    int n = 0;
    while (s < end && n < cap - 1) {
        if (*s == '&') {
            static const char* ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;", "&apos;"};
            static const char rep[] = {'&', '<', '>', '"', '\'', '\''};
            int k = 0;
            for (; k < 6; k++)
                if (!strncmp(s, ent[k], strlen(ent[k]))) break;
            if (k < 6) { out[n++] = rep[k]; s += strlen(ent[k]); continue; }
        }
        unsigned char b = (unsigned char)*s;
        if (b >= 0x80) {
            out[n++] = '?';
            s++;
            while (s < end && ((unsigned char)*s & 0xC0) == 0x80) s++;
            continue;
        }
        out[n++] = (char)b;
        s++;
    }
    out[n] = 0;
    return n;
}

static void draw_text(canvas* c, const attrs* a, const char* body, const char* end) {
    char s[512];
    int n = text_chars(body, end, s, sizeof s);
    float col[3];
    if (!color(get(a, "fill"), col, 1)) return;
    int bold = get(a, "font-weight") && !strcmp(get(a, "font-weight"), "bold");
    double x = num(a, "x", 0), y = num(a, "y", 0), tx = 0, ty = 0;
    int rot = 0;
    const char* tr = get(a, "transform");
    if (tr && sscanf(tr, "translate(%lf,%lf) rotate(-90)", &tx, &ty) == 2) rot = 1;
    double width = 6.0 * n - 1 + bold;
    const char* anchor = get(a, "text-anchor");
    if (anchor && !strcmp(anchor, "middle")) x -= width / 2;
    else if (anchor && !strcmp(anchor, "end")) x -= width;
    x = floor(x + 0.5);
    y = floor(y + 0.5);
    for (int i = 0; i < n; i++) glyph(c, (unsigned char)s[i], x + 6 * i, y, rot, tx, ty, col, bold);
}

/* ---- PNG ---- */
static void be32(unsigned char* p, uint32_t v) { p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v; }

static size_t chunk(unsigned char* out, const char* type, const unsigned char* data, uint32_t n) {
    be32(out, n);
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, out + 4, n + 4);
    be32(out + 8 + n, (uint32_t)crc);
    return 12 + (size_t)n;
}

int mx_png_encode(const unsigned char* rgb, int w, int h, unsigned char** png, size_t* n) {
    *png = NULL;
    *n = 0;
    size_t raw_n = (size_t)h * (3 * (size_t)w + 1);
    unsigned char* raw = malloc(raw_n);
    uLongf zn = compressBound((uLong)raw_n);
    unsigned char* z = malloc(zn);
    unsigned char* out = malloc(8 + 25 + 12 + zn + 12);
    if (!raw || !z || !out) { free(raw); free(z); free(out); return mx_fail(MX_ENOMEM, "PNG: out of memory"); }
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * (3 * (size_t)w + 1)] = 0; /* filter: none */
        memcpy(raw + (size_t)y * (3 * (size_t)w + 1) + 1, rgb + (size_t)y * 3 * w, 3 * (size_t)w);
    }
    int zrc = compress2(z, &zn, raw, (uLong)raw_n, 6);
    free(raw);
    if (zrc != Z_OK) { free(z); free(out); return mx_fail(MX_EIO, "PNG: deflate failed (%d)", zrc); }
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char ihdr[13];
    be32(ihdr, (uint32_t)w);
    be32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8; ihdr[9] = 2; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0; /* 8-bit RGB, deflate, filter 0, no interlace */
    size_t k = 0;
    memcpy(out, sig, 8);
    k = 8;
    k += chunk(out + k, "IHDR", ihdr, 13);
    k += chunk(out + k, "IDAT", z, (uint32_t)zn);
    k += chunk(out + k, "IEND", NULL, 0);
    free(z);
    *png = out;
    *n = k;
    return MX_OK;
}

/* ---- the document ---- */
int mx_svg_png(const char* svg, unsigned char** png, size_t* n) {
    *png = NULL;
    *n = 0;
    char* doc = strdup(svg);
    if (!doc) return mx_fail(MX_ENOMEM, "PNG: out of memory");
    canvas c = {0, 0, NULL, NULL, {0, 0, 0, 0}};
    clip_def defs[64];
    int ndefs = 0, in_clip = -1, rc = MX_OK;
    attrs a;
    char* s = doc;
    while (!rc && (s = strchr(s, '<'))) {
        char* name = ++s;
        if (*name == '/' || *name == '?' || *name == '!') { /* a closing tag, a declaration, a comment */
            if (!strncmp(name, "/clipPath", 9)) in_clip = -1;
            s = strchr(s, '>');
            if (!s) break;
            continue;
        }
        while (*s && *s != ' ' && *s != '>' && *s != '/') s++;
        char save = *s;
        *s = 0;
        char tag[16];
        snprintf(tag, sizeof tag, "%s", name);
        *s = save;
        s = parse_attrs(s, &a);
        if (!strcmp(tag, "svg")) {
            if (c.px) { rc = mx_fail(MX_EINVAL, "PNG: a second <svg> element"); break; }
            c.w = ipix(num(&a, "width", 0));
            c.h = ipix(num(&a, "height", 0));
            if (c.w <= 0 || c.h <= 0 || c.w > 8192 || c.h > 8192) { rc = mx_fail(MX_EINVAL, "PNG: the SVG has no usable size"); break; }
            c.px = malloc((size_t)c.w * c.h * 3 * sizeof(float));
            c.mask = calloc((size_t)c.w * c.h, sizeof(float));
            if (!c.px || !c.mask) { rc = mx_fail(MX_ENOMEM, "PNG: out of memory for %dx%d", c.w, c.h); break; }
            for (size_t i = 0; i < (size_t)c.w * c.h * 3; i++) c.px[i] = 1.0f; /* white, as the figures' background */
            continue;
        }
        if (!c.px) continue; /* nothing before <svg> */
        if (!strcmp(tag, "clipPath")) {
            if (ndefs < 64) {
                in_clip = ndefs++;
                snprintf(defs[in_clip].id, sizeof defs[in_clip].id, "%s", get(&a, "id") ? get(&a, "id") : "");
                defs[in_clip].x = defs[in_clip].y = 0;
                defs[in_clip].w = c.w;
                defs[in_clip].h = c.h;
            }
            continue;
        }
        if (!strcmp(tag, "title") || !strcmp(tag, "text")) { /* their content up to the closing tag */
            char close[24];
            snprintf(close, sizeof close, "</%s>", tag);
            char* e = strstr(s, close);
            if (!e) break;
            if (!strcmp(tag, "text")) {
                set_clip(&c, &a, defs, ndefs);
                draw_text(&c, &a, s, e);
            }
            s = e + strlen(close);
            continue;
        }
        if (in_clip >= 0 && !strcmp(tag, "rect")) {
            defs[in_clip].x = num(&a, "x", 0);
            defs[in_clip].y = num(&a, "y", 0);
            defs[in_clip].w = num(&a, "width", 0);
            defs[in_clip].h = num(&a, "height", 0);
            continue;
        }
        set_clip(&c, &a, defs, ndefs);
        float col[3];
        if (!strcmp(tag, "rect")) {
            double x = num(&a, "x", 0), y = num(&a, "y", 0), w = num(&a, "width", 0), h = num(&a, "height", 0);
            if (color(get(&a, "fill"), col, 1)) {
                double q[8] = {x, y, x + w, y, x + w, y + h, x, y + h};
                fill_polygon(&c, q, 4, col, 1.0f);
            }
            if (color(get(&a, "stroke"), col, 0)) {
                double q[10] = {x, y, x + w, y, x + w, y + h, x, y + h, x, y};
                stroke(&c, q, 5, num(&a, "stroke-width", 1), col, 1.0f, NULL);
            }
        } else if (!strcmp(tag, "line")) {
            double q[4] = {num(&a, "x1", 0), num(&a, "y1", 0), num(&a, "x2", 0), num(&a, "y2", 0)};
            if (color(get(&a, "stroke"), col, 0))
                stroke(&c, q, 2, num(&a, "stroke-width", 1), col, (float)num(&a, "stroke-opacity", 1), get(&a, "stroke-dasharray"));
        } else if (!strcmp(tag, "polyline") || !strcmp(tag, "polygon")) {
            int np = 0;
            double* q = points(get(&a, "points"), &np);
            if (!strcmp(tag, "polygon") && q && color(get(&a, "fill"), col, 1))
                fill_polygon(&c, q, np, col, (float)num(&a, "fill-opacity", 1));
            if (q && color(get(&a, "stroke"), col, 0))
                stroke(&c, q, np, num(&a, "stroke-width", 1), col, (float)num(&a, "stroke-opacity", 1), get(&a, "stroke-dasharray"));
            free(q);
        } else if (!strcmp(tag, "circle")) {
            double cx = num(&a, "cx", 0), cy = num(&a, "cy", 0), r = num(&a, "r", 0);
            if (color(get(&a, "fill"), col, 1))
                for (int y = ipix(fmax(0, floor(cy - r - 1))); y < ipix(fmin(c.h, ceil(cy + r + 1))); y++)
                    for (int x = ipix(fmax(0, floor(cx - r - 1))); x < ipix(fmin(c.w, ceil(cx + r + 1))); x++)
                        paint(&c, x, y, col, (float)(r + 0.5 - hypot(x + 0.5 - cx, y + 0.5 - cy)));
        } else if (!strcmp(tag, "path")) { /* M/m/L/l only: each moveto starts a new stroke */
            const char* d = get(&a, "d");
            double q[64], px = 0, py = 0;
            int nq = 0;
            char cmd = 'M';
            if (!color(get(&a, "stroke"), col, 0)) continue;
            for (const char* p = d; p && *p;) {
                if (isalpha((unsigned char)*p)) { cmd = *p++; continue; }
                char* e;
                double x = strtod(p, &e);
                if (e == p) { p++; continue; }
                p = e;
                while (*p == ' ' || *p == ',') p++;
                double y = strtod(p, &e);
                if (e == p) break;
                p = e;
                if (cmd == 'm' || cmd == 'l') { x += px; y += py; }
                if ((cmd == 'M' || cmd == 'm') && nq >= 2) { stroke(&c, q, nq, num(&a, "stroke-width", 1), col, 1.0f, NULL); nq = 0; }
                if (nq < 32) { q[2 * nq] = x; q[2 * nq + 1] = y; nq++; }
                px = x; py = y;
                if (cmd == 'M') cmd = 'L';
                if (cmd == 'm') cmd = 'l';
            }
            if (nq >= 2) stroke(&c, q, nq, num(&a, "stroke-width", 1), col, 1.0f, NULL);
        }
    }
    if (!rc && !c.px) rc = mx_fail(MX_EINVAL, "PNG: no <svg> element");
    unsigned char* rgb = rc ? NULL : malloc((size_t)c.w * c.h * 3);
    if (!rc && !rgb) rc = mx_fail(MX_ENOMEM, "PNG: out of memory");
    if (!rc) {
        for (size_t i = 0; i < (size_t)c.w * c.h * 3; i++) {
            float v = c.px[i] < 0 ? 0 : c.px[i] > 1 ? 1 : c.px[i];
            rgb[i] = (unsigned char)lrintf(v * 255.0f);
        }
        rc = mx_png_encode(rgb, c.w, c.h, png, n);
    }
    free(rgb);
    free(c.px);
    free(c.mask);
    free(doc);
    return rc;
}
