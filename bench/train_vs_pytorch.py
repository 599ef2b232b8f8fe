#!/usr/bin/python3
"""Training throughput: Nereid vs PyTorch 1.13 (Debian's python3-torch), back to back.

For each model and thread count, runs `nereid run` and bench/pytorch_reference.py
alternately (--repeats times each, same batch, same threads, same number of
steps) and prints the median samples/s of each and their ratio. Only same-run
ratios mean anything: this machine's speed drifts by up to 2x within minutes.

Both run WARMUP more steps than measured and leave those first steps out
(oneDNN's primitive creation in Nereid's first step, PyTorch's allocator and
thread start-up in its own): Nereid's figure is its last STEPS steps, timed
from the end of its WARMUP-th step (the metrics' step_finished_seconds).
The JSON also keeps Nereid's figure over every step (`nereid_all_steps_runs`).

Each row also gives both engines' matrix FLOPs per second as a share of the
cores' float32 FMA peak (`nereid bench peak`, measured at the row's thread
count before the model's runs): the FLOPs of the planned step's matrix
products and convolutions, forward and both gradients (`nereid check` of the
autodiff plan), per sample. A convolution run as Winograd does fewer
multiplications than that count, so its share can pass what the kernels do.

    bench/train_vs_pytorch.py [--models mlp_fashion,lenet_fashion,vgg11_cifar]
                              [--threads 1,2] [--repeats 3] [--json PATH]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = {"mlp_fashion": 300, "lenet_fashion": 300, "logreg_fashion": 300, "svm_fashion": 300, "vgg11_cifar": 8}
WARMUP = 3  # steps each engine runs before the measured ones
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
MATRIX_OPS = {"MatMul", "BatchMatMul", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"}


def matrix_flops_per_sample(model, tmp):
    """The FLOPs of one sample's matrix products and convolutions in a training step."""
    plan = os.path.join(tmp, f"{model}_plan.pbtxt")
    subprocess.run([NEREID, "plan", f"models/{model}.pbtxt", "--passes", "autodiff,sgd", "-o", plan], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    report = subprocess.run([NEREID, "check", plan, "--forward-only", "--json", "-"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    return sum(n["flops_per_sample"] for n in json.loads(report)["nodes"] if n["op"] in MATRIX_OPS)


def fma_peak_gflops(threads, tmp):
    out = os.path.join(tmp, "peak.json")
    subprocess.run([NEREID, "bench", "peak", "--threads", str(threads), "--rounds", "3", "--json", out], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL)
    return json.load(open(out))["peak_gflops"]


def nereid(model, threads, batch, steps, out):
    cmd = [NEREID, "run", f"models/{model}.pbtxt",
           "--threads", str(threads), "--batch", str(batch), "--max-steps", str(steps + WARMUP),
           "--test-limit", "1000", "--quiet", "--metrics-json", out]
    if model.endswith("_cifar"):
        cmd += ["--dataset", "synthetic"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    metrics = json.load(open(out))
    done = metrics["step_finished_seconds"]
    if len(done) != steps + WARMUP:
        sys.exit(f"train_vs_pytorch: nereid ran {len(done)} steps, not {steps + WARMUP}")
    measured = batch * steps / (done[-1] - done[WARMUP - 1])
    return measured, metrics["samples_per_second"]


def pytorch(model, threads, batch, steps, out):
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench/pytorch_reference.py"), "--model", model,
           "--threads", str(threads), "--batch", str(batch), "--max-steps", str(steps + WARMUP),
           "--warmup-steps", str(WARMUP), "--no-eval", "--json", out]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.load(open(out))["samples_per_second"], None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mlp_fashion,lenet_fashion,vgg11_cifar")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    subprocess.run([os.path.join(ROOT, "setup.sh"), "--bench"], check=True)
    subprocess.run(["bazel", "build", "-c", "opt", "//runtime/cli:nereid"], cwd=ROOT, check=True,
                   stderr=subprocess.DEVNULL)
    rows = []
    tmp = tempfile.mkdtemp()
    print(f"{'model':16} {'threads':>7} {'nereid/s':>10} {'pytorch/s':>10} {'ratio':>6} "
          f"{'peak GF/s':>9} {'nereid %peak':>12} {'pytorch %peak':>13}")
    for model in args.models.split(","):
        flops = matrix_flops_per_sample(model, tmp)
        for threads in [int(t) for t in args.threads.split(",")]:
            peak = fma_peak_gflops(threads, tmp)
            ours, theirs, ours_all = [], [], []
            for r in range(args.repeats):
                # Alternate which goes first, so drift hits both alike.
                order = [(nereid, ours), (pytorch, theirs)]
                for run, into in (order if r % 2 == 0 else order[::-1]):
                    measured, every_step = run(model, threads, args.batch, STEPS[model], os.path.join(tmp, "m.json"))
                    into.append(measured)
                    if every_step is not None:
                        ours_all.append(every_step)
            row = {"model": model, "threads": threads, "batch": args.batch, "steps": STEPS[model],
                   "nereid_samples_per_second": statistics.median(ours),
                   "pytorch_samples_per_second": statistics.median(theirs), "nereid_runs": ours, "pytorch_runs": theirs,
                   "warmup_steps": WARMUP, "nereid_all_steps_runs": ours_all}
            row["ratio"] = row["nereid_samples_per_second"] / row["pytorch_samples_per_second"]
            row["matrix_flops_per_sample"] = flops
            row["fma_peak_gflops"] = peak
            for engine in ("nereid", "pytorch"):
                row[f"{engine}_matrix_gflops"] = row[f"{engine}_samples_per_second"] * flops / 1e9
            rows.append(row)
            print(f"{model:16} {threads:7d} {row['nereid_samples_per_second']:10.0f} "
                  f"{row['pytorch_samples_per_second']:10.0f} {row['ratio']:6.2f} {peak:9.1f} "
                  f"{100 * row['nereid_matrix_gflops'] / peak:11.0f}% {100 * row['pytorch_matrix_gflops'] / peak:12.0f}%",
                  flush=True)
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
