#!/usr/bin/python3
"""PyTorch peer for Nereid's benchmarks.

Builds the same architectures as models/generate_models.py (mlp_fashion,
lenet_fashion, logreg_fashion, svm_fashion, vgg11_cifar), trains them with plain
SGD + momentum and reports mean train loss, test accuracy and training
throughput, so that Nereid's figures have a reference to be compared against.

Run it with Debian's PyTorch 1.13 (package python3-torch), i.e. with
/usr/bin/python3, not whatever python3 comes first on PATH:

    nice -n 10 /usr/bin/python3 bench/pytorch_reference.py \
        --model mlp_fashion --epochs 10 --batch 64 --lr 0.01 --momentum 0.9 \
        --threads 2 --json bench/results/mlp_fashion.json

See bench/README.md for the details (data, timing rules, JSON fields).
"""

import argparse
import gzip
import json
import os
import sys
import time

MODELS = ("mlp_fashion", "lenet_fashion", "logreg_fashion", "svm_fashion", "vgg11_cifar")
FASHION_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MEAN = 0.2860
FASHION_STD = 0.3530
NUM_CLASSES = 10


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, choices=MODELS)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads (torch.set_num_threads and OMP/OpenBLAS/MKL env vars)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many optimizer steps in total (0: no limit)")
    p.add_argument("--warmup-steps", type=int, default=0,
                   help="steps at the start of the run excluded from the throughput timing")
    p.add_argument("--eval", dest="eval", action="store_true", default=True,
                   help="evaluate test accuracy after each epoch (default)")
    p.add_argument("--no-eval", dest="eval", action="store_false")
    p.add_argument("--eval-batch", type=int, default=1000)
    p.add_argument("--json", default=None, help="write the results as JSON to this path")
    p.add_argument("--data-dir", default=FASHION_DIR, help="Fashion-MNIST directory (idx .gz files)")
    p.add_argument("--synthetic-size", type=int, default=0,
                   help="vgg11_cifar: number of synthetic training samples "
                        "(default: max-steps*batch when --max-steps is set, else 50000)")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error("--threads must be >= 1")
    if args.batch < 1 or args.epochs < 1:
        p.error("--batch and --epochs must be >= 1")
    return args


ARGS = parse_args()
# OpenBLAS / OpenMP read their thread counts when the libraries load, so these must
# be set before torch is imported; torch.set_num_threads alone does not reach OpenBLAS.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# --------------------------------------------------------------------------- data
def _read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic >> 8 != 0x08:  # 0x08 = unsigned byte
        raise ValueError("%s: not an unsigned-byte idx file (magic 0x%08x)" % (path, magic))
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def load_fashion(data_dir, split):
    images = _read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split))
    labels = _read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split))
    x = images.astype(np.float32) / 255.0
    x = (x - FASHION_MEAN) / FASHION_STD
    x = x.reshape(-1, 1, 28, 28)  # NCHW
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(labels.astype(np.int64))


def synthetic_cifar(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, 32, 32, generator=g)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    return x, y


# --------------------------------------------------------------------------- models
def he_normal_(w):
    # fan_in of a PyTorch Linear weight [out, in] is `in`; of an OIHW filter I*H*W,
    # the same fan_in as Nereid's [in, out] MatMul weights and OIHW filters.
    nn.init.kaiming_normal_(w, mode="fan_in", nonlinearity="relu")


def init_layer(layer, scheme):
    if scheme == "he_normal":
        he_normal_(layer.weight)
    elif scheme == "glorot_uniform":
        nn.init.xavier_uniform_(layer.weight)
    elif scheme == "zeros":
        nn.init.zeros_(layer.weight)
    else:
        raise ValueError(scheme)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def dense(fan_in, fan_out, init="he_normal"):
    return init_layer(nn.Linear(fan_in, fan_out), init)


def conv(c_in, c_out, k, pad=0, init="he_normal"):
    return init_layer(nn.Conv2d(c_in, c_out, k, stride=1, padding=pad, bias=True), init)


def mlp_fashion():
    # 784-512-512-10, ReLU; last layer glorot_uniform.
    return nn.Sequential(
        nn.Flatten(),
        dense(784, 512), nn.ReLU(),
        dense(512, 512), nn.ReLU(),
        dense(512, 10, init="glorot_uniform"),
    )


