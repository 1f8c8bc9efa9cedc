# train --nodes N: one process per node, meeting over TCP (dist/net.h), here as processes on
# localhost:
#   - 2 nodes x 1 rank train the same bits as 1 process x 2 ranks (the same sums in the same order),
#     and only node 0 writes files;
#   - 2 nodes x 2 ranks follow 1 process x 4 ranks (first steps within 1e-4: only the order in which
#     the four gradients are added differs, (g0 + g1) + (g2 + g3) against ((g0 + g1) + g2) + g3);
#   - torchrun's environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) and SLURM's (SLURM_NNODES,
#     SLURM_NODEID, node 0 from SLURM_JOB_NODELIST) work in place of flags;
#   - failures end every node with an error naming the culprit, never a hang: a node started with
#     other settings, a node that dies mid-run (SIGKILL), a node that never comes.
source "$(dirname "$0")/train_lib.sh"
make_synth "$TMP/d" 256 61 16
F=(-a resnet20 -b 8 --crop-size 16 --val-resize 16 --lr 0.05 --wd 5e-4 -p 1 --epochs 2 --workers 1 --seed 5)
PORT=$((20000 + ($$ * 7 + RANDOM) % 20000))
nodes2() { # OUT EXTRA...: runs node 1 in the background and node 0 in the foreground; sets rc0, rc1.
  # $NODE1_EXTRA: more flags for node 1 only.
  local out=$1; shift
  "$TRAIN" "${F[@]}" "$TMP/d" --nodes 2 --node-rank 1 --master 127.0.0.1:$PORT --out "$out.node1" "$@" ${NODE1_EXTRA:-} \
    2>"$out.node1.log" &
  local p1=$!
  rc0=0; "$TRAIN" "${F[@]}" "$TMP/d" --nodes 2 --node-rank 0 --master 127.0.0.1:$PORT --out "$out" "$@" 2>"$out.log" || rc0=$?
  rc1=0; wait $p1 || rc1=$?
  PORT=$((PORT + 1))
}

"$TRAIN" "${F[@]}" "$TMP/d" --ranks 2 --out "$TMP/one" 2>/dev/null || fail "1 process x 2 ranks"
# Node-local flags may differ between nodes (they do not change what is computed).
NODE1_EXTRA="--workers 2 --print-freq 3 --cuda-graphs off --timeout 200" nodes2 "$TMP/two"
[ $rc0 = 0 ] && [ $rc1 = 0 ] || { cat "$TMP/two.log" "$TMP/two.node1.log"; fail "2 nodes: exit $rc0/$rc1"; }
grep -q "node 1 of 2: ranks 1..1 of 2" "$TMP/two.node1.log" || fail "node 1 did not report its ranks"
cmp -s "$TMP/one/model.safetensors" "$TMP/two/model.safetensors" || fail "2 nodes x 1 rank differ from 1 process x 2 ranks"
diff <(strip_timing "$TMP/one/metrics.jsonl") <(strip_timing "$TMP/two/metrics.jsonl") >/dev/null || fail "metrics differ"
[ -e "$TMP/two.node1" ] && fail "node 1 wrote an output directory"
ok "2 nodes x 1 rank = 1 process x 2 ranks, bit for bit (node-local flags differing); only node 0 writes"

"$TRAIN" "${F[@]}" "$TMP/d" --ranks 4 --out "$TMP/four" 2>/dev/null || fail "1 process x 4 ranks"
nodes2 "$TMP/twotwo" --ranks 2
[ $rc0 = 0 ] && [ $rc1 = 0 ] || { cat "$TMP/twotwo.log" "$TMP/twotwo.node1.log"; fail "2 nodes x 2 ranks: exit $rc0/$rc1"; }
"$PIPPY" - "$TMP/four/metrics.jsonl" "$TMP/twotwo/metrics.jsonl" <<'PY' || fail "2 nodes x 2 ranks differ from 4 ranks"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l and '"type":"step"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"step"' in l and '"type":"step"' in l]
assert len(a) == len(b) and len(a) >= 8, (len(a), len(b))
d = [abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, b)]
print("2x2 vs 4 ranks, per step: " + " ".join("%.1e" % x for x in d[:8]))
assert max(d[:3]) < 1e-4
PY
ok "2 nodes x 2 ranks follow 1 process x 4 ranks"

