/* hf.c: Hugging Face LlamaForCausalLM directories (config.json +
 * model.safetensors): export of a model, import into a model (hf.h).
 *
 * Layout check (why no permutation is needed): src/nn/rope.c rotates the
 * pairs (i, i + hd/2) of each head ("rotate half"), which is what HF's
 * apply_rotary_pos_emb does with q, k as HF stores them; the linear layers
 * compute Y[M, N] = X[M, K] W[N, K]^T with W row-major [out, in], as
 * torch.nn.Linear stores its weight; query head h reads key/value head
 * h / (H / KV), as HF's repeat_kv. So every tensor is written as it is in
 * memory, one layer's slice of our [L, rows, cols] arrays per HF tensor.
 *
 * The JSON reader below is small and tolerant (any valid JSON: nested
 * objects, arrays, strings with escapes, numbers, true/false/null) with a
 * depth limit; it builds a tree that the two files are read from. */
#include "mxlm/hf.h"
#include "mxlm/util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxlm/mx.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hf.c reads and writes little-endian tensors in place: a big-endian host needs byte swaps"
#endif

/* ---- a small JSON tree ------------------------------------------------------------ */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
typedef struct jv {
    int t;
    int b;            /* J_BOOL */
    double num;       /* J_NUM */
    int is_int;       /* J_NUM written without fraction or exponent */
    char* s;          /* J_STR (NUL-terminated; embedded NULs refused) */
    int n, cap;       /* J_ARR, J_OBJ: items */
    struct jv* v;     /* [n] */
    char** k;         /* [n] keys (J_OBJ) */
} jv;

typedef struct { const char* start; const char* p; const char* end; int depth; char err[160]; } jparse;

static void jfree(jv* x) {
    if (!x) return;
    free(x->s);
    for (int i = 0; i < x->n; i++) {
        jfree(&x->v[i]);
        if (x->k) free(x->k[i]);
    }
    free(x->v);
    free(x->k);
    memset(x, 0, sizeof *x);
}

static int jerr(jparse* P, const char* what) {
    if (!P->err[0]) snprintf(P->err, sizeof P->err, "%s at byte %ld", what, (long)(P->p - P->start));
    return -1;
}

static void jws(jparse* P) {
    while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r')) P->p++;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int jhex4(jparse* P, unsigned* u) {
    if (P->end - P->p < 4) return jerr(P, "short \\u escape");
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(P->p[i]);
        if (h < 0) return jerr(P, "bad \\u escape");
        x = x * 16 + (unsigned)h;
    }
    P->p += 4;
    *u = x;
    return 0;
}

/* A string (P->p after the opening quote) into a malloc'ed UTF-8 buffer. */
static int jstring(jparse* P, char** out) {
    size_t cap = 32, n = 0;
    char* s = malloc(cap);
    if (!s) return jerr(P, "out of memory");
    for (;;) {
        if (P->p >= P->end) { free(s); return jerr(P, "unterminated string"); }
        unsigned char c = (unsigned char)*P->p++;
        unsigned u = c;
        char tmp[4];
        int k = 1;
        if (c == '"') break;
        if (c < 0x20) { free(s); return jerr(P, "control character in a string"); }
        if (c == '\\') {
            if (P->p >= P->end) { free(s); return jerr(P, "unterminated string"); }
            char e = *P->p++;
            switch (e) {
            case '"': u = '"'; break;
            case '\\': u = '\\'; break;
            case '/': u = '/'; break;
            case 'b': u = '\b'; break;
            case 'f': u = '\f'; break;
            case 'n': u = '\n'; break;
            case 'r': u = '\r'; break;
            case 't': u = '\t'; break;
            case 'u': {
                if (jhex4(P, &u)) { free(s); return -1; }
                if (u >= 0xD800 && u < 0xDC00) { /* a surrogate pair */
                    unsigned lo;
                    if (P->end - P->p < 2 || P->p[0] != '\\' || P->p[1] != 'u') { free(s); return jerr(P, "lone surrogate"); }
                    P->p += 2;
                    if (jhex4(P, &lo)) { free(s); return -1; }
                    if (lo < 0xDC00 || lo > 0xDFFF) { free(s); return jerr(P, "bad surrogate pair"); }
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                } else if (u >= 0xDC00 && u < 0xE000) { free(s); return jerr(P, "lone surrogate"); }
                if (u == 0) { free(s); return jerr(P, "NUL in a string"); }
                break;
            }
            default: free(s); return jerr(P, "bad escape");
            }
            if (u < 0x80) tmp[0] = (char)u;
            else if (u < 0x800) { tmp[0] = (char)(0xC0 | (u >> 6)); tmp[1] = (char)(0x80 | (u & 63)); k = 2; }
            else if (u < 0x10000) {
                tmp[0] = (char)(0xE0 | (u >> 12)); tmp[1] = (char)(0x80 | ((u >> 6) & 63));
                tmp[2] = (char)(0x80 | (u & 63)); k = 3;
            } else {
                tmp[0] = (char)(0xF0 | (u >> 18)); tmp[1] = (char)(0x80 | ((u >> 12) & 63));
                tmp[2] = (char)(0x80 | ((u >> 6) & 63)); tmp[3] = (char)(0x80 | (u & 63)); k = 4;
            }
        } else tmp[0] = (char)c;
        if (n + (size_t)k + 1 > cap) {
            cap *= 2;
            char* t = realloc(s, cap);
            if (!t) { free(s); return jerr(P, "out of memory"); }
            s = t;
        }
        memcpy(s + n, tmp, (size_t)k);
        n += (size_t)k;
    }
    s[n] = 0;
    *out = s;
    return 0;
}

