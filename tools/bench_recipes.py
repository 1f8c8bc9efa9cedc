#!/usr/bin/python3
"""Tables of tools/bench_recipes.sh, from the runs in OUT/runs/NAME (metrics.jsonl, time.txt, args.txt).

  combo OUT    the flags of the demo's combination: every change whose run beat the demo's final
               test top-1 (for an EMA run, the better of the plain and the EMA model, which is the
               one model.safetensors keeps)
  report OUT   the ablation table (markdown) and ctrain against PyTorch, time to the same top-1
"""
import json
import os
import sys

ORDER = ["demo", "notta", "minscale", "lr04", "noprog", "ema999", "ema996x2", "mixup", "cutmix", "nols", "blurpool",
         "tawide", "randaug", "erase", "rarep", "bce", "droppath", "nowdbn", "lamb", "v2tools", "rsbtools", "combo", "combo_ep"]
# Changes the combination may take, each with the runs that try it (the better one wins).
# The bundles (v2tools, rsbtools) are not elements: they are measured, not combined.
ELEMENTS = [["notta"], ["minscale"], ["lr04"], ["noprog"], ["ema999", "ema996x2"], ["mixup"], ["cutmix"], ["nols"], ["blurpool"],
            ["tawide", "randaug"], ["erase"], ["rarep"], ["bce"], ["droppath"], ["nowdbn"], ["lamb"]]


def load_run(out, name):
    d = os.path.join(out, "runs", name)
    m = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(m):
        return None
    with open(m) as f:
        epochs = [r for r in (json.loads(line) for line in f if line.strip()) if r.get("type") == "epoch"]
    if not epochs:
        return None
    run = {"name": name, "epochs": epochs, "wall": None, "cpu": None, "args": ""}
    t = os.path.join(d, "time.txt")
    if os.path.exists(t):
        with open(t) as f:
            last = f.read().split("\n")
        nums = [line for line in last if line.strip()][-1].split()  # /usr/bin/time may prefix a status line
        run["wall"], run["cpu"] = float(nums[0]), float(nums[1]) + float(nums[2])
    a = os.path.join(d, "args.txt")
    if os.path.exists(a):
        with open(a) as f:
            run["args"] = f.read().strip()
    run["stopped"] = False  # a run cut short (SIGINT, a crash): its row says so
    c = os.path.join(d, "config.json")
    if os.path.exists(c):
        with open(c) as f:
            run["stopped"] = len(epochs) < json.load(f)["settings"]["epochs"]
    run["final"] = epochs[-1]["val_top1"]
    run["best"] = max(e["val_top1"] for e in epochs)
    ema = [e["ema_val_top1"] for e in epochs if "ema_val_top1" in e]
    run["ema_final"] = ema[-1] if ema else None
    run["ema_best"] = max(ema) if ema else None
    run["kept"] = max(run["final"], run["ema_final"] if ema else run["final"])
    return run


def combo_flags(out):
    demo = load_run(out, "demo")
    if demo is None:
        sys.exit("bench_recipes: combo needs the demo run in %s/runs/demo (run --only demo,...)" % out)
    flags = []
    for runs in ELEMENTS:
        tried = [r for r in (load_run(out, n) for n in runs) if r is not None]
        wins = [r for r in tried if not r["stopped"] and r["kept"] > demo["kept"]]
        if wins:
            flags.append(max(wins, key=lambda r: r["kept"])["args"])
    return " ".join(flags)


def pct(v):
    return "-" if v is None else "%.2f" % v


def secs(v):
    return "-" if v is None else "%.0f" % v


def report(out):
    with open(os.path.join(out, "header.txt")) as f:
        print(f.read().rstrip())
    runs = [r for r in (load_run(out, n) for n in ORDER) if r is not None]
    demo = next((r for r in runs if r["name"] == "demo"), None)
    print("\n| variant | flags beyond the demo | epochs | wall s | CPU s | top-1 final | top-1 best | EMA final | EMA best | kept vs demo |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        delta = "%+.2f" % (r["kept"] - demo["kept"]) if demo else "-"
        print("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"] + (" (stopped)" if r["stopped"] else ""), ("`%s`" % r["args"]) if r["args"] else "(none)", len(r["epochs"]), secs(r["wall"]), secs(r["cpu"]),
            pct(r["final"]), pct(r["best"]), pct(r["ema_final"]), pct(r["ema_best"]), delta))
    print("\nwall/CPU s: the whole process (packing check, training, every evaluation); kept: the better of the"
          "\nplain and EMA final top-1 (what model.safetensors holds).")
    tj = os.path.join(out, "runs", "torch", "torch.json")
    if demo is None or not os.path.exists(tj):
        return
    with open(tj) as f:
        torch = json.load(f)
    te = torch["epochs"]
    ce, t = [], 0.0
    for e in demo["epochs"]:
        t += e["epoch_time"]
        ce.append((t, e["val_top1"]))
    print("\nctrain against PyTorch, the demo recipe (PyTorch replays ctrain's dumped batches: same initial"
          "\nweights, same augmented images, same learning rate every step; its time excludes decoding and"
          "\naugmentation, which ctrain's includes). Seconds: training plus every evaluation so far.\n")
    print("| epoch | ctrain s | ctrain top-1 | PyTorch s | PyTorch top-1 |")
    print("| --- | --- | --- | --- | --- |")
    for i in range(max(len(ce), len(te))):
        c = ce[i] if i < len(ce) else None
        p = te[i] if i < len(te) else None
        print("| %d | %s | %s | %s | %s |" % (i + 1, secs(c[0]) if c else "-", pct(c[1]) if c else "-",
                                            secs(p["time"]) if p else "-", pct(p["val_top1"]) if p else "-"))
    target = min(ce[-1][1], te[-1]["val_top1"])
    tc = next(s for s, a in ce if a >= target)
    tp = next(p["time"] for p in te if p["val_top1"] >= target)
    tw = os.path.join(out, "runs", "torch", "time.txt")
    whole = ""
    if os.path.exists(tw):
        with open(tw) as f:
            nums = [line for line in f.read().split("\n") if line.strip()][-1].split()
        whole = " (PyTorch process: %s s wall, %s s CPU, including reading the batch files)" % (
            secs(float(nums[0])), secs(float(nums[1]) + float(nums[2])))
    print("\ntime to %.2f%% test top-1 (the lower of the two final top-1s): ctrain %s s, PyTorch %s s, "
          "ctrain/PyTorch %.2fx%s" % (target, secs(tc), secs(tp), tc / tp, whole))
    dump = load_run(out, "torch/ctrain")
    if dump is not None:
        same = "the same" if dump["final"] == demo["final"] else "NOT the same (%.2f%%)" % dump["final"]
        print("the dumped ctrain run's final top-1 is %s as the demo run's" % same)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("combo", "report"):
        sys.exit(__doc__)
    if sys.argv[1] == "combo":
        print(combo_flags(sys.argv[2]))
    else:
        report(sys.argv[2])


if __name__ == "__main__":
    main()
