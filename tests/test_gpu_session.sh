#!/usr/bin/env bash
# ctrain-test: alone (each step has a cap in seconds)
# tools/gpu_session.sh without a GPU: the one device call a lent session gets (540 s) must bring
# back the headline numbers first whatever fails. Checked here against the emulated build at toy
# sizes (GPU_SESSION_EMULATED=1; the numbers mean nothing):
#   1. --plan: the steps in their order (headline pairs first, wgmma after its layout check,
#      compiles late), each cap, their sum within 540 s;
#   2. a whole session: every step runs in that order, each under its header in session.log, and
#      summary.md holds the device, the commit, the ctrain and PyTorch lines, the ratios, the peak
#      memory and every step's result; at most 8 files come back from $OUT (the device tool's limit);
#   3. a step made to hang is cut at its cap and the next step still runs;
#   4. a step whose cap would end past the deadline is skipped, and a later step that fits runs.
source "$(dirname "$0")/train_lib.sh"
cd "$CTRAIN_ROOT"
S=tools/gpu_session.sh
for f in "$CTRAIN_BUILD/emu-tools/bench_gpu_train" "$CTRAIN_BUILD/tests/emu_ptx_layouts" "$CTRAIN_BUILD/tests/emu_blur" "$CTRAIN_BUILD/train-emu"; do
  [ -x "$f" ] || fail "$f is missing (./build.sh test builds it)"
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ORDER="info ptx r50 r18 rx r50-wgmma kern-v2 kern-wg c-r50 variants"

# 1. The plan.
plan=$("$S" --plan) || { echo "$plan"; fail "--plan failed"; }
echo "$plan"
got=$(sed -n 's/^ *[0-9]*\. \([a-z0-9-]*\) .*/\1/p' <<<"$plan" | tr '\n' ' ')
[ "$got" = "$ORDER " ] || fail "--plan order '$got', expected '$ORDER '"
sum=$(awk '/^ *[0-9]+\. / && $3 ~ /s$/ { s += $3 + 0 } END { print s }' <<<"$plan")
grep -q "^sum of caps: $sum s (at most 540)" <<<"$plan" || fail "--plan: the printed sum is not the caps' sum $sum"
[ "$sum" -le 540 ] && [ "$sum" -ge 400 ] || fail "--plan: the caps sum to $sum s (one call is 540 s; the plan should use it)"
awk '/^ *[0-9]+\. / && $2 != "variants" && ($3 + 0) <= 0 { exit 1 }' <<<"$plan" || fail "--plan: a step without a cap"
ok "--plan: $ORDER; caps sum to $sum s"
out=$(GPU_SESSION_CAP_r50=400 "$S" --plan 2>&1) && fail "--plan accepted caps over 540 s: $out"
ok "--plan refuses caps that sum past 540 s"

steps_run() { sed -n 's/^== \([a-z0-9-]*\): started at.*/\1/p' "$1/session.log" | tr '\n' ' '; }
result_of() { sed -n "s/^| $2 | \([^|]*\) |.*/\1/p" "$1/summary.md"; }

# 2. A whole session at toy sizes.
export GPU_SESSION_EMULATED=1 CTRAIN_BUILD
O=$TMP/full
t0=$SECONDS
# info imports torch (several seconds on a loaded CI machine): its 10 s cap is for the GPU machine.
OUT=$O GPU_SESSION_CAP_info=60 "$S" >"$TMP/full.txt" 2>&1 || { cat "$TMP/full.txt"; fail "the emulated session failed"; }
cat "$TMP/full.txt"
got=$(steps_run "$O")
want="info ptx r50 r18 rx r50-wgmma kern-v2 kern-wg c-r50 variant1 variant2 "
[ "$got" = "$want" ] || fail "steps ran in the order '$got', expected '$want'"
for s in info ptx r50 r18 rx r50-wgmma kern-v2 kern-wg c-r50 variant1 variant2; do
  [ "$(result_of "$O" "$s")" = PASS ] || fail "step $s: '$(result_of "$O" "$s")' in summary.md, expected PASS"
