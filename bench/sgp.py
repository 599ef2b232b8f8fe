#!/usr/bin/env python3
"""Stochastic Gradient Push (gossip, and overlap SGP: gossip(overlap=1)) and
PowerGossip (power_gossip) against AllReduce-SGD and Pipe-SGD.

lenet_fashion on Fashion-MNIST, W workers, E epochs each, the three
strategies alternated for --rounds rounds (the machine's speed drifts, so
ratios are taken within a round): s/step, time to reach AllReduce's final
test accuracy minus 0.5 points (per-epoch evaluation), final accuracy,
bytes sent per rank and step, and SGP's consensus distance. On loopback (the
launcher) or, with --rate, on an emulated cluster (bench/netem/cluster.sh,
needs root). Writes OUT/table.md (and with --plot OUT/curves.csv and
OUT/accuracy_vs_time.png); every run's metrics and the ranks' logs go to
OUT/raw/, which git ignores.

Example (about 10 minutes on 2 cores):
  bench/sgp.py --workers 4 --epochs 2 --rounds 2 --rate 45mbit
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import pipe_sgd  # its accuracy curves and gnuplot plot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
CLUSTER = os.path.join(ROOT, "bench/netem/cluster.sh")
OPT = "sgd(lr=0.02,momentum=0.9)"
STRATEGIES = [("AllReduce-SGD", f"autodiff,{OPT}"),
              ("Pipe-SGD K=2", f"autodiff,data_parallel,pipeline(width=2),{OPT},lookahead"),
              ("SGP (exponential)", f"autodiff,{OPT},gossip"),
              ("SGP, a message per parameter", f"autodiff,{OPT},gossip(bucket_kb=0)"),
              ("Overlap SGP (tau=1)", f"autodiff,{OPT},gossip(overlap=1)"),
              ("Overlap SGP (tau=1), fp16 pushes", f"autodiff,{OPT},gossip(overlap=1),compress(method=fp16)"),
              ("PowerGossip (ring, rank-1 messages)", f"autodiff,{OPT},power_gossip"),
              ("Overlap SGP (tau=1), rank-2 pushes", f"autodiff,{OPT},gossip(overlap=1),compress(method=powersgd)")]


def train(args, passes, out, name):
    metrics = os.path.join(out, name + ".json")
    flags = [os.path.join(ROOT, "models", "lenet_fashion.pbtxt"), "--batch", str(args.batch), "--threads", "1",
             "--epochs", str(args.epochs), "--train-limit", str(args.train_limit), "--test-limit", str(args.test_limit), "--quiet",
             "--comm-timeout", "300", "--metrics-json", metrics, "--passes", passes]
    if "gossip" in passes:
        flags += ["--gossip-eval", args.gossip_eval]
    if args.rate:
        cmd = [CLUSTER, "--workers", str(args.workers), "--rate", args.rate, "--timeout", "3600", "--logs",
               os.path.join(out, "logs_" + name), "--", NEREID, "run"] + flags
    else:
        cmd = [NEREID, "run"] + flags + ["--workers", str(args.workers)]
    env = dict(os.environ)
    if args.straggler_ms > 0:
        # Rank 1 sleeps before every communicator call: one per step in each
        # strategy here (one allreduce bucket, one bucketed push), so its
        # steps take that much longer.
        env["NEREID_FAULTS"] = f"rank=1:delay={args.straggler_ms}ms"
    if args.slow_ms > 0:
        # Rank 1 computes that much longer every step (a slow machine).
        slow = f"rank=1:slow={args.slow_ms}ms"
        env["NEREID_FAULTS"] = env["NEREID_FAULTS"] + "," + slow if args.straggler_ms > 0 else slow
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    if subprocess.run(cmd, timeout=3700, env=env).returncode != 0:
        sys.exit(f"sgp: failed: {' '.join(cmd)}")
    with open(metrics) as f:
        return json.load(f)


def time_to(m, target):
    elapsed = 0.0
    for e in m["per_epoch"]:
        elapsed += e["seconds"]
        if e["test_accuracy"] >= target:
            return elapsed
    return float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="per worker")
    ap.add_argument("--train-limit", type=int, default=60000)
    ap.add_argument("--rate", default="", help="emulated links of this rate, e.g. 45mbit (default: loopback)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/sgp"))
    ap.add_argument("--straggler-ms", type=int, default=0,
                    help="slow rank 1 by this many ms per communicator call (NEREID_FAULTS delay)")
    ap.add_argument("--slow-ms", type=int, default=0,
                    help="rank 1 computes this many ms longer each step (NEREID_FAULTS slow)")
    ap.add_argument("--only", default="", help="comma-separated strategy numbers to run (0-based; default all)")
    ap.add_argument("--test-limit", type=int, default=2000, help="test images evaluated after each epoch")
    ap.add_argument("--gossip-eval", default="ranks", choices=["ranks", "average"],
                    help="what SGP's evaluations before the last score (nereid run --gossip-eval)")
    ap.add_argument("--plot", action="store_true",
                    help="write accuracy_vs_time.png (gnuplot) and curves.csv of the last round into --out")
    args = ap.parse_args()
    global STRATEGIES
    if args.only:
        STRATEGIES = [STRATEGIES[int(i)] for i in args.only.split(",")]
    os.makedirs(args.out, exist_ok=True)
    raw = pipe_sgd.raw_dir(args.out)
    runs = {name: [] for name, _ in STRATEGIES}
    for rnd in range(args.rounds):
        for i, (name, passes) in enumerate(STRATEGIES):
            runs[name].append(train(args, passes, raw, f"r{rnd}_{i}"))
    base = STRATEGIES[0][0]
    where = f"{args.workers} workers, {args.rate or 'loopback'}"
    if args.straggler_ms:
        where += f", rank 1 +{args.straggler_ms} ms per call"
    if args.slow_ms:
        where += f", rank 1 +{args.slow_ms} ms compute per step"
    lines = [f"| {where} | s/step (median) | speedup per step: median (min-max) | time to target (median) | "
             "vs AllReduce | final accuracy | MB sent per rank and step | consensus distance |",
             "|---|---|---|---|---|---|---|---|"]
    for name, _ in STRATEGIES:
        ms = runs[name]
        step = [sum(e["seconds"] for e in m["per_epoch"]) / m["steps"] for m in ms]
        ratios, times = [], []
        for rnd, m in enumerate(ms):
            target = runs[base][rnd]["final_test_accuracy"] - 0.005
            t, tb = time_to(m, target), time_to(runs[base][rnd], target)
            times.append(t)
            ratios.append(t / tb)
        consensus = ms[-1]["per_epoch"][-1].get("consensus_distance")
        base_step = [sum(e["seconds"] for e in m["per_epoch"]) / m["steps"] for m in runs[base]]
        speed = [b / s for b, s in zip(base_step, step)]
        lines.append(f"| {name} | {statistics.median(step):.3f} | {statistics.median(speed):.2f}x "
                     f"({min(speed):.2f}-{max(speed):.2f}) | {statistics.median(times):.1f} s | "
                     f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | "
                     f"{100 * statistics.median(m['final_test_accuracy'] for m in ms):.2f}% | "
                     f"{ms[-1]['bytes_sent_per_step'] / 1e6:.2f} | "
                     f"{'-' if consensus is None else f'{consensus:.1e}'} |")
    print("\n".join(lines))
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.plot:
        target = runs[base][-1]["final_test_accuracy"] - 0.005
        rows = [{"name": f"s{i}", "label": name, "curve": pipe_sgd.accuracy_curve(runs[name][-1], target)[0]}
                for i, (name, _) in enumerate(STRATEGIES)]
        png = pipe_sgd.plot(args.out, rows, f"lenet_fashion, {where}, {args.epochs} epochs")
        if png:
            print(f"plot: {png}")


if __name__ == "__main__":
    main()
