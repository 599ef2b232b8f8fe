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

With --workers N (N > 1) it trains data-parallel: it starts N copies of itself
(one per rank, --threads each), which meet over torch.distributed's Gloo backend
on loopback and train a DistributedDataParallel model, each on its shard of every
epoch's permutation (positions p with p % N == rank), --batch examples per worker
per step:

    nice -n 10 /usr/bin/python3 bench/pytorch_reference.py \
        --model mlp_fashion --workers 2 --threads 1 --max-steps 200 --no-eval

See bench/README.md for the details (data, timing rules, JSON fields).
"""

import argparse
import ctypes
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
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
                        "(default: max-steps*batch*workers when --max-steps is set, else 50000)")
    p.add_argument("--workers", type=int, default=1,
                   help="data-parallel worker processes (DistributedDataParallel over Gloo on "
                        "loopback); --threads and --batch are per worker (default 1)")
    p.add_argument("--worker-timeout", type=float, default=1800,
                   help="--workers > 1: seconds the whole run may take before the workers are "
                        "killed (default 1800)")
    p.add_argument("--comm-timeout", type=float, default=300,
                   help="--workers > 1: seconds a collective waits for its peers (default 300)")
    # Internal: set by the launcher on the workers it starts.
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--init-method", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error("--threads must be >= 1")
    if args.batch < 1 or args.epochs < 1:
        p.error("--batch and --epochs must be >= 1")
    if args.workers < 1:
        p.error("--workers must be >= 1")
    if args.rank is not None and not (0 <= args.rank < args.workers and args.init_method):
        p.error("--rank needs 0 <= rank < --workers and --init-method")
    return args


# --------------------------------------------------------------------------- launcher
# `--workers N` with N > 1 and no --rank: start N copies of this script, one per
# rank, and supervise them. This part does not import torch.
PARENT_PID_ENV = "PYTORCH_REFERENCE_PARENT_PID"
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """In a worker: get SIGTERM when the launcher dies, and exit at once if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    parent = os.environ.get(PARENT_PID_ENV)
    if parent and os.getppid() != int(parent):
        sys.exit("pytorch_reference: the launcher (pid %s) is gone" % parent)


class _Terminated(Exception):
    pass


def _raise_terminated(signum, frame):
    raise _Terminated(signal.Signals(signum).name)


