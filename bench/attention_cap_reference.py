#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends at Llama shapes, in a training step's
power state.

The hardware files' `efficiency.attention_kernels.flash2` and `.cudnn` curves say how close those
kernels get to the peak by query rows (docs/hardware-efficiency.md). This times
torch.nn.functional.scaled_dot_product_attention, causal, BF16, Llama-3.1-8B heads (32 query heads,
8 key/value heads, head dim 128), at sequence lengths 1k-64k with batch x sequence = 16k tokens
(one sequence above 16k), each backend forced with sdpa_kernel. Before timing, 5 s of back-to-back
GEMMs bring the GPU to the power limit a training step runs at. forward: a training forward (grad
enabled); backward: forward + backward minus forward. CUDA events, median of 10 after 2 warm-up.

usage: python3 bench/attention_cap_reference.py [--out FILE]
Needs PyTorch with CUDA.
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from reference_bench import reach_power_limit, time_seconds  # bench/reference_bench.py, beside this file


def time_op(fn):
    return time_seconds(fn, warmup=2, repeats=10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON file to write")
    ap.add_argument("--peak", type=float, default=989e12, help="dense BF16 peak, FLOP/s")
    args = ap.parse_args()
    dev = "cuda"
    hq, hkv, d = 32, 8, 128
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    reach_power_limit(5.0)  # the power state of a training step
    rows = []
    print(f"{'backend':8s} {'seq':>6s} {'batch':>5s} {'fwd ms':>8s} {'of peak':>7s} {'bwd ms':>8s} {'of peak':>7s}")
    for name, backend in (("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        for seq in (1024, 2048, 4096, 8192, 16384, 32768, 65536):
            b = max(1, 16384 // seq)
            q = torch.randn(b, hq, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(b, hkv, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, hkv, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(b, hq, seq, d, device=dev, dtype=torch.bfloat16)
            # The simulator's FLOPs: 2 Hq (d_qk + d_v) per causal (query, key) pair; backward twice that.
            fwd_flops = 2.0 * hq * (d + d) * b * seq * (seq + 1) / 2
            try:
                with sdpa_kernel([backend]):
                    fwd = time_op(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
                    both = time_op(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                                   .backward(g))
            except RuntimeError as err:  # a backend this build or GPU lacks
                print(f"{name:8s} {seq:6d} skipped: {str(err)[:100]}")
                continue
            bwd = both - fwd
            r = {"backend": name, "seq": seq, "batch": b, "heads": hq, "kv_heads": hkv, "head_dim": d,
                 "forward_seconds": fwd, "backward_seconds": bwd, "forward_of_peak": fwd_flops / fwd / args.peak,
                 "backward_of_peak": 2 * fwd_flops / bwd / args.peak}
            rows.append(r)
            print(f"{name:8s} {seq:6d} {b:5d} {fwd * 1e3:8.3f} {r['forward_of_peak']:7.3f} {bwd * 1e3:8.3f} "
                  f"{r['backward_of_peak']:7.3f}")
            del q, k, v, g
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "peak": args.peak,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