static int jvalue(jparse* P, jv* out);

static int jpush(jparse* P, jv* x, char* key) {
    if (x->n == x->cap) {
        int cap = x->cap ? x->cap * 2 : 8;
        jv* v = realloc(x->v, sizeof(jv) * (size_t)cap);
        if (!v) return jerr(P, "out of memory");
        x->v = v;
        if (x->t == J_OBJ) {
            char** k = realloc(x->k, sizeof(char*) * (size_t)cap);
            if (!k) return jerr(P, "out of memory");
            x->k = k;
        }
        x->cap = cap;
    }
    memset(&x->v[x->n], 0, sizeof(jv));
    if (x->t == J_OBJ) x->k[x->n] = key;
    x->n++;
    return 0;
}

static int jvalue(jparse* P, jv* out) {
    memset(out, 0, sizeof *out);
    jws(P);
    if (P->p >= P->end) return jerr(P, "unexpected end");
    char c = *P->p;
    if (c == '{' || c == '[') {
        if (++P->depth > 64) return jerr(P, "nesting deeper than 64");
        out->t = c == '{' ? J_OBJ : J_ARR;
        P->p++;
        jws(P);
        char close = c == '{' ? '}' : ']';
        if (P->p < P->end && *P->p == close) { P->p++; P->depth--; return 0; }
        for (;;) {
            char* key = NULL;
            if (out->t == J_OBJ) {
                jws(P);
                if (P->p >= P->end || *P->p != '"') return jerr(P, "expected a key");
                P->p++;
                if (jstring(P, &key)) return -1;
                jws(P);
                if (P->p >= P->end || *P->p != ':') { free(key); return jerr(P, "expected ':'"); }
                P->p++;
            }
            if (jpush(P, out, key)) { free(key); return -1; }
            if (jvalue(P, &out->v[out->n - 1])) return -1;
            jws(P);
            if (P->p < P->end && *P->p == ',') { P->p++; continue; }
            if (P->p < P->end && *P->p == close) { P->p++; break; }
            return jerr(P, "expected ',' or a closing bracket");
        }
        P->depth--;
        return 0;
    }
    if (c == '"') {
        P->p++;
        out->t = J_STR;
        return jstring(P, &out->s);
    }
    static const struct { const char* w; int t, b; } words[] = {{"true", J_BOOL, 1}, {"false", J_BOOL, 0},
                                                                {"null", J_NULL, 0}};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(words[i].w);
        if ((size_t)(P->end - P->p) >= l && !memcmp(P->p, words[i].w, l)) {
            P->p += l;
            out->t = words[i].t;
            out->b = words[i].b;
            return 0;
        }
    }
    /* a number: -?digits[.digits][(e|E)[+-]digits] */
    const char* s = P->p;
    const char* q = s;
    if (q < P->end && *q == '-') q++;
    const char* d0 = q;
    while (q < P->end && *q >= '0' && *q <= '9') q++;
    if (q == d0) return jerr(P, "unexpected character");
    int is_int = 1;
    if (q < P->end && *q == '.') {
        is_int = 0;
        q++;
        const char* f0 = q;
        while (q < P->end && *q >= '0' && *q <= '9') q++;
        if (q == f0) return jerr(P, "bad number");
    }
    if (q < P->end && (*q == 'e' || *q == 'E')) {
        is_int = 0;
        q++;
        if (q < P->end && (*q == '+' || *q == '-')) q++;
        const char* e0 = q;
        while (q < P->end && *q >= '0' && *q <= '9') q++;
        if (q == e0) return jerr(P, "bad number");
    }
    char buf[64];
    if (q - s >= (long)sizeof buf) return jerr(P, "number too long");
    memcpy(buf, s, (size_t)(q - s));
    buf[q - s] = 0;
    out->t = J_NUM;
    out->num = strtod(buf, NULL);
    out->is_int = is_int;
    P->p = q;
    return 0;
}

