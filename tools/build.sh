#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what is missing (Debian packages), configures build/ once, and builds.
# usage: tools/build.sh [BUILD_DIR [MESON_SETUP_OPTION...]]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
tools/install-deps.sh
export PATH=/usr/local/cuda/bin:$PATH  # meson finds nvcc only on PATH (-Dcuda=auto)
[ -f "$dir/build.ninja" ] || meson setup "$dir" "$@"
ninja -C "$dir" main  # the binary and its GPU module; `meson test` builds the tests it runs