def lenet_fashion():
    # conv 6@5x5 pad 2, relu, maxpool 2/2, conv 16@5x5 (no pad), relu, maxpool 2/2,
    # 400-120-84-10 with ReLU; last layer glorot_uniform.
    return nn.Sequential(
        conv(1, 6, 5, pad=2), nn.ReLU(), nn.MaxPool2d(2, 2),
        conv(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(),
        dense(16 * 5 * 5, 120), nn.ReLU(),
        dense(120, 84), nn.ReLU(),
        dense(84, 10, init="glorot_uniform"),
    )


def linear_fashion():
    # logreg_fashion / svm_fashion: a single 784->10 layer, weight and bias zero.
    return nn.Sequential(nn.Flatten(), dense(784, 10, init="zeros"))


VGG11 = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


def vgg11_cifar():
    # 3x3 convolutions pad 1 with bias and ReLU, max pooling 2/2, no batch norm;
    # classifier 512-4096-4096-10 with dropout 0.5 after fc1 and fc2.
    layers, c_in = [], 3
    for item in VGG11:
        if item == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [conv(c_in, item, 3, pad=1), nn.ReLU()]
            c_in = item
    layers += [
        nn.Flatten(),
        dense(512, 4096), nn.ReLU(), nn.Dropout(0.5),
        dense(4096, 4096), nn.ReLU(), nn.Dropout(0.5),
        dense(4096, 10, init="glorot_uniform"),
    ]
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------- losses
def hinge_loss(scores, labels, margin=1.0):
    """Nereid's HingeLoss (ops/loss_ops.cc): mean over the batch of
    sum_{k != label} max(0, margin - s[label] + s[k]) (Weston-Watkins).

    nn.MultiMarginLoss divides the per-sample sum by the number of classes, so it
    equals this loss / C; the undivided form is written out here to match exactly.
    """
    correct = scores.gather(1, labels.unsqueeze(1))
    margins = torch.clamp(margin - correct + scores, min=0.0)
    margins = margins.scatter(1, labels.unsqueeze(1), 0.0)
    return margins.sum(dim=1).mean()


def softmax_cross_entropy(logits, labels):
    return F.cross_entropy(logits, labels, reduction="mean")


BUILDERS = {
    "mlp_fashion": (mlp_fashion, softmax_cross_entropy, "fashion-mnist"),
    "lenet_fashion": (lenet_fashion, softmax_cross_entropy, "fashion-mnist"),
    "logreg_fashion": (linear_fashion, softmax_cross_entropy, "fashion-mnist"),
    "svm_fashion": (linear_fashion, hinge_loss, "fashion-mnist"),
    "vgg11_cifar": (vgg11_cifar, softmax_cross_entropy, "synthetic-cifar10"),
}


# --------------------------------------------------------------------------- training
def evaluate(model, x, y, batch):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            pred = model(x[i:i + batch]).argmax(dim=1)
            correct += int((pred == y[i:i + batch]).sum())
    model.train()
    return correct / x.shape[0]


def main(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    build, loss_fn, dataset = BUILDERS[args.model]

    if dataset == "fashion-mnist":
        x_train, y_train = load_fashion(args.data_dir, "train")
        x_test, y_test = load_fashion(args.data_dir, "t10k")
    else:
        n = args.synthetic_size or (args.max_steps * args.batch if args.max_steps else 50000)
        x_train, y_train = synthetic_cifar(n, args.seed + 1)
        x_test, y_test = synthetic_cifar(10000 if args.eval else 0, args.seed + 2)

    model = build()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    n_train = x_train.shape[0]

    print("pytorch %s  model %s  dataset %s (%d train, %d test)  threads %d  batch %d  lr %g  momentum %g"
          % (torch.__version__, args.model, dataset, n_train, x_test.shape[0], args.threads,
             args.batch, args.lr, args.momentum), flush=True)

    step = 0
    timed_samples_total, timed_seconds_total = 0, 0.0
    per_epoch = []
    done = False
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(n_train, generator=shuffle_gen)
        loss_sum = torch.zeros((), dtype=torch.float64)
        seen = 0
        timed_samples, timed_seconds = 0, 0.0
        for start in range(0, n_train, args.batch):  # drop_last=False
            if args.max_steps and step >= args.max_steps:
                done = True
                break
            t0 = time.perf_counter()  # batch assembly counts as training time
            idx = perm[start:start + args.batch]
            xb = x_train.index_select(0, idx)
            yb = y_train.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            t1 = time.perf_counter()
            step += 1
            bs = idx.shape[0]
            loss_sum += loss.detach().double() * bs
            seen += bs
            if step > args.warmup_steps:
                timed_samples += bs
                timed_seconds += t1 - t0
        if seen == 0:
            break
        train_loss = float(loss_sum) / seen
        test_acc = evaluate(model, x_test, y_test, args.eval_batch) if args.eval and x_test.shape[0] else None
        sps = timed_samples / timed_seconds if timed_seconds > 0 else None
        timed_samples_total += timed_samples
        timed_seconds_total += timed_seconds
        per_epoch.append({"epoch": epoch, "steps": step, "train_loss": train_loss,
                          "test_accuracy": test_acc, "samples_per_second": sps})
        print("epoch %d  steps %d  train_loss %.4f  test_acc %s  samples/s %s"
              % (epoch, step, train_loss,
                 "%.2f%%" % (100 * test_acc) if test_acc is not None else "-",
                 "%.1f" % sps if sps is not None else "-"), flush=True)
        if done or (args.max_steps and step >= args.max_steps):
            break

    sps_total = timed_samples_total / timed_seconds_total if timed_seconds_total > 0 else None
    result = {
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "model": args.model,
        "dataset": dataset,
        "threads": args.threads,
        "batch": args.batch,
        "epochs": len(per_epoch),
        "steps": step,
        "lr": args.lr,
        "momentum": args.momentum,
        "weight_decay": args.weight_decay,
        "seed": args.seed,
        "warmup_steps": args.warmup_steps,
        "max_steps": args.max_steps,
        "timed_samples": timed_samples_total,
        "timed_seconds": timed_seconds_total,
        "samples_per_second": sps_total,
        "final_train_loss": per_epoch[-1]["train_loss"] if per_epoch else None,
        "final_test_accuracy": per_epoch[-1]["test_accuracy"] if per_epoch else None,
        "per_epoch": per_epoch,
    }
    print("total  steps %d  samples/s %s" % (step, "%.1f" % sps_total if sps_total else "-"), flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