/* Parse text[0..n) as one JSON value; err gets a message on failure. */
static int jparse_all(const char* text, size_t n, jv* out, char* err, size_t en) {
    jparse P = {.start = text, .p = text, .end = text + n};
    int rc = jvalue(&P, out);
    if (!rc) {
        jws(&P);
        if (P.p != P.end) rc = jerr(&P, "trailing characters");
    }
    if (rc) {
        jfree(out);
        snprintf(err, en, "%s", P.err[0] ? P.err : "invalid JSON");
    }
    return rc;
}

static const jv* jget(const jv* o, const char* key) {
    if (!o || o->t != J_OBJ) return NULL;
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->k[i], key)) return &o->v[i];
    return NULL;
}

/* An exact non-negative integer below 2^53. */
static int jas_u64(const jv* x, uint64_t* u) {
    if (!x || x->t != J_NUM || !(x->num >= 0) || x->num > 9007199254740992.0 || x->num != floor(x->num)) return -1;
    *u = (uint64_t)x->num;
    return 0;
}

/* ---- names --------------------------------------------------------------------------- */

void mx_hf_tensor_name(int t, int layer, char* buf, size_t n) {
    static const char* per[MX_P_COUNT] = {
        [MX_P_ATTN_NORM] = "input_layernorm",      [MX_P_WQ] = "self_attn.q_proj",
        [MX_P_WK] = "self_attn.k_proj",            [MX_P_WV] = "self_attn.v_proj",
        [MX_P_WO] = "self_attn.o_proj",            [MX_P_FFN_NORM] = "post_attention_layernorm",
        [MX_P_WGATE] = "mlp.gate_proj",            [MX_P_WUP] = "mlp.up_proj",
        [MX_P_WDOWN] = "mlp.down_proj",
    };
    if (t == MX_P_EMBED) snprintf(buf, n, "model.embed_tokens.weight");
    else if (t == MX_P_FINAL_NORM) snprintf(buf, n, "model.norm.weight");
    else if (t == MX_P_HEAD) snprintf(buf, n, "lm_head.weight");
    else if (t > 0 && t < MX_P_COUNT && per[t]) snprintf(buf, n, "model.layers.%d.%s.weight", layer, per[t]);
    else snprintf(buf, n, "?");
}

/* The tensors of a model in file order: (type, layer). */
typedef struct { int t, layer; } slot;
static const int k_block_order[] = {MX_P_ATTN_NORM, MX_P_WQ,       MX_P_WK,  MX_P_WV,   MX_P_WO,
                                    MX_P_FFN_NORM,  MX_P_WGATE,    MX_P_WUP, MX_P_WDOWN};
#define N_BLOCK_TENSORS 9

static int n_slots(const mx_model_config* c) { return 3 + N_BLOCK_TENSORS * c->n_layers; }
static slot slot_at(const mx_model_config* c, int i) {
    if (i == 0) return (slot){MX_P_EMBED, 0};
    i--;
    if (i < N_BLOCK_TENSORS * c->n_layers) return (slot){k_block_order[i % N_BLOCK_TENSORS], i / N_BLOCK_TENSORS};
    i -= N_BLOCK_TENSORS * c->n_layers;
    return (slot){i == 0 ? MX_P_FINAL_NORM : MX_P_HEAD, 0};
}

/* One tensor's place in m->params and its HF shape (vectors are 1-D). */
static void slot_shape(const mx_param_info* info, slot s, size_t* off, size_t* numel, int* ndim, int64_t shape[2]) {
    const mx_param_info* in = &info[s.t];
    size_t one = (size_t)in->rows * in->cols;
    *off = in->offset + (in->per_layer ? (size_t)s.layer * one : 0);
    *numel = one;
    if (in->rows == 1) { *ndim = 1; shape[0] = in->cols; }
    else { *ndim = 2; shape[0] = in->rows; shape[1] = in->cols; }
}

/* ---- small file helpers ----------------------------------------------------------------- */


typedef struct { int fd; int err; } wfile;
static void wput(wfile* w, const void* p, size_t n) {
    const char* b = p;
    while (n && !w->err) {
        ssize_t k = write(w->fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            w->err = errno;
            return;
        }
        b += k;
        n -= (size_t)k;
    }
}

