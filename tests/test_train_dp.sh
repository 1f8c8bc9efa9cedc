# train --ranks N (data parallel, CPU ranks as threads):
#   - against PyTorch with DistributedDataParallel's semantics (tools/torch_train_ref.py --ranks:
#     the same per-rank batches, BN over each rank's batch, rank 0's buffers, averaged gradients):
#     the first steps agree to float rounding, the loss curves and val top-1 as in test_train_torch;
#   - deterministic: the same bits for another loader worker count, and run to run;
#   - exact distributed eval: --evaluate gives the same images/loss/top-1 with 1, 2, 3 or 4 ranks
#     on a val set that no rank count divides (no sample dropped or counted twice);
#   - SIGTERM mid-epoch: every rank stops at the same step, rank 0 checkpoints, and the resumed run
#     ends bit for bit where the uninterrupted one does;
#   - failures are loud, not hangs: a rank that stops responding ends the run within --timeout with
#     an error naming it; a replica whose weights drifted from rank 0's is caught at the epoch end;
#   - misuse is an error: more ranks than a global batch of records, --ranks 0.
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 2000 997 16
FL=(-a resnet20 -b 16 --crop-size 16 --val-resize 16 --min-scale 0.5 --lr 0.05 --momentum 0.9 --wd 5e-4 --nesterov
    --label-smoothing 0.1 --lr-schedule cosine --warmup-epochs 0.5 --epochs 4 -p 1 --ranks 2 --bucket-mb 1)

"$TRAIN" "${FL[@]}" --dump-batches "$TMP/dump" --out "$TMP/run" "$TMP/d" 2>"$TMP/train.log" || { cat "$TMP/train.log"; fail "ctrain --ranks 2 run failed"; }
grep -q "batch 16 per rank x 2 ranks = global batch 32" "$TMP/train.log" || fail "no global batch line: $(head -3 "$TMP/train.log")"
grep -q '"world_size": 2' "$TMP/run/config.json" || fail "config.json does not record world_size 2"
[ -f "$TMP/dump/train_batches.rank1.bin" ] || fail "rank 1 dumped no batches"
tail -2 "$TMP/train.log"
torch_replay "$TMP/run" "$TMP/dump" "$TMP/torch" --arch resnet20 --momentum 0.9 --wd 5e-4 --nesterov 1 --smoothing 0.1 --ranks 2
compare_with_torch "$TMP/run/metrics.jsonl" "$TMP/torch.json" 150 || fail "--ranks 2 differs from PyTorch DDP semantics"
ok "--ranks 2: loss curve and val top-1 match PyTorch with DDP semantics"

# Determinism: another worker count, another bucket size (other collectives, same sums), and a rerun.
"$TRAIN" "${FL[@]}" --workers 3 --bucket-mb 25 --out "$TMP/w3" "$TMP/d" 2>/dev/null || fail "--workers 3 run failed"
cmp -s "$TMP/run/model.safetensors" "$TMP/w3/model.safetensors" || fail "--ranks 2: other worker count / buckets changed the bits"
diff <(strip_timing "$TMP/run/metrics.jsonl") <(strip_timing "$TMP/w3/metrics.jsonl") >/dev/null || fail "metrics differ"
ok "--ranks 2 is bit-identical across worker counts and bucket sizes"

# Exact distributed eval: 997 val images, no rank count divides them.
ref=""
for k in 1 2 3 4; do
  out=$("$TRAIN" --evaluate -a resnet20 --crop-size 16 --val-resize 16 -b 64 --ranks $k --resume "$TMP/run/last.ckpt" "$TMP/d" 2>&1) \
    || { echo "$out"; fail "--evaluate --ranks $k failed"; }
  line=$(echo "$out" | grep -o "997 images.*top-5 [0-9.]*%") || fail "--evaluate --ranks $k: not 997 images: $out"
  [ -z "$ref" ] && ref=$line
  [ "$line" = "$ref" ] || fail "--evaluate --ranks $k: '$line' vs 1 rank '$ref'"
done
ok "distributed eval: every val image exactly once with 1-4 ranks ($ref)"
# The same with flip TTA at its own evaluation size: each image and its mirror on the rank that
# holds the image, counted once; the result differs from the plain one.
tref=""
for k in 1 3; do
  out=$("$TRAIN" --evaluate -a resnet20 --crop-size 16 --val-crop-size 12 -b 64 --ranks $k --tta flip --resume "$TMP/run/last.ckpt" "$TMP/d" 2>&1) \
    || { echo "$out"; fail "--evaluate --tta flip --ranks $k failed"; }
  line=$(echo "$out" | grep -o "997 images.*top-5 [0-9.]*%") || fail "--evaluate --tta flip --ranks $k: not 997 images: $out"
  [ -z "$tref" ] && tref=$line
  [ "$line" = "$tref" ] || fail "--evaluate --tta flip --ranks $k: '$line' vs 1 rank '$tref'"
