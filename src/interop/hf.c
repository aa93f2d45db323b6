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
 * Both files' JSON is read into a tree by the library's one JSON reader
 * (json.h: any valid JSON, with a depth limit). */
#include "mxlm/hf.h"
#include "mxlm/json.h"
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

/* ---- JSON (the one reader: src/util/json.c) ------------------------------------------ */

/* An exact non-negative integer below 2^53. */
static int jas_u64(const mx_json* x, uint64_t* u) {
    if (!x || x->t != MX_JSON_NUM || !(x->num >= 0) || x->num > 9007199254740992.0 || x->num != floor(x->num)) return -1;
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

/* ---- small helpers (files are written through util.h's mx_outfile) ------------------------ */

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
    char path[4200], e1[32], e2[32];
    if (mx_pathf(path, sizeof path, "%s/config.json", dir)) return MX_EINVAL;
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
    int rc = mx_write_atomic(path, b.s, b.n);
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

    char path[4200];
    if (mx_pathf(path, sizeof path, "%s/model.safetensors", dir)) return MX_EINVAL;
    mx_outfile w;
    rc = mx_out_open(&w, path);
    if (rc) { free(h.s); return rc; }
    uint64_t hlen = h.n;
    mx_out_write(&w, &hlen, 8);
    mx_out_write(&w, h.s, h.n);
    free(h.s);
    enum { CH = 1 << 16 };
    uint16_t* conv = bf16 ? malloc(CH * sizeof(uint16_t)) : NULL;
    if (bf16 && !conv) { mx_out_abort(&w); return mx_fail(MX_ENOMEM, "hf export: out of memory"); }
    for (int i = 0; i < ns && !w.err; i++) {
        size_t off, numel;
        int nd;
        int64_t shape[2];
        slot_shape(m->info, slot_at(c, i), &off, &numel, &nd, shape);
        const float* src = m->params + off; /* [numel] one layer's tensor */
        if (!bf16) { mx_out_write(&w, src, numel * 4); continue; }
        for (size_t j = 0; j < numel; j += CH) {
            size_t k = numel - j < CH ? numel - j : CH;
            for (size_t e = 0; e < k; e++) conv[e] = mx_bf16_from_f32(src[j + e]);
            mx_out_write(&w, conv, k * 2);
        }
    }
    free(conv);
    rc = mx_out_commit(&w, NULL);
    if (rc) return rc;
    return write_config(c, dir, bf16);
}

/* ---- reading -------------------------------------------------------------------------------- */

