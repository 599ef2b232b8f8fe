# Shared by the CLI shell tests: source it, then call `expect` per check and
# `finish NAME` at the end (exit 1 if any check failed).
tmp="${TEST_TMPDIR:-/tmp}"
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

expect() {  # expected_rc, pattern, command...
  local want_rc=$1 pattern=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [ "$rc" -eq "$want_rc" ] || fail "'$*' exited $rc, expected $want_rc; output:\n$out"
  # A bash match, not a pipe into grep: nothing to fork or to take SIGPIPE.
  [[ "$out" == *"$pattern"* ]] || fail "'$*' output lacks '$pattern'; output:\n$out"
}

finish() {  # what passed, e.g. "CLI checks"
  if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "all $1 passed"
}
