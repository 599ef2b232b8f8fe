#!/usr/bin/env python3
"""Coded computing (the coded pass): RLNC against MDS, with workers that leave.

Five tables, each run back to back on this machine:

  bytes     encoding and training bytes of RLNC and MDS over a grid of N, K and
            degree (the traffic counters of real runs: a few full-batch steps
            each), with the ratio RLNC / MDS of the totals.
  rounds    seconds per round (a full-batch step: two coded rounds) with 0, 1
            and 2 workers gone in every round, against the full round, for
            RLNC and MDS; and the uncoded run (scheme=none) with one worker
            gone, which cannot decode and stops with an error. On loopback, or
            with --rate on an emulated cluster (bench/netem/cluster.sh, needs
            root), every rank behind a link of that rate.
  accuracy  full-batch gradient descent on the whole of Fashion-MNIST, logistic
            regression and the SVM, coded (RLNC, departures at random) and
            uncoded (one process), test accuracy after --epochs steps.
  tolerance bytes at the same dropout tolerance: for each N, K and number of
            random workers gone (1 .. N-K, which MDS always survives), the
            smallest RLNC degree that decodes with probability >= --tolerance
            (measured as in decode, with random departure sets), and RLNC's
            total bytes at that degree against MDS's.
  decode    the probability that m coded partitions of RLNC (K partitions,
            degree d) are decodable: measured over random codes (supports
            uniform, Gaussian coefficients, numpy's rank) against the coverage
            bound of docs/CODED.md (inclusion-exclusion), which is exact for the
            supports and an upper bound for the rank.

Prints the tables (docs/RESULTS.md and bench/results/coded/*.md keep them); each
run's metrics and the ranks' logs go to OUT/raw/, which git ignores.

Example (about ten minutes on 2 cores; the opt binary first):
  bazel build -c opt //runtime/cli:nereid
  bench/coded.py --tables bytes,rounds,decode
  bench/coded.py --tables rounds --rate 20mbit
"""

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")
CLUSTER = os.path.join(ROOT, "bench/netem/cluster.sh")


