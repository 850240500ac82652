#!/usr/bin/env bash
# One call: what torch.compile does to the elementwise work of a Llama step, measured. The llama8b
# harness model (Llama 3.1 8B's shapes in 4 layers, torchtitan's eager forms) traced eager and with
# each layer under torch.compile (fullgraph, as torchtitan compiles), 8,192 tokens, 1 and 2
# micro-batches. On an H200 the seven 1-GPU calibration validations run first
# (../2026-12-05-h200-validate/run.sh).
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
mkdir -p $OUT/traces
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.max.mem --format=csv > $OUT/machine.txt
cat $OUT/machine.txt
if grep -q H200 $OUT/machine.txt; then
  OUT=$OUT/h200-validate timeout 300 bash docs/calibration/runs/2026-12-05-h200-validate/run.sh
fi
for c in "llama8b:8192:1" "llama8b:8192:2"; do
  timeout 150 python3 tools/trace_harness/harness.py --out $OUT/traces --config $c --warmup 3 --steps 2 2>&1 | tail -1
  timeout 240 python3 tools/trace_harness/harness.py --out $OUT/traces --config $c --warmup 3 --steps 2 --compile 2>&1 | tail -3
done
ls -la $OUT/traces
