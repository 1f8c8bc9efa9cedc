#!/usr/bin/env bash
# train export: ONNX graphs of resnet20 (a model.safetensors from a short run: architecture,
# preprocessing and classes from its metadata), resnet18 and resnet50 (torchvision-named files with
# random weights and non-trivial BatchNorm state, no metadata: -a) pass onnx.checker, and
# onnxruntime's logits match ctrain's eval forward on the same inputs (tests/helper_stio eval):
# relative norm ||ort - ctrain|| / ||ctrain|| <= 1e-4 (max abs difference printed). The batch
# dimension is dynamic (batches of 1 and N). Also: predict on the run's images.
source "$(dirname "$0")/train_lib.sh"
H=$CTRAIN_BUILD/tests/helper_stio
[ -x "$H" ] || fail "missing $H"
"$PIPPY" -c 'import onnx, onnxruntime, safetensors, numpy' || fail "onnx/onnxruntime not available as $PIPPY ($PIPPY -m pip install onnx onnxruntime)"

# compare ONNX ARCH IN_CH CLASSES WEIGHTS SIZE N: onnx.checker, metadata, then logits vs ctrain's.
compare() {
  local onnx=$1 arch=$2 inch=$3 classes=$4 weights=$5 size=$6 n=$7
  "$PIPPY" - "$onnx" "$inch" "$size" "$n" "$TMP/x.safetensors" <<'PY' || fail "$arch: onnx check or input"
import sys, numpy as np, onnx
from safetensors.numpy import save_file
path, C, S, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
m = onnx.load(path)
onnx.checker.check_model(m, full_check=True)
assert m.opset_import[0].version == 17 and m.opset_import[0].domain in ("", "ai.onnx"), m.opset_import
ops = sorted({n.op_type for n in m.graph.node})
assert set(ops) <= {"Conv", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Flatten", "Gemm"}, ops
assert [i.name for i in m.graph.input] == ["input"] and [o.name for o in m.graph.output] == ["logits"]
d = m.graph.input[0].type.tensor_type.shape.dim
assert d[0].dim_param == "N" and [x.dim_value for x in d[1:]] == [C, S, S], d
rng = np.random.default_rng(5)
x = rng.standard_normal((N, C, S, S)).astype(np.float32)
np.save(sys.argv[5] + ".npy", x)
save_file({"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1))}, sys.argv[5])
print("checker ok; ops", " ".join(ops), "; metadata", {p.key: p.value[:40] for p in m.metadata_props})
PY
  "$H" eval "$arch" "$inch" "$classes" "$weights" "$TMP/x.safetensors" "$TMP/ref.safetensors" || fail "$arch: ctrain eval"
  "$PIPPY" - "$onnx" "$TMP/x.safetensors.npy" "$TMP/ref.safetensors" "$arch" <<'PY' || fail "$arch: onnxruntime logits differ from ctrain's"
import sys, numpy as np, onnxruntime as ort
from safetensors.numpy import load_file
sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
x = np.load(sys.argv[2])
ref = load_file(sys.argv[3])["logits"]
got = sess.run(["logits"], {"input": x})[0]
one = sess.run(["logits"], {"input": x[:1]})[0]  # the batch dimension is dynamic
rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
mx = np.abs(got - ref).max()
print("%s: onnxruntime vs ctrain logits [%d x %d]: rel. norm %.2e, max abs %.2e (max |logit| %.2f)"
      % (sys.argv[4], ref.shape[0], ref.shape[1], rel, mx, np.abs(ref).max()))
assert got.shape == ref.shape and one.shape == (1, ref.shape[1])
assert rel <= 1e-4, rel
assert np.linalg.norm(one[0] - ref[0]) / np.linalg.norm(ref[0]) <= 1e-4
PY
}

# 1. resnet20 from a short run: everything from the file's metadata.
make_synth "$TMP/d" 64 20 16
"$TRAIN" "${SMALL_FLAGS[@]}" --epochs 1 --out "$TMP/run" "$TMP/d" > /dev/null 2> "$TMP/stderr" || { cat "$TMP/stderr"; fail "training run failed"; }
"$TRAIN" export --weights "$TMP/run/model.safetensors" --onnx "$TMP/r20.onnx" 2> "$TMP/stderr" || { cat "$TMP/stderr"; fail "export resnet20"; }
[ -z "$(ls "$TMP" | grep tmp || true)" ] || fail "temporary files left: $(ls "$TMP")"
"$PIPPY" - "$TMP/r20.onnx" <<'PY' || fail "resnet20 metadata_props"
import json, sys, onnx
m = onnx.load(sys.argv[1])
p = {e.key: e.value for e in m.metadata_props}
assert p["arch"] == "resnet20" and p["input_size"] == "16" and p["resize"] == "16", p
assert p["mean"] == "0.485,0.456,0.406" and p["std"] == "0.229,0.224,0.225", p
assert json.loads(p["classes"]) == ["class%02d" % i for i in range(10)], p["classes"]
assert p["bn_folded"] == "true" and m.producer_name == "ctrain"
PY
compare "$TMP/r20.onnx" resnet20 3 10 "$TMP/run/model.safetensors" 16 3
ok "resnet20 (model.safetensors of a run)"

# 2. torchvision-named files without metadata: -a names the architecture (resnext50_32x4d: its grouped
#    3x3s are Conv nodes with group 32, weights [K, C/32, 3, 3]).
for spec in "resnet18 3 7 64 2" "resnet50 3 11 64 2" "resnext50_32x4d 3 5 32 2"; do
  set -- $spec
  arch=$1 inch=$2 classes=$3 size=$4 n=$5
  "$H" save "$arch" "$inch" "$classes" 11 "$TMP/$arch.safetensors"
  if "$TRAIN" export --weights "$TMP/$arch.safetensors" --onnx "$TMP/$arch.onnx" 2> "$TMP/stderr"; then fail "export without -a of a file without arch succeeded"; fi
  grep -q -- "-a ARCH" "$TMP/stderr" || { cat "$TMP/stderr"; fail "no hint to give -a"; }
  "$TRAIN" export --weights "$TMP/$arch.safetensors" -a "$arch" --input-size "$size" --onnx "$TMP/$arch.onnx" 2> "$TMP/stderr" \
    || { cat "$TMP/stderr"; fail "export $arch"; }
  compare "$TMP/$arch.onnx" "$arch" "$inch" "$classes" "$TMP/$arch.safetensors" "$size" "$n"
  ok "$arch (torchvision-named weights, -a)"
done

# Errors name the flag.
if "$TRAIN" export --weights "$TMP/run/model.safetensors" 2> "$TMP/stderr"; then fail "export without --onnx succeeded"; fi
grep -q -- "--onnx" "$TMP/stderr" || fail "missing --onnx not named"
if "$TRAIN" export --weights "$TMP/run/model.safetensors" -a resnet18 --onnx "$TMP/x.onnx" 2> "$TMP/stderr"; then fail "export with a contradicting -a succeeded"; fi
grep -q "resnet20" "$TMP/stderr" || fail "contradicting -a not explained"
"$TRAIN" export --help | grep -q "BatchNorm folded" || fail "export --help"
ok "export errors and --help"
