/* test_tokenizer.c: BPE tokenizer: golden ids from the npm references (committed, with
 * rank files trimmed to the fixture texts), round trips, pre-tokenization, UTF-8 repair. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/mx.h"
#include "mxlm/tokenizer.h"
#include "test.h"

void mx_tok_set_heap_threshold(size_t n);

#define FIX "tests/fixtures/tokenizer"
static const char* k_enc[4] = {"r50k_base", "cl100k_base", "o200k_base", "llama3"};

static size_t parse_ids(const char* s, uint32_t** out) {
    size_t cap = 1024, n = 0;
    uint32_t* v = malloc(cap * 4);
    while (*s) {
        char* e;
        unsigned long x = strtoul(s, &e, 10);
        if (e == s) { s++; continue; }
        if (n == cap) { cap *= 2; v = realloc(v, cap * 4); }
        v[n++] = (uint32_t)x;
        s = e;
    }
    *out = v;
    return n;
}
static mx_tokenizer* open_trim(int e) {
    char p[256];
    snprintf(p, sizeof p, FIX "/%s.trim.tiktoken", k_enc[e]);
    mx_tokenizer* t = NULL;
    int rc = mx_tok_open(&t, p, e);
    if (rc) test_fail_at(__FILE__, __LINE__, "%s", mx_last_error());
    return t;
}
static void check_golden(int e, const char* text) {
    mx_tokenizer* t = open_trim(e);
    if (!t) return;
    char p[256];
    size_t tn, in;
    snprintf(p, sizeof p, FIX "/%s.txt", text);
    char* txt = test_read_file(p, &tn);
    snprintf(p, sizeof p, FIX "/%s.%s.ids", k_enc[e], text);
    char* ids_s = test_read_file(p, &in);
    if (!txt || !ids_s) { test_fail_at(__FILE__, __LINE__, "missing fixture %s", p); free(txt); free(ids_s); mx_tok_free(t); return; }
    uint32_t* want;
    size_t nw = parse_ids(ids_s, &want);
    mx_ids got = {0};
    CHECK(mx_tok_encode(t, txt, tn, &got) == 0);
    CHECKF(got.n == nw, "%s/%s: %zu ids, reference %zu", k_enc[e], text, got.n, nw);
    for (size_t i = 0; i < got.n && i < nw; i++)
        if (got.ids[i] != want[i]) {
            test_fail_at(__FILE__, __LINE__, "%s/%s: id %zu = %u, reference %u", k_enc[e], text, i, got.ids[i], want[i]);
            break;
        }
    /* the heap merge (long pieces) gives the same ids as the quadratic one */
    mx_tok_set_heap_threshold(2);
    mx_ids got2 = {0};
    CHECK(mx_tok_encode(t, txt, tn, &got2) == 0);
    mx_tok_set_heap_threshold(512);
    CHECK(got2.n == got.n && !memcmp(got2.ids, got.ids, got.n * 4));
    /* decode(encode(x)) == x for valid UTF-8 */
    if (!strcmp(text, "nasty")) {
        char* back; size_t bl;
        CHECK(mx_tok_decode(t, got.ids, got.n, &back, &bl) == 0);
        CHECK(bl == tn && !memcmp(back, txt, tn));
        free(back);
    }
    mx_ids_free(&got); mx_ids_free(&got2);
    free(want); free(txt); free(ids_s);
    mx_tok_free(t);
}

TEST(tok_golden_r50k) { check_golden(MX_PAT_R50K, "nasty"); check_golden(MX_PAT_R50K, "invalid_utf8"); }
TEST(tok_golden_cl100k) { check_golden(MX_PAT_CL100K, "nasty"); check_golden(MX_PAT_CL100K, "invalid_utf8"); }
TEST(tok_golden_o200k) { check_golden(MX_PAT_O200K, "nasty"); check_golden(MX_PAT_O200K, "invalid_utf8"); }
TEST(tok_golden_llama3) { check_golden(MX_PAT_LLAMA3, "nasty"); check_golden(MX_PAT_LLAMA3, "invalid_utf8"); }

TEST(tok_cli_golden_and_decode) {
    const char* bin = test_mxlm_bin();
    for (int e = 0; e < 4; e++) {
        CHECK_EQ_INT(test_sh("%s tokenize --ranks " FIX "/%s.trim.tiktoken --pattern %s < " FIX "/nasty.txt | "
                             "cmp -s - " FIX "/%s.nasty.ids", bin, k_enc[e], mx_tok_pattern_name(e), k_enc[e]), 0);
        CHECK_EQ_INT(test_sh("%s tokenize --decode --ranks " FIX "/%s.trim.tiktoken --pattern %s < " FIX "/%s.nasty.ids | "
                             "cmp -s - " FIX "/nasty.txt", bin, k_enc[e], mx_tok_pattern_name(e), k_enc[e]), 0);
    }
    CHECK(test_sh("echo hi | %s tokenize --ranks " FIX "/r50k_base.trim.tiktoken --pattern nope 2>/dev/null", bin) == 2);
    CHECK(test_sh("echo 99999999 | %s tokenize --decode --ranks " FIX "/r50k_base.trim.tiktoken --pattern r50k 2>/dev/null", bin) == 1);
}

