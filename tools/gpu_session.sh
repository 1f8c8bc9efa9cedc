#!/usr/bin/env bash
# One device call's worth of GPU work: a lent session has 15 minutes of device time in all (the
# machine's start, every call and every idle second count), which is one call of at most 540 s.
# This script plans that call so that it always brings back the headline numbers first:
#
#   tools/gpu_stage.sh                                  # here: build and pack .carry/gpu.tar.xz
#   run(command="tools/gpu_session.sh", carry=[".carry"], timeout_s=560)
#   tools/gpu_session.sh --plan                         # the steps, their caps and their sum; runs nothing
#
# Steps, in this order, each under its own `timeout -k` with line-buffered output; a step whose
# cap would end past the deadline (GPU_SESSION_DEADLINE, default 510 s after the start) is
# skipped, so a step that fails or hangs costs its cap, never the call:
#   info      the device, driver and staged commit; ldd ./train
#   ptx       emu_ptx_layouts alone: wgmma's fragment layouts on silicon; it decides whether any
#             wgmma step below runs
#   r50       resnet50 224 bf16 batch 256: ctrain (default engine) and PyTorch eager + cuDNN
#             (channels_last, bf16 autocast), side by side, with peak memory
#   r18       resnet18 224 bf16 batch 256, the same
#   rx        resnext50_32x4d and wide_resnet50_2 224 bf16 batch 128, 10 steps each, the same
#             (ctrain's grouped 3x3s run on the generic CUDA-core engine: docs/GROUPED.md)
#   r50-wgmma resnet50 batch 256 on the wgmma engine (ctrain only), when ptx passed
#   kern-v2   the emulator-checked kernel programs on silicon, engine v2 (wgmma checks left out)
#   kern-wg   the same on the wgmma engine, in processes of their own, when ptx passed
#   c-r50     torch.compile for resnet50, against r50's ctrain line
#   variants  the run-time variants (engines, each fusion off) on resnet50 b256, one process each
#             under its own cap, as many as the deadline leaves room for
# compute-sanitizer, the end-to-end train runs (tests/gpu.sh), the conv benchmark, the per-op
# profile and torch.compile for resnet18 (c-r18: made room for rx, the one number the issue asks
# of the first GPU that no other step gives) are for a later call:
# GPU_SESSION_PARTS="tests conv profile c-r18" (each one step, capped).
#
# Results land in $OUT as they come: session.log (every step's output, in order, under a header),
# info.txt, and summary.md (device, commit, every img/s, ratio and peak memory, each step's
# result and time), ready to paste into docs/BENCHMARKS.md; the last lines printed are the summary.
#
# Environment: GPU_SESSION_DEADLINE (510), GPU_SESSION_STEPS (a subset of the step names, in plan
#   order), GPU_SESSION_CAP_<step> (a step's cap in seconds; '-' in a name reads '_'), STEPS and
#   WARMUP of the throughput runs (20, 5), VARIANT_CAP (35).
# Checks of this script without a GPU (tests/test_gpu_session.sh): GPU_SESSION_EMULATED=1 runs
#   the same plan on the emulated build of ./build.sh test at toy sizes (PyTorch --dry-run on the
#   CPU; its numbers mean nothing); GPU_SESSION_HANG=STEP replaces that step's work by a sleep.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
T0=$SECONDS
DEADLINE=${GPU_SESSION_DEADLINE:-510}
EMU=${GPU_SESSION_EMULATED:-}
OUT=${OUT:-out/gpu-session}
STEPS_N=${STEPS:-20}
WARMUP_N=${WARMUP:-5}
VARIANT_CAP=${VARIANT_CAP:-35}

