#!/usr/bin/env bash
# An emulated cluster on one machine: N network namespaces ("workers") joined
# by veth pairs to a bridge that lives in a namespace of its own, each link
# shaped with tc, one command per worker. See bench/netem/README.md.
set -euo pipefail

# `ip` and `tc` live in /usr/sbin, which a test runner's PATH may lack.
export PATH="$PATH:/usr/sbin:/sbin"

readonly PROG=cluster.sh
readonly SUBNET=10.213.0          # worker r is $SUBNET.(r+1)/24
readonly MAX_WORKERS=64
readonly EXIT_SKIP=77
readonly EXIT_TIMEOUT=124

usage() {
  cat <<'EOF'
Usage: bench/netem/cluster.sh --workers N [options] -- COMMAND ARGS...
       bench/netem/cluster.sh --check [--delay D] [--loss P]
       bench/netem/cluster.sh --cleanup

Runs COMMAND once per worker, each in its own network namespace, on an
emulated network: every worker has one link (a veth pair) to a bridge that
sits in a namespace of its own. Nothing in the root namespace is touched.

      worker 0 (10.213.0.1)   worker 1 (10.213.0.2)   ...
            eth0                    eth0
             |  (shaped both ways)   |
            v0                      v1
             +---------- br0 --------+------ ...      (bridge namespace)

Rank i runs, inside namespace i (with --ranks-per-node K: namespace i/K):
  COMMAND ARGS... --rendezvous file:DIR --rank i --world N --bind 10.213.0.(i+1)
(with K > 1 the address is its node's, 10.213.0.(i/K+1))
with DIR a fresh directory shared by all ranks, and in its environment
  NEREID_CLUSTER_RANK=i  NEREID_CLUSTER_WORLD=N  NEREID_CLUSTER_ADDR=10.213.0.(i+1)
  NEREID_CLUSTER_ADDRS=<all addresses, comma-separated, by rank>
  NEREID_CLUSTER_RENDEZVOUS=file:DIR  NEREID_RUN_ID=<unique id of this run>

Options:
  --workers N     number of workers, 1..64 (required)
  --ranks-per-node K
                  put K consecutive ranks in each namespace: N/K emulated
                  machines of K ranks each, sharing one link and one address
                  (ranks of a machine talk over its loopback and /dev/shm; the
                  links carry only what crosses machines). K must divide N
                  (default 1)
  --rate R        each worker's link rate, in each direction: a worker sends at
                  most R and receives at most R (tbf on both ends of its veth).
                  Units bit, kbit, mbit, gbit (powers of 1000), e.g. 1gbit;
                  "none" leaves the links unshaped (default 1gbit)
  --rank-rate R=RATE
                  rank R's link at RATE instead of --rate (repeatable), e.g.
                  --rank-rate 4=1gbit: a parameter server behind a faster link
                  than its workers
  --delay D       one-way latency added between any two workers, e.g. 0.1ms,
                  100us: it is put on each worker's sending side only, so a
                  message from worker A to worker B is delayed by exactly D
                  (plus serialisation at R) and a round trip by 2 x D.
                  Needs the kernel's netem qdisc (default 0: none)
  --loss P        probability of dropping a packet, e.g. 0.1%, also on the
                  sending side only, so A -> B loses P. Needs netem (default 0%)
  --segment S     largest TCP segment (GSO) a shaped link hands its qdiscs,
                  in bytes or with a K suffix (KiB), 4K..64K, or "auto": about
                  0.5 ms of line rate, at least 16K (the default). The token
                  bucket holds two segments. See README.md: smaller segments
                  keep the bucket's burst short but cost the kernel more CPU
  --congestion-control NAME
                  TCP congestion control of every emulated host, e.g. cubic
                  (Linux's default) or bbr: set on the route between the
                  workers, so the root namespace is untouched. Default: the
                  host's (net.ipv4.tcp_congestion_control), which this script
                  prints. It decides how flows share a link: see README.md
  --timeout S     bound on the whole run in seconds: when it passes every
                  worker is killed and the exit status is 124 (default 600)
  --logs DIR      keep each rank's stdout+stderr in DIR/rank<i>.log (by
                  default they are written under the run's temporary
                  directory and removed with it)
  --no-append     run COMMAND ARGS... as given, without the nereid flags (for
                  commands that read the NEREID_CLUSTER_* variables instead)
  --check         only check that namespaces and tc shaping (and netem, when
                  --delay or --loss is given) work here: exit 0 if so, else
                  print why and exit 77
  --cleanup       delete the namespaces, processes and temporary directories
                  left by runs whose cluster.sh no longer exists (kill -9)
  --help          this text

Output: rank 0's stdout is copied unprefixed to this script's stdout (so
`cluster.sh ... > out.txt` captures rank 0's report); everything else every
rank prints goes to stderr, each line prefixed "[rank i] ". This script's
own messages go to stderr and start with "cluster.sh:".

Exit status: 0 when every rank exits 0. When a rank fails, the others are
killed at once, the rank, its exit status and the end of its log are
printed, and the status is 1. 124: --timeout passed. 77: namespaces or
shaping are not possible here (not root, no `ip`/`tc`, `ip netns add`
refused, no netem for --delay/--loss). 2: bad usage. 130/143: interrupted.
Every namespace the run created is deleted on every exit path.
EOF
}

say() { echo "$PROG: $*" >&2; }
die_usage() { say "$*"; say "see --help"; exit 2; }
skip() { echo "$PROG: skipped: $*" >&2; exit "$EXIT_SKIP"; }

# ---------------------------------------------------------------- arguments

workers=""
per_node=1
rate=1gbit
declare -A rank_rate=()
delay=0
loss=0%
segment=auto
congestion_control=""
timeout_s=600
logs_dir=""
append=1
mode=run
cmd=()

parse_args() {
  while (($#)); do
    case "$1" in
      --workers) workers=${2:?--workers needs a value}; shift 2 ;;
      --ranks-per-node) per_node=${2:?--ranks-per-node needs a value}; shift 2 ;;
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --rank-rate)
        [[ ${2:-} =~ ^([0-9]+)=(.+)$ ]] || die_usage "--rank-rate '${2:-}': expected RANK=RATE, e.g. 4=1gbit"
        rank_rate[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
        shift 2 ;;
      --delay) delay=${2:?--delay needs a value}; shift 2 ;;
      --loss) loss=${2:?--loss needs a value}; shift 2 ;;
      --segment) segment=${2:?--segment needs a value}; shift 2 ;;
      --congestion-control) congestion_control=${2:?--congestion-control needs a value}; shift 2 ;;
      --timeout) timeout_s=${2:?--timeout needs a value}; shift 2 ;;
      --logs) logs_dir=${2:?--logs needs a value}; shift 2 ;;
      --no-append) append=0; shift ;;
      --check) mode=check; shift ;;
      --cleanup) mode=cleanup; shift ;;
      -h | --help) usage; exit 0 ;;
      --) shift; cmd=("$@"); break ;;
      *) die_usage "unknown option '$1' (the command goes after --)" ;;
    esac
  done
}

