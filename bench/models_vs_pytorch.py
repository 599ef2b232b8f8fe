#!/usr/bin/python3
"""Models written as PyTorch users write them, exported to ONNX, run by Nereid.

For each model (an attention classifier over token ids written by hand, an
nn.TransformerEncoder classifier, LSTM and bidirectional GRU sequence
classifiers, a Conv1d classifier, and with --vision the CIFAR ResNet-20 with
both shortcuts and torchvision's networks): build it in PyTorch 1.13 with a fixed seed and dropout
0, export it with torch.onnx.export (the batch dimension dynamic; train mode
kept, so batch norm stays a layer), then

  - forward: the logits of one batch in inference mode, from PyTorch and from
    `nereid infer`; printed: the largest difference relative to the largest
    logit;
  - training: 20 steps of plain SGD on one fixed batch (the whole dataset, so
    the order Nereid shuffles it in does not change the loss), from the same
    initial weights, in PyTorch and with `nereid run`; printed: the largest
    relative difference of the 20 losses, and beside it the same figure for
    PyTorch against PyTorch with every weight moved by one float32 rounding
    (1e-7 relative): how much the model itself amplifies rounding. Deep
    batch-normalised networks on small images and batches amplify it by
    orders of magnitude, so there the two engines can agree no better.

    bench/models_vs_pytorch.py [--only NAME,..] [--vision] [--steps 20] [--batch 8] [--lr 0.05]
                               [--image-size 32] [--json PATH]

Needs ./setup.sh --bench (PyTorch; torchvision for --vision).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

T, V, D, H, C = 16, 50, 32, 4, 5


class Attention(nn.Module):
    """A pre-LayerNorm block over token ids: embedding, causal multi-head attention, GELU MLP."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.head = nn.Linear(D, C)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

    def forward(self, ids):
        b, t = ids.shape
        x = self.emb(ids) + self.pos
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        a = ((q @ k.transpose(-2, -1)) / math.sqrt(D // H) + self.mask).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, D))
        x = x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        layer = nn.TransformerEncoderLayer(D, H, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(D, C)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(1))


class Recurrent(nn.Module):
    """An embedding, one recurrent layer (batch first) and a classifier on the last step."""

    def __init__(self, cell, **kw):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.rnn = cell(D, D, batch_first=True, **kw)
        self.head = nn.Linear(D * (2 if kw.get("bidirectional") else 1), C)

    def forward(self, ids):
        y, _ = self.rnn(self.emb(ids))
        return self.head(y[:, -1])


class ResNet20(nn.Module):
    """The CIFAR ResNet-20 of He et al.; shortcut "A" pads the subsampled identity with zero channels, "B" projects."""

    class Block(nn.Module):
        def __init__(self, c_in, c_out, stride, option):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.option, self.pad = option, c_out - c_in
            self.project = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                            if option == "B" and (stride != 1 or c_in != c_out) else None)
            self.subsample = stride != 1 or c_in != c_out

        def forward(self, x):
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            if self.project is not None:
                x = self.project(x)
            elif self.subsample:
                x = nn.functional.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad // 2, self.pad // 2))
            return torch.relu(y + x)

    def __init__(self, option):
        super().__init__()
        layers, c = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
        for c_out, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(self.Block(c, c_out, stride if i == 0 else 1, option))
                c = c_out
        self.net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, C))

    def forward(self, x):
        return self.net(x)


def conv1d():
    return nn.Sequential(nn.Conv1d(3, 8, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2), nn.Conv1d(8, 8, 3),
                         nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, C))


def token_batch(n, rng):
    return torch.from_numpy(rng.integers(0, V, size=(n, T)).astype(np.int64))


def models(vision, image_size=32):
    out = [("attention", Attention, token_batch),
           ("transformer_encoder", Encoder, token_batch),
           ("lstm", lambda: Recurrent(nn.LSTM), token_batch),
           ("bidirectional_lstm", lambda: Recurrent(nn.LSTM, bidirectional=True), token_batch),
           ("bidirectional_gru", lambda: Recurrent(nn.GRU, bidirectional=True), token_batch),
           ("conv1d", conv1d, lambda n, rng: torch.from_numpy(rng.standard_normal((n, 3, 32)).astype(np.float32)))]
    if vision:
        import torchvision.models as tv  # noqa: E402
        size = image_size
        image = lambda n, rng: torch.from_numpy(rng.standard_normal((n, 3, size, size)).astype(np.float32))  # noqa: E731
        out.append(("resnet20_a", lambda: ResNet20("A"), image))
        out.append(("resnet20_b", lambda: ResNet20("B"), image))
        for name in ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_0", "shufflenet_v2_x0_5",
                     "densenet121", "efficientnet_b0"]:
            out.append((name, lambda name=name: getattr(tv, name)(num_classes=C), image))
        out.append(("googlenet", lambda: tv.googlenet(num_classes=C, aux_logits=False, init_weights=True), image))
    return out


