#!/usr/bin/env bash
# ctrain's TensorBoard event files, read back by TensorBoard's own reader (PyPI tensorboard): every
# scalar with its tag, step and value; and a flipped byte makes TensorBoard's CRC check complain.
set -euo pipefail
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$CTRAIN_BUILD/tests/helper_tfevents" "$dir"
"$PIPPY" - "$dir" <<'PY'
import sys, glob, math
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
d = sys.argv[1]
files = glob.glob(d + "/events.out.tfevents.*")
assert len(files) == 1, files
acc = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
tags = sorted(acc.Tags()["scalars"])
assert tags == sorted(["train/loss", "val/top1", "big",
    "a/very/long/tag/name/that/goes/on/and/on/for/a/while/to/test/varint/lengths"]), tags
loss = acc.Scalars("train/loss")
assert len(loss) == 300, len(loss)
for e in loss:
    want = 2.5 * math.exp(-e.step / 100.0)
    assert abs(e.value - want) <= 1e-6 * want, (e.step, e.value, want)
top1 = acc.Scalars("val/top1")
assert [e.step for e in top1] == [99, 199, 299]
big = acc.Scalars("big")[0]
assert big.step == 5000000000 and big.value == 3.0e38 or abs(big.value - 3.0e38) < 1e32, big
# Raw records: the first event is the file version, CRCs verified by the loader.
raws = list(RawEventFileLoader(files[0]).Load())
from tensorboard.compat.proto import event_pb2
ev = event_pb2.Event.FromString(raws[0])
assert ev.file_version == "brain.Event:2", ev
print("tensorboard read", len(raws), "records OK")
PY
# Corrupt one payload byte: TensorBoard's reader must notice (CRC mismatch), proving the CRCs are checked.
# The byte is inverted, not overwritten with a constant: records hold wall-clock times, so any fixed
# value is sometimes already there (that made this test fail about once in 256 runs).
f=$(ls "$dir"/events.out.tfevents.*)
"$PIPPY" -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[200] ^= 0xff; open(sys.argv[1], "wb").write(bytes(b))' "$f"
"$PIPPY" - "$f" <<'PY'
import sys
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
from tensorboard.compat.tensorflow_stub import errors
r = PyRecordReader_New(sys.argv[1].encode(), 0)
n = 0
try:
    while True:
        r.GetNext(); n += 1
except errors.DataLossError as e:
    print("corruption detected after", n, "records:", str(e)[:80]); sys.exit(0)
except errors.OutOfRangeError:
    print("corruption NOT detected"); sys.exit(1)
PY
