#!/usr/bin/env python3
"""SplitBrain (hybrid_partition) against data parallelism: memory and speed.

Memory: vgg11_cifar on W local workers (loopback), one step and the whole test
set evaluated (as a default run), rank 0's parameter + optimizer-state bytes
(state_bytes) and peak tensor bytes, with the share each strategy saves against
data parallel: hybrid shards the classifier (fc1, fc2) W ways; with
shard_rest=true it holds the convolutions in shards too (FSDP).

Speed: vgg11_cifar on 4 workers, synthetic CIFAR-shaped data (CIFAR-10 cannot
be had here), data parallel and hybrid alternated for --rounds rounds, each run
--steps steps; the speedup is taken within each round (the machine's speed
drifts), reported as the median with min-max. On loopback (the launcher) and,
with --rate, on an emulated cluster (bench/netem/cluster.sh, needs root).
Writes OUT/results.json; each run's metrics and the ranks' logs go to
OUT/raw/, which git ignores.

Example (about 15 minutes on 2 cores):
  bench/splitbrain.py --memory-workers 2,4,8 --rounds 3 --rate 100mbit
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
CLUSTER = os.path.join(ROOT, "bench/netem/cluster.sh")
STRATEGIES = [("data parallel", "autodiff,sgd(lr=0.01,momentum=0.9)"),
              ("hybrid", "hybrid_partition,autodiff,sgd(lr=0.01,momentum=0.9)")]
# The memory table also holds the convolutions in shards (FSDP), gathered where used.
SHARD_REST = ("hybrid, the rest sharded too", "hybrid_partition(shard_rest=true),autodiff,sgd(lr=0.01,momentum=0.9)")


def flags(args, steps, metrics, test_limit=None):
    test = [] if test_limit == 0 else ["--test-limit", str(test_limit or args.batch)]
    return [os.path.join(ROOT, "models", "vgg11_cifar.pbtxt"), "--dataset", "synthetic", "--batch", str(args.batch),
            "--threads", "1", "--max-steps", str(steps), "--quiet", "--comm-timeout", "300",
            "--metrics-json", metrics] + test


def run(cmd, timeout):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"splitbrain: exit {p.returncode}: {' '.join(cmd)}")


def local(args, workers, passes, steps, out, name, test_limit=None):
    metrics = os.path.join(out, name + ".json")
    run([NEREID, "run"] + flags(args, steps, metrics, test_limit) + ["--workers", str(workers), "--passes", passes],
        1800)
    with open(metrics) as f:
        return json.load(f)


def emulated(args, passes, steps, out, name):
    metrics = os.path.join(out, name + ".json")
    run([CLUSTER, "--workers", "4", "--rate", args.rate, "--timeout", "1800", "--logs", os.path.join(out, "logs_" + name),
         "--", NEREID, "run"] + flags(args, steps, metrics) + ["--passes", passes], 1900)
    with open(metrics) as f:
        return json.load(f)


def seconds_per_step(m):
    return sum(e["seconds"] for e in m["per_epoch"]) / m["steps"]


def memory_table(args, out):
    """One step and the whole test set evaluated (a default run), per strategy."""
    lines = ["| workers | strategy | state per rank | saved | peak tensor bytes (evaluation included) | saved |",
             "|---|---|---|---|---|---|"]
    rows = []
    for w in [int(x) for x in args.memory_workers.split(",") if x]:
        runs = [(name, local(args, w, passes, 1, out, f"memory_{w}_{i}", test_limit=args.memory_test_limit))
                for i, (name, passes) in enumerate(STRATEGIES + [SHARD_REST])]
        dp = runs[0][1]
        rows.append({"workers": w, "runs": {name: m for name, m in runs}})
        for name, m in runs:
            state = 1 - m["state_bytes"] / dp["state_bytes"]
            peak = 1 - m["peak_tensor_bytes"] / dp["peak_tensor_bytes"]
            lines.append(f"| {w} | {name} | {m['state_bytes'] / 2**20:.1f} MiB | {100 * state:.1f}% | "
                         f"{m['peak_tensor_bytes'] / 2**20:.1f} MiB | {100 * peak:.1f}% |")
    return "\n".join(lines), rows


def speed_table(args, out, where, train):
    times = {name: [] for name, _ in STRATEGIES}
    sent = {}
    for rnd in range(args.rounds):
        for i, (name, passes) in enumerate(STRATEGIES):
            m = train(passes, f"speed_{where}_{rnd}_{i}")
            times[name].append(seconds_per_step(m))
            sent[name] = m["bytes_sent_per_step"]
        print(f"{where} round {rnd + 1}: " + ", ".join(f"{n} {times[n][-1]:.2f} s/step" for n in times),
              file=sys.stderr, flush=True)
    base = STRATEGIES[0][0]
    lines = [f"| {where} | s/step (median) | samples/s | MB sent per rank and step | speedup: median (min-max) |",
             "|---|---|---|---|---|"]
    for name, _ in STRATEGIES:
        ratios = [b / t for b, t in zip(times[base], times[name])]
        med = statistics.median(times[name])
        lines.append(f"| {name} | {med:.2f} | {4 * args.batch / med:.1f} | {sent[name] / 1e6:.1f} | "
                     f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
    return "\n".join(lines), times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memory-workers", default="2,4,8", help="worker counts of the memory table (empty: none)")
    ap.add_argument("--rounds", type=int, default=3, help="speed rounds (0: no speed tables)")
    ap.add_argument("--steps", type=int, default=4, help="steps per speed run")
    ap.add_argument("--batch", type=int, default=16, help="per worker")
    ap.add_argument("--memory-test-limit", type=int, default=0,
                    help="test images the memory runs evaluate (0: the whole test set, as a default run)")
    ap.add_argument("--rate", default="", help="also on an emulated cluster with links of this rate, e.g. 100mbit")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/splitbrain"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    raw = os.path.join(args.out, "raw")  # each run's metrics and the ranks' logs (ignored by git)
    os.makedirs(raw, exist_ok=True)
    subprocess.run([os.path.join(ROOT, "nereid"), "--help"], check=True, stdout=subprocess.DEVNULL)  # builds -c opt
    report = {"settings": vars(args), "date": time.strftime("%Y-%m-%d")}
    text = []
    if args.memory_workers:
        table, report["memory"] = memory_table(args, raw)
        text.append("vgg11_cifar, one step and the test set evaluated, rank 0 (loopback):\n\n" + table)
    if args.rounds > 0:
        table, report["speed_loopback"] = speed_table(
            args, args.out, "loopback", lambda passes, name: local(args, 4, passes, args.steps, raw, name))
        text.append(f"vgg11_cifar, 4 workers, batch {args.batch} per worker, {args.steps} steps per run, "
                    f"{args.rounds} rounds, loopback:\n\n" + table)
        if args.rate:
            if subprocess.run([CLUSTER, "--check"]).returncode == 77:
                sys.exit(77)
            table, report["speed_emulated"] = speed_table(
                args, args.out, args.rate, lambda passes, name: emulated(args, passes, args.steps, raw, name))
            text.append(f"vgg11_cifar, 4 workers, {args.rate} links (bench/netem/cluster.sh):\n\n" + table)
    print("\n\n".join(text))
    report["tables"] = text
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
