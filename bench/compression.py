#!/usr/bin/env python3
"""Gradient compression on an emulated cluster (bench/netem/cluster.sh).

Trains one model with N workers, each in its own network namespace behind a
shaped link, once per compressor and per strategy (synchronous, Pipe-SGD
K=2), and prints a table:
  payload ratio   dense gradient bytes / what the plan puts into collectives
                  (">=": a variable-length code, whose plan gives its bound)
  wire ratio      bytes an uncompressed run sent per iteration / bytes this run sent
                  (both measured: allgather codecs send (n-1) codes per rank,
                  so their wire ratio is about 2/n of the payload ratio)
  s/iteration, speedup over the uncompressed run of the same strategy
  comm and codec time per iteration (the collective engine's own clocks)
  codec / saved   encode+decode time over the communication time it saved:
                  (uncompressed - compressed s/iteration) + codec time (target < 10%)
  time to the target accuracy, final accuracy, and its change against the
  uncompressed run of the same strategy
Writes DIR/results.json, DIR/curves.csv and, with gnuplot, DIR/accuracy_vs_time.png;
each run's metrics and the ranks' logs go to DIR/raw/ (ignored by git).

Needs root (network namespaces); exits 77 with the harness's reason otherwise.
Example (the defaults: lenet_fashion, 4 workers, 35mbit, 5 epochs; ~25 minutes on 2 cores):
  bench/compression.py
  bench/compression.py --only none,qsgd,powersgd --strategies sync
  bench/compression.py --model resnet20_cifar --dataset synthetic --batch 32 --max-steps 40 \
      --only none,gradiveq,powersgd2 --strategies sync --codec-options gradiveq:warmup=5   # time only
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pipe_sgd  # noqa: E402  (the shared harness: cluster runs, flags, plot)

ROOT = pipe_sgd.ROOT
NEREID = pipe_sgd.NEREID

# name, compress pass (empty: uncompressed)
METHODS = [
    ("none", ""),
    ("fp16", "compress(method=fp16)"),
    ("qsgd4", "compress(method=qsgd,bits=4,bucket=2048)"),
    ("terngrad", "compress(method=terngrad,bucket=2048)"),
    ("topk1%", "compress(method=topk,ratio=0.01,momentum=0.9)"),
    ("onebit", "compress(method=onebit,bucket=2048)"),
    ("powersgd2", "compress(method=powersgd,rank=2)"),
    ("gradiveq", "compress(method=gradiveq)"),
]
STRATEGIES = [("sync", ""), ("pipe2", "pipeline(width=2)")]


def train(args, name, passes):
    raw = pipe_sgd.raw_dir(args.out)
    metrics = os.path.join(raw, f"{name}.json")
    cmd = [NEREID, "run"] + pipe_sgd.common_flags(args) + [
        "--passes", f"autodiff,{passes}sgd({args.sgd})", "--epochs", str(args.epochs), "--metrics-json", metrics,
        "--comm-timeout", "120"]
    if args.dataset:
        cmd += ["--dataset", args.dataset]
    if args.max_steps:
        cmd += ["--max-steps", str(args.max_steps), "--test-limit", "256"]
    started = time.monotonic()
    p = pipe_sgd.cluster(args, cmd, args.run_timeout, os.path.join(raw, f"logs_{name}"))
    if p.returncode != 0:
        sys.exit(f"compression: the {name} run failed (exit {p.returncode})")
    with open(metrics) as f:
        m = json.load(f)
    m["outer_wall_seconds"] = time.monotonic() - started
    return m


def summarize(args, name, method, strategy, m):
    train_seconds = sum(e["seconds"] for e in m["per_epoch"])
    curve, to_target = pipe_sgd.accuracy_curve(m, args.target)
    layers = m.get("layer_bytes", [])
    dense = sum(l["elements"] * 4 for l in layers)
    payload = sum(l["payload_bytes"] for l in layers)
    return {
        "name": name, "method": method, "strategy": strategy, "label": f"{method} ({strategy})",
        "seconds_per_iteration": train_seconds / m["steps"], "train_seconds": train_seconds,
        "comm_seconds_per_step": m["comm_seconds_per_step"], "codec_seconds_per_step": m["codec_seconds_per_step"],
        "payload_ratio": dense / payload if payload else None,
        "bytes_sent_per_step": m["bytes_sent_per_step"], "seconds_to_target": to_target,
        "final_test_accuracy": m["final_test_accuracy"], "steps": m["steps"], "curve": curve,
        "passes": m["passes"], "layer_bytes": layers,
    }


def table(rows):
    base = {r["strategy"]: r for r in rows if r["method"] == "none"}
    lines = ["| method | strategy | payload ratio | wire ratio | s/iteration | speedup | comm ms/it | codec ms/it | "
             "codec / saved comm | time to target | final accuracy | vs uncompressed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = base.get(r["strategy"])
        target = f"{r['seconds_to_target']:.0f} s" if r["seconds_to_target"] is not None else "not reached"
        wire = f"{b['bytes_sent_per_step'] / r['bytes_sent_per_step']:.1f}x" if b else "-"
        speedup = f"{b['seconds_per_iteration'] / r['seconds_per_iteration']:.2f}x" if b else "-"
        saved = "-"
        if b and r["method"] != "none":
            # The communication time a codec saved, from iteration times: the
            # codec runs on the critical path, so iteration = compute + comm +
            # codec and saved comm = (uncompressed - compressed iteration) +
            # codec. (The engine's busy time would also count waiting for the
            # slowest rank, which compression does not change.)
            gain = b["seconds_per_iteration"] - r["seconds_per_iteration"] + r["codec_seconds_per_step"]
            saved = f"{r['codec_seconds_per_step'] / gain * 100:.0f}%" if gain > 0 else "saved nothing"
        delta = (f"{(r['final_test_accuracy'] - b['final_test_accuracy']) * 100:+.2f} pp" if b else "-")
        payload = f"{r['payload_ratio']:.1f}x" if r["payload_ratio"] else "-"
        if any(l.get("payload_is_bound") for l in r.get("layer_bytes", [])):  # the plan's bound
            payload = ">=" + payload
        lines.append(
            f"| {r['method']} | {r['strategy']} | {payload} | {wire} | {r['seconds_per_iteration'] * 1000:.1f} ms | "
            f"{speedup} | {r['comm_seconds_per_step'] * 1000:.1f} | {r['codec_seconds_per_step'] * 1000:.2f} | "
            f"{saved} | {target} | {r['final_test_accuracy'] * 100:.2f}% | {delta} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pipe_sgd.add_network_args(ap, "35mbit")
    ap.add_argument("--model", default="lenet_fashion")
    ap.add_argument("--dataset", default="", help="override the model's dataset (synthetic: time only)")
    ap.add_argument("--batch", type=int, default=256, help="per worker")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--max-steps", type=int, default=0, help="stop each run after N steps (timing only)")
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--sgd", default="lr=0.1,momentum=0,schedule=cosine,warmup_epochs=1", help="sgd pass options")
    ap.add_argument("--target", type=float, default=0.80, help="target test accuracy (fraction)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run-timeout", type=int, default=1800)
    ap.add_argument("--only", default="", help="comma-separated methods (default all): " +
                    ",".join(m for m, _ in METHODS).replace("%", "%%"))
    ap.add_argument("--strategies", default="sync,pipe2")
    ap.add_argument("--codec-options", action="append", default=[], metavar="METHOD:k=v,...",
                    help="extra compress options for one method, e.g. gradiveq:warmup=5 (repeatable)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/compression"))
    ap.add_argument("--table", action="store_true", help="reprint the table of DIR/results.json and stop")
    args = ap.parse_args()
    if args.table:
        with open(os.path.join(args.out, "results.json")) as f:
            print(table(json.load(f)["rows"]))
        return

    check = subprocess.run([pipe_sgd.CLUSTER, "--check", "--delay", args.delay])
    if check.returncode == 77:
        sys.exit(77)
    os.makedirs(args.out, exist_ok=True)
    pipe_sgd.build()
    rows = []
    for strategy, pipeline in STRATEGIES:
        if strategy not in args.strategies.split(","):
            continue
        for method, compress in METHODS:
            if args.only and method not in args.only.split(","):
                continue
            for extra in args.codec_options:
                target, _, options = extra.partition(":")
                if target == method and compress:
                    compress = compress[:-1] + "," + options + ")"
            passes = "".join(p + "," for p in (compress, pipeline) if p)
            name = f"{method.replace('%', 'pct')}_{strategy}"
            rows.append(summarize(args, name, method, strategy, train(args, name, passes)))
            print(table(rows), file=sys.stderr, flush=True)
    title = (f"{args.model}, {args.workers} workers, {args.rate} links, batch {args.batch}/worker, "
             f"{args.epochs} epochs")
    png = pipe_sgd.plot(args.out, rows, title) if not args.max_steps else None
    text = table(rows)
    print(f"\n{title}; target accuracy {args.target * 100:.0f}%\n\n{text}\n")
    if png:
        print(f"plot: {os.path.relpath(png, ROOT)}")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"settings": vars(args), "rows": rows, "table": text}, f, indent=1)


if __name__ == "__main__":
    main()
