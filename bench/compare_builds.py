#!/usr/bin/python3
"""Training throughput of two nereid builds, back to back: did a change cost speed?

Runs `nereid run` single-worker with each binary alternately (--repeats times
each, same model, threads, batch and steps) and prints the median samples/s of
each and the ratio NEW/OLD. Only same-run ratios mean anything: this
machine's speed drifts by up to 2x within minutes. Also checks that both end
with the same parameter fingerprint (a refactor must not change the
arithmetic).

    bench/compare_builds.py OLD_BINARY [NEW_BINARY] [--models mlp_fashion,lenet_fashion]
                            [--threads 1] [--repeats 5] [--json PATH]

NEW_BINARY defaults to this checkout's -c opt build (built first).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = {"mlp_fashion": 300, "lenet_fashion": 300, "logreg_fashion": 300, "vgg11_cifar": 8}


def run(binary, model, threads, batch, steps, out):
    cmd = [binary, "run", f"models/{model}.pbtxt", "--threads", str(threads), "--batch", str(batch),
           "--max-steps", str(steps), "--test-limit", "1000", "--quiet", "--metrics-json", out]
    if model.endswith("_cifar"):
        cmd += ["--dataset", "synthetic"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    metrics = json.load(open(out))
    return metrics["samples_per_second"], metrics["parameter_fingerprint"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("new", nargs="?", default=None)
    p.add_argument("--models", default="mlp_fashion,lenet_fashion")
    p.add_argument("--threads", default="1")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    new = args.new
    if new is None:
        subprocess.run(["bazel", "build", "-c", "opt", "//runtime/cli:nereid"], cwd=ROOT, check=True,
                       stderr=subprocess.DEVNULL)
        new = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
    tmp = tempfile.mkdtemp()
    rows = []
    print(f"{'model':16} {'threads':>7} {'old/s':>9} {'new/s':>9} {'new/old':>8} {'same params':>11}")
    for model in args.models.split(","):
        for threads in [int(t) for t in args.threads.split(",")]:
            old_rates, new_rates, prints = [], [], set()
            for _ in range(args.repeats):
                rate, fp_old = run(args.old, model, threads, args.batch, STEPS[model], f"{tmp}/old.json")
                old_rates.append(rate)
                rate, fp_new = run(new, model, threads, args.batch, STEPS[model], f"{tmp}/new.json")
                new_rates.append(rate)
                prints.add((fp_old, fp_new))
            same = all(a == b for a, b in prints)
            ratios = [n / o for n, o in zip(new_rates, old_rates)]
            row = {"model": model, "threads": threads, "old": statistics.median(old_rates),
                   "new": statistics.median(new_rates), "ratio": statistics.median(ratios),
                   "ratio_min": min(ratios), "ratio_max": max(ratios), "same_parameters": same}
            rows.append(row)
            print(f"{model:16} {threads:7d} {row['old']:9.0f} {row['new']:9.0f} {row['ratio']:8.3f} "
                  f"{'yes' if same else 'NO':>11}   (pairs {row['ratio_min']:.3f}-{row['ratio_max']:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
