#!/usr/bin/env bash
# The GPU trainer under every stream schedule of the emulator (CTRAIN_EMU_SCHEDULE, docs/EMULATION.md;
# every other emulated test runs under the default, lazy), on a small model, and the proof that the
# schedules can see what they are for (a mutation test):
#   - one GPU (batches prefetched on the copy stream, CUDA graphs on), 2 GPU ranks over the stand-in
#     NCCL and 2 through host staging train the same bits under sync (the old synchronous emulator),
#     lazy, eager-copy, eager-comm and eager-compute;
#   - deleting any one of the cross-stream waits and host syncs (kernels/mutable.h: the copy's
#     `copied` wait, the buckets' `ready` and `uploaded` waits, the sync before the loss is read, the
#     sync before host staging's allreduce) makes some schedule fail: another result, or an error.
#     (The prefetch API's `consumed` wait, which training never needs, is tests/emu_streams.cpp's.)
source "$(dirname "$0")/train_lib.sh"
EMU=$CTRAIN_BUILD/train-emu
[ -x "$EMU" ] || { echo "no $EMU (built by ./build.sh test)"; exit 1; }
make_synth "$TMP/d" 16 8 16
A=(-a resnet20 -b 4 --lr 0.02 --crop-size 8 --val-resize 8 -p 1 --workers 1 --seed 3 --epochs 1 --device cuda --precision fp32)
export NCCL_LIBRARY=$CTRAIN_BUILD/libnccl_emu.so NCCL_EMU_TIMEOUT=30
# run NAME SCHEDULE MUTANT CONFIG: trains; prints the model's checksum, or "failed".
run() {
  local name=$1 sch=$2 mut=$3 cfg=$4 extra=()
  case $cfg in
    one) ;;
    nccl) extra=(--ranks 2 --comm nccl --bucket-mb 1) ;;
    host) extra=(--ranks 2 --comm host --bucket-mb 1) ;;
  esac
  if CTRAIN_EMU_DEVICES=2 CTRAIN_EMU_SCHEDULE=$sch CTRAIN_EMU_MUTANT=$mut timeout 300 "$EMU" "$TMP/d" "${A[@]}" "${extra[@]}" \
       --out "$TMP/$name" >"$TMP/$name.log" 2>&1; then
    md5sum <"$TMP/$name/model.safetensors" | cut -c1-12
  else
    echo failed
  fi
}

SCHEDULES=(sync lazy eager-copy eager-comm eager-compute)
declare -A ref
for cfg in one nccl host; do
  for sch in "${SCHEDULES[@]}"; do
    [ $cfg = host ] && [ $sch = eager-comm ] && continue  # host staging has no NCCL work on its stream
    got=$(run "$cfg-$sch" $sch "" $cfg)
    [ "$got" = failed ] && { tail -n 20 "$TMP/$cfg-$sch.log"; fail "$cfg under $sch failed"; }
    [ -z "${ref[$cfg]:-}" ] && ref[$cfg]=$got
    [ "$got" = "${ref[$cfg]}" ] || fail "$cfg: $sch trained other bits ($got) than sync (${ref[$cfg]})"
  done
  ok "$cfg: the same bits under every schedule (${ref[$cfg]})"
done
[ "${ref[nccl]}" = "${ref[host]}" ] || fail "NCCL and host staging trained different bits"

# mutant CONFIG MUTANT SCHEDULES...: the first schedule under which the mutant is caught.
mutant() {
  local cfg=$1 mut=$2; shift 2
  for sch in "$@"; do
    got=$(run "mut-$mut-$sch" $sch $mut $cfg)
    if [ "$got" != "${ref[$cfg]}" ]; then
      why=$(grep -m1 -E "emu:|error|diverged|differ" "$TMP/mut-$mut-$sch.log" | cut -c1-160 || true)
      ok "deleting '$mut' is caught under $sch (${got/failed/the run failed}${why:+: $why})"
      return
    fi
  done
  fail "deleting '$mut' passes every schedule tried ($*): the schedules do not cover it"
}
mutant one copied lazy eager-compute
mutant one loss-sync lazy eager-copy
mutant nccl ready lazy eager-comm eager-copy
mutant nccl uploaded lazy eager-compute
mutant host staging-sync lazy eager-compute
