#!/usr/bin/env bash
# Regression of the merged executor on one H200: GPU tests, validate of the 1-GPU slices (one
# process and mpirun -np 1), the merged calibrate path, and the executor's refusals.
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=build-gpu-final
OUT=${OUT:-/tmp/out}
{ date -u; nvidia-smi -L; } > $OUT/machine.txt 2>&1
MPIRUN=$(readlink -f "$(which mpirun)"); export LD_LIBRARY_PATH=$(dirname "$(dirname "$MPIRUN")")/lib:${LD_LIBRARY_PATH:-}
for t in kernels op_kernels executor; do
  timeout 120 $B/test_backend_${t}_gpu > $OUT/test_$t.txt 2>&1; echo "test $t rc=$?"; tail -2 $OUT/test_$t.txt
done
for s in k3-slice-1gpu llama-8b-slice-1gpu qwen3-moe-slice-1gpu; do
  timeout 120 $B/moesim validate $s --json > $OUT/$s.json 2> $OUT/$s.err; echo "validate $s rc=$?"
done
timeout 120 mpirun -np 1 $B/moesim validate k3-slice-1gpu --json > $OUT/k3_mpi.json 2> $OUT/k3_mpi.err; echo "mpirun validate rc=$?"
timeout 200 $B/moesim calibrate --quick --only gemm,collectives --out $OUT/cal.json > $OUT/cal.txt 2>&1; echo "calibrate rc=$?"; tail -3 $OUT/cal.txt
timeout 100 mpirun -np 1 $B/moesim calibrate --quick --only collectives --out $OUT/cal_mpi.json > $OUT/cal_mpi.txt 2>&1; echo "mpirun calibrate rc=$?"; tail -2 $OUT/cal_mpi.txt
$B/moesim validate scenarios/calibration/k3-slice-1gpu.json --hardware h200-x2 > /dev/null 2>&1; echo "validate --hardware rc=$?"
for s in k3-slice-1gpu llama-8b-slice-1gpu qwen3-moe-slice-1gpu k3_mpi; do
python3 - $OUT/$s.json <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    st = j["step_time"]
    print(sys.argv[1].split("/")[-1], f"measured {st['measured_s']:.4f} s predicted {st['predicted_s']:.4f} s error {100*st['error']:+.1f}%",
          f"memory total err {100*j['peak_memory_total']['error']:+.1f}%")
except Exception as e:
    print(sys.argv[1], "unreadable", e)
PY
done
