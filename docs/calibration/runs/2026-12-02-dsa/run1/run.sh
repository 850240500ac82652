#!/bin/bash
# DSA sparse attention: correctness test, then the bench before (main's binary) and after, then ncu on the new kernels.
export NCCL_NVLS_ENABLE=0
B=gpubin-dsa
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee $OUT/gpu.txt
( time $B/test_dsa --test-case='*sparse*' ) > $OUT/test.txt 2>&1; echo "test rc $?" | tee -a $OUT/test.txt
tail -5 $OUT/test.txt
$B/attention_bench_before --only dsa --out $OUT/bench_before.md > /dev/null 2>$OUT/bench_before.err
$B/attention_bench --only dsa --out $OUT/bench_after.md > /dev/null 2>$OUT/bench_after.err
cat $OUT/bench_before.md $OUT/bench_after.md
if [ "${NCU:-1}" = 1 ]; then
for k in fwd_kernel bwd_kernel; do
  timeout 60 ncu --clock-control none -k regex:"^$k" -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats $B/attention_bench --only dsa --repeats 1 > $OUT/ncu_$k.txt 2>&1
  grep -E "Duration|Throughput|Pipe|Stall|Warp Cycles|Registers|Achieved Occupancy|Bank|Eligible|Issued" $OUT/ncu_$k.txt | head -40
done
fi
( timeout 90 compute-sanitizer --tool memcheck $B/test_dsa --test-case='*sparse*' ) > $OUT/memcheck.txt 2>&1; echo "memcheck rc $?"; tail -4 $OUT/memcheck.txt
