#!/bin/bash
# One device call on the lent H100 (700 W): the kernel benches that measured the H200's efficiencies
# (bench/*_reference.py), so that h100-hgx carries H100 numbers: memory-bound kernels, BF16 and FP8
# GEMMs at Llama training shapes back to back at the power limit, torch SDPA's flash and cuDNN
# attention at Llama 3.1 8B heads in a training step's power state. Outputs land in $OUT.
set -u
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version --format=csv > $OUT/machine.txt
cd bench
python3 memory_bound_reference.py --peak-bytes-per-s 3.35e12 --out $OUT/memory_bound_h100.json > $OUT/memory_bound_h100.txt 2>&1; tail -4 $OUT/memory_bound_h100.txt
python3 fp8_gemm_reference.py --out $OUT/fp8_gemm_h100.json > $OUT/fp8_gemm_h100.txt 2>&1; tail -4 $OUT/fp8_gemm_h100.txt
python3 attention_cap_reference.py --out $OUT/attention_cap_h100.json > $OUT/attention_cap_h100.txt 2>&1; tail -4 $OUT/attention_cap_h100.txt