/* Pieces joined with '|' */
static void join_cb(const char* p, size_t n, void* ctx) {
    char* s = ctx;
    size_t l = strlen(s);
    if (l) s[l++] = '|';
    memcpy(s + l, p, n);
    s[l + n] = 0;
}
static void check_split(int pat, const char* text, const char* want) {
    char got[1024] = "";
    CHECK(mx_tok_split(pat, text, strlen(text), join_cb, got) == 0);
    CHECKF(!strcmp(got, want), "%s split of '%s': got '%s', want '%s'", mx_tok_pattern_name(pat), text, got, want);
}

TEST(tok_pretokenize_patterns) {
    check_split(MX_PAT_R50K, "I'm here  now 123abc!!", "I|'m| here| | now| 123|abc|!!");
    check_split(MX_PAT_R50K, "I'M ok \n\n x", "I|'|M| ok| \n\n| x");
    check_split(MX_PAT_CL100K, "I'M 12345 ok!\n\n  x  ", "I|'M| |123|45| ok|!\n\n| | x|  ");
    check_split(MX_PAT_CL100K, "a \n b", "a| \n| b");
    check_split(MX_PAT_LLAMA3, "a\n  ", "a|\n|  ");
    check_split(MX_PAT_CL100K, "a\n  ", "a|\n  ");
    check_split(MX_PAT_O200K, "HELLOworld helloWORLD don'T", "HELLOworld| hello|WORLD| don'T");
    check_split(MX_PAT_O200K, "a/b//\nc", "a|/b|//\n|c");
    check_split(MX_PAT_O200K, "\xc3\x89t\xc3\xa9 \xc7\x85ungla", "\xc3\x89t\xc3\xa9| \xc7\x85ungla");
}

/* The committed tables are Unicode 17.0 (the references' regex engine): letters assigned in 15.1-17.0
 * and U+0295 (Ll -> Lo in 17.0) must classify as the references classify them. */
TEST(tok_unicode_17_tables) {
    check_split(MX_PAT_R50K, "a\xe0\xa2\x8f" "b", "a\xe0\xa2\x8f" "b");          /* U+088F: letter (17.0) */
    check_split(MX_PAT_R50K, "a\xf0\xae\xaf\xb0" "b", "a\xf0\xae\xaf\xb0" "b");  /* U+2EBF0: CJK Ext. I (15.1) */
    check_split(MX_PAT_R50K, "a\xe2\x82\xac" "b", "a|\xe2\x82\xac|b");             /* U+20AC euro: not a letter */
    check_split(MX_PAT_R50K, "1\xd9\xa3" "2", "1\xd9\xa3" "2");                      /* U+0663: a digit */
    check_split(MX_PAT_O200K, "\xca\x95" "A", "\xca\x95|A");   /* as the reference regex splits it */
}

TEST(tok_utf8_repair_whatwg) {
    struct { const char* in; size_t n; const char* out; } c[] = {
        {"a\xf0\x9f\x98" "b", 5, "a\xef\xbf\xbd" "b"},                   /* truncated 4-byte: one U+FFFD */
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},      /* surrogate: three */
        {"\xe0\x80\xaf", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},      /* overlong */
        {"\xc3", 1, "\xef\xbf\xbd"},
        {"\xe2\x82x", 3, "\xef\xbf\xbdx"},
        {"caf\xc3\xa9", 5, "caf\xc3\xa9"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char* o; size_t ol;
        REQUIRE(mx_utf8_sanitize(c[i].in, c[i].n, &o, &ol) == 0);
        CHECKF(ol == strlen(c[i].out) && !memcmp(o, c[i].out, ol), "case %zu", i);
        free(o);
    }
    CHECK_EQ_INT(mx_utf8_valid_prefix("ab\xc3\xa9\xff", 5), 4);
}

