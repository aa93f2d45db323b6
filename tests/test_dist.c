/* test_dist.c: what of data parallelism runs without GPUs: the ZeRO-1 shard
 * plan (every parameter owned by exactly one rank, packed without gaps, the
 * identity for one rank, refusals) and the CLI's refusals in the CPU build.
 * The NCCL runs themselves are tests/gpu/dist.sh (docs/multigpu.md). */
#include <stdlib.h>
#include <string.h>

#include "mxlm/model.h"
#include "mxlm/mx.h"
#include "test.h"

/* owner[i] = the rank owning parameter i (or -1), with the packed offsets checked */
static int plan_covers(const mx_model_config* c, int W) {
    const size_t np = (size_t)mx_model_n_params(c);
    int* owner = malloc(np * sizeof(int));
    mx_piece* pc = malloc(sizeof(mx_piece) * (size_t)mx_shard_plan_count(c));
    if (!owner || !pc) return 0;
    for (size_t i = 0; i < np; i++) owner[i] = -1;
    int ok = 1;
    size_t total = 0;
    for (int R = 0; R < W && ok; R++) {
        int n = 0;
        size_t nshard = 0, packed = 0;
        if (mx_shard_plan(c, W, R, pc, &n, &nshard)) { ok = 0; break; }
        ok &= n == mx_shard_plan_count(c);
        for (int i = 0; i < n && ok; i++) {
            ok &= pc[i].shard == packed;              /* packed in order, no gaps */
            ok &= pc[i].full == pc[i].slice + (size_t)R * pc[i].n; /* part R of its slice */
            packed += pc[i].n;
            for (size_t j = 0; j < pc[i].n && ok; j++) {
                ok &= owner[pc[i].full + j] == -1;   /* owned once */
                owner[pc[i].full + j] = R;
            }
        }
        ok &= packed == nshard && nshard * (size_t)W == np;
        total += nshard;
    }
    for (size_t i = 0; i < np && ok; i++) ok &= owner[i] >= 0;
    ok &= total == np;
    free(owner);
    free(pc);
    return ok;
}

TEST(dist_shard_plan_covers_every_parameter_once) {
    mx_model_config c;
    REQUIRE(mx_model_preset("tiny", &c) == MX_OK);
    for (int W = 1; W <= 8; W *= 2) CHECKF(plan_covers(&c, W), "W = %d", W);
    REQUIRE(mx_model_preset("20m", &c) == MX_OK);
    CHECK(plan_covers(&c, 2));
    CHECK(plan_covers(&c, 8));
}

/* The tiny preset and room for its plan. */
/* The tiny preset (c) and room for its shard plan (pc; n parts, nshard elements per rank). */
typedef struct { mx_model_config c; mx_piece* pc; int n; size_t nshard; } tiny_plan;
static int tiny_plan_room(tiny_plan* p) {
    memset(p, 0, sizeof *p);
    if (mx_model_preset("tiny", &p->c) != MX_OK) return 0;
    p->pc = malloc(sizeof(mx_piece) * (size_t)mx_shard_plan_count(&p->c));
    return p->pc != NULL;
}

TEST(dist_shard_plan_one_rank_is_the_layout) {
    tiny_plan p;
    REQUIRE(tiny_plan_room(&p));
    REQUIRE(mx_shard_plan(&p.c, 1, 0, p.pc, &p.n, &p.nshard) == MX_OK);
    CHECK_EQ_INT((long long)p.nshard, (long long)mx_model_n_params(&p.c));
    int same = 1;
    for (int i = 0; i < p.n; i++) same &= p.pc[i].full == p.pc[i].shard && p.pc[i].full == p.pc[i].slice;
    CHECK(same);
    /* weight decay on matrices only: the tiny model's first part is the embedding (decayed), the second the
     * first layer's attention norm (not) */
    CHECK_EQ_INT(p.pc[0].decay, 1);
    CHECK_EQ_INT(p.pc[1].decay, 0);
    CHECK_EQ_INT((long long)p.pc[1].n, p.c.dim);
    free(p.pc);
}

TEST(dist_shard_plan_refuses_uneven_splits) {
    tiny_plan p;
    REQUIRE(tiny_plan_room(&p));
    CHECK(mx_shard_plan(&p.c, 3, 0, p.pc, &p.n, &p.nshard) != MX_OK); /* D = 128 does not split into 3 */
    CHECK(strstr(mx_last_error(), "does not split into 3 equal parts") != NULL);
    CHECK(mx_shard_plan(&p.c, 2, 2, p.pc, &p.n, &p.nshard) != MX_OK); /* no rank 2 of 2 */
    free(p.pc);
}

TEST(dist_cli_refusals_without_cuda) {
    const char* t = test_tmpdir();
    const char* bin = test_mxlm_bin();
    /* the tests' binary is the CPU build: the NCCL engine is refused with a clear message, exit 2 */
    CHECK_EQ_INT(test_sh("%s train --gpus 2 --steps 1 --out %s/dist_a > %s/dist_a.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("dist_a", "need the CUDA build"));
    CHECK_EQ_INT(test_sh("%s train --nccl 1 --steps 1 --out %s/dist_b > %s/dist_b.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("dist_b", "need the CUDA build"));
    CHECK_EQ_INT(test_sh("%s train --nccl 2 --steps 1 --out %s/dist_c > %s/dist_c.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("dist_c", "--nccl 0|1"));
    /* an MPI launch: a bad rank environment, a world that contradicts --gpus */
    CHECK_EQ_INT(test_sh("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=5 %s train --steps 1 --out %s/dist_d > "
                         "%s/dist_d.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("dist_d", "bad rank environment"));
    CHECK_EQ_INT(test_sh("MXLM_WORLD=2 MXLM_RANK=0 MXLM_DIST_TOKEN=x %s train --gpus 4 --steps 1 --out %s/dist_e > "
                         "%s/dist_e.log 2>&1", bin, t, t), 2);
    CHECK(test_log_has("dist_e", "--gpus 4 but the job has 2 ranks"));
    CHECK_EQ_INT(test_sh("MXLM_WORLD=2 MXLM_RANK=1 %s train --steps 1 --out %s/dist_f > %s/dist_f.log 2>&1", bin, t, t),
                 2);
    CHECK(test_log_has("dist_f", "MXLM_DIST_TOKEN"));
    /* nothing was created by a refused run */
    CHECK(test_sh("test ! -e %s/dist_a && test ! -e %s/dist_d", t, t) == 0);
}
