#!/usr/bin/env bash
# tools/bench_recipes.sh without training anything: its argument handling (BENCH_RECIPES_PARSE_ONLY
# stops after parsing), and tools/bench_recipes.py's combination and tables on made-up runs whose
# answers are known (which elements beat the demo, the deltas, time to the same top-1).
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
B=tools/bench_recipes.sh
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# 1. Arguments.
got=$(BENCH_RECIPES_PARSE_ONLY=1 $B)
[ "$got" = "quick=0 subset=0 out=build/bench_recipes threads=2 only=demo notta minscale lr04 noprog ema999 ema996x2 mixup cutmix nols blurpool tawide randaug erase rarep bce droppath nowdbn lamb v2tools rsbtools combo combo_ep torch" ] \
  || fail "defaults: '$got'"
got=$(BENCH_RECIPES_PARSE_ONLY=1 $B --quick --only demo,torch --threads=3)
[ "$got" = "quick=1 subset=0 out=build/bench_recipes_quick threads=3 only=demo torch" ] || fail "--quick --only: '$got'"
got=$(BENCH_RECIPES_PARSE_ONLY=1 $B --out=/x --only=notta --subset 600)
[ "$got" = "quick=0 subset=600 out=/x threads=2 only=notta" ] || fail "--out=, --only=: '$got'"
$B --help | grep -q -- '--only NAMES' || fail "--help does not describe --only"
bad() { # EXPECTED_MESSAGE ARGS...
  local want=$1; shift
  local err rc=0
  err=$(BENCH_RECIPES_PARSE_ONLY=1 $B "$@" 2>&1 >/dev/null) || rc=$?
  [ $rc = 2 ] || fail "$*: exit status $rc, expected 2"
  grep -qF -- "$want" <<<"$err" || fail "$*: message '$err' does not say '$want'"
  ok "$* -> $err"
}
bad "--only: unknown variant 'foo'" --only demo,foo
bad "--only needs a value" --only
bad "--threads: expected a positive integer, got '0'" --threads 0
bad "--threads: expected a positive integer, got 'x'" --threads x
bad "unknown argument '--epochs'" --epochs 3
bad "--out needs a directory" --out
bad "--subset: expected a number of training images >= 60, got '10'" --subset 10
bad "--subset: expected a number of training images >= 60, got 'all'" --subset=all

# 2. The tables on made-up runs. mkrun NAME ARGS "TOP1 TOP1 ..." ["EMA EMA ..."]: epochs of 10 s.
mkrun() {
  local d=$T/runs/$1
  mkdir -p "$d"
  echo "$2" >"$d/args.txt"
  echo "100.5 190.25 9.75" >"$d/time.txt"
  local i=0 ema=(${4:-})
  : >"$d/metrics.jsonl"
  echo '{"type":"step","epoch":1,"step":10,"loss":2.0}' >>"$d/metrics.jsonl"
  for a in $3; do
    local e=""
    [ ${#ema[@]} -gt 0 ] && e=",\"ema_val_top1\":${ema[$i]}"
    echo "{\"type\":\"epoch\",\"epoch\":$((i + 1)),\"val_top1\":$a$e,\"epoch_time\":10.0}" >>"$d/metrics.jsonl"
    i=$((i + 1))
  done
}
echo "# header" >"$T/header.txt"
rc=0; err=$($PY tools/bench_recipes.py combo "$T" 2>&1) || rc=$?
[ $rc != 0 ] && grep -q "needs the demo run" <<<"$err" || fail "combo without a demo run: rc $rc, '$err'"
mkrun demo "" "80 88 90"
mkrun notta "--tta none" "80 88.5 90.5"                         # wins
mkrun ema999 "--ema 0.999" "80 88 89" "70 85 91"              # wins through its EMA (kept 91)
mkrun ema996x2 "--ema 0.996 --ema-every 2" "80 88 89" "75 86 90.8"  # wins, but less than ema999
mkrun mixup "--mixup 0.2" "80 88 89"                          # loses
mkrun cutmix "--cutmix 1.0" "80 91 90"                        # a tie at the end is no win
mkrun nols "--label-smoothing 0" "80 88 90.2"                 # wins
echo '{"settings":{"epochs":3}}' >"$T/runs/nols/config.json"
mkrun combo_ep "--mixup 0.2" "80 95"                         # stopped after 2 of 3 epochs: no win
echo '{"settings":{"epochs":3}}' >"$T/runs/combo_ep/config.json"
got=$($PY tools/bench_recipes.py combo "$T")
[ "$got" = "--tta none --ema 0.999 --label-smoothing 0" ] || fail "combo: '$got'"
ok "combo: $got"
mkdir -p "$T/runs/torch"
echo '{"epochs":[{"epoch":1,"time":5,"val_top1":82},{"epoch":2,"time":12,"val_top1":87},{"epoch":3,"time":20,"val_top1":89.5}]}' \
  >"$T/runs/torch/torch.json"
echo "40.0 70.0 5.0" >"$T/runs/torch/time.txt"
mkrun torch/ctrain "" "80 88 90"
rep=$($PY tools/bench_recipes.py report "$T")
echo "$rep"
grep -qF '| demo | (none) | 3 | 100 | 200 | 90.00 | 90.00 | - | - | +0.00 |' <<<"$rep" || fail "demo row"
grep -qF '| ema999 | `--ema 0.999` | 3 | 100 | 200 | 89.00 | 89.00 | 91.00 | 91.00 | +1.00 |' <<<"$rep" || fail "ema999 row"
grep -qF '| mixup | `--mixup 0.2` | 3 | 100 | 200 | 89.00 | 89.00 | - | - | -1.00 |' <<<"$rep" || fail "mixup row"
grep -qF '| cutmix | `--cutmix 1.0` | 3 | 100 | 200 | 90.00 | 91.00 | - | - | +0.00 |' <<<"$rep" || fail "cutmix row (best 91)"
grep -qF '| combo_ep (stopped) | `--mixup 0.2` | 2 |' <<<"$rep" || fail "a stopped run is not marked"
grep -qF '| 2 | 20 | 88.00 | 12 | 87.00 |' <<<"$rep" || fail "side-by-side epoch 2"
grep -qF 'time to 89.50% test top-1 (the lower of the two final top-1s): ctrain 30 s, PyTorch 20 s, ctrain/PyTorch 1.50x (PyTorch process: 40 s wall, 75 s CPU' <<<"$rep" \
  || fail "time to target"
grep -qF "final top-1 is the same as the demo run's" <<<"$rep" || fail "dump run check"
ok "tables"
