#!/usr/bin/env bash
# Fails when models/*.pbtxt differ from what models/generate_models.py writes
# (its layers ask the nereid binary, $1, for their input sizes).
set -euo pipefail
export NEREID_BIN="$PWD/$1"
out="${TEST_TMPDIR:-/tmp}/generated_models"
rm -rf "$out"
python3 models/generate_models.py --out "$out"
status=0
for f in "$out"/*.pbtxt; do
  name=$(basename "$f")
  if ! diff -q "models/$name" "$f" >/dev/null; then
    echo "models/$name is stale: run 'python3 models/generate_models.py' and commit the result"
    diff "models/$name" "$f" | head -20
    status=1
  fi
done
for f in models/*.pbtxt; do
  [ -f "$out/$(basename "$f")" ] || { echo "$f is not produced by the generator"; status=1; }
done
# A graph Nereid rejects stops the builder with Nereid's error, naming the model.
python3 - <<'PY' || status=1
import sys
sys.path.insert(0, "models")
from nereid_builder import Model
m = Model("broken", "a MatMul of two 4-D tensors", "fashion-mnist", 10)
x = m.input("images", [-1, 1, 28, 28], feed="images")
m.node("y", "MatMul", [x, x])
try:
    m.shape("y")
    sys.exit("the builder accepted a MatMul of 4-D tensors")
except ValueError as e:
    assert "broken: nereid check rejects the graph so far" in str(e) and "MatMul" in str(e), e
PY
exit $status
