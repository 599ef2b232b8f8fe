#!/usr/bin/env python3
"""Pipe-SGD's speedup per iteration as the median of alternating short runs.

bench/pipe_sgd.py trains each strategy once for 10 epochs, one after the
other; this machine's speed drifts by up to 2x within minutes, so one such
ratio can be off by several percent (K=2 measured 1.48x and 1.53x in two runs
of the same command). Here each round runs every chosen strategy once, for a
few epochs, back to back on the same emulated cluster, and the speedup is
taken within the round (the baseline's time over the strategy's); the table
gives the median over rounds, with the lowest and highest.

Strategies: those of bench/pipe_sgd.py (default sync,pipe2,pipe2_ahead); the
first is the baseline. Beside each measured iteration the table gives
`nereid model`'s prediction, from the link measured first and compute
profiles taken on this machine right before the rounds, alone and beside a
busy link, as bench/pipe_sgd.py takes them (--no-model skips them), and
the model's speedup: a pipeline's step is never shorter than its
communication alone, so where that is more than 2/3 of the synchronous
step, no pipeline reaches 1.5x on that machine. Needs
root (network namespaces); exits 77 otherwise.

Example (about 5 minutes on 2 cores):
  bench/pipe_sgd_speed.py --workers 2 --rate 60mbit --rounds 5
"""

import argparse
import os
import statistics
import subprocess
import sys

from pipe_sgd import CLUSTER, ROOT, add_run_args, build, measure_link, predict, raw_dir, strategies, train, write_report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(ap, epochs=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--run-timeout", type=int, default=900)
    ap.add_argument("--only", default="sync,pipe2,pipe2_ahead", help="strategies; the first is the baseline")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/pipe_sgd_speed"))
    ap.add_argument("--profile-steps", type=int, default=60, help="steps of each compute profile for the model")
    ap.add_argument("--no-model", action="store_true", help="measure only: no link probe, profiles or prediction")
    args = ap.parse_args()
    if args.rounds < 1 or args.epochs < 1:
        sys.exit("pipe_sgd_speed: --rounds and --epochs must be >= 1")
    known = {s[0]: s for s in strategies(args.overlap_bucket_kb)}
    chosen = [n for n in args.only.split(",") if n]
    unknown = [n for n in chosen if n not in known]
    if len(chosen) < 2 or unknown:
        sys.exit(f"pipe_sgd_speed: --only needs a baseline and at least one strategy from {sorted(known)}"
                 + (f" (unknown: {unknown})" if unknown else ""))
    if subprocess.run([CLUSTER, "--check", "--delay", args.delay]).returncode == 77:
        sys.exit(77)
    os.makedirs(args.out, exist_ok=True)
    raw = raw_dir(args.out)  # runs' metrics, link, profiles, model outputs, logs; results.json stays in OUT
    build()
    predicted = {}
    if not args.no_model:
        link = measure_link(args, raw)
        predicted = {name: predict(args, raw, link, name, known[name][4]) for name in chosen}
    times = {n: [] for n in chosen}
    for rnd in range(args.rounds):
        for name in chosen:
            _, _, passes, after, _ = known[name]
            m = train(args, raw, f"{name}_round{rnd}", passes, after)
            times[name].append(sum(e["seconds"] for e in m["per_epoch"]) / m["steps"])
        print(f"round {rnd + 1}/{args.rounds}: " +
              ", ".join(f"{n} {times[n][-1] * 1000:.1f} ms" for n in chosen), file=sys.stderr, flush=True)
    base = chosen[0]
    # The model's own speedup is the most this machine allows a strategy: a
    # pipeline hides compute behind communication, never below the latter.
    lines = [f"| strategy | median ms/iteration | speedup over {base}: median (min-max) | nereid model ms/iteration "
             "| measured / model | model's speedup |", "|---|---|---|---|---|---|"]
    rows = []
    for name in chosen:
        ratios = [b / t for b, t in zip(times[base], times[name])]
        measured = statistics.median(times[name])
        model = predicted.get(name)
        model_speedup = predicted[base] / model if model and predicted.get(base) else None
        rows.append({"name": name, "label": known[name][1], "seconds": times[name],
                     "speedups": ratios, "median_speedup": statistics.median(ratios), "predicted_seconds": model,
                     "predicted_speedup": model_speedup})
        lines.append(f"| {known[name][1]} | {measured * 1000:.1f} | "
                     f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | " +
                     (f"{model * 1000:.1f} | {measured / model:.2f} | {model_speedup:.2f}x |" if model_speedup
                      else "- | - | - |"))
    write_report(args, f"{args.model}, {args.workers} workers, {args.rate} links, {args.epochs} epochs per run, "
                 f"{args.rounds} rounds", rows, "\n".join(lines))


if __name__ == "__main__":
    main()
