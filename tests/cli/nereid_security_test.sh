#!/usr/bin/env bash
# A run's token, end to end with real processes on loopback: a rank started
# without the run's token is refused on both sides; a token file others can
# read, and a store other machines reach without a token, are refused before
# anything starts; a 2-worker run completes beside 2,000 unauthenticated
# connections to its store, and rank 0's peak memory stays within 64 MiB of
# the same run without them.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

model=models/logreg_fashion.pbtxt
small=(--dataset synthetic --train-limit 256 --test-limit 64 --epochs 1 --threads 1 --quiet --comm-timeout 20)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
token=0123456789abcdef0123456789abcdef

# Refused before anything starts.
printf '%s\n' "$token" > "$tmp/token"
chmod 644 "$tmp/token"
expect 2 "permissions 0644 let others read the run's secret" "$nereid" run $model --token-file "$tmp/token"
chmod 600 "$tmp/token"
expect 2 "NEREID_TOKEN holds a token of 5 characters" env NEREID_TOKEN=short "$nereid" run $model
expect 2 "this process has no run token" "$nereid" run $model --rank 1 --world 2 --rendezvous tcp://10.213.0.1:29500
expect 2 "this process has no run token" "$nereid" run $model --nnodes 2 --node-rank 1 --workers 1 \
  --rendezvous tcp://10.213.0.1:29500

# The same plan and seed, rank 1 without the token: refused on both sides.
port=$(free_port)
NEREID_TOKEN=$token timeout 60 "$nereid" run $model "${small[@]}" --comm-timeout 4 --rank 0 --world 2 \
  --rendezvous "tcp://127.0.0.1:$port" > "$tmp/r0.log" 2>&1 &
r0=$!
timeout 60 "$nereid" run $model "${small[@]}" --comm-timeout 4 --rank 1 --world 2 \
  --rendezvous "tcp://127.0.0.1:$port" > "$tmp/r1.log" 2>&1
rc1=$?
wait "$r0"
rc0=$?
[ "$rc1" -ne 0 ] || fail "rank 1 without the token joined: $(cat "$tmp/r1.log")"
[ "$rc0" -ne 0 ] || fail "rank 0 trained with a rank that lacks the token: $(cat "$tmp/r0.log")"
grep -q "the run has a token and this process has none" "$tmp/r1.log" || fail "rank 1's error: $(cat "$tmp/r1.log")"
grep -q "the store dropped: 1 connection from 127.0.0.1: no token" "$tmp/r0.log" || fail "rank 0 does not name the refused connection: $(cat "$tmp/r0.log")"

# With the token in a file on both sides: the run trains.
port=$(free_port)
for r in 0 1; do
  timeout 60 "$nereid" run $model "${small[@]}" --rank $r --world 2 --rendezvous "tcp://127.0.0.1:$port" \
    --token-file "$tmp/token" --metrics-json "$tmp/base$r.json" > "$tmp/base$r.log" 2>&1 &
  pids[$r]=$!
done
for r in 0 1; do wait "${pids[$r]}" || fail "rank $r with the token failed: $(cat "$tmp/base$r.log")"; done

# The same run beside a flood: 2,000 connections (half idle, half with 20
# bytes of an answer), opened once rank 0 serves and before rank 1 starts,
# held for at most 30 s.
port=$(free_port)
timeout 60 "$nereid" run $model "${small[@]}" --rank 0 --world 2 --rendezvous "tcp://127.0.0.1:$port" \
  --token-file "$tmp/token" --metrics-json "$tmp/flood0.json" > "$tmp/flood0.log" 2>&1 &
r0=$!
rm -f "$tmp/flooded"
(ulimit -n 4096 2>/dev/null; timeout 60 python3 - "$port" "$tmp/flooded" <<'PY'
import socket, sys, time
port, done = int(sys.argv[1]), sys.argv[2]
socks, deadline = [], time.time() + 30
while len(socks) < 2000 and time.time() < deadline:
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        time.sleep(0.05)
        continue
    if len(socks) % 2:
        s.send(b"T" * 20)
    socks.append(s)
open(done, "w").write(str(len(socks)))
time.sleep(max(0, deadline - time.time()))
PY
) &
flooder=$!
for _ in $(seq 300); do [ -s "$tmp/flooded" ] && break; sleep 0.1; done
[ "$(cat "$tmp/flooded" 2>/dev/null)" = 2000 ] || fail "the flood opened $(cat "$tmp/flooded" 2>/dev/null) connections"
timeout 60 "$nereid" run $model "${small[@]}" --rank 1 --world 2 --rendezvous "tcp://127.0.0.1:$port" \
  --token-file "$tmp/token" > "$tmp/flood1.log" 2>&1
rc1=$?
wait "$r0"
rc0=$?
kill "$flooder" 2>/dev/null
wait "$flooder" 2>/dev/null
[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || fail "the run beside a flood failed: $(cat "$tmp/flood0.log" "$tmp/flood1.log")"
grep -q "every rank joined (the store dropped: .* connections from 127.0.0.1" "$tmp/flood0.log" || fail "rank 0 did not log the drops: $(cat "$tmp/flood0.log")"
peak() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["peak_rss_bytes"])' "$1"; }
base=$(peak "$tmp/base0.json") flooded=$(peak "$tmp/flood0.json")
echo "rank 0 peak RSS: $base bytes alone, $flooded beside the flood"
[ $((flooded - base)) -le $((64 << 20)) ] || fail "the flood grew rank 0 by $(((flooded - base) >> 20)) MiB"
finish "token and store-flood checks"
