#!/usr/bin/env bash
# A user's own ONNX model and numpy arrays, end to end: build an MLP with
# onnx.helper, save arrays with numpy.savez, import, train on 2 local workers,
# export the weights, and recompute the test accuracy in numpy from them; the
# same with batch norm and dropout, exported as an inference graph.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1
py=/usr/bin/python3  # Debian's, with python3-numpy and python3-onnx

$py - "$tmp" <<'PY' || { echo "FAIL: could not write the model and data"; exit 1; }
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
out = sys.argv[1]
rng = np.random.default_rng(0)
def split(n):  # three Gaussian blobs in 20 dimensions
    y = rng.integers(0, 3, n)
    centers = np.eye(3, 20) * 3.0
    return (centers[y] + rng.normal(size=(n, 20))).astype(np.float32), y.astype(np.int64)
import os; os.makedirs(f"{out}/data", exist_ok=True)
for name, n in (("train", 2000), ("test", 500)):
    x, y = split(n)
    np.savez(f"{out}/data/{name}.npz", images=x, labels=y)
w1 = numpy_helper.from_array((rng.normal(size=(16, 20)) * 0.3).astype(np.float32), "fc1.weight")
b1 = numpy_helper.from_array(np.zeros(16, np.float32), "fc1.bias")
w2 = numpy_helper.from_array((rng.normal(size=(3, 16)) * 0.3).astype(np.float32), "fc2.weight")
b2 = numpy_helper.from_array(np.zeros(3, np.float32), "fc2.bias")
nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"], name="fc2", transB=1)]
graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 20])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [w1, b1, w2, b2])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), f"{out}/mlp.onnx")
# Models Nereid must refuse, each for a reason it names.
sub = helper.make_graph([helper.make_node("Sin", ["x"], ["s"], name="sine"),
                         helper.make_node("Cos", ["s"], ["c"], name="cosine"),
                         helper.make_node("Sin", ["x"], ["t"], name="sine2"),
                         helper.make_node("Add", ["c", "t"], ["y"], name="sum")], "sub",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 20])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 20])])
onnx.save(helper.make_model(sub, opset_imports=[helper.make_opsetid("", 13)]), f"{out}/sub.onnx")
odd = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="act", alpha=0.1)], "odd",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 20])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 20])])
onnx.save(helper.make_model(odd, opset_imports=[helper.make_opsetid("", 13)]), f"{out}/odd.onnx")
# The same MLP with batch norm and dropout as PyTorch exports a module in
# train mode at opset 14: BatchNormalization training_mode 1, Dropout with a
# true training_mode input.
gamma = numpy_helper.from_array(np.ones(16, np.float32), "bn.weight")
beta = numpy_helper.from_array(np.zeros(16, np.float32), "bn.bias")
mean = numpy_helper.from_array(np.zeros(16, np.float32), "bn.running_mean")
var = numpy_helper.from_array(np.ones(16, np.float32), "bn.running_var")
ratio = numpy_helper.from_array(np.array(0.2, np.float32), "ratio")
train_mode = numpy_helper.from_array(np.array(True), "train_mode")
bn_nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
            helper.make_node("BatchNormalization", ["h", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
                             ["hn", "bn_mean_out", "bn_var_out"], name="bn", training_mode=1),
            helper.make_node("Relu", ["hn"], ["r"], name="relu"),
            helper.make_node("Dropout", ["r", "ratio", "train_mode"], ["d"], name="drop"),
            helper.make_node("Gemm", ["d", "fc2.weight", "fc2.bias"], ["y"], name="fc2", transB=1)]