# torchrun's variables instead of flags.
MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT WORLD_SIZE=2 RANK=1 "$TRAIN" "${F[@]}" "$TMP/d" --out "$TMP/env1" 2>"$TMP/env1.log" &
p1=$!
MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT WORLD_SIZE=2 RANK=0 "$TRAIN" "${F[@]}" "$TMP/d" --out "$TMP/env" 2>"$TMP/env.log" \
  || { cat "$TMP/env.log"; fail "launch by environment"; }
wait $p1 || fail "node 1 launched by environment"
PORT=$((PORT + 1))
cmp -s "$TMP/one/model.safetensors" "$TMP/env/model.safetensors" || fail "environment launch trained other bits"
ok "MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK launch the same run"

# SLURM's variables: node 0 is the first host of the node list.
S=(env SLURM_NNODES=2 SLURM_JOB_NODELIST="localhost,node[2-9]" MASTER_PORT=$PORT)
"${S[@]}" SLURM_NODEID=1 "$TRAIN" "${F[@]}" "$TMP/d" --out "$TMP/slurm1" 2>"$TMP/slurm1.log" &
p1=$!
"${S[@]}" SLURM_NODEID=0 "$TRAIN" "${F[@]}" "$TMP/d" --out "$TMP/slurm" 2>"$TMP/slurm.log" || { cat "$TMP/slurm.log"; fail "launch by SLURM variables"; }
wait $p1 || { cat "$TMP/slurm1.log"; fail "node 1 launched by SLURM variables"; }
PORT=$((PORT + 1))
cmp -s "$TMP/one/model.safetensors" "$TMP/slurm/model.safetensors" || fail "SLURM launch trained other bits"
ok "SLURM_NNODES/SLURM_NODEID/SLURM_JOB_NODELIST launch the same run"

# Other settings on node 1: both nodes stop at the rendezvous, naming the flag and both values
# (an execution option: tests/test_exec_options.sh).
NODE1_EXTRA="--lr 0.07" nodes2 "$TMP/mis"
[ $rc0 = 1 ] && [ $rc1 = 1 ] || fail "mismatched settings: exit $rc0/$rc1"
grep -q "node 1's settings differ from node 0's: --lr: node 1 has 0.07, node 0 has 0.05;" "$TMP/mis.log" || { cat "$TMP/mis.log"; fail "node 0 did not name node 1 and --lr"; }
grep -q "node 0 refused this node: node 1's settings differ from node 0's: --lr: node 1 has 0.07" "$TMP/mis.node1.log" || { cat "$TMP/mis.node1.log"; fail "node 1 not told why"; }
ok "a node with other settings is refused at the rendezvous, on both sides, naming --lr and both values"


# A node that dies mid-run: node 0 stops with an error naming it.
"$TRAIN" "${F[@]}" "$TMP/d" --epochs 50 --nodes 2 --node-rank 1 --master 127.0.0.1:$PORT --timeout 20 --out "$TMP/k1" 2>/dev/null &
p1=$!
"$TRAIN" "${F[@]}" "$TMP/d" --epochs 50 --nodes 2 --node-rank 0 --master 127.0.0.1:$PORT --timeout 20 --out "$TMP/kill" 2>"$TMP/kill.log" &
p0=$!
for i in $(seq 1 300); do
  n=$(grep -c '"type":"step"' "$TMP/kill/metrics.jsonl" 2>/dev/null || true)
  [ "${n:-0}" -ge 3 ] && break
  sleep 0.1
done
kill -KILL $p1
t0=$SECONDS
rc=0; wait $p0 || rc=$?
wait $p1 2>/dev/null || true
PORT=$((PORT + 1))
[ $rc = 1 ] || { cat "$TMP/kill.log"; fail "node 0 after node 1 was killed: exit $rc"; }
grep -q "node 1 closed the connection: the node died or was stopped" "$TMP/kill.log" || { tail -3 "$TMP/kill.log"; fail "dead node not named"; }
ok "a node killed mid-run ends node 0 with an error naming it ($((SECONDS - t0)) s)"

# A node that never comes: node 0 gives up after --timeout.
rc=0
"$TRAIN" "${F[@]}" "$TMP/d" --nodes 3 --node-rank 0 --master 127.0.0.1:$PORT --timeout 2 --out "$TMP/lone" 2>"$TMP/lone.log" || rc=$?
[ $rc = 1 ] || fail "lonely node 0: exit $rc"
grep -q "waited 2 s on port $PORT for node(s) 1, 2, which never connected" "$TMP/lone.log" || { cat "$TMP/lone.log"; fail "missing nodes not named"; }
ok "missing nodes are named after --timeout"
echo "test_train_nodes: all passed"
