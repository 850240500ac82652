#!/bin/sh
# SPDX-License-Identifier: MIT
# Writes the outputs that a speed change must leave byte-identical into OUTDIR, with the one
# run-dependent number (the simulation's wall time) removed: then `diff -r` two such folders made
# by the base and the new binary (docs/performance.md).
#
#   bench/identical.sh BINARY OUTDIR [quick]    run from the project root; quick: no k3-sweep
set -eu
bin=$1
out=$2
mkdir -p "$out"
strip() { grep -v -e '"sim_wall_s"' -e '^  simulated in ' -e '"wall_s"' -e '^wall ' || true; }
sim() {
  name=$1
  shift
  "$bin" simulate "$@" | strip >"$out/$name"
}
sim default.txt
sim default.json --json
sim distinct.json --distinct-ranks --json
sim steps1.json --steps 1 --json --memory-csv "$out/steps1-memory.csv"
sim steps6.json --steps 6 --json
sim k3-slice-2gpu-pp2.json scenarios/calibration/k3-slice-2gpu-pp2.json --json --trace "$out/k3-slice-2gpu-pp2.trace.json"
sim qwen3-moe-slice-2gpu.json scenarios/calibration/qwen3-moe-slice-2gpu.json --json
sim moe-2gpu-s4k-mb1.json scenarios/trace/moe-2gpu-s4k-mb1.json --json
sim dense-s8k-mb2.json scenarios/trace/dense-s8k-mb2.json --json
v=tests/validation/scenarios
sim qwen3-ep32-pp8.json $v/mz-qwen3-h100-256-ep32-pp8.json --json
sim llama405b-interleaved.json $v/torchtitan-llama31-405b-512xh100-3d-interleaved-1f1b.json --json
sim llama8b-cp4.json $v/torchtitan-llama31-8b-8xh100-fsdp2-cp4-seq128k.json --json
sim mixtral-folding.json $v/pf-mixtral8x22b-folding-h100-128.json --json
sim dsv3-gb200.json $v/nv-dsv3-gb200-256-mxfp8-baseline.json --json
"$bin" sweep tests/data/sweep-small.json --threads 2 --csv "$out/sweep-small.csv" --json | strip >"$out/sweep-small.json"
if [ "${3:-}" != quick ]; then
  "$bin" sweep scenarios/k3-sweep.json --threads 2 --csv "$out/k3-sweep.csv" --json | strip >"$out/k3-sweep.json"
fi
