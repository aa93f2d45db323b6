/* tokenize.c: ./mxlm tokenize (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int cmd_tokenize(int argc, char** argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "mxlm tokenize: not implemented yet in this build\n");
    return 2;
}
