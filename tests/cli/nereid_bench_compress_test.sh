#!/usr/bin/env bash
# End-to-end checks of `nereid bench compress`: two real worker processes over
# loopback aggregate lenet's gradients dense and with two codecs; the bytes
# each rank sent are measured, so the compressed rows must show a wire ratio
# above 1 (top-k 1% sends about 1/25 of lenet's weights). Timing is not
# asserted (the machine's speed drifts); usage errors are.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

out=$("$nereid" bench compress models/lenet_fashion.pbtxt --workers 2 --methods 'none,topk(ratio=0.01),powersgd' \
  --iterations 2 --rounds 1 --warmup 1 --json "$tmp/agg.json" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "bench compress exited $rc: $out"
python3 - "$tmp/agg.json" <<'PY' || fail "bench compress JSON: $out"
import json, sys
rows = {r["method"]: r for r in json.load(open(sys.argv[1]))["rows"]}
assert list(rows) == ["none", "topk(ratio=0.01)", "powersgd"], rows
dense = rows["none"]["bytes_sent_per_step"]
assert dense == rows["none"]["gradient_bytes"], rows["none"]  # 2 ranks: a ring sends the buffer once
assert dense / rows["topk(ratio=0.01)"]["bytes_sent_per_step"] > 8, rows
assert dense / rows["powersgd"]["bytes_sent_per_step"] > 8, rows
assert all(r["seconds"] > 0 and r["iterations"] == 2 for r in rows.values()), rows
PY
expect 1 "unknown method 'zip'" "$nereid" bench compress models/lenet_fashion.pbtxt --methods none,zip
expect 1 "qsgd has no option 'ratio'" "$nereid" bench compress models/lenet_fashion.pbtxt --methods 'qsgd(ratio=1)'
expect 1 "write options as compress(...) does" "$nereid" bench compress models/lenet_fashion.pbtxt --methods qsgd:bits=4
expect 1 "unbalanced '('" "$nereid" bench compress models/lenet_fashion.pbtxt --methods 'qsgd(bits=4'
expect 1 "unbalanced ')'" "$nereid" bench compress models/lenet_fashion.pbtxt --methods 'qsgd)'
expect 1 "must end with ')'" "$nereid" bench compress models/lenet_fashion.pbtxt --methods 'qsgd(bits=4)x'

expect 2 "nereid bench compress MODEL, or nereid bench peak (see nereid bench --help)" "$nereid" bench compress
finish "bench compress checks"
