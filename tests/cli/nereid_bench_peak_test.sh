#!/usr/bin/env bash
# End-to-end checks of `nereid bench peak`: it measures every ISA this CPU
# runs and names the fastest; the JSON agrees with itself. The rates are not
# asserted against a figure (the machine's speed drifts); usage errors are.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

out=$("$nereid" bench peak --threads 2 --rounds 3 --json "$tmp/peak.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "bench peak exited $rc: $out"
grep -q "<- peak" <<<"$out" || fail "bench peak's table names no peak: $out"
python3 - "$tmp/peak.json" <<'PY' || fail "bench peak JSON: $out"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["threads"] == 2, d
isas = {r["isa"]: r for r in d["isas"]}
assert "sse2" in isas, d  # the x86-64 baseline is always measured
assert all(len(r["trial_gflops"]) == 3 and r["median_gflops"] > 0 for r in isas.values()), d
assert d["peak_gflops"] == max(r["median_gflops"] for r in isas.values()), d
assert isas[d["peak_isa"]]["median_gflops"] == d["peak_gflops"], d
PY
expect 2 "--workers is not an option of \`nereid bench peak\`" "$nereid" bench peak --workers 3
expect 2 "--threads must be 1-1024" "$nereid" bench peak --threads 0
expect 2 "nereid bench peak (see nereid bench --help)" "$nereid" bench peek
finish "bench peak checks"
