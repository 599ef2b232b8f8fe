#!/usr/bin/env bash
# Runs every test: installs missing packages (setup.sh), then
#   0. tests/check_layers.py             (no package uses a package above it)
#   1. bazel test //...                  (all suites)
#   2. bazel test --config=cuda //...    (adds the CUDA/NCCL targets: built with
#                                         nvcc, their tests skip without a GPU)
# and prints one closing line: "nereid: N passed, N failed".
# Options (CI adds the AddressSanitizer pass: .ci/run):
#   --asan       then every C++ suite under AddressSanitizer + UBSan
#   --tsan       then every C++ suite under ThreadSanitizer
#   --no-suites  skip 0-2 (with --asan or --tsan: the sanitizer passes alone)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$root"
"$root/setup.sh" || { echo "test.sh: setup failed"; exit 1; }

suites=1
asan=0
tsan=0
for arg in "$@"; do
  case "$arg" in
    --asan) asan=1 ;;
    --tsan) tsan=1 ;;
    --no-suites) suites=0 ;;
    --quick) ;;  # the default now: the sanitizer passes are opt-in
    *) echo "test.sh: unknown option $arg (known: --asan, --tsan, --no-suites)"; exit 2 ;;
  esac
done

# Compiled objects are kept in a disk cache shared by every clone on this
# machine (a fresh clone rebuilds only what changed); emptied past 20 GB.
# Tests are never taken from it or from an earlier run: every run runs them
# all (--cache_test_results=no).
cache="${NEREID_BAZEL_CACHE:-$HOME/.cache/nereid/bazel-disk-cache}"
if [ -d "$cache" ] && [ "$(du -s --block-size=1G "$cache" 2>/dev/null | cut -f1)" -gt 20 ]; then
  echo "test.sh: emptying the build cache $cache (over 20 GB)"
  rm -rf "$cache"
fi
cache_flag=()
if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; then cache_flag=(--disk_cache="$cache"); fi

passed=0
failed=0
overall=0
summary=$(mktemp /tmp/nereid-test.XXXXXX)

run_pass() {  # name, bazel args...
  local name=$1
  shift
  echo "== $name: bazel test $*"
  # No `|| true` here: it would replace PIPESTATUS with true's (and hide a
  # failing bazel); the script runs without -e, so a grep that matches nothing
  # is harmless.
  bazel test "${cache_flag[@]}" --cache_test_results=no --test_summary=short "$@" 2>&1 | tee "$summary" | grep -vE '^(INFO|Loading|Analyzing)' | grep -E 'PASSED|FAILED|TIMEOUT|NO STATUS|ERROR|error:|Executed'
  local rc=${PIPESTATUS[0]}
  passed=$((passed + $(grep -cE '^//.* PASSED' "$summary")))
  failed=$((failed + $(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$summary")))
  # rc 4 means "no test targets" for a pattern; anything else non-zero failed.
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ]; then
    overall=1
    [ "$(grep -cE '^//.* (FAILED|TIMEOUT)' "$summary")" -eq 0 ] && failed=$((failed + 1))
  fi
}

# Every package with C++ in it (the sanitizer passes skip models/ and bench/).
CPP_PACKAGES=(//core/... //device/... //graph/... //comm/... //data/... //compress/... //coded/... //ops/... //passes/... //plan/...
              //schedulers/... //runtime/... //timing/... //benchmarks/... //tests/...)

if [ "$suites" -eq 1 ]; then
  echo "== layering: tests/check_layers.py"
  if python3 tests/check_layers.py --self-test && python3 tests/check_layers.py; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    overall=1
  fi

  run_pass "all suites" //...
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    # The conformance suite's host backends ran above; here its NCCL cases
    # (skipped without a GPU per rank) and NCCL's own tests.
    run_pass "CUDA targets" --config=cuda --test_arg=--gtest_filter='*nccl*:*Nccl*:*Coverage*:*Cuda*:*Kernel*:*WireFormatGpu*:*CodecGpu*' \
      //ops/cuda/... //device:cuda_device_test //comm:nccl_communicator_test //comm:wire_format_gpu_test \
      //comm:communicator_conformance_test \
      //tests:gpu_training_test //tests:gpu_kernels_test //tests:codec_gpu_test
  else
    echo "== CUDA targets: skipped (no /usr/local/cuda/bin/nvcc on this machine)"
  fi
fi
if [ "$asan" -eq 1 ]; then
  run_pass "AddressSanitizer + UBSan" --config=asan --test_tag_filters=-no_sanitizer "${CPP_PACKAGES[@]}"
fi
if [ "$tsan" -eq 1 ]; then
  run_pass "ThreadSanitizer" --config=tsan --test_tag_filters=-no_sanitizer "${CPP_PACKAGES[@]}"
fi
rm -f "$summary"
echo "nereid: $passed passed, $failed failed"
exit $overall