# name cap what: the plan. The order is the point: the headline numbers first, wgmma after its
# layouts are known to be right, compiles (minutes of compile time) late.
PLAN=(
  "info      10 device, driver, staged commit, ldd ./train"
  "ptx       40 emu_ptx_layouts alone (decides the wgmma steps)"
  "r50      100 resnet50 224 bf16 b256: ctrain vs PyTorch eager + cuDNN"
  "r18       60 resnet18 224 bf16 b256: ctrain vs PyTorch eager + cuDNN"
  "rx        85 resnext50_32x4d + wide_resnet50_2 224 bf16 b128, 10 steps: ctrain vs PyTorch eager + cuDNN"
  "r50-wgmma 40 resnet50 224 bf16 b256 on the wgmma engine (ctrain only)"
  "kern-v2   60 kernel programs on silicon, engine v2"
  "kern-wg   45 kernel programs on silicon, engine wgmma"
  "c-r50    100 resnet50: PyTorch under torch.compile"
  "variants   0 run-time variants, ${VARIANT_CAP} s each, while the deadline allows"
)
LATER=(
  "tests    500 tests/gpu.sh: compute-sanitizer, train --device cuda end to end, linkage"
  "conv     300 tools/bench_gpu.sh: the conv engines on ResNet-50 shapes"
  "profile  200 per-op GPU time of resnet50 224 and resnet20 32 (bench_gpu_train --profile)"
  "c-r18     70 resnet18: PyTorch under torch.compile"
)

