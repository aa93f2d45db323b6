/* train.c: ./mxlm train (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int cmd_train(int argc, char** argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "mxlm train: not implemented yet in this build\n");
    return 2;
}
