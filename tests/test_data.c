/* test_data.c: token shards (llm.c .bin), prep, the embedded corpus. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/data.h"
#include "mxlm/mx.h"
#include "mxlm/shard.h"
#include "mxlm/tokenizer.h"
#include "test.h"

static void put_i32(FILE* f, int32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    fwrite(b, 1, 4, f);
}
/* A hand-made shard: header (magic, version, count) then `nbytes` payload bytes 0,1,2,... */
static void make_raw(const char* path, int32_t magic, int32_t version, int32_t count, int nbytes) {
    FILE* f = fopen(path, "wb");
    put_i32(f, magic); put_i32(f, version); put_i32(f, count);
    for (int i = 3; i < MX_SHARD_HEADER_INTS; i++) put_i32(f, 0);
    for (int i = 0; i < nbytes; i++) fputc(i & 0xff, f);
    fclose(f);
}

TEST(shard_write_read_v1) {
    char p[512]; snprintf(p, sizeof p, "%s/v1.bin", test_tmpdir());
    uint32_t t[5] = {0, 1, 50256, 65535, 258};
    REQUIRE(mx_shard_write(p, t, 5, 1) == 0);
    FILE* f = fopen(p, "rb"); REQUIRE(f);
    uint8_t b[1024 + 10]; size_t n = fread(b, 1, sizeof b, f); CHECK(fgetc(f) == EOF); fclose(f);
    CHECK_EQ_INT(n, 1024 + 10);                          /* header + 5 x uint16 */
    CHECK_EQ_INT(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24, 20240520);
    CHECK_EQ_INT(b[4], 1); CHECK_EQ_INT(b[8], 5);
    CHECK_EQ_INT(b[1024 + 4] | b[1024 + 5] << 8, 50256);   /* little-endian uint16 */
    mx_shard s;
    REQUIRE(mx_shard_open(&s, p) == 0);
    CHECK_EQ_INT(s.version, 1); CHECK_EQ_INT(s.n_tokens, 5);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(mx_shard_token(&s, i), t[i]);
    uint32_t mx; mx_shard_max_token(&s, &mx); CHECK_EQ_INT(mx, 65535);
    CHECK(mx_shard_check_vocab(&s, 65536) == 0);
    CHECK(mx_shard_check_vocab(&s, 50257) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "index 3") && strstr(mx_last_error(), "v1.bin"));
    mx_shard_close(&s);
}

TEST(shard_write_read_v2) {
    char p[512]; snprintf(p, sizeof p, "%s/v2.bin", test_tmpdir());
    uint32_t t[3] = {128000, 7, 200018};
    CHECK(mx_shard_write(p, t, 3, 1) == MX_EINVAL);      /* does not fit uint16 */
    CHECK(strstr(mx_last_error(), "128000") != NULL);
    REQUIRE(mx_shard_write(p, t, 3, 2) == 0);
    mx_shard s;
    REQUIRE(mx_shard_open(&s, p) == 0);
    CHECK_EQ_INT(s.version, 2); CHECK_EQ_INT(s.n_tokens, 3); CHECK_EQ_INT(s.map_len, 1024 + 12);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(mx_shard_token(&s, i), t[i]);
    mx_shard_close(&s);
    /* empty shard is valid */
    REQUIRE(mx_shard_write(p, t, 0, 1) == 0);
    REQUIRE(mx_shard_open(&s, p) == 0);
    CHECK_EQ_INT(s.n_tokens, 0);
    mx_shard_close(&s);
}

TEST(shard_rejects_bad_files) {
    char p[512]; snprintf(p, sizeof p, "%s/bad.bin", test_tmpdir());
    mx_shard s;
    make_raw(p, 20240521, 1, 4, 8);                       /* wrong magic */
    CHECK(mx_shard_open(&s, p) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "bad.bin") && strstr(mx_last_error(), "magic"));
    make_raw(p, 20240520, 3, 4, 8);                       /* unknown version */
    CHECK(mx_shard_open(&s, p) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "version 3") != NULL);
    make_raw(p, 20240520, 1, 5, 8);                       /* truncated: 5 tokens need 10 bytes */
    CHECK(mx_shard_open(&s, p) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "truncated") != NULL);
    make_raw(p, 20240520, 1, 3, 8);                       /* trailing bytes */
    CHECK(mx_shard_open(&s, p) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "trailing") != NULL);
    make_raw(p, 20240520, 2, 2, 8);                       /* version 2: 2 tokens = 8 bytes: valid */
    CHECK(mx_shard_open(&s, p) == 0);
    CHECK_EQ_INT(mx_shard_token(&s, 1), 0x07060504);
    mx_shard_close(&s);
    make_raw(p, 20240520, -1, 0, 0);
    CHECK(mx_shard_open(&s, p) == MX_EFORMAT);
    make_raw(p, 20240520, 1, -2, 0);
    CHECK(mx_shard_open(&s, p) == MX_EFORMAT);
    FILE* f = fopen(p, "wb"); fwrite("short", 1, 5, f); fclose(f);   /* shorter than the header */
    CHECK(mx_shard_open(&s, p) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "truncated") != NULL);
    char q[600]; snprintf(q, sizeof q, "%s/missing.bin", test_tmpdir());
    CHECK(mx_shard_open(&s, q) == MX_EIO);
    CHECK(strstr(mx_last_error(), "missing.bin") != NULL);
    CHECK(mx_shard_open(&s, test_tmpdir()) == MX_EFORMAT);   /* a directory */
}

