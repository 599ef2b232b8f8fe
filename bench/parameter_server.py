#!/usr/bin/env python3
"""Parameter servers against data parallelism (ring allreduce).

A model on Fashion-MNIST (or synthetic CIFAR-shaped data for vgg11_cifar),
W workers, the strategies alternated for --rounds rounds (the machine's speed
drifts, so ratios are taken within a round): data parallel on W ranks; a
plain parameter server (one server, each tensor one message); and the
chunked server (chunks of --chunk-kb) on each server count of --servers.
--split adds rows with split=true (chunks, not parameters, balanced over
the servers); --colocated two rows where every rank trains and serves a share
(colocated=true: exchange=collective, sharded, and exchange=p2p, split);
--ssp adds stale-synchronous rows (mode=ssp, each staleness listed, on the
first server count); --slow-ms slows rank 1's every step (NEREID_FAULTS
slow=, a straggler) in every run. Prints s/step (rank 0's steps after its
first, which holds start-up: initial values, connections) and the first
step's own time, the speedup against data
parallel, bytes sent per rank and step (servers included in the average),
the final loss and test accuracy and, with --rate, `nereid model`'s
prediction of each row (compute profiled from --workers one-worker runs
taken at once, sharing the cores as the cluster's ranks do; --slow-ms as
its straggler). On loopback
(the launcher; --transport, and --plain-transport for the plain server's row) or, with --rate, on an emulated cluster where every rank has
the same link and the servers --server-rate (bench/netem/cluster.sh, needs
root; --congestion-control picks the emulated hosts' TCP congestion control,
else the host's default). The model takes both links as `nereid bench
allreduce` measures them between two emulated ranks at their rates
(--nominal-link: their nominal rates instead). Writes the table to
OUT/table_MODEL_RATE.md; each run's metrics, the link measurements, compute
profiles, the model's outputs and the ranks' logs go to OUT/raw/, which git
ignores (bench/results/parameter_server/remodel.py reads them there).

Example (a few minutes on 2 cores):
  bench/parameter_server.py --model mlp_fashion --workers 2 --servers 1,2 --steps 40
  bench/parameter_server.py --model mlp_fashion --workers 4 --servers 1,2 --steps 12 --rate 45mbit
  bench/parameter_server.py --model lenet_fashion --workers 4 --servers 1 --ssp 1,2 --slow-ms 30 --rate 45mbit
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
CLUSTER = os.path.join(ROOT, "bench/netem/cluster.sh")


def train(args, ranks, passes, out, name, servers=0, transport=None):
    metrics = os.path.join(out, name + ".json")
    flags = [os.path.join(ROOT, "models", args.model + ".pbtxt"), "--batch", str(args.batch), "--threads", "1",
             "--epochs", str(args.epochs), "--train-limit", str(args.steps * args.batch * args.workers),
             "--test-limit", str(args.test_limit),
             "--quiet", "--comm-timeout", "300", "--metrics-json", metrics, "--passes", passes]
    if args.model == "vgg11_cifar":
        flags += ["--dataset", "synthetic"]
    if args.rate:
        cmd = [CLUSTER, "--workers", str(ranks), "--rate", args.rate, "--timeout", "3600", "--logs",
               os.path.join(out, "logs_" + name)] + congestion_control(args)
        for r in range(ranks - servers, ranks):  # the servers are the last ranks
            cmd += ["--rank-rate", f"{r}={args.server_rate}"]
        cmd += ["--", NEREID, "run"] + flags
    else:
        cmd = [NEREID, "run"] + flags + ["--workers", str(ranks), "--transport", transport or args.transport]
    env = dict(os.environ)
    if args.slow_ms > 0:
        env["NEREID_FAULTS"] = f"rank=1:slow={args.slow_ms}ms"
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    if subprocess.run(cmd, timeout=3700, env=env).returncode != 0:
        sys.exit(f"parameter_server: failed: {' '.join(cmd)}")
    with open(metrics) as f:
        return json.load(f)


def one_worker_runs(args, steps, test_limit, outputs, what):
    """--workers one-worker runs at once (the cores shared as in the runs with workers), each of `steps`
    steps with no exchange; outputs[w]: the flags that say where rank w's run writes."""
    procs = []
    for flags in outputs:
        cmd = [NEREID, "run", os.path.join(ROOT, "models", args.model + ".pbtxt"), "--batch", str(args.batch),
               "--threads", "1", "--epochs", "1", "--train-limit", str(steps * args.batch), "--test-limit",
               str(test_limit), "--quiet", "--passes", f"autodiff,{args.optimizer}"] + flags
        if args.model == "vgg11_cifar":
            cmd += ["--dataset", "synthetic"]
        procs.append(subprocess.Popen(cmd))
    for p in procs:
        if p.wait(timeout=3700) != 0:
            sys.exit(f"parameter_server: a {what} run failed")


