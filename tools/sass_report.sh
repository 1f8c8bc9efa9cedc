#!/usr/bin/env bash
# Per-kernel resources and tensor-core main-loop density of ctrain's CUDA kernels, read from nvcc's
# sm_90 build (no GPU needed).
#   tools/sass_report.sh [--table FILE] [SOURCE.cu ...]
# (sources: only these files, e.g. kernels/conv_wgmma.cu; default all)
# Compiles kernels/*.cu nn/*.cu dist/*.cu for sm_90 (cubins under build/sass/, the flags of
# build.sh's NVFLAGS for one architecture) and prints per kernel: registers, spill stores/loads
# (bytes), static shared memory (bytes) and, for every kernel with HMMA instructions, its main loop:
# the backward-branch loop (a label branched to from below) that holds the most HMMAs, innermost on
# a tie, with its instructions per HMMA, and any other HMMA loop outside it (e.g. the remainder of
# a main loop unrolled by the pipeline depth). One HMMA.16816.F32.BF16 is one mma.sync m16n8k16 = 4096
# tensor FLOPs, so "instr/HMMA" is the issue cost of feeding the tensor cores. Hopper's
# HGMMA.64xNx16 (wgmma, kernels/conv_wgmma.cu) does 64*N*16*2 FLOPs for the 4 warps of a
# warpgroup, each issuing it once: per warp N/8 units of 4096 FLOPs, so its loops count N/8
# "HMMA units" per HGMMA and the column reads instructions per 4096 tensor FLOPs for both kinds.
# Files that include kernels/ptx_wgmma.cuh are compiled for sm_90a (as build.sh does).
# Dynamic shared memory is a launch argument, not in the binary: tools/bench_gpu_cost.c prints it
# per launch.
# --table FILE also writes "symbol regs spill_st spill_ld static_smem" lines, which
# bench_gpu_cost --res joins to its launches.
# Registers and spills come from ptxas -v; SASS from nvdisasm (cuobjdump/nvdisasm are not in every
# toolkit install: when missing they are installed from PyPI's nvidia-cuda-nvdisasm into a venv of
# this script's own, build/sass-venv, never into the test path).
set -euo pipefail
cd "$(dirname "$0")/.."
TABLE=""
SRCS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --table) TABLE=$2; shift 2 ;;
    *.cu) [ -f "$1" ] || { echo "sass_report: no file $1" >&2; exit 2; }; SRCS+=("$1"); shift ;;
    *) echo "usage: tools/sass_report.sh [--table FILE] [SOURCE.cu ...]" >&2; exit 2 ;;
  esac