def run(args, model, ranks, passes, name, examples, steps, check=True):
    """Rank 0's metrics of `steps` full-batch steps (one per epoch), or None."""
    metrics = os.path.join(args.out, "raw", name + ".json")
    if os.path.exists(metrics):
        os.remove(metrics)
    flags = [os.path.join(ROOT, "models", model + ".pbtxt"), "--threads", "1", "--batch", str(examples),
             "--train-limit", str(examples), "--test-limit", str(args.test_limit), "--epochs", str(steps),
             "--quiet", "--comm-timeout", "300", "--metrics-json", metrics, "--passes", passes]
    if args.rate and ranks > 1:
        cmd = [CLUSTER, "--workers", str(ranks), "--rate", args.rate, "--timeout", "3600", "--logs",
               os.path.join(args.out, "raw", "logs_" + name), "--", args.nereid, "run"] + flags
    else:
        cmd = [args.nereid, "run"] + flags + ["--workers", str(ranks)]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, timeout=3700, capture_output=True, text=True)
    if done.returncode != 0:
        if check:
            sys.exit(f"coded: failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
        return None, done.stderr
    with open(metrics) as f:
        return json.load(f), done.stderr


def training_bytes(m):
    # bytes_sent_per_step is the mean over the ranks; the total is over all of them.
    return m["bytes_sent_per_step"] * m["workers"] * m["steps"]


def bytes_table(args):
    print(f"\n## Bytes: RLNC against MDS ({args.model}, {args.examples} examples, {args.steps} steps)\n")
    print("| N | K | RLNC degree | MDS encoding MB | RLNC encoding MB | MDS total MB | RLNC total MB | RLNC / MDS |")
    print("|---|---|---|---|---|---|---|---|")
    for n, k, d in [(4, 2, 2), (6, 3, 2), (6, 4, 2), (8, 4, 2), (8, 6, 2), (8, 6, 3)]:
        rows = {}
        for scheme, extra in (("mds", ""), ("rlnc", f",degree={d}")):
            m, _ = run(args, args.model, n + 1, f"autodiff,sgd(lr=0.02),coded(scheme={scheme},k={k}{extra})",
                       f"bytes_{scheme}_n{n}_k{k}_d{d}", args.examples, args.steps)
            rows[scheme] = (m["coded"]["encoding_bytes"], m["coded"]["encoding_bytes"] + training_bytes(m))
        ratio = rows["rlnc"][1] / rows["mds"][1]
        print(f"| {n} | {k} | {d} | {rows['mds'][0] / 1e6:.1f} | {rows['rlnc'][0] / 1e6:.1f} | "
              f"{rows['mds'][1] / 1e6:.1f} | {rows['rlnc'][1] / 1e6:.1f} | {ratio:.2f} |", flush=True)


def rounds_table(args):
    n, k = 6, 3
    link = args.rate or "loopback"
    print(f"\n## Rounds with workers gone (N={n}, K={k}, {args.model}, {args.examples} examples, {link}; "
          f"median of {args.rounds} runs of {args.steps} steps, alternated)\n")
    print("| scheme | workers gone per round | s per step | against the full round | answers per decode |")
    print("|---|---|---|---|---|")
    cases = []
    for scheme, extra in (("mds", ""), ("rlnc", ",degree=2")):
        for gone in ("", "0-100000:5", "0-100000:4+5"):
            cases.append((scheme, extra, gone))
    times = {c: [] for c in cases}
    answers = {}
    for _ in range(args.rounds):
        for scheme, extra, gone in cases:
            deps = f",departures={gone}" if gone else ""
            m, err = run(args, args.model, n + 1, f"autodiff,sgd(lr=0.02),coded(scheme={scheme},k={k}{extra}{deps})",
                         f"rounds_{scheme}_{len(gone)}", args.examples, args.steps, check=False)
            if m is None:
                times[(scheme, extra, gone)].append(None)
                answers[(scheme, extra, gone)] = err.strip().splitlines()[-1] if err.strip() else "failed"
                continue
            times[(scheme, extra, gone)].append(sum(e["seconds"] for e in m["per_epoch"]) / m["steps"])
            answers[(scheme, extra, gone)] = f"{m['coded']['answers_per_decode']:.2f}"
    for scheme, extra, gone in cases:
        t = [x for x in times[(scheme, extra, gone)] if x is not None]
        full = [x for x in times[(scheme, extra, "")] if x is not None]
        label = {"": "0", "0-100000:5": "1", "0-100000:4+5": "2"}[gone]
        if not t:
            print(f"| {scheme} | {label} | failed | | {answers[(scheme, extra, gone)]} |")
            continue
        print(f"| {scheme} | {label} | {statistics.median(t):.4f} | {statistics.median(t) / statistics.median(full):.2f}x "
              f"| {answers[(scheme, extra, gone)]} |", flush=True)
    _, err = run(args, args.model, k + 1, f"autodiff,sgd(lr=0.02),coded(scheme=none,k={k},departures=0-100000:2)",
                 "rounds_uncoded_gone", args.examples, args.steps, check=False)
    why = [line for line in err.splitlines() if "cannot decode" in line]
    print(f"\nUncoded (scheme=none, N=K={k}) with worker 2 gone: "
          f"{why[0].strip() if why else (err.strip().splitlines() or ['ran (unexpected)'])[-1]}")


def accuracy_table(args):
    print(f"\n## Accuracy: full-batch gradient descent on Fashion-MNIST (60000 examples, {args.epochs} steps, "
          f"lr {args.lr}; test set {args.test_limit or 10000})\n")
    print("| model | uncoded (1 process) | coded (MDS N=6 K=4, 1-2 workers gone in 30 of the rounds) | difference (points) |")
    print("|---|---|---|---|")
    for model in ("logreg_fashion", "svm_fashion"):
        u, _ = run(args, model, 1, f"autodiff,sgd(lr={args.lr})", f"acc_{model}_uncoded", 60000, args.epochs)
        c, _ = run(args, model, 7,
                   f"autodiff,sgd(lr={args.lr}),coded(scheme=mds,k=4,departures=5-14:1;40-59:0+3)",
                   f"acc_{model}_coded", 60000, args.epochs, check=False)
        if c is None:
            print(f"| {model} | {100 * u['final_test_accuracy']:.2f}% | failed (a round not decodable) | |")
            continue
        print(f"| {model} | {100 * u['final_test_accuracy']:.2f}% | {100 * c['final_test_accuracy']:.2f}% | "
              f"{100 * (c['final_test_accuracy'] - u['final_test_accuracy']):+.2f} |", flush=True)


def coverage_bound(k, d, m):
    # P(m supports of size d, uniform over the K-subsets, cover all K partitions)
    total = 0.0
    for j in range(k + 1):
        if k - j < d:
            continue
        total += (-1) ** j * math.comb(k, j) * (math.comb(k - j, d) / math.comb(k, d)) ** m
    return total


def decode_table(args):
    import numpy as np
    rng = np.random.default_rng(args.seed)
    print(f"\n## Decodability of RLNC ({args.trials} random codes per row)\n")
    print("| K | degree | coded partitions received | measured P(decodable) | coverage bound |")
    print("|---|---|---|---|---|")
    for k, d in [(4, 2), (6, 2), (6, 3), (8, 3)]:
        for m in range(k, k + 5):
            ok = 0
            for _ in range(args.trials):
                g = np.zeros((m, k))
                for r in range(m):
                    cols = rng.choice(k, size=d, replace=False)
                    g[r, cols] = rng.standard_normal(d)
                ok += np.linalg.matrix_rank(g) == k
            print(f"| {k} | {d} | {m} | {ok / args.trials:.3f} | {coverage_bound(k, d, m):.3f} |", flush=True)


def decodable_with_gone(rng, n, k, d, gone, trials):
    """P(the coded partitions left decode) with `gone` random workers of n gone:
    random RLNC codes (uniform supports of size d, Gaussian coefficients),
    a random departure set per trial."""
    import numpy as np
    ok = 0
    for _ in range(trials):
        g = np.zeros((n, k))
        for r in range(n):
            g[r, rng.choice(k, size=d, replace=False)] = rng.standard_normal(d)
        left = rng.permutation(n)[gone:]
        ok += np.linalg.matrix_rank(g[left]) == k
    return ok / trials


def tolerance_table(args):
    import numpy as np
    rng = np.random.default_rng(args.seed)
    target = args.tolerance
    print(f"\n## Bytes at the same dropout tolerance (RLNC must decode with probability >= {target} "
          f"when that many random workers are gone; MDS always does; {args.trials} random codes and "
          f"departure sets per degree; bytes from real runs as in the bytes table)\n")
    print("| N | K | workers gone | P(RLNC decodes) by degree | degree needed | RLNC / MDS total bytes at that degree |")
    print("|---|---|---|---|---|---|")
    measured = {}  # (scheme, n, k, degree) -> total bytes of one run

    def total_bytes(scheme, n, k, d):
        if (scheme, n, k, d) not in measured:
            extra = f",degree={d}" if scheme == "rlnc" else ""
            m, _ = run(args, args.model, n + 1, f"autodiff,sgd(lr=0.02),coded(scheme={scheme},k={k}{extra})",
                       f"tolerance_{scheme}_n{n}_k{k}_d{d}", args.examples, args.steps)
            measured[(scheme, n, k, d)] = m["coded"]["encoding_bytes"] + training_bytes(m)
        return measured[(scheme, n, k, d)]

    # N = 12, K = 4: a low-rate code, where MDS's tolerance (8) is far above
    # the departures an edge round sees.
    for n, k in [(6, 3), (6, 4), (8, 4), (8, 6), (12, 4)]:
        for gone in range(1, min(n - k, 4) + 1):
            p = {d: decodable_with_gone(rng, n, k, d, gone, args.trials) for d in range(2, k + 1)}
            needed = next((d for d in range(2, k + 1) if p[d] >= target), k)
            rows = {"mds": total_bytes("mds", n, k, 0), "rlnc": total_bytes("rlnc", n, k, needed)}
            shown = ", ".join(f"d={d}: {p[d]:.3f}" for d in p)
            print(f"| {n} | {k} | {gone} | {shown} | {needed}{' (= K)' if needed == k else ''} | "
                  f"{rows['rlnc'] / rows['mds']:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", default="bytes,rounds,accuracy,decode")
    ap.add_argument("--model", default="logreg_fashion")
    ap.add_argument("--examples", type=int, default=6000, help="training examples of the bytes and rounds tables")
    ap.add_argument("--steps", type=int, default=3, help="full-batch steps per run (bytes, rounds)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated repetitions of the rounds table")
    ap.add_argument("--epochs", type=int, default=100, help="steps of the accuracy table")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--tolerance", type=float, default=0.99,
                    help="tolerance table: the probability of decoding RLNC must reach")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", default="", help="emulated links of this rate, e.g. 20mbit (default: loopback)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/coded"))
    ap.add_argument("--nereid", default=NEREID,
                    help="the binary (default: the opt build; the bytes and tolerance tables count bytes, "
                         "which any build gives)")
    args = ap.parse_args()
    os.makedirs(os.path.join(args.out, "raw"), exist_ok=True)  # each run's metrics and logs (ignored by git)
    tables = {"bytes": bytes_table, "rounds": rounds_table, "accuracy": accuracy_table, "decode": decode_table,
              "tolerance": tolerance_table}
    for name in args.tables.split(","):
        if name not in tables:
            sys.exit(f"coded: unknown table '{name}' (known: {', '.join(tables)})")
        tables[name](args)


if __name__ == "__main__":
    main()
