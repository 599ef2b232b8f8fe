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
ratios (the machine's speed drifts between rounds).

    bench/lm_vs_pytorch.py [--threads 2] [--batch 32] [--steps 12] [--warmup 2] [--rounds 2] [--json PATH]

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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    tokens = args.batch * CONTEXT
    rows = []
    for r in range(args.rounds):
        ours, theirs = nereid_step_seconds(args), torch_step_seconds(args)
        rows.append({"nereid_tokens_per_s": tokens / ours, "pytorch_tokens_per_s": tokens / theirs,
                     "ratio": theirs / ours})
        print(f"round {r + 1}: Nereid {tokens / ours:8.0f} tokens/s ({ours * 1e3:.0f} ms/step), "
              f"PyTorch {tokens / theirs:8.0f} tokens/s ({theirs * 1e3:.0f} ms/step), ratio {theirs / ours:.2f}")
    ratio = statistics.median(r["ratio"] for r in rows)
    print(f"Nereid / PyTorch tokens per second: {ratio:.2f} (median of {args.rounds} rounds; "
          f"{args.threads} threads, batch {args.batch} x {CONTEXT})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "batch": args.batch, "rounds": rows, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
