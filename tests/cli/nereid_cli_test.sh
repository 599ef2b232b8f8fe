#!/usr/bin/env bash
# The command line as a whole: every subcommand answers --help with its
# generated usage (exit 0); every kind of mistake is one line on stderr and
# exit 2; --version names the source revision; the log takes a level.
set -uo pipefail
nereid="$1"
source tests/cli/expect.sh || exit 1  # the test runs in the workspace root

commands=$("$nereid" --help | sed -n '/^Commands:/,/^$/p' | awk 'NF >= 2 && $1 != "Commands:" {print $1}')
[ "$(echo "$commands" | wc -w)" -ge 10 ] || fail "nereid --help lists too few commands: $commands"
for c in $commands; do
  expect 0 "Usage: nereid $c" "$nereid" "$c" --help
  expect 0 "Usage: nereid $c" "$nereid" "$c" -h
done
expect 0 "  -o,--output PLAN" "$nereid" plan --help
expect 0 "Supervision:" "$nereid" run --help

# One line, exit 2: run a command line, compare stderr to the pattern.
one_line_error() {  # pattern, command...
  local pattern=$1
  shift
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq 2 ] || fail "'$*' exited $rc, expected 2"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "'$*' printed more than one line on stderr:\n$err"
  [[ "$err" == *"$pattern"* ]] || fail "'$*': '$err' lacks '$pattern'"
}
model=models/logreg_fashion.pbtxt
one_line_error "unknown flag --epoch (did you mean --epochs?)" "$nereid" run $model --epoch 2
one_line_error "--epochs needs a value (got the flag --batch)" "$nereid" run $model --epochs --batch 3
one_line_error "--epochs needs a value" "$nereid" run $model --epochs
one_line_error "unknown flag -epochs: flags start with -- (--epochs?)" "$nereid" run $model -epochs 2
one_line_error "--quiet=maybe: a switch is true or false" "$nereid" run $model --quiet=maybe
one_line_error "nereid run takes one model or plan" "$nereid" run $model $model
one_line_error "nereid run takes one model or plan" "$nereid" run
one_line_error "unknown flag --ouput (did you mean --output?)" "$nereid" plan $model --passes autodiff --ouput x.pbtxt
one_line_error "nereid plan takes one model and -o PLAN" "$nereid" plan $model --passes autodiff
one_line_error "unknown flag --jsn (did you mean --json?)" "$nereid" check $model --jsn -
one_line_error "--json needs a value" "$nereid" check $model --json
one_line_error "nereid passes takes no arguments (got 'sgd')" "$nereid" passes sgd
one_line_error "unknown flag --all" "$nereid" ops --all
one_line_error "nereid trace summary TRACE..." "$nereid" trace
one_line_error "nereid bench allreduce, nereid bench compress MODEL, or nereid bench peak" "$nereid" bench
one_line_error "unknown flag --methds (did you mean --methods?)" "$nereid" bench compress $model --methds none
one_line_error "give one checkpoint, -o OUT" "$nereid" export
one_line_error "give one .onnx model and -o OUT" "$nereid" import
one_line_error "--workers is required" "$nereid" model $model --compute-ms 5 --latency-us 1 --bandwidth-gbit 1
one_line_error "--log-level loud: expected trace, debug, info, warn, error or off" "$nereid" run $model --log-level loud
one_line_error "NEREID_LOG_LEVEL=loud: expected" env NEREID_LOG_LEVEL=loud "$nereid" run $model
one_line_error "NEREID_LOG_LEVEL=loud: expected" env NEREID_LOG_LEVEL=loud "$nereid" check $model
# A single dash starts a one-letter flag or a number: -output is not -o "utput".
one_line_error "unknown flag -output: flags start with -- (--output?)" "$nereid" plan $model --passes autodiff -output x.pbtxt
one_line_error "--dump-after= needs a value after =" "$nereid" plan $model --passes autodiff --dump-after= -o x.pbtxt

# A repeated flag: the last one wins (a --config file's flags come first).
expect 0 "epoch 1/2 step 1/1" "$nereid" run $model --dataset synthetic --epochs 1 --epochs 2 --max-steps 1 \
  --test-limit 32 --metrics-json "$tmp/m.json"
# --version: the version and the git revision (or "unknown" outside a checkout).
expect 0 "(revision " "$nereid" --version
"$nereid" --version | grep -Eq "^nereid [0-9][^ ]* \(revision ([0-9a-f]{12}(-dirty)?|unknown)\)$" \
  || fail "--version: $("$nereid" --version)"
revision=$("$nereid" --version | sed 's/.*(revision \(.*\))/\1/')
grep -q "\"revision\":\"$revision\"" "$tmp/m.json" || fail "--metrics-json lacks revision $revision: $(cat "$tmp/m.json")"
# The log: an injected fault is logged with its time and level (the local
# launcher prefixes the rank); --log-level error keeps the warning out.
out=$(NEREID_FAULTS=rank=1:kill@3 "$nereid" run $model --dataset synthetic --max-steps 4 --test-limit 32 \
  --quiet --workers 2 2>&1)
echo "$out" | grep -Eq "^\[rank 1\] \[[0-9-]+ [0-9:.]+\] \[warning\] fault injection: SIGKILL on rank 1 at call 3" \
  || fail "the injected fault is not logged with its time, rank and level:\n$out"
out=$(NEREID_FAULTS=rank=1:kill@3 "$nereid" run $model --dataset synthetic --max-steps 4 --test-limit 32 \
  --quiet --workers 2 --log-level error 2>&1)
grep -q "was killed by signal 9" <<<"$out" || fail "the killed worker is not reported:\n$out"
grep -q "fault injection" <<<"$out" && fail "--log-level error still shows a warning:\n$out"
finish "CLI checks"
