#!/usr/bin/python3
"""Chooses data_parallel's bucket size by measurement.

Trains MODEL with `data_parallel(bucket_kb=K)` for every K, --repeats times,
the K values alternating within each repeat (this machine's speed drifts by
up to 2x within minutes, so only same-round comparisons mean anything), and
prints per K the median time per iteration and its ratio to 1024 KB (the
default until this sweep chose 4096). Runs on loopback through `nereid run --workers N`, or with
--rate on the emulated cluster (bench/netem/cluster.sh, needs root).

    /usr/bin/python3 bench/bucket_sweep.py [--model resnet20_cifar] [--workers 4]
        [--sizes 64,256,1024,4096] [--repeats 3] [--max-steps 40] [--rate 35mbit]
        [--json PATH]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import pipe_sgd

ROOT = pipe_sgd.ROOT
NEREID = pipe_sgd.NEREID
DEFAULT_KB = 1024


def seconds_per_iteration(args, kb, out):
    metrics = os.path.join(out, f"bucket{kb}.json")
    flags = [os.path.join(ROOT, "models", args.model + ".pbtxt"), "--batch", str(args.batch), "--threads", "1",
             "--seed", "1", "--quiet", "--max-steps", str(args.max_steps), "--epochs", "1", "--test-limit", "256",
             "--passes", f"autodiff,data_parallel(bucket_kb={kb}),sgd(lr=0.01)", "--metrics-json", metrics]
    if args.dataset:
        flags += ["--dataset", args.dataset]
    if args.rate:
        p = pipe_sgd.cluster(args, [NEREID, "run"] + flags, 1800, os.path.join(out, f"logs{kb}"))
    else:
        p = pipe_sgd.run([NEREID, "run"] + flags + ["--workers", str(args.workers)], 1800)
    if p.returncode != 0:
        sys.exit(f"bucket_sweep: bucket_kb={kb} failed (exit {p.returncode})")
    with open(metrics) as f:
        m = json.load(f)
    return sum(e["seconds"] for e in m["per_epoch"]) / m["steps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet20_cifar")
    ap.add_argument("--dataset", default="synthetic", help="'' for the model's own data")
    ap.add_argument("--batch", type=int, default=32, help="per worker")
    ap.add_argument("--sizes", default="64,256,1024,4096", help="bucket_kb values")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=40)
    pipe_sgd.add_network_args(ap, "", "emulated link rate (e.g. 35mbit); empty: loopback")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sizes = [int(k) for k in args.sizes.split(",")]
    if DEFAULT_KB not in sizes:
        sizes.append(DEFAULT_KB)
    pipe_sgd.build()
    out = tempfile.mkdtemp(prefix="bucket_sweep.")
    runs = {k: [] for k in sizes}
    for repeat in range(args.repeats):
        order = sizes if repeat % 2 == 0 else list(reversed(sizes))
        for kb in order:
            runs[kb].append(seconds_per_iteration(args, kb, out))
            print(f"repeat {repeat + 1}: bucket_kb={kb}: {runs[kb][-1] * 1000:.1f} ms/iteration", flush=True)
    base = statistics.median(runs[DEFAULT_KB])
    where = f"emulated {args.rate} links" if args.rate else "loopback"
    print(f"\n{args.model}, {args.workers} workers on {where}, batch {args.batch}/worker, "
          f"{args.max_steps} steps, medians of {args.repeats}\n")
    print("| bucket_kb | s/iteration | vs 1024 KB |\n|---|---|---|")
    rows = []
    for kb in sizes:
        med = statistics.median(runs[kb])
        rows.append({"bucket_kb": kb, "seconds_per_iteration": med, "runs": runs[kb], "speedup_vs_default": base / med})
        print(f"| {kb} | {med * 1000:.1f} ms | {base / med:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
