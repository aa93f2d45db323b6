# Turn a .cu file into host C++ for cuda_emu.h: includes, and kernel<<<g, b, s, st>>>(args) -> emu_launch.
import re, sys
import os
srcdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'src')
seen = set()
def inline_local(text):
    # the GPU tree's own headers (cuda/*.cuh but common.cuh) are inlined, so their device code is emulated too
    def rep(m):
        name = m.group(1)
        if name == 'cuda/common.cuh': return m.group(0)
        if name in seen: return ''
        seen.add(name)
        return inline_local(open(os.path.join(srcdir, name)).read())
    return re.sub(r'#include "(cuda/[\w/]+\.cuh)"', rep, text)
src = inline_local(open(sys.argv[1]).read())
src = src.replace('#include <cublasLt.h>', '#include "cuda_emu.h"').replace('#include <cuda_runtime.h>', '#include "cuda_emu.h"')
src = src.replace('#include "cuda/common.cuh"', '#include "cuda_emu.h"\n#ifndef MXLM_EMU_COMMON\n#define MXLM_EMU_COMMON\n#define CU_TRY(call) do { if (call) return mx_fail(MX_EIO, "cuda"); } while (0)\n#define CU_LAUNCHED() do {} while (0)\n#define MXG_STREAM(s) ((cudaStream_t)(s))\n#define ARG_CHECK(cond, ...) do { if (!(cond)) return mx_fail(MX_EINVAL, __VA_ARGS__); } while (0)\ninline unsigned blocks_for(size_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }\n#endif')
def split_top(s):
    out, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{': depth += 1
        if ch in ')]}': depth -= 1
        if ch == ',' and depth == 0: out.append(cur.strip()); cur = ''
        else: cur += ch
    out.append(cur.strip()); return out
res = ''
i = 0
while True:
    j = src.find('<<<', i)
    if j < 0: res += src[i:]; break
    # kernel name: identifier (with optional <R>) before <<<
    m = re.search(r'([A-Za-z_]\w*(?:<\w+>)?)\s*$', src[i:j])
    name_start = i + m.start(1)
    kname = m.group(1)
    e = src.find('>>>', j)
    cfg = split_top(src[j+3:e])
    p = src.find('(', e)
    depth = 0; q = p
    while True:
        if src[q] == '(': depth += 1
        elif src[q] == ')':
            depth -= 1
            if depth == 0: break
        q += 1
    args = src[p+1:q]
    base = re.sub(r'<.*>', '', kname)
    res += src[i:name_start] + 'emu_launch("%s", %s, dim3(%s), dim3(%s)%s)' % (base, kname, cfg[0], cfg[1], (', ' + args) if args.strip() else '')
    i = q + 1
open(sys.argv[2], 'w').write(res)
