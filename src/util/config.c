/* config.c: "key = value" config files into "--key=value" option tokens
 * (grammar in include/mxlm/config.h). The text is taken whole, with its
 * length, so NUL bytes, lines of any length, CR LF line ends and a missing
 * final newline are all seen for what they are. */
#include "mxlm/config.h"
#include "mxlm/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* C-locale isspace, whatever the locale */
static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

/* `s[0..n)` for a message: at most 48 bytes, control and non-ASCII bytes as \xNN */
static const char* show(char* buf, size_t cap, const char* s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 8 >= cap || i == 48) { snprintf(buf + o, cap - o, "..."); return buf; }
        if (c < 0x20 || c >= 0x7f || c == '\\') o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    buf[o] = 0;
    return buf;
}

/* Must v be quoted to be read back as written? */
static int needs_quotes(const char* v) {
    size_t n = strlen(v);
    if (!n) return 0;
    if (is_ws((unsigned char)v[0]) || v[0] == '"' || is_ws((unsigned char)v[n - 1])) return 1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) return 1;
    return 0;
}

int mx_config_value_write(const char* v, char* out, size_t n) {
    if (!needs_quotes(v)) return snprintf(out, n, "%s", v);
    size_t o = 0;
#define PUT(c) do { if (o + 1 < n) out[o] = (char)(c); o++; } while (0)
    PUT('"');
    for (const unsigned char* p = (const unsigned char*)v; *p; p++) {
        const char* e = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : *p == '\t' ? "\\t"
                      : *p == '\r' ? "\\r" : NULL;
        char hex[8];
        if (!e && (*p < 0x20 || *p == 0x7f)) { snprintf(hex, sizeof hex, "\\x%02x", *p); e = hex; }
        if (e) for (; *e; e++) PUT(*e);
        else PUT(*p);
    }
    PUT('"');
#undef PUT
    if (n) out[o < n ? o : n - 1] = 0;
    return (int)o;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int mx_config_value_read(const char* v, size_t len, char* out, size_t n) {
    while (len && is_ws((unsigned char)*v)) { v++; len--; }
    while (len && is_ws((unsigned char)v[len - 1])) len--;
    size_t o = 0;
    if (len < 2 || v[0] != '"' || v[len - 1] != '"') { /* as it is */
        if (n) { o = len < n ? len : n - 1; memcpy(out, v, o); out[o] = 0; }
        return (int)len;
    }
    for (size_t i = 1; i < len - 1; i++) {
        char c = v[i];
        if (c == '"') return -1; /* an unescaped quote before the end */
        if (c == '\\') {
            if (++i >= len - 1) return -1;
            c = v[i];
            if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c == 'r') c = '\r';
            else if (c == 'x') {
                int h = i + 2 < len - 1 ? hexval(v[i + 1]) : -1, l = h >= 0 ? hexval(v[i + 2]) : -1;
                if (h < 0 || l < 0 || (h == 0 && l == 0)) return -1;
                c = (char)(h * 16 + l);
                i += 2;
            } else if (c != '\\' && c != '"') return -1;
        }
        if (o + 1 < n) out[o] = c;
        o++;
    }
    if (n) out[o < n ? o : n - 1] = 0;
    return (int)o;
}

int mx_config_get(const char* text, const char* key, char* out, size_t n) {
    size_t kl = strlen(key);
    for (const char* p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char* k = p;
        while (*k == ' ' || *k == '\t') k++;
        if (strncmp(k, key, kl)) continue;
        const char* eq = k + kl;
        while (*eq == ' ' || *eq == '\t') eq++;
        if (*eq != '=') continue;
        const char* v = eq + 1;
        size_t vl = strcspn(v, "\n");
        const int l = mx_config_value_read(v, vl, out, n);
        if (l >= 0 && (size_t)l < n) return 1;
        if (n) out[0] = 0; /* malformed, or longer than out: unusable, never cut short */
        return 0;
    }
    return 0;
}

static int is_word(const char* s, size_t n, const char* w) { return strlen(w) == n && !memcmp(s, w, n); }

void mx_config_free(char** argv, int argc) {
    if (!argv) return;
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(argv);
}

