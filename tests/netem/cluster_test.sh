#!/usr/bin/env bash
# bench/netem/cluster.sh end to end: a shaped two-worker network really limits
# the allreduce benchmark's bandwidth (and adds the delay, where the kernel
# has netem), --segment sets each link's segment cap and token bucket, and
# every exit path (success, a failing rank, the timeout) leaves no namespace
# behind. Skips (exit 0) where namespaces are not allowed.
# Usage: cluster_test.sh NEREID CLUSTER_SH
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"   # ip; Bazel's test PATH lacks sbin
nereid=$(realpath "$1")
cluster=$(realpath "$2")
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/netem_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$cluster" --check
case $? in
  0) ;;
  77) echo "SKIP: the emulated cluster cannot run here (reason above)"; exit 0 ;;
  *) echo "FAIL: cluster.sh --check failed"; exit 1 ;;
esac

# The delay needs netem; without it the test checks the rate alone.
rate_mbit=100
delay_ms=1
if ! "$cluster" --check --delay 1ms 2>/dev/null; then
  delay_ms=0
  echo "note: no netem in this kernel, so the delay is not tested (rate only)"
fi

root_links_before=$(ip -o link show | wc -l)

# Runs cluster.sh in the background to learn its pid (the namespace prefix is
# nrd<pid>-); sets rc and prefix, output in $tmp/$1.{out,err}.
run_cluster() {  # name, cluster args...
  local name=$1
  shift
  "$cluster" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local pid=$!
  wait "$pid"
  rc=$?
  prefix="nrd$pid-"
}

# The run announced its namespaces under $prefix, and none is left.
no_namespaces_left() {  # what, name
  local left list
  grep -qF "namespaces ${prefix}w0" "$tmp/$2.err" || fail "$1: the run did not use the prefix $prefix"
  list=$(ip netns list) || { fail "$1: 'ip netns list' failed"; return; }
  left=$(echo "$list" | awk '{ print $1 }' | grep -F "$prefix")
  [ -z "$left" ] || fail "$1: namespaces left behind: $left"
}

# 1. The allreduce benchmark over a shaped link.
start=$SECONDS
run_cluster bench --workers 2 --rate "${rate_mbit}mbit" --delay "${delay_ms}ms" --timeout 120 \
  --logs "$tmp/logs" -- "$nereid" bench allreduce --sizes 1M,4M --rounds 2 --json "$tmp/bench.json"
echo "bench run: exit $rc in $((SECONDS - start)) s"
if [ "$rc" -ne 0 ]; then
  fail "the shaped benchmark exited $rc"
  cat "$tmp/bench.err"
else
  grep -q "allreduce over 2 ranks" "$tmp/bench.out" || fail "rank 0's table is not on stdout: $(cat "$tmp/bench.out")"
  [ -f "$tmp/logs/rank1.log" ] || fail "no log for rank 1"
  python3 - "$tmp/bench.json" "$rate_mbit" "$delay_ms" <<'PY' || fail "the measured link does not match the shaping"
import json, sys
result = json.load(open(sys.argv[1]))
cap = float(sys.argv[2]) * 1e6 / 8   # bytes/s in each direction
delay = float(sys.argv[3]) / 1e3
ok = True
def check(what, value, low, high):
    global ok
    good = low <= value <= high
    ok &= good
    print(f"{'ok' if good else 'BAD'}: {what} = {value:.4g} (want {low:.4g} .. {high:.4g})")
# Really shaped (not above the cap) and really transferring (not far below).
check("beta / cap", result["beta_bytes_per_second"] / cap, 0.3, 1.15)
for row in result["sizes"]:
    check(f"busbw / cap at {row['bytes']} bytes", row["busbw"] / cap, 0.3, 1.15)
# alpha is half the measured round trip: the one-way delay and a little more.
alpha = result["alpha_seconds"]
check("alpha (s)", alpha, 0.9 * delay, 0.01 + 2 * delay)
# Both ranks run on this machine, and sending costs it some CPU (not none, and
# not more than a second per megabyte).
check("ranks_on_host", result["ranks_on_host"], 2, 2)
check("cores_per_rank * 2 / host_cores", result["cores_per_rank"] * 2 / result["host_cores"], 0.999, 1.001)
check("comm_cpu_seconds_per_byte", result["comm_cpu_seconds_per_byte"], 1e-12, 1e-6)
sys.exit(0 if ok else 1)
PY
fi
no_namespaces_left "after the benchmark" bench

# 2. A rank that fails: the run stops at once, names the rank, cleans up.
start=$SECONDS
run_cluster failing --workers 3 --no-append --timeout 60 -- \
  bash -c 'if [ "$NEREID_CLUSTER_RANK" = 1 ]; then echo "rank one gives up"; exit 3; fi; sleep 50'
elapsed=$((SECONDS - start))
[ "$rc" -ne 0 ] || fail "a failing rank did not fail the run"
grep -q "rank 1 exited with status 3" "$tmp/failing.err" || fail "the failing rank is not named: $(cat "$tmp/failing.err")"
grep -q "rank one gives up" "$tmp/failing.err" || fail "the failing rank's log is not shown"
[ "$elapsed" -lt 20 ] || fail "the other ranks were not stopped at once ($elapsed s)"
no_namespaces_left "after a failing rank" failing

