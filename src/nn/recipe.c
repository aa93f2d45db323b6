/* recipe.c: named precision recipes and the compact recipe grammar (recipe.h). What a
 * format allows (roundings, 2d weights, scale rules) is read from the format table
 * (formats.h). */
#include "mxlm/recipe.h"
#include "mxlm/linear_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a rounding is called in a refusal ("stochastic rounding applies to mxfp4 only"). */
static const char* k_round_long[] = {"round-to-nearest-even", "stochastic rounding"};

/* Every name the paper's study uses, plus the full grid the harness sweeps:
 * mxfp4-{f,fd,fdw}[-sr|-rh16|-rh32|-h16|-h32|...][-2d][-even|-ceil] also parse
 * (see parse_name); this list is what `mxlm train --help` shows. */
static const char* const k_names[] = {
    "fp32",           "bf16",           "fp8",           "fp8-delayed",    "mxfp4-f",        "mxfp4-fd",
    "mxfp4-fdw",      "mxfp4-f-sr",     "mxfp4-fd-sr",   "mxfp4-fdw-sr",   "mxfp4-f-rh16",   "mxfp4-fd-rh16",
    "mxfp4-fdw-rh16", "mxfp4-fdw-h16",  "mxfp4-fdw-h32", "mxfp4-fdw-h16-2d", "mxfp4-fdw-h16-even", "mxfp8",
    "nvfp4",          "nvfp4-nvidia",   "mxfp4-tseng",   NULL};

/* NVIDIA's NVFP4 pretraining recipe (arXiv 2509.25149), written in the override grammar: NVFP4 on all
 * three GEMMs, the weights (operand b of Fprop and Dgrad) in 16x16 blocks, a random 16-point Hadamard on
 * both Wgrad operands only, stochastic rounding on the gradient operands (operand a of Dgrad and Wgrad),
 * round-to-nearest-even on weights and activations. (The paper also keeps the last ~15% of the blocks in
 * BF16: `--bf16-last K` of mxlm train, not part of a recipe.) */
static const char k_nvfp4_nvidia[] = "nvfp4+fd:w=2d;d:round=sr/rne;w:had=rh16,round=sr/rne";

/* Tseng, Yu and Park, "Training LLMs with MXFP4" (arXiv 2502.20586; their code: amazon-science/mxfp4-llm,
 * BW_USE_MXFP4=3): Fprop in BF16, Dgrad and Wgrad in MXFP4 (OCP blocks of 32, floor exponent) with a random
 * Hadamard transform of 64 (their HBS default) along the reduction dimension of both operands, its signs
 * drawn afresh (here: each step, rh=step), and stochastic rounding of both operands with their 3/4 scaling
 * against clipping (scale=dither: x 3/4 before rounding, x 4/3 after). */
static const char k_mxfp4_tseng[] = "bf16+dw:fmt=mxfp4,had=rh64,round=sr,scale=dither+rh=step";

const char* const* mx_recipe_names(void) { return k_names; }

static void set_all(mx_recipe* r, mx_format f) {
    for (int g = 0; g < 3; g++) {
        memset(&r->g[g], 0, sizeof r->g[g]);
        r->g[g].fmt = f;
    }
}

/* Named recipes: fp32, bf16, fp8, fp8-delayed, mxfp8, nvfp4, nvfp4-nvidia, and
 * mxfp4-<gemms>[-sr][-hN|-rhN][-2d][-floor|-even|-ceil]: the listed GEMMs in
 * MXFP4, the others in FP8 (the paper's baseline), -sr = stochastic rounding
 * on both operands of every MXFP4 GEMM, hN/rhN on every MXFP4 GEMM. */
