#!/usr/bin/python3
"""A PyTorch model through ONNX into Nereid, trained both ways on Fashion-MNIST.

Builds a small CNN in PyTorch 1.13 (conv-batchnorm-relu-maxpool, conv-relu-
maxpool, linear-relu-dropout, linear), exports it with torch.onnx.export (train
mode, so BatchNormalization and Dropout stay in the graph), then from the same
initial weights:
  - trains it in PyTorch, one process, batch 2*B, SGD + momentum;
  - trains the .onnx file with `nereid run` on 2 local workers (Gloo over
    loopback), batch B each, the same optimizer;
  - exports Nereid's checkpoint back to ONNX (`nereid export`), loads those
    weights into the PyTorch module and evaluates them there.
Prints the three test accuracies. The two trainings differ in data order,
dropout masks and batch-norm statistics (Nereid's rank 0 keeps its own), so
they agree statistically, not bitwise; the third figure checks the export: it
must equal Nereid's own evaluation up to float rounding.

    bench/onnx_vs_pytorch.py [--epochs 3] [--batch 32] [--lr 0.01] [--json PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import shutil
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=32, help="per Nereid worker; PyTorch takes twice this")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    return p.parse_args()


ARGS = parse_args()
# OpenBLAS reads its thread count when it loads: set before torch is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)

import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from pytorch_reference import FASHION_DIR, evaluate, load_fashion  # noqa: E402


def build(seed):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 8, 5, padding=2), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * 5 * 5, 64), nn.ReLU(), nn.Dropout(0.25), nn.Linear(64, 10))


def train_pytorch(module, x, y, epochs, batch, lr, seed):
    opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)
    module.train()
    for _ in range(epochs):
        perm = torch.randperm(x.shape[0], generator=gen)
        for start in range(0, x.shape[0] - batch + 1, batch):
            idx = perm[start:start + batch]
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(module(x[idx]), y[idx])
            loss.backward()
            opt.step()


def main():
    args = ARGS
    subprocess.run([os.path.join(ROOT, "setup.sh"), "--bench"], check=True)
    subprocess.run(["bazel", "build", "-c", "opt", "//runtime/cli:nereid"], cwd=ROOT, check=True,
                   stderr=subprocess.DEVNULL)
    nereid = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
    torch.set_num_threads(args.threads)
    tmp = tempfile.mkdtemp(prefix="nereid-onnx-")
    model_path = os.path.join(tmp, "cnn.onnx")

    module = build(args.seed)
    module.train()
    torch.onnx.export(module, torch.zeros(2, 1, 28, 28), model_path, input_names=["images"],
                      output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13, training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    print("exported", model_path, [n.op_type for n in onnx.load(model_path).graph.node], flush=True)

    x_train, y_train = load_fashion(FASHION_DIR, "train")
    x_test, y_test = load_fashion(FASHION_DIR, "t10k")
    train_pytorch(module, x_train, y_train, args.epochs, 2 * args.batch, args.lr, args.seed)
    torch_acc = evaluate(module, x_test, y_test, 1000)
    print(f"pytorch: {args.epochs} epochs, batch {2 * args.batch}: test accuracy {100 * torch_acc:.2f}%", flush=True)

    ckpt = os.path.join(tmp, "ckpt")
    metrics = os.path.join(tmp, "metrics.json")
    subprocess.run([nereid, "run", model_path, "--workers", "2", "--threads", str(args.threads),
                    "--batch", str(args.batch), "--epochs", str(args.epochs), "--seed", str(args.seed),
                    "--passes", f"autodiff,sgd(lr={args.lr},momentum=0.9)", "--checkpoint", ckpt,
                    "--quiet", "--metrics-json", metrics], cwd=ROOT, check=True)
    nereid_acc = json.load(open(metrics))["final_test_accuracy"]
    print(f"nereid:  {args.epochs} epochs, 2 workers x batch {args.batch}: test accuracy {100 * nereid_acc:.2f}%",
          flush=True)

    trained = os.path.join(tmp, "trained.onnx")
    subprocess.run([nereid, "export", ckpt, "--model", model_path, "-o", trained], check=True)
    reloaded = build(args.seed)
    state = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx.load(trained).graph.initializer}
    missing = reloaded.load_state_dict(state, strict=False).missing_keys
    assert all(k.endswith("num_batches_tracked") for k in missing), missing
    export_acc = evaluate(reloaded, x_test, y_test, 1000)
    print(f"nereid's weights exported to ONNX, evaluated in PyTorch: {100 * export_acc:.2f}%")
    diff = 100 * (nereid_acc - torch_acc)
    print(f"\naccuracy nereid - pytorch: {diff:+.2f} points; export round trip: "
          f"{100 * (export_acc - nereid_acc):+.2f} points")
    shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        json.dump({"epochs": args.epochs, "batch_per_worker": args.batch, "lr": args.lr,
                   "pytorch_test_accuracy": torch_acc, "nereid_test_accuracy": nereid_acc,
                   "exported_weights_test_accuracy_in_pytorch": export_acc}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
