#!/usr/bin/env python3
"""Every strategy on the byte transformer behind emulated links, with the timing model beside each.

Trains models/char_transformer.pbtxt on the fortune files with 2 workers, each
in its own network namespace behind a shaped link (bench/netem/cluster.sh,
45 Mbit/s by default), once per strategy, back to back, for the same number of
steps from the same initial weights, and prints a table:
  tokens/s           training tokens per second over the cluster (windows x 128 / step time)
  s/step             median step interval after --warmup steps (the metrics' step end times)
  bits/char          test bits per character after the last step (--test-limit windows)
  MB sent            per rank and step (the communicator's counters)
  model s/step       `nereid model`'s prediction for that plan, and measured / model
Every row reads 2 x --batch windows per step: data-parallel strategies --batch
per worker; tensor parallel one batch of 2 x --batch per model group.

The model's inputs are measured in this run, as bench/pipe_sgd.py takes them:
the link (`nereid bench allreduce` on the emulated network, idle and beside
busy compute), and one worker's compute (2 concurrent one-worker runs with
--trace, the cluster's CPU sharing without its network, idle and beside busy
links), once before the runs. Tensor parallel's compute is taken as one
worker's at --batch (a rank of a group of 2 multiplies 2 x --batch rows by
half of each block's weights); a codec's encode and decode time is the one
thing the model is given from the run itself (--codec-ms: it has no cost
model of its own for a codec's arithmetic).

Needs root (network namespaces); exits 77 with the harness's reason otherwise.
Example (about 20 minutes on 2 cores):
  bench/lm_strategies.py --steps 20 --json bench/results/lm_strategies_DATE.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pipe_sgd  # noqa: E402  (the shared harness: cluster runs, link measurement, busy links)

ROOT = pipe_sgd.ROOT
NEREID = pipe_sgd.NEREID
MODEL = os.path.join(ROOT, "models", "char_transformer.pbtxt")
CLIP = "clip(max_norm=1)"


def strategies(adam):
    """(name, label, passes, servers, batch factor, model strategy, nereid model flags) of each row.
    SGP and the server are predicted from the data-parallel plan's gradients (the model's input)."""
    opt = f"{CLIP},{adam}"
    dp = ["--passes", f"autodiff,{opt}"]
    return [
        ("dp", "data parallel (ring allreduce)", f"autodiff,{opt}", 0, 1, "sync_allreduce", []),
        ("pipe2_ahead", "Pipe-SGD K=2 + lookahead", f"autodiff,pipeline(width=2),{opt},lookahead", 0, 1,
         "pipe_sgd", ["--width", "2"]),
        ("fp16", "fp16 gradients", f"autodiff,compress(method=fp16),{opt}", 0, 1, "sync_allreduce", []),
        ("qsgd8", "QSGD 8 bits (fixed length)", f"autodiff,compress(method=qsgd,bits=8,coding=fixed),{opt}", 0, 1,
         "sync_allreduce", []),
        ("powersgd4", "PowerSGD rank 4", f"autodiff,compress(method=powersgd,rank=4),{opt}", 0, 1,
         "sync_allreduce", []),
        ("sgp", "SGP (1 peer)", f"autodiff,{opt},gossip", 0, 1, "sgp", dp),
        ("ps", "parameter server (1 server)", f"autodiff,{opt},parameter_server(servers=1)", 1, 1,
         "parameter_server", dp + ["--servers", "1"]),
        ("tp", "tensor parallel (group of 2)", f"hybrid_partition(style=megatron),autodiff,{opt}", 0, 2,
         "hybrid", []),
    ]


def run_flags(args, batch):
    return [MODEL, "--dataset", "fortunes", "--batch", str(batch), "--threads", "1", "--seed", str(args.seed),
            "--quiet"]


def cluster(args, ranks, command, logs):
    cmd = [pipe_sgd.CLUSTER, "--workers", str(ranks), "--rate", args.rate, "--delay", args.delay,
           "--segment", args.segment, "--timeout", str(args.run_timeout), "--logs", logs, "--"] + command
    return pipe_sgd.run(cmd, args.run_timeout + 60)


def profile(args, raw, name):
    """Two one-worker runs at once with --trace: the ranks' compute, sharing the cores, without a network."""
    return pipe_sgd.profile_compute(args, raw, name, run_flags(args, args.batch), f"autodiff,{CLIP},{args.adam}")


def train(args, raw, name, passes, servers, factor):
    metrics = os.path.join(raw, f"{name}.json")
    cmd = [NEREID, "run"] + run_flags(args, args.batch * factor) + [
        "--passes", passes, "--max-steps", str(args.steps), "--test-limit", str(args.test_limit),
        "--metrics-json", metrics, "--comm-timeout", "300"]
    p = cluster(args, args.workers + servers, cmd, os.path.join(raw, f"logs_{name}"))
    if p.returncode != 0:
        sys.exit(f"lm_strategies: the {name} run failed (exit {p.returncode})")
    with open(metrics) as f:
        return json.load(f)


def step_seconds(m, warmup):
    """Median interval between step ends after `warmup` steps (start-up and TCP's slow start left out)."""
    ends = m["step_finished_seconds"]
    gaps = [b - a for a, b in zip(ends[warmup:], ends[warmup + 1:])]
    if not gaps:
        sys.exit(f"lm_strategies: {len(ends)} steps leave no interval after {warmup} warm-up steps")
    return statistics.median(gaps)


