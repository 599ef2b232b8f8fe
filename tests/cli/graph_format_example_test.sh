#!/usr/bin/env bash
# The complete model in docs/GRAPH_FORMAT.md passes check and trains as written.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1
awk '/<!-- example: logreg -->/{found=1; next} found && /^```$/{if (inside) exit; inside=1; next} inside' \
  docs/GRAPH_FORMAT.md >"$tmp/logreg.pbtxt"
[ -s "$tmp/logreg.pbtxt" ] || fail "no example found in docs/GRAPH_FORMAT.md"
expect 0 "trainable parameters:  7,850" "$nereid" check "$tmp/logreg.pbtxt"
expect 0 "test accuracy" "$nereid" run "$tmp/logreg.pbtxt" --max-steps 20 --train-limit 1280 --test-limit 500
finish "documentation example checks"
