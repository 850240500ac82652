#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch's scaled_dot_product_attention with the cuDNN backend at the shapes attention_bench
times (tests/backend/attention/bench_attention.cpp, `--only sdpa`): the public reference the
executor's cuDNN SDPA (src/backend/cuda/attention/sdpa.hpp) is compared with, in the same device
run. Causal, BF16, inputs laid out [B, T, H, D] and viewed as [B, H, T, D] (the executor's layout).

Method as attention_bench: two sets of random inputs alternated, 2 warm-up calls, then the median
of 5 individually timed calls (CUDA events). forward: a training forward (grad enabled, so the
softmax statistics are written, as the executor's forward does); backward: torch.autograd.grad
on a retained graph; fwd_bwd: a forward then backward per call.

    python3 bench/attention_reference.py [--seq 8192] [--batch 1] [--heads 96] [--repeats 5] [--out FILE]

Needs a CUDA GPU and PyTorch; prints a markdown table (and writes it to --out).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from reference_bench import arguments, time_ms, write_table  # bench/reference_bench.py, beside this file


def cost_flops(b, t, hq, dqk, dv):
    """The simulator's flash_attention FLOPs: 2 * Hq * (dqk + dv) per causal (query, key) pair."""
    pairs = b * t * (t + 1) / 2
    return 2.0 * hq * (dqk + dv) * pairs


def bench(label, b, t, hq, hkv, dqk, dv, repeats):
    dev = torch.device("cuda")

    def tensor(h, d, grad):
        x = torch.empty(b, t, h, d, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
        return x.transpose(1, 2).detach().requires_grad_(grad)

    sets = [(tensor(hq, dqk, True), tensor(hkv, dqk, True), tensor(hkv, dv, True), tensor(hq, dv, False))
            for _ in range(2)]
    gqa = hq != hkv
    scale = dqk ** -0.5

    def attention(i):
        q, k, v, _ = sets[i % 2]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)

    outs = [attention(0), attention(1)]  # retained graphs for the backward-only timing

    def backward(i):
        q, k, v, do = sets[i % 2]
        torch.autograd.grad(outs[i % 2], (q, k, v), do, retain_graph=True)

    def fwd_bwd(i):
        q, k, v, do = sets[i % 2]
        torch.autograd.grad(attention(i), (q, k, v), do)

    shape = f"B={b} T={t} Hq={hq} Hkv={hkv} dqk={dqk} dv={dv}"
    f = cost_flops(b, t, hq, dqk, dv)
    rows = []
    for name, fn, flops in (("forward", attention, f), ("backward", backward, 2 * f), ("fwd_bwd", fwd_bwd, 3 * f)):
        ms = time_ms(fn, repeats=repeats)
        rows.append((f"torch_{label}_{name}", shape, ms, flops))
    return rows


def main():
    a = arguments(__doc__)
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 77
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}",
          file=sys.stderr)
    shapes = [("sdpa_mla", a.heads, a.heads, 192, 128), ("sdpa_mha", 64, 64, 128, 128), ("sdpa_gqa", 64, 8, 128, 128)]
    rows = []
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for label, hq, hkv, dqk, dv in shapes:
            try:
                rows += bench(label, a.batch, a.seq, hq, hkv, dqk, dv, a.repeats)
            except RuntimeError as e:  # this PyTorch's cuDNN backend refuses the shape
                print(f"{label}: {e}".splitlines()[0], file=sys.stderr)
            torch.cuda.empty_cache()
    write_table(rows, a.out)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