cap_of() {  # step -> its cap, GPU_SESSION_CAP_<step> overriding the plan's
  local n=$1 line var
  var=GPU_SESSION_CAP_${n//-/_}
  if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
  for line in "${PLAN[@]}" "${LATER[@]}"; do
    read -r name cap _ <<<"$line"
    [ "$name" = "$n" ] && { echo "$cap"; return; }
  done
  echo 0
}

if [ "${1:-}" = --plan ]; then
  sum=0; i=0
  echo "gpu_session plan: one device call of at most 540 s; deadline ${DEADLINE} s after the start"
  for line in "${PLAN[@]}"; do
    read -r name cap what <<<"$line"
    cap=$(cap_of "$name"); i=$((i + 1)); sum=$((sum + cap))
    if [ "$name" = variants ]; then printf '%2d. %-10s  %4s  %s\n' $i "$name" "rest" "$what"
    else printf '%2d. %-10s %4ds  %s\n' $i "$name" "$cap" "$what"; fi
  done
  printf 'sum of caps: %d s (at most 540); the variants fill what the steps leave before the deadline\n' $sum
  echo "later calls (GPU_SESSION_PARTS=\"tests conv profile c-r18\"), one step each:"
  for line in "${LATER[@]}"; do
    read -r name cap what <<<"$line"
    printf '    %-10s %4ds  %s\n' "$name" "$(cap_of "$name")" "$what"
  done
  [ $sum -le 540 ] || { echo "gpu_session: the caps sum to $sum s, over the 540 s of one call" >&2; exit 1; }
  exit 0
fi

mkdir -p "$OUT"
LOG=$OUT/session.log
SUMMARY=$OUT/summary.md
: >"$LOG"
export PYTHONUNBUFFERED=1

# The programs: staged ones on the GPU machine, emulated ones for the checks of this script.
if [ -n "$EMU" ]; then
  B=${CTRAIN_BUILD:-build}
  TRAIN_BIN=$B/train-emu; BENCH=$B/emu-tools/bench_gpu_train; KDIR=$B/tests
  TORCH_FLAGS=(--dry-run)
  R50=${GPU_SESSION_R50:-resnet20 8 2}; R18=${GPU_SESSION_R18:-resnet20 8 2}
  # The toy model here too: the emulated 25M/67M-parameter steps would not fit the rx cap on a
  # loaded CI machine (tests/test_gpu_session.sh checks PyTorch's side of the real names apart).
  RX=${GPU_SESSION_RX:-resnet20 8 2}; WRN=${GPU_SESSION_WRN:-resnet20 8 2}
  STEPS_N=${STEPS:-1}; WARMUP_N=${WARMUP:-1}
  PY=${TORCH_PY:-/usr/bin/python3}
  # The kernel programs under emulation take minutes each: the check of this script runs the
  # cheapest one (what is checked here is the plan, not the kernels: ./build.sh test runs them).
  KPROGS_V2=${GPU_SESSION_KPROGS_V2:-emu_blur}; KPROGS_WG=${GPU_SESSION_KPROGS_WG:-emu_blur}
  VARIANTS_DEFAULT="CTRAIN_CONV_ENGINE=v1|CTRAIN_FUSE_BN_ADD=0"
  # torch.compile on the CPU takes minutes: the compile steps run the dry run eager here.
  COMPILE=${GPU_SESSION_EMU_COMPILE:+--compile}
else
  [ -f .carry/gpu.tar.xz ] || { echo "gpu_session: no .carry/gpu.tar.xz (run tools/gpu_stage.sh here and carry .carry)"; exit 1; }
  # Python's tarfile where the image has no xz for tar.
  tar -xJf .carry/gpu.tar.xz -C . 2>/dev/null \
    || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(".", filter="fully_trusted")' .carry/gpu.tar.xz \
    || { echo "gpu_session: unpacking .carry/gpu.tar.xz failed"; exit 1; }
  B=build
  TRAIN_BIN=./train; BENCH=build/tools/bench_gpu_train; KDIR=build/gpu-tests
  TORCH_FLAGS=()
  R50=${GPU_SESSION_R50:-resnet50 224 256}; R18=${GPU_SESSION_R18:-resnet18 224 256}
  # Batch 128, 10 steps (+3 warm-up): wide_resnet50_2 is 2.7x resnet50's FLOPs and ctrain's grouped
  # 3x3s run on CUDA cores, so two pairs at b256 x 25 steps would not fit one 85 s cap.
  RX=${GPU_SESSION_RX:-resnext50_32x4d 224 128}; WRN=${GPU_SESSION_WRN:-wide_resnet50_2 224 128}
  PY=${TORCH_PY:-python3}
  KPROGS_V2=${GPU_SESSION_KPROGS_V2:-emu_kernels emu_blur emu_ema emu_conv emu_model}
  KPROGS_WG=${GPU_SESSION_KPROGS_WG:-emu_conv emu_model}
  VARIANTS_DEFAULT="CTRAIN_CONV_ENGINE=v1|CTRAIN_CONV_ENGINE=wgmma CTRAIN_FUSE_BN_BWD=0|CTRAIN_FUSE_BN_ADD=0|CTRAIN_FUSE_BN_STATS=0|CTRAIN_FUSE_BN_BWD=0|CTRAIN_FUSE_BN_POOL=0|CTRAIN_FUSE_BN_RES=0|CTRAIN_MAXPOOL_SCALAR=1"
  COMPILE=--compile
  export CTRAIN_PREBUILT=1
fi
COMMIT=$(tr '\n' ' ' 2>/dev/null <"$B/gpu-stage-commit" || git rev-parse --short HEAD 2>/dev/null || echo unknown)
COMMIT=${COMMIT% }

results=()   # "step|result|seconds" in the order run
WG_OK=0      # set by the ptx step
declare -A LINE  # parsed benchmark lines: LINE[r50.ctrain], LINE[r50.torch], ...

now() { echo $((SECONDS - T0)); }
say() { printf '[%4ds] %s\n' "$(now)" "$*"; }
rec() { results+=("$1|$2|$3"); }

# step NAME COMMAND...: runs COMMAND under its cap, its output appended to session.log (line
# buffered, so a step cut at its cap keeps its last rows), unless the cap would end past the deadline.
step() {
  local name=$1 cap rc=0 t
  shift
  cap=$(cap_of "$name")
  t=$(now)
  if [ $((t + cap)) -gt "$DEADLINE" ]; then
    say "SKIP  $name (cap ${cap}s would end at $((t + cap))s, past the ${DEADLINE}s deadline)"
    printf '\n== %s: SKIPPED at %ds, cap %ds past the deadline %ds\n' "$name" "$t" "$cap" "$DEADLINE" >>"$LOG"
    rec "$name" "SKIP (deadline)" 0
    return 3
  fi
  say "run   $name (cap ${cap}s)"
  printf '\n== %s: started at %ds, cap %ds\n' "$name" "$t" "$cap" >>"$LOG"
  if [ "${GPU_SESSION_HANG:-}" = "$name" ]; then set -- sleep 100000; fi
  STEP_START=$(stat -c %s "$LOG")
  timeout -k 5 "$cap" stdbuf -oL -eL "$@" >>"$LOG" 2>&1 || rc=$?
  local dt=$(( $(now) - t )) res=PASS
  if [ $rc = 124 ] || [ $rc = 137 ]; then res="TIMEOUT (cut at ${cap}s)"
  elif [ $rc != 0 ]; then res="FAIL (exit $rc)"; fi
  printf '== %s: %s after %ds\n' "$name" "$res" "$dt" >>"$LOG"
  say "$(printf '%-5s %s (%ds)' "${res%% *}" "$name" "$dt")"
  rec "$name" "$res" "$dt"
  return $rc
}
step_output() { tail -c +$((STEP_START + 1)) "$LOG"; }
skip() { say "SKIP  $1 ($2)"; printf '\n== %s: SKIPPED: %s\n' "$1" "$2" >>"$LOG"; rec "$1" "SKIP ($2)" 0; }
want() {  # is step $1 in GPU_SESSION_STEPS (default: all)?
  [ -z "${GPU_SESSION_STEPS:-}" ] && return 0
  [[ " $GPU_SESSION_STEPS " == *" $1 "* ]]
}

# The steps' work. Each is a function so that `timeout` runs it in a shell of its own.
do_info() {
  echo "staged commit: $COMMIT"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  if [ -n "$EMU" ]; then echo "device: EMULATED (kernels/emu on $(uname -m)); numbers mean nothing"
  else
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  fi
  "$PY" -c 'import sys, torch, torchvision; print("python", sys.executable, "| torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "| torchvision", torchvision.__version__)' || true
  echo "ldd $TRAIN_BIN:"; ldd "$TRAIN_BIN"
}
bench_ctrain() { # ARCH SIZE BATCH [ENV...]: one ctrain line
  local arch=$1 size=$2 batch=$3; shift 3
  env "$@" "$BENCH" "$arch" "$size" "$batch" "$STEPS_N" "$WARMUP_N" --precision bf16
}
do_pair() { # ARCH SIZE BATCH: ctrain then PyTorch eager; a ctrain failure still runs PyTorch
  local rc=0
  bench_ctrain "$@" || { echo "FAILED ctrain $*"; rc=1; }
  bench_torch "$@" || { echo "FAILED pytorch $*"; rc=1; }
  return $rc
}
do_kernels() { # ENGINE PROGRAMS...: each program a process of its own
  local engine=$1 rc=0 p; shift
  for p in "$@"; do
    [ -x "$KDIR/$p" ] || { echo "MISSING $KDIR/$p"; rc=1; continue; }
    local t=$SECONDS
    # v2: every check but wgmma's (EMU_ENGINES=v2); wgmma: the wgmma checks (emu_conv), the whole
    # executor on the wgmma engine (emu_model with CTRAIN_CONV_ENGINE=wgmma).
    if [ "$engine" = v2 ]; then env EMU_ENGINES=v2 "$KDIR/$p" >"/tmp/gpu-session-$p.log" 2>&1
    else env EMU_ENGINES=wgmma CTRAIN_CONV_ENGINE=wgmma "$KDIR/$p" >"/tmp/gpu-session-$p.log" 2>&1; fi
    local r=$?
    tail -n 15 "/tmp/gpu-session-$p.log"
    if [ $r = 0 ]; then printf 'PASS  %-16s %-5s %4ds\n' "$p" "$engine" $((SECONDS - t))
    else printf 'FAIL  %-16s %-5s %4ds (exit %d)\n' "$p" "$engine" $((SECONDS - t)) $r; rc=1; fi
  done
  return $rc
}
do_rx() { # the two torchvision ResNet relatives, fewer steps (see RX above)
  local rc=0
  STEPS_N=$RX_STEPS WARMUP_N=$RX_WARMUP do_pair $RX || rc=1
  STEPS_N=$RX_STEPS WARMUP_N=$RX_WARMUP do_pair $WRN || rc=1
  return $rc
}
do_variant() { # ENV...: resnet50 b256, ctrain only
  echo "variant: $*"
  bench_ctrain $R50 "$@"
}
export -f bench_ctrain do_pair do_kernels do_variant do_info do_rx
RX_STEPS=${RX_STEPS:-$([ -n "$EMU" ] && echo 1 || echo 10)}; RX_WARMUP=${RX_WARMUP:-$([ -n "$EMU" ] && echo 1 || echo 3)}
export BENCH STEPS_N WARMUP_N PY KDIR EMU COMMIT TRAIN_BIN R50 RX WRN RX_STEPS RX_WARMUP
export TORCH_FLAGS_S="${TORCH_FLAGS[*]:-}"
# ARCH SIZE BATCH [--compile]. Arrays do not cross into the step's shell: TORCH_FLAGS travels as a string.
bench_torch() {
  local tf=(); [ -n "${TORCH_FLAGS_S:-}" ] && read -ra tf <<<"$TORCH_FLAGS_S"
  "$PY" tools/bench_gpu_torch.py "$1" "$2" "$3" "$STEPS_N" "$WARMUP_N" --precision bf16 ${tf[@]+"${tf[@]}"} "${@:4}"
}
export -f bench_torch

grab() { # KEY PREFIX: the step's line starting with PREFIX ('ctrain ' or 'pytorch')
  local l
  l=$(step_output | grep -m1 "^$2") && LINE[$1]=$l
}

run_headline() {
  if want info; then step info bash -c do_info; cp "$LOG" "$OUT/info.txt"; fi
  if want ptx; then
    if step ptx "$KDIR/emu_ptx_layouts"; then WG_OK=1; fi
  else WG_OK=1; fi
  if want r50; then step r50 bash -c "do_pair $R50"; grab r50.ctrain 'ctrain '; grab r50.torch pytorch; fi
  if want r18; then step r18 bash -c "do_pair $R18"; grab r18.ctrain 'ctrain '; grab r18.torch pytorch; fi
  if want rx; then
    step rx bash -c do_rx
    grab rx.ctrain "ctrain  ${RX%% *} "; grab rx.torch "pytorch ${RX%% *} "
    grab wrn.ctrain "ctrain  ${WRN%% *} "; grab wrn.torch "pytorch ${WRN%% *} "
  fi
  if want r50-wgmma; then
    if [ $WG_OK = 1 ]; then step r50-wgmma bash -c "bench_ctrain $R50 CTRAIN_CONV_ENGINE=wgmma"; grab r50w.ctrain 'ctrain '
    else skip r50-wgmma "emu_ptx_layouts failed"; fi
  fi
  if want kern-v2; then step kern-v2 bash -c "do_kernels v2 $KPROGS_V2"; fi
  if want kern-wg; then
    if [ $WG_OK = 1 ]; then step kern-wg bash -c "do_kernels wgmma $KPROGS_WG"
    else skip kern-wg "emu_ptx_layouts failed"; fi
  fi
  if want c-r50; then step c-r50 bash -c "bench_torch $R50 $COMPILE"; grab r50.compiled pytorch; fi
  if want variants; then
    local v i=0
    IFS='|' read -ra vs <<<"${GPU_SESSION_VARIANTS:-$VARIANTS_DEFAULT}"
    for v in "${vs[@]}"; do
      i=$((i + 1))
      if [[ $v == *wgmma* ]] && [ $WG_OK != 1 ]; then skip "variant$i" "$v: emu_ptx_layouts failed"; continue; fi
      export GPU_SESSION_CAP_variant$i=$VARIANT_CAP
      local rc=0
      step "variant$i" bash -c "do_variant $v" || rc=$?
      [ $rc = 3 ] && break  # past the deadline: so is every later variant (same cap)
      grab "variant$i" 'ctrain ' && LINE[variant$i]="[$v] ${LINE[variant$i]}"
    done
  fi
}

run_later() {
  local p
  for p in ${GPU_SESSION_PARTS}; do
    case $p in
      tests) step tests bash tests/gpu.sh ;;
      conv) step conv bash tools/bench_gpu.sh ;;
      profile) step profile bash -c "$BENCH resnet50 224 128 5 2 --profile && $BENCH resnet20 32 512 10 3 --profile" ;;
      c-r18) step c-r18 bash -c "bench_torch $R18 $COMPILE"; grab r18.compiled pytorch ;;
      *) echo "gpu_session: GPU_SESSION_PARTS: unknown part '$p' (tests, conv, profile, c-r18)"; exit 2 ;;
    esac
  done
}

