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
for what in "parameter_server: " "chunk_kb (default 0)" "stage_split: " "Gradient codecs" "qsgd: "; do
  expect 0 "$what" "$nereid" passes
done
expect 2 "takes no arguments" "$nereid" passes extra
expect 0 "Conv2D(x, filter) -> (y)" "$nereid" ops Conv2D
expect 2 "unknown command 'chekc'" "$nereid" chekc
expect 2 "unknown flag --jsn (did you mean --json?)" "$nereid" check models/mlp_fashion.pbtxt --jsn
expect 2 "no model given" "$nereid" check
expect 1 "cannot open graph file" "$nereid" check "$tmp/missing.pbtxt"
# Attributes that contradict the graph, and devices Nereid does not know, are
# refused naming the node.
sed 's/key: "num_classes" value { i: 10 }/key: "num_classes" value { i: 9223372036854775807 }/' \
  models/logreg_fashion.pbtxt >"$tmp/classes.pbtxt"
expect 1 "scoring 10 classes, but the graph attribute num_classes is 9223372036854775807" \
  "$nereid" check "$tmp/classes.pbtxt"
expect 1 "scoring 10 classes, but the graph attribute num_classes is 9223372036854775807" \
  "$nereid" run "$tmp/classes.pbtxt" --dataset synthetic --max-steps 1
sed '0,/op: "Input"/s//op: "Input"\n  device: "tpu:banana"/' models/logreg_fashion.pbtxt >"$tmp/device.pbtxt"
expect 1 "names device 'tpu:banana', which Nereid does not know" "$nereid" check "$tmp/device.pbtxt"
sed '0,/op: "Input"/s//op: "Input"\n  device: "cpu:0"/' models/logreg_fashion.pbtxt >"$tmp/cpu0.pbtxt"
expect 0 "trainable parameters" "$nereid" check "$tmp/cpu0.pbtxt"
# place: the pass's note counts the copies, the placed plan checks, and a
# pass after place is refused before anything runs.
expect 0 "50 nodes on sim:0, 2 on the host, 2 copies (2 CopyToDevice, 0 CopyToHost)" \
  "$nereid" plan models/mlp_fashion.pbtxt --passes 'autodiff,sgd(lr=0.1),place(device=sim)' -o "$tmp/placed.pbtxt"
expect 0 "trainable parameters" "$nereid" check "$tmp/placed.pbtxt"
expect 2 "place must be the last pass in the pass list (data_parallel follows it)" \
  "$nereid" plan models/mlp_fashion.pbtxt --passes 'autodiff,sgd(lr=0.1),place(device=sim),data_parallel' \
  -o "$tmp/misplaced.pbtxt"

# A model's FLOPs are its forward pass's; a training plan's, forward and
# backward, every matrix product and convolution included, and an optimizer
# update (per step, whatever the batch) counts none per sample.
expect 0 "forward FLOPs/sample:  1,339,442" "$nereid" check models/mlp_fashion.pbtxt
"$nereid" plan models/mlp_fashion.pbtxt --passes 'autodiff,sgd(momentum=0.9)' -o "$tmp/mlp_plan.pbtxt" >/dev/null ||
  fail "plan mlp_fashion failed"
# 3 forward products, 3 weight gradients, 2 input gradients: 3,209,216; the
# bias adds, ReLUs and the loss 2,098.
expect 0 "step FLOPs/sample:     3,211,314 (forward and backward" "$nereid" check "$tmp/mlp_plan.pbtxt"
"$nereid" plan models/lenet_fashion.pbtxt --passes autodiff,sgd -o "$tmp/lenet_plan.pbtxt" >/dev/null ||
  fail "plan lenet_fashion failed"
"$nereid" check "$tmp/lenet_plan.pbtxt" --json - >"$tmp/lenet_plan.json" || fail "check of lenet's plan failed"
python3 - "$tmp/lenet_plan.json" <<'PY' || fail "lenet plan's FLOPs are wrong"
import json, sys
report = json.load(open(sys.argv[1]))
assert report["totals"]["flops_include_backward"] is True, report["totals"]
flops = {}
for n in report["nodes"]:
    flops[n["op"]] = flops.get(n["op"], 0) + n["flops_per_sample"]
