#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One device call for the expert GEMMs: the GPU test of cuBLAS's grouped GEMM, then the loop of
# cuBLASLt calls against it (grouped_gemm_bench, twice) and torch._grouped_mm at the same shapes.
# Build here, strip test_backend_kernels_gpu and grouped_gemm_bench into build-gpubin/, carry it,
# and run from the repository root on the GPU machine: bash bench/grouped_gemm_device.sh
set -x
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
python3 -c "import torch; print(torch.__version__)"
./build-gpubin/test_backend_kernels_gpu -tc="*grouped*" 2>&1 | tail -8
./build-gpubin/grouped_gemm_bench | tee "$OUT/grouped_gemm_bench.md"
python3 bench/grouped_gemm_reference.py --repeats 20 --out "$OUT/grouped_mm_torch.md"
./build-gpubin/grouped_gemm_bench | tee "$OUT/grouped_gemm_bench_run2.md"
