/* test_hf.c: Hugging Face interop (src/interop/hf.c, ./mxlm export). Export ->
 * load is bit-identical in F32 and equals RNE rounding in BF16 (ties checked
 * by hand); config.json reads back; F16 tensors and tied embeddings load;
 * truncated files, header lengths beyond the file, missing tensors, wrong
 * shapes, bad dtypes, corrupt headers and mismatched configs are refused
 * with a message and the model untouched; ./mxlm export end to end on a
 * 2-step run, checked by tools/safetensors_check.py (an independent pure
 * Python forward with HF's conventions) in F32 and BF16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/hf.h"
#include "mxlm/trainer.h"
#include "test.h"

static void micro(mx_model_config* c) {
    mx_model_preset("tiny", c);
    c->vocab = 64; c->dim = 32; c->n_layers = 2; c->n_heads = 2; c->n_kv_heads = 1; c->ffn = 64; c->seq_len = 16;
}

static int make_model(mx_llama* m, const mx_model_config* c) {
    mx_recipe r;
    if (mx_recipe_parse("fp32", &r)) return -1;
    return mx_llama_create(m, c, &r, 0, 0, 1);
}

static void fill(mx_llama* m, float v) {
    for (size_t i = 0; i < m->n_params; i++) m->params[i] = v;
}
static int all_equal(const mx_llama* m, float v) {
    for (size_t i = 0; i < m->n_params; i++)
        if (m->params[i] != v) return 0;
    return 1;
}

static int write_file(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f) return -1;
    size_t k = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && k == n) ? 0 : -1;
}

/* An exported micro model in TMPDIR/name (seeded weights plus special values). */
static int export_micro(const char* name, int bf16, mx_llama* a) {
    mx_model_config c;
    micro(&c);
    if (make_model(a, &c)) return -1;
    mx_llama_init_weights(a, 3);
    a->params[0] = -0.0f;
    a->params[1] = 1e-40f; /* subnormal */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), name);
    return mx_hf_export(a, dir, bf16);
}

TEST(hf_export_load_f32_bit_identical) {
    mx_llama a, b;
    REQUIRE(export_micro("hf_f32", 0, &a) == 0);
    REQUIRE(make_model(&b, &a.cfg) == 0);
    fill(&b, 7.0f);
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/hf_f32", test_tmpdir());
    REQUIRE(mx_hf_load(dir, &b) == 0);
    CHECK(!memcmp(a.params, b.params, a.n_params * 4));
    CHECK(signbit(b.params[0]) && b.params[0] == 0.0f);
    /* the container: 8-byte length, '{', data 8-aligned, exactly 4 bytes a value after it */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t n = 0;
    unsigned char* f = test_read_file(path, &n);
    REQUIRE(f && n > 8);
    uint64_t hlen;
    memcpy(&hlen, f, 8);
    CHECK_EQ_INT(hlen % 8, 0);
    CHECK_EQ_INT(f[8], '{');
    CHECK_EQ_INT(n, 8 + hlen + 4 * a.n_params);
    CHECK(strstr((char*)f + 8, "\"model.layers.1.mlp.down_proj.weight\":{\"dtype\":\"F32\",\"shape\":[32,64]") != NULL);
    CHECK(strstr((char*)f + 8, "\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[64,32]") != NULL);
    /* embed first in the data: its first value is params[0] = -0 */
    float v0;
    memcpy(&v0, f + 8 + hlen, 4);
    CHECK(v0 == 0.0f && signbit(v0));
    free(f);
    mx_llama_free(&a);
    mx_llama_free(&b);
}