static int parse_name(const char* name, mx_recipe* r) {
    memset(r, 0, sizeof *r);
    if (!strcmp(name, "fp32")) { set_all(r, MX_FMT_FP32); return 0; }
    if (!strcmp(name, "bf16")) { set_all(r, MX_FMT_BF16); return 0; }
    if (!strcmp(name, "fp8")) { set_all(r, MX_FMT_FP8); return 0; }
    if (!strcmp(name, "fp8-delayed")) { set_all(r, MX_FMT_FP8); r->fp8_scaling = MX_FP8_DELAYED; return 0; }
    /* issue 18: all three GEMMs MXFP8 with the ceil rule; all three NVFP4 1D with RNE */
    if (!strcmp(name, "mxfp8")) {
        set_all(r, MX_FMT_MXFP8);
        for (int g = 0; g < 3; g++) r->g[g].scale = MX_SCALE_CEIL;
        return 0;
    }
    if (!strcmp(name, "nvfp4")) { set_all(r, MX_FMT_NVFP4); return 0; }
    if (!strcmp(name, "nvfp4-nvidia")) return mx_recipe_parse(k_nvfp4_nvidia, r); /* mx_recipe_parse names it */
    if (!strcmp(name, "mxfp4-tseng")) return mx_recipe_parse(k_mxfp4_tseng, r);
    if (strncmp(name, "mxfp4-", 6) != 0) {
        char list[1024];
        size_t off = 0;
        list[0] = 0;
        for (int i = 0; k_names[i] && off < sizeof list; i++)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", k_names[i]);
        return mx_fail(MX_EINVAL, "unknown recipe '%s' (the named recipes: %s; also mxfp4-{f,fd,fdw}[-sr][-hN|-rhN]"
                                  "[-2d][-floor|-even|-ceil] and +GEMMS:key=val overrides; mxlm train --list-recipes)",
                       name, list);
    }
    char buf[128];
    if (strlen(name) >= sizeof buf) return mx_fail(MX_EINVAL, "recipe name too long");
    strcpy(buf, name + 6);
    set_all(r, MX_FMT_FP8);
    char* save = NULL;
    char* part = strtok_r(buf, "-", &save);
    /* first part: which GEMMs */
    int mask = 0;
    for (const char* p = part; p && *p; p++) {
        int g = *p == 'f' ? 0 : *p == 'd' ? 1 : *p == 'w' ? 2 : -1;
        if (g < 0 || (mask & (1 << g))) return mx_fail(MX_EINVAL, "recipe '%s': '%s' must be a set of f, d, w", name, part);
        mask |= 1 << g;
    }
    if (!mask) return mx_fail(MX_EINVAL, "recipe '%s': no GEMM selected", name);
    int sr = 0, had = 0, rnd = 0, w2d = 0, scale = MX_SCALE_FLOOR;
    int seen_had = 0, seen_scale = 0;
    while ((part = strtok_r(NULL, "-", &save))) {
        if (!strcmp(part, "sr") && !sr) sr = 1;
        else if (!strcmp(part, "2d") && !w2d) w2d = 1;
        else if (mx_scale_parse(part) >= 0 && !seen_scale) { scale = mx_scale_parse(part); seen_scale = 1; }
        else if ((part[0] == 'h' || part[0] == 'r') && !seen_had && !mx_hadamard_parse(part, &had, &rnd)) seen_had = 1;
        else return mx_fail(MX_EINVAL, "recipe '%s': unknown or repeated part '%s' (sr, hN, rhN, 2d, floor, even, ceil, dither)", name, part);
    }
    for (int g = 0; g < 3; g++)
        if (mask & (1 << g)) {
            mx_gemm_recipe* q = &r->g[g];
            q->fmt = MX_FMT_MXFP4;
            q->had_n = had; q->had_random = rnd;
            q->round_a = q->round_b = sr ? MX_ROUND_SR : MX_ROUND_RNE;
            q->scale = (mx_scale_rule)scale;
            q->w2d = w2d && g != MX_WGRAD;
        }
    if (w2d && !(mask & 3)) return mx_fail(MX_EINVAL, "recipe '%s': 2d weights need MXFP4 in fprop or dgrad", name);
    return 0;
}

