/* bench.c: ./mxlm bench (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int cmd_bench(int argc, char** argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "mxlm bench: not implemented yet in this build\n");
    return 2;
}
