#!/usr/bin/env bash
# Which GPUs ./train can run on is decided by the images nvcc put in it (build.sh NVFLAGS):
#   - sm_80 and sm_90 machine code (cubins) of every kernel file, sm_90a of the wgmma files;
#   - compute_80 PTX of every kernel file, so that a GPU newer than the cubins (compute 10.x,
#     12.x: Blackwell) JIT-compiles the mma.sync engines instead of finding no kernel image;
#   - no PTX of sm_90a code (it is not forward compatible: the wgmma engine runs on 9.0 only).
# Read with cuobjdump --list-elf / --list-ptx. Skips when ./train was built without nvcc. cuobjdump
# is not in every toolkit install: then it comes from PyPI's nvidia-cuda-cuobjdump into
# build/sass-venv (tools/sass_report.sh's venv), never into the test path.
set -euo pipefail
ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${CTRAIN_BIN:-$ROOT}/train
B=${CTRAIN_BUILD:-$ROOT/build}
RULES=$B/rules.mk
[ -x "$BIN" ] || { echo "no executable $BIN"; exit 1; }
[ -f "$RULES" ] || { echo "no $RULES (build first)"; exit 1; }
if [ "$(sed -n 's/^HAVE_CUDA := //p' "$RULES")" != 1 ]; then
  echo "skipped: ./train was built without nvcc (no GPU images to check)"; exit 0
fi
NVCC=$(sed -n 's/^NVCC := //p' "$RULES")
CUOBJDUMP=$(command -v cuobjdump || true)
[ -z "$CUOBJDUMP" ] && [ -x "$(dirname "$NVCC")/cuobjdump" ] && CUOBJDUMP=$(dirname "$NVCC")/cuobjdump
VENV=$B/sass-venv
[ -z "$CUOBJDUMP" ] && CUOBJDUMP=$(ls "$VENV"/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump 2>/dev/null | head -1 || true)
if [ -z "$CUOBJDUMP" ]; then
  major=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  echo "installing cuobjdump (PyPI nvidia-cuda-cuobjdump==$major.*) into $VENV"
  { [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"; } && "$VENV/bin/pip" install -q "nvidia-cuda-cuobjdump==$major.*" \
    || { echo "skipped: no cuobjdump and PyPI's nvidia-cuda-cuobjdump could not be installed"; exit 0; }
  CUOBJDUMP=$(ls "$VENV"/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump | head -1)
fi
echo "cuobjdump: $CUOBJDUMP"

# "ELF file    1: train.1.sm_80.cubin" / "PTX file    1: train.1.sm_80.ptx": the architecture field.
arches() { sed -n 's/.*\.\(sm_[0-9]*[a-z]*\)\.\(cubin\|ptx\)$/\1/p' | sort | uniq -c; }
elf=$("$CUOBJDUMP" --list-elf "$BIN" 2>&1 | arches)
ptx=$("$CUOBJDUMP" --list-ptx "$BIN" 2>&1 | arches)
echo "cubins per architecture:"; echo "$elf" | sed 's/^/  /'
echo "PTX per architecture:"; echo "${ptx:-  (none)}" | sed 's/^/  /'
count() { awk -v a="$2" '$2 == a { print $1 }' <<<"$1" | head -1; }
fail=0
n80=$(count "$elf" sm_80); n90=$(count "$elf" sm_90); n90a=$(count "$elf" sm_90a); p80=$(count "$ptx" sm_80)
[ "${n80:-0}" -gt 0 ] || { echo "FAIL: no sm_80 cubin (A100 and every sm_8x GPU)"; fail=1; }
[ "${n90:-0}" -gt 0 ] || { echo "FAIL: no sm_90 cubin (H100/H200)"; fail=1; }
[ "${n90a:-0}" -gt 0 ] || { echo "FAIL: no sm_90a cubin: the wgmma engine (kernels/conv_wgmma.cu) is missing"; fail=1; }
# One compute_80 PTX per kernel file, as many as sm_80 cubins: every file JIT-compiles on Blackwell.
[ "${p80:-0}" -gt 0 ] && [ "${p80:-0}" = "${n80:-0}" ] \
  || { echo "FAIL: ${p80:-0} compute_80 PTX images for ${n80:-0} sm_80 cubins: compute 10.x/12.x GPUs would find no kernel image (build.sh NVFLAGS needs code=compute_80)"; fail=1; }
if grep -Eq 'sm_9' <<<"$ptx"; then echo "FAIL: sm_90/sm_90a PTX embedded (not forward compatible; only compute_80 PTX should travel)"; fail=1; fi
[ $fail = 0 ] && echo "GPU images ok: sm_80 x$n80, sm_90 x$n90, sm_90a x$n90a cubins, compute_80 PTX x$p80"
exit $fail
