#!/usr/bin/python3
"""Data-parallel training throughput: Nereid's multi-worker training vs PyTorch DDP (Gloo).

For each model and worker count, runs `nereid run --workers N` and
`bench/pytorch_reference.py --workers N` (DistributedDataParallel, Gloo backend,
loopback) back to back, alternating which goes first, --repeats times each, with
the same threads per worker, batch per worker and steps per worker. Every repeat
also runs both frameworks with 1 worker, so that scaling efficiency
(throughput_N / (N * throughput_1)) comes from the same session. Prints every
run, then per configuration the median samples/s of each framework, their ratio
nereid/pytorch and each framework's scaling efficiency.

    /usr/bin/python3 bench/ddp_vs_pytorch.py [--models mlp_fashion,lenet_fashion]
        [--workers-list 2,4] [--threads 1] [--batch 64] [--max-steps 200]
        [--repeats 3] [--transport gloo|shm] [--json PATH]

Throughput is global (all workers' samples) per second of training steps:
- Nereid: samples summed over the ranks / rank 0's wall time of the epoch's
  steps (batch assembly, forward, backward, all-reduce, update), from its
  --metrics-json; every step is timed, the first included.
- PyTorch: samples summed over the ranks / the slowest rank's summed step times
  (batch assembly, forward, backward with DDP's all-reduce, optimizer step);
  the first --pytorch-warmup steps (default 3) run but are not timed.
Neither includes start-up, data loading from disk or evaluation. Only same-run
ratios mean anything: this machine's speed drifts within minutes. See
bench/README.md.
"""
import argparse
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID_BINARY = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
PYTORCH_SCRIPT = os.path.join(ROOT, "bench/pytorch_reference.py")
PR_SET_PDEATHSIG = 1
FRAMEWORKS = ("nereid", "pytorch")


def _die_with_us():
    # Runs in the child between fork and exec: SIGTERM it if this script dies.
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _kill_group(proc, grace=5.0):
    """SIGTERM the process group that `proc` leads (started by this script with
    start_new_session), SIGKILL what is left of it after `grace` s.
    Returns whether any process of the group was still there."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader: a zombie would keep the group alive
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def run_command(cmd, env, timeout):
    """Runs cmd in a session of its own (its workers join its process group) and
    makes sure that nothing of that group outlives the call. Returns (rc, stderr tail, seconds)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True, preexec_fn=_die_with_us)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            rc = 124
            print(f"  timed out after {timeout} s; killed", file=sys.stderr, flush=True)
        except BaseException:  # Ctrl-C, SIGTERM: take the run's processes down with us
            _kill_group(proc)
            proc.wait()
            raise
        seconds = time.monotonic() - t0
        # The launcher is gone; any worker still in its group is a straggler.
        if _kill_group(proc, grace=2.0):
            print(f"  warning: processes of {os.path.basename(cmd[0])}'s group outlived it; killed them",
                  file=sys.stderr, flush=True)
        err.seek(0)
        tail = err.read()[-2000:].decode(errors="replace")
    return rc, tail, seconds


def read_metrics(rec, path):
    """The run's metrics JSON, or None (and rec marked failed) when the run failed or wrote none."""
    if rec["rc"] != 0:
        return None
    try:
        with open(path) as f:
            m = json.load(f)
        if not m.get("samples_per_second"):
            raise ValueError("no samples_per_second")
        return m
    except (OSError, ValueError) as e:
        rec["rc"] = -1
        rec["error"] = f"exit 0, but no usable metrics in {path}: {e}"
        return None


def run_nereid(args, model, workers, out):
    cmd = [args.nereid, "run", f"models/{model}.pbtxt", "--workers", str(workers), "--threads", str(args.threads),
           "--batch", str(args.batch), "--max-steps", str(args.max_steps), "--epochs", "1",
           "--test-limit", "1000", "--quiet", "--metrics-json", out]
    if workers > 1:
        cmd += ["--transport", args.transport]
    if model.endswith("_cifar"):
        cmd += ["--dataset", "synthetic"]
    rc, tail, seconds = run_command(cmd, dict(os.environ), args.timeout)
    rec = {"framework": "nereid", "rc": rc, "run_seconds": seconds, "command": " ".join(cmd)}
    m = read_metrics(rec, out)
    if m is not None:
        rec.update({"samples_per_second": m["samples_per_second"], "steps": m.get("steps"),
                    "bytes_sent_per_step": m.get("bytes_sent_per_step"),
                    "bytes_received_per_step": m.get("bytes_received_per_step"),
                    "wall_seconds": m.get("wall_seconds")})
    elif rc != 0:
        rec["error"] = tail
    return rec