TEST(shard_write_failure_leaves_nothing) {
    char p[512]; snprintf(p, sizeof p, "%s/nodir/x.bin", test_tmpdir());
    uint32_t t[1] = {1};
    CHECK(mx_shard_write(p, t, 1, 1) == MX_EIO);
    CHECK(strstr(mx_last_error(), "nodir") != NULL);
    snprintf(p, sizeof p, "%s/keep.bin", test_tmpdir());
    REQUIRE(mx_shard_write(p, t, 1, 1) == 0);
    uint32_t big[1] = {70000};
    CHECK(mx_shard_write(p, big, 1, 1) == MX_EINVAL);    /* refused: the old file stays intact */
    mx_shard s;
    REQUIRE(mx_shard_open(&s, p) == 0);
    CHECK_EQ_INT(s.n_tokens, 1); CHECK_EQ_INT(mx_shard_token(&s, 0), 1);
    mx_shard_close(&s);
    CHECK_EQ_INT(test_sh("ls %s | grep -c tmp >/dev/null", test_tmpdir()), 1);   /* no temporary left */
}

/* ---- the embedded corpus and the tiny tokenizer (built by `make`) ---- */
static uint64_t fnv_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    uint64_t h = 1469598103934665603ull;
    int c;
    while ((c = fgetc(f)) != EOF) { h ^= (uint8_t)c; h *= 1099511628211ull; }
    fclose(f);
    return h;
}
/* Reproducibility: the tiny rank file and shards are the same bytes on every machine and run
 * (FNV-1a 64 of the files; sha256 in docs/data.md). A change to the corpus, the BPE trainer, the
 * tokenizer or prep that alters them must update these on purpose. (The shards changed once when prep
 * began to write the tokenizer record into header bytes 12..99: include/mxlm/tokrec.h.) */
TEST(tiny_outputs_golden_hash) {
    uint64_t h1 = fnv_file(MX_TINY_RANKS), h2 = fnv_file(MX_TINY_TRAIN), h3 = fnv_file(MX_TINY_VAL);
    CHECKF(h1 == 0x92acecd067491f73ull, "tiny.tiktoken fnv 0x%016llx", (unsigned long long)h1);
    CHECKF(h2 == 0xea91cbb724e6ba48ull, "tiny_train.bin fnv 0x%016llx", (unsigned long long)h2);
    CHECKF(h3 == 0x4090121b95ff2bebull, "tiny_val.bin fnv 0x%016llx", (unsigned long long)h3);
}
TEST(tiny_shards_from_make) {
    mx_shard tr, va;
    REQUIRE(mx_shard_open(&tr, MX_TINY_TRAIN) == 0);
    REQUIRE(mx_shard_open(&va, MX_TINY_VAL) == 0);
    CHECK_EQ_INT(tr.version, 1); CHECK_EQ_INT(va.version, 1);
    CHECK(mx_shard_check_vocab(&tr, MX_TINY_VOCAB) == 0);
    CHECK(mx_shard_check_vocab(&va, MX_TINY_VOCAB) == 0);
    int64_t eot_tr = 0, eot_va = 0;
    for (int64_t i = 0; i < tr.n_tokens; i++) eot_tr += mx_shard_token(&tr, i) == MX_TINY_EOT;
    for (int64_t i = 0; i < va.n_tokens; i++) eot_va += mx_shard_token(&va, i) == MX_TINY_EOT;
    CHECK_EQ_INT(mx_shard_token(&tr, 0), MX_TINY_EOT);
    CHECK_EQ_INT(mx_shard_token(&va, 0), MX_TINY_EOT);
    CHECK_EQ_INT(eot_tr, 1129);   /* 1189 chapters: the last 60 (5%, rounded up) are validation */
    CHECK_EQ_INT(eot_va, 60);
    CHECK(tr.n_tokens > 900000 && tr.n_tokens < 1200000);
    mx_shard_close(&tr); mx_shard_close(&va);
    mx_tokenizer* t;
    REQUIRE(mx_tok_open(&t, MX_TINY_RANKS, MX_PAT_R50K) == 0);
    CHECK_EQ_INT(mx_tok_vocab_size(t), MX_TINY_VOCAB);
    CHECK_EQ_INT(mx_tok_eot(t), MX_TINY_EOT);
    mx_ids ids = {0};
    const char* s = "In the beginning God created the heaven and the earth.";
    REQUIRE(mx_tok_encode(t, s, strlen(s), &ids) == 0);
    CHECK(ids.n >= 10 && ids.n <= 14);       /* common words are single tokens */
    char* back; size_t bl;
    REQUIRE(mx_tok_decode(t, ids.ids, ids.n, &back, &bl) == 0);
    CHECK(bl == strlen(s) && !memcmp(back, s, bl));
    free(back); mx_ids_free(&ids); mx_tok_free(t);
}

