#!/usr/bin/env bash
# One device call: mpirun -np 1 moesim validate against the single-process form, alternated.
set -u
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
B=$HERE/moesim
cd "$HERE/inputs"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv,noheader; which mpirun; mpirun --version 2>&1 | head -2; } > $OUT/machine.txt 2>&1
MPIRUN=$(readlink -f "$(which mpirun)")
MPIDIR=$(dirname "$(dirname "$MPIRUN")")
export LD_LIBRARY_PATH=$MPIDIR/lib:${LD_LIBRARY_PATH:-}
{ echo "MPIDIR=$MPIDIR"; ldd $B | grep -E "mpi|not found"; } >> $OUT/machine.txt 2>&1
cat $OUT/machine.txt
timeout 60 $HERE/test_backend_executor_gpu > $OUT/executor_gpu.txt 2>&1; echo "executor GPU test rc=$?" | tee -a $OUT/machine.txt
tail -3 $OUT/executor_gpu.txt
S=scenarios/calibration/k3-slice-1gpu.json
for i in 1 2; do
  t0=$(date +%s.%N); timeout 100 $B validate $S --json > $OUT/k3_single_$i.json 2> $OUT/k3_single_$i.err; rc=$?; t1=$(date +%s.%N)
  echo "k3 single $i rc=$rc wall $(python3 -c "print(round($t1-$t0,1))") s"
  t0=$(date +%s.%N); timeout 100 mpirun -np 1 $B validate $S --json > $OUT/k3_mpi_$i.json 2> $OUT/k3_mpi_$i.err; rc=$?; t1=$(date +%s.%N)
  echo "k3 mpirun-np1 $i rc=$rc wall $(python3 -c "print(round($t1-$t0,1))") s"
done
timeout 60 mpirun -np 1 $B validate $S > $OUT/k3_mpi_text.txt 2>&1; echo "k3 mpirun text rc=$?"
S=scenarios/calibration/llama-8b-slice-1gpu.json
timeout 60 $B validate $S --json > $OUT/llama_single.json 2> $OUT/llama_single.err; echo "llama single rc=$?"
timeout 60 mpirun -np 1 $B validate $S --json > $OUT/llama_mpi.json 2> $OUT/llama_mpi.err; echo "llama mpirun-np1 rc=$?"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("run            processes  step measured s  predicted s  error    device total GB  slab GB  tensors GB")
for name in ["k3_single_1", "k3_mpi_1", "k3_single_2", "k3_mpi_2", "llama_single", "llama_mpi"]:
    try:
        j = json.load(open(os.path.join(out, name + ".json")))
    except Exception as e:
        print(f"{name:14s} unreadable: {e}"); continue
    st = j["step_time"]
    print(f"{name:14s} {j.get('processes', '-')!s:9s}  {st['measured_s']:.4f}          {st['predicted_s']:.4f}       {100*st['error']:+.1f}%   "
          f"{j['peak_memory_total']['measured_bytes']/1e9:.3f}           {j['peak_memory_slab']['measured_bytes']/1e9:.3f}    "
          f"{j['peak_memory_tensors_gpu_time']['measured_bytes']/1e9:.3f}   steps {[round(x, 4) for x in j['step_times_s']]}")
PY
