/* cli.h: the subcommands of ./mxlm and a small shared option parser. */
#ifndef MXLM_CLI_H
#define MXLM_CLI_H
#include <stddef.h>
#include <stdint.h>

/* OPT_PATH: a file or directory name (or a glob, const char**) that may not be empty and has at most
 * MX_PATH_LEN bytes (util.h): a longer one is a usage error (exit 2) up front, never a path cut short later. */
typedef enum { OPT_INT, OPT_I64, OPT_U64, OPT_DOUBLE, OPT_STR, OPT_PATH, OPT_FLAG } opt_type;
typedef struct {
    const char* name;   /* long name without dashes, e.g. "rows" */
    opt_type type;
    void* dst;          /* int*, int64_t*, uint64_t*, double*, const char** (STR, PATH), int* (flag) */
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

/* The options every subcommand shares, in one table of cli.c: cli_parse accepts them after the
 * subcommand's own, checks their bounds (--threads: 1..CLI_THREADS_MAX) and applies them (the OpenMP
 * threads); cli_usage lists them. cli_common_set is the same for a parser of its own (study run):
 * name without dashes, 0 or 2 with a message. cli_threads: --threads given, 0 when not. */
#define CLI_THREADS_MAX 4096
int cli_common_set(const char* cmd, const char* name, const char* v);
int cli_threads(void);

/* A path value checked: 0, or 2 with a message for an empty one ("mxlm CMD: --NAME: an empty path"; name NULL: a
 * positional argument) or one over MX_PATH_LEN bytes. cli_parse applies it to every OPT_PATH option and every
 * positional argument. */
int cli_path_check(const char* cmd, const char* name, const char* v);

/* At the end of every subcommand (main.c): standard output flushed and closed; when that fails (a full disk,
 * /dev/full, a closed pipe) a message, and 1 unless rc already says a failure. Returns the exit status. */
int cli_finish_stdout(const char* cmd, int rc);

/* The files a command reads and writes (paths[i] named names[i] in the message, e.g. "--out"; NULL: not
 * given) are n different files: the same inode (stat) or the same path with its folder resolved is refused
 * (2 and a message naming both). */
int cli_paths_distinct(const char* cmd, const char* const* names, const char* const* paths, int n);
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
