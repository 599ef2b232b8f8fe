#!/usr/bin/python3
"""Training speed of the byte transformer, Nereid against PyTorch 1.13.

models/char_transformer.pbtxt (4 layers, width 256, 4 heads, context 128,
tied byte embeddings, pre-LayerNorm, GELU MLP) and the same architecture as
a PyTorch module below, each trained with AdamW on batches of --batch
windows of 128 bytes, on --threads threads in one process. Nereid reads the
fortune files (`nereid run --dataset fortunes`), PyTorch random bytes of the
same shape (the data does not change the arithmetic). The figure is tokens
per second from the median step time after --warmup steps; the engines
alternate over --rounds rounds, and the ratio is the median of the rounds'
ratios (the machine's speed drifts between rounds). Each thread count's row
also gives both engines' matrix FLOPs per second (forward and both
gradients of every MatMul and BatchMatMul, from `nereid check` of the
autodiff plan) as a share of the cores' float32 FMA peak (`nereid bench
peak` at that thread count, measured before the row's rounds).

    bench/lm_vs_pytorch.py [--threads 1,2] [--batch 32] [--steps 12] [--warmup 2] [--rounds 3] [--json PATH]

Needs ./setup.sh --bench (PyTorch).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

from train_vs_pytorch import fma_peak_gflops, matrix_flops_per_sample

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS, WIDTH, HEADS, CONTEXT, VOCABULARY = 4, 256, 4, 128, 256
PASSES = "autodiff,adam(lr=3e-4,decoupled=true,weight_decay=0.1)"


def torch_model():
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
            self.q, self.k, self.v, self.out = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
            self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)
            self.register_buffer("mask", torch.triu(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool), 1))

        def forward(self, x):
            b, t, d = x.shape
            h = self.ln1(x)
            split = lambda y: y.view(b, t, HEADS, d // HEADS).transpose(1, 2)  # noqa: E731
            q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // HEADS)
            weights = scores.masked_fill(self.mask, float("-inf")).softmax(-1)
            x = x + self.out((weights @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.down(nn.functional.gelu(self.up(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(VOCABULARY, WIDTH)
            self.positions = nn.Parameter(torch.randn(CONTEXT, WIDTH) * 0.01)
            self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
            self.final = nn.LayerNorm(WIDTH)

        def forward(self, ids):
            x = self.blocks(self.tokens(ids) + self.positions)
            return self.final(x) @ self.tokens.weight.t()

    return Model()


def torch_step_seconds(args):
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torch_model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    ids = torch.randint(0, VOCABULARY, (args.batch, CONTEXT))
    labels = torch.randint(0, VOCABULARY, (args.batch, CONTEXT))
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(ids).reshape(-1, VOCABULARY), labels.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[args.warmup:])


def nereid_step_seconds(args):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "steps.jsonl")
        subprocess.run([os.path.join(ROOT, "nereid"), "run", os.path.join(ROOT, "models/char_transformer.pbtxt"),
                        "--dataset", "fortunes", "--max-steps", str(args.steps), "--batch", str(args.batch),
                        "--threads", str(args.threads), "--test-limit", "32", "--passes", PASSES, "--quiet",
                        "--log-jsonl", log], check=True, capture_output=True)
        steps = [r["step_seconds"] for r in map(json.loads, open(log)) if r.get("event") == "step"]
    return statistics.median(steps[args.warmup:])


def thread_row(args, threads, flops_per_window, tmp):
    """Alternated rounds at one thread count, with both engines' share of the FMA peak."""
    args.threads = threads
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    peak = fma_peak_gflops(threads, tmp)
    tokens = args.batch * CONTEXT
    rounds = []
    for r in range(args.rounds):
        ours, theirs = nereid_step_seconds(args), torch_step_seconds(args)
        rounds.append({"nereid_tokens_per_s": tokens / ours, "pytorch_tokens_per_s": tokens / theirs,
                       "ratio": theirs / ours})
        print(f"  {threads} thread(s), round {r + 1}: Nereid {tokens / ours:8.0f} tokens/s ({ours * 1e3:.0f} ms/step), "
              f"PyTorch {tokens / theirs:8.0f} tokens/s ({theirs * 1e3:.0f} ms/step), ratio {theirs / ours:.2f}")
    row = {"threads": threads, "rounds": rounds, "fma_peak_gflops": peak,
           "ratio": statistics.median(x["ratio"] for x in rounds)}
    for engine in ("nereid", "pytorch"):
        per_s = statistics.median(x[f"{engine}_tokens_per_s"] for x in rounds)
        row[f"{engine}_tokens_per_s"] = per_s
        row[f"{engine}_percent_of_peak"] = 100 * per_s / CONTEXT * flops_per_window / 1e9 / peak
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    # ./nereid builds the -c opt binary the FLOP count and peak runs use.
    subprocess.run([os.path.join(ROOT, "nereid"), "ops"], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        flops = matrix_flops_per_sample("char_transformer", tmp)
        rows = [thread_row(args, int(t), flops, tmp) for t in args.threads.split(",")]
    print(f"\n{'threads':>7} {'Nereid tok/s':>12} {'PyTorch tok/s':>13} {'ratio':>6} {'peak GF/s':>9} "
          f"{'Nereid %peak':>12} {'PyTorch %peak':>13}")
    for row in rows:
        print(f"{row['threads']:>7} {row['nereid_tokens_per_s']:12.0f} {row['pytorch_tokens_per_s']:13.0f} "
              f"{row['ratio']:6.2f} {row['fma_peak_gflops']:9.1f} {row['nereid_percent_of_peak']:11.0f}% "
              f"{row['pytorch_percent_of_peak']:12.0f}%")
    print(f"(medians of {args.rounds} alternated rounds; batch {args.batch} x {CONTEXT}; "
          f"{flops / 1e9:.2f} GFLOP of matrix products per window and step)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "matrix_flops_per_window": flops, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