/* "GEMMS:key=val,key=val" */
static int apply_override(const char* s, mx_recipe* r) {
    const char* colon = strchr(s, ':');
    if (!colon) return mx_fail(MX_EINVAL, "recipe override '%s': expected GEMMS:key=val (e.g. w:had=h16)", s);
    int mask = 0;
    size_t glen = (size_t)(colon - s);
    if (glen == 3 && !strncmp(s, "all", 3)) mask = 7;
    else
        for (size_t i = 0; i < glen; i++) {
            int g = s[i] == 'f' ? 0 : s[i] == 'd' ? 1 : s[i] == 'w' ? 2 : -1;
            if (g < 0) return mx_fail(MX_EINVAL, "recipe override '%s': GEMMS must be letters f, d, w or 'all'", s);
            mask |= 1 << g;
        }
    if (!mask) return mx_fail(MX_EINVAL, "recipe override '%s': no GEMM named", s);
    char buf[256];
    if (strlen(colon + 1) >= sizeof buf) return mx_fail(MX_EINVAL, "recipe override too long");
    strcpy(buf, colon + 1);
    char* save = NULL;
    for (char* kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char* eq = strchr(kv, '=');
        if (!eq) return mx_fail(MX_EINVAL, "recipe override '%s': '%s' is not key=val", s, kv);
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        for (int g = 0; g < 3; g++) {
            if (!(mask & (1 << g))) continue;
            mx_gemm_recipe* q = &r->g[g];
            if (!strcmp(k, "fmt")) {
                int f = mx_format_parse(v);
                char all[128];
                if (f < 0)
                    return mx_fail(MX_EINVAL, "recipe: fmt=%s: must be %s", v,
                                   mx_format_list(mx_format_any, all, sizeof all));
                q->fmt = (mx_format)f;
            } else if (!strcmp(k, "had")) {
                if (mx_hadamard_parse(v, &q->had_n, &q->had_random))
                    return mx_fail(MX_EINVAL, "recipe: had=%s: must be none, hN or rhN (N a power of two, 2..256)", v);
            } else if (!strcmp(k, "round")) {
                const char* slash = strchr(v, '/');
                char a[8] = {0}, b[8] = {0};
                if (slash) {
                    if ((size_t)(slash - v) >= sizeof a || strlen(slash + 1) >= sizeof b)
                        return mx_fail(MX_EINVAL, "recipe: round=%s: must be rne, sr or A/B", v);
                    memcpy(a, v, (size_t)(slash - v));
                    strcpy(b, slash + 1);
                } else {
                    if (strlen(v) >= sizeof a) return mx_fail(MX_EINVAL, "recipe: round=%s: must be rne, sr or A/B", v);
                    strcpy(a, v); strcpy(b, v);
                }
                int ra = mx_round_parse(a), rb = mx_round_parse(b);
                if (ra < 0 || rb < 0) return mx_fail(MX_EINVAL, "recipe: round=%s: must be rne, sr or A/B", v);
                q->round_a = (mx_round)ra; q->round_b = (mx_round)rb;
            } else if (!strcmp(k, "scale")) {
                int sc = mx_scale_parse(v);
                if (sc < 0) return mx_fail(MX_EINVAL, "recipe: scale=%s: must be floor, even, ceil or dither", v);
                q->scale = (mx_scale_rule)sc;
            } else if (!strcmp(k, "w")) {
                if (!strcmp(v, "1d")) q->w2d = 0;
                else if (!strcmp(v, "2d")) q->w2d = 1;
                else return mx_fail(MX_EINVAL, "recipe: w=%s: must be 1d or 2d", v);
            } else return mx_fail(MX_EINVAL, "recipe: unknown key '%s' (fmt, had, round, scale, w)", k);
        }
    }
    return 0;
}