TEST(bpe_train_deterministic) {
    const char* bin = test_mxlm_bin();
    const char* d = test_tmpdir();
    /* 40 chapters, vocabulary 400: twice, byte-identical; the first 256 ranks are the bytes */
    CHECK_EQ_INT(test_sh("%s bpe --vocab 400 --val-docs 1149 --out %s/b1.tiktoken data/kjv.jsonl.gz && "
                         "%s bpe --vocab 400 --val-docs 1149 --out %s/b2.tiktoken data/kjv.jsonl.gz && "
                         "cmp %s/b1.tiktoken %s/b2.tiktoken && test $(wc -l < %s/b1.tiktoken) = 399",
                         bin, d, bin, d, d, d, d), 0);
    mx_tokenizer* t;
    char p[600]; snprintf(p, sizeof p, "%s/b1.tiktoken", d);
    REQUIRE(mx_tok_open(&t, p, MX_PAT_R50K) == 0);
    for (uint32_t b = 0; b < 256; b++) {
        size_t l; const uint8_t* x = mx_tok_token_bytes(t, b, &l);
        CHECK(x && l == 1 && x[0] == b);
    }
    CHECK_EQ_INT(mx_tok_eot(t), 399);
    mx_tok_free(t);
}

/* ---- prep ---- */
static const char* k_docs[3] = {"Hello world.\nIt's \"quoted\" text.", "Second doc \xc3\xa9\xe2\x82\xac \\ tab\there",
                                "third"};
