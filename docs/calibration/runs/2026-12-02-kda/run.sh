#!/bin/bash
# KDA tensor-core kernels on one H200 (device tool, kind nvidia-h200), from a folder holding the
# stripped test_attention_kda_gpu and attention_bench of this branch: the GPU test against the CPU
# reference, attention_bench at T = 8192 and 32768 (2 warm-ups, median of 5), then one forward and
# one backward at T = 8192 under ncu for the time of each kernel.
export NCCL_NVLS_ENABLE=0
B=$(dirname "$0")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt 2>&1
$B/test_attention_kda_gpu > $OUT/test_kda.txt 2>&1; echo "test rc $?" >> $OUT/test_kda.txt
$B/attention_bench --only kda --seq 8192 --out $OUT/bench_kda_8k.md > $OUT/bench_kda_8k.log 2>&1
$B/attention_bench --only kda --seq 32768 --out $OUT/bench_kda_32k.md > $OUT/bench_kda_32k.log 2>&1
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:kda_ --launch-skip 4 --launch-count 7 \
  $B/attention_bench --only kda --seq 8192 --repeats 1 > $OUT/ncu_kda_8k.txt 2>&1
cat $OUT/gpu.txt; grep -E "MESSAGE|rel_l2|ERROR|FAIL|SUCCESS|test cases|rc " $OUT/test_kda.txt | tail -40
cat $OUT/bench_kda_8k.log $OUT/bench_kda_32k.log
grep -E "kda_|gpu__time_duration" $OUT/ncu_kda_8k.txt | head -40
