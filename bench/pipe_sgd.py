#!/usr/bin/env python3
"""Pipe-SGD reproduction on an emulated cluster (bench/netem/cluster.sh).

Trains one model with 4 workers, each in its own network namespace behind a
shaped link, with:
  sync       synchronous allreduce SGD (data_parallel; lenet's gradients are one bucket,
             sent when the backward pass ends)
  sync_overlap  the same with buckets of --overlap-bucket-kb (64), each sent as soon as its
             gradients are computed, overlapping the rest of the backward pass (as DDP does)
  pipe2      Pipe-SGD, width 2 (pipeline(width=2))
  pipe2_fp16 Pipe-SGD, width 2, gradients on the wire as fp16 (compress(method=fp16))
  pipe2_ahead Pipe-SGD, width 2, each rank computing at its look-ahead (the lookahead pass)
  pipe2_fp16_ahead  both
and prints a table: time per iteration, speedup over sync and over sync_overlap,
time to a target test accuracy, final accuracy, bytes per iteration, and the
timing model's prediction (nereid model)
against the measurement. Writes DIR/results.json, DIR/curves.csv and, when
gnuplot is installed, DIR/accuracy_vs_time.png; every run's metrics, the
link measurements, the model's inputs and outputs and the ranks' logs go to
DIR/raw/, which git ignores.

Inputs the timing model gets, measured in this run:
  - the link: `nereid bench allreduce` on the same emulated network (alpha, beta,
    and the CPU it costs), once, before the training runs;
  - compute: N concurrent one-worker runs with --trace (the same CPU sharing as
    the cluster run, no communication), right before each strategy's run, since
    the machine's speed drifts; nereid model takes the expected slowest of N of
    their step times (each ring allreduce waits for the last rank), and their
    nodes' end times say when each gradient bucket can start;
  - the same N runs again while N ranks of `nereid bench allreduce` keep the
    emulated links busy (--busy-link-profile): how much communication slows the
    compute it overlaps.

Needs root (network namespaces); exits 77 with the harness's reason otherwise.
Example (about 11 minutes on 2 cores; the defaults):
  bench/pipe_sgd.py --workers 4 --rate 45mbit --model lenet_fashion --batch 256 --epochs 10
45mbit is where lenet's allreduce over 4 workers (~70 ms) and its compute with 4
workers on 2 cores (59-77 ms) are comparable, the case the 1.5x target is about.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
CLUSTER = os.path.join(ROOT, "bench/netem/cluster.sh")

def strategies(overlap_kb=64):
    """(name, label, passes between autodiff and sgd, passes after sgd, model flags) of each strategy."""
    overlap = f"data_parallel(bucket_kb={overlap_kb}),"
    return [
        ("sync", "synchronous allreduce", "", "", []),
        # Buckets small enough to start during the backward pass (DDP's overlap).
        ("sync_overlap", "synchronous, overlapped buckets", overlap, "",
         ["--passes", f"autodiff,{overlap}sgd(lr=0.01)"]),
        ("pipe2", "Pipe-SGD K=2", "pipeline(width=2),", "", ["--width", "2"]),
        ("pipe2_fp16", "Pipe-SGD K=2 + fp16", "compress(method=fp16),pipeline(width=2),", "",
         ["--width", "2", "--compression-ratio", "2"]),
        ("pipe2_ahead", "Pipe-SGD K=2 + lookahead", "pipeline(width=2),", ",lookahead", ["--width", "2"]),
        ("pipe2_fp16_ahead", "Pipe-SGD K=2 + fp16 + lookahead", "compress(method=fp16),pipeline(width=2),",
         ",lookahead", ["--width", "2", "--compression-ratio", "2"]),
    ] + [  # the codecs (the lookahead pass refuses them): the model prices each plan's payload (--passes)
        # and is given its encode/decode time
        (f"pipe2_{codec}", f"Pipe-SGD K=2 + {label}", f"compress({options}),pipeline(width=2),", "",
         ["--width", "2", "--passes", f"autodiff,compress({options}),pipeline(width=2),sgd(lr=0.01)"])
        for codec, label, options in CODECS]


# Pipe-SGD's codec rows: (name, label, compress options).
CODECS = [
    ("qsgd8", "QSGD 8-bit", "method=qsgd,bits=8,coding=fixed"),
    ("qsgd4", "QSGD 4-bit", "method=qsgd,bits=4,coding=fixed"),
    ("powersgd4", "PowerSGD rank 4", "method=powersgd,rank=4"),
]


def raw_dir(out):
    """OUT/raw: where a bench puts what its summary is made from (each run's metrics,
    link measurements, compute profiles, nereid model's outputs, the ranks' logs).
    .gitignore leaves every bench/results/**/raw/ out; OUT itself keeps the summary."""
    raw = os.path.join(out, "raw")
    os.makedirs(raw, exist_ok=True)
    return raw


def run(cmd, timeout, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, timeout=timeout, **kw)


def build():
    # ./nereid installs what is missing and builds -c opt.
    subprocess.run([os.path.join(ROOT, "nereid"), "--help"], check=True, stdout=subprocess.DEVNULL)


def network(args):
    """cluster.sh's flags for this run's emulated network."""
    return [CLUSTER, "--workers", str(args.workers), "--rate", args.rate, "--delay", args.delay,
            "--segment", args.segment]


def cluster(args, command, timeout, logs):
    return run(network(args) + ["--timeout", str(timeout), "--logs", logs, "--"] + command, timeout + 60)


def measure_link(args, out):
    """The link's allreduces on idle cores (link.json), then the same while
    every rank's worth of compute runs on the host (busy_compute_link.json,
    beside it): overlapped communication waits for cores that compute holds."""
    path = os.path.join(out, "link.json")
    # From 4K: the smallest size sets the floor under a ring step (a codec's
    # small messages; on 45 Mbit/s links a 4K allreduce over 4 ranks took
    # 6.9 ms, where alpha + S / beta fitted to 64K-1M says 1.9).
    bench = [NEREID, "bench", "allreduce", "--sizes", "4K,16K,64K,256K,1M", "--rounds", "3", "--json"]
    p = cluster(args, bench + [path], 600, os.path.join(out, "logs_link"))
    if p.returncode != 0:
        sys.exit(f"pipe_sgd: the link benchmark failed (exit {p.returncode})")
    load = []
    for r in range(args.workers):  # one-worker training runs: the ranks' compute, without their network
        cmd = [NEREID, "run"] + common_flags(args) + [
            "--passes", f"autodiff,sgd({args.sgd})", "--max-steps", "1000000", "--epochs", "1000", "--test-limit", "100"]
        load.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
    try:
        time.sleep(5)  # past their start-up (data loading), into the steps
        if any(q.poll() is not None for q in load):
            sys.exit("pipe_sgd: a compute load run ended before the link benchmark beside it")
        p = cluster(args, bench + [busy_compute_link(path)], 600, os.path.join(out, "logs_busy_compute_link"))
    finally:
        for q in load:
            q.terminate()
        for q in load:
            q.wait(timeout=60)
    if p.returncode != 0:
        sys.exit(f"pipe_sgd: the link benchmark beside compute failed (exit {p.returncode})")
    return path


def busy_compute_link(link):
    """Where measure_link put the link measured beside busy compute."""
    return os.path.join(os.path.dirname(link), "busy_compute_link.json")


def common_flags(args):
    limit = ["--train-limit", str(args.train_limit)] if args.train_limit else []
    return [os.path.join(ROOT, "models", args.model + ".pbtxt"), "--batch", str(args.batch), "--threads", "1",
            "--seed", str(args.seed), "--quiet"] + limit


def start_busy_link(args, out):
    """Allreduces that keep every worker's link busy until stopped (for the busy-link profile)."""
    cmd = network(args) + ["--timeout", "900", "--logs", os.path.join(out, "logs_busy_link"), "--", NEREID, "bench",
                           "allreduce", "--sizes", "256K", "--rounds", "100000", "--no-link-probe"]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    log = os.path.join(out, "busy_link.log")
    with open(log, "w") as f:
        load = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    # Rank 0 says when its timed allreduces begin: from then on the links are busy.
    deadline = time.monotonic() + 120
    while "bench allreduce: timing" not in open(log).read():
        if load.poll() is not None or time.monotonic() > deadline:
            load.kill()
            sys.exit(f"pipe_sgd: the busy-link allreduces did not start (see {log})")
        time.sleep(0.2)
    return load


