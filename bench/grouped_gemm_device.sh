#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One device call for the expert GEMMs: the GPU tests of the expert GEMMs (the loop, cuBLAS's
# grouped GEMM, the choice between them), then the loop against the grouped call with the
# executor's choice (grouped_gemm_bench, twice), torch._grouped_mm at the same shapes, and the two
# 1-GPU MoE calibration slices validated (their expert GEMMs as the executor now runs them; on an
# H100 against h100-hgx). Build here, strip test_backend_kernels_gpu, grouped_gemm_bench, moesim
# and libmoesim_gpu.so into build-gpubin/, carry it, and run from the repository root on the GPU
# machine: bash bench/grouped_gemm_device.sh
set -x
export NCCL_NVLS_ENABLE=0
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print(torch.__version__)"
./build-gpubin/test_backend_kernels_gpu -tc="*grouped*,*expert*" 2>&1 | tail -8
./build-gpubin/grouped_gemm_bench | tee "$OUT/grouped_gemm_bench.md"
python3 bench/grouped_gemm_reference.py --repeats 20 --out "$OUT/grouped_mm_torch.md"
./build-gpubin/grouped_gemm_bench | tee "$OUT/grouped_gemm_bench_run2.md"
HW=""
grep -q H200 "$OUT/gpu.txt" || HW="--hardware h100-hgx"
for s in qwen3-moe-slice-1gpu k3-slice-1gpu; do
  [ $(( $(date +%s) - START )) -gt 400 ] && { echo "out of time before $s"; break; }
  timeout 150 ./build-gpubin/moesim validate scenarios/calibration/$s.json $HW > "$OUT/validate-$s.txt" 2>&1
  echo "$s rc=$? at $(( $(date +%s) - START )) s"
  grep -i -E "expert|step|memory" "$OUT/validate-$s.txt" | head -20
done