# Rate in bits/s ("none" -> 0), from <number><bit|kbit|mbit|gbit>.
rate_bits=0
base_rate_bits=0
bits_of() {  # rate flag -> bits/s on stdout
  if [[ $1 == none ]]; then echo 0; return; fi
  local re='^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit)$' mult bits
  [[ ${1,,} =~ $re ]] || die_usage "$2 '$1': expected e.g. 50mbit, 1gbit, 10gbit or none"
  case "${BASH_REMATCH[3]}" in
    bit) mult=1 ;; kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;;
  esac
  bits=$(awk -v n="${BASH_REMATCH[1]}" -v m="$mult" 'BEGIN { printf "%.0f", n * m }')
  ((bits >= 8000)) || die_usage "$2 '$1' is below 8kbit"
  echo "$bits"
}
parse_rate() {
  rate_bits=$(bits_of "$rate" --rate) || exit 2
  base_rate_bits=$rate_bits
  local r
  for r in "${!rank_rate[@]}"; do
    bits_of "${rank_rate[$r]}" --rank-rate >/dev/null || exit 2
    [[ -z $workers ]] || ((r < workers)) || die_usage "--rank-rate $r=${rank_rate[$r]}: there are only $workers ranks"
  done
}
# The rate of rank r's link (the functions below read rate_bits).
use_rate_of() {  # rank
  rate_bits=$base_rate_bits
  [[ -z ${rank_rate[$1]:-} ]] || rate_bits=$(bits_of "${rank_rate[$1]}" --rank-rate)
}