done
[ "$tref" != "$ref" ] || fail "--tta flip --val-crop-size 12 evaluated exactly like the plain eval: '$tref'"
ok "distributed eval with --tta flip --val-crop-size 12: every val image exactly once with 1 and 3 ranks ($tref)"

# SIGTERM mid-epoch, then resume: the same final model as without the interruption, with the SOTA
# recipes' per-sample and per-batch draws on (RandAugment with magnitude noise, RandomErasing,
# repeated augmentation across the ranks, Mixup/CutMix, BCE, stochastic depth), and other worker
# counts before and after the interruption.
F2=("${FL[@]}" --epochs 2 -p 1 --auto-augment rand-m7-mstd0.5-inc1 --random-erase 0.25 --ra-repeats 2
    --mixup 0.2 --cutmix 1.0 --bce --drop-path 0.2)
"$TRAIN" "${F2[@]}" --workers 2 --out "$TMP/full" "$TMP/d" 2>/dev/null || fail "uninterrupted run failed"
# The loader delay (timing only, not the bits) keeps the run alive until the signal lands.
CTRAIN_FAULT_LOADER_DELAY_MS=40 "$TRAIN" "${F2[@]}" --workers 1 --out "$TMP/part" "$TMP/d" 2>"$TMP/part.log" &
signal_after_steps TERM $! "$TMP/part" 10
[ $rc = 143 ] || { cat "$TMP/part.log"; fail "SIGTERM with 2 ranks: exit $rc, expected 143"; }
grep -q "SIGTERM: checkpoint saved" "$TMP/part.log" || { cat "$TMP/part.log"; fail "no checkpoint message"; }
"$TRAIN" "${F2[@]}" --workers 2 --resume "$TMP/part/last.ckpt" --out "$TMP/part" "$TMP/d" 2>"$TMP/resume.log" || { cat "$TMP/resume.log"; fail "resume with 2 ranks failed"; }
cmp -s "$TMP/full/model.safetensors" "$TMP/part/model.safetensors" || fail "interrupted + resumed run differs from the uninterrupted one"
cmp -s <(strip_timing "$TMP/full/metrics.jsonl") <(strip_timing "$TMP/part/metrics.jsonl") \
  || { diff <(strip_timing "$TMP/full/metrics.jsonl") <(strip_timing "$TMP/part/metrics.jsonl") | head || true; fail "interrupted + resumed run logged other metrics"; }
ok "SIGTERM stops every rank at one step; the resumed run (recipe draws on, workers 1 then 2) ends bit for bit like the uninterrupted one"

# A hung rank: the others give up after --timeout, naming it; exit status 1, no hang.
t0=$SECONDS
rc=0
CTRAIN_FAULT_STALL=1:5 timeout 60 "$TRAIN" "${F2[@]}" --timeout 2 --out "$TMP/stall" "$TMP/d" 2>"$TMP/stall.log" || rc=$?
[ $rc = 1 ] || { cat "$TMP/stall.log"; fail "hung rank: exit status $rc after $((SECONDS - t0)) s, expected 1"; }
grep -Eq "rank 0 waited 2 s in allreduce\(f64\) #[0-9]+ \(4 elements\) for rank\(s\) 1, which never arrived" "$TMP/stall.log" \
  || { cat "$TMP/stall.log"; fail "hung rank: no error naming rank 1"; }
ok "a hung rank ends the run after --timeout with an error naming it ($((SECONDS - t0)) s)"

# A replica that drifted (here: one weight changed at the start) is caught before rank 0 checkpoints.
rc=0
CTRAIN_FAULT_DIVERGE=1 "$TRAIN" "${F2[@]}" --epochs 1 --out "$TMP/div" "$TMP/d" 2>"$TMP/div.log" || rc=$?
[ $rc = 1 ] || { cat "$TMP/div.log"; fail "diverged replica: exit status $rc, expected 1"; }
grep -q "rank 1's weights differ from rank 0's after epoch 1" "$TMP/div.log" || { cat "$TMP/div.log"; fail "diverged replica not named"; }
[ -f "$TMP/div/last.ckpt" ] && fail "a checkpoint was written from diverged replicas"
ok "a replica that differs from rank 0 is an error at the epoch end, before any checkpoint"

# Misuse.
make_synth "$TMP/tiny" 40 10 16
out=$("$TRAIN" -a resnet20 -b 16 --crop-size 16 --ranks 3 --epochs 1 --out "$TMP/x" "$TMP/tiny" 2>&1) && fail "40 records, global batch 48: accepted"
echo "$out" | grep -q "fewer than one global batch (--batch-size 16 x --ranks 3)" || fail "unclear error: $out"
out=$("$TRAIN" -a resnet20 -b 4 --crop-size 16 --ranks 0 "$TMP/tiny" 2>&1) && fail "--ranks 0 accepted"
echo "$out" | grep -q -- "--ranks: must be in 1..256" || fail "unclear --ranks error: $out"
ok "misuse of --ranks is a clear error"
echo "test_train_dp: all passed"