bn_graph = helper.make_graph(bn_nodes, "mlp_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 20])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                             [w1, b1, gamma, beta, mean, var, ratio, train_mode, w2, b2])
onnx.save(helper.make_model(bn_graph, opset_imports=[helper.make_opsetid("", 14)]), f"{out}/mlp_bn.onnx")
os.makedirs(f"{out}/bad", exist_ok=True)
np.savez(f"{out}/bad/train.npz", x=np.zeros((4, 20), np.float32))
PY

expect 0 "written to $tmp/mlp.pbtxt" "$nereid" import "$tmp/mlp.onnx" -o "$tmp/mlp.pbtxt" --dataset "npy:$tmp/data"
expect 0 "trainable parameters:  387" "$nereid" check "$tmp/mlp.pbtxt"
expect 0 "fc1/matmul" "$nereid" check "$tmp/mlp.onnx" --dataset "npy:$tmp/data"
expect 1 "is fed fashion-mnist images of [1,28,28] (784 values each) but holds 20" "$nereid" check "$tmp/mlp.onnx"
# Every node that cannot be imported is named at once, with the missing ops counted.
expect 1 "3 ONNX nodes cannot be imported; ops with no converter: Cos (1 node), Sin (2 nodes)" \
  "$nereid" import "$tmp/sub.onnx" -o "$tmp/sub.pbtxt"
expect 1 "ONNX node 'cosine' (Cos): op not supported" "$nereid" import "$tmp/sub.onnx" -o "$tmp/sub.pbtxt"
expect 1 "ONNX node 'sine2' (Sin): op not supported" "$nereid" import "$tmp/sub.onnx" -o "$tmp/sub.pbtxt"
expect 1 "ONNX node 'act' (Relu): attribute 'alpha' is not supported" "$nereid" check "$tmp/odd.onnx"
echo "not a model" >"$tmp/junk.onnx"
expect 1 "not an ONNX model" "$nereid" import "$tmp/junk.onnx" -o "$tmp/junk.pbtxt"
expect 2 "give one .onnx model and -o OUT" "$nereid" import "$tmp/mlp.onnx"
expect 1 "needs arrays 'images' and 'labels'" "$nereid" run "$tmp/mlp.onnx" --dataset "npy:$tmp/bad" --max-steps 1

# Train the .onnx file directly on the arrays, 2 workers over Gloo on loopback.
expect 0 "test accuracy" "$nereid" run "$tmp/mlp.onnx" --dataset "npy:$tmp/data" --workers 2 --batch 32 \
  --epochs 2 --checkpoint "$tmp/ckpt" --metrics-json "$tmp/metrics.json" --quiet
expect 0 "4 arrays, 387 values" "$nereid" export "$tmp/ckpt" --model "$tmp/mlp.onnx" -o "$tmp/weights.npz"
expect 0 "written to $tmp/trained.onnx" "$nereid" export "$tmp/ckpt" --model "$tmp/mlp.onnx" -o "$tmp/trained.onnx"
expect 2 "write .npz or .onnx" "$nereid" export "$tmp/ckpt" -o "$tmp/weights.txt"
expect 1 "the checkpoint has no value for" "$nereid" export "$tmp/ckpt" --model models/mlp_fashion.pbtxt -o "$tmp/x.npz"

# The weights, read back in numpy, give the accuracy Nereid reported; the
# exported ONNX model holds the same values.
$py - "$tmp" <<'PY' || fail "the exported weights do not reproduce Nereid's accuracy"
import json, sys, numpy as np, onnx
from onnx import numpy_helper
out = sys.argv[1]
w = np.load(f"{out}/weights.npz")
assert sorted(w.files) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"], w.files
test = np.load(f"{out}/data/test.npz")
h = np.maximum(test["images"] @ w["fc1.weight"].T + w["fc1.bias"], 0)
acc = float(np.mean((h @ w["fc2.weight"].T + w["fc2.bias"]).argmax(1) == test["labels"]))
reported = json.load(open(f"{out}/metrics.json"))["final_test_accuracy"]
print(f"accuracy from the exported weights {acc:.4f}, reported by nereid {reported:.4f}")
assert abs(acc - reported) < 1e-6 and acc > 0.9, (acc, reported)
for t in onnx.load(f"{out}/trained.onnx").graph.initializer:
    assert np.array_equal(numpy_helper.to_array(t), w[t.name]), t.name
PY
# The exported ONNX deploys: batch norm on its running statistics, no dropout;
# evaluated in numpy from the ONNX file alone, it scores what Nereid reported.
expect 0 "test accuracy" "$nereid" run "$tmp/mlp_bn.onnx" --dataset "npy:$tmp/data" --batch 32 --epochs 2 \
  --checkpoint "$tmp/bn_mlp_ckpt" --metrics-json "$tmp/bn_metrics.json" --quiet
expect 0 "written to $tmp/deploy.onnx" "$nereid" export "$tmp/bn_mlp_ckpt" --model "$tmp/mlp_bn.onnx" -o "$tmp/deploy.onnx"
expect 0 "written to $tmp/train_graph.onnx" "$nereid" export "$tmp/bn_mlp_ckpt" --model "$tmp/mlp_bn.onnx" \
  -o "$tmp/train_graph.onnx" --training-graph
$py - "$tmp" <<'PY' || fail "the exported inference ONNX does not reproduce Nereid's accuracy"
import json, sys, numpy as np, onnx
from onnx import numpy_helper
out = sys.argv[1]
model = onnx.load(f"{out}/deploy.onnx")
onnx.checker.check_model(model)
ops = [n.op_type for n in model.graph.node]
assert "Dropout" not in ops, ops
bn = next(n for n in model.graph.node if n.op_type == "BatchNormalization")
assert len(bn.output) == 1 and all(a.i == 0 for a in bn.attribute if a.name == "training_mode"), bn
kept = onnx.load(f"{out}/train_graph.onnx")
assert "Dropout" in [n.op_type for n in kept.graph.node], "--training-graph dropped the dropout"
w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
assert np.abs(w["bn.running_mean"]).sum() > 0, "running statistics never trained"
test = np.load(f"{out}/data/test.npz")
h = test["images"] @ w["fc1.weight"].T + w["fc1.bias"]
h = (h - w["bn.running_mean"]) / np.sqrt(w["bn.running_var"] + 1e-5) * w["bn.weight"] + w["bn.bias"]
logits = np.maximum(h, 0) @ w["fc2.weight"].T + w["fc2.bias"]
acc = float(np.mean(logits.argmax(1) == test["labels"]))
reported = json.load(open(f"{out}/bn_metrics.json"))["final_test_accuracy"]
print(f"accuracy of the exported inference model {acc:.4f}, reported by nereid {reported:.4f}")
assert abs(acc - reported) < 1e-6 and acc > 0.9, (acc, reported)
PY
# Batch norm on 2 ranks: each updates its running statistics from its own
# batches; before the evaluation they take the average, so both ranks save
# the same statistics (and the run is not stopped as drifted apart).
expect 0 "test accuracy" "$nereid" run models/resnet20_cifar.pbtxt --dataset synthetic --workers 2 --batch 8 \
  --max-steps 3 --test-limit 32 --checkpoint "$tmp/bn_ckpt" --quiet
for r in 0 1; do
  expect 0 "written to $tmp/bn$r.npz" "$nereid" export "$tmp/bn_ckpt" --model models/resnet20_cifar.pbtxt --rank $r \
    -o "$tmp/bn$r.npz"
done
$py - "$tmp" <<'PY' || fail "the ranks' batch-norm statistics differ after evaluation"
import sys, numpy as np
a, b = np.load(f"{sys.argv[1]}/bn0.npz"), np.load(f"{sys.argv[1]}/bn1.npz")
stats = [k for k in a.files if k.endswith("running_mean") or k.endswith("running_var")]
assert len(stats) == 2 * 21, stats
assert all(np.array_equal(a[k], b[k]) for k in a.files)
assert any(np.abs(a[k]).sum() > 0 for k in stats if k.endswith("running_mean")), "statistics never updated"
PY
finish "ONNX and numpy checks"
