#!/usr/bin/env bash
# One device call (whichever of H100 / H200 comes), from the repository root with the stripped
# CUDA build in build-gpubin/ (moesim, libmoesim_gpu.so, attention_bench, test_attention_kda_gpu):
#  1. calibrate's progress line on a terminal (pty_progress.py);
#  2. the KDA kernels: the GPU test, attention_bench at T = 8192, and one forward and one backward
#     under ncu for the time of each kernel;
#  3. the seven 1-GPU calibration scenarios validated: on an H200 with their own hardware (h200-x2
#     and its power model), on an H100 with --hardware h100-hgx (the H100 file the published-run
#     suite uses), until 540 s have passed.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
B=${B:-build-gpubin}
HERE=$(dirname "$0")
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
timeout 290 python3 $HERE/pty_progress.py $B/moesim $OUT; echo "pty rc=$? at $(( $(date +%s) - START )) s"
$B/test_attention_kda_gpu > $OUT/test_kda.txt 2>&1; echo "kda test rc $?"; grep -E "test cases|assertions" $OUT/test_kda.txt
$B/attention_bench --only kda --seq 8192 --out $OUT/bench_kda_8k.md > $OUT/bench_kda_8k.log 2>&1; cat $OUT/bench_kda_8k.log | tail -8
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:kda_ --launch-skip 4 --launch-count 7 \
  $B/attention_bench --only kda --seq 8192 --repeats 1 > $OUT/ncu_kda_8k.txt 2>&1
grep -E "kda_.*kernel|gpu__time_duration" $OUT/ncu_kda_8k.txt | sed 's/  */ /g' | head -20
HW=""
grep -q H200 $OUT/gpu.txt || HW="--hardware h100-hgx"
for s in llama-8b-slice-1gpu qwen3-moe-slice-1gpu k3-slice-1gpu llama-8b-slice-1gpu-chunked qwen3-moe-slice-1gpu-pad k3-slice-1gpu-selective k3-slice-1gpu-seq12k; do
  [ $(( $(date +%s) - START )) -gt 540 ] && { echo "out of time before $s"; break; }
  timeout 150 $B/moesim validate scenarios/calibration/$s.json $HW --json > $OUT/validate-$s.json 2> $OUT/validate-$s.err
  echo "$s rc=$? at $(( $(date +%s) - START )) s"
done
tar czf $OUT/validate.tgz -C $OUT $(cd $OUT && ls validate-* 2>/dev/null) && rm -f $OUT/validate-*
