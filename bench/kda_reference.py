#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""flash-linear-attention's chunked KDA (fla.ops.kda.chunk_kda, Triton) at the shapes
attention_bench times with `--only kda` (tests/backend/attention/bench_attention.cpp): the public
reference the executor's KDA kernels (src/backend/cuda/attention/kda.hpp) are compared with, in the
same device run. FLA is not installed on the GPU machine: carry its source (the `fla` package folder
of github.com/fla-org/flash-linear-attention) and put its parent folder on PYTHONPATH.

Inputs as the executor's: q, k [B, T, H, 128] L2-normalised, v [B, T, H, 128], all BF16; g the
per-channel log decay in (-0.5, 0) (FP32, cumulated per chunk inside chunk_kda); beta in (0, 1).
Method as attention_bench: two sets of random inputs alternated, 2 warm-up calls, then the median
of 5 individually timed calls (CUDA events). forward: chunk_kda with grad enabled (what training
runs); fwd_bwd: a forward then torch.autograd.grad of q, k, v, g, beta per call.

    PYTHONPATH=DIR python3 bench/kda_reference.py [--seq 8192] [--batch 1] [--heads 96] [--repeats 5] [--out FILE]

Prints a markdown table (and writes it to --out); exit 77 without a GPU or without fla.
"""
import sys

import torch

from reference_bench import arguments, time_ms, write_table  # bench/reference_bench.py, beside this file


def cost_flops(b, t, h, d, chunk=64):
    """The simulator's KDA forward FLOPs per head and token, 6 d^2 + 3 C d + C^2 (kda.hpp)."""
    return float(b * t * h) * (6 * d * d + 3 * chunk * d + chunk * chunk)


def main():
    a = arguments(__doc__)
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 77
    try:
        import fla
        from fla.ops.kda import chunk_kda
    except Exception as e:  # not carried, or this torch/triton cannot import it
        print(f"flash-linear-attention not importable: {e}", file=sys.stderr)
        return 77
    print(f"torch {torch.__version__}, triton {__import__('triton').__version__}, fla {getattr(fla, '__version__', '?')}, "
          f"{torch.cuda.get_device_name()}", file=sys.stderr)
    b, t, h, d = a.batch, a.seq, a.heads, 128
    dev = torch.device("cuda")

    def inputs():
        q = torch.nn.functional.normalize(torch.randn(b, t, h, d, device=dev), dim=-1).to(torch.bfloat16)
        k = torch.nn.functional.normalize(torch.randn(b, t, h, d, device=dev), dim=-1).to(torch.bfloat16)
        v = torch.empty(b, t, h, d, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
        g = -torch.empty(b, t, h, d, device=dev, dtype=torch.float32).uniform_(0.0, 0.5)
        beta = torch.empty(b, t, h, device=dev, dtype=torch.float32).uniform_(0.05, 0.95)
        do = torch.empty(b, t, h, d, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
        grads = [x.requires_grad_(True) for x in (q, k, v, g, beta)]
        return grads, do

    sets = [inputs() for _ in range(2)]
    scale = d ** -0.5

    def forward(i):
        (q, k, v, g, beta), _ = sets[i % 2]
        o, _ = chunk_kda(q, k, v, g, beta, scale=scale)
        return o

    def fwd_bwd(i):
        xs, do = sets[i % 2]
        torch.autograd.grad(forward(i), xs, do)

    shape = f"B={b} T={t} H={h} dk=dv={d}"
    f = cost_flops(b, t, h, d)
    rows = [("fla_kda_forward", shape, time_ms(forward, repeats=a.repeats), f),
            ("fla_kda_fwd_bwd", shape, time_ms(fwd_bwd, repeats=a.repeats), 3 * f)]
    write_table(rows, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
