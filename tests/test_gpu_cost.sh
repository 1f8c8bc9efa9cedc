#!/usr/bin/env bash
# Cost accounting without a GPU (tools/bench_gpu_cost.c on the emulated kernels, build/emu-tools/):
# resnet20 at 8x8, batch 2. The counters must be self-consistent and change nothing:
# - counting on vs off: the same loss and gradient bits (--verify runs the step both ways);
# - tensor FLOPs (mma.sync count x 4096) against the analytic 2*N*P*Q*K*R*S*C of every GEMM the
#   tensor-core engine runs (conv forward, weight gradient, data gradient but the stem's, the
#   linear forward): the engines compute whole block tiles (v2 128x128, v1 128x64) in k steps of
#   32, so every GEMM's count must be >= its analytic FLOPs, and every forward GEMM's must EQUAL
#   its FLOPs with M, N, K padded to its engine's tiles (at 8x8 the padding is most of the work:
#   the tool prints the ratio per GEMM; the gradients' split-K and stride-phase plans are only
#   held to >=); the same with CTRAIN_CONV_ENGINE=v1 and =wgmma (its forward in k steps of 64;
#   cost_mma counts each wgmma m64nNk16 as N/2 mma.sync), and a bad engine name is refused;
# - requested bytes >= compulsory (distinct) bytes > 0;
# - the build against the real kernels refuses (no counters there) rather than print zeros.
source "$(dirname "$0")/train_lib.sh"
cd "$CTRAIN_ROOT"
EMU=$CTRAIN_BUILD/emu-tools/bench_gpu_cost
[ -x "$EMU" ] || fail "$EMU is missing (./build.sh test builds it)"

