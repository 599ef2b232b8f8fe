#!/usr/bin/env bash
# Fails when models/*.pbtxt differ from what models/generate_models.py writes.
set -euo pipefail
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
exit $status
