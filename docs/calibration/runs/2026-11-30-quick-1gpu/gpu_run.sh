#!/bin/bash
# A one-GPU `moesim calibrate --quick` (10:31 UTC, 1 x H200): memory_overhead holds the context
# (0.552 GB) and an empty communicator_bytes; the hardware loader takes it (simulate shows runtime
# 552.4 MB). Output: {"communicator_bytes": {}, "runtime_bytes": 552402944.0}, num_gpus 1.
export NCCL_NVLS_ENABLE=0
timeout 200 build-cuda/dist/moesim calibrate --quick --out $OUT/c.json > /dev/null 2>$OUT/err.txt; echo "rc=$?"
python3 -c "import json; c=json.load(open('$OUT/c.json')); print(c['version'], c['memory_overhead'], c['provenance']['num_gpus'])"
cp $OUT/c.json hardware/calibration/h200.json && build-cuda/dist/moesim simulate scenarios/calibration/k3-slice-1gpu.json | grep -E "memory|runtime"
