/* fuzz_config.c: the "key = value" config parser (mx_config_tokens), the
 * `mxlm train --config FILE` path. Any bytes: no crash, no sanitizer report,
 * and
 *   - a refusal: no tokens and a message naming the origin;
 *   - an acceptance: at most one token per line, each starting with "--",
 *     with a non-empty key that is not "config" and holds no '\n' (a
 *     quoted value may: C escapes);
 *   - with a key table the tokens are exactly those of the free parse (no
 *     table) with the flags mapped (true/1/yes -> "--key", false/0/no -> none)
 *     and every key in the table; a text the table accepts the free parse
 *     accepts too;
 *   - the free parse's tokens written back as "key = value" lines (each
 *     value through mx_config_value_write) parse to the same tokens (a fixed
 *     point). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/config.h"

static const mx_config_key k_keys[] = {{"steps", 0}, {"out", 0},     {"lr", 0},       {"train", 0},
                                       {"resume", 1}, {"describe", 1}, {"skip-spikes", 1}, {NULL, 0}};

static void check_tokens(char** v, int n, size_t lines) {
    if (!v || n < 0 || (size_t)n > lines) abort();
    for (int i = 0; i < n; i++) {
        const char* t = v[i];
        if (!t || strncmp(t, "--", 2) != 0) abort();
        size_t klen = strcspn(t + 2, "=");
        if (memchr(t + 2, '\n', klen)) abort(); /* (a quoted value may hold a newline: "\n") */
        if (klen == 0 || (klen == 6 && !strncmp(t + 2, "config", 6))) abort();
    }
}

static const mx_config_key* find(const char* t, size_t klen) {
    for (const mx_config_key* k = k_keys; k->name; k++)
        if (strlen(k->name) == klen && !strncmp(k->name, t, klen)) return k;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t len) {
    const char* text = (const char*)data;
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += data[i] == '\n';
    if (len && data[len - 1] != '\n') lines++;

    char **a = NULL, **b = NULL;
    int na = -1, nb = -1;
    int ra = mx_config_tokens(text, len, "f.cfg", NULL, &a, &na);
    if (ra) {
        if (a || na != 0 || strncmp(mx_last_error(), "f.cfg", 5) != 0) abort();
    } else {
        check_tokens(a, na, lines);
    }
    int rb = mx_config_tokens(text, len, "f.cfg", k_keys, &b, &nb);
    if (rb) {
        if (b || nb != 0 || strncmp(mx_last_error(), "f.cfg", 5) != 0) abort();
    } else {
        check_tokens(b, nb, lines);
        if (ra) abort(); /* the table only adds refusals */
        int j = 0;
        for (int i = 0; i < na; i++) {
            const char* t = a[i] + 2;
            size_t klen = strcspn(t, "=");
            const mx_config_key* k = find(t, klen);
            if (!k) abort(); /* the table parse would have refused it */
            if (k->flag) {
                const char* val = t + klen + 1;
                if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes")) {
                    if (j >= nb || strlen(b[j]) != klen + 2 || strncmp(b[j] + 2, t, klen)) abort();
                    j++;
                } else if (strcmp(val, "0") && strcmp(val, "false") && strcmp(val, "no")) {
                    abort();
                }
            } else {
                if (j >= nb || strcmp(b[j], a[i])) abort();
                j++;
            }
        }
        if (j != nb) abort();
    }
    if (!ra) { /* write back (each value as mxlm writes one: mx_config_value_write) and parse again */
        size_t cap = 1;
        for (int i = 0; i < na; i++) cap += 4 * strlen(a[i]) + 8;
        char* w = malloc(cap);
        if (!w) abort();
        size_t o = 0;
        for (int i = 0; i < na; i++) {
            const char* t = a[i] + 2;
            size_t klen = strcspn(t, "=");
            memcpy(w + o, t, klen);
            o += klen;
            memcpy(w + o, " = ", 3);
            o += 3;
            const int vlen = mx_config_value_write(t + klen + 1, w + o, cap - o);
            if (vlen < 0 || (size_t)vlen >= cap - o) abort();
            o += (size_t)vlen;
            w[o++] = '\n';
        }
        char** c = NULL;
        int nc = -1;
        if (mx_config_tokens(w, o, "w.cfg", NULL, &c, &nc) || nc != na) abort();
        for (int i = 0; i < na; i++)
            if (strcmp(c[i], a[i])) abort();
        mx_config_free(c, nc);
        free(w);
    }
    mx_config_free(a, na);
    mx_config_free(b, nb);
    return 0;
}