def _stop(procs, grace=5.0):
    """SIGTERM the workers still running, then SIGKILL whatever is left after `grace` s."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch_workers(args):
    tmp = tempfile.mkdtemp(prefix="pytorch-ddp-")
    init_method = "file://" + os.path.join(tmp, "rendezvous")  # FileStore; a fresh file per run
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    env[PARENT_PID_ENV] = str(os.getpid())
    argv = [a for a in sys.argv[1:]]
    procs = []
    old = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for r in range(args.workers):
            cmd = [sys.executable, os.path.abspath(__file__)] + argv + [
                "--rank", str(r), "--init-method", init_method]
            # Only rank 0 talks; the others keep stderr for errors.
            procs.append(subprocess.Popen(cmd, env=env, stdout=None if r == 0 else subprocess.DEVNULL))
        deadline = time.monotonic() + args.worker_timeout
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                r, c = failed[0]
                print("pytorch_reference: rank %d exited with status %d; stopping the others" % (r, c),
                      file=sys.stderr, flush=True)
                return c if c > 0 else 128 - c
            if all(c == 0 for c in codes):
                return 0
            if time.monotonic() > deadline:
                print("pytorch_reference: the workers ran past --worker-timeout %g s; stopping them"
                      % args.worker_timeout, file=sys.stderr, flush=True)
                return 124
            time.sleep(0.05)
    except (KeyboardInterrupt, _Terminated) as e:
        print("pytorch_reference: interrupted (%s); stopping the workers" % (e or "SIGINT"),
              file=sys.stderr, flush=True)
        return 130
    finally:
        # A second signal must not cut the clean-up short.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig in old:
            signal.signal(sig, signal.SIG_IGN)
        _stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)
        signal.signal(signal.SIGINT, old_int)
        for sig, handler in old.items():
            signal.signal(sig, handler)


# Imported by another bench script (for its data loading and models), nothing
# here runs: that script sets its own threads.
if __name__ == "__main__":
    ARGS = parse_args()
    if ARGS.workers > 1 and ARGS.rank is None:
        sys.exit(launch_workers(ARGS))
    if ARGS.rank is not None:
        die_with_parent()
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
    workers = args.workers
    rank = args.rank if args.rank is not None else 0
    distributed = workers > 1
    if distributed:
        import datetime
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=args.init_method, world_size=workers, rank=rank,
                                timeout=datetime.timedelta(seconds=args.comm_timeout))
    # Only rank 0 evaluates; the other ranks need no test set.
    need_test = not distributed or (args.eval and rank == 0)

    if dataset == "fashion-mnist":
        x_train, y_train = load_fashion(args.data_dir, "train")
        if need_test:
            x_test, y_test = load_fashion(args.data_dir, "t10k")
        else:
            x_test, y_test = torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.int64)
    else:
        n = args.synthetic_size or (args.max_steps * args.batch * workers if args.max_steps else 50000)
        x_train, y_train = synthetic_cifar(n, args.seed + 1)
        x_test, y_test = synthetic_cifar(10000 if args.eval and need_test else 0, args.seed + 2)

    module = build()  # the same seed on every rank: identical initial parameters
    module.train()
    model = module
    if distributed:
        # CPU DDP, default bucket_cap_mb (25); it also broadcasts rank 0's parameters.
        model = torch.nn.parallel.DistributedDataParallel(module)
        # Dropout (vgg11_cifar) should not draw the same masks on every rank.
        torch.manual_seed(args.seed + 1 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    shuffle_gen = torch.Generator().manual_seed(args.seed)  # same permutation on every rank
    n_train = x_train.shape[0]
    # Rank r takes positions p of the permutation with p % workers == r. Ranks must
    # take the same number of steps, so every shard is cut to n_train // workers
    # examples (the odd examples out are skipped, as in Nereid).
    shard_size = n_train // workers

    if rank == 0:
        print("pytorch %s  model %s  dataset %s (%d train, %d test)  threads %d  batch %d  lr %g  momentum %g%s"
              % (torch.__version__, args.model, dataset, n_train, x_test.shape[0], args.threads,
                 args.batch, args.lr, args.momentum,
                 "  workers %d (DDP, gloo; threads and batch per worker)" % workers if distributed else ""),
              flush=True)

    step = 0
    timed_samples_total, timed_seconds_total = 0, 0.0
    rank_seconds_total = [0.0] * workers
    per_epoch = []
    done = False
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(n_train, generator=shuffle_gen)
        if distributed:
            perm = perm[rank::workers][:shard_size]
        loss_sum = torch.zeros((), dtype=torch.float64)
        seen = 0
        timed_samples, timed_seconds = 0, 0.0
        for start in range(0, perm.shape[0], args.batch):  # drop_last=False
            if args.max_steps and step >= args.max_steps:
                done = True
                break
            t0 = time.perf_counter()  # batch assembly counts as training time
            idx = perm[start:start + args.batch]
            xb = x_train.index_select(0, idx)
            yb = y_train.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()  # DDP: gradients are all-reduced (averaged) during backward
            opt.step()
            t1 = time.perf_counter()
            step += 1
            bs = idx.shape[0]
            loss_sum += loss.detach().double() * bs
            seen += bs
            if step > args.warmup_steps:
                timed_samples += bs
                timed_seconds += t1 - t0
        rank_seconds = [timed_seconds]
        if distributed:
            # Global figures: samples summed over the ranks, seconds of the slowest rank.
            sums = torch.tensor([float(loss_sum), float(seen), float(timed_samples)], dtype=torch.float64)
            dist.all_reduce(sums)
            secs = [torch.zeros(1, dtype=torch.float64) for _ in range(workers)]
            dist.all_gather(secs, torch.tensor([timed_seconds], dtype=torch.float64))
            rank_seconds = [float(t) for t in secs]
            loss_sum = sums[0]
            seen = int(round(float(sums[1])))
            timed_samples = int(round(float(sums[2])))
            timed_seconds = max(rank_seconds)
        if seen == 0:
            break
        train_loss = float(loss_sum) / seen
        test_acc = None
        if args.eval and rank == 0 and x_test.shape[0]:
            test_acc = evaluate(module, x_test, y_test, args.eval_batch)  # the plain module: no collectives
        if distributed and args.eval:
            dist.barrier()  # the other ranks wait for rank 0's evaluation
        sps = timed_samples / timed_seconds if timed_seconds > 0 else None
        timed_samples_total += timed_samples
        timed_seconds_total += timed_seconds
        rank_seconds_total = [a + b for a, b in zip(rank_seconds_total, rank_seconds)]
        per_epoch.append({"epoch": epoch, "steps": step, "train_loss": train_loss,
                          "test_accuracy": test_acc, "samples_per_second": sps})
        if rank == 0:
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
        "workers": workers,
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
    if distributed:
        # timed_samples: summed over the ranks; timed_seconds: per epoch the slowest
        # rank's, summed over the epochs; samples_per_second = their quotient (global).
        result.update({"backend": "gloo", "global_batch": args.batch * workers,
                       # what each step all-reduces (float32 gradients, all in DDP's buckets)
                       "gradient_bytes": sum(p.numel() * p.element_size() for p in module.parameters()),
                       "rank_timed_seconds": rank_seconds_total,
                       "throughput": "sum over ranks of timed samples / max over ranks of timed seconds"})
    if rank == 0:
        print("total  steps %d  samples/s %s" % (step, "%.1f" % sps_total if sps_total else "-"), flush=True)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)
                f.write("\n")
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
