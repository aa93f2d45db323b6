/* cli.c: option parsing and atomic file output shared by the subcommands. */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mxlm/mx.h"
#include "mxlm/util.h"

static const char* type_hint(opt_type t) {
    switch (t) {
    case OPT_INT: case OPT_I64: case OPT_U64: return " N";
    case OPT_DOUBLE: return " X";
    case OPT_STR: return " S";
    case OPT_PATH: return " PATH";
    default: return "";
    }
}

/* The options every subcommand shares: one table, one bounds check (common_check), applied once parsed. */
static int g_threads;
static const cli_opt k_common[] = {
    {"threads", OPT_INT, &g_threads, "OpenMP threads, 1..4096 (default: all cores; results do not depend on it)"},
};
enum { N_COMMON = (int)(sizeof k_common / sizeof k_common[0]) };

int cli_threads(void) { return g_threads; }

static void print_opts(const cli_opt* opts, int nopts) {
    for (int i = 0; i < nopts; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s", opts[i].name, type_hint(opts[i].type));
        printf("  %-22s %s\n", left, opts[i].help);
    }
}

void cli_usage(const char* cmd, const char* usage, const cli_opt* opts, int nopts) {
    printf("usage: mxlm %s %s\n\n", cmd, usage);
    print_opts(opts, nopts);
    printf("\noptions of every subcommand:\n");
    print_opts(k_common, N_COMMON);
}

int cli_path_check(const char* cmd, const char* name, const char* v) {
    if (!*v) {
        if (name)
            fprintf(stderr, "mxlm %s: --%s: an empty path (give a file or directory name; '.' for this one)\n", cmd, name);
        else fprintf(stderr, "mxlm %s: an empty argument (an input named ''): give a file name\n", cmd);
        return 2;
    }
    if (strlen(v) <= MX_PATH_LEN) return 0;
    char what[80];
    if (name) snprintf(what, sizeof what, "--%s", name);
    else snprintf(what, sizeof what, "an argument");
    fprintf(stderr, "mxlm %s: %s: a path of %zu bytes (%.40s...); mxlm takes paths of at most %d bytes\n", cmd, what,
            strlen(v), v, MX_PATH_LEN);
    return 2;
}

int cli_finish_stdout(const char* cmd, int rc) {
    errno = 0;
    int bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad) { bad = 1; e = errno; }
    if (!bad) return rc;
    fprintf(stderr, "mxlm %s: writing the standard output failed: %s\n", cmd, e ? strerror(e) : "write error");
    return rc ? rc : 1;
}

static int set_value(const cli_opt* o, const char* v, const char* cmd) {
    char* end = NULL;
    errno = 0;
    switch (o->type) {
    case OPT_INT: {
        long x = strtol(v, &end, 0);
        if (errno || end == v || *end || x < INT_MIN || x > INT_MAX) goto bad;
        *(int*)o->dst = (int)x;
        return 0;
    }
    case OPT_I64: {
        long long x = strtoll(v, &end, 0);
        if (errno || end == v || *end) goto bad;
        *(int64_t*)o->dst = x;
        return 0;
    }
    case OPT_U64: {
        if (*v == '-') goto bad;
        unsigned long long x = strtoull(v, &end, 0);
        if (errno || end == v || *end) goto bad;
        *(uint64_t*)o->dst = x;
        return 0;
    }
    case OPT_DOUBLE: {
        double x = strtod(v, &end);
        if (errno || end == v || *end) goto bad;
        *(double*)o->dst = x;
        return 0;
    }
    case OPT_STR: *(const char**)o->dst = v; return 0;
    case OPT_PATH:
        if (cli_path_check(cmd, o->name, v)) return 2;
        *(const char**)o->dst = v;
        return 0;
    case OPT_FLAG: *(int*)o->dst = 1; return 0;
    }
bad:
    fprintf(stderr, "mxlm %s: --%s: '%s' is not a valid %s\n", cmd, o->name, v,
            o->type == OPT_DOUBLE ? "number" : o->type == OPT_U64 ? "non-negative integer" : "integer");
    return 2;
}

/* The bounds of a shared option (2 and a message naming it when out of them), then its effect. */
static int common_check(const cli_opt* o, const char* cmd) {
    if (o->dst == &g_threads) {
        if (g_threads < 1 || g_threads > CLI_THREADS_MAX) {
            fprintf(stderr, "mxlm %s: --threads %d: must be in [1, %d]\n", cmd, g_threads, CLI_THREADS_MAX);
            return 2;
        }
        omp_set_num_threads(g_threads);
    }
    return 0;
}

