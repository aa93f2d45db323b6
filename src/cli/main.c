/* main.c: ./mxlm entry point; dispatches to one file per subcommand. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "mxlm/mx.h"

int cmd_export(int argc, char** argv); /* export.c */
int cmd_study(int argc, char** argv); /* src/cli/study.c */
int cmd_eval(int argc, char** argv);   /* src/cli/eval.c */
int cmd_sample(int argc, char** argv); /* src/cli/sample.c */
int cmd_plot(int argc, char** argv);   /* src/cli/plot.c */
typedef struct { const char* name; int (*fn)(int, char**); const char* help; } command;
static const command k_cmds[] = {
    {"train", cmd_train, "train a Llama model with a precision recipe (the main job)"},
    {"quant", cmd_quant, "quantize a float32 matrix: rotate + MXFP4 (the numerics, black-box)"},
    {"tokenize", cmd_tokenize, "encode stdin to token ids (or --decode) with a BPE rank file"},
    {"prep", cmd_prep, "turn JSON Lines / text into llm.c token shards"},
    {"bpe", cmd_bpe, "train the tiny byte-level BPE (rank file) on documents"},
    {"eval", cmd_eval, "validation loss, perplexity, bits per byte of a run's checkpoint or an HF directory"},
    {"sample", cmd_sample, "text from a run's checkpoint or an HF directory (CPU, KV cache, seeded)"},
    {"plot", cmd_plot, "training and validation loss of run directories against tokens (SVG)"},
    {"export", cmd_export, "write a run's checkpoint as a Hugging Face Llama (safetensors + config.json)"},
    {"study", cmd_study, "run recipes x seeds and report tokens-to-target, overhead, throughput (the paper's tables)"},
    {"bench", cmd_bench, "benchmarks (CPU, and GPU in the CUDA build)"},
    {"info", cmd_info, "version and build features"},
};

static void usage(FILE* f) {
    fprintf(f, "mxlm %s: LLM pretraining with MXFP4 linear layers and Hadamard rotation\n\n"
               "usage: mxlm <command> [options]   (mxlm <command> --help for its options)\n\n", MXLM_VERSION);
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %-9s %s\n", k_cmds[i].name, k_cmds[i].help);
}

int main(int argc, char** argv) {
    /* A write past the file size limit (ulimit -f) fails with EFBIG, as a full disk fails with ENOSPC, and takes
     * the same path (the reason, the last checkpoint kept), instead of SIGXFSZ killing the process with no
     * message (issue 48, class 14). Children (mxlm study's runs) inherit it. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return cli_finish_stdout("help", argc < 2 ? 2 : 0);
    }
    if (!strcmp(argv[1], "--version")) { printf("mxlm %s\n", MXLM_VERSION); return cli_finish_stdout("--version", 0); }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(argv[1], k_cmds[i].name)) return cli_finish_stdout(argv[1], k_cmds[i].fn(argc - 1, argv + 1));
    fprintf(stderr, "mxlm: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
