/* prep.c: ./mxlm prep (placeholder until its issue lands). */
#include <stdio.h>

#include "cli/cli.h"

int cmd_prep(int argc, char** argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "mxlm prep: not implemented yet in this build\n");
    return 2;
}