# Delay in microseconds, from <number><us|ms|s> or 0.
delay_us=0
parse_delay() {
  local re='^([0-9]+(\.[0-9]+)?)(us|ms|s)?$' mult
  [[ $delay =~ $re ]] || die_usage "--delay '$delay': expected e.g. 0.1ms, 100us or 0"
  case "${BASH_REMATCH[3]}" in
    us) mult=1 ;; ms) mult=1000 ;; s) mult=1000000 ;;
    "") [[ ${BASH_REMATCH[1]} =~ ^0+(\.0+)?$ ]] || die_usage "--delay '$delay' needs a unit (us, ms, s)"; mult=0 ;;
  esac
  delay_us=$(awk -v n="${BASH_REMATCH[1]}" -v m="$mult" 'BEGIN { printf "%.0f", n * m }')
}

loss_pct=0
parse_loss() {
  local re='^([0-9]+(\.[0-9]+)?)%?$'
  [[ $loss =~ $re ]] || die_usage "--loss '$loss': expected a percentage such as 0.1%"
  loss_pct=${BASH_REMATCH[1]}
  awk -v p="$loss_pct" 'BEGIN { exit !(p <= 100) }' || die_usage "--loss '$loss' is over 100%"
}

# Segment cap in bytes from <n>, <n>K or "auto" (0: worked out from the rate).
segment_bytes=0
parse_segment() {
  [[ $segment == auto ]] && return
  local re='^([0-9]{1,6})([kK])?$'
  [[ $segment =~ $re ]] || die_usage "--segment '$segment': expected bytes, e.g. 16K or 16384, or auto"
  segment_bytes=$((10#${BASH_REMATCH[1]}))
  [[ -z ${BASH_REMATCH[2]} ]] || segment_bytes=$((segment_bytes * 1024))
  ((segment_bytes >= 4096 && segment_bytes <= 65536)) || die_usage "--segment '$segment' is outside 4K..64K"
}

# --congestion-control must name one the kernel has.
parse_congestion_control() {
  [[ -z $congestion_control ]] && return
  local have
  have=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null || true)
  [[ " $have " == *" $congestion_control "* ]] ||
    die_usage "--congestion-control '$congestion_control': this kernel has ${have:-none listed}"
}

# What the emulated hosts' TCP uses, for the run's banner.
congestion_control_in_use() {
  if [[ -n $congestion_control ]]; then
    echo "$congestion_control"
  else
    echo "$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo unknown) (the host's default)"
  fi
}

needs_netem() { ((delay_us > 0)) || awk -v p="$loss_pct" 'BEGIN { exit !(p > 0) }'; }

# ------------------------------------------------------------------ probing

# Says why namespaces or shaping cannot work here (one line), or nothing.
probe() {
  if ((EUID != 0)); then echo "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"; return; fi
  command -v ip >/dev/null || { echo "no 'ip' command (Debian package iproute2)"; return; }
  command -v tc >/dev/null || { echo "no 'tc' command (Debian package iproute2)"; return; }
  local ns="nrd$$-probe" err=""
  if ! err=$(ip netns add "$ns" 2>&1); then echo "'ip netns add' failed: ${err//$'\n'/ }"; return; fi
  # One veth into a second namespace and a bridge: what a run needs.
  if ! err=$(ip netns add "$ns-b" 2>&1 && ip -n "$ns" link add eth0 type veth peer name v0 netns "$ns-b" 2>&1 &&
             ip -n "$ns-b" link add br0 type bridge 2>&1); then
    echo "cannot create a veth pair or a bridge: ${err//$'\n'/ }"
  elif ! err=$(ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate 1gbit burst 64kb limit 1mb 2>&1); then
    echo "tc cannot add a tbf qdisc: ${err//$'\n'/ }"
  elif needs_netem && ! err=$(ip netns exec "$ns-b" tc qdisc add dev v0 root netem delay 1ms 2>&1); then
    echo "--delay/--loss need the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM): ${err//$'\n'/ }"
  fi
  ip netns del "$ns-b" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
}

# ------------------------------------------------------------------ cleanup

# A namespace name is nrd<pid>-<role>; the run is stale when <pid> is no
# longer a cluster.sh (dead, or the pid reused by something else).
owner_alive() {
  local pid=$1
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'cluster\.sh'
}

kill_namespace_pids() {  # ns: SIGKILL whatever still runs inside it
  local ns=$1 pids
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
}

cleanup_stale() {
  local ns pid removed=0 dir
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E '^nrd[0-9]+-' | head -n 1000); do
    pid=${ns#nrd}; pid=${pid%%-*}
    if owner_alive "$pid"; then say "keeping $ns: its cluster.sh (pid $pid) is still running"; continue; fi
    kill_namespace_pids "$ns"
    if ip netns del "$ns" 2>/dev/null; then removed=$((removed + 1)); else say "could not delete $ns"; fi
  done
  for dir in "${TMPDIR:-/tmp}"/nrd[0-9]*.run.*; do
    [[ -d $dir ]] || continue
    pid=${dir##*/nrd}; pid=${pid%%.*}
    owner_alive "$pid" || rm -rf -- "$dir"
  done
  say "removed $removed stale namespace(s)"
}

# ------------------------------------------------------------ the emulation

readonly PREFIX="nrd$$-"
BRIDGE_NS="${PREFIX}br"
created_ns=()     # every namespace this run made, for teardown
worker_pids=()    # by rank; each worker leads its own process group
relay_pids=()     # the processes copying worker output to logs and terminal
run_dir=""
torn_down=0
phase=setup       # setup, then run once the workers start

ns_of() { echo "${PREFIX}w$1"; }
addr_of() { echo "$SUBNET.$(($1 + 1))"; }

make_ns() {
  created_ns+=("$1")   # first, so that a signal right after the add still finds it
  ip netns add "$1"
  ip -n "$1" link set lo up
}

# GSO segment cap for a shaped link: --segment, else about 0.5 ms of line
# rate, between 16 KB and 64 KB (veth hands TCP segments of up to 64 KB to the
# qdisc; the token bucket below must hold two of them). The floor is for the
# CPU: here each segment costs the kernel ~85 us (timers, wake-ups, the
# bridge), so 4 KB segments took 25-30 ns of CPU per byte sent against 8-11 ns
# with 16 KB, measured with 4 workers at 35mbit (README.md).
gso_size() {
  ((segment_bytes == 0)) || { echo "$segment_bytes"; return; }
  local size=$((rate_bits / 8 / 2000))
  ((size >= 16384)) || size=16384
  ((size <= 65536)) || size=65536
  echo "$size"
}

# Bytes of one TCP socket a worker's kernel lets sit in the shaped queue
# (net.ipv4.tcp_limit_output_bytes, per namespace): about 2 ms of line rate,
# at least two GSO segments. The shaped queue is a FIFO (this kernel has no
# fq or fq_codel to put under tbf); with the default 4 MB a whole message
# waited in it ahead of every small packet sent after it, as no host whose
# qdisc keeps flows apart (fq_codel, Debian's default) would make them wait.
# Gloo sends a message only after its receiver's "ready" packet arrives, so
# that packet queued behind a 247 KB push held the peer's link idle
# (measured: SGP, 8 workers at 45mbit, 4,025-4,310 samples/s with 4 MB,
# 4,958-5,018 with 32 KB; ring allreduce 2,869-2,900 either way).
tsq_bytes() {
  local bytes=$((rate_bits / 8 / 500)) floor=$((2 * $(gso_size)))
  ((bytes >= floor)) || bytes=$floor
  echo "$bytes"
}

# tbf on dev in ns at the run's rate. A token bucket lets `burst` bytes
# through at memory speed after an idle spell, which flatters bursty traffic
# (a synchronous allreduce after a compute phase) over steady traffic (a
# pipelined one), so it is kept to two GSO segments, the least that works (a
# smaller bucket plus two busy cores loses tokens to late wake-ups: measured,
# 4 workers at 1gbit reached only 60-75% of the rate with 16 KB segments and a
# 32 KB bucket): 1 ms of line rate at 1gbit, 7.5 ms at 35mbit, where the
# segments are at their floor (README.md). The queue holds 20 ms of traffic
# (at least 2 MB), ample for TCP.
add_rate() {  # ns dev [parent handle]
  local ns=$1 dev=$2 where=(root)
  (($# > 2)) && where=(parent "$3")
  local bytes_per_s=$((rate_bits / 8))
  local burst=$((2 * $(gso_size))) limit=$((bytes_per_s / 50))
  ((limit >= 2097152)) || limit=2097152
  ip netns exec "$ns" tc qdisc add dev "$dev" "${where[@]}" tbf rate "${rate_bits}bit" burst "$burst" limit "$limit"
}

# A worker's sending side: netem (delay, loss) when asked for, with the rate
# limiter under it (the layout netem's documentation gives for both).
shape_uplink() {  # ns
  local ns=$1
  if needs_netem; then
    local netem=(netem limit 100000)
    ((delay_us > 0)) && netem+=(delay "${delay_us}us")
    awk -v p="$loss_pct" 'BEGIN { exit !(p > 0) }' && netem+=(loss "${loss_pct}%")
    ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: "${netem[@]}"
    ((rate_bits == 0)) || add_rate "$ns" eth0 1:1
  elif ((rate_bits > 0)); then
    add_rate "$ns" eth0
  fi
}

setup_network() {
  make_ns "$BRIDGE_NS"
  ip -n "$BRIDGE_NS" link add br0 type bridge
  ip -n "$BRIDGE_NS" link set br0 up
  local r ns
  for ((r = 0; r < workers / per_node; r++)); do   # r: a node, one rank's when per_node is 1
    use_rate_of "$r"
    ns=$(ns_of "$r")
    make_ns "$ns"
    # Created inside the worker namespace, its peer placed straight into the
    # bridge namespace: neither end ever exists in the root namespace.
    ip -n "$ns" link add eth0 type veth peer name "v$r" netns "$BRIDGE_NS"
    if ((rate_bits > 0)); then
      ip -n "$ns" link set eth0 gso_max_size "$(gso_size)"
      ip -n "$BRIDGE_NS" link set "v$r" gso_max_size "$(gso_size)"
    fi
    ip -n "$BRIDGE_NS" link set "v$r" master br0
    ip -n "$BRIDGE_NS" link set "v$r" up
    ip -n "$ns" addr add "$(addr_of "$r")/24" dev eth0
    ip -n "$ns" link set eth0 up
    # Per route, as a namespace may not pick a default the host has not allowed.
    [[ -z $congestion_control ]] ||
      ip -n "$ns" route replace "$SUBNET.0/24" dev eth0 congctl "$congestion_control"
    shape_uplink "$ns"
    ((rate_bits == 0)) || ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_limit_output_bytes="$(tsq_bytes)"
    ((rate_bits == 0)) || add_rate "$BRIDGE_NS" "v$r"   # the worker's download
  done
  rate_bits=$base_rate_bits
}

# Copies one stream of a worker into its log and onto a terminal stream,
# each line prefixed. mawk reads pipes in blocks unless told otherwise.
AWK=(awk)
command -v mawk >/dev/null && AWK=(mawk -W interactive)
relay() {  # fifo log prefix
  "${AWK[@]}" -v logf="$2" -v p="$3" '{ print >> logf; fflush(logf); print p $0; fflush() }' <"$1"
}

start_worker() {  # rank
  local r=$1 ns addr out err log
  ns=$(ns_of $((r / per_node)))
  addr=$(addr_of $((r / per_node)))
  out="$run_dir/rank$r.stdout" err="$run_dir/rank$r.stderr" log="$logs_dir/rank$r.log"
  : >"$log"
  mkfifo "$out" "$err"
  if ((r == 0)); then
    relay "$out" "$log" "" &
  else
    relay "$out" "$log" "[rank $r] " >&2 &
  fi
  relay_pids+=($!)
  relay "$err" "$log" "[rank $r] " >&2 &
  relay_pids+=($!)
  local argv=("${cmd[@]}")
  if ((append)); then
    argv+=(--rendezvous "file:$run_dir/rendezvous" --rank "$r" --world "$workers" --bind "$addr")
  fi
  # The worker leads its own process group, so that killing it also kills
  # whatever it started, and a Ctrl-C reaches this script only. It stays in
  # this script's session: setsid would give each rank a scheduling group of
  # its own (Linux's autogroup), whose CPU share is capped against the other
  # ranks', so a rank's communication thread waited while other "machines"
  # computed, which no cluster does (Pipe-SGD lost 11-13 ms of a 70 ms ring
  # per step to it; README.md). perl-base is in every Debian system.
  NEREID_CLUSTER_RANK=$r NEREID_CLUSTER_WORLD=$workers NEREID_CLUSTER_ADDR=$addr \
    perl -e 'setpgrp(0, 0) or die "setpgrp: $!\n"; exec { $ARGV[0] } @ARGV or die "exec $ARGV[0]: $!\n"' \
    ip netns exec "$ns" "${argv[@]}" </dev/null >"$out" 2>"$err" &
  worker_pids[r]=$!
}

alive() { kill -0 "$1" 2>/dev/null; }
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }

# Waits up to TENTHS tenths of a second for every pid to end; 1 if some
# still run then.
wait_gone() {  # tenths pid...
  local tenths=$1 pid i
  shift
  for ((i = 0; i < tenths; i++)); do
    local any=0
    for pid in "$@"; do alive "$pid" && any=1; done
    ((any)) || return 0
    sleep 0.1
  done
  return 1
}

# TERM to every worker's process group that still runs, KILL after 2 s.
stop_workers() {
  local pid
  for pid in "${worker_pids[@]}"; do alive "$pid" && kill -TERM -- "-$pid" 2>/dev/null || true; done
  wait_gone 20 "${worker_pids[@]}" && return 0
  for pid in "${worker_pids[@]}"; do alive "$pid" && kill -KILL -- "-$pid" 2>/dev/null || true; done
}

# The relays end when their worker's streams close; give them 3 s to flush.
wait_relays() {
  local pid
  wait_gone 30 "${relay_pids[@]}" && return 0
  for pid in "${relay_pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

teardown() {  # exit status
  local status=$1
  ((torn_down)) && return 0
  torn_down=1
  set +e
  ((${#worker_pids[@]})) && stop_workers
  ((${#relay_pids[@]})) && wait_relays
  local ns i
  # Worker namespaces first (deleting one also deletes its veth pair), then
  # the bridge's. Retried briefly: a namespace whose last process is still
  # exiting can refuse deletion for a moment.
  for ((i = ${#created_ns[@]} - 1; i >= 0; i--)); do
    ns=${created_ns[i]}
    kill_namespace_pids "$ns"
    local try
    for ((try = 0; try < 20; try++)); do
      ip netns del "$ns" 2>/dev/null && break
      ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qxF "$ns" || break
      sleep 0.1
    done
  done
  local left
  left=$(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -F "$PREFIX" || true)
  [[ -z $left ]] || say "could not delete: $left (run '$PROG --cleanup')"
  [[ -n $run_dir ]] && rm -rf -- "$run_dir"
  # A command of the set-up failed under set -e: say so, and exit 1 rather
  # than with its status (which could read as 2, bad usage, or 77, skipped).
  if [[ $phase == setup ]] && ((status != 0 && status < 128)); then
    say "setting up the emulated network failed (the command above); all its namespaces were deleted"
    exit 1
  fi
}

on_signal() {  # status
  say "interrupted: stopping the workers and deleting the namespaces"
  exit "$1"
}

print_failure() {  # rank status
  local r=$1 status=$2 what
  if ((status > 128)); then what="was killed by signal $((status - 128))"; else what="exited with status $status"; fi
  local where="removed with the run: keep logs with --logs DIR"
  [[ $logs_dir == "$run_dir"/* ]] || where="$logs_dir/rank$r.log"
  say "rank $r $what; the other ranks were stopped. Last lines of its log ($where):"
  tail -n 20 "$logs_dir/rank$r.log" | sed "s/^/    /" >&2
}

main_run() {
  [[ -n $workers ]] || die_usage "--workers N is required"
  [[ $workers =~ ^[0-9]+$ ]] && ((workers >= 1 && workers <= MAX_WORKERS)) ||
    die_usage "--workers must be 1..$MAX_WORKERS"
  [[ $per_node =~ ^[0-9]+$ ]] && ((per_node >= 1 && workers % per_node == 0)) ||
    die_usage "--ranks-per-node must be >= 1 and divide --workers ($workers)"
  ((per_node == 1 || ${#rank_rate[@]} == 0)) || die_usage "--rank-rate shapes one rank's link: not with --ranks-per-node"
  [[ $timeout_s =~ ^[0-9]+$ ]] && ((timeout_s >= 1)) || die_usage "--timeout must be a whole number of seconds >= 1"
  ((${#cmd[@]})) || die_usage "no command given after --"

  local why
  why=$(probe)
  [[ -z $why ]] || skip "$why"

  trap 'teardown $?' EXIT
  trap 'on_signal 130' INT
  trap 'on_signal 143' TERM
  trap 'on_signal 129' HUP

  run_dir=$(mktemp -d "${TMPDIR:-/tmp}/nrd$$.run.XXXXXX")
  mkdir "$run_dir/rendezvous"
  if [[ -z $logs_dir ]]; then logs_dir="$run_dir/logs"; fi
  mkdir -p "$logs_dir"
  logs_dir=$(cd "$logs_dir" && pwd)

  setup_network
  local addrs="" r
  for ((r = 0; r < workers; r++)); do addrs+="${addrs:+,}$(addr_of $((r / per_node)))"; done
  export NEREID_CLUSTER_ADDRS=$addrs NEREID_CLUSTER_RENDEZVOUS="file:$run_dir/rendezvous" \
    NEREID_RUN_ID="netem-$$-$(date +%s)"
  local shaping="rate ${rate}, one-way delay ${delay}, loss ${loss}"
  for r in "${!rank_rate[@]}"; do shaping+=", rank $r at ${rank_rate[$r]}"; done
  ((rate_bits == 0)) || shaping+=", segments of $(gso_size) bytes"
  shaping+=", TCP congestion control $(congestion_control_in_use)"
  if ((per_node > 1)); then
    say "$workers workers, $per_node per node, in namespaces ${PREFIX}w0..$((workers / per_node - 1)) ($addrs), $shaping"
  else
    say "$workers workers in namespaces ${PREFIX}w0..$((workers - 1)) ($addrs), $shaping"
  fi

  phase=run
  for ((r = 0; r < workers; r++)); do start_worker "$r"; done

  # Poll, bounded by --timeout: the first rank to fail ends the run.
  local deadline=$(($(now_ms) + timeout_s * 1000)) running status
  local -a done_ranks=()
  while true; do
    running=0
    for ((r = 0; r < workers; r++)); do
      [[ -n ${done_ranks[r]:-} ]] && continue
      if alive "${worker_pids[r]}"; then running=$((running + 1)); continue; fi
      status=0
      wait "${worker_pids[r]}" || status=$?
      done_ranks[r]=1
      if ((status != 0)); then
        stop_workers
        wait_relays
        print_failure "$r" "$status"
        exit 1
      fi
    done
    ((running)) || break
    if (($(now_ms) >= deadline)); then
      local still=""
      for ((r = 0; r < workers; r++)); do [[ -n ${done_ranks[r]:-} ]] || still+=" $r"; done
      stop_workers
      wait_relays
      say "timed out after ${timeout_s} s (--timeout); ranks still running:$still. Stopped them all."
      exit "$EXIT_TIMEOUT"
    fi
    sleep 0.1
  done
  wait_relays
  say "all $workers ranks exited 0"
}

main() {
  parse_args "$@"
  parse_rate
  parse_delay
  parse_loss
  parse_segment
  parse_congestion_control
  case "$mode" in
    check)
      local why
      why=$(probe)
      [[ -z $why ]] || skip "$why"
      say "ok: namespaces, veth, bridge and tc shaping work here$(needs_netem && echo ', netem too')"
      ;;
    cleanup)
      ((EUID == 0)) || skip "not root"
      cleanup_stale
      ;;
    run) main_run ;;
  esac
}

main "$@"