TEST(tok_roundtrip_random) {
    mx_tokenizer* t[4];
    for (int e = 0; e < 4; e++) { t[e] = open_trim(e); REQUIRE(t[e]); }
    static const uint32_t pool[] = {'a', 'Z', ' ', '\n', '\r', '\t', '\'', '0', '9', '/', '!', 0xA0, 0xE9, 0x301,
                                    0x1C5, 0x2B0, 0x4E2D, 0x1F600, 0x663, 0x3000, 0x85, 0xFEFF, 0x10FFFD, 0x7F};
    uint64_t st = 12345;
    for (int it = 0; it < 200; it++) {
        char buf[2048]; size_t n = 0;
        int len = 1 + (int)(st % 300);
        for (int k = 0; k < len; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t c = (st >> 40) % 4 == 0 ? (uint32_t)((st >> 20) % 0x10FFFF) : pool[(st >> 33) % (sizeof pool / 4)];
            if (c >= 0xD800 && c <= 0xDFFF) c = 'x';
            if (c < 0x80) buf[n++] = (char)c;
            else if (c < 0x800) { buf[n++] = (char)(0xC0 | c >> 6); buf[n++] = (char)(0x80 | (c & 63)); }
            else if (c < 0x10000) { buf[n++] = (char)(0xE0 | c >> 12); buf[n++] = (char)(0x80 | ((c >> 6) & 63)); buf[n++] = (char)(0x80 | (c & 63)); }
            else { buf[n++] = (char)(0xF0 | c >> 18); buf[n++] = (char)(0x80 | ((c >> 12) & 63)); buf[n++] = (char)(0x80 | ((c >> 6) & 63)); buf[n++] = (char)(0x80 | (c & 63)); }
        }
        for (int e = 0; e < 4; e++) {
            mx_ids ids = {0};
            REQUIRE(mx_tok_encode(t[e], buf, n, &ids) == 0);
            char* back; size_t bl;
            REQUIRE(mx_tok_decode(t[e], ids.ids, ids.n, &back, &bl) == 0);
            CHECKF(bl == n && !memcmp(back, buf, n), "round trip %s iteration %d", k_enc[e], it);
            free(back);
            mx_ids_free(&ids);
        }
    }
    for (int e = 0; e < 4; e++) mx_tok_free(t[e]);
}

TEST(tok_rank_file_errors) {
    char p[512];
    snprintf(p, sizeof p, "%s/bad.tiktoken", test_tmpdir());
    mx_tokenizer* t;
    FILE* f = fopen(p, "w"); fprintf(f, "IQ== 0\nIg==\n"); fclose(f);
    CHECK(mx_tok_open(&t, p, MX_PAT_R50K) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "bad.tiktoken:2") != NULL);
    f = fopen(p, "w"); fprintf(f, "IQ== 0\nI*== 1\n"); fclose(f);
    CHECK(mx_tok_open(&t, p, MX_PAT_R50K) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "base64") != NULL);
    f = fopen(p, "w"); fprintf(f, "IQ== 0\nIQ== 1\n"); fclose(f);
    CHECK(mx_tok_open(&t, p, MX_PAT_R50K) == MX_EFORMAT);
    f = fopen(p, "w"); fprintf(f, "IQ== 0\n"); fclose(f);     /* not all 256 bytes */
    CHECK(mx_tok_open(&t, p, MX_PAT_R50K) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "byte 0x00") != NULL);
    CHECK(mx_tok_open(&t, "no/such/file", MX_PAT_R50K) == MX_EIO);
    /* a huge rank in a tiny file is refused, not allocated (found by fuzz_ranks) */
    f = fopen(p, "w"); fprintf(f, "IQ== 0\nIg== 1295240672\n"); fclose(f);
    CHECK(mx_tok_open(&t, p, MX_PAT_R50K) == MX_EFORMAT);
    CHECK(strstr(mx_last_error(), "too large") != NULL);
    /* special tokens and vocabulary sizes */
    REQUIRE((t = open_trim(MX_PAT_CL100K)) != NULL);
    CHECK_EQ_INT(mx_tok_eot(t), 100257); CHECK_EQ_INT(mx_tok_vocab_size(t), 100277);
    uint32_t sp[2] = {100257, 100276};
    char* s; size_t sl;
    REQUIRE(mx_tok_decode(t, sp, 2, &s, &sl) == 0);
    CHECK(!strcmp(s, "<|endoftext|><|endofprompt|>"));
    free(s);
    mx_tok_free(t);
    REQUIRE((t = open_trim(MX_PAT_LLAMA3)) != NULL);
    CHECK_EQ_INT(mx_tok_doc_token(t), 128000); CHECK_EQ_INT(mx_tok_eot(t), 128001);
    CHECK_EQ_INT(mx_tok_vocab_size(t), 128256);
    uint32_t l3[3] = {128000, 128009, 128255};
    REQUIRE(mx_tok_decode(t, l3, 3, &s, &sl) == 0);
    CHECK(!strcmp(s, "<|begin_of_text|><|eot_id|><|reserved_special_token_250|>"));
    free(s);
    mx_tok_free(t);
}
