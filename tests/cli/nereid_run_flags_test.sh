#!/usr/bin/env bash
# `nereid run` refuses bad flags at once, before loading data or training:
# exit 2 and a message naming the flag.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

model=models/logreg_fashion.pbtxt
expect 2 "--threads must be >= 1 (got 0)" "$nereid" run $model --threads 0
expect 2 "--threads must be >= 1 (got -1)" "$nereid" run $model --threads -1
expect 2 "--max-steps must be >= 0 (got -1)" "$nereid" run $model --max-steps -1
expect 2 "--seed must be >= 0 (got -1)" "$nereid" run $model --seed -1
expect 2 "--batch must be >= 1 (got 0)" "$nereid" run $model --batch 0
expect 2 "--epochs must be >= 1 (got 0)" "$nereid" run $model --epochs 0
expect 2 "--test-limit must be >= 0 (got -5)" "$nereid" run $model --test-limit -5
expect 2 "--workers 1000: at most" "$nereid" run $model --workers 1000
touch "$tmp/a_file"
expect 2 "--checkpoint $tmp/a_file is a file, not a directory" "$nereid" run $model --checkpoint "$tmp/a_file"
expect 2 "the directory $tmp/missing does not exist" "$nereid" run $model --metrics-json "$tmp/missing/m.json"
expect 2 "--trace $tmp is a directory, not a file" "$nereid" run $model --trace "$tmp"
# The bounds are not off by one: the smallest good values run.
expect 0 "1 epochs" "$nereid" run $model --dataset synthetic --threads 1 --max-steps 1 --seed 0 --batch 1 \
  --epochs 1 --test-limit 10 --metrics-json "$tmp/m.json" --quiet
finish "nereid run flag checks"