int mx_config_tokens(const char* text, size_t len, const char* origin, const mx_config_key* keys, char*** argv_out,
                     int* argc_out) {
    if (!argv_out || !argc_out) return mx_fail(MX_EINVAL, "mx_config_tokens: NULL output");
    *argv_out = NULL;
    *argc_out = 0;
    if (!origin) origin = "config";
    if (!text && len) return mx_fail(MX_EINVAL, "%s: NULL text", origin);
    if (len > MX_CONFIG_MAX_BYTES)
        return mx_fail(MX_EFORMAT, "%s: %zu bytes, more than a config file may hold (%d); is it a config file?", origin,
                       len, MX_CONFIG_MAX_BYTES);
    int n = 0, cap = 16;
    char** v = malloc(sizeof(char*) * (size_t)cap);
    if (!v) return mx_fail(MX_ENOMEM, "%s: out of memory", origin);
    char q[256];
    int rc = MX_OK;
    size_t pos = 0, lineno = 0;
    while (pos < len) {
        lineno++;
        const char* ls = text + pos;
        const char* nl = memchr(ls, '\n', len - pos);
        const size_t ll = nl ? (size_t)(nl - ls) : len - pos;
        pos += ll + (nl ? 1 : 0);
        if (memchr(ls, 0, ll)) {
            rc = mx_fail(MX_EFORMAT, "%s:%zu: a NUL byte (a config file is text)", origin, lineno);
            break;
        }
        const char *b = ls, *e = ls + ll;
        while (b < e && is_ws((unsigned char)*b)) b++;
        while (e > b && is_ws((unsigned char)e[-1])) e--;
        if (b == e || *b == '#') continue;
        const char* eq = memchr(b, '=', (size_t)(e - b));
        if (!eq) {
            rc = mx_fail(MX_EFORMAT, "%s:%zu: expected 'key = value', got '%s'", origin, lineno,
                         show(q, sizeof q, b, (size_t)(e - b)));
            break;
        }
        const char* ke = eq;
        while (ke > b && is_ws((unsigned char)ke[-1])) ke--;
        const size_t klen = (size_t)(ke - b);
        const char* vb = eq + 1;
        while (vb < e && is_ws((unsigned char)*vb)) vb++;
        const size_t vlen = (size_t)(e - vb);
        if (!klen) {
            rc = mx_fail(MX_EFORMAT, "%s:%zu: expected 'key = value', the key is empty", origin, lineno);
            break;
        }
        if (is_word(b, klen, "config")) {
            rc = mx_fail(MX_EFORMAT, "%s:%zu: a config file cannot include another", origin, lineno);
            break;
        }
        int flag = 0;
        if (keys) {
            const mx_config_key* k = keys;
            while (k->name && !is_word(b, klen, k->name)) k++;
            if (!k->name) {
                rc = mx_fail(MX_EINVAL, "%s:%zu: unknown key '%s'", origin, lineno, show(q, sizeof q, b, klen));
                break;
            }
            flag = k->flag;
        }
        if (flag) {
            const int on = is_word(vb, vlen, "1") || is_word(vb, vlen, "true") || is_word(vb, vlen, "yes");
            const int off = is_word(vb, vlen, "0") || is_word(vb, vlen, "false") || is_word(vb, vlen, "no");
            if (!on && !off) {
                char q2[256];
                rc = mx_fail(MX_EINVAL, "%s:%zu: %s is a flag: true/1/yes or false/0/no, not '%s'", origin, lineno,
                             show(q2, sizeof q2, b, klen), show(q, sizeof q, vb, vlen));
                break;
            }
            if (!on) continue;
        }
        if (n == cap) {
            if (cap > (1 << 28)) { rc = mx_fail(MX_ENOMEM, "%s: too many lines", origin); break; }
            char** v2 = realloc(v, sizeof(char*) * (size_t)cap * 2);
            if (!v2) { rc = mx_fail(MX_ENOMEM, "%s: out of memory", origin); break; }
            v = v2;
            cap *= 2;
        }
        char* t = malloc(2 + klen + 1 + vlen + 1);
        if (!t) { rc = mx_fail(MX_ENOMEM, "%s: out of memory", origin); break; }
        t[0] = t[1] = '-';
        memcpy(t + 2, b, klen);
        size_t o = 2 + klen;
        if (!flag) {
            t[o++] = '=';
            int vl = mx_config_value_read(vb, vlen, t + o, vlen + 1); /* never longer than its text */
            if (vl < 0) {
                free(t);
                rc = mx_fail(MX_EFORMAT, "%s:%zu: %s: a malformed quoted value (escapes: \\\\ \\\" \\n \\t \\r "
                             "\\xNN)", origin, lineno, show(q, sizeof q, b, klen));
                break;
            }
            o += (size_t)vl;
        }
        t[o] = 0;
        v[n++] = t;
    }
    if (rc) {
        mx_config_free(v, n);
        return rc;
    }
    *argv_out = v;
    *argc_out = n;
    return MX_OK;
}

int mx_config_load(const char* path, const mx_config_key* keys, char*** argv_out, int* argc_out) {
    if (argv_out) *argv_out = NULL;
    if (argc_out) *argc_out = 0;
    if (!path) return mx_fail(MX_EINVAL, "mx_config_load: NULL path");
    FILE* f = mx_fopen_input(path, "the config file");
    if (!f) return MX_EIO;
    const size_t cap = (size_t)MX_CONFIG_MAX_BYTES + 1; /* one more: a larger file is refused, not cut */
    char* buf = malloc(cap);
    if (!buf) { fclose(f); return mx_fail(MX_ENOMEM, "%s: out of memory", path); }
    size_t n = 0, k;
    while (n < cap && (k = fread(buf + n, 1, cap - n, f)) > 0) n += k;
    int rc;
    if (ferror(f)) rc = mx_fail(MX_EIO, "%s: cannot read the config file: %s", path, strerror(errno));
    else rc = mx_config_tokens(buf, n, path, keys, argv_out, argc_out);
    free(buf);
    fclose(f);
    return rc;
}