static void fsync_dir(const char* dir) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
}

/* Finish a temporary file: fsync, close, rename onto path (removed on error). */
static int wfinish(wfile* w, const char* tmp, const char* path) {
    int err = w->err;
    if (!err && fsync(w->fd) != 0) err = errno;
    if (close(w->fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        return mx_fail(MX_EIO, "%s: cannot write: %s", path, strerror(err));
    }
    return MX_OK;
}

static int wopen(wfile* w, char* tmp, size_t tn, const char* path) {
    snprintf(tmp, tn, "%s.tmp.%d", path, (int)getpid());
    w->err = 0;
    w->fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) return mx_fail(MX_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    return MX_OK;
}

/* The shortest %g that reads back to the same float. */
static const char* fmt_float(char* buf, float x) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, 32, "%.*g", prec, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    return buf;
}

/* ---- export ----------------------------------------------------------------------------- */

static int write_config(const mx_model_config* c, const char* dir, int bf16) {
    char path[4200], tmp[4300], e1[32], e2[32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    mx_sbuf b = {0};
    mx_sb_printf(&b,
              "{\n"
              "  \"architectures\": [\"LlamaForCausalLM\"],\n"
              "  \"model_type\": \"llama\",\n"
              "  \"hidden_size\": %d,\n"
              "  \"intermediate_size\": %d,\n"
              "  \"num_hidden_layers\": %d,\n"
              "  \"num_attention_heads\": %d,\n"
              "  \"num_key_value_heads\": %d,\n"
              "  \"head_dim\": %d,\n"
              "  \"vocab_size\": %d,\n"
              "  \"max_position_embeddings\": %d,\n"
              "  \"rms_norm_eps\": %s,\n"
              "  \"rope_theta\": %s,\n"
              "  \"rope_scaling\": null,\n"
              "  \"hidden_act\": \"silu\",\n"
              "  \"tie_word_embeddings\": false,\n"
              "  \"attention_bias\": false,\n"
              "  \"attention_dropout\": 0.0,\n"
              "  \"mlp_bias\": false,\n"
              "  \"initializer_range\": 0.02,\n"
              "  \"torch_dtype\": \"%s\"\n"
              "}\n",
              c->dim, c->ffn, c->n_layers, c->n_heads, c->n_kv_heads, c->dim / c->n_heads, c->vocab, c->seq_len,
              fmt_float(e1, c->norm_eps), fmt_float(e2, c->rope_theta), bf16 ? "bfloat16" : "float32");
    if (b.oom) { free(b.s); return mx_fail(MX_ENOMEM, "hf export: out of memory"); }
    wfile w;
    int rc = wopen(&w, tmp, sizeof tmp, path);
    if (!rc) {
        wput(&w, b.s, b.n);
        rc = wfinish(&w, tmp, path);
    }
    free(b.s);
    return rc;
}

int mx_hf_export(const mx_llama* m, const char* dir, int bf16) {
    const mx_model_config* c = &m->cfg;
    if (!m->params) return mx_fail(MX_EINVAL, "hf export: the model has no parameters");
    int rc = mx_mkdirs(dir);
    if (rc) return rc;
    const int ns = n_slots(c);
    const size_t esz = bf16 ? 2 : 4;
    /* the header */
    mx_sbuf h = {0};
    mx_sb_printf(&h, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"mxlm %s\"}", MXLM_VERSION);
    uint64_t data_off = 0;
    char name[128];
    for (int i = 0; i < ns; i++) {
        slot s = slot_at(c, i);
        size_t off, numel;
        int nd;
        int64_t shape[2];
        slot_shape(m->info, s, &off, &numel, &nd, shape);
        mx_hf_tensor_name(s.t, s.layer, name, sizeof name);
        uint64_t nb = (uint64_t)numel * esz;
        if (nd == 1)
            mx_sb_printf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[%llu,%llu]}", name,
                      bf16 ? "BF16" : "F32", (long long)shape[0], (unsigned long long)data_off,
                      (unsigned long long)(data_off + nb));
        else
            mx_sb_printf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%llu,%llu]}", name,
                      bf16 ? "BF16" : "F32", (long long)shape[0], (long long)shape[1], (unsigned long long)data_off,
                      (unsigned long long)(data_off + nb));
        data_off += nb;
    }
    mx_sb_printf(&h, "}");
    while (!h.oom && h.n % 8) mx_sb_printf(&h, " "); /* the data starts 8-byte aligned */
    if (h.oom) { free(h.s); return mx_fail(MX_ENOMEM, "hf export: out of memory"); }

    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    wfile w;
    rc = wopen(&w, tmp, sizeof tmp, path);
    if (rc) { free(h.s); return rc; }
    uint64_t hlen = h.n;
    wput(&w, &hlen, 8);
    wput(&w, h.s, h.n);
    free(h.s);
    enum { CH = 1 << 16 };
    uint16_t* conv = bf16 ? malloc(CH * sizeof(uint16_t)) : NULL;
    if (bf16 && !conv) { close(w.fd); unlink(tmp); return mx_fail(MX_ENOMEM, "hf export: out of memory"); }
    for (int i = 0; i < ns && !w.err; i++) {
        size_t off, numel;
        int nd;
        int64_t shape[2];
        slot_shape(m->info, slot_at(c, i), &off, &numel, &nd, shape);
        const float* src = m->params + off; /* [numel] one layer's tensor */
        if (!bf16) { wput(&w, src, numel * 4); continue; }
        for (size_t j = 0; j < numel; j += CH) {
            size_t k = numel - j < CH ? numel - j : CH;
            for (size_t e = 0; e < k; e++) conv[e] = mx_bf16_from_f32(src[j + e]);
            wput(&w, conv, k * 2);
        }
    }
    free(conv);
    rc = wfinish(&w, tmp, path);
    if (rc) return rc;
    rc = write_config(c, dir, bf16);
    if (rc) return rc;
    fsync_dir(dir);
    return MX_OK;
}

