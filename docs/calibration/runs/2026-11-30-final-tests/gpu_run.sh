#!/bin/bash
# Every GPU test of the backend at the session's final code, on 2 x H200 (binaries built here,
# stripped into build-cuda/dist/). The attention tests time out after 240 s each.
export NCCL_NVLS_ENABLE=0
B=build-cuda/dist
exec > >(tee $OUT/log.txt) 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in test_backend_kernels_gpu test_backend_op_kernels_gpu test_backend_nccl_gpu test_backend_executor_gpu \
         test_attention_kda_gpu test_attention_mla_gpu test_attention_dsa_gpu; do
  timeout 240 $B/$t > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc: $(grep -E '^\[doctest\] (test cases|assertions)' /tmp/$t.txt | tr '\n' ' ')"
done
date -u
