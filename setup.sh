#!/usr/bin/env bash
# Installs every Debian package Nereid needs to build, test and train.
# Idempotent: when everything is present it prints nothing and returns at once.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-rules-java bazel-skylib
  g++ libtbb-dev libabsl-dev libprotobuf-dev protobuf-compiler libgtest-dev
  libgloo-dev libdnnl-dev libhiredis-dev libibverbs-dev zlib1g-dev nlohmann-json3-dev libeigen3-dev libonnx-dev libonnx-testdata libzip-dev python3-numpy python3-onnx
  libcli11-dev libspdlog-dev libssl-dev
  dataset-fashion-mnist fortunes redis-server iproute2 python3
)
# `./setup.sh --bench` adds the peer the benchmarks compare against: PyTorch
# 1.13 (and torchvision's model definitions) with OpenBLAS (without libopenblas0, torch falls back to the slow
# reference BLAS and every comparison would flatter Nereid).
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(python3-torch python3-torchvision python3-numpy libopenblas0 gnuplot-nox)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