done
[ ${#SRCS[@]} -gt 0 ] || SRCS=(kernels/*.cu nn/*.cu dist/*.cu)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "sass_report: nvcc not found (set NVCC)" >&2; exit 1; }
OUTD=build/sass
mkdir -p "$OUTD"
NVDISASM=$(command -v nvdisasm || true)
[ -z "$NVDISASM" ] && [ -x "$(dirname "$NVCC")/nvdisasm" ] && NVDISASM=$(dirname "$NVCC")/nvdisasm
if [ -z "$NVDISASM" ]; then
  VENV=build/sass-venv
  NVDISASM=$(ls $VENV/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm 2>/dev/null | head -1 || true)
  if [ -z "$NVDISASM" ]; then
    # The toolkit's major version picks the wheel series; any release of it reads that nvcc's cubins.
    major=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    echo "sass_report: installing nvdisasm (PyPI nvidia-cuda-nvdisasm==$major.*) into $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "nvidia-cuda-nvdisasm==$major.*" >&2
    NVDISASM=$(ls $VENV/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm | head -1)
  fi
fi
BASES=""
for f in "${SRCS[@]}"; do
  [ -f "$f" ] || continue
  base=$(echo "${f%.cu}" | tr / _)
  BASES="$BASES $base"
  cubin=$OUTD/$base.cubin
  if [ ! -f "$cubin" ] || [ -n "$(find "$f" kernels util nn dist -newer "$cubin" \( -name '*.cu*' -o -name '*.h' \) 2>/dev/null | head -1)" ]; then
    arch=sm_90
    grep -q 'kernels/ptx_wgmma.cuh' "$f" && arch=sm_90a
    if ! "$NVCC" -std=c++17 -O3 -I. -DCTRAIN_CUDA -arch=$arch -cubin -Xptxas -v -o "$cubin" "$f" 2>"$OUTD/$base.ptxas"; then
      grep -v '^ptxas info' "$OUTD/$base.ptxas" >&2 || true
      rm -f "$cubin"
      echo "sass_report: nvcc failed on $f (above)" >&2
      exit 1
    fi
  fi
  "$NVDISASM" -c "$cubin" >"$OUTD/$base.sass"
done
python3 - "$OUTD" "$TABLE" "$BASES" <<'PY'
import glob, os, re, subprocess, sys
outd, table, bases = sys.argv[1], sys.argv[2], set(sys.argv[3].split())
def mine(p): return os.path.splitext(os.path.basename(p))[0] in bases
def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
        return dict(zip(names, out))
    except OSError:
        return {n: n for n in names}
res = {}   # symbol -> [regs, spill_st, spill_ld, smem, file]
loops = {} # symbol -> (hmma total, loop instr, loop hmma)
producers = {}  # symbol -> (loop instr, LDGSTS in it): the producer loop of an HGMMA kernel
for p in sorted(filter(mine, glob.glob(os.path.join(outd, "*.ptxas")))):
    src = os.path.basename(p)[:-6]
    cur = None
    for line in open(p):
        m = re.search(r"Compiling entry function '([^']+)' for 'sm_90a?'", line)
        if m: cur = m.group(1); res[cur] = [0, 0, 0, 0, src]; continue
        if cur is None: continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m: res[cur][1], res[cur][2] = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            res[cur][0] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            res[cur][3] = int(m2.group(1)) if m2 else 0
insn = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?);")
def units(t):  # tensor work of one instruction in HMMA.16816 units (4096 FLOPs) per warp
    if "HMMA" in t: return 1
    m = re.search(r"HGMMA\.64x(\d+)x16", t)
    return int(m.group(1)) // 8 if m else 0
for p in sorted(filter(mine, glob.glob(os.path.join(outd, "*.sass")))):
    fn, body = None, []
    def finish():
        if fn is None: return
        labels, ins = {}, []
        for kind, a, b in body:
            if kind == "L": labels[a] = len(ins)
            else: ins.append(b)
        nh = sum(units(t) for t in ins)
        if not nh: return
        best, spans = None, []
        # Branches after the last EXIT are out-of-line stubs (e.g. an mbarrier try_wait retry that
        # jumps back into the loop it left): not loops of their own.
        last_exit = max([j for j, t in enumerate(ins) if re.search(r"\bEXIT\b", t)] or [len(ins)])
        for j, t in enumerate(ins):
            m = re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", t)
            if not m or m.group(1) not in labels or j > last_exit: continue
            s = labels[m.group(1)]
            if s > j: continue
            h = sum(units(t2) for t2 in ins[s:j + 1])
            n = j + 1 - s
            if h: spans.append((s, j, n, h))
            if h and (best is None or h > best[1] or (h == best[1] and n < best[0])): best = (n, h, s, j)
        # Other HMMA loops outside the main one (e.g. the remainder of a main loop unrolled by the
        # pipeline depth): their density matters for the k-tiles they run.
        other = [] if best is None else [(n, h) for s, j, n, h in spans if j < best[2] or s > best[3]]
        loops[fn] = (nh, best, other)
        # Warp-specialised kernels (HGMMA): the producer's loop, the one without tensor work that
        # issues the most cp.async (LDGSTS), innermost on a tie.
        if any("HGMMA" in t for t in ins):
            pb = None
            for j, t in enumerate(ins):
                m = re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", t)
                if not m or m.group(1) not in labels or j > last_exit: continue
                s0 = labels[m.group(1)]
                if s0 > j: continue
                seg = ins[s0:j + 1]
                if any(units(t2) for t2 in seg): continue
                c = sum(1 for t2 in seg if "LDGSTS" in t2)
                if c and (pb is None or c > pb[1] or (c == pb[1] and len(seg) < pb[0])): pb = (len(seg), c)
            if pb: producers[fn] = pb
    for line in open(p):
        m = re.match(r"^//-+ \.text\.(\S+) -+", line)
        if m: finish(); fn, body = m.group(1), []; continue
        if fn is None: continue
        m = re.match(r"^(\.L_x_\d+):", line)
        if m: body.append(("L", m.group(1), None)); continue
        m = insn.match(line)
        if m: body.append(("I", m.group(1), m.group(2)))
    finish()
names = demangle(sorted(res))
print("sm_90 resources per kernel (nvcc %s; registers per thread, spills and static shared memory in bytes)" % "-O3")
print("%-20s %4s %6s %6s %6s  %s" % ("file", "regs", "spillS", "spillL", "ssmem", "kernel"))
for s in sorted(res, key=lambda k: (res[k][4], names[k])):
    r = res[s]
    print("%-20s %4d %6d %6d %6d  %s" % (r[4], r[0], r[1], r[2], r[3], names[s][:110]))
print()
print("tensor-core main loops (instructions issued per HMMA.16816.F32.BF16 = per 4096 tensor FLOPs, per warp;")
print("an HGMMA.64xNx16 counts N/8 such units per warp):")
print("%5s %6s %6s %9s  %s" % ("HMMA", "loopI", "loopH", "instr/H", "kernel"))
for s in sorted(loops, key=lambda k: names.get(k, k)):
    nh, best, other = loops[s]
    extra = "".join("  [other loop: %d/%d = %.2f]" % (n, h, n / h) for n, h in other)
    if best: print("%5d %6d %6d %9.2f  %s%s" % (nh, best[0], best[1], best[0] / best[1], names.get(s, s)[:110], extra))
    else: print("%5d %6s %6s %9s  %s" % (nh, "-", "-", "-", names.get(s, s)[:110]))
if producers:
    print()
    print("producer loops of the wgmma kernels (the loop without tensor work with the most cp.async, per warp):")
    print("%6s %7s %9s  %s" % ("loopI", "LDGSTS", "instr/cp", "kernel"))
    for s in sorted(producers, key=lambda k: names.get(k, k)):
        n, c = producers[s]
        print("%6d %7d %9.2f  %s" % (n, c, n / c, names.get(s, s)[:110]))
if table:
    with open(table, "w") as f:
        f.write("# symbol regs spill_st spill_ld static_smem (tools/sass_report.sh, sm_90)\n")
        for s in sorted(res): f.write("%s %d %d %d %d\n" % (s, *res[s][:4]))
PY
