#!/usr/bin/python3
"""Exactness of the byte transformer's training, Nereid against PyTorch 1.13.

models/char_transformer.pbtxt and a PyTorch copy of it, parameter for
parameter (pre-LayerNorm blocks with epsilon 1e-5, attention scores times
1/sqrt(64) then a causal -inf mask, exact-erf GELU, tied byte embeddings, a
learned positional embedding, biases everywhere), are trained from the SAME
initial weights on the SAME batches with the same optimizer, and their
per-step training losses are compared:

  * initial weights: Nereid's own, from its seeded init specs. A run with
    `sgd(lr=0)` saves a checkpoint after 1 step and another after 2 steps;
    `nereid export` writes each as .npz, the two must be equal (an lr=0 step
    leaves the weights where they started), and the PyTorch module loads
    them (MatMul weights [in, out] transposed into nn.Linear's [out, in]).
  * batches: `nereid run --dataset fortunes` reads /usr/share/games/fortunes
    (every regular file by name, no .dat, no symbolic link) as one byte
    string, the first 90% of it the train split, cut into windows of 128
    bytes whose labels are the next bytes (data/text_dataset.cc);
    --train-limit keeps the first N windows, before any shuffling. Epoch e
    visits them in data/batch_loader.cc's order: Fisher-Yates driven by
    std::mt19937_64 seeded by std::seed_seq{seed lo, seed hi, e lo, e hi},
    with arc4random_uniform's rejection. Both are replicated below in Python
    (the generator is checked against the permutation pinned in
    data/batch_loader_test.cc) and PyTorch is fed exactly those windows.
  * optimizer: Nereid's `clip(max_norm=C),adam(lr=LR,decoupled=true,
    weight_decay=WD)` against torch.nn.utils.clip_grad_norm_ and
    torch.optim.AdamW: both decay every parameter (LayerNorm and biases too)
    by lr * wd, use bias correction with the global step and epsilon 1e-8
    outside the square root; the clip factor is min(1, C / (norm + 1e-6)) in
    both. Constant learning rate.
  * loss: the mean over all B * 128 positions of -log softmax (Nereid's
    SoftmaxCrossEntropy; no label is the ignore index -100 here), which is
    F.cross_entropy's mean.

The table lists the losses of the first --exact-steps steps (they must agree
within 1e-4 relative), then every so many steps to --steps; the run passes
when also the mean loss of the last --window steps agrees within 0.05 bits.
Beside the first steps it gives each engine's distance from the same
training done by the PyTorch copy in float64: where the engines differ by
more than a rounding, both should be about as far from exact arithmetic.

The default recipe is bench/lm_vs_pytorch.py's (AdamW lr 3e-4, weight decay
0.1), here with clipping at 1 (the gradients' norm is 2 to 12, so it scales
every step). At lr 1e-3 the first 20 steps agree to 1e-7..1e-6 except on
the batches whose loss spikes (runs of tabs, loss 7 to 8 against 3.4 around
them), where the model amplifies float32 rounding to ~1e-4 (seed 0: 8.4e-5,
seed 1: 1.4e-4); there Nereid and PyTorch are each as far from float64
(seed 0: 3.3e-5 and 5.1e-5; seed 1: 2.2e-4 and 7.2e-5), so it is rounding.

    bench/lm_exactness.py [--nereid PATH] [--threads 1] [--batch 8] [--steps 300] [--exact-steps 20]
                          [--lr 3e-4] [--weight-decay 0.1] [--clip 1.0] [--seed 0] [--train-limit 0]
                          [--window 20] [--json PATH]

Needs ./setup.sh --bench (PyTorch) and the fortune files (./setup.sh).
"""
import argparse
import json
import math
import os
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models/char_transformer.pbtxt")
FORTUNES = "/usr/share/games/fortunes"
LAYERS, WIDTH, HEADS, CONTEXT, VOCABULARY = 4, 256, 4, 128, 256
TRAIN_SHARE = 0.9           # data/text_dataset.h kTextTrainShare
LAYER_NORM_EPSILON = 1e-5   # the LayerNorm op's default; the model sets none
EXACT_TOLERANCE = 1e-4      # relative, per step, over the first --exact-steps
BITS_TOLERANCE = 0.05       # bits, mean loss of the last --window steps

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


