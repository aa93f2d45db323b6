/* test_hostile.c: the hostile-input classes of issue 48 fixed here (docs/reliability.md, "Hostile-input
 * classes"), each checked at its mechanism with inputs of the class rather than one example:
 *  5  the options every subcommand shares: --threads out of range refused (2) by every subcommand;
 *  6  machine-readable output is JSON: non-finite numbers written as null;
 *  7  a validation set or model whose tokenizer differs from the training shards' refused before the run
 *     directory exists;
 *  8  a checkpoint of another run refused on --resume (run id in config.txt and every checkpoint);
 *  9  config.txt round-trips every path (newline, tab, trailing space, backslash, quotes);
 * 10  --resume with a step-like option below the checkpoint's step refused;
 * 11  option values checked before the run directory exists, none left behind;
 * 15  small refusals: full stdout, empty paths, outputs naming one file, ... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#define HMICRO "--vocab 256 --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --context 32 --batch 2 --seq 32"

/* Run `mxlm ARGS` with output into TMP/name.log; its exit status. */
static int mx(const char* name, const char* args) {
    return test_sh("%s %s > %s/%s.log 2>&1", test_mxlm_bin(), args, test_tmpdir(), name);
}

/* Class 5: every subcommand takes --threads and checks it once (cli.c's shared table). */
TEST(hostile_threads_every_subcommand) {
    static const char* const cmds[] = {"train", "eval", "sample", "prep", "quant", "tokenize", "bpe", "export",
                                       "plot", "info", "bench", "study report", "study run"};
    static const char* const bad[] = {"100000", "0", "-3", "4097"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            char a[256];
            snprintf(a, sizeof a, "%s --threads %s", cmds[i], bad[k]);
            CHECKF(mx("h5", a) == 2, "%s: not exit 2", a);
            CHECKF(test_log_has("h5", "--threads") && test_log_has("h5", "[1, 4096]"), "%s: message", a);
        }
    CHECK(mx("h5", "eval --help") == 0 && test_log_has("h5", "1..4096"));
    CHECK(mx("h5", "info --threads 2") == 0);
}
