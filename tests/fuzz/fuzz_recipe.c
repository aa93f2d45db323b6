/* fuzz_recipe.c: libFuzzer harness for the recipe grammar (mx_recipe_parse).
 * Any input: no crash, no sanitizer report; an accepted recipe describes
 * itself, and its description names three GEMMs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mxlm/recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    char s[1024];
    if (n >= sizeof s) n = sizeof s - 1;
    memcpy(s, data, n);
    s[n] = 0;
    mx_recipe r;
    if (mx_recipe_parse(s, &r) == 0) {
        char d[1024];
        mx_recipe_describe(&r, d, sizeof d);
        if (!strstr(d, "fprop=") || !strstr(d, "dgrad=") || !strstr(d, "wgrad=")) abort();
        for (int g = 0; g < 3; g++)
            if (r.g[g].had_n && !mx_hadamard_valid(r.g[g].had_n)) abort();
    } else if (!mx_last_error()[0]) {
        abort();
    }
    return 0;
}