def run_pytorch(args, model, workers, out):
    cmd = ["/usr/bin/python3", PYTORCH_SCRIPT, "--model", model, "--workers", str(workers),
           "--threads", str(args.threads), "--batch", str(args.batch),
           "--max-steps", str(args.max_steps + args.pytorch_warmup), "--warmup-steps", str(args.pytorch_warmup),
           "--epochs", "1", "--no-eval", "--worker-timeout", str(args.timeout), "--json", out]
    env = dict(os.environ)
    # Pin PyTorch's BLAS / OpenMP threads per worker (pytorch_reference.py does too,
    # before importing torch; set_num_threads alone does not reach OpenBLAS).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    rc, tail, seconds = run_command(cmd, env, args.timeout + 30)
    rec = {"framework": "pytorch", "rc": rc, "run_seconds": seconds, "command": " ".join(cmd)}
    m = read_metrics(rec, out)
    if m is not None:
        rec.update({"samples_per_second": m["samples_per_second"], "steps": m.get("steps"),
                    "timed_seconds": m.get("timed_seconds"), "gradient_bytes": m.get("gradient_bytes"),
                    "rank_timed_seconds": m.get("rank_timed_seconds")})
    elif rc != 0:
        rec["error"] = tail
    return rec


RUNNERS = {"nereid": run_nereid, "pytorch": run_pytorch}


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def print_run(rec):
    head = f"{rec['model']:14} workers {rec['workers']}  repeat {rec['repeat']}  {rec['framework']:8}"
    if rec["rc"] != 0:
        print(f"{head} FAILED (exit {rec['rc']})\n{rec.get('error', '')}", flush=True)
        return
    extra = ""
    if rec.get("bytes_sent_per_step") is not None and rec["workers"] > 1:
        extra = f"  sent {rec['bytes_sent_per_step'] / 2**20:.2f} MiB/step/worker"
    if rec.get("gradient_bytes") is not None:
        extra = f"  gradients {rec['gradient_bytes'] / 2**20:.2f} MiB/step"
    print(f"{head} {rec['samples_per_second']:9.1f} samples/s  ({rec['run_seconds']:.1f} s run){extra}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mlp_fashion,lenet_fashion")
    p.add_argument("--workers-list", default="2,4", help="worker counts to compare (1 is always run too)")
    p.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    p.add_argument("--batch", type=int, default=64, help="batch per worker (default 64)")
    p.add_argument("--max-steps", type=int, default=200, help="timed steps per worker (default 200)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--transport", default="gloo", choices=("gloo", "shm"),
                   help="Nereid's workers talk over gloo (TCP, like PyTorch's) or shm (shared memory)")
    p.add_argument("--pytorch-warmup", type=int, default=3,
                   help="untimed PyTorch steps run before the --max-steps timed ones (default 3)")
    p.add_argument("--timeout", type=int, default=600, help="seconds one run may take before it is killed")
    p.add_argument("--frameworks", default="nereid,pytorch",
                   help="which to run (e.g. pytorch alone while Nereid is being built)")
    p.add_argument("--nereid", default=NEREID_BINARY, help="the nereid binary (default: bazel-out/k8-opt/...)")
    p.add_argument("--no-build", action="store_true",
                   help="use the nereid binary as it is (default: bring it up to date with ./nereid first)")
    p.add_argument("--json", default=None, help="write every run and the summary to this path")
    args = p.parse_args()
    models = [m for m in args.models.split(",") if m]
    counts = sorted({int(w) for w in args.workers_list.split(",") if w} | {1})
    frameworks = [f for f in args.frameworks.split(",") if f]
    if any(f not in FRAMEWORKS for f in frameworks) or not frameworks:
        p.error("--frameworks: nereid and/or pytorch")
    if min(counts) < 1 or args.threads < 1 or args.batch < 1 or args.max_steps < 1 or args.repeats < 1:
        p.error("workers, --threads, --batch, --max-steps and --repeats must be >= 1")

    subprocess.run([os.path.join(ROOT, "setup.sh")] + (["--bench"] if "pytorch" in frameworks else []), check=True)
    if "nereid" in frameworks:
        if not args.no_build:
            # The ./nereid wrapper builds with `bazel build -c opt` when out of date.
            subprocess.run([os.path.join(ROOT, "nereid"), "--help"], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL)
        if not os.access(args.nereid, os.X_OK):
            sys.exit(f"error: no nereid binary at {args.nereid} (build it with ./nereid, or pass --nereid)")

    cores = len(os.sched_getaffinity(0))
    load_start = os.getloadavg()
    print(f"cores {cores}  load average {load_start[0]:.2f}  threads/worker {args.threads}  batch/worker "
          f"{args.batch}  steps/worker {args.max_steps} (+{args.pytorch_warmup} untimed for PyTorch)  "
          f"repeats {args.repeats}", flush=True)
    oversubscribed = {w for w in counts if w * args.threads > cores}
    for w in sorted(oversubscribed):
        print(f"WARNING: {w} workers x {args.threads} threads = {w * args.threads} threads on {cores} cores: "
              f"oversubscribed; those runs time-share the cores, so they measure contention, not scaling",
              flush=True)
    if load_start[0] > 0.5:
        print(f"WARNING: the machine is not idle (load average {load_start[0]:.2f}); throughput figures "
              f"will be low and noisy", flush=True)

    tmp = tempfile.mkdtemp(prefix="ddp-vs-pytorch-")
    runs = []
    try:
        for model in models:
            for r in range(args.repeats):
                for workers in counts:
                    # Alternate which framework goes first, so drift hits both alike.
                    order = frameworks if r % 2 == 0 else frameworks[::-1]
                    for fw in order:
                        out = os.path.join(tmp, f"{fw}.json")
                        if os.path.exists(out):
                            os.remove(out)
                        rec = RUNNERS[fw](args, model, workers, out)
                        rec.update({"model": model, "workers": workers, "threads": args.threads,
                                    "batch": args.batch, "max_steps": args.max_steps, "repeat": r + 1})
                        runs.append(rec)
                        print_run(rec)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # Summary: medians per configuration; efficiency from the medians.
    summary = []
    for model in models:
        med = {}
        for workers in counts:
            for fw in frameworks:
                med[fw, workers] = median_or_none([x.get("samples_per_second") for x in runs
                                                   if x["model"] == model and x["workers"] == workers
                                                   and x["framework"] == fw])
        for workers in counts:
            row = {"model": model, "workers": workers, "threads": args.threads, "batch": args.batch,
                   "max_steps": args.max_steps, "oversubscribed": workers in oversubscribed}
            for fw in frameworks:
                sps, base = med[fw, workers], med[fw, 1]
                row[f"{fw}_samples_per_second"] = sps
                row[f"{fw}_runs"] = [x.get("samples_per_second") for x in runs if x["model"] == model and
                                     x["workers"] == workers and x["framework"] == fw]
                row[f"{fw}_scaling_efficiency"] = sps / (workers * base) if sps and base else None
            if "nereid" in frameworks:
                row["nereid_bytes_sent_per_step"] = median_or_none(
                    [x.get("bytes_sent_per_step") for x in runs if x["model"] == model and
                     x["workers"] == workers and x["framework"] == "nereid"])
            if "pytorch" in frameworks:
                row["pytorch_gradient_bytes"] = median_or_none(
                    [x.get("gradient_bytes") for x in runs if x["model"] == model and
                     x["workers"] == workers and x["framework"] == "pytorch"])
            if len(frameworks) == 2:
                n, t = row["nereid_samples_per_second"], row["pytorch_samples_per_second"]
                row["ratio"] = n / t if n and t else None
            summary.append(row)

    load_end = os.getloadavg()
    print(f"\nmedians of {args.repeats} runs; efficiency = samples/s(N) / (N x samples/s(1)); "
          f"load average at the end {load_end[0]:.2f}")
    head = f"{'model':14} {'workers':>7} {'threads':>7}"
    for fw in frameworks:
        head += f" {fw + '/s':>10} {fw + '_eff':>11}"
    if len(frameworks) == 2:
        head += f" {'ratio':>6}"
    if "nereid" in frameworks:
        head += f" {'sent MiB/step':>13}"
    if "pytorch" in frameworks:
        head += f" {'grad MiB':>8}"
    print(head)
    for row in summary:
        line = f"{row['model']:14} {row['workers']:7d} {row['threads']:7d}"
        for fw in frameworks:
            line += (f" {fmt(row[fw + '_samples_per_second'], '10.0f'):>10}"
                     f" {fmt(row[fw + '_scaling_efficiency'], '11.2f'):>11}")
        if len(frameworks) == 2:
            line += f" {fmt(row['ratio'], '6.2f'):>6}"
        if "nereid" in frameworks:
            b = row["nereid_bytes_sent_per_step"]
            line += f" {fmt(b / 2**20 if b is not None and row['workers'] > 1 else None, '13.2f'):>13}"
        if "pytorch" in frameworks:
            g = row["pytorch_gradient_bytes"]
            line += f" {fmt(g / 2**20 if g is not None else None, '8.2f'):>8}"
        if row["oversubscribed"]:
            line += "  (oversubscribed)"
        print(line, flush=True)
    if "nereid" in frameworks:
        print("sent MiB/step: Nereid's bytes sent per worker per step (its traffic counters)")
    if "pytorch" in frameworks:
        print("grad MiB: the float32 gradients PyTorch DDP all-reduces every step (a ring all-reduce "
              "sends 2(N-1)/N of that per worker)")
    if oversubscribed:
        print(f"(oversubscribed: workers x threads > {cores} cores; efficiency below 1 is expected there)")

    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"cores": cores, "load_average_start": load_start, "load_average_end": load_end,
                       "config": vars(args), "workers_counts": counts, "summary": summary, "runs": runs},
                      f, indent=1)
            f.write("\n")
    failed = [x for x in runs if x["rc"] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    # SIGTERM/SIGHUP -> SystemExit, so that run_command's clean-up kills the run in flight.
    for _sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(_sig, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(main())