/* Every GEMM asks only for what its format's row allows. */
static int validate(mx_recipe* r) {
    char ok[128];
    for (int g = 0; g < 3; g++) {
        mx_gemm_recipe* q = &r->g[g];
        const mx_format_info* f = mx_format_get(q->fmt);
        if (!f) return mx_fail(MX_EINVAL, "recipe: %s: unknown format %d", mx_gemm_name((mx_gemm_id)g), (int)q->fmt);
        const mx_round rd[2] = {q->round_a, q->round_b};
        for (int o = 0; o < 2; o++)
            if ((unsigned)rd[o] > MX_ROUND_SR || !(f->roundings & MX_BIT(rd[o])))
                return mx_fail(MX_EINVAL, "recipe: %s is %s: %s applies to %s only", mx_gemm_name((mx_gemm_id)g),
                               f->name, (unsigned)rd[o] <= MX_ROUND_SR ? k_round_long[rd[o]] : "this rounding",
                               mx_format_list(mx_format_has_sr, ok, sizeof ok));
        if (q->w2d && !mx_format_has_2d(f))
            return mx_fail(MX_EINVAL, "recipe: %s is %s: 2d weights apply to %s only", mx_gemm_name((mx_gemm_id)g),
                           f->name, mx_format_list(mx_format_has_2d, ok, sizeof ok));
        if (q->scale != MX_SCALE_FLOOR && !(f->scale_rules & MX_BIT(q->scale)))
            return mx_fail(MX_EINVAL, "recipe: %s is %s: scale=%s does not apply (scale rules apply to %s; mxfp8: floor, ceil)",
                           mx_gemm_name((mx_gemm_id)g), f->name, mx_scale_name(q->scale),
                           mx_format_list(mx_format_has_scale_rule, ok, sizeof ok));
        if (g == MX_WGRAD && q->w2d) return mx_fail(MX_EINVAL, "recipe: wgrad has no weight operand: w=2d does not apply");
        if (q->had_n && !mx_hadamard_valid(q->had_n)) return mx_fail(MX_EINVAL, "recipe: bad Hadamard size %d", q->had_n);
    }
    return 0;
}

/* The grammar's structure before its meaning: no empty part ("a++b", a trailing '+', ";;", ",,", "w:"),
 * and no key set twice for the same GEMM (w:had=h16+w:had=h32, rh=.. twice). */
static int grammar_check(const char* s) {
    size_t n = strlen(s);
    if (s[0] == '+' || s[n - 1] == '+' || strstr(s, "++") || strstr(s, ";;") || strstr(s, ",,") || strstr(s, "+;") ||
        strstr(s, ";+") || strstr(s, ":,") || strstr(s, ",+") || strstr(s, ",;") || s[n - 1] == ';' || s[n - 1] == ',' ||
        s[n - 1] == ':' || strstr(s, ":+") || strstr(s, ":;"))
        return mx_fail(MX_EINVAL, "recipe '%s': an empty part (between '+', ';' or ',')", s);
    char seen[64][24];
    int ns = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char* save = NULL;
    for (char* part = strtok_r(buf, "+;", &save); part; part = strtok_r(NULL, "+;", &save)) {
        char* colon = strchr(part, ':');
        char gem[4] = "";
        char* kvs = part;
        if (colon) {
            *colon = 0;
            if (!strcmp(part, "all")) snprintf(gem, sizeof gem, "fdw");
            else snprintf(gem, sizeof gem, "%.3s", part);
            kvs = colon + 1;
        } else if (!strchr(part, '=')) {
            continue; /* the name */
        } else {
            snprintf(gem, sizeof gem, "*");
        }
        char* s2 = NULL;
        for (char* kv = strtok_r(kvs, ",", &s2); kv; kv = strtok_r(NULL, ",", &s2)) {
            char* eq = strchr(kv, '=');
            size_t kl = eq ? (size_t)(eq - kv) : strlen(kv);
            for (const char* g = gem; *g; g++) {
                char key[24];
                snprintf(key, sizeof key, "%c/%.*s", *g, (int)(kl < 20 ? kl : 20), kv);
                for (int i = 0; i < ns; i++)
                    if (!strcmp(seen[i], key))
                        return mx_fail(MX_EINVAL, "recipe '%s': '%.*s' set twice%s%c", s, (int)kl, kv,
                                       *g == '*' ? "" : " for GEMM ", *g == '*' ? ' ' : *g);
                if (ns < 64) snprintf(seen[ns++], sizeof seen[0], "%s", key);
            }
        }
    }
    return MX_OK;
}

