/* test_data.c: token shards (llm.c .bin), prep, the embedded corpus. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/data.h"
#include "mxlm/mx.h"
#include "mxlm/shard.h"
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
