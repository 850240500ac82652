#!/bin/bash
# Device run for dense attention through cuDNN: cuDNN SDPA tests, then timings beside PyTorch's cuDNN SDPA.
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0
FINAL=${OUT:-/tmp/out}
OUT=$FINAL/r
mkdir -p $OUT
date -u > $OUT/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
{ ldconfig -p | grep -i cudnn; python3 -c "import torch, os; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version()); import nvidia.cudnn as c; print(os.path.dirname(c.__file__) if c.__file__ else list(c.__path__))"; } > $OUT/versions.txt 2>&1
run() { local name=$1; shift; local t0=$(date +%s); "$@" > $OUT/$name.txt 2>&1; local rc=$?; echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a $OUT/rc.txt; return $rc; }
CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=$OUT/cudnn_errors_sdpa_test.log run test_sdpa ./test_attention_sdpa_gpu
SDPA_RC=$?
if [ $SDPA_RC -ne 0 ]; then
  # Diagnose: the same test against PyTorch's cuDNN (9.19) instead of the system 9.14.
  TL=$(python3 -c "import nvidia.cudnn as c, os; print(os.path.join(list(c.__path__)[0], 'lib'))" 2>/dev/null)
  [ -n "$TL" ] && MOESIM_CUDNN_LIBRARY=$TL/libcudnn.so.9 LD_LIBRARY_PATH=$TL:$LD_LIBRARY_PATH CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=$OUT/cudnn_errors_torchlib.log run test_sdpa_torchlib ./test_attention_sdpa_gpu
fi
run test_reference ./test_attention_reference
run test_mla ./test_attention_mla_gpu
(cd .. && run test_executor_gpu ./build-gpu-cudnn/test_backend_executor_gpu)
run bench_sdpa ./attention_bench --only sdpa --out $OUT/bench_sdpa.md
run torch_sdpa python3 attention_reference.py --out $OUT/torch_sdpa.md
# Confirmation with 21 repeats, ours before and after PyTorch (drift between them shows).
run bench_sdpa_r21a ./attention_bench --only sdpa --repeats 21 --out $OUT/bench_sdpa_r21a.md
run torch_sdpa_r21 python3 attention_reference.py --repeats 21 --out $OUT/torch_sdpa_r21.md
run bench_sdpa_r21b ./attention_bench --only sdpa --repeats 21 --out $OUT/bench_sdpa_r21b.md
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> $OUT/gpu.txt 2>&1
echo "=== rc"; cat $OUT/rc.txt
echo "=== versions"; cat $OUT/gpu.txt $OUT/versions.txt
echo "=== sdpa test"; grep -E "rel_l2|engine|FAIL|ERROR|error|passed|failed" $OUT/test_sdpa.txt | head -40
[ -f $OUT/test_sdpa_torchlib.txt ] && { echo "=== sdpa test (torch cudnn)"; grep -E "rel_l2|engine|FAIL|ERROR|error|passed|failed" $OUT/test_sdpa_torchlib.txt | head -30; }
echo "=== executor"; grep -E " ms|FAIL|ERROR|error|passed|failed" $OUT/test_executor_gpu.txt | head -20
echo "=== ours"; cat $OUT/bench_sdpa.md
echo "=== torch"; head -1 $OUT/torch_sdpa.txt; cat $OUT/torch_sdpa.md
echo "=== r21: ours, torch, ours"; cut -d'|' -f2,4 $OUT/bench_sdpa_r21a.md | tail -9; cut -d'|' -f2,4 $OUT/torch_sdpa_r21.md | tail -9; cut -d'|' -f2,4 $OUT/bench_sdpa_r21b.md | tail -9
tar czf $FINAL/raw.tgz -C $FINAL r && rm -rf $OUT