# conv1's input gradient is never needed (the images'), so the gradients
# cost conv1's forward once and conv2's twice.
by_name = {n["name"]: n["flops_per_sample"] for n in report["nodes"]}
assert "conv1/conv/grad/x" not in by_name, sorted(by_name)
assert by_name["conv2/conv/grad/x"] == by_name["conv2/conv"] == by_name["conv2/conv/grad/filter"] > 0, by_name
assert flops["Conv2DBackpropFilter"] == flops["Conv2D"], flops
assert flops.get("ApplySgd", 0) == 0, flops
PY

# --json is valid JSON with the same totals.
"$nereid" check models/lenet_fashion.pbtxt --json - >"$tmp/lenet.json" || fail "check --json failed"
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

# Trainable as written: each gap is named with its fix; --forward-only skips it.
cat >"$tmp/matmul_loss.pbtxt" <<'PB'
attr { key: "loss" value { s: "y" } }
node { name: "x" op: "Input" attr { key: "shape" value { shape { dim: -1 dim: 784 } } } }
node { name: "w" op: "Parameter" attr { key: "shape" value { shape { dim: 784 dim: 10 } } } }
node { name: "y" op: "MatMul" input: "x" input: "w" }
PB
expect 1 "is the loss but its output is [?,10] float32" "$nereid" check "$tmp/matmul_loss.pbtxt"
expect 0 "activations/sample" "$nereid" check "$tmp/matmul_loss.pbtxt" --forward-only
sed -e 's/"loss" value { s: "y" }/"loss" value { s: "l" }/' -e 's/name: "x"/name: "pixels"/' \
    -e 's/input: "x"/input: "pixels"/' "$tmp/matmul_loss.pbtxt" >"$tmp/unfed.pbtxt"
cat >>"$tmp/unfed.pbtxt" <<'PB'
node { name: "labels" op: "Input" attr { key: "shape" value { shape { dim: -1 } } } attr { key: "dtype" value { type: DT_INT32 } } }
node { name: "l" op: "SoftmaxCrossEntropy" input: "y" input: "labels" }
PB
expect 1 "is fed 'pixels', which no dataset provides; add attr { key: \"feed\"" "$nereid" check "$tmp/unfed.pbtxt"
sed -e 's/name: "pixels"/name: "images"/' -e 's/input: "pixels"/input: "images"/' -e 's/dim: 784 } } } }/dim: 700 } } } }/' \
    -e 's/dim: 784 dim: 10/dim: 700 dim: 10/' "$tmp/unfed.pbtxt" >"$tmp/wrong_size.pbtxt"
expect 1 "give it shape [-1,1,28,28] or [-1,784]" "$nereid" check "$tmp/wrong_size.pbtxt" --dataset fashion-mnist
expect 1 "give it shape [-1,1,28,28] or [-1,784]" "$nereid" run "$tmp/wrong_size.pbtxt" --dataset fashion-mnist --max-steps 1
expect 0 "training:              loss 'l'" "$nereid" check "$tmp/wrong_size.pbtxt" --dataset synthetic
# --passes/--workers: the model is planned as `nereid run` would plan it
# (implied passes added, nothing written) and the plan is checked.
expect 0 "ranks:                 4 checked" "$nereid" check models/mlp_fashion.pbtxt --workers 4 \
  --passes "hybrid_partition,autodiff,sgd"
expect 0 "ranks:                 3 checked" "$nereid" check models/logreg_fashion.pbtxt --workers 2 --servers 1
expect 2 "--passes: unknown pass 'autodif'" "$nereid" check models/mlp_fashion.pbtxt --workers 4 --passes autodif
expect 1 "group_size 2 does not divide the 3 workers" "$nereid" check models/mlp_fashion.pbtxt --workers 3 \
  --passes "hybrid_partition(group_size=2),autodiff,sgd"
finish "CLI checks"
