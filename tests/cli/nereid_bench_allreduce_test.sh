#!/usr/bin/env bash
# End-to-end checks of `nereid bench allreduce` over loopback (two real worker
# processes): the link probe and --no-link-probe, the progress line a script
# waits for before it relies on the traffic, and the JSON. Timing is not
# asserted (the machine's speed drifts).
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

out=$("$nereid" bench allreduce --workers 2 --sizes 4K --rounds 1 --json "$tmp/probed.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "bench allreduce exited $rc: $out"
grep -q "link: alpha" <<<"$out" || fail "the probed link is not reported: $out"
grep -q "bench allreduce: timing 4096 bytes: 1 rounds of" <<<"$out" || fail "no progress line: $out"

out=$("$nereid" bench allreduce --workers 2 --sizes 4K,8K --rounds 2 --no-link-probe --json "$tmp/unprobed.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "bench allreduce --no-link-probe exited $rc: $out"
grep -q "link not probed" <<<"$out" || fail "--no-link-probe: the table does not say so: $out"
[ "$(echo "$out" | grep -c "bench allreduce: timing")" -eq 2 ] || fail "one progress line per size expected: $out"
python3 - "$tmp/probed.json" "$tmp/unprobed.json" <<'PY' || fail "bench allreduce JSON: $out"
import json, sys
probed, unprobed = (json.load(open(p)) for p in sys.argv[1:])
assert probed["alpha_seconds"] > 0 and probed["beta_bytes_per_second"] > 0, probed
assert unprobed["alpha_seconds"] == 0 and unprobed["beta_bytes_per_second"] == 0, unprobed
assert [r["bytes"] for r in unprobed["sizes"]] == [4096, 8192], unprobed
assert all(r["seconds"] > 0 for r in unprobed["sizes"]), unprobed
PY
# Another backend of the same ranks, alternated with ours: its own table and
# JSON fields; an unknown one is refused before any worker starts.
out=$("$nereid" bench allreduce --workers 2 --sizes 4K --rounds 1 --no-link-probe --also hierarchical \
  --json "$tmp/also.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "bench allreduce --also hierarchical exited $rc: $out"
grep -q "(hierarchical)" <<<"$out" || fail "--also hierarchical: no table of its own: $out"
python3 - "$tmp/also.json" <<'PY' || fail "bench allreduce --also JSON: $out"
import json, sys
row = json.load(open(sys.argv[1]))["sizes"][0]
assert row["hierarchical_seconds"] > 0 and row["hierarchical_ratio_to_raw_gloo"] > 0, row
PY
expect 2 "--also: unknown communicator backend 'tcp' (registered: gloo, hierarchical, shm)" \
  "$nereid" bench allreduce --also tcp
# An unprobed report has no link for the timing model: it says so.
expect 1 "the link estimate is unusable" "$nereid" model models/lenet_fashion.pbtxt --workers 2 --compute-ms 5 \
  --link "$tmp/unprobed.json"
finish "bench allreduce checks"
