#!/bin/bash
# bench/sass_count.sh: static instruction counts of kernels' SASS by opcode and by pipe, on a machine with nvcc
# but no GPU and no disassembler (nvcc 13.0 here ships without cuobjdump / nvdisasm). Not a test. From the root:
#   bash bench/sass_count.sh FILE.cu 'REGEX' [nvcc options...]
# REGEX picks kernels by mangled name (e.g. 'k_qfastItLi128ELi128ELi16ELi2E'); the options replace the default
# ones (mk/cuda.mk's for the exact objects: -O3 --fmad=false, sm_90a). For each kernel: instructions in all, the
# ALU pipe's (FMNMX, PRMT, LOP3, SHF, LEA, IADD3, ISETP, FSETP, SEL, FSEL, ...), the FMA pipe's (FFMA, FADD, FMUL,
# IMAD), and the ten most frequent opcodes. Static counts: an unrolled kernel's hot path is most of its code, but
# every branch counts (a rare path as much as the hot one), so compare variants of one kernel, not kernels.
# The disassembler is CUDA 11.8's nvdisasm from Debian's non-free nvidia-cuda-toolkit package, unpacked (dpkg -x,
# nothing installed) into /tmp/nvdisasm-11.8 on first use; it reads nvcc 13's sm_90a cubins once their ELF header
# says ABI version 7 and e_flags 0x5a055a (13.0 writes ABI 8), which the script patches in a copy.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:?usage: bash bench/sass_count.sh FILE.cu REGEX [nvcc options]}
RE=${2:?usage: bash bench/sass_count.sh FILE.cu REGEX [nvcc options]}
shift 2
OPTS=("$@")
[ ${#OPTS[@]} -gt 0 ] || OPTS=(-std=c++17 -O3 --fmad=false -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -DMXLM_CUDA)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
D=/tmp/nvdisasm-11.8
if [ ! -x "$D/usr/bin/nvdisasm" ]; then
  grep -rqs "non-free" /etc/apt/sources.list /etc/apt/sources.list.d/ || {
    echo "sass_count: needs Debian's non-free component for nvidia-cuda-toolkit, e.g. as root:" >&2
    echo "  echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm non-free' > /etc/apt/sources.list.d/nonfree.list && apt-get update" >&2
    exit 2
  }
  mkdir -p "$D" && (cd "$D" && apt-get download nvidia-cuda-toolkit > /dev/null 2>&1 && dpkg -x nvidia-cuda-toolkit_*.deb .)
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$NVCC" "${OPTS[@]}" -cubin -o "$W/k.cubin" "$SRC"
python3 - "$W/k.cubin" <<'EOF'
import struct, sys
p = sys.argv[1]
d = bytearray(open(p, "rb").read())
d[8] = 7
struct.pack_into("<I", d, 0x30, 0x5a055a)
open(p, "wb").write(d)
EOF
"$D/usr/bin/nvdisasm" -c "$W/k.cubin" > "$W/k.sass"
python3 - "$W/k.sass" "$RE" <<'EOF'
import collections, re, sys
txt, pat = open(sys.argv[1]).read(), sys.argv[2]
ALU = set("FMNMX PRMT LOP3 SHF LEA IADD3 IMNMX ISETP FSETP SEL FSEL PLOP3 POPC FLO VOTE BMSK".split())
FMA = set("FFMA FADD FMUL IMAD".split())
found = 0
for sec in re.split(r"\n(?=//-+ \.text\.)", txt):
    m = re.match(r"//-+ \.text\.(\S+)", sec)
    if not m or not re.search(pat, m.group(1)):
        continue
    found += 1
    ops = collections.Counter(re.findall(r"/\*[0-9a-f]{4,6}\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9]*)", sec))
    n = sum(ops.values())
    alu = sum(v for k, v in ops.items() if k in ALU)
    fma = sum(v for k, v in ops.items() if k in FMA)
    print(f"{m.group(1)}\n  {n} instructions: ALU pipe {alu}, FMA pipe {fma}; " +
          ", ".join(f"{k} {v}" for k, v in ops.most_common(10)))
if not found:
    sys.exit(f"sass_count: no kernel matches {pat}")
EOF