done
ok "every step ran, in plan order, and passed ($((SECONDS - t0)) s)"
grep -q '^staged commit: ' "$O/info.txt" && grep -q "^ldd .*train-emu:" "$O/info.txt" || fail "info.txt lacks the commit or ldd"
grep -q '^## GPU session [0-9-]*, commit [0-9a-f]' "$O/summary.md" || fail "summary.md: no heading with the commit"
grep -q '^Device: EMULATED' "$O/summary.md" || fail "summary.md: no device line"
row=$(grep '^| resnet20 8 b2 |' "$O/summary.md" | head -n 1) || fail "summary.md: no throughput row"
# config, ctrain img/s, ctrain memory, torch img/s, torch memory, ratio, compiled img/s, ratio, memory ratio
IFS='|' read -r _ cfg ci cm pi pm r ic rc mr _ <<<"$row"
for v in "$ci" "$pi" "$ic"; do [[ $v =~ ^\ [0-9]+(\.[0-9]+)?\ $ ]] || fail "summary.md row '$row': '$v' is not an img/s"; done
for v in "$r" "$rc"; do [[ $v =~ ^\ [0-9]+\.[0-9]+x\ $ ]] || fail "summary.md row '$row': '$v' is not a ratio"; done
[[ $cm =~ ^\ [0-9.]+\ /\ [0-9.]+\ $ ]] || fail "summary.md row '$row': no ctrain peak memory"
grep -Eq '^ctrain +resnet20 .*img/s' "$O/summary.md" && grep -Eq '^pytorch +resnet20 .*img/s' "$O/summary.md" \
  || fail "summary.md lacks the benchmark lines"
grep -Eq '^\[CTRAIN_CONV_ENGINE=v1\] ctrain +resnet20 ' "$O/summary.md" || fail "summary.md lacks the variant lines"
# The rx step: two more rows (the toy model stands in for resnext50_32x4d and wide_resnet50_2 under
# emulation), and the PyTorch side takes the real names.
n=$(grep -c '^| resnet20 8 b2 |' "$O/summary.md")
[ "$n" = 4 ] || fail "summary.md: $n resnet20 rows, expected 4 (r50, r18 and rx's two)"
for a in resnext50_32x4d wide_resnet50_2; do
  "$TORCH_PY" tools/bench_gpu_torch.py $a 16 2 1 0 --dry-run | grep -Eq "^pytorch $a +16x16 " || fail "bench_gpu_torch.py $a --dry-run"
done
n=$(find "$O" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files in \$OUT: the device tool brings back 8 at most"
find "$O" -type f -printf '%f\n' | grep -qv '^[A-Za-z0-9._-]*$' && fail "a file name in \$OUT the device tool would not bring back"
ok "summary.md: device, commit, img/s, ratios, peak memory, variants, step results; $n files in \$OUT"

# 3. A step that hangs costs its cap, never the call: r18 sleeps, is cut at 3 s, kern-v2 still runs.
O=$TMP/hang
t0=$SECONDS
OUT=$O GPU_SESSION_HANG=r18 GPU_SESSION_CAP_r18=3 GPU_SESSION_STEPS="info r18 kern-v2" timeout -k 5 60 "$S" >"$TMP/hang.txt" 2>&1 || true
cat "$TMP/hang.txt"
dt=$((SECONDS - t0))
[ "$(steps_run "$O")" = "info r18 kern-v2 " ] || fail "hang: steps '$(steps_run "$O")'"
[ "$(result_of "$O" r18)" = "TIMEOUT (cut at 3s) " ] || [ "$(result_of "$O" r18)" = "TIMEOUT (cut at 3s)" ] \
  || fail "hang: r18 is '$(result_of "$O" r18)', expected TIMEOUT (cut at 3s)"
[ "$(result_of "$O" kern-v2)" = PASS ] || fail "hang: the step after the hung one did not pass: '$(result_of "$O" kern-v2)'"
[ $dt -lt 60 ] || fail "hang: the session took $dt s"
ok "a hung step is cut at its cap (3 s) and the next step runs ($dt s in all)"

# 4. The deadline: r50's cap (100 s) would end past a 30 s deadline: skipped; kern-v2 (cap 15) fits and runs.
O=$TMP/deadline
OUT=$O GPU_SESSION_DEADLINE=30 GPU_SESSION_CAP_kern_v2=15 GPU_SESSION_STEPS="info r50 kern-v2" "$S" >"$TMP/dl.txt" 2>&1 || true
cat "$TMP/dl.txt"
[ "$(steps_run "$O")" = "info kern-v2 " ] || fail "deadline: steps run '$(steps_run "$O")', expected 'info kern-v2 '"
[ "$(result_of "$O" r50)" = "SKIP (deadline)" ] || fail "deadline: r50 is '$(result_of "$O" r50)', expected SKIP (deadline)"
[ "$(result_of "$O" kern-v2)" = PASS ] || fail "deadline: kern-v2 is '$(result_of "$O" kern-v2)'"
grep -q '^== r50: SKIPPED at [0-9]*s, cap 100s past the deadline 30s' "$O/session.log" || fail "deadline: session.log does not say why r50 was skipped"
ok "a step whose cap ends past the deadline is skipped; a later one that fits runs"
echo "test_gpu_session: all passed"
