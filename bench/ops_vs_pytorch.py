#!/usr/bin/python3
"""The transformer ops, forward and forward + backward, Nereid against PyTorch.

One thread each, the same shapes (batch 32, sequence 128, width 256, 4 heads,
MLP 1024, vocabulary 1000): LayerNorm, GELU, the attention's batched MatMul,
its softmax, the embedding lookup with its gradient, and an LSTM and a GRU
layer (width 256, 128 steps, time-major; Nereid's fused LstmLayer and GruLayer). Nereid's side is
//bench:op_bench (each op in a graph Parameters -> op -> ReduceSum, timed by
the executor); PyTorch's is the same op and y.sum().backward(). The two run
alternately, --rounds times, and each round's medians are compared, since the
machine's speed drifts between rounds.

    bench/ops_vs_pytorch.py [--rounds 3] [--repeats 20] [--json PATH]

Prints per op the medians and PyTorch time / Nereid time (above 1: Nereid is
faster), and the geometric mean of the ratios.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
import torch  # noqa: E402

torch.set_num_threads(1)
B, T, D, H, F, V = 32, 128, 256, 4, 1024, 1000


def torch_cases():
    g = torch.Generator().manual_seed(1)

    def p(*shape):
        return (torch.rand(*shape, generator=g) * 2 - 1).requires_grad_()

    ln = torch.nn.LayerNorm(D)
    x_ln = p(B, T, D)
    x_gelu = p(B, T, F)
    q, k = p(B, H, T, D // H), p(B, H, T, D // H)
    s = p(B, H, T, T)
    table = p(V, D)
    ids = torch.randint(0, V, (B, T), generator=g)
    lstm = torch.nn.LSTM(D, D)
    x_lstm = p(T, B, D)
    gru = torch.nn.GRU(D, D)
    return {
        "layernorm": lambda: ln(x_ln),
        "gelu": lambda: torch.nn.functional.gelu(x_gelu),
        "batched_matmul": lambda: q @ k.transpose(-2, -1),
        "attention_softmax": lambda: s.softmax(-1),
        "embedding": lambda: torch.nn.functional.embedding(ids, table),
        "lstm": lambda: lstm(x_lstm)[0],
        "gru": lambda: gru(x_lstm)[0],
    }


def time_torch(fn, repeats):
    fwd, train = [], []
    for r in range(repeats + 2):
        t0 = time.perf_counter()
        with torch.no_grad():
            fn()
        t1 = time.perf_counter()
        fn().sum().backward()
        t2 = time.perf_counter()
        if r >= 2:
            fwd.append((t1 - t0) * 1e3)
            train.append((t2 - t1) * 1e3)
    return statistics.median(fwd), statistics.median(train)


def nereid_times(binary, repeats):
    out = subprocess.run([binary, "--repeats", str(repeats)], capture_output=True, text=True, check=True).stdout
    return {row["case"]: (row["forward_ms"], row["train_ms"]) for row in map(json.loads, out.splitlines())}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    subprocess.run(["bazel", "build", "-c", "opt", "--noshow_progress", "//bench:op_bench"], cwd=ROOT, check=True,
                   capture_output=True)
    binary = os.path.join(ROOT, "bazel-out/k8-opt/bin/bench/op_bench")
    cases = torch_cases()
    ratios = {name: ([], []) for name in cases}
    medians = {name: {"nereid": ([], []), "pytorch": ([], [])} for name in cases}
    for _ in range(args.rounds):
        ours = nereid_times(binary, args.repeats)
        for name, fn in cases.items():
            theirs = time_torch(fn, args.repeats)
            for i in range(2):
                medians[name]["nereid"][i].append(ours[name][i])
                medians[name]["pytorch"][i].append(theirs[i])
                ratios[name][i].append(theirs[i] / ours[name][i])
    rows = []
    print(f"{'op':18s} {'Nereid fwd ms':>13s} {'PyTorch fwd ms':>14s} {'ratio':>6s}   "
          f"{'Nereid f+b ms':>13s} {'PyTorch f+b ms':>14s} {'ratio':>6s}")
    for name in cases:
        m = medians[name]
        row = {"op": name,
               "nereid_forward_ms": statistics.median(m["nereid"][0]),
               "pytorch_forward_ms": statistics.median(m["pytorch"][0]),
               "forward_ratio": statistics.median(ratios[name][0]),
               "nereid_train_ms": statistics.median(m["nereid"][1]),
               "pytorch_train_ms": statistics.median(m["pytorch"][1]),
               "train_ratio": statistics.median(ratios[name][1])}
        rows.append(row)
        print(f"{name:18s} {row['nereid_forward_ms']:13.3f} {row['pytorch_forward_ms']:14.3f} {row['forward_ratio']:6.2f}   "
              f"{row['nereid_train_ms']:13.3f} {row['pytorch_train_ms']:14.3f} {row['train_ratio']:6.2f}")
    geo = math.exp(statistics.mean(math.log(r[k]) for r in rows for k in ("forward_ratio", "train_ratio")))
    print(f"geometric mean of the ratios (PyTorch time / Nereid time): {geo:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "repeats": args.repeats, "rows": rows, "geometric_mean": geo}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