def profile(args, out):
    """Traces of one-worker runs taken at once, for `nereid model`."""
    traces = [os.path.join(out, f"profile_{args.model}_{w}.json") for w in range(args.workers)]
    one_worker_runs(args, 30, 64, [["--trace", t] for t in traces], "profiling")
    return ",".join(traces)


def compute_alone(args, out, name):
    """The floor under every row: each worker its whole step, no exchange. Returns the median rank's
    metrics."""
    paths = [os.path.join(out, f"{name}_{w}.json") for w in range(args.workers)]
    one_worker_runs(args, args.steps, args.test_limit, [["--metrics-json", p] for p in paths], "compute-alone")
    metrics = [json.load(open(path)) for path in paths]
    done = lambda m: m["step_finished_seconds"][-1] - m["step_finished_seconds"][0]
    return sorted(metrics, key=done)[len(metrics) // 2]


def congestion_control(args):
    """cluster.sh's flag for --congestion-control (none: the host's default)."""
    return ["--congestion-control", args.congestion_control] if args.congestion_control else []


def measure_link(args, out, rate=None, name="link"):
    """A link of `rate` (default --rate) as `nereid bench allreduce` measures it between two ranks
    (latency and the payload's rate, TCP's headers and the transport's costs included)."""
    path = os.path.join(out, name + ".json")
    cmd = [CLUSTER, "--workers", "2", "--rate", rate or args.rate, "--timeout", "900", "--logs",
           os.path.join(out, "logs_" + name)] + congestion_control(args) + [
           "--", NEREID, "bench", "allreduce", "--sizes", "64K,256K,1M", "--rounds", "3", "--json", path]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    if subprocess.run(cmd, timeout=960).returncode != 0:
        sys.exit("parameter_server: the link benchmark failed")
    return path


def predict(args, traces, link, server_link, servers, chunk_kb, staleness, out, split=False):
    """`nereid model`'s rows for these settings, by name."""
    path = os.path.join(out, f"model_{servers}_{chunk_kb:g}_{staleness}{'_split' if split else ''}.json")
    gbit = lambda rate: float(rate[:-4]) / 1000 if rate.endswith("mbit") else float(rate[:-4])
    link_flags = (["--link", link] if link else
                  ["--latency-us", str(args.model_latency_us), "--bandwidth-gbit", str(gbit(args.rate))])
    cmd = [NEREID, "model", os.path.join(ROOT, "models", args.model + ".pbtxt"), "--workers", str(args.workers),
           "--batch", str(args.batch), "--profile", traces] + link_flags + [
           *(["--server-link", server_link] if server_link else ["--server-bandwidth-gbit", str(gbit(args.server_rate))]),
           "--servers", str(servers), "--chunk-kb", f"{chunk_kb:g}", "--staleness", str(max(staleness, 1)),
           "--passes", f"autodiff,data_parallel,{args.optimizer}", "--json", path,
           "--straggler-ms", str(args.slow_ms)] + (["--split"] if split else [])
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return {s["name"]: s["seconds_per_iteration"] for s in json.load(f)["strategies"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="lenet_fashion")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", default="1,2", help="server counts of the chunked server")
    ap.add_argument("--chunk-kb", type=float, default=None,
                    help="the chunked rows' chunk_kb (default: 32 with --rate, where a chunk's pull should "
                         "follow its push closely; 256 on loopback, where each message's fixed cost dominates)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="per worker")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rate", default="", help="emulated links of this rate, e.g. 45mbit (default: loopback)")
    ap.add_argument("--server-rate", default="1gbit", help="with --rate: the servers' links")
    ap.add_argument("--transport", default="auto",
                    help="on loopback: how the ranks talk (nereid run --transport: auto, shm, gloo)")
    ap.add_argument("--plain-transport", default="",
                    help="on loopback: the plain server's transport (default: --transport), e.g. gloo, the "
                         "baseline of a server stack over Gloo TCP")
    ap.add_argument("--congestion-control", default="",
                    help="with --rate: the emulated hosts' TCP congestion control, e.g. cubic (default: the host's)")
    ap.add_argument("--only", default="", help="row numbers to run (0-based), e.g. 2,3; data parallel always")
    ap.add_argument("--optimizer", default="sgd(lr=0.02,momentum=0.9)")
    ap.add_argument("--epochs", type=int, default=1, help="each of --steps steps")
    ap.add_argument("--split", action="store_true", help="add split=true rows (chunks balanced over servers)")
    ap.add_argument("--colocated", action="store_true",
                    help="add rows of colocated servers (every rank trains and serves a share), by collectives "
                         "and point to point")
    ap.add_argument("--ssp", default="", help="staleness values of stale-synchronous rows, e.g. 1,2")
    ap.add_argument("--slow-ms", type=int, default=0, help="rank 1 computes this much longer each step")
    ap.add_argument("--compute-floor", action="store_true",
                    help="each round, also --workers one-worker runs at once with no exchange: the floor")
    ap.add_argument("--test-limit", type=int, default=256)
    ap.add_argument("--model-latency-us", type=float, default=200,
                    help="with --rate and --nominal-link: the link latency modelled")
    ap.add_argument("--nominal-link", action="store_true",
                    help="with --rate: model the link at its nominal rate and --model-latency-us instead of "
                         "measuring it (nereid bench allreduce on two ranks, about 30 s)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/parameter_server"))
    args = ap.parse_args()
    if args.chunk_kb is None:
        args.chunk_kb = 32.0 if args.rate else 256.0
    os.makedirs(args.out, exist_ok=True)
    raw = os.path.join(args.out, "raw")  # what the table is made from (ignored by git)
    os.makedirs(raw, exist_ok=True)
    # (name, ranks, servers, passes, the model's row: (name, servers, chunk_kb, staleness))
    plain_over = f", over {args.plain_transport}" if args.plain_transport and not args.rate else ""
    strategies = [("data parallel (ring allreduce)", args.workers, 0, f"autodiff,{args.optimizer},data_parallel",
                   ("sync_allreduce", 1, args.chunk_kb, 0)),
                  (f"plain server (1 server, a message per tensor{plain_over})", args.workers + 1, 1,
                   f"autodiff,{args.optimizer},parameter_server(servers=1,chunk_kb=1000000)",
                   ("parameter_server", 1, 1000000, 0))]
    for s in args.servers.split(","):
        strategies.append((f"chunked server ({s} server{'s' if s != '1' else ''}, {args.chunk_kb:g} KiB chunks)",
                           args.workers + int(s), int(s),
                           f"autodiff,{args.optimizer},parameter_server(servers={s},chunk_kb={args.chunk_kb:g})",
                           ("parameter_server", int(s), args.chunk_kb, 0)))
        if args.split and s != "1":
            strategies.append((f"chunked server, split ({s} servers, {args.chunk_kb:g} KiB chunks balanced)",
                               args.workers + int(s), int(s),
                               f"autodiff,{args.optimizer},parameter_server(servers={s},chunk_kb={args.chunk_kb:g},"
                               "split=true)",
                               ("parameter_server", int(s), args.chunk_kb, 0, True)))
    if args.colocated:  # nereid model has no colocated rows
        strategies.append((f"colocated servers, collective (every rank serves a shard; a reduce-scatter and an "
                           f"all-gather per bucket of {args.chunk_kb:g} KiB)",
                           args.workers, 0,
                           f"autodiff,{args.optimizer},parameter_server(colocated=true,exchange=collective,"
                           f"chunk_kb={args.chunk_kb:g})",
                           None))
        strategies.append((f"colocated servers, point to point (every rank serves, split, {args.chunk_kb:g} KiB "
                           "chunks)",
                           args.workers, 0,
                           f"autodiff,{args.optimizer},parameter_server(colocated=true,exchange=p2p,split=true,"
                           f"chunk_kb={args.chunk_kb:g})",
                           None))
    first = int(args.servers.split(",")[0])
    for st in [int(x) for x in args.ssp.split(",") if x]:
        strategies.append((f"stale-synchronous server (staleness {st}, {first} server{'s' if first != 1 else ''})",
                           args.workers + first, first,
                           f"autodiff,{args.optimizer},parameter_server(servers={first},chunk_kb={args.chunk_kb:g},"
                           f"mode=ssp,staleness={st})",
                           ("parameter_server_ssp", first, args.chunk_kb, st)))
    if args.only:  # the first row stays: the ratios are against it
        strategies = [strategies[0]] + [strategies[int(i)] for i in args.only.split(",") if int(i) != 0]
    floor_name = (f"compute alone ({args.workers} one-worker runs at once, no exchange: the floor under every "
                  "row)")
    runs = {name: [] for name, _, _, _, _ in strategies}
    for rnd in range(args.rounds):
        for i, (name, ranks, servers, passes, _) in enumerate(strategies):
            plain = name.startswith("plain server")  # --only may drop or reorder rows
            runs[name].append(train(args, ranks, passes, raw,
                                    f"{args.model}_{args.rate or 'loopback'}_r{rnd}_{i}", servers,
                                    args.plain_transport if plain else None))
        if args.compute_floor:
            runs.setdefault(floor_name, []).append(compute_alone(args, raw, f"{args.model}_floor_r{rnd}"))
    def per_step(m):
        """Rank 0's steady step: from its first step's end to its last's, over the steps between (the
        first step, which holds start-up, left out); the epoch's time over its steps where too few."""
        done = m.get("step_finished_seconds", [])
        if len(done) >= 3:
            return (done[-1] - done[0]) / (len(done) - 1)
        return sum(e["seconds"] for e in m["per_epoch"]) / m["steps"]
    first_step = lambda m: m["step_finished_seconds"][0] if m.get("step_finished_seconds") else float("nan")
    base = [per_step(m) for m in runs[strategies[0][0]]]
    where = (f"{args.rate} workers, {args.server_rate} servers" if args.rate else
             "loopback" + (f", transport {args.transport}" if args.transport != "auto" else ""))
    if args.slow_ms:
        where += f", rank 1 +{args.slow_ms} ms per step"
    predicted = {}
    if args.rate:
        traces = profile(args, raw)
        link = None if args.nominal_link else measure_link(args, raw)
        server_link = None if args.nominal_link else measure_link(args, raw, args.server_rate, "server_link")
        for name, _, _, _, model_row in strategies:
            if model_row is None:
                continue
            row, servers, chunk_kb, staleness, *split = model_row
            predicted[name] = predict(args, traces, link, server_link, servers, chunk_kb, staleness, raw,
                                      bool(split))[row]
    # Ratios against the plain server too (PHub's baseline), round by round.
    plain_name = next((name for name, *_ in strategies if name.startswith("plain server")), None)
    plain_steps = [per_step(m) for m in runs[plain_name]] if plain_name else []
    lines = [f"| {args.model}, {args.workers} workers, {where} | s/step after the first (median) | "
             "first step, s | vs data parallel: median (min-max) | vs the plain server: median (min-max) | "
             "MB sent per rank and step | final train loss | test accuracy | nereid model: s/step (model / measured) |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratio = lambda r: f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})" if r else "-"
    rows = [name for name, *_ in strategies] + ([floor_name] if args.compute_floor else [])
    for name in rows:
        ms = runs[name]
        step = [per_step(m) for m in ms]
        speed = [b / s for b, s in zip(base, step)]
        over_plain = [p / s for p, s in zip(plain_steps, step)]
        model = (f"{predicted[name]:.3f} ({predicted[name] / statistics.median(step):.2f})" if name in predicted
                 else "-")
        digits = 4 if statistics.median(step) < 0.1 else 3
        lines.append(f"| {name} | {statistics.median(step):.{digits}f} | "
                     f"{statistics.median(first_step(m) for m in ms):.3f} | {ratio(speed)} | {ratio(over_plain)} | "
                     f"{ms[-1]['bytes_sent_per_step'] / 1e6:.2f} | "
                     f"{ms[-1]['final_train_loss']:.4f} | {100 * ms[-1]['final_test_accuracy']:.2f}% | {model} |")
    print("\n".join(lines))
    suffix = f"_slow{args.slow_ms}" if args.slow_ms else ""
    with open(os.path.join(args.out, f"table_{args.model}_{args.rate or 'loopback'}{suffix}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