# --- data/batch_loader.cc's order, in Python ---------------------------------

def seed_seq_generate(values, count):
    """std::seed_seq{values...}.generate() of `count` 32-bit words ([rand.util.seedseq])."""
    b = [0x8B8B8B8B] * count
    n, s = count, len(values)
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p = (n - t) // 2
    q = p + t
    m = max(s + 1, n)
    mix = lambda x: x ^ (x >> 27)  # noqa: E731
    for k in range(m):
        r1 = (1664525 * mix(b[k % n] ^ b[(k + p) % n] ^ b[(k - 1) % n])) & M32
        r2 = (r1 + (s if k == 0 else (k % n + values[k - 1]) if k <= s else k % n)) & M32
        b[(k + p) % n] = (b[(k + p) % n] + r1) & M32
        b[(k + q) % n] = (b[(k + q) % n] + r2) & M32
        b[k % n] = r2
    for k in range(m, m + n):
        r3 = (1566083941 * mix((b[k % n] + b[(k + p) % n] + b[(k - 1) % n]) & M32)) & M32
        r4 = (r3 - k % n) & M32
        b[(k + p) % n] ^= r3
        b[(k + q) % n] ^= r4
        b[k % n] = r4
    return b


class MT19937_64:
    """std::mt19937_64 seeded from a std::seed_seq."""
    N, M, UPPER, LOWER = 312, 156, (M64 << 31) & M64, (1 << 31) - 1

    def __init__(self, seed_values):
        words = seed_seq_generate(seed_values, 2 * self.N)
        self.x = [words[2 * i] | (words[2 * i + 1] << 32) for i in range(self.N)]
        if (self.x[0] & self.UPPER) == 0 and not any(self.x[1:]):
            self.x[0] = 1 << 63
        self.i = self.N

    def _twist(self):
        x, n, m = self.x, self.N, self.M
        for k in range(n):
            y = (x[k] & self.UPPER) | (x[(k + 1) % n] & self.LOWER)
            x[k] = x[(k + m) % n] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
        self.i = 0

    def __call__(self):
        if self.i >= self.N:
            self._twist()
        y = self.x[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        return y ^ (y >> 43)


def epoch_permutation(count, seed, epoch):
    """BatchLoader::EpochPermutation(count, seed, epoch)."""
    perm = list(range(count))
    rng = MT19937_64([seed & M32, seed >> 32 & M32, epoch & M32, epoch >> 32 & M32])
    for i in range(count, 1, -1):
        threshold = ((1 << 64) - i) % i
        x = rng()
        while x < threshold:
            x = rng()
        j = x % i
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    return perm


def train_windows(path, limit):
    """(ids, labels), each [windows, CONTEXT]: data/text_dataset.cc's train split, Truncate(limit)."""
    names = []
    for name in os.listdir(path.encode()):
        if not name or name.startswith(b".") or name.endswith(b".dat"):
            continue
        full = path.encode() + b"/" + name
        if stat.S_ISREG(os.lstat(full).st_mode):
            names.append(full)
    text = b"".join(open(full, "rb").read() for full in sorted(names))
    part = np.frombuffer(text[:int(len(text) * TRAIN_SHARE)], dtype=np.uint8)
    windows = (len(part) - 1) // CONTEXT
    if limit > 0:
        windows = min(windows, limit)
    n = windows * CONTEXT
    return part[:n].reshape(windows, CONTEXT).astype(np.int64), part[1:n + 1].reshape(windows, CONTEXT).astype(np.int64)


def batches(windows, batch, seed):
    """Example indices of each step, epoch after epoch (the last batch of an epoch partial)."""
    epoch = 0
    while True:
        order = epoch_permutation(windows, seed, epoch)
        for begin in range(0, windows, batch):
            yield order[begin:begin + batch]
        epoch += 1


# --- the PyTorch copy ---------------------------------------------------------

def torch_model():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value, self.out = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
            self.register_buffer("mask", torch.triu(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool), 1))

        def forward(self, x):
            b, t, d = x.shape
            split = lambda y: y.view(b, t, HEADS, d // HEADS).transpose(1, 2)  # noqa: E731
            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
            scores = (q @ k.transpose(-2, -1)) * (1.0 / (d // HEADS) ** 0.5)
            weights = scores.masked_fill(self.mask, float("-inf")).softmax(-1)
            return self.out((weights @ v).transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(WIDTH, eps=LAYER_NORM_EPSILON)
            self.attention = Attention()
            self.ln2 = nn.LayerNorm(WIDTH, eps=LAYER_NORM_EPSILON)
            self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.down(F.gelu(self.up(self.ln2(x))))  # exact (erf) GELU, as Nereid's default

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(VOCABULARY, WIDTH)
            self.positions = nn.Parameter(torch.zeros(CONTEXT, WIDTH))
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.final = nn.LayerNorm(WIDTH, eps=LAYER_NORM_EPSILON)

        def forward(self, ids):
            x = self.tokens(ids) + self.positions
            for block in self.blocks:
                x = block(x)
            return self.final(x) @ self.tokens.weight.t()  # tied

    return Model()


def nereid_names(model):
    """PyTorch parameter name -> (Nereid parameter name, transposed?)."""
    names = {"tokens.weight": ("embedding/tokens", False), "positions": ("embedding/positions", False),
             "final.weight": ("final/scale", False), "final.bias": ("final/bias", False)}
    for i in range(LAYERS):
        for ln in ("ln1", "ln2"):
            names["blocks.%d.%s.weight" % (i, ln)] = ("block%d/%s/scale" % (i, ln), False)
            names["blocks.%d.%s.bias" % (i, ln)] = ("block%d/%s/bias" % (i, ln), False)
        for ours, theirs in [("attention.%s" % p, "attention/%s" % p) for p in ("query", "key", "value", "out")] + \
                [("up", "mlp/up"), ("down", "mlp/down")]:
            names["blocks.%d.%s.weight" % (i, ours)] = ("block%d/%s/weight" % (i, theirs), True)
            names["blocks.%d.%s.bias" % (i, ours)] = ("block%d/%s/bias" % (i, theirs), False)
    assert sorted(names) == sorted(n for n, _ in model.named_parameters()), "the name map misses a parameter"
    return names


# --- Nereid -------------------------------------------------------------------

def nereid_run(args, passes, steps, epochs, extra=()):
    cmd = [args.nereid, "run", MODEL, "--dataset", "fortunes", "--passes", passes, "--batch", str(args.batch),
           "--threads", str(args.threads), "--seed", str(args.seed), "--max-steps", str(steps),
           "--epochs", str(epochs), "--test-limit", "8", "--quiet"] + list(extra)
    if args.train_limit > 0:
        cmd += ["--train-limit", str(args.train_limit)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("nereid run failed (%s):\n%s" % (" ".join(cmd), run.stderr))


def initial_weights(args, tmp):
    """Nereid's initial parameters, from lr=0 checkpoints after 1 and after 2 steps (which must agree)."""
    exported = []
    for steps in (1, 2):
        ckpt, npz = os.path.join(tmp, "init%d" % steps), os.path.join(tmp, "init%d.npz" % steps)
        nereid_run(args, "autodiff,sgd(lr=0)", steps, 1, ["--checkpoint", ckpt, "--checkpoint-every", "1"])
        subprocess.run([args.nereid, "export", ckpt, "-o", npz, "--model", MODEL], check=True, capture_output=True)
        with np.load(npz) as z:
            exported.append({k: z[k] for k in z.files})
    a, b = exported
    same = a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    return a, same


def nereid_losses(args, tmp, passes, epochs):
    metrics = os.path.join(tmp, "metrics.json")
    t0 = time.perf_counter()
    nereid_run(args, passes, args.steps, epochs, ["--metrics-json", metrics])
    with open(metrics) as f:
        return json.load(f)["step_losses"], time.perf_counter() - t0


# --- PyTorch --------------------------------------------------------------------

def torch_losses(args, weights, ids, labels, steps, double=False):
    """PyTorch's per-step losses from Nereid's initial weights; with `double`,
    all of it in float64 (the reference that both float32 engines round from)."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    model = torch_model()
    if double:
        model.double()
    with torch.no_grad():
        for name, (theirs, transposed) in nereid_names(model).items():
            value = torch.from_numpy(weights[theirs].T.copy() if transposed else weights[theirs])
            dict(model.named_parameters())[name].copy_(value)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay, foreach=False)
    params = list(model.parameters())
    losses = []
    t0 = time.perf_counter()
    for step, rows in zip(range(steps), batches(len(ids), args.batch, args.seed)):
        x, y = torch.from_numpy(ids[rows]), torch.from_numpy(labels[rows])
        loss = F.cross_entropy(model(x).reshape(-1, VOCABULARY), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip > 0:  # GlobalNormClipFactor: the sum of squares in double, min(1, C / (norm + 1e-6))
            norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in params))
            factor = min(1.0, args.clip / (norm + 1e-6))
            for p in params:
                p.grad.mul_(factor if double else np.float32(factor).item())
        opt.step()
        losses.append(loss.item())
    return losses, time.perf_counter() - t0


def main():
    default_nereid = os.path.join(ROOT, "bazel-bin/runtime/cli/nereid")
    if not os.access(default_nereid, os.X_OK):
        default_nereid = os.path.join(ROOT, "nereid")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nereid", default=default_nereid, help="the nereid binary (default %(default)s)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300, help="steps of the long run (default %(default)s)")
    ap.add_argument("--exact-steps", type=int, default=20, help="steps whose losses must agree within 1e-4 relative")
    ap.add_argument("--window", type=int, default=20, help="last steps whose mean loss must agree within 0.05 bits")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0, help="max global gradient norm; 0: no clipping")
    ap.add_argument("--seed", type=int, default=0, help="the data shuffling seed (both engines)")
    ap.add_argument("--train-limit", type=int, default=0, help="use the first N windows (0: all)")
    ap.add_argument("--json", default=None, help="write a JSON summary here")
    args = ap.parse_args()
    args.exact_steps = min(args.exact_steps, args.steps)
    args.window = min(args.window, args.steps)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    pinned = epoch_permutation(10, 123, 7)  # data/batch_loader_test.cc pins this order
    if pinned != [0, 9, 4, 8, 2, 1, 3, 6, 7, 5]:
        sys.exit("the Python copy of BatchLoader::EpochPermutation disagrees with the pinned order: %s" % pinned)
    ids, labels = train_windows(FORTUNES, args.train_limit)
    steps_per_epoch = -(-len(ids) // args.batch)
    epochs = -(-args.steps // steps_per_epoch)
    passes = "autodiff,%sadam(lr=%r,decoupled=true,weight_decay=%r)" % (
        "clip(max_norm=%r)," % args.clip if args.clip > 0 else "", args.lr, args.weight_decay)

    with tempfile.TemporaryDirectory() as tmp:
        weights, init_stable = initial_weights(args, tmp)
        ours, ours_seconds = nereid_losses(args, tmp, passes, epochs)
    if len(ours) != args.steps:
        sys.exit("Nereid ran %d steps, not %d" % (len(ours), args.steps))
    theirs, theirs_seconds = torch_losses(args, weights, ids, labels, args.steps)
    # The same training in float64 over the first steps: how far each
    # engine's float32 is from exact arithmetic. Where the engines differ by
    # more than a rounding (a batch on which the model amplifies rounding),
    # both should be about as far from it.
    reference, _ = torch_losses(args, weights, ids, labels, args.exact_steps, double=True)
    ours_ref = [abs(a - r) / abs(r) for a, r in zip(ours, reference)]
    theirs_ref = [abs(a - r) / abs(r) for a, r in zip(theirs, reference)]

    rel = [abs(a - b) / abs(b) for a, b in zip(ours, theirs)]
    exact_max = max(rel[:args.exact_steps])
    tail_ours = sum(ours[-args.window:]) / args.window
    tail_theirs = sum(theirs[-args.window:]) / args.window
    tail_bits = abs(tail_ours - tail_theirs) / math.log(2)
    final_bits = abs(ours[-1] - theirs[-1]) / math.log(2)
    exact_ok, tail_ok = exact_max <= EXACT_TOLERANCE, tail_bits <= BITS_TOLERANCE

    print("char_transformer, %d windows of %d bytes (%d steps per epoch), batch %d, seed %d, %d thread(s)"
          % (len(ids), CONTEXT, steps_per_epoch, args.batch, args.seed, args.threads))
    print("Nereid passes %s; PyTorch AdamW%s" % (passes, ", clip_grad_norm_ (in double)" if args.clip > 0 else ""))
    print("initial weights: %d arrays, lr=0 exports after 1 and 2 steps %s"
          % (len(weights), "equal" if init_stable else "DIFFER"))
    print("%6s  %12s  %12s  %10s  %s" % ("step", "Nereid", "PyTorch", "rel diff",
                                         "  rel diff to float64: Nereid  PyTorch"))
    shown = list(range(args.exact_steps))
    stride = max(1, (args.steps - args.exact_steps) // 10)
    shown += list(range(args.exact_steps - 1 + stride, args.steps, stride))
    if shown[-1] != args.steps - 1:
        shown.append(args.steps - 1)
    for i in shown:
        if i == args.exact_steps:
            print("%6s" % "...")
        print("%6d  %12.7f  %12.7f  %10.2e  %s" % (i + 1, ours[i], theirs[i], rel[i], "%28.2e %8.2e"
                                                   % (ours_ref[i], theirs_ref[i]) if i < len(reference) else ""))
    print("step 1 (same weights, same batch, no update yet): relative difference %.2e" % rel[0])
    print("first %d steps: largest relative difference %.2e (tolerance %g): %s" % (
        args.exact_steps, exact_max, EXACT_TOLERANCE, "ok" if exact_ok else "FAIL"))
    print("  largest relative difference to float64 arithmetic: Nereid %.2e, PyTorch %.2e"
          % (max(ours_ref), max(theirs_ref)))
    print("last %d of %d steps: mean loss Nereid %.6f, PyTorch %.6f nats; difference %.2e bits (tolerance %g): %s"
          % (args.window, args.steps, tail_ours, tail_theirs, tail_bits, BITS_TOLERANCE, "ok" if tail_ok else "FAIL"))
    print("all %d steps: largest relative difference %.2e; last step %.2e bits apart"
          % (args.steps, max(rel), final_bits))
    print("time: Nereid %.1f s, PyTorch %.1f s" % (ours_seconds, theirs_seconds))
    ok = exact_ok and tail_ok and init_stable
    print("verdict: %s" % ("PASS: Nereid and PyTorch train the byte transformer to the same losses" if ok else
                           "FAIL: the engines' losses differ beyond tolerance"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": "char_transformer", "batch": args.batch, "steps": args.steps, "seed": args.seed,
                       "threads": args.threads, "windows": len(ids), "passes": passes, "lr": args.lr,
                       "weight_decay": args.weight_decay, "clip": args.clip,
                       "initial_weights_stable": init_stable, "step1_relative_difference": rel[0],
                       "exact_steps": args.exact_steps, "exact_max_relative_difference": exact_max,
                       "exact_ok": exact_ok, "max_relative_difference": max(rel), "float64_losses": reference,
                       "nereid_max_relative_difference_to_float64": max(ours_ref),
                       "pytorch_max_relative_difference_to_float64": max(theirs_ref),
                       "window": args.window, "tail_mean_nereid": tail_ours, "tail_mean_pytorch": tail_theirs,
                       "tail_difference_bits": tail_bits,
                       "final_difference_bits": final_bits, "tail_ok": tail_ok, "pass": ok,
                       "nereid_losses": ours, "pytorch_losses": theirs,
                       "nereid_seconds": ours_seconds, "pytorch_seconds": theirs_seconds}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
