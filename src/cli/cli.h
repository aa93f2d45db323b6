/* cli.h: the subcommands of ./mxlm and a small shared option parser. */
#ifndef MXLM_CLI_H
#define MXLM_CLI_H
#include <stddef.h>
#include <stdint.h>

/* OPT_PATH: a file or folder name (const char**), at most MX_PATH_LEN bytes (util.h): a longer one is a
 * usage error (exit 2) up front, never a path cut short later (issue 48, class 4). */
typedef enum { OPT_INT, OPT_I64, OPT_U64, OPT_DOUBLE, OPT_STR, OPT_FLAG, OPT_PATH } opt_type;
typedef struct {
    const char* name;   /* long name without dashes, e.g. "rows" */
    opt_type type;
    void* dst;          /* int*, int64_t*, uint64_t*, double*, const char**, int* (flag) */
    const char* help;
} cli_opt;

/* Parse "--name value" / "--name=value" / "--flag" options. Prints a clear
 * message and returns 2 on an unknown option, a missing or malformed value;
 * prints the usage and returns 1 on --help; returns 0 on success. Positional
 * arguments are an error unless `npos` is non-NULL (then they are collected
 * into pos[], at most 64; they are paths or names: at most MX_PATH_LEN bytes). */
int cli_parse(int argc, char** argv, const char* cmd, const char* usage, const cli_opt* opts, int nopts,
              char** pos, int* npos);
void cli_usage(const char* cmd, const char* usage, const cli_opt* opts, int nopts);

/* A numeric option's bounds: 0 when lo <= v <= hi, else 2 with "mxlm CMD: --OPT V: WHY (LO..HI)" printed
 * (a usage error, exit 2). */
int cli_check_range(const char* cmd, const char* opt, int64_t v, int64_t lo, int64_t hi, const char* why);

/* mx_pathf (util.h) for the CLI: 0, or 2 (a usage error) with "mxlm CMD: path too long ..." printed. */
int cli_pathf(const char* cmd, char* buf, size_t n, const char* fmt, ...) __attribute__((format(printf, 4, 5)));

/* Write `n` bytes to `path` atomically: a temporary file in the same folder,
 * fsync, rename. Returns 0, or -1 with a message printed. */
int cli_write_file_atomic(const char* path, const void* data, size_t n);

int cmd_info(int argc, char** argv);
int cmd_quant(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_prep(int argc, char** argv);
int cmd_bpe(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_bench(int argc, char** argv);
#endif
