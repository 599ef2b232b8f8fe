#!/usr/bin/env bash
# Runs the CUDA test binaries on a machine with a GPU but without this
# project's build set-up (no Bazel, no Debian libraries).
#
#   bench/gpu/cuda_tests.sh bundle DIR   # here: build under --config=cuda and
#                                        # copy the tests and the shared
#                                        # libraries they need into DIR
#   bench/gpu/cuda_tests.sh run DIR      # there: run every test in DIR, then
#                                        # gpu_bench (SGEMM peak; lenet and
#                                        # vgg11 trained on the GPU)
#
# The bundle leaves out the C library, the C++ runtime, libcudart, libnccl,
# cuBLAS and cuDNN: the GPU machine has its own (newer) ones, and they are
# too large to carry (libnccl.so.2 is 218 MB here, cuDNN's engines more). Each
# is found through NCCL_LIB_DIR / CUDART_LIB_DIR / CUBLAS_LIB_DIR /
# CUDNN_LIB_DIR, or in a Python environment's nvidia-* wheels. The bundle
# also carries models/, which gpu_training_test reads (run from DIR).
set -euo pipefail

TESTS=(//ops/cuda:elementwise_kernels_test //device:cuda_device_test //comm:nccl_communicator_test
       //comm:wire_format_gpu_test //tests:codec_gpu_test
       //tests:gpu_kernels_test //tests:gpu_training_test //bench/gpu:gpu_bench)

bundle() {
  local dir=$1
  rm -rf "$dir" && mkdir -p "$dir/lib"
  bazel build --config=cuda "${TESTS[@]}"
  for target in "${TESTS[@]}"; do
    local bin="bazel-bin/${target#//}"; bin=${bin/://}
    cp -L "$bin" "$dir/"
    ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|libcudart.so*|libnccl.so*) ;;
        libcublas*.so*|libcudnn*.so*) ;;
        *) cp -Ln "$lib" "$dir/lib/" ;;
      esac
    done
  done
  cp -r models "$dir/models"
  du -sh "$dir"
}

# The directory holding a library, from the NCCL_LIB_DIR-style variable or the
# nvidia wheels of the first python3 that has them.
wheel_lib_dir() {
  python3 - "$1" <<'PY' 2>/dev/null || true
import glob, os, site, sys
for root in site.getsitepackages():
    for hit in glob.glob(os.path.join(root, "nvidia", "*", "lib", sys.argv[1])):
        print(os.path.dirname(hit)); sys.exit(0)
PY
}

run() {
  local dir; dir=$(cd "$1" && pwd)
  local nccl=${NCCL_LIB_DIR:-$(wheel_lib_dir 'libnccl.so.2')}
  local cudart=${CUDART_LIB_DIR:-$(wheel_lib_dir 'libcudart.so.13')}
  local cublas=${CUBLAS_LIB_DIR:-$(wheel_lib_dir 'libcublas.so.13')}
  local cudnn=${CUDNN_LIB_DIR:-$(wheel_lib_dir 'libcudnn.so.9')}
  export LD_LIBRARY_PATH="$dir/lib:${nccl}:${cudart}:${cublas}:${cudnn}:${LD_LIBRARY_PATH:-}"
  cd "$dir"  # gpu_training_test reads models/
  export TEST_TMPDIR=${TEST_TMPDIR:-$(mktemp -d)}
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  echo "libnccl from: ${nccl:-system}; libcudart from: ${cudart:-system}; cuBLAS from: ${cublas:-system};" \
       "cuDNN from: ${cudnn:-system}"
  local failed=0
  for bin in "$dir"/*_test; do
    echo "== $(basename "$bin")"
    "$bin" --gtest_brief=0 || failed=1
  done
  # The kernels once more under compute-sanitizer's memcheck, where it exists
  # (without the test that provokes CUDA API errors on purpose, which memcheck
  # would count).
  if command -v compute-sanitizer >/dev/null; then
    echo "== elementwise_kernels_test under compute-sanitizer --tool memcheck"
    compute-sanitizer --tool memcheck --error-exitcode 1 "$dir/elementwise_kernels_test" \
      --gtest_filter=-CudaElementwiseTest.CudaErrorBecomesStatus || failed=1
    # The models' GPU kernels under the stream scheduler: no stray access
    # (memcheck), no shared-memory race in the project's reductions (racecheck).
    for tool in memcheck racecheck; do
      echo "== gpu_training_test under compute-sanitizer --tool $tool"
      compute-sanitizer --tool "$tool" --error-exitcode 1 "$dir/gpu_training_test" || failed=1
    done
  fi
  echo "== gpu_bench"
  "$dir/gpu_bench" --steps 20 || failed=1
  return $failed
}

case "${1:-}" in
  bundle) bundle "${2:?bundle DIR}" ;;
  run) run "${2:?run DIR}" ;;
  *) echo "usage: $0 bundle DIR | run DIR" >&2; exit 2 ;;
esac
