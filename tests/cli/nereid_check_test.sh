#!/usr/bin/env bash
# End-to-end checks of the nereid binary: output, exit codes, error messages.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

expect 0 "trainable parameters:  669,706" "$nereid" check models/mlp_fashion.pbtxt
expect 0 "fc1/matmul" "$nereid" check models/mlp_fashion.pbtxt
expect 0 "[?,16,10,10] float32" "$nereid" check models/lenet_fashion.pbtxt
expect 0 "non-trainable state:   1,568" "$nereid" check models/resnet20_cifar.pbtxt
expect 0 "Usage: nereid check MODEL" "$nereid" check --help
expect 0 "Commands:" "$nereid" --help
expect 0 "nereid 0." "$nereid" --version
# Every pass and codec, with its options and defaults.
for what in "parameter_server: " "chunk_kb (default 256)" "stage_split: " "Gradient codecs" "qsgd: "; do
  expect 0 "$what" "$nereid" passes
done
expect 2 "takes no arguments" "$nereid" passes extra
expect 0 "Conv2D(x, filter) -> (y)" "$nereid" ops Conv2D
expect 2 "unknown command 'chekc'" "$nereid" chekc
expect 2 "unknown flag --jsn (did you mean --json?)" "$nereid" check models/mlp_fashion.pbtxt --jsn
expect 2 "no model given" "$nereid" check
expect 1 "cannot open graph file" "$nereid" check "$tmp/missing.pbtxt"

# --json is valid JSON with the same totals.
"$nereid" check models/lenet_fashion.pbtxt --json >"$tmp/lenet.json" || fail "check --json failed"
python3 - "$tmp/lenet.json" <<'PY' || fail "JSON report is wrong"
import json, sys
report = json.load(open(sys.argv[1]))
assert report["totals"]["trainable_parameters"] == 61706, report["totals"]
names = [n["name"] for n in report["nodes"]]
assert "conv1/conv" in names and names.index("images") < names.index("conv1/conv")
conv = next(n for n in report["nodes"] if n["name"] == "conv1/conv")
assert conv["outputs"][0]["shape"] == [-1, 6, 28, 28], conv
PY

# --dot writes Graphviz.
"$nereid" check models/lenet_fashion.pbtxt --dot "$tmp/lenet.dot" >/dev/null || fail "check --dot failed"
grep -q '"conv1/filter" -> "conv1/conv"' "$tmp/lenet.dot" || fail "dot file lacks an edge"

# A bad model: the error names file, line, column, node and op; exit 1.
cat >"$tmp/bad.pbtxt" <<'PB'
version: 1
node { name: "x" op: "Input" attr { key: "shape" value { shape { dim: -1 dim: 784 } } } }
node { name: "w" op: "Parameter" attr { key: "shape" value { shape { dim: 500 dim: 10 } } } }
node { name: "y" op: "MatMul" input: "x" input: "w" }
PB
expect 1 "bad.pbtxt:4:1: node 'y' (MatMul): inner dimensions disagree" "$nereid" check "$tmp/bad.pbtxt"

# A syntax error carries line and column.
printf 'node {\n  name: "x"\n  op: Input\n}\n' >"$tmp/syntax.pbtxt"
expect 1 "syntax.pbtxt:3:" "$nereid" check "$tmp/syntax.pbtxt"

finish "CLI checks"
