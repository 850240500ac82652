#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian 12 packages moesim needs that are not installed yet (as root; no-op when
# everything is there, so it needs no network then). CUDA 13 for the GPU backend is not a Debian
# package: it is used from /usr/local/cuda when present.
set -euo pipefail

packages=(
  build-essential pkg-config cmake ninja-build meson python3
  libboost-graph-dev nlohmann-json3-dev libcli11-dev doctest-dev libeigen3-dev
  libopenmpi-dev openmpi-bin
  libbenchmark-dev gcovr
  # tests/fuzz/ (the 'fuzz_loaders' test): clang with its libFuzzer runtime
  clang-14 libclang-rt-14-dev
  # notebooks/ (the 'notebooks' test), for Debian's /usr/bin/python3:
  jupyter-nbconvert python3-nbclient python3-ipykernel python3-matplotlib python3-pandas python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