static void write_jsonl(const char* path) {
    FILE* f = fopen(path, "w");
    fprintf(f, "{\"text\": \"Hello world.\\nIt's \\\"quoted\\\" text.\", \"meta\": {\"a\": [1, 2.5e3, null, true]}}\n");
    fprintf(f, "{\"id\": 7, \"text\": \"Second doc \\u00e9\xe2\x82\xac \\\\ tab\\there\"}\n\n");
    fprintf(f, "{\"text\":\"third\"}");
    fclose(f);
}
static int64_t expect_tokens(const mx_tokenizer* t, uint32_t* out) {
    int64_t n = 0;
    for (int d = 0; d < 3; d++) {
        mx_ids ids = {0};
        mx_tok_encode(t, k_docs[d], strlen(k_docs[d]), &ids);
        out[n++] = mx_tok_doc_token(t);
        for (size_t i = 0; i < ids.n; i++) out[n++] = ids.ids[i];
        mx_ids_free(&ids);
    }
    return n;
}
TEST(prep_gz_and_zst) {
    const char* bin = test_mxlm_bin();
    const char* d = test_tmpdir();
    char p[600]; snprintf(p, sizeof p, "%s/docs.jsonl", d);
    write_jsonl(p);
    REQUIRE(test_sh("cd %s && gzip -c docs.jsonl > c4.json.gz && zstd -q -c docs.jsonl > pile.jsonl.zst", d) == 0);
    mx_tokenizer* t;
    REQUIRE(mx_tok_open(&t, "tests/fixtures/tokenizer/r50k_base.trim.tiktoken", MX_PAT_R50K) == 0);
    uint32_t want[256];
    int64_t nw = expect_tokens(t, want);
    const char* ins[2] = {"c4.json.gz", "pile.jsonl.zst"};
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(test_sh("cd %s && rm -f o_* && %s/%s prep --quiet --ranks %s/tests/fixtures/tokenizer/r50k_base.trim.tiktoken "
                             "--pattern r50k --out o %s", d, getenv("PWD"), bin, getenv("PWD"), ins[k]), 0);
        char s[700]; snprintf(s, sizeof s, "%s/o_train_000000.bin", d);
        mx_shard sh;
        REQUIRE(mx_shard_open(&sh, s) == 0);
        CHECK_EQ_INT(sh.n_tokens, nw);
        for (int64_t i = 0; i < sh.n_tokens && i < nw; i++) CHECK_EQ_INT(mx_shard_token(&sh, i), want[i]);
        mx_shard_close(&sh);
    }
    /* shard splitting and the validation split (the last document), 2 threads vs 1: same bytes; the
     * documents K times over, so that shards of the smallest size prep takes (MX_PREP_SHARD_MIN) split them */
    enum { K = 6000 };
    REQUIRE(test_sh("cd %s && python3 -c \"import sys; d=open('docs.jsonl').read().rstrip('\\n')+'\\n'; "
                    "sys.stdout.write(d*%d)\" | zstd -q > big.jsonl.zst", d, K) == 0);
    CHECK_EQ_INT(test_sh("cd %s && rm -f o_* p_* && %s/%s prep --quiet --threads 2 --ranks %s/tests/fixtures/tokenizer/r50k_base.trim.tiktoken "
                         "--pattern r50k --out o --shard-tokens 65536 --val-docs 1 big.jsonl.zst && "
                         "%s/%s prep --quiet --threads 1 --ranks %s/tests/fixtures/tokenizer/r50k_base.trim.tiktoken "
                         "--pattern r50k --out p --shard-tokens 65536 --val-docs 1 big.jsonl.zst && "
                         "for f in o_*; do cmp $f p_${f#o_} || exit 1; done && test -f o_val_000000.bin && ! test -f o_val_000001.bin",
                         d, getenv("PWD"), bin, getenv("PWD"), getenv("PWD"), bin, getenv("PWD")), 0);
    mx_ids third = {0};
    mx_tok_encode(t, k_docs[2], strlen(k_docs[2]), &third);
    int64_t ntrain = K * nw - 1 - (int64_t)third.n;
    mx_ids_free(&third);
    REQUIRE(ntrain > 2 * MX_PREP_SHARD_MIN);
    char s[700]; snprintf(s, sizeof s, "%s/o_train_%06d.bin", d, (int)((ntrain - 1) / MX_PREP_SHARD_MIN));
    mx_shard sh;
    REQUIRE(mx_shard_open(&sh, s) == 0);
    CHECK_EQ_INT(sh.n_tokens, ntrain % MX_PREP_SHARD_MIN ? ntrain % MX_PREP_SHARD_MIN : MX_PREP_SHARD_MIN);
    mx_shard_close(&sh);
    mx_tok_free(t);
}

