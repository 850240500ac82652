#!/usr/bin/env bash
# The validations of run.sh again against the calibration it wrote (h100-executor.json, kept here),
# packed into one archive (the device tool returns at most 8 files a call).
set -u
B=${B:-build-gpubin}
R=docs/calibration/runs/2026-12-07-executor
V=$OUT/v; mkdir -p $V
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu k3-slice-1gpu llama-8b-slice-1gpu-chunked qwen3-moe-slice-1gpu-pad k3-slice-1gpu-selective k3-slice-1gpu-seq12k; do
  timeout 100 $B/moesim validate scenarios/calibration/$s.json --hardware $R/h100-x1-executor.json --json > $V/validate-$s.json 2> $V/validate-$s.err
  echo "$s rc=$?"
done
tar czf $OUT/validate.tgz -C $V . && rm -rf $V
