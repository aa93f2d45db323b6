/* launch.c: the processes of a data-parallel run (engine.h, docs/multigpu.md):
 * ranks from the environment, the built-in launcher of `mxlm train --gpus N`
 * (fork + exec of the same command, one process per GPU) and joining the NCCL
 * job (src/cuda/train/engine.cu: mx_dist_join, the CUDA build; the CPU build refuses). Errors are returned with a
 * message (mx_fail); the CLI prints them. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mxlm/engine.h"
#include "mxlm/util.h"

static int env_int(const char* name, int* out) {
    const char* s = getenv(name);
    if (!s || !*s) return 0;
    char* e = NULL;
    long v = strtol(s, &e, 10);
    if (*e || v < 0 || v > 1 << 20) return -1;
    *out = (int)v;
    return 1;
}

int mx_dist_env(int* rank, int* world, int* local, const char** token) {
    *rank = 0, *world = 0, *local = -1, *token = NULL;
    const char* pre = getenv("MXLM_WORLD") ? "MXLM_" : getenv("OMPI_COMM_WORLD_SIZE") ? "OMPI_COMM_WORLD_" : NULL;
    if (!pre) return 0;
    char n[64];
    int bad = 0;
    snprintf(n, sizeof n, "%s%s", pre, pre[0] == 'M' ? "WORLD" : "SIZE");
    bad |= env_int(n, world) < 0;
    snprintf(n, sizeof n, "%sRANK", pre);
    bad |= env_int(n, rank) < 0;
    snprintf(n, sizeof n, "%sLOCAL_RANK", pre);
    bad |= env_int(n, local) < 0;
    if (bad || *world < 1 || *rank >= *world)
        return mx_fail(MX_EINVAL, "bad rank environment (%sRANK / %s%s)", pre, pre, pre[0] == 'M' ? "WORLD" : "SIZE");
    if (*local < 0) *local = *rank;
    const char* names[] = {"MXLM_DIST_TOKEN", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"};
    for (int i = 0; i < 4 && !*token; i++)
        if (getenv(names[i]) && *getenv(names[i])) *token = getenv(names[i]);
    if (!*token && *world > 1)
        return mx_fail(MX_EINVAL, "rank %d of %d: no job id in the environment to meet the other ranks by: set "
                                  "MXLM_DIST_TOKEN to the same value for every rank", *rank, *world);
    return 0;
}

int mx_launch_ranks(int n, int argc, char** argv, const char* out, mx_launch_note note, void* user) {
    if (n > 64) return mx_fail(MX_EINVAL, "--gpus %d: at most 64", n);
    int rc = mx_mkdirs(out);
    if (rc) return rc == MX_EINVAL ? MX_EIO : rc; /* MX_EINVAL: a usage error (exit 2) */
    char token[64], num[16], line[1400];
    snprintf(token, sizeof token, "mxlm-%d-%lld", (int)getpid(), (long long)time(NULL));
    char** av = malloc(sizeof(char*) * (size_t)(argc + 2));
    if (!av) return mx_fail(MX_ENOMEM, "out of memory");
    av[0] = "mxlm";
    av[1] = "train";
    for (int i = 1; i < argc; i++) av[i + 1] = argv[i];
    av[argc + 1] = NULL;
    pid_t pid[64];
    snprintf(line, sizeof line, "launching %d ranks (one per GPU; rank r > 0 logs to %s/rank<r>.log)", n, out);
    note(line, 0, user);
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        if (pid[r] < 0) {
            int err = errno;
            for (int q = 0; q < r; q++) kill(pid[q], SIGTERM);
            free(av);
            return mx_fail(MX_EIO, "fork: %s", strerror(err));
        }
        if (pid[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGTERM); /* the ranks end with the launcher */
            snprintf(num, sizeof num, "%d", r);
            setenv("MXLM_RANK", num, 1);
            setenv("MXLM_LOCAL_RANK", num, 1);
            snprintf(num, sizeof num, "%d", n);
            setenv("MXLM_WORLD", num, 1);
            setenv("MXLM_DIST_TOKEN", token, 1);
            if (r > 0) {
                char lp[1200];
                if (mx_pathf(lp, sizeof lp, "%s/rank%d.log", out, r)) _exit(2);
                int fd = open(lp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
            }
            execv("/proc/self/exe", av);
            fprintf(stderr, "mxlm train: rank %d: exec: %s\n", r, strerror(errno)); /* the child: no one to return to */
            _exit(1);
        }
    }
    free(av);
    int result = -1, left = n, first_bad = -1;
    while (left > 0) {
        int st = 0;
        pid_t w = waitpid(-1, &st, 0);
        if (w < 0) {
            if (errno == EINTR) continue;
            break;
        }
        int r = 0;
        while (r < n && pid[r] != w) r++;
        if (r == n) continue;
        left--;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (r == 0 && result < 0) result = code;
        if (code != 0 && first_bad < 0) {
            first_bad = r;
            result = code;
            if (r > 0) {
                snprintf(line, sizeof line, "rank %d ended with status %d (see %s/rank%d.log); stopping the others", r,
                         code, out, r);
                note(line, 1, user);
            }
            for (int q = 0; q < n; q++)
                if (q != r) kill(pid[q], SIGTERM);
        }
    }
    return result < 0 ? 1 : result;
}