source "$(dirname "${BASH_SOURCE[0]}")/bench_lines.sh"
field() { bench_field "$@"; }
ratio() { bench_ratio "$@"; }

write_summary() {
  {
    echo "## GPU session $(date -u '+%Y-%m-%d'), commit $COMMIT"
    if [ -n "$EMU" ]; then echo "Device: EMULATED (a check of tools/gpu_session.sh; numbers mean nothing)"
    else echo "Device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"; fi
    echo "Command: \`run(command=\"tools/gpu_session.sh\", carry=[\".carry\"], timeout_s=560)\`; steps $STEPS_N (+$WARMUP_N warm-up), bf16"
    echo
    echo "| config | ctrain img/s | ctrain peak MiB (held / device) | PyTorch eager img/s | peak MiB | ctrain / eager | torch.compile img/s | ctrain / compiled | memory ctrain / eager |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    local k cfg c p pc
    for k in r50 r18 rx wrn; do
      case $k in r50) cfg=$R50 ;; r18) cfg=$R18 ;; rx) cfg=$RX ;; wrn) cfg=$WRN ;; esac
      c=${LINE[$k.ctrain]:-}; p=${LINE[$k.torch]:-}; pc=${LINE[$k.compiled]:-}
      [ -n "$c$p$pc" ] || continue
      printf '| %s b%s | %s | %s / %s | %s | %s / %s | %s | %s | %s | %s |\n' "$(cut -d' ' -f1,2 <<<"$cfg")" "$(cut -d' ' -f3 <<<"$cfg")" \
        "$(field 1 "$c")" "$(field 3 "$c")" "$(field 4 "$c")" "$(field 1 "$p")" "$(field 3 "$p")" "$(field 4 "$p")" \
        "$(ratio "$(field 1 "$c")" "$(field 1 "$p")")" "$(field 1 "$pc")" "$(ratio "$(field 1 "$c")" "$(field 1 "$pc")")" \
        "$(ratio "$(field 3 "$c")" "$(field 3 "$p")")"
    done
    echo
    echo "Every benchmark line, as printed:"
    echo '```'
    for k in r50.ctrain r50.torch r50.compiled r18.ctrain r18.torch r18.compiled rx.ctrain rx.torch wrn.ctrain wrn.torch r50w.ctrain; do
      [ -n "${LINE[$k]:-}" ] && echo "${LINE[$k]}"
    done
    for k in "${!LINE[@]}"; do [[ $k == variant* ]] && echo "${LINE[$k]}"; done | sort -V
    echo '```'
    echo
    echo "| step | result | seconds |"
    echo "| --- | --- | ---: |"
    local r
    for r in "${results[@]}"; do IFS='|' read -r a b c <<<"$r"; echo "| $a | $b | $c |"; done
    echo
    echo "Total $(now) s of a ${DEADLINE} s deadline; full output in session.log."
  } >"$SUMMARY"
}

trap 'write_summary' EXIT
if [ -n "${GPU_SESSION_PARTS:-}" ]; then run_later; else run_headline; fi
write_summary
trap - EXIT
echo
echo "== summary ($SUMMARY)"
cat "$SUMMARY"
