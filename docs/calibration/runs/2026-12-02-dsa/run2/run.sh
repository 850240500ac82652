#!/bin/bash
# DSA sparse attention, final candidates: tests of v2 and v3, then the bench of main's kernels
# (before), v1, v2, v3 and the v2 probes (timing only: 1 fwd without gathers after tile 1,
# 2 fwd without S MMAs, 3 fwd without P V MMAs, 4 bwd without dkv reductions, 5 bwd without
# gathers after tile 1, 6 bwd without clusters).
export NCCL_NVLS_ENABLE=0
D=/tmp/dsa; mkdir -p $D; for f in gpubin-dsa/*.gz; do b=$(basename $f .gz); gunzip -c $f > $D/$b; chmod +x $D/$b; done
L=$OUT/log.txt; T=$OUT/tables.md
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee -a $L
for v in v3 v2; do echo "== test $v" >> $L; ( time $D/test_dsa_$v --test-case='*sparse*' ) >> $L 2>&1; echo "test $v rc $?" | tee -a $L; done
grep -E "MESSAGE|ERROR|FAIL|assertions" $L | grep -c . ; grep -E "test v. rc|assertions:" $L
for b in attention_bench_before attention_bench_v1 attention_bench_v2 attention_bench_v3 bench_probe1 bench_probe2 bench_probe3 bench_probe4 bench_probe5 bench_probe6; do
  echo "### $b" >> $T; $D/$b --only dsa --out $D/t.md > /dev/null 2>>$L; cat $D/t.md >> $T; echo >> $T
  grep sparse $D/t.md | awk -F'|' -v b=$b '{print b, $2, $4, $6}'
done
echo "== ncu v3" >> $L
timeout 70 ncu --clock-control none -k regex:"fwd_kernel|bwd_kernel" -c 2 --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sectors.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum $D/attention_bench_v3 --only dsa --repeats 1 > $OUT/ncu.txt 2>&1
grep -E "kernel|ratio|pct|sum" $OUT/ncu.txt | awk '$NF+0 > 0.05 || /kernel/' | cut -c1-110 | head -60
