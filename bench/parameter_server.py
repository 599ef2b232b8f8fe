#!/usr/bin/env python3
"""Synchronous parameter servers against data parallelism (ring allreduce).

A model on Fashion-MNIST (or synthetic CIFAR-shaped data for vgg11_cifar),
W workers, the strategies alternated for --rounds rounds (the machine's speed
drifts, so ratios are taken within a round): data parallel on W ranks; a
plain parameter server (one server, each tensor one message); and the
chunked server (chunks of --chunk-kb) on each server count of --servers.
Prints s/step, the speedup against data parallel, bytes sent per rank and
step (servers included in the average) and the final loss. On loopback (the
launcher) or, with --rate, on an emulated cluster where every rank has the
same link and the servers --server-rate (bench/netem/cluster.sh, needs root).

Example (a few minutes on 2 cores):
  bench/parameter_server.py --model mlp_fashion --workers 2 --servers 1,2 --steps 40
  bench/parameter_server.py --model mlp_fashion --workers 4 --servers 1,2 --steps 12 --rate 45mbit
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
OPT = "sgd(lr=0.02,momentum=0.9)"


def train(args, ranks, passes, out, name, servers=0):
    metrics = os.path.join(out, name + ".json")
    flags = [os.path.join(ROOT, "models", args.model + ".pbtxt"), "--batch", str(args.batch), "--threads", "1",
             "--epochs", "1", "--train-limit", str(args.steps * args.batch * args.workers), "--test-limit", "256",
             "--quiet", "--comm-timeout", "300", "--metrics-json", metrics, "--passes", passes]
    if args.model == "vgg11_cifar":
        flags += ["--dataset", "synthetic"]
    if args.rate:
        cmd = [CLUSTER, "--workers", str(ranks), "--rate", args.rate, "--timeout", "3600", "--logs",
               os.path.join(out, "logs_" + name)]
        for r in range(ranks - servers, ranks):  # the servers are the last ranks
            cmd += ["--rank-rate", f"{r}={args.server_rate}"]
        cmd += ["--", NEREID, "run"] + flags
    else:
        cmd = [NEREID, "run"] + flags + ["--workers", str(ranks)]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    if subprocess.run(cmd, timeout=3700).returncode != 0:
        sys.exit(f"parameter_server: failed: {' '.join(cmd)}")
    with open(metrics) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="lenet_fashion")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", default="1,2", help="server counts of the chunked server")
    ap.add_argument("--chunk-kb", type=float, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="per worker")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rate", default="", help="emulated links of this rate, e.g. 45mbit (default: loopback)")
    ap.add_argument("--server-rate", default="1gbit", help="with --rate: the servers' links")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/parameter_server"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    strategies = [("data parallel (ring allreduce)", args.workers, 0, f"autodiff,{OPT},data_parallel"),
                  ("plain server (1 server, a message per tensor)", args.workers + 1, 1,
                   f"autodiff,{OPT},parameter_server(servers=1,chunk_kb=1000000)")]
    for s in args.servers.split(","):
        strategies.append((f"chunked server ({s} server{'s' if s != '1' else ''}, {args.chunk_kb:g} KiB chunks)",
                           args.workers + int(s), int(s),
                           f"autodiff,{OPT},parameter_server(servers={s},chunk_kb={args.chunk_kb:g})"))
    runs = {name: [] for name, _, _, _ in strategies}
    for rnd in range(args.rounds):
        for i, (name, ranks, servers, passes) in enumerate(strategies):
            runs[name].append(train(args, ranks, passes, args.out,
                                    f"{args.model}_{args.rate or 'loopback'}_r{rnd}_{i}", servers))
    per_step = lambda m: sum(e["seconds"] for e in m["per_epoch"]) / m["steps"]
    base = [per_step(m) for m in runs[strategies[0][0]]]
    where = f"{args.rate} workers, {args.server_rate} servers" if args.rate else "loopback"
    lines = [f"| {args.model}, {args.workers} workers, {where} | s/step (median) | "
             "vs data parallel: median (min-max) | MB sent per rank and step | final train loss |",
             "|---|---|---|---|---|"]
    for name, _, _, _ in strategies:
        ms = runs[name]
        step = [per_step(m) for m in ms]
        speed = [b / s for b, s in zip(base, step)]
        lines.append(f"| {name} | {statistics.median(step):.3f} | {statistics.median(speed):.2f}x "
                     f"({min(speed):.2f}-{max(speed):.2f}) | {ms[-1]['bytes_sent_per_step'] / 1e6:.2f} | "
                     f"{ms[-1]['final_train_loss']:.4f} |")
    print("\n".join(lines))
    with open(os.path.join(args.out, f"table_{args.model}_{args.rate or 'loopback'}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
