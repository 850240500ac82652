set -x
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
python3 -c "import torch;print(torch.__version__)"
cd build-gpubin
./test_backend_kernels_gpu -tc="*grouped*" 2>&1 | tail -8
./grouped_gemm_bench | tee $OUT/grouped_gemm_bench.md
cd ..
python3 bench/grouped_gemm_reference.py --repeats 20 --out $OUT/grouped_mm_torch.md
./build-gpubin/grouped_gemm_bench > $OUT/grouped_gemm_bench_run2.md
cat $OUT/grouped_gemm_bench_run2.md