static int read_small_file(const char* path, char** out, size_t* n, size_t limit) {
    int fd = mx_open_input(path, NULL);
    if (fd < 0) return MX_EIO;
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

static int cfg_int(const mx_json* o, const char* key, int required, int dflt, int* out, const char* path) {
    const mx_json* x = mx_json_get(o, key);
    if (!x || x->t == MX_JSON_NULL) {
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

static int cfg_num(const mx_json* o, const char* key, double dflt, double* out, const char* path) {
    const mx_json* x = mx_json_get(o, key);
    if (!x || x->t == MX_JSON_NULL) { *out = dflt; return MX_OK; }
    if (x->t != MX_JSON_NUM || !(x->num > 0) || !isfinite(x->num))
        return mx_fail(MX_EFORMAT, "%s: \"%s\" must be a positive number", path, key);
    *out = x->num;
    return MX_OK;
}

/* rope_scaling / rope_parameters: absent, null or rope_type "default". */
static int rope_default(const mx_json* r) {
    if (!r || r->t == MX_JSON_NULL) return 1;
    if (r->t != MX_JSON_OBJ) return 0;
    const mx_json* t = mx_json_get(r, "rope_type");
    if (!t) t = mx_json_get(r, "type");
    return t && t->t == MX_JSON_STR && !strcmp(t->s, "default");
}

/* The config from a parsed config.json; *tie gets tie_word_embeddings. */
static int cfg_from_json(const mx_json* o, const char* path, mx_model_config* c, int* tie) {
    if (!o || o->t != MX_JSON_OBJ) return mx_fail(MX_EFORMAT, "%s: not a JSON object", path);
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "hf");
    const mx_json* mt = mx_json_get(o, "model_type");
    if (mt && (mt->t != MX_JSON_STR || strcmp(mt->s, "llama")))
        return mx_fail(MX_EFORMAT, "%s: model_type is %s%s%s, not \"llama\"", path, mt->t == MX_JSON_STR ? "\"" : "",
                       mt->t == MX_JSON_STR ? mt->s : "not a string", mt->t == MX_JSON_STR ? "\"" : "");
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
    const mx_json* rp = mx_json_get(o, "rope_parameters"); /* transformers 5 */
    const mx_json* rt = rp && rp->t == MX_JSON_OBJ ? mx_json_get(rp, "rope_theta") : NULL;
    if (mx_json_get(o, "rope_theta") || !rt) rc = cfg_num(o, "rope_theta", 10000.0, &theta, path); /* HF's default */
    else if (rt->t != MX_JSON_NUM || !(rt->num > 0)) rc = mx_fail(MX_EFORMAT, "%s: rope_parameters.rope_theta invalid", path);
    else theta = rt->num;
    if (rc) return rc;
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    if (!rope_default(mx_json_get(o, "rope_scaling")) || (rp && rp->t != MX_JSON_NULL && !rope_default(rp)))
        return mx_fail(MX_EFORMAT, "%s: rope scaling other than the default (e.g. Llama 3.1's \"llama3\") is not "
                       "supported by our RoPE", path);
    const mx_json* act = mx_json_get(o, "hidden_act");
    if (act && (act->t != MX_JSON_STR || strcmp(act->s, "silu")))
        return mx_fail(MX_EFORMAT, "%s: hidden_act must be \"silu\"", path);
    static const char* flags[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        const mx_json* f = mx_json_get(o, flags[i]);
        if (f && !(f->t == MX_JSON_BOOL && !f->b) && f->t != MX_JSON_NULL)
            return mx_fail(MX_EFORMAT, "%s: %s must be false (our model has no biases)", path, flags[i]);
    }
    const mx_json* tw = mx_json_get(o, "tie_word_embeddings");
    *tie = tw && tw->t == MX_JSON_BOOL && tw->b;
    rc = mx_model_config_check(c);
    if (rc) return mx_fail(MX_EFORMAT, "%s: %s", path, mx_last_error());
    return MX_OK;
}

static int load_config_json(const char* dir, mx_model_config* c, int* tie) {
    char path[4200], err[200];
    if (mx_pathf(path, sizeof path, "%s/config.json", dir)) return MX_EINVAL;
    char* text = NULL;
    size_t n = 0;
    int rc = read_small_file(path, &text, &n, 1u << 20);
    if (rc) return rc;
    mx_json root;
    if (mx_json_parse(text, n, &root, err, sizeof err)) {
        free(text);
        return mx_fail(MX_EFORMAT, "%s: invalid JSON: %s", path, err);
    }
    free(text);
    rc = cfg_from_json(&root, path, c, tie);
    mx_json_free(&root);
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

static uint64_t plan_end(const plan* p) { return p->begin + (uint64_t)p->numel * (p->dtype == DT_F32 ? 4 : 2); }

/* Two present tensors whose bytes overlap (*a, *b; the file would give one memory two meanings): 1, else 0. */
static int overlapping(const plan* pl, int ns, int* a, int* b) {
    for (int i = 0; i < ns; i++)
        for (int j = i + 1; j < ns && pl[i].present; j++)
            if (pl[j].present && pl[i].numel && pl[j].numel && pl[i].begin < plan_end(&pl[j]) &&
                pl[j].begin < plan_end(&pl[i])) {
                *a = i;
                *b = j;
                return 1;
            }
    return 0;
}

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
    if (mx_pathf(cpath, sizeof cpath, "%s/config.json", dir)) return MX_EINVAL;
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
    if (mx_pathf(path, sizeof path, "%s/model.safetensors", dir)) return MX_EINVAL;
    int fd = mx_open_input(path, NULL);
    if (fd < 0) {
        char ipath[4300];
        if (mx_pathf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir)) return MX_EINVAL;
        if (access(ipath, F_OK) == 0)
            return mx_fail(MX_EFORMAT, "%s: sharded checkpoints (model.safetensors.index.json) are not supported; "
                           "save the model as one file", dir);
        return MX_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return mx_fail(MX_EIO, "%s: cannot stat", path); }
    const uint64_t fsize = (uint64_t)st.st_size;
    uint64_t hlen = 0;
    char* htext = NULL;
    plan* pl = NULL;
    float* conv = NULL;
    mx_json root;
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
    if (mx_json_parse(htext, hlen, &root, err, sizeof err)) {
        rc = mx_fail(MX_EFORMAT, "%s: the header is not valid JSON (%s): corrupt file?", path, err);
        goto out;
    }
    if (root.t != MX_JSON_OBJ) {
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
        const mx_json* e = mx_json_get(&root, name);
        if (!e) {
            if (s.t == MX_P_HEAD && tie) continue; /* tied: the embedding is copied below */
            rc = mx_fail(MX_EFORMAT, "%s: tensor %s is missing", path, name);
            goto out;
        }
        if (s.t == MX_P_HEAD && tie) {
            rc = mx_fail(MX_EFORMAT, "%s: config.json has tie_word_embeddings: true, but the file holds a separate %s: "
                         "which head is meant? (tie_word_embeddings false to use it, or a file without it)", path,
                         name);
            goto out;
        }
        const mx_json* dt = mx_json_get(e, "dtype");
        const mx_json* sh = mx_json_get(e, "shape");
        const mx_json* of = mx_json_get(e, "data_offsets");
        if (!dt || dt->t != MX_JSON_STR || !sh || sh->t != MX_JSON_ARR || !of || of->t != MX_JSON_ARR || of->n != 2) {
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
                                       sh->v[d].t == MX_JSON_NUM ? sh->v[d].num : -1.0);
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
    int oa, ob;
    if (overlapping(pl, ns, &oa, &ob)) {
        char na[128], nb[128];
        slot sa = slot_at(mc, oa), sb = slot_at(mc, ob);
        mx_hf_tensor_name(sa.t, sa.layer, na, sizeof na);
        mx_hf_tensor_name(sb.t, sb.layer, nb, sizeof nb);
        rc = mx_fail(MX_EFORMAT, "%s: tensors %s and %s overlap in the file's data: corrupt or hand-made file",
                     path, na, nb);
        goto out;
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
    mx_json_free(&root);
    free(conv);
    free(pl);
    free(htext);
    close(fd);
    return rc;
}
