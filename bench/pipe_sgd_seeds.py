#!/usr/bin/env python3
"""Final test accuracy of synchronous SGD against Pipe-SGD over several seeds.

The accuracy of a pipelined run does not depend on the network (the update
rule fixes the arithmetic), so these runs use `nereid run --workers N` on
loopback, unshaped, and several data-order seeds, since one seed's gap can be
misleading (seed to seed, Pipe-SGD K=2 at lr 0.2 varied by up to 1.5 points).

Strategies: those of bench/pipe_sgd.py (by default sync, pipe2 and
pipe2_ahead: synchronous allreduce SGD, Pipe-SGD width 2, and Pipe-SGD width 2
with the lookahead pass, docs/PIPE_SGD.md).

Prints a table (each seed, mean, sample standard deviation, gap to sync) and
writes OUT/results.json; every run's metrics file goes to OUT/raw/ (ignored
by git), where a later call finds it and does not run that seed again.

Example (about 4 minutes per strategy on 2 cores with the default 4 seeds):
  bench/pipe_sgd_seeds.py --seeds 1,2,3,4 --only sync,pipe2,pipe2_ahead
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from pipe_sgd import NEREID, ROOT, build, raw_dir, strategies, write_report

def run(args, name, before, after, seed):
    metrics = os.path.join(raw_dir(args.out), f"{name}_seed{seed}.json")
    if os.path.exists(metrics) and not args.rerun:
        with open(metrics) as f:
            return json.load(f)
    cmd = [NEREID, "run", os.path.join(ROOT, "models", args.model + ".pbtxt"), "--workers", str(args.workers),
           "--threads", "1", "--batch", str(args.batch), "--epochs", str(args.epochs), "--seed", str(seed), "--quiet",
           "--passes", f"autodiff,data_parallel,{before}sgd({args.sgd}){after}", "--metrics-json", metrics]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, timeout=args.run_timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"pipe_sgd_seeds: {name} seed {seed} failed (exit {p.returncode}):\n{p.stdout[-2000:]}")
    with open(metrics) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="lenet_fashion")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256, help="per worker")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--sgd", default="lr=0.02,momentum=0.9,schedule=cosine,warmup_epochs=1",
                    help="sgd pass options")
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--only", default="sync,pipe2,pipe2_ahead", help="comma-separated strategies")
    ap.add_argument("--run-timeout", type=int, default=1800)
    ap.add_argument("--rerun", action="store_true", help="run again even where OUT/raw has a seed's metrics")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/pipe_sgd_seeds"))
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if not seeds:
        sys.exit("pipe_sgd_seeds: --seeds is empty")
    os.makedirs(args.out, exist_ok=True)
    build()
    rows = []
    for name, label, before, after, _ in strategies():
        if name not in args.only.split(","):
            continue
        accuracies = [run(args, name, before, after, s)["final_test_accuracy"] for s in seeds]
        rows.append({"name": name, "label": label, "accuracies": accuracies,
                     "mean": statistics.mean(accuracies),
                     "stdev": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0})
    sync = next((r for r in rows if r["name"] == "sync"), None)
    lines = ["| strategy | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | sd | gap to sync |",
             "|---|" + "---|" * (len(seeds) + 3)]
    for r in rows:
        gap = f"{(sync['mean'] - r['mean']) * 100:.2f} pp" if sync else "-"
        lines.append(f"| {r['label']} | " + " | ".join(f"{a * 100:.2f}%" for a in r["accuracies"]) +
                     f" | {r['mean'] * 100:.2f}% | {r['stdev'] * 100:.2f} | {gap} |")
    write_report(args, f"{args.model}, {args.workers} workers x batch {args.batch}, {args.epochs} epochs, sgd({args.sgd})",
                 rows, "\n".join(lines))


if __name__ == "__main__":
    main()