# 3. --timeout: exit 124, everything stopped and removed.
run_cluster timeout --workers 2 --no-append --timeout 1 -- sleep 50
[ "$rc" -eq 124 ] || fail "--timeout exited $rc, expected 124"
grep -q "timed out" "$tmp/timeout.err" || fail "no timeout message: $(cat "$tmp/timeout.err")"
no_namespaces_left "after the timeout" timeout

# 4. --segment: the worker's veth takes the segment cap and its tbf a bucket of
# two segments; by default (auto) the cap is 16 KB at 100mbit. A socket may
# keep the larger of two segments and 2 ms of line rate in the shaped queue
# (tcp_limit_output_bytes in the worker's namespace). A bad value is a usage
# error (exit 2) that names it.
for seg in auto 8K; do
  run_cluster "segment_$seg" --workers 2 --rate "${rate_mbit}mbit" --segment "$seg" --no-append --timeout 30 -- \
    bash -c 'ip -d link show dev eth0; tc qdisc show dev eth0; echo "tsq $(cat /proc/sys/net/ipv4/tcp_limit_output_bytes)"'
  bytes=16384
  [ "$seg" = auto ] || bytes=8192
  [ "$rc" -eq 0 ] || fail "--segment $seg: exit $rc: $(cat "$tmp/segment_$seg.err")"
  grep -q "gso_max_size $bytes " "$tmp/segment_$seg.out" ||
    fail "--segment $seg: eth0 does not cap segments at $bytes: $(cat "$tmp/segment_$seg.out")"
  grep -q "tbf .* burst $((2 * bytes / 1024))Kb" "$tmp/segment_$seg.out" ||
    fail "--segment $seg: the bucket is not two segments: $(grep tbf "$tmp/segment_$seg.out")"
  grep -q "segments of $bytes bytes" "$tmp/segment_$seg.err" || fail "--segment $seg: the cap is not announced"
  tsq=$((rate_mbit * 1000000 / 8 / 500))
  [ "$tsq" -ge $((2 * bytes)) ] || tsq=$((2 * bytes))
  grep -q "^tsq $tsq\$" "$tmp/segment_$seg.out" ||
    fail "--segment $seg: a socket's share of the shaped queue is not $tsq bytes: $(grep tsq "$tmp/segment_$seg.out")"
  no_namespaces_left "after --segment $seg" "segment_$seg"
done
"$cluster" --workers 2 --segment 2K -- true >/dev/null 2>"$tmp/bad_segment.err"
rc=$?
[ "$rc" -eq 2 ] || fail "--segment 2K exited $rc, expected 2 (usage)"
grep -q "'2K' is outside 4K..64K" "$tmp/bad_segment.err" || fail "--segment 2K: $(cat "$tmp/bad_segment.err")"

# 5. --congestion-control: a connection between two ranks runs the named
# algorithm (reno: every Linux kernel has it, and it is nobody's default
# here), while the root namespace's default stays as it was; an algorithm
# the kernel lacks is a usage error that names it.
default_cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
run_cluster cc --workers 2 --congestion-control reno --no-append --timeout 30 -- bash -c '
  peer=${NEREID_CLUSTER_ADDRS##*,}
  if [ "$NEREID_CLUSTER_RANK" = 1 ]; then timeout 10 python3 -c "
import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((\"$peer\", 5099)); s.listen(1); c, _ = s.accept(); c.recv(1)"
  else
    sleep 1; timeout 10 python3 -c "
import socket, subprocess; s = socket.socket(); s.connect((\"$peer\", 5099))
print(subprocess.run([\"ss\", \"-tni\", \"dst\", \"$peer\"], capture_output=True, text=True).stdout); s.send(b\"x\")"
  fi'
[ "$rc" -eq 0 ] || fail "--congestion-control reno: exit $rc: $(cat "$tmp/cc.err")"
grep -qw reno "$tmp/cc.out" || fail "--congestion-control reno: the connection does not use it: $(cat "$tmp/cc.out")"
grep -q "TCP congestion control reno" "$tmp/cc.err" || fail "--congestion-control reno: not announced"
[ "$(cat /proc/sys/net/ipv4/tcp_congestion_control)" = "$default_cc" ] || fail "the host's default congestion control changed"
no_namespaces_left "after --congestion-control" cc
"$cluster" --workers 2 --congestion-control no_such_cc -- true >/dev/null 2>"$tmp/bad_cc.err"
rc=$?
[ "$rc" -eq 2 ] || fail "--congestion-control no_such_cc exited $rc, expected 2 (usage)"
grep -q "'no_such_cc': this kernel has" "$tmp/bad_cc.err" || fail "--congestion-control no_such_cc: $(cat "$tmp/bad_cc.err")"

# The root namespace's links are untouched.
[ "$(ip -o link show | wc -l)" -eq "$root_links_before" ] || fail "the root namespace's links changed"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
