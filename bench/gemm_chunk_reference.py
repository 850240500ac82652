# SPDX-License-Identifier: MIT
"""What a TP ring step costs a projection: cuBLAS (torch.matmul, BF16) on one GPU, each projection of
the published cases that overlap their TP collectives run whole and as tp GEMMs of rows / tp back to
back (what Transformer Engine's userbuffers and PyTorch's AsyncTP launch, without the communication),
next to what moesim's GEMM curve of hardware/h200-hgx.json says of the same shapes (efficiency
max x / (x + half_at) at x = min(m, n, k), docs/hardware-efficiency.md).

    python3 bench/gemm_chunk_reference.py [--repeats 21] [--out FILE]

Timing: bench/reference_bench.py's rule (warm-up, then the median of individually timed calls, CUDA
events), inputs rotated over enough copies to exceed the 60 MB L2. Prints a markdown table: shape,
whole ms and TFLOP/s, chunked ms and TFLOP/s, measured chunked / whole, moesim's chunked / whole.
"""
import argparse
import json
import os

import torch

from reference_bench import emit, time_ms

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# (case family, projection, tokens per micro-batch m, k, n, tp): the per-rank shapes of the suite's
# TP-overlap cases (tests/validation/scenarios/): MegaScale GPT-175B (h 12288, ffn 49152, TP8,
# 2,048 tokens), Llama 3.1 405B (h 16384, ffn 53248, 8 KV heads, TP8, 8,192 tokens), Qwen3-235B
# attention (h 4096, 64 heads x 128, 4 KV heads, TP2 and TP4, 4,096 tokens).
SHAPES = [
    ("gpt-175b tp8", "qkv", 2048, 12288, 3 * 12288 // 8, 8),
    ("gpt-175b tp8", "out", 2048, 12288 // 8, 12288, 8),
    ("gpt-175b tp8", "fc1", 2048, 12288, 49152 // 8, 8),
    ("gpt-175b tp8", "fc2", 2048, 49152 // 8, 12288, 8),
    ("llama-405b tp8", "q", 8192, 16384, 16384 // 8, 8),
    ("llama-405b tp8", "w1+w3", 8192, 16384, 2 * 53248 // 8, 8),
    ("llama-405b tp8", "w2", 8192, 53248 // 8, 16384, 8),
    ("qwen3-235b tp2", "q", 4096, 4096, 8192 // 2, 2),
    ("qwen3-235b tp2", "o", 4096, 8192 // 2, 4096, 2),
    ("qwen3-235b tp4", "q", 4096, 4096, 8192 // 4, 4),
    ("qwen3-235b tp4", "o", 4096, 8192 // 4, 4096, 4),
]


def moesim_efficiency(m, n, k):
    with open(os.path.join(ROOT, "hardware", "h200-hgx.json")) as f:
        gemm = json.load(f)["efficiency"]["gemm"]
    x = min(m, n, k)
    return gemm["max"] * x / (x + gemm["half_at"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for family, name, m, k, n, tp in SHAPES:
        chunk = m // tp
        bytes_per_set = 2 * (m * k + k * n + m * n)
        copies = max(2, int(2 * 60e6 // bytes_per_set) + 1)  # rotate past the L2
        a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        b = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        c = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]

        def whole(i):
            j = i % copies
            torch.matmul(a[j], b[j], out=c[j])

        def chunked(i):
            j = i % copies
            for s in range(tp):
                torch.matmul(a[j][s * chunk:(s + 1) * chunk], b[j], out=c[j][s * chunk:(s + 1) * chunk])

        t_whole = time_ms(whole, warmup=3, repeats=args.repeats)
        t_chunked = time_ms(chunked, warmup=3, repeats=args.repeats)
        flops = 2.0 * m * n * k
        model_ratio = moesim_efficiency(m, n, k) / moesim_efficiency(chunk, n, k)
        rows.append((family, name, f"{m} x {k} x {n}", tp, t_whole, flops / t_whole / 1e9, t_chunked,
                     flops / t_chunked / 1e9, t_chunked / t_whole, model_ratio))
        del a, b, c
        torch.cuda.empty_cache()
    table = ("| case | projection | m x k x n | tp | whole ms | whole TFLOP/s | chunked ms | chunked TFLOP/s "
             "| measured chunked / whole | moesim chunked / whole |\n|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        table += (f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.3f} | {r[5]:.0f} | {r[6]:.3f} | {r[7]:.0f} "
                  f"| {r[8]:.3f} | {r[9]:.3f} |\n")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, median of {args.repeats}")
    emit(table, args.out)


if __name__ == "__main__":
    main()