static const cli_opt* find_opt(const cli_opt* opts, int nopts, const char* name, size_t len) {
    for (int k = 0; k < nopts; k++)
        if (strlen(opts[k].name) == len && !strncmp(opts[k].name, name, len)) return &opts[k];
    return NULL;
}

int cli_common_set(const char* cmd, const char* name, const char* v) {
    const cli_opt* o = find_opt(k_common, N_COMMON, name, strlen(name));
    if (!o) { fprintf(stderr, "mxlm %s: unknown option '--%s'\n", cmd, name); return 2; }
    int rc = set_value(o, v, cmd);
    return rc ? rc : common_check(o, cmd);
}

int cli_parse(int argc, char** argv, const char* cmd, const char* usage, const cli_opt* opts, int nopts,
              char** pos, int* npos) {
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { cli_usage(cmd, usage, opts, nopts); return 1; }
        if (strncmp(a, "--", 2) != 0) {
            if (!npos || np >= 64) {
                fprintf(stderr, "mxlm %s: unexpected argument '%s' (see mxlm %s --help)\n", cmd, a, cmd);
                return 2;
            }
            if (cli_path_check(cmd, NULL, a)) return 2; /* an input named '', or too long a path */
            pos[np++] = argv[i];
            continue;
        }
        const char* name = a + 2;
        const char* eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const cli_opt* o = find_opt(opts, nopts, name, len);
        const int common = !o && (o = find_opt(k_common, N_COMMON, name, len)) != NULL;
        if (!o) {
            fprintf(stderr, "mxlm %s: unknown option '%.*s' (see mxlm %s --help)\n", cmd, (int)(len + 2), a, cmd);
            return 2;
        }
        const char* v;
        if (o->type == OPT_FLAG) {
            if (eq) { fprintf(stderr, "mxlm %s: --%s takes no value\n", cmd, o->name); return 2; }
            v = "1";
        } else if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else { fprintf(stderr, "mxlm %s: --%s needs a value\n", cmd, o->name); return 2; }
        int rc = set_value(o, v, cmd);
        if (!rc && common) rc = common_check(o, cmd);
        if (rc) return rc;
    }
    if (npos) *npos = np;
    return 0;
}

/* p with its folder resolved (realpath; the file itself need not exist), into out; p itself when the folder
 * cannot be resolved. */
static void norm_path(const char* p, char* out, size_t n) {
    const char* sl = strrchr(p, '/');
    char dir[PATH_MAX + 1], real[PATH_MAX];
    if (!sl) snprintf(dir, sizeof dir, ".");
    else if (sl == p) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(sl - p), p);
    if (realpath(dir, real)) snprintf(out, n, "%s/%s", strcmp(real, "/") ? real : "", sl ? sl + 1 : p);
    else snprintf(out, n, "%s", p);
}

static int same_file(const char* a, const char* b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char na[2 * PATH_MAX + 2], nb[2 * PATH_MAX + 2];
    norm_path(a, na, sizeof na);
    norm_path(b, nb, sizeof nb);
    return !strcmp(na, nb);
}

int cli_paths_distinct(const char* cmd, const char* const* names, const char* const* paths, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (paths[i] && paths[j] && same_file(paths[i], paths[j])) {
                fprintf(stderr, "mxlm %s: %s %s and %s %s name the same file: one would overwrite the other\n", cmd,
                        names[i], paths[i], names[j], paths[j]);
                return 2;
            }
    return 0;
}

int cli_check_range(const char* cmd, const char* opt, int64_t v, int64_t lo, int64_t hi, const char* why) {
    if (v >= lo && v <= hi) return 0;
    fprintf(stderr, "mxlm %s: --%s %lld: %s (%lld..%lld)\n", cmd, opt, (long long)v, why, (long long)lo, (long long)hi);
    return 2;
}

int cli_pathf(const char* cmd, char* buf, size_t n, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int rc = mx_vpathf(buf, n, fmt, ap);
    va_end(ap);
    if (!rc) return 0;
    fprintf(stderr, "mxlm %s: %s\n", cmd, mx_last_error());
    return 2;
}

int cli_write_file_atomic(const char* path, const void* data, size_t n) {
    if (mx_write_atomic(path, data, n) == MX_OK) return 0;
    fprintf(stderr, "mxlm: %s\n", mx_last_error());
    return -1;
}