/* ---- reading -------------------------------------------------------------------------------- */

static int read_small_file(const char* path, char** out, size_t* n, size_t limit) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mx_fail(MX_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return mx_fail(MX_EIO, "%s: cannot stat", path); }
    if ((uint64_t)st.st_size > limit) {
        close(fd);
        return mx_fail(MX_EFORMAT, "%s: %lld bytes, more than the %zu a config may have", path, (long long)st.st_size,
                       limit);
    }
    size_t len = (size_t)st.st_size;
    char* b = malloc(len + 1);
    if (!b) { close(fd); return mx_fail(MX_ENOMEM, "%s: out of memory", path); }
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, b + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { free(b); close(fd); return mx_fail(MX_EIO, "%s: read error", path); }
        got += (size_t)k;
    }
    close(fd);
    b[len] = 0;
    *out = b;
    *n = len;
    return MX_OK;
}

static int cfg_int(const jv* o, const char* key, int required, int dflt, int* out, const char* path) {
    const jv* x = jget(o, key);
    if (!x || x->t == J_NULL) {
        if (required) return mx_fail(MX_EFORMAT, "%s: \"%s\" is missing", path, key);
        *out = dflt;
        return MX_OK;
    }
    uint64_t u;
    if (jas_u64(x, &u) || u == 0 || u > 1u << 30)
        return mx_fail(MX_EFORMAT, "%s: \"%s\" must be a positive integer", path, key);
    *out = (int)u;
    return MX_OK;
}

static int cfg_num(const jv* o, const char* key, double dflt, double* out, const char* path) {
    const jv* x = jget(o, key);
    if (!x || x->t == J_NULL) { *out = dflt; return MX_OK; }
    if (x->t != J_NUM || !(x->num > 0) || !isfinite(x->num))
        return mx_fail(MX_EFORMAT, "%s: \"%s\" must be a positive number", path, key);
    *out = x->num;
    return MX_OK;
}

/* rope_scaling / rope_parameters: absent, null or rope_type "default". */
static int rope_default(const jv* r) {
    if (!r || r->t == J_NULL) return 1;
    if (r->t != J_OBJ) return 0;
    const jv* t = jget(r, "rope_type");
    if (!t) t = jget(r, "type");
    return t && t->t == J_STR && !strcmp(t->s, "default");
}