out=$("$EMU" resnet20 8 2 --verify --launches) || { echo "$out"; fail "bench_gpu_cost --verify failed"; }
echo "$out"
grep -q '^verify: .* identical$' <<<"$out" || fail "counting changed the step's results"
ok "counters on vs off: identical loss and gradients"
sum=$(grep '^summary: ' <<<"$out") || fail "no summary line"
val() { sed -n "s/.* $1 \([^ ]*\).*/\1/p" <<<"$sum"; }
tf=$(val tensor_flops) an=$(val analytic_flops) req=$(val req_bytes) uq=$(val uniq_bytes) nl=$(val launches)
awk -v t="$tf" -v a="$an" 'BEGIN { exit !(a > 0 && t >= a) }' || fail "tensor FLOPs $tf < analytic $an"
grep -q 'every GEMM counted >= analytic: yes' <<<"$out" || fail "some GEMM counted fewer FLOPs than it must do"
grep -q 'every forward GEMM == its tile-padded FLOPs: yes' <<<"$out" || fail "a forward GEMM's mma count is not its padded FLOPs"
ok "tensor FLOPs $tf vs analytic $an"
awk -v r="$req" -v u="$uq" 'BEGIN { exit !(u > 0 && r >= u) }' || fail "requested $req < compulsory $uq, or nothing counted"
ok "requested bytes $req >= compulsory $uq > 0"
# Every launch line has the kernel's grid and block, and the conv GEMMs are named by their symbol.
[ "$(grep -c '^[0-9]\+ ' <<<"$out")" = "$nl" ] || fail "launch lines do not match the $nl launches"
grep -q 'gemm_tc_k<' <<<"$out" || fail "the tensor-core conv kernel is not named by its symbol"
grep -q 'gemm_tc2_k<' <<<"$out" || fail "conv engine v2 did not run (the default)"
ok "$nl launch lines"
out1=$(CTRAIN_CONV_ENGINE=v1 "$EMU" resnet20 8 2 --quiet --launches) || { echo "$out1"; fail "bench_gpu_cost with engine v1 failed"; }
grep -q 'every forward GEMM == its tile-padded FLOPs: yes' <<<"$out1" || fail "engine v1: a forward GEMM's mma count is not its padded FLOPs"
if grep -q 'gemm_tc2_k<' <<<"$out1"; then fail "CTRAIN_CONV_ENGINE=v1 still ran engine v2"; fi
ok "CTRAIN_CONV_ENGINE=v1: every conv on engine v1, forward counts exact"
out2=$(CTRAIN_CONV_ENGINE=wgmma "$EMU" resnet20 8 2 --quiet --launches) || { echo "$out2"; fail "bench_gpu_cost with engine wgmma failed"; }
grep -q 'conv_wgmma_fwd_k' <<<"$out2" || fail "CTRAIN_CONV_ENGINE=wgmma did not run the wgmma engine"
grep -q 'every forward GEMM == its tile-padded FLOPs: yes' <<<"$out2" || fail "engine wgmma: a forward GEMM's mma count is not its padded FLOPs"
ok "CTRAIN_CONV_ENGINE=wgmma: forward convs on the wgmma engine, counts exact"
err=$(CTRAIN_CONV_ENGINE=v3 "$EMU" resnet20 8 2 --quiet 2>&1) && fail "CTRAIN_CONV_ENGINE=v3 was accepted"
grep -q 'CTRAIN_CONV_ENGINE=v3: expected v1, v2 or wgmma' <<<"$err" || { echo "$err"; fail "a bad engine name got no clear error"; }
ok "CTRAIN_CONV_ENGINE=v3 refused with a message"
# Coverage: every launch made counted accesses (act.cuh's ct_ld/ct_st, the vector forms, the
# conv engines' counted copies), so the totals hold every byte of the step; device-to-device
# copies and memsets are records of their own.
uncov=$(awk '$1 ~ /^[0-9]+$/ && $NF == "NO"' <<<"$out")
[ -z "$uncov" ] || { echo "$uncov"; fail "launches with no counted access (plain pointer dereferences)"; }
ok "every launch counted"
# BlurPool's network: the blur's forward and backward launches are counted like every other one
# (kernels/blur.cu reads and writes through ct_ldv/ct_stv), and counting changes no bit.
outb=$("$EMU" resnet20 8 2 --blurpool --verify --launches) || { echo "$outb"; fail "bench_gpu_cost --blurpool failed"; }
grep -q '^verify: .* identical$' <<<"$outb" || fail "--blurpool: counting changed the step's results"
nb=$(grep -c '^[0-9]\+ .*blur3x3_v_k' <<<"$outb" || true)
[ "$nb" = 4 ] || { grep blur <<<"$outb"; fail "--blurpool: $nb blur launches, expected 4 (2 blurs, forward and backward)"; }
uncov=$(awk '$1 ~ /^[0-9]+$/ && $NF == "NO"' <<<"$outb")
[ -z "$uncov" ] || { echo "$uncov"; fail "--blurpool: launches with no counted access"; }
ok "--blurpool: $nb blur launches, every launch counted"
# Extrapolation to a batch the emulator cannot afford (tools/bench_gpu_cost.c, --target-batch):
# fitted from batches 2 and 7 of resnet20 at 10x10, it must predict batch 1's count EXACTLY in every
# op and pass. The shapes make every batch-dependent plan non-linear in the batch on purpose: the
# stem's BN statistics from the conv epilogue come in ceil(100*B/128) tiles (1, 2, 6 at B = 1, 2,
# 7), layer2's BN sums in ceil(25*B/64) row chunks (1, 1, 3), layer1's weight gradients split
# K = 100*B into 1, 1, 2 parts (a reduction launch only at B = 7). Dropping any one of these from
# the tool's workspace model makes the check fail. On both conv engines.
for eng in v2 v1; do
  out=$(CTRAIN_CONV_ENGINE=$eng "$EMU" resnet20 10 2 --quiet --target-batch 256 --fit-batch 7 --check-batch 1) \
    || { echo "$out"; fail "engine $eng: the extrapolation check failed"; }
  echo "$out" | sed -n '/^extrapolation/,$p'
  grep -q '^extrapolation check at batch 1 .* every one: yes$' <<<"$out" || fail "engine $eng: batch 1 not predicted exactly"
  grep -q '^summary_target: batch 256 .* plan_mismatches 0 nonintegral_fits 0$' <<<"$out" \
    || fail "engine $eng: a plan disagrees with a launch grid, or a fit is not whole bytes"
  grep -q '^per image at batch 256 (extrapolated): compulsory [0-9.]* MB' <<<"$out" || fail "no per-image line at batch 256"
  ok "engine $eng: batches 2 and 7 predict batch 1's compulsory bytes and launches exactly"
done
err=$("$EMU" resnet20 8 2 --fit-batch 2 2>&1) && fail "--fit-batch equal to BATCH was accepted"
grep -q -- '--fit-batch 2 must differ from BATCH' <<<"$err" || { echo "$err"; fail "no clear error for --fit-batch = BATCH"; }
err=$("$EMU" resnet20 8 2 --target-batch x 2>&1) && fail "--target-batch x was accepted"
grep -q -- "--target-batch 'x': expected a whole number" <<<"$err" || { echo "$err"; fail "no clear error for --target-batch x"; }
ok "bad extrapolation flags refused with a message"
# The build against the real kernels has no counters: it must refuse, not print zeros.
if [ -x "$CTRAIN_BUILD/tools/bench_gpu_cost" ]; then
  err=$(mktemp)
  if "$CTRAIN_BUILD/tools/bench_gpu_cost" resnet20 8 2 2>"$err"; then rm -f "$err"; fail "the real-kernel build counted"; fi
  grep -q 'no counters' "$err" || { cat "$err"; rm -f "$err"; fail "the real-kernel build did not say why it refuses"; }
  rm -f "$err"
  ok "the real-kernel build refuses with a message"
fi
echo "PASS"