int mx_recipe_parse(const char* s, mx_recipe* r) {
    if (!s || !*s) return mx_fail(MX_EINVAL, "empty recipe");
    char buf[512];
    if (strlen(s) >= sizeof buf) return mx_fail(MX_EINVAL, "recipe string too long");
    int grc = grammar_check(s);
    if (grc) return grc;
    strcpy(buf, s);
    char* save = NULL;
    char* part = strtok_r(buf, "+", &save);
    if (!part) return mx_fail(MX_EINVAL, "recipe '%s': no name and no override", s);
    int rc;
    if (strchr(part, ':') || strchr(part, '=')) {
        parse_name("fp32", r);  /* overrides alone: start from fp32 */
    } else {
        if ((rc = parse_name(part, r))) return rc;
        part = strtok_r(NULL, "+", &save);
    }
    for (; part; part = strtok_r(NULL, "+", &save)) {
        if (!strncmp(part, "rh=", 3)) {
            if (!strcmp(part + 3, "fixed")) r->rh_mode = MX_RH_FIXED;
            else if (!strcmp(part + 3, "step")) r->rh_mode = MX_RH_STEP;
            else return mx_fail(MX_EINVAL, "recipe: rh=%s: must be fixed or step", part + 3);
            continue;
        }
        if (!strncmp(part, "fp8=", 4)) {
            if (!strcmp(part + 4, "current")) r->fp8_scaling = MX_FP8_CURRENT;
            else if (!strcmp(part + 4, "delayed")) r->fp8_scaling = MX_FP8_DELAYED;
            else return mx_fail(MX_EINVAL, "recipe: fp8=%s: must be current or delayed", part + 4);
            continue;
        }
        char* sub = NULL;
        for (char* ov = strtok_r(part, ";", &sub); ov; ov = strtok_r(NULL, ";", &sub))
            if ((rc = apply_override(ov, r))) return rc;
    }
    if ((rc = validate(r))) return rc;
    snprintf(r->name, sizeof r->name, "%s", s);
    return 0;
}

void mx_recipe_describe(const mx_recipe* r, char* buf, size_t n) {
    size_t off = 0;
    for (int g = 0; g < 3 && off < n; g++) {
        const mx_gemm_recipe* q = &r->g[g];
        char had[16] = "none";
        if (q->had_n) snprintf(had, sizeof had, "%sh%d", q->had_random ? "r" : "", q->had_n);
        const mx_format_info* f = mx_format_get(q->fmt);
        if (f->block) /* a block format: its rounding, scale rule and weight layout */
            off += (size_t)snprintf(buf + off, n - off, "%s%s=%s,had=%s,round=%s/%s,scale=%s,w=%s", g ? " " : "",
                                    mx_gemm_name((mx_gemm_id)g), f->name, had, mx_round_name(q->round_a),
                                    mx_round_name(q->round_b), mx_scale_name(q->scale), q->w2d ? "2d" : "1d");
        else
            off += (size_t)snprintf(buf + off, n - off, "%s%s=%s,had=%s", g ? " " : "", mx_gemm_name((mx_gemm_id)g),
                                    f->name, had);
    }
    int per_tensor = 0; /* a per-tensor scaled format: its scaling */
    for (int g = 0; g < 3; g++) per_tensor |= mx_format_get(r->g[g].fmt)->fp8_scalings != 0;
    if (off < n && per_tensor)
        off += (size_t)snprintf(buf + off, n - off, " fp8=%s", r->fp8_scaling ? "delayed" : "current");
    if (off < n && r->rh_mode == MX_RH_STEP) snprintf(buf + off, n - off, " rh=step");
}

int mx_recipe_uses(const mx_recipe* r, mx_format f) {
    for (int g = 0; g < 3; g++)
        if (r->g[g].fmt == f) return 1;
    return 0;
}

int mx_recipe_head_bf16(const mx_recipe* r, int bf16_first, int bf16_last) {
    int all32 = 1;
    for (int g = 0; g < 3; g++) all32 &= mx_format_get(r->g[g].fmt)->elem == MX_ELEM_FP32;
    return !(all32 && bf16_first == 0 && bf16_last == 0);
}