/* The config from a parsed config.json; *tie gets tie_word_embeddings. */
static int cfg_from_json(const jv* o, const char* path, mx_model_config* c, int* tie) {
    if (!o || o->t != J_OBJ) return mx_fail(MX_EFORMAT, "%s: not a JSON object", path);
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "hf");
    const jv* mt = jget(o, "model_type");
    if (mt && (mt->t != J_STR || strcmp(mt->s, "llama")))
        return mx_fail(MX_EFORMAT, "%s: model_type is %s%s%s, not \"llama\"", path, mt->t == J_STR ? "\"" : "",
                       mt->t == J_STR ? mt->s : "not a string", mt->t == J_STR ? "\"" : "");
    int rc = cfg_int(o, "vocab_size", 1, 0, &c->vocab, path);
    if (!rc) rc = cfg_int(o, "hidden_size", 1, 0, &c->dim, path);
    if (!rc) rc = cfg_int(o, "intermediate_size", 1, 0, &c->ffn, path);
    if (!rc) rc = cfg_int(o, "num_hidden_layers", 1, 0, &c->n_layers, path);
    if (!rc) rc = cfg_int(o, "num_attention_heads", 1, 0, &c->n_heads, path);
    if (!rc) rc = cfg_int(o, "num_key_value_heads", 0, c->n_heads, &c->n_kv_heads, path);
    if (!rc) rc = cfg_int(o, "max_position_embeddings", 0, 2048, &c->seq_len, path); /* HF's default */
    if (rc) return rc;
    int hd = 0;
    rc = cfg_int(o, "head_dim", 0, c->dim / c->n_heads, &hd, path);
    if (rc) return rc;
    if (hd * c->n_heads != c->dim)
        return mx_fail(MX_EFORMAT, "%s: head_dim %d is not hidden_size / num_attention_heads = %d / %d (our model "
                       "needs it to be)", path, hd, c->dim, c->n_heads);
    double eps, theta;
    rc = cfg_num(o, "rms_norm_eps", 1e-6, &eps, path); /* HF's default */
    if (rc) return rc;
    const jv* rp = jget(o, "rope_parameters"); /* transformers 5 */
    const jv* rt = rp && rp->t == J_OBJ ? jget(rp, "rope_theta") : NULL;
    if (jget(o, "rope_theta") || !rt) rc = cfg_num(o, "rope_theta", 10000.0, &theta, path); /* HF's default */
    else if (rt->t != J_NUM || !(rt->num > 0)) rc = mx_fail(MX_EFORMAT, "%s: rope_parameters.rope_theta invalid", path);
    else theta = rt->num;
    if (rc) return rc;
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    if (!rope_default(jget(o, "rope_scaling")) || (rp && rp->t != J_NULL && !rope_default(rp)))
        return mx_fail(MX_EFORMAT, "%s: rope scaling other than the default (e.g. Llama 3.1's \"llama3\") is not "
                       "supported by our RoPE", path);
    const jv* act = jget(o, "hidden_act");
    if (act && (act->t != J_STR || strcmp(act->s, "silu")))
        return mx_fail(MX_EFORMAT, "%s: hidden_act must be \"silu\"", path);
    static const char* flags[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        const jv* f = jget(o, flags[i]);
        if (f && !(f->t == J_BOOL && !f->b) && f->t != J_NULL)
            return mx_fail(MX_EFORMAT, "%s: %s must be false (our model has no biases)", path, flags[i]);
    }
    const jv* tw = jget(o, "tie_word_embeddings");
    *tie = tw && tw->t == J_BOOL && tw->b;
    rc = mx_model_config_check(c);
    if (rc) return mx_fail(MX_EFORMAT, "%s: %s", path, mx_last_error());
    return MX_OK;
}

