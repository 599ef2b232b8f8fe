#!/usr/bin/env python3
"""Hierarchical transport against flat Gloo, on emulated machines of several ranks.

bench/netem/cluster.sh --ranks-per-node K puts K ranks in each network
namespace: machines whose ranks share a loopback and /dev/shm, joined by
shaped links. Each round trains the same run twice, back to back: with
`--transport gloo` (a flat ring: every rank's traffic crosses the links its
ring neighbours sit behind) and with `--transport hierarchical` (the ranks of
a machine sum through shared memory; only the machines' leaders cross the
links). The table gives the median time per iteration and the median of the
per-round ratios, with the lowest and highest; the losses must agree to
rounding (the sums are taken in another order). Writes OUT/report.md and
OUT/results.json; each run's metrics and the ranks' logs go to OUT/raw/,
which git ignores.

Needs root (network namespaces); exits 77 otherwise.

Example (about 4 minutes on 2 cores):
  bench/hierarchical_speed.py --workers 4 --ranks-per-node 2 --rate 45mbit --rounds 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
CLUSTER = os.path.join(ROOT, "bench/netem/cluster.sh")


def train(args, out, name, transport):
    metrics = os.path.join(out, f"{name}.json")
    cmd = [CLUSTER, "--workers", str(args.workers), "--ranks-per-node", str(args.ranks_per_node), "--rate", args.rate,
           "--timeout", str(args.run_timeout), "--logs", os.path.join(out, f"logs_{name}"), "--",
           NEREID, "run", os.path.join(ROOT, "models", args.model + ".pbtxt"), "--epochs", str(args.epochs),
           "--train-limit", str(args.train_limit), "--test-limit", "1024", "--batch", str(args.batch),
           "--threads", "1", "--quiet", "--transport", transport, "--metrics-json", metrics]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=args.run_timeout + 60)
    if p.returncode == 77:
        sys.exit(77)
    if p.returncode != 0:
        sys.exit(f"hierarchical_speed: the {name} run failed (exit {p.returncode}); logs in {out}/logs_{name}")
    with open(metrics) as f:
        m = json.load(f)
    return {"seconds_per_iteration": sum(e["seconds"] for e in m["per_epoch"]) / m["steps"],
            "final_train_loss": m["final_train_loss"], "bytes_sent_per_step": m["bytes_sent_per_step"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--rate", default="45mbit")
    ap.add_argument("--model", default="mlp_fashion")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--train-limit", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--run-timeout", type=int, default=600)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/hierarchical"))
    args = ap.parse_args()
    if args.rounds < 1 or args.ranks_per_node < 2 or args.workers % args.ranks_per_node:
        sys.exit("hierarchical_speed: need --rounds >= 1 and --ranks-per-node >= 2 dividing --workers")
    if subprocess.run([CLUSTER, "--check"]).returncode == 77:
        sys.exit(77)
    subprocess.run(["bazel", "build", "-c", "opt", "//runtime/cli:nereid"], cwd=ROOT, check=True)
    os.makedirs(args.out, exist_ok=True)
    raw = os.path.join(args.out, "raw")  # each run's metrics and the ranks' logs (ignored by git)
    os.makedirs(raw, exist_ok=True)
    runs = {"gloo": [], "hierarchical": []}
    for rnd in range(args.rounds):
        for transport in runs:
            runs[transport].append(train(args, raw, f"{transport}_round{rnd}", transport))
        print(f"round {rnd + 1}/{args.rounds}: " + ", ".join(
            f"{t} {r[-1]['seconds_per_iteration'] * 1000:.1f} ms" for t, r in runs.items()), file=sys.stderr, flush=True)
    ratios = [g["seconds_per_iteration"] / h["seconds_per_iteration"]
              for g, h in zip(runs["gloo"], runs["hierarchical"])]
    losses = {t: [r["final_train_loss"] for r in rs] for t, rs in runs.items()}
    title = (f"{args.model}, {args.workers} workers on {args.workers // args.ranks_per_node} emulated machines "
             f"({args.ranks_per_node} ranks each), {args.rate} links, {args.train_limit} examples, {args.rounds} rounds")
    lines = [title, "", "| transport | median ms/iteration | speedup over gloo: median (min-max) | final train loss |",
             "|---|---|---|---|"]
    for t, rs in runs.items():
        r = ratios if t == "hierarchical" else [1.0] * len(rs)
        lines.append(f"| {t} | {statistics.median(x['seconds_per_iteration'] for x in rs) * 1000:.1f} | "
                     f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}) | {losses[t][0]:.6f} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "runs": runs, "speedups": ratios, "median_speedup": statistics.median(ratios)},
                  f, indent=1)


if __name__ == "__main__":
    main()