def stop_busy_link(load):
    """Stops the load (cluster.sh stops its workers, removes the namespaces); it must not have ended first."""
    if load.poll() is not None:
        sys.exit(f"pipe_sgd: the busy-link allreduces stopped before the profile ended ({load.returncode})")
    load.terminate()
    load.wait(timeout=120)


def profile_compute(args, out, name, flags=None, passes=None):
    """N one-worker runs at once: the cluster's CPU sharing without its network
    (`flags` and `passes`: the run's, by default common_flags and sgd)."""
    procs, traces = [], []
    for r in range(args.workers):
        trace = os.path.join(out, f"profile_{name}{r}.json")
        traces.append(trace)
        cmd = [NEREID, "run"] + (flags or common_flags(args)) + [
            "--passes", passes or f"autodiff,sgd({args.sgd})", "--max-steps", str(args.profile_steps), "--epochs", "1",
            "--test-limit", "100", "--trace", trace]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
    for p in procs:
        if p.wait(timeout=600) != 0:
            sys.exit("pipe_sgd: a profiling run failed")
    return ",".join(traces)


def model_prediction(args, out, link, profile, name, extra):
    path = os.path.join(out, f"model_{name}.json")
    cmd = [NEREID, "model", os.path.join(ROOT, "models", args.model + ".pbtxt"), "--workers", str(args.workers),
           "--batch", str(args.batch), "--profile", profile, "--link", link, "--link-fit", "--json", path] + extra
    p = run(cmd, 120, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("pipe_sgd: nereid model failed")
    print(p.stdout, file=sys.stderr)
    with open(path) as f:
        return json.load(f)


def profile_pair(args, out, name):
    """Compute profiled right before a run (this machine's speed drifts by up
    to 2x within minutes: a 2-worker profile taken once at the start gave
    26.6 ms of compute, ones taken before each run 28.4-31.9), alone and
    beside a busy link (how much overlapped communication slows the compute)."""
    profile = profile_compute(args, out, name)
    load = start_busy_link(args, out)
    try:
        busy_profile = profile_compute(args, out, name + "_busy")
    finally:
        stop_busy_link(load)
    return profile, busy_profile


def predict(args, out, link, name, model_flags, profiles=None, codec_seconds=0.0):
    """nereid model's seconds per iteration for strategy `name`, from
    `profiles` (profile_pair's; taken now when None) and, for a codec, its
    encode and decode time per step measured in the run (the model has no
    cost model of a codec's arithmetic)."""
    profile, busy_profile = profiles or profile_pair(args, out, name)
    codec = ["--codec-ms", f"{codec_seconds * 1000:.3f}"] if codec_seconds > 0 else []
    prediction = model_prediction(args, out, link, profile, name, model_flags + codec + [
        "--busy-link-profile", busy_profile, "--busy-compute-link", busy_compute_link(link)])
    return predicted_seconds(prediction, name)


def predicted_seconds(prediction, name):
    want = "pipe" if name.startswith("pipe") else "sync"
    for s in prediction["strategies"]:
        if s["name"].startswith(want):
            return s["seconds_per_iteration"]
    raise KeyError(f"no {want} strategy in nereid model's output: {prediction['strategies']}")


def train(args, out, name, passes, after):
    metrics = os.path.join(out, f"{name}.json")
    cmd = [NEREID, "run"] + common_flags(args) + [
        "--passes", f"autodiff,{passes}sgd({args.sgd}){after}", "--epochs", str(args.epochs), "--metrics-json", metrics,
        "--comm-timeout", "120"]
    started = time.monotonic()
    p = cluster(args, cmd, args.run_timeout, os.path.join(out, f"logs_{name}"))
    if p.returncode != 0:
        sys.exit(f"pipe_sgd: the {name} run failed (exit {p.returncode})")
    with open(metrics) as f:
        m = json.load(f)
    m["outer_wall_seconds"] = time.monotonic() - started
    return m


def accuracy_curve(m, target):
    """(training seconds, test accuracy) after each epoch, and the seconds to `target` (None: never)."""
    elapsed, curve, to_target = 0.0, [], None
    for e in m["per_epoch"]:
        elapsed += e["seconds"]
        curve.append((elapsed, e["test_accuracy"]))
        if to_target is None and e["test_accuracy"] >= target:
            to_target = elapsed
    return curve, to_target


def summarize(args, name, label, m, predicted):
    train_seconds = sum(e["seconds"] for e in m["per_epoch"])
    per_iteration = train_seconds / m["steps"]
    curve, to_target = accuracy_curve(m, args.target)
    return {
        "name": name, "label": label, "seconds_per_iteration": per_iteration,
        "predicted_seconds_per_iteration": predicted,
        "prediction_error": (predicted - per_iteration) / per_iteration,
        "seconds_to_target": to_target, "final_test_accuracy": m["final_test_accuracy"],
        "bytes_sent_per_step": m["bytes_sent_per_step"], "steps": m["steps"], "curve": curve,
        "passes": m["passes"],
    }


def plot(out, rows, title):
    if shutil.which("gnuplot") is None:
        print("pipe_sgd: gnuplot not installed (apt-get install gnuplot-nox): no plot", file=sys.stderr)
        return None
    csv = os.path.join(out, "curves.csv")
    png = os.path.join(out, "accuracy_vs_time.png")
    plots = []
    for i, r in enumerate(rows):
        data = os.path.join(tempfile.gettempdir(), f"pipe_sgd_curve_{os.getpid()}_{r['name']}.dat")
        with open(data, "w") as f:
            f.write("0 NaN\n" + "".join(f"{t:.3f} {a * 100:.3f}\n" for t, a in r["curve"]))
        plots.append(f"'{data}' using 1:2 with linespoints lw 2 pt {i + 5} title '{r['label']}'")
    script = (f"set terminal pngcairo size 900,560 font ',11'\nset output '{png}'\nset title '{title}' noenhanced\n"
              "set xlabel 'training wall-clock time (s)'\nset ylabel 'test accuracy (%)'\nset grid\n"
              "set key bottom right noenhanced\nplot " + ", ".join(plots) + "\n")
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    with open(csv, "w") as f:
        f.write("strategy,seconds,test_accuracy\n")
        for r in rows:
            f.writelines(f"{r['name']},{t:.3f},{a:.4f}\n" for t, a in r["curve"])
    return png


def table(rows, sync_row, overlap_row):
    vs_overlap = overlap_row is not None
    lines = ["| strategy | s/iteration | speedup | " + ("vs overlapped sync | " if vs_overlap else "") +
             "predicted s/iteration (error) | time to target | final accuracy | bytes sent/iteration |",
             "|---|---|---|---|---|---|---|" + ("---|" if vs_overlap else "")]
    for r in rows:
        target = f"{r['seconds_to_target']:.1f} s" if r["seconds_to_target"] is not None else "not reached"
        overlap = (f"{overlap_row['seconds_per_iteration'] / r['seconds_per_iteration']:.2f}x | "
                   if vs_overlap else "")
        lines.append(
            f"| {r['label']} | {r['seconds_per_iteration'] * 1000:.1f} ms | "
            f"{sync_row['seconds_per_iteration'] / r['seconds_per_iteration']:.2f}x | {overlap}"
            f"{r['predicted_seconds_per_iteration'] * 1000:.1f} ms ({r['prediction_error'] * 100:+.0f}%) | {target} | "
            f"{r['final_test_accuracy'] * 100:.2f}% | {r['bytes_sent_per_step'] / 1e6:.2f} MB |")
    return "\n".join(lines)


def write_report(args, title, rows, text):
    """Prints the table under its title and keeps it, with the rows and settings, in OUT/results.json."""
    print(f"\n{title}\n\n{text}\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"settings": vars(args), "rows": rows, "table": text}, f, indent=1)


def add_network_args(ap, rate, rate_help="each link's rate (cluster.sh --rate)"):
    """The emulated cluster's flags, as network() reads them."""
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rate", default=rate, help=rate_help)
    ap.add_argument("--delay", default="0", help="needs the kernel's netem qdisc")
    ap.add_argument("--segment", default="auto", help="cluster.sh --segment: the links' TCP segment cap")


def add_run_args(ap, epochs):
    """The cluster and training flags train() and common_flags() read."""
    add_network_args(ap, "45mbit")
    ap.add_argument("--model", default="lenet_fashion")
    ap.add_argument("--batch", type=int, default=256, help="per worker")
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--sgd", default="lr=0.02,momentum=0.9,schedule=cosine,warmup_epochs=1",
                    help="sgd pass options")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--overlap-bucket-kb", type=int, default=64,
                    help="sync_overlap's data_parallel bucket cap (the default 4096 puts lenet in one bucket)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(ap, epochs=10)
    ap.add_argument("--target", type=float, default=0.85, help="target test accuracy (fraction)")
    ap.add_argument("--profile-steps", type=int, default=60)
    ap.add_argument("--run-timeout", type=int, default=1800)
    ap.add_argument("--only", default="", help="comma-separated strategies (default all)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/pipe_sgd"))
    args = ap.parse_args()

    check = subprocess.run([CLUSTER, "--check", "--delay", args.delay])
    if check.returncode == 77:
        sys.exit(77)
    os.makedirs(args.out, exist_ok=True)
    raw = raw_dir(args.out)
    build()
    link = measure_link(args, raw)
    rows = []
    for name, label, passes, after, model_flags in strategies(args.overlap_bucket_kb):
        if args.only and name not in args.only.split(","):
            continue
        profiles = profile_pair(args, raw, name)  # right before the run it predicts
        m = train(args, raw, name, passes, after)
        predicted = predict(args, raw, link, name, model_flags, profiles, m.get("codec_seconds_per_step", 0.0))
        rows.append(summarize(args, name, label, m, predicted))
    sync_row = next((r for r in rows if r["name"] == "sync"), rows[0])
    overlap_row = next((r for r in rows if r["name"] == "sync_overlap"), None)
    title = (f"{args.model}, {args.workers} workers, {args.rate} links ({args.segment} segments), "
             f"{args.delay} latency, batch {args.batch}/worker")
    png = plot(args.out, rows, title)
    text = table(rows, sync_row, overlap_row)
    print(f"\n{title}; target accuracy {args.target * 100:.0f}%\n\n{text}\n")
    if png:
        print(f"plot: {os.path.relpath(png, ROOT)}")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"settings": vars(args), "rows": rows, "table": text}, f, indent=1)


if __name__ == "__main__":
    main()
