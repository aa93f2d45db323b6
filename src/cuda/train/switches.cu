/* The GPU's experiment switches (include/mxlm/gpu_switches.h): the one place that reads MXLM_GPU_*. */
#include <stdlib.h>
#include <string.h>

#include "mxlm/gpu_model.h"
#include "mxlm/gpu_switches.h"
#include "mxlm/mx.h"

/* 1 unless name is set to "0" */
static int on_unless_0(const char* name) {
    const char* e = getenv(name);
    return !(e && !strcmp(e, "0"));
}

/* MXLM_GPU_OUTER's bits (-1: a value it does not know) and round:T's T into *min (0 otherwise) */
static int outer_of(const char* e, int* min) {
    const int round = MXG_OUTER_FP8 | MXG_OUTER_MXFP4_FPROP | MXG_OUTER_MXFP4_ROUND;
    *min = 0;
    if (!e || !*e || !strcmp(e, "fprop")) return MXG_OUTER_FP8 | MXG_OUTER_MXFP4_FPROP;
    if (!strcmp(e, "1")) return MXG_OUTER_FP8 | MXG_OUTER_MXFP4;
    if (!strcmp(e, "round")) return round;
    if (!strncmp(e, "round:", 6)) { /* T a whole number */
        char* end = NULL;
        const long t = strtol(e + 6, &end, 10);
        if (end == e + 6 || *end || t < 0 || t > 1000000) return -1;
        *min = (int)t;
        return round;
    }
    if (!strcmp(e, "0")) return 0;
    if (!strcmp(e, "fp8")) return MXG_OUTER_FP8;
    return -1;
}

extern "C" int mxg_switches_read(mxg_switches* s) {
    const char* o = getenv("MXLM_GPU_OUTER");
    const char* hm = getenv("MXLM_GPU_HEAD_MI");
    const char* pe = getenv("MXLM_GPU_PROFILE");
    const char* oow = getenv("MXLM_GPU_OOW_PROBE");
    s->outer = outer_of(o, &s->outer_min);
    s->wcache = on_unless_0("MXLM_GPU_WCACHE");
    s->fuse_swiglu = on_unless_0("MXLM_GPU_FUSE_SWIGLU");
    s->fp8_amax = on_unless_0("MXLM_GPU_FP8_AMAX");
    const char* xt = getenv("MXLM_GPU_FP8_XT");
    s->fp8_xt = xt && !strcmp(xt, "1");
    s->head_mi = hm && atol(hm) > 0 ? (int)atol(hm) : 256;
    s->profile = pe && *pe && strcmp(pe, "0");
    s->oow_probe = oow && !strcmp(oow, "1");
    if (s->outer >= 0) return MX_OK;
    s->outer = outer_of(NULL, &s->outer_min);
    return mx_fail(MX_EINVAL, "MXLM_GPU_OUTER=%s: one of fprop (the default), round, round:T (T >= 0 a whole number), fp8, 1, 0 (docs/gpu.md)", o);
}