TEST(hf_export_bf16_is_rne) {
    mx_llama a, b;
    mx_model_config c;
    micro(&c);
    REQUIRE(make_model(&a, &c) == 0);
    mx_llama_init_weights(&a, 4);
    /* ties and near-ties, by hand: bf16 keeps 7 fraction bits */
    a.params[0] = 1.00390625f;              /* 1 + 2^-8: tie, to even 1.0 */
    a.params[1] = 1.01171875f;              /* 1 + 3*2^-8: tie, to even 1 + 2^-6 */
    a.params[2] = -1.00390625f;             /* -tie: -1.0 */
    a.params[3] = nextafterf(1.00390625f, 2.0f); /* just above the tie: up */
    a.params[4] = 3.0e38f;                  /* rounds to a finite bf16 near the top */
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/hf_bf16", test_tmpdir());
    REQUIRE(mx_hf_export(&a, dir, 1) == 0);
    REQUIRE(make_model(&b, &c) == 0);
    REQUIRE(mx_hf_load(dir, &b) == 0);
    CHECK_SAME_F(b.params[0], 1.0f);
    CHECK_SAME_F(b.params[1], 1.015625f);
    CHECK_SAME_F(b.params[2], -1.0f);
    CHECK_SAME_F(b.params[3], 1.0078125f);
    CHECK_SAME_F(b.params[4], 3.00405527e38f); /* 0x7F61B1E6 -> bf16 0x7F62 */
    size_t bad = 0;
    for (size_t i = 0; i < a.n_params; i++) {
        float w = mx_round_bf16(a.params[i]);
        bad += memcmp(&w, &b.params[i], 4) != 0;
    }
    CHECK_EQ_INT(bad, 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t n = 0;
    unsigned char* f = test_read_file(path, &n);
    REQUIRE(f);
    uint64_t hlen;
    memcpy(&hlen, f, 8);
    CHECK_EQ_INT(n, 8 + hlen + 2 * a.n_params);
    uint16_t h0;
    memcpy(&h0, f + 8 + hlen, 2);
    CHECK_EQ_INT(h0, 0x3F80); /* 1.0 */
    free(f);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char* cj = test_read_file(path, &n);
    REQUIRE(cj);
    CHECK(strstr(cj, "\"torch_dtype\": \"bfloat16\"") != NULL);
    free(cj);
    mx_llama_free(&a);
    mx_llama_free(&b);
}

TEST(hf_config_reads_back) {
    mx_llama a;
    REQUIRE(export_micro("hf_cfg", 0, &a) == 0);
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/hf_cfg", test_tmpdir());
    mx_model_config r;
    REQUIRE(mx_hf_read_config(dir, &r) == 0);
    CHECK_EQ_INT(r.vocab, 64);
    CHECK_EQ_INT(r.dim, 32);
    CHECK_EQ_INT(r.n_layers, 2);
    CHECK_EQ_INT(r.n_heads, 2);
    CHECK_EQ_INT(r.n_kv_heads, 1);
    CHECK_EQ_INT(r.ffn, 64);
    CHECK_EQ_INT(r.seq_len, 16);
    CHECK_SAME_F(r.rope_theta, a.cfg.rope_theta);
    CHECK_SAME_F(r.norm_eps, a.cfg.norm_eps);
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n;
    char* cj = test_read_file(path, &n);
    REQUIRE(cj);
    CHECK(strstr(cj, "\"architectures\": [\"LlamaForCausalLM\"]") && strstr(cj, "\"head_dim\": 16") &&
          strstr(cj, "\"rms_norm_eps\": 1e-05") && strstr(cj, "\"rope_theta\": 500000") &&
          strstr(cj, "\"tie_word_embeddings\": false") && strstr(cj, "\"rope_scaling\": null"));
    free(cj);
    mx_llama_free(&a);

    /* a config as others write it: defaults, nesting, escapes, transformers 5 rope_parameters */
    snprintf(dir, sizeof dir, "%s/hf_cfg2", test_tmpdir());
    REQUIRE(test_sh("mkdir -p %s", dir) == 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char* other = "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":64,"
                        "\"intermediate_size\":96,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"vocab_size\":100,"
                        "\"note\":\"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\"\",\"quantization\":{\"a\":[1,2.5e-3,{\"b\":null}]},"
                        "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},\"use_cache\":true}";
    REQUIRE(write_file(path, other, strlen(other)) == 0);
    REQUIRE(mx_hf_read_config(dir, &r) == 0);
    CHECK_EQ_INT(r.n_kv_heads, 4);   /* default: num_attention_heads */
    CHECK_EQ_INT(r.seq_len, 2048);   /* HF's default */
    CHECK_SAME_F(r.norm_eps, 1e-6f); /* HF's default */
    CHECK_SAME_F(r.rope_theta, 10000.0f);
    CHECK_EQ_INT(r.n_layers, 3);
    /* refusals */
    struct { const char* json; const char* why; } bad[] = {
        {"{\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"vocab_size\":"
         "100,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}}", "rope scaling"},
        {"{\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"vocab_size\":"
         "100,\"head_dim\":32}", "head_dim 32"},
        {"{\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":3,\"num_attention_heads\":4}", "\"vocab_size\" is missing"},
        {"{\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"vocab_size\":"
         "100,\"attention_bias\":true}", "attention_bias"},
        {"{\"model_type\":\"gpt2\",\"hidden_size\":64}", "model_type"},
        {"{\"hidden_size\":64,,}", "invalid JSON"},
        {"{\"hidden_size\":-64,\"intermediate_size\":96,\"num_hidden_layers\":3,\"num_attention_heads\":4,"
         "\"vocab_size\":100}", "hidden_size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        REQUIRE(write_file(path, bad[i].json, strlen(bad[i].json)) == 0);
        int rc = mx_hf_read_config(dir, &r);
        CHECKF(rc == MX_EFORMAT && strstr(mx_last_error(), bad[i].why), "case %zu: rc %d, '%s'", i, rc, mx_last_error());
    }
}

static char* find(char* buf, size_t n, const char* s) {
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(buf + i, s, k)) return buf + i;
    return NULL;
}

/* Replace the first `from` after `after` (in the header) by `to` (same length). */
static int patch(char* buf, size_t n, const char* after, const char* from, const char* to) {
    char* p = find(buf, n, after);
    if (!p) return -1;
    char* q = find(p, n - (size_t)(p - buf), from);
    if (!q || strlen(from) != strlen(to)) return -1;
    memcpy(q, to, strlen(to));
    return 0;
}

TEST(hf_load_refuses_corrupt_inputs) {
    mx_llama a, b;
    REQUIRE(export_micro("hf_bad", 0, &a) == 0);
    REQUIRE(make_model(&b, &a.cfg) == 0);
    const char* T = test_tmpdir();
    char src[512], dir[512], path[600];
    snprintf(src, sizeof src, "%s/hf_bad/model.safetensors", T);
    snprintf(dir, sizeof dir, "%s/hf_bad2", T);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(test_sh("mkdir -p %s && cp %s/hf_bad/config.json %s/", dir, T, dir) == 0);
    size_t n = 0;
    char* good = test_read_file(src, &n);
    REQUIRE(good);
    uint64_t hlen;
    memcpy(&hlen, good, 8);
    char* f = malloc(n);
    REQUIRE(f);
    enum { TRUNC, HLEN, MISSING, SHAPE, DTYPE, JSON, SHORT, NCASE };
    const char* why[NCASE] = {
        [TRUNC] = "lm_head.weight ends at byte", [HLEN] = "beyond the end of the file",
        [MISSING] = "tensor model.norm.weight is missing", [SHAPE] = "has shape [31], the model needs [32]",
        [DTYPE] = "dtype F64", [JSON] = "not valid JSON", [SHORT] = "too short",
    };
    for (int k = 0; k < NCASE; k++) {
        memcpy(f, good, n);
        size_t len = n;
        if (k == TRUNC) len = n - 100;
        if (k == HLEN) { uint64_t big = n; memcpy(f, &big, 8); }
        if (k == MISSING) REQUIRE(patch(f + 8, hlen, "\"model.norm.weight\"", "norm", "norX") == 0);
        if (k == SHAPE) REQUIRE(patch(f + 8, hlen, "\"model.norm.weight\"", "[32]", "[31]") == 0);
        if (k == DTYPE) REQUIRE(patch(f + 8, hlen, "\"model.norm.weight\"", "F32", "F64") == 0);
        if (k == JSON) f[8 + 40] = '}';
        if (k == SHORT) len = 5;
        REQUIRE(write_file(path, f, len) == 0);
        fill(&b, 7.0f);
        int rc = mx_hf_load(dir, &b);
        CHECKF(rc == MX_EFORMAT && strstr(mx_last_error(), why[k]), "case %d: rc %d, '%s'", k, rc, mx_last_error());
        CHECKF(all_equal(&b, 7.0f), "case %d: the model was modified", k);
    }
    /* mismatched configs: another model, another config.json */
    mx_model_config c2 = a.cfg;
    c2.ffn = 96;
    mx_llama w;
    REQUIRE(make_model(&w, &c2) == 0);
    REQUIRE(write_file(path, good, n) == 0);
    fill(&w, 7.0f);
    CHECK_EQ_INT(mx_hf_load(dir, &w), MX_EFORMAT);
    CHECKF(strstr(mx_last_error(), "intermediate_size is 64, the model has 96"), "'%s'", mx_last_error());
    CHECK(all_equal(&w, 7.0f));
    mx_llama_free(&w);
    REQUIRE(test_sh("sed -i 's/\"num_key_value_heads\": 1/\"num_key_value_heads\": 2/' %s/config.json", dir) == 0);
    fill(&b, 7.0f);
    CHECK_EQ_INT(mx_hf_load(dir, &b), MX_EFORMAT);
    CHECKF(strstr(mx_last_error(), "num_key_value_heads is 2, the model has 1"), "'%s'", mx_last_error());
    CHECK(all_equal(&b, 7.0f));
    /* no model file at all */
    REQUIRE(test_sh("cp %s/hf_bad/config.json %s/ && rm %s", T, dir, path) == 0);
    CHECK_EQ_INT(mx_hf_load(dir, &b), MX_EIO);
    CHECK(strstr(mx_last_error(), "cannot open") != NULL);
    /* the intact file still loads */
    REQUIRE(write_file(path, good, n) == 0);
    CHECK_EQ_INT(mx_hf_load(dir, &b), 0);
    CHECK(!memcmp(a.params, b.params, a.n_params * 4));
    free(f);
    free(good);
    mx_llama_free(&a);
    mx_llama_free(&b);
}

/* F16 tensors and tie_word_embeddings (no lm_head), as another tool may write them. */
TEST(hf_load_f16_and_tied_head) {
    mx_model_config c;
    micro(&c);
    mx_llama m;
    REQUIRE(make_model(&m, &c) == 0);
    static const uint16_t h16[] = {0x0000, 0x3400, 0x3800, 0x3A00, 0xB400, 0xB800, 0x0001, 0x7BFF, 0x8000};
    static const float f32[] = {0.0f, 0.25f, 0.5f, 0.75f, -0.25f, -0.5f, 5.9604644775390625e-08f, 65504.0f, -0.0f};
    const int nv = 9;
    /* header and data in HF order (embed, layers, norm), lm_head left out */
    char* hdr = malloc(1 << 16);
    REQUIRE(hdr);
    size_t hl = (size_t)snprintf(hdr, 1 << 16, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    size_t total = m.n_params - m.info[MX_P_HEAD].numel;
    for (int t = 0; t < MX_P_COUNT; t++) {
        if (t == MX_P_HEAD) continue;
        const mx_param_info* in = &m.info[t];
        int nl = in->per_layer ? c.n_layers : 1;
        for (int l = 0; l < nl; l++) {
            char name[128];
            mx_hf_tensor_name(t, l, name, sizeof name);
            uint64_t nb = (uint64_t)in->rows * in->cols * 2;
            if (in->rows == 1)
                hl += (size_t)snprintf(hdr + hl, (1 << 16) - hl, ",\"%s\":{\"dtype\":\"F16\",\"shape\":[%d],"
                                       "\"data_offsets\":[%llu,%llu]}", name, in->cols, (unsigned long long)off,
                                       (unsigned long long)(off + nb));
            else
                hl += (size_t)snprintf(hdr + hl, (1 << 16) - hl, ",\"%s\":{\"dtype\":\"F16\",\"shape\":[%d,%d],"
                                       "\"data_offsets\":[%llu,%llu]}", name, in->rows, in->cols,
                                       (unsigned long long)off, (unsigned long long)(off + nb));
            off += nb;
        }
    }
    hl += (size_t)snprintf(hdr + hl, (1 << 16) - hl, "}");
    REQUIRE(off == total * 2);
    /* file order is storage order here (the tensor types in enum order, layers inside), so value k of
     * the data is parameter k: element e gets h16[e % nv] */
    size_t fsz = 8 + hl + total * 2;
    unsigned char* file = malloc(fsz);
    REQUIRE(file);
    uint64_t h64 = hl;
    memcpy(file, &h64, 8);
    memcpy(file + 8, hdr, hl);
    for (size_t e = 0; e < total; e++) memcpy(file + 8 + hl + 2 * e, &h16[e % nv], 2);
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/hf_f16", test_tmpdir());
    REQUIRE(test_sh("mkdir -p %s", dir) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(write_file(path, file, fsz) == 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char* cj = "{\"model_type\":\"llama\",\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":2,"
                     "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"vocab_size\":64,\"rms_norm_eps\":1e-5,"
                     "\"rope_theta\":500000.0,\"tie_word_embeddings\":true,\"torch_dtype\":\"float16\"}";
    REQUIRE(write_file(path, cj, strlen(cj)) == 0);
    fill(&m, 7.0f);
    REQUIRE(mx_hf_load(dir, &m) == 0);
    size_t bad = 0;
    for (size_t e = 0; e < total; e++) bad += memcmp(&m.params[e], &f32[e % nv], 4) != 0;
    CHECK_EQ_INT(bad, 0);
    /* the head is a copy of the embedding */
    CHECK(!memcmp(m.params + m.info[MX_P_HEAD].offset, m.params + m.info[MX_P_EMBED].offset,
                  m.info[MX_P_EMBED].numel * 4));
    /* untied, the missing head is an error */
    const char* cj2 = "{\"model_type\":\"llama\",\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":2,"
                      "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"vocab_size\":64,\"rms_norm_eps\":1e-5,"
                      "\"rope_theta\":500000.0}";
    REQUIRE(write_file(path, cj2, strlen(cj2)) == 0);
    CHECK_EQ_INT(mx_hf_load(dir, &m), MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "tensor lm_head.weight is missing") != NULL);
    free(file);
    free(hdr);
    mx_llama_free(&m);
}

/* ---- ./mxlm export end to end ------------------------------------------------------------ */

#define MICRO_RUN "--vocab 256 --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --context 32 --val-tokens 256"

/* Shards TMPDIR/<p>train.bin, <p>val.bin (seed), a MICRO_RUN training on them (opts; batch 2 x 32) into
 * TMPDIR/run (its output in TMPDIR/<log>.log), exported to TMPDIR/hf (eopts; TMPDIR/<p>export.log). 1: done. */
static int train_export(const char* p, uint32_t seed, const char* opts, const char* run, const char* log,
                        const char* hf, const char* eopts) {
    const char* T = test_tmpdir();
    const char* bin = test_mxlm_bin();
    test_sentence_shards(p, seed, 20000, 4000);
    return test_sh("%s train " MICRO_RUN " %s --batch 2 --seq 32 --train %s/%strain.bin --val %s/%sval.bin --out %s/%s > "
                   "%s/%s.log 2>&1", bin, opts, T, p, T, p, T, run, T, log) == 0 &&
           test_sh("%s export --hf %s/%s --run %s/%s %s > %s/%sexport.log 2>&1", bin, T, hf, T, run, eopts, T, p) == 0;
}

TEST(hf_export_cli_end_to_end) {
    const char* T = test_tmpdir();
    const char* bin = test_mxlm_bin();
    REQUIRE(test_sh("rm -rf %s/hf_run %s/hf_out %s/hf_out16 %s/hf_syn", T, T, T, T) == 0);
    REQUIRE(train_export("hf_", 777, "--steps 2", "hf_run", "hf_train", "hf_out", "--ref-tokens 16"));
    CHECK(test_log_has("hf_export", "verified: read back bit-identical"));
    CHECK(test_log_has("hf_export", "(step 2)"));
    CHECK(test_log_has("hf_export", "16 tokens (validation)"));

    /* the export holds the checkpoint's parameters, bit for bit */
    char dir[512], ckpt[600];
    snprintf(dir, sizeof dir, "%s/hf_out", T);
    mx_model_config c;
    REQUIRE(mx_hf_read_config(dir, &c) == 0);
    CHECK_EQ_INT(c.vocab, 256);
    CHECK_EQ_INT(c.dim, 64);
    CHECK_EQ_INT(c.seq_len, 32);
    mx_llama a, b;
    REQUIRE(make_model(&a, &c) == 0);
    REQUIRE(make_model(&b, &c) == 0);
    snprintf(dir, sizeof dir, "%s/hf_run", T);
    REQUIRE(mx_ckpt_latest(dir, ckpt, sizeof ckpt) == 1);
    mx_ckpt_meta meta;
    char fp[4096];
    REQUIRE(mx_ckpt_load_params(ckpt, &a, &meta, fp, sizeof fp) == 0);
    CHECK_EQ_INT(meta.step, 2);
    CHECK(strstr(fp, "dim = 64\n") != NULL);
    snprintf(dir, sizeof dir, "%s/hf_out", T);
    REQUIRE(mx_hf_load(dir, &b) == 0);
    CHECK(!memcmp(a.params, b.params, a.n_params * 4));
    /* the reference loss is the model's FP32 loss on the first validation window */
    {
        mx_loader l;
        char vg[600];
        snprintf(vg, sizeof vg, "%s/hf_val.bin", T);
        REQUIRE(mx_loader_open(&l, vg, 16, 256) == 0);
        int32_t tok[16], tgt[16];
        REQUIRE(mx_loader_val_window(&l, 0, tok, tgt) == 0);
        mx_loader_close(&l);
        float loss = 0;
        REQUIRE(mx_llama_forward(&b, tok, tgt, 1, 16, &loss) == 0);
        char rp[600];
        snprintf(rp, sizeof rp, "%s/hf_out/mxlm_reference.json", T);
        size_t n;
        char* ref = test_read_file(rp, &n);
        REQUIRE(ref);
        char* lp = strstr(ref, "\"loss\": ");
        REQUIRE(lp);
        CHECK_SAME_F((float)strtod(lp + 8, NULL), loss);
        char want[64];
        snprintf(want, sizeof want, "\"tokens\": [%d,%d,", tok[0], tok[1]);
        CHECK(strstr(ref, want) != NULL);
        free(ref);
    }
    mx_llama_free(&a);
    mx_llama_free(&b);

    /* independent checks: container, names/shapes and a float64 HF-convention forward (python3, stdlib only) */
    REQUIRE(test_sh("command -v python3 > /dev/null") == 0);
    CHECK(test_sh("python3 tools/safetensors_check.py %s/hf_out/model.safetensors --config %s/hf_out/config.json "
                  "--expect-dtype F32 --reference %s/hf_out/mxlm_reference.json > %s/hf_py.log 2>&1", T, T, T, T) == 0);
    CHECK(test_log_has("hf_py", "PASS"));
    /* BF16: checked against its own reference (weights rounded), and the F32 reference must fail it */
    REQUIRE(test_sh("%s export --hf %s/hf_out16 --run %s/hf_run --bf16 --ref-tokens 16 > %s/hf_export16.log 2>&1", bin,
                    T, T, T) == 0);
    CHECK(test_log_has("hf_export16", "equal to the BF16 rounding of every value"));
    CHECK(test_sh("python3 tools/safetensors_check.py %s/hf_out16/model.safetensors --config %s/hf_out16/config.json "
                  "--expect-dtype BF16 --reference %s/hf_out16/mxlm_reference.json > %s/hf_py16.log 2>&1", T, T, T,
                  T) == 0);
    CHECK(test_sh("python3 tools/safetensors_check.py %s/hf_out16/model.safetensors --config %s/hf_out16/config.json "
                  "--reference %s/hf_out/mxlm_reference.json --tol 1e-6 > %s/hf_py16x.log 2>&1", T, T, T, T) == 1);
    /* synthetic tokens when the shards are not there */
    CHECK(test_sh("%s export --hf %s/hf_syn --run %s/hf_run --ref-tokens 8 --val '%s/none*.bin' > %s/hf_syn.log 2>&1",
                  bin, T, T, T, T) == 0);
    CHECK(test_sh("grep -q '\"tokens\": \\[0,1,2,3,4,5,6,7\\]' %s/hf_syn/mxlm_reference.json", T) == 0);
    /* refusals */
    CHECK_EQ_INT(test_sh("%s export --hf %s/hf_x > /dev/null 2>&1", bin, T), 2);
    CHECK_EQ_INT(test_sh("%s export --hf %s/hf_x --run %s/hf_run --ref-tokens 33 > /dev/null 2>&1", bin, T, T), 2);
    REQUIRE(test_sh("mkdir -p %s/hf_empty && cp %s/hf_run/config.txt %s/hf_empty/", T, T, T) == 0);
    CHECK_EQ_INT(test_sh("%s export --hf %s/hf_x --run %s/hf_empty > %s/hf_empty.log 2>&1", bin, T, T, T), 1);
    CHECK(test_log_has("hf_empty", "no checkpoint"));
    CHECK_EQ_INT(test_sh("%s export --hf %s/hf_x --run %s/nowhere > %s/hf_nowhere.log 2>&1", bin, T, T, T), 1);
    CHECK(test_log_has("hf_nowhere", "config.txt"));
}

/* --init-from: a run started from an export evaluates, at step 0, exactly where the exported run
 * ended (same weights, same validation set: the same loss bits); a directory whose config.json
 * does not match the model is refused before anything is trained. */
TEST(hf_init_from_continues_the_exported_weights) {
    const char* T = test_tmpdir();
    const char* bin = test_mxlm_bin();
    REQUIRE(test_sh("rm -rf %s/hfi_a %s/hfi_b %s/hfi_c %s/hfi_hf", T, T, T, T) == 0);
    REQUIRE(train_export("hfi_", 778, "--steps 3 --recipe fp32", "hfi_a", "hfi_a", "hfi_hf", ""));
    REQUIRE(test_sh("%s train " MICRO_RUN " --steps 1 --batch 2 --seq 32 --recipe fp32 --train %s/hfi_train.bin "
                    "--val %s/hfi_val.bin --init-from %s/hfi_hf --out %s/hfi_b > %s/hfi_b.log 2>&1", bin, T, T, T, T,
                    T) == 0);
    CHECK(test_log_has("hfi_b", "initial weights from"));
    char a[8][32], b[8][32];
    int na = test_metric_strings("hfi_a", "val_loss", "event", a, 8);
    int nb = test_metric_strings("hfi_b", "val_loss", "event", b, 8);
    REQUIRE(na >= 2 && nb >= 1);
    CHECK(!strcmp(a[na - 1], b[0])); /* a's last evaluation == b's step-0 evaluation, bit for bit */
    /* another width: refused, naming the mismatch */
    CHECK(test_sh("%s train " MICRO_RUN " --steps 1 --batch 2 --seq 32 --dim 96 --recipe bf16 --train %s/hfi_train.bin "
                  "--val %s/hfi_val.bin --init-from %s/hfi_hf --out %s/hfi_c > %s/hfi_c.log 2>&1", bin, T, T, T, T,
                  T) == 1);
    CHECK(test_log_has("hfi_c", "hidden_size"));
}