def predict(args, raw, link, traces, busy_traces, name, passes, factor, kind, flags, codec_seconds):
    path = os.path.join(raw, f"model_{name}.json")
    cmd = [NEREID, "model", MODEL, "--workers", str(args.workers), "--batch", str(args.batch * factor),
           "--profile", traces, "--link", link, "--link-fit",
           "--busy-link-profile", busy_traces, "--busy-compute-link", pipe_sgd.busy_compute_link(link),
           "--codec-ms", f"{codec_seconds * 1000:.3f}", "--json", path] + (flags if "--passes" in flags else flags + ["--passes", passes])
    p = pipe_sgd.run(cmd, 300, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"lm_strategies: nereid model failed for {name}")
    with open(path) as f:
        prediction = json.load(f)
    if kind == "hybrid":
        return prediction["hybrid"]["hybrid_seconds"]
    for s in prediction["strategies"]:
        if s["name"] == kind:
            return s["seconds_per_iteration"]
    sys.exit(f"lm_strategies: no {kind} in nereid model's output for {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pipe_sgd.add_network_args(ap, "45mbit")
    ap.set_defaults(workers=2)
    ap.add_argument("--batch", type=int, default=8, help="windows per worker and step")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=4, help="steps left out of the step time")
    ap.add_argument("--test-limit", type=int, default=64, help="test windows of the final evaluation")
    ap.add_argument("--adam", default="adam(lr=1e-3,decoupled=true,weight_decay=0.1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile-steps", type=int, default=12)
    ap.add_argument("--run-timeout", type=int, default=1200)
    ap.add_argument("--only", default="", help="comma-separated rows (default all)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/lm_strategies"))
    ap.add_argument("--json", default="", help="write the table's figures here")
    args = ap.parse_args()
    if args.steps < args.warmup + 2:
        sys.exit("lm_strategies: --steps must leave at least two steps after --warmup")
    rows_wanted = [r for r in strategies(args.adam) if not args.only or r[0] in args.only.split(",")]
    if subprocess.run([pipe_sgd.CLUSTER, "--check", "--delay", args.delay]).returncode == 77:
        sys.exit(77)
    os.makedirs(args.out, exist_ok=True)
    raw = pipe_sgd.raw_dir(args.out)
    pipe_sgd.build()
    # The link, idle and beside compute (its load runs are the harness's
    # one-worker runs of args.model: only CPU load, their model is immaterial).
    args.model, args.sgd, args.train_limit = "lenet_fashion", "lr=0.01", 0
    link = pipe_sgd.measure_link(args, raw)
    traces = profile(args, raw, "idle")
    load = pipe_sgd.start_busy_link(args, raw)
    try:
        busy_traces = profile(args, raw, "busy")
    finally:
        pipe_sgd.stop_busy_link(load)

    rows = []
    for name, label, passes, servers, factor, kind, flags in rows_wanted:
        started = time.monotonic()
        m = train(args, raw, name, passes, servers, factor)
        seconds = step_seconds(m, args.warmup)
        codec = m.get("codec_seconds_per_step", 0.0)
        predicted = predict(args, raw, link, traces, busy_traces, name, passes, factor, kind, flags, codec)
        tokens_per_step = args.batch * args.workers * 128
        row = {"name": name, "label": label, "passes": passes, "ranks": args.workers + servers,
               "seconds_per_step": seconds, "tokens_per_second": tokens_per_step / seconds,
               "test_bits_per_char": m["per_epoch"][-1]["test_bits_per_token"],
               "train_loss_last": m["step_losses"][-1], "mb_sent_per_step": m["bytes_sent_per_step"] / 1e6,
               "codec_seconds_per_step": codec, "predicted_seconds_per_step": predicted,
               "measured_over_model": seconds / predicted, "steps": m["steps"],
               "wall_seconds": time.monotonic() - started}
        rows.append(row)
        print(f"{name}: {seconds * 1000:.0f} ms/step (model {predicted * 1000:.0f}), "
              f"{row['test_bits_per_char']:.3f} bits/char", file=sys.stderr, flush=True)

    lines = ["| strategy | tokens/s | s/step (median) | test bits/char | MB sent per rank and step "
             "| model s/step | measured / model |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        flag = "" if abs(r["measured_over_model"] - 1) <= 0.15 else " (outside 15%)"
        lines.append(f"| {r['label']} | {r['tokens_per_second']:,.0f} | {r['seconds_per_step']:.3f} | "
                     f"{r['test_bits_per_char']:.3f} | {r['mb_sent_per_step']:.2f} | "
                     f"{r['predicted_seconds_per_step']:.3f} | {r['measured_over_model']:.2f}{flag} |")
    text = "\n".join(lines)
    title = (f"char_transformer, {args.workers} workers, {args.rate} links, {2 * args.batch} windows of 128 per "
             f"step, {args.steps} steps from the same weights (seed {args.seed})")
    print(f"\n{title}\n\n{text}\n")
    summary = {"settings": vars(args), "rows": rows, "table": text,
               "date": time.strftime("%Y-%m-%d"), "title": title}
    for path in [os.path.join(args.out, "results.json")] + ([args.json] if args.json else []):
        with open(path, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