def nereid(*args):
    cmd = [os.path.join(ROOT, "nereid"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def compare(name, build, data, args, tmp):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = build()
    for m in model.modules():  # the comparison needs no randomness
        if isinstance(m, nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    x = data(args.batch, rng)
    y = torch.from_numpy(rng.integers(0, C, size=args.batch).astype(np.int64))
    path = os.path.join(tmp, f"{name}.onnx")
    model.train()
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}}, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    # Forward, inference mode.
    model.eval()
    with torch.no_grad():
        want = model(x).numpy()
    np.savez(os.path.join(tmp, "in.npz"), images=x.numpy())
    nereid("infer", path, "--inputs", os.path.join(tmp, "in.npz"), "-o", os.path.join(tmp, "out.npz"))
    got = np.load(os.path.join(tmp, "out.npz"))["logits"]
    forward = float(np.max(np.abs(got - want)) / max(1e-12, np.max(np.abs(want))))
    # Training: full-batch SGD.
    def train(perturb):
        model.load_state_dict(initial)
        if perturb:  # every weight moved by about one float32 rounding
            gen = torch.Generator().manual_seed(1)
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1 + 1e-7 * torch.randn(p.shape, generator=gen))
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        losses = []
        for _ in range(args.steps):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            losses.append(loss.item())
            loss.backward()
            opt.step()
        return losses

    torch_losses = train(perturb=False)
    # How far PyTorch itself moves when its weights differ by rounding: the
    # model's own sensitivity, the floor for any comparison of two engines.
    perturbed = train(perturb=True)
    sensitivity = max(abs(a - b) / abs(b) for a, b in zip(perturbed, torch_losses))
    one_step = abs(perturbed[1] - torch_losses[1]) / abs(torch_losses[1]) if args.steps > 1 else 0.0
    data_dir = os.path.join(tmp, f"{name}_data")
    os.makedirs(data_dir, exist_ok=True)
    for split in ("train", "test"):
        np.savez(os.path.join(data_dir, f"{split}.npz"), images=x.numpy(), labels=y.numpy())
    log = os.path.join(tmp, f"{name}.jsonl")
    nereid("run", path, "--dataset", f"npy:{data_dir}", "--batch", str(args.batch), "--epochs", str(args.steps),
           "--threads", "1", "--passes", f"autodiff,sgd(lr={args.lr})", "--log-jsonl", log)
    nereid_losses = [rec["loss"] for rec in map(json.loads, open(log)) if rec.get("event") == "step"]
    if len(nereid_losses) != args.steps:
        raise RuntimeError(f"{name}: nereid logged {len(nereid_losses)} steps, expected {args.steps}")
    training = max(abs(a - b) / abs(b) for a, b in zip(nereid_losses, torch_losses))
    after_one = abs(nereid_losses[1] - torch_losses[1]) / abs(torch_losses[1]) if args.steps > 1 else 0.0
    return {"model": name, "forward_rel": forward, "loss_rel": training, "pytorch_sensitivity": sensitivity,
            "second_loss_rel": after_one, "pytorch_second_loss_sensitivity": one_step,
            "losses": {"pytorch": torch_losses, "nereid": nereid_losses},
            "first_loss": torch_losses[0], "last_loss": torch_losses[-1], "nereid_last_loss": nereid_losses[-1]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="")
    p.add_argument("--vision", action="store_true", help="also the torchvision networks (python3-torchvision)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--image-size", type=int, default=32, help="height and width of the vision models' images")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    only = set(filter(None, args.only.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, build, data in models(args.vision, args.image_size):
            if only and name not in only:
                continue
            try:
                row = compare(name, build, data, args, tmp)
            except Exception as e:  # noqa: BLE001 - a model that fails is a row, not the end
                row = {"model": name, "error": str(e).strip()[-1500:]}
            rows.append(row)
            if "error" in row:
                print(f"{name:22s} FAILED: {row['error']}", flush=True)
            else:
                print(f"{name:22s} forward max rel diff {row['forward_rel']:.2e}   "
                      f"loss over {args.steps} steps max rel diff {row['loss_rel']:.2e} "
                      f"(PyTorch against itself perturbed by rounding: {row['pytorch_sensitivity']:.2e}); "
                      f"after one step {row['second_loss_rel']:.2e} ({row['pytorch_second_loss_sensitivity']:.2e})   "
                      f"(loss {row['first_loss']:.4f} -> {row['last_loss']:.4f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": args.steps, "batch": args.batch, "lr": args.lr, "rows": rows}, f, indent=1)
    return 0 if rows and all("error" not in r and r["forward_rel"] < 1e-4 and r["loss_rel"] < 1e-4 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
