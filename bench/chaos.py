#!/usr/bin/env python3
"""Chaos: elastic restarts under random faults end where an undisturbed run ends.

Trains a model on W local workers twice with the same seed: once undisturbed,
once while this script kills (SIGKILL) or stops (SIGSTOP) a random worker
process every --interval seconds, up to --faults faults. The second run has
--max-restarts, so the launcher restarts every worker from the newest
checkpoint (--checkpoint-every STEPS within epochs) after each fault. Prints
each fault, each restart with the steps it redid, and whether the final
parameter fingerprints agree; exits 1 if they do not, if a run fails, or if a
restart redid more than the checkpoint interval (plus the steps in flight).

Bounded: at most --faults faults, every run under --timeout seconds, and all
processes are killed on the way out.

Example (about four minutes on 2 cores):
  bench/chaos.py --workers 4 --faults 10
"""

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEREID = os.path.join(ROOT, "bazel-out/k8-opt/bin/runtime/cli/nereid")


def children(pid):
    """The processes whose parent is `pid` (the launcher's workers)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return out


def run(args, checkpoint, metrics, extra, chaos):
    cmd = [NEREID, "run", os.path.join(ROOT, "models", args.model + ".pbtxt"), "--workers", str(args.workers),
           "--threads", "1", "--epochs", str(args.epochs), "--train-limit", str(args.train_limit),
           "--test-limit", "256", "--seed", str(args.seed), "--quiet", "--comm-timeout", "20",
           "--checkpoint", checkpoint, "--checkpoint-every", str(args.checkpoint_every),
           "--metrics-json", metrics] + extra
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    faults = []
    deadline = time.time() + args.timeout
    rng = random.Random(args.seed)
    try:
        if chaos:
            next_fault = time.time() + args.interval
            while proc.poll() is None and time.time() < deadline:
                time.sleep(0.1)
                if len(faults) >= args.faults or time.time() < next_fault:
                    continue
                workers = children(proc.pid)
                if len(workers) < args.workers:  # between restarts
                    continue
                victim = rng.choice(workers)
                kind = rng.choice(["kill", "stop"])
                os.kill(victim, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
                faults.append((round(time.time(), 1), kind, victim))
                print(f"fault {len(faults)}: {kind} pid {victim}", file=sys.stderr, flush=True)
                next_fault = time.time() + args.interval
        proc.wait(timeout=max(1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.kill()
        for pid in children(proc.pid):
            os.kill(pid, signal.SIGKILL)
        sys.exit(f"chaos: the run did not end within {args.timeout} s")
    reader.join(timeout=5)
    return proc.returncode, "".join(lines), faults


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="logreg_fashion")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=80)
    ap.add_argument("--train-limit", type=int, default=20000)
    ap.add_argument("--checkpoint-every", type=int, default=20)
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--interval", type=float, default=8, help="seconds between faults (more than --worker-timeout and a restart)")
    ap.add_argument("--worker-timeout", type=int, default=4, help="how soon a stopped worker is caught")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    if not os.access(NEREID, os.X_OK):
        sys.exit(f"chaos: build it first: bazel build -c opt //runtime/cli:nereid ({NEREID})")

    out = tempfile.mkdtemp(prefix="nereid-chaos-")
    rc, log, _ = run(args, os.path.join(out, "calm"), os.path.join(out, "calm.json"), [], chaos=False)
    if rc != 0:
        sys.exit(f"chaos: the undisturbed run failed:\n{log}")
    extra = ["--max-restarts", str(args.faults + 2), "--worker-timeout", str(args.worker_timeout)]
    rc, log, faults = run(args, os.path.join(out, "chaos"), os.path.join(out, "chaos.json"), extra, chaos=True)
    if rc != 0:
        sys.exit(f"chaos: the disturbed run failed (exit {rc}):\n{log}")

    restarts = [line for line in log.splitlines() if re.match(r"restart \d+/\d+: ", line)]
    redone = []
    for line in restarts:
        number = re.match(r"restart (\d+)/", line).group(1)
        why = line.split(": ", 1)[1].split(";")[0]
        at = re.search(r"phase=train epoch=\d+ step=(\d+)", line)  # the failed rank's last step, if training
        resumed = re.search(r"\(step (\d+)\)$", line)
        where = "from the beginning" if resumed is None else f"from step {resumed.group(1)}"
        if at is None:
            print(f"restart {number}: {why}; {where} (it was not training: nothing redone)")
            continue
        steps = int(at.group(1)) - (int(resumed.group(1)) if resumed else 0)
        redone.append(steps)
        print(f"restart {number}: {why}; {where}; {steps} steps redone")
    with open(os.path.join(out, "chaos.log"), "w") as f:
        f.write(log)
    with open(os.path.join(out, "calm.json")) as f:
        calm = json.load(f)
    with open(os.path.join(out, "chaos.json")) as f:
        chaotic = json.load(f)
    same = calm["parameter_fingerprint"] == chaotic["parameter_fingerprint"]
    print(f"faults: {len(faults)}, restarts: {len(restarts)}, steps redone: max {max(redone, default=0)}, "
          f"total {sum(redone)} (checkpoint every {args.checkpoint_every} steps)")
    print(f"parameter fingerprint: undisturbed {calm['parameter_fingerprint']}, "
          f"disturbed {chaotic['parameter_fingerprint']}: {'equal' if same else 'DIFFERENT'}")
    # A phase line can trail the step a worker finished by the steps in flight.
    if not same or any(r > args.checkpoint_every + 2 for r in redone) or len(restarts) < len(faults):
        sys.exit(1)


if __name__ == "__main__":
    main()
