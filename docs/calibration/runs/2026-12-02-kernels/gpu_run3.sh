#!/usr/bin/env bash
# Third call: validate the three validation scenarios that differ from the calibration ones in
# sequence length (k3-slice-1gpu-seq12k), recompute and swap (k3-slice-1gpu-selective), and loss,
# recompute, length and micro-batches (llama-8b-slice-1gpu-chunked), on the calibration of call 2.
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-gpubin}
OUT=${OUT:-/tmp/out}
R=/tmp/results3; rm -rf $R; mkdir -p $R $OUT
pack() { tar czf $OUT/results3.tgz -C $R .; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader; } > $R/machine.txt 2>&1
for s in k3-slice-1gpu-selective llama-8b-slice-1gpu-chunked k3-slice-1gpu-seq12k; do
  timeout 120 "$B/moesim" validate scenarios/calibration/$s.json --json > $R/validate-$s.json 2> $R/validate-$s.err
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); s=j['step_time']; m=j['peak_memory_total']; print(sys.argv[1].split('/')[-1], 'measured %.4f predicted %.4f error %+.1f%% memory %+.1f%%' % (s['measured_s'], s['predicted_s'], 100*s['error'], 100*m['error']))" $R/validate-$s.json || tail -3 $R/validate-$s.err
  pack
done
