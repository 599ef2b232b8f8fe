#!/usr/bin/env python3
"""Tensor parallelism (hybrid_partition(style=megatron)) on the byte transformer against one rank and data parallelism.

    python3 bench/tensor_parallel.py [--steps 50] [--batch 8] [--json OUT.json]

Runs models/char_transformer.pbtxt on the fortune files, the same initial weights and batches in every run:
one rank; 2 and 4 tensor-parallel ranks (one model group reading one batch: it must give one rank's losses);
2 data-parallel ranks; 2 data x 2 tensor ranks (it must give those). Prints, per run, the largest relative
difference of the per-step losses from its reference, rank 0's parameters plus Adam state, the time per step
(median) and the bytes each rank sent per step. Needs the opt build (./nereid builds it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")

RUNS = [  # name, workers, partition, reference
    ("one rank", 1, "", None),
    ("tensor parallel, 2 ranks", 2, "hybrid_partition(style=megatron),", "one rank"),
    ("tensor parallel, 4 ranks", 4, "hybrid_partition(style=megatron),", "one rank"),
    ("data parallel, 2 ranks", 2, "", None),
    ("2 data x 2 tensor", 4, "hybrid_partition(style=megatron,group_size=2),", "data parallel, 2 ranks"),
]


def run(args, workers, partition, out):
    passes = (f"{partition}autodiff,clip(max_norm=1),"
              f"adam(lr={args.lr},decoupled=true,weight_decay=0.1)")
    cmd = [NEREID, "run", "models/char_transformer.pbtxt", "--dataset", "fortunes", "--workers", str(workers),
           "--threads", "1", "--batch", str(args.batch), "--max-steps", str(args.steps), "--test-limit", "64",
           "--epochs", "1", "--quiet", "--comm-timeout", "120", "--passes", passes, "--metrics-json", out]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"tensor_parallel.py: {' '.join(cmd)} failed:\n{done.stdout}{done.stderr}")
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", default="3e-4")
    ap.add_argument("--json", help="write the table's figures here")
    args = ap.parse_args()
    if not os.path.exists(NEREID):
        subprocess.run(["bazel", "build", "-c", "opt", "//runtime/cli:nereid"], cwd=ROOT, check=True)
    rows, metrics = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, workers, partition, reference in RUNS:
            print(f"running {name} ...", flush=True)
            m = run(args, workers, partition, os.path.join(tmp, f"{len(metrics)}.json"))
            metrics[name] = m
            losses = m["step_losses"]
            worst = None
            if reference:
                ref = metrics[reference]["step_losses"]
                worst = max(abs(a - b) / abs(a) for a, b in zip(ref, losses))
            finished = m["step_finished_seconds"]
            step_s = statistics.median(b - a for a, b in zip(finished[2:], finished[3:]))
            rows.append({"run": name, "workers": workers, "reference": reference, "worst_relative_difference": worst,
                         "first_loss": losses[0], "last_loss": losses[-1], "state_bytes": m["state_bytes"],
                         "seconds_per_step": step_s, "bytes_sent_per_step": m.get("bytes_sent_per_step")})
    one = rows[0]["state_bytes"]
    print(f"\nbyte transformer, batch {args.batch} per model group, {args.steps} steps, "
          f"AdamW lr {args.lr}, clip 1, 1 thread per rank")
    print("| run | against | largest relative loss difference | loss first -> last | state per rank (MB) | "
          "of one rank's | s/step (median) | MB sent per rank and step |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        diff = "-" if r["worst_relative_difference"] is None else f"{r['worst_relative_difference']:.1e}"
        step = "-" if r["seconds_per_step"] is None else f"{r['seconds_per_step']:.3f}"
        sent = "-" if r["bytes_sent_per_step"] is None else f"{r['bytes_sent_per_step'] / 1e6:.1f}"
        print(f"| {r['run']} | {r['reference'] or '-'} | {diff} | {r['first_loss']:.4f} -> {r['last_loss']:.4f} | "
              f"{r['state_bytes'] / 1e6:.2f} | {r['state_bytes'] / one:.1%} | {step} | {sent} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": args.steps, "batch": args.batch, "lr": args.lr, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