TEST(prep_bad_inputs) {
    const char* bin = test_mxlm_bin();
    const char* d = test_tmpdir();
    char pwd[512]; snprintf(pwd, sizeof pwd, "%s", getenv("PWD"));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/%s prep --quiet --ranks %s/tests/fixtures/tokenizer/r50k_base.trim.tiktoken --pattern r50k --out q",
             pwd, bin, pwd);
    /* malformed JSON on line 2: error names file:line, exit 1, no shard (not even line 1's) */
    CHECK_EQ_INT(test_sh("cd %s && rm -f q_* && printf '{\"text\": \"ok\"}\\n{\"text\": \"oops}\\n' > bad.jsonl && "
                         "%s bad.jsonl 2> err.txt; rc=$?; grep -q 'bad.jsonl:2' err.txt && ! ls q_* 2>/dev/null && exit $rc",
                         d, cmd), 1);
    /* invalid UTF-8 on line 2 (a raw 0xff byte in the string); --skip-bad skips it and counts it */
    CHECK_EQ_INT(test_sh("cd %s && rm -f q_* && printf '{\"text\": \"ok\"}\\n{\"text\": \"a\\377b\"}\\n' > inv.jsonl && "
                         "%s inv.jsonl 2> err.txt; rc=$?; grep -q 'inv.jsonl:2: invalid UTF-8' err.txt && ! ls q_* 2>/dev/null && exit $rc",
                         d, cmd), 1);
    CHECK_EQ_INT(test_sh("cd %s && rm -f q_* && %s/%s prep --ranks %s/tests/fixtures/tokenizer/r50k_base.trim.tiktoken --pattern r50k "
                         "--out q --skip-bad inv.jsonl 2> err.txt && grep -q '1 skipped' err.txt && test -f q_train_000000.bin",
                         d, pwd, bin, pwd), 0);
    /* truncated zstd and gzip streams */
    CHECK_EQ_INT(test_sh("cd %s && rm -f q_* && head -c 2000 /dev/zero | tr '\\0' 'x' | sed 's/.*/{\"text\": \"&\"}/' > big.jsonl && "
                         "zstd -q -c big.jsonl | head -c 20 > trunc.jsonl.zst && "
                         "%s trunc.jsonl.zst 2> err.txt; rc=$?; grep -q 'trunc.jsonl.zst: truncated zstd' err.txt && ! ls q_* 2>/dev/null && exit $rc",
                         d, cmd), 1);
    CHECK_EQ_INT(test_sh("cd %s && gzip -c big.jsonl | head -c 20 > trunc.json.gz && "
                         "%s trunc.json.gz 2> err.txt; rc=$?; grep -q 'truncated gzip' err.txt && ! ls q_* 2>/dev/null && exit $rc",
                         d, cmd), 1);
    /* missing text field, missing file */
    CHECK_EQ_INT(test_sh("cd %s && echo '{\"body\": \"x\"}' > nf.jsonl && %s nf.jsonl 2> err.txt; rc=$?; grep -q 'nf.jsonl:1: no \"text\"' err.txt && exit $rc",
                         d, cmd), 1);
    CHECK_EQ_INT(test_sh("cd %s && %s nosuch.jsonl 2>/dev/null", d, cmd), 1);
    /* plain text file: the whole file is one document */
    CHECK_EQ_INT(test_sh("cd %s && rm -f q_* && printf 'plain text\\n\\nfile' > doc.txt && %s doc.txt && test -f q_train_000000.bin", d, cmd), 0);
    char s[700]; snprintf(s, sizeof s, "%s/q_train_000000.bin", d);
    mx_shard sh;
    REQUIRE(mx_shard_open(&sh, s) == 0);
    mx_tokenizer* t;
    REQUIRE(mx_tok_open(&t, "tests/fixtures/tokenizer/r50k_base.trim.tiktoken", MX_PAT_R50K) == 0);
    mx_ids ids = {0};
    mx_tok_encode(t, "plain text\n\nfile", 16, &ids);
    CHECK_EQ_INT(sh.n_tokens, (int64_t)ids.n + 1);
    for (size_t i = 0; i < ids.n && (int64_t)i + 1 < sh.n_tokens; i++) CHECK_EQ_INT(mx_shard_token(&sh, (int64_t)i + 1), ids.ids[i]);
    mx_ids_free(&ids); mx_tok_free(t); mx_shard_close(&sh);
    /* a zstd-compressed text file gives the same shard; tokenize --jsonl gives one line of ids per document */
    CHECK_EQ_INT(test_sh("cd %s && zstd -q -f doc.txt -o doc.txt.zst && cp q_train_000000.bin plain.bin && rm -f q_* && "
                         "%s doc.txt.zst && cmp q_train_000000.bin plain.bin", d, cmd), 0);
    CHECK_EQ_INT(test_sh("cd %s && printf '{\"text\": \"plain text\\\\n\\\\nfile\"}\n\n{\"text\": \"x\"}\n' | gzip -c > two.jsonl.gz && "
                         "%s/%s tokenize --ranks %s/tests/fixtures/tokenizer/r50k_base.trim.tiktoken --pattern r50k --jsonl two.jsonl.gz > ids.txt && "
                         "test $(wc -l < ids.txt) = 2 && head -1 ids.txt | %s/%s tokenize --decode --ranks %s/tests/fixtures/tokenizer/r50k_base.trim.tiktoken "
                         "--pattern r50k | cmp - doc.txt", d, pwd, bin, pwd, pwd, bin, pwd), 0);
}

TEST(json_field_parser) {
    char* s; size_t n, col;
    const char* j = "{\"a\":1,\"text\":\"x\\ud83d\\ude00y\\ud800z\"}";
    CHECK(mx_json_get_string(j, strlen(j), "text", &s, &n, &col) == 0);
    CHECK(n == 10 && !memcmp(s, "x\xf0\x9f\x98\x80y\xef\xbf\xbd" "z", 10));
    free(s);
    CHECK(mx_json_get_string("{\"text\": 5}", 11, "text", &s, &n, &col) == MX_EFORMAT);
    CHECK(mx_json_get_string("{\"text\": \"a\"} x", 15, "text", &s, &n, &col) == MX_EFORMAT);
    CHECK(mx_json_get_string("{\"text\": \"a\tb\"}", 15, "text", &s, &n, &col) == MX_EFORMAT);   /* raw control char */
    CHECK(mx_json_get_string("[1]", 3, "text", &s, &n, &col) == MX_EFORMAT);
}