static int load_config_json(const char* dir, mx_model_config* c, int* tie) {
    char path[4200], err[200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char* text = NULL;
    size_t n = 0;
    int rc = read_small_file(path, &text, &n, 1u << 20);
    if (rc) return rc;
    jv root;
    if (jparse_all(text, n, &root, err, sizeof err)) {
        free(text);
        return mx_fail(MX_EFORMAT, "%s: invalid JSON: %s", path, err);
    }
    free(text);
    rc = cfg_from_json(&root, path, c, tie);
    jfree(&root);
    return rc;
}

int mx_hf_read_config(const char* dir, mx_model_config* c) {
    int tie;
    return load_config_json(dir, c, &tie);
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, f = h & 1023;
    if (e == 31) return mx_u2f(sign | 0x7F800000u | (f << 13)); /* inf, NaN */
    if (e == 0) {
        float v = (float)f * 5.9604644775390625e-08f; /* subnormal: f * 2^-24, exact */
        return sign ? -v : v;
    }
    return mx_u2f(sign | ((e + 112) << 23) | (f << 13));
}

enum { DT_F32, DT_BF16, DT_F16 };
typedef struct { int present, dtype; uint64_t begin; size_t dst_off, numel; } plan;

static int is_ignorable(const char* name) {
    size_t l = strlen(name), s = strlen("rotary_emb.inv_freq");
    return l >= s && !strcmp(name + l - s, "rotary_emb.inv_freq"); /* a buffer some old exports carry */
}

int mx_hf_load(const char* dir, mx_llama* m) {
    const mx_model_config* mc = &m->cfg;
    if (!m->params) return mx_fail(MX_EINVAL, "hf load: the model has no parameters");
    /* config.json against the model */
    mx_model_config fc;
    int tie = 0;
    int rc = load_config_json(dir, &fc, &tie);
    if (rc) return rc;
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    struct { const char* key; double file, model; } cmp[] = {
        {"vocab_size", fc.vocab, mc->vocab},
        {"hidden_size", fc.dim, mc->dim},
        {"intermediate_size", fc.ffn, mc->ffn},
        {"num_hidden_layers", fc.n_layers, mc->n_layers},
        {"num_attention_heads", fc.n_heads, mc->n_heads},
        {"num_key_value_heads", fc.n_kv_heads, mc->n_kv_heads},
        {"rms_norm_eps", fc.norm_eps, mc->norm_eps},
        {"rope_theta", fc.rope_theta, mc->rope_theta},
    };
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        if (cmp[i].file != cmp[i].model)
            return mx_fail(MX_EFORMAT, "%s: %s is %.9g, the model has %.9g", cpath, cmp[i].key, cmp[i].file,
                           cmp[i].model);

    /* model.safetensors: header */
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        char ipath[4300];
        snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
        if (access(ipath, F_OK) == 0)
            return mx_fail(MX_EFORMAT, "%s: sharded checkpoints (model.safetensors.index.json) are not supported; "
                           "save the model as one file", dir);
        return mx_fail(MX_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return mx_fail(MX_EIO, "%s: cannot stat", path); }
    const uint64_t fsize = (uint64_t)st.st_size;
    uint64_t hlen = 0;
    char* htext = NULL;
    plan* pl = NULL;
    float* conv = NULL;
    jv root;
    memset(&root, 0, sizeof root);
    const int ns = n_slots(mc);
    rc = MX_OK;
    if (fsize < 8 || mx_pread_all(fd, &hlen, 8, 0)) {
        rc = mx_fail(MX_EFORMAT, "%s: %llu bytes, too short for a safetensors file", path, (unsigned long long)fsize);
        goto out;
    }
    if (hlen > fsize - 8) {
        rc = mx_fail(MX_EFORMAT, "%s: header length %llu goes beyond the end of the file (%llu bytes): truncated or "
                     "not a safetensors file", path, (unsigned long long)hlen, (unsigned long long)fsize);
        goto out;
    }
    if (hlen < 2 || hlen > (100u << 20)) {
        rc = mx_fail(MX_EFORMAT, "%s: header length %llu is not plausible (2 .. 100 MiB)", path,
                     (unsigned long long)hlen);
        goto out;
    }
    htext = malloc(hlen + 1);
    pl = calloc((size_t)ns, sizeof *pl);
    if (!htext || !pl) { rc = mx_fail(MX_ENOMEM, "%s: out of memory", path); goto out; }
    if (mx_pread_all(fd, htext, hlen, 8)) { rc = mx_fail(MX_EIO, "%s: read error", path); goto out; }
    htext[hlen] = 0;
    char err[200];
    if (jparse_all(htext, hlen, &root, err, sizeof err)) {
        rc = mx_fail(MX_EFORMAT, "%s: the header is not valid JSON (%s): corrupt file?", path, err);
        goto out;
    }
    if (root.t != J_OBJ) {
        rc = mx_fail(MX_EFORMAT, "%s: the header is not a JSON object: corrupt file?", path);
        goto out;
    }
    const uint64_t data_len = fsize - 8 - hlen;
    /* every expected tensor: present, dtype, shape, offsets inside the file */
    for (int i = 0; i < ns; i++) {
        slot s = slot_at(mc, i);
        char name[128];
        mx_hf_tensor_name(s.t, s.layer, name, sizeof name);
        size_t off, numel;
        int nd;
        int64_t shape[2];
        slot_shape(m->info, s, &off, &numel, &nd, shape);
        pl[i].dst_off = off;
        pl[i].numel = numel;
        const jv* e = jget(&root, name);
        if (!e) {
            if (s.t == MX_P_HEAD && tie) continue; /* tied: the embedding is copied below */
            rc = mx_fail(MX_EFORMAT, "%s: tensor %s is missing", path, name);
            goto out;
        }
        const jv* dt = jget(e, "dtype");
        const jv* sh = jget(e, "shape");
        const jv* of = jget(e, "data_offsets");
        if (!dt || dt->t != J_STR || !sh || sh->t != J_ARR || !of || of->t != J_ARR || of->n != 2) {
            rc = mx_fail(MX_EFORMAT, "%s: tensor %s: entry needs dtype, shape and two data_offsets", path, name);
            goto out;
        }
        int dtype = !strcmp(dt->s, "F32") ? DT_F32 : !strcmp(dt->s, "BF16") ? DT_BF16 : !strcmp(dt->s, "F16") ? DT_F16 : -1;
        if (dtype < 0) {
            rc = mx_fail(MX_EFORMAT, "%s: tensor %s has dtype %s (F32, BF16 or F16 are read)", path, name, dt->s);
            goto out;
        }
        int shape_ok = sh->n == nd;
        for (int d = 0; d < sh->n && shape_ok; d++) {
            uint64_t u;
            shape_ok = !jas_u64(&sh->v[d], &u) && u == (uint64_t)shape[d];
        }
        if (!shape_ok) {
            char got[96] = "", want[64];
            size_t gl = 0;
            for (int d = 0; d < sh->n && gl < sizeof got - 24; d++)
                gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%.0f", d ? ", " : "",
                                       sh->v[d].t == J_NUM ? sh->v[d].num : -1.0);
            if (nd == 1) snprintf(want, sizeof want, "%lld", (long long)shape[0]);
            else snprintf(want, sizeof want, "%lld, %lld", (long long)shape[0], (long long)shape[1]);
            rc = mx_fail(MX_EFORMAT, "%s: tensor %s has shape [%s], the model needs [%s]", path, name, got, want);
            goto out;
        }
        uint64_t b0, b1, esz = dtype == DT_F32 ? 4 : 2;
        if (jas_u64(&of->v[0], &b0) || jas_u64(&of->v[1], &b1) || b1 < b0 || b1 - b0 != (uint64_t)numel * esz) {
            rc = mx_fail(MX_EFORMAT, "%s: tensor %s: data_offsets do not span %zu %s values", path, name, numel, dt->s);
            goto out;
        }
        if (b1 > data_len) {
            rc = mx_fail(MX_EFORMAT, "%s: tensor %s ends at byte %llu of the data, beyond its %llu bytes: the file is "
                         "truncated", path, name, (unsigned long long)b1, (unsigned long long)data_len);
            goto out;
        }
        pl[i].present = 1;
        pl[i].dtype = dtype;
        pl[i].begin = 8 + hlen + b0;
    }
    /* nothing else than what a plain Llama has */
    for (int j = 0; j < root.n; j++) {
        const char* k = root.k[j];
        if (!strcmp(k, "__metadata__") || is_ignorable(k)) continue;
        int known = 0;
        for (int i = 0; i < ns && !known; i++) {
            slot s = slot_at(mc, i);
            char name[128];
            mx_hf_tensor_name(s.t, s.layer, name, sizeof name);
            known = !strcmp(name, k);
        }
        if (!known) {
            rc = mx_fail(MX_EFORMAT, "%s: unexpected tensor %s (not part of this Llama configuration)", path, k);
            goto out;
        }
    }
    /* all checks passed: read */
    enum { CH = 1 << 16 };
    conv = malloc(CH * sizeof(float));
    if (!conv) { rc = mx_fail(MX_ENOMEM, "%s: out of memory", path); goto out; }
    for (int i = 0; i < ns; i++) {
        if (!pl[i].present) continue;
        float* dst = m->params + pl[i].dst_off; /* [numel] */
        if (pl[i].dtype == DT_F32) {
            if (mx_pread_all(fd, dst, pl[i].numel * 4, pl[i].begin)) { rc = mx_fail(MX_EIO, "%s: read error", path); goto out; }
            continue;
        }
        uint16_t* h = (uint16_t*)conv;
        for (size_t j = 0; j < pl[i].numel; j += CH) {
            size_t k = pl[i].numel - j < CH ? pl[i].numel - j : CH;
            if (mx_pread_all(fd, h, k * 2, pl[i].begin + j * 2)) { rc = mx_fail(MX_EIO, "%s: read error", path); goto out; }
            for (size_t e = 0; e < k; e++)
                dst[j + e] = pl[i].dtype == DT_BF16 ? mx_bf16_to_f32(h[e]) : f16_to_f32(h[e]);
        }
    }
    if (tie && !pl[ns - 1].present)
        memcpy(m->params + m->info[MX_P_HEAD].offset, m->params + m->info[MX_P_EMBED].offset,
               m->info[MX_P_EMBED].numel * sizeof(float));
out:
    jfree(&root);
    free(conv);
    free(pl);
    free(htext);
    close(fd);
    return rc;
}
