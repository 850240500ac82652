#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Memory-bound kernels as a PyTorch training step runs them, timed on the local GPU.

The hardware files' `efficiency.memory` is the fraction of the HBM peak that memory-bound kernels
reach (docs/hardware-efficiency.md). This measures the kernels a PyTorch step launches for them -
copies, elementwise ops in eager mode, norms, softmax, the fused AdamW - at training sizes, with the
bytes each kernel must move counted here from its tensors (reads plus writes, one pass each), not
from moesim's graph. Prints one line per kernel and writes JSON (--out).

usage: python3 bench/memory_bound_reference.py [--out FILE] [--peak-bytes-per-s 4.8e12]
Needs PyTorch with CUDA; CUDA events, warm-up, median of repeats; inputs larger than the L2.
"""
import argparse
import json

import torch

from reference_bench import time_seconds_back_to_back  # bench/reference_bench.py, beside this file


def time_op(fn):
    # Ten calls back to back per timed batch: these kernels take 50-800 us, and an event pair around
    # one call also timed the host's launch of it (runs before 2026-12-05 13:30 UTC did: norms and
    # copies at 8,192 tokens came out 20-30% slow).
    return time_seconds_back_to_back(fn, calls=10, warmup=5, repeats=30)


def cases(tokens, hidden, ffn, dtype):
    """(name, bytes, fn) per memory-bound op of a Llama-style layer at these sizes."""
    dev = "cuda"
    e = torch.tensor([], dtype=dtype).element_size()
    x = torch.randn(tokens, hidden, device=dev, dtype=dtype)
    y = torch.randn(tokens, hidden, device=dev, dtype=dtype)
    gate = torch.randn(tokens, ffn, device=dev, dtype=dtype)
    up = torch.randn(tokens, ffn, device=dev, dtype=dtype)
    w = torch.randn(hidden, device=dev, dtype=dtype)
    out = torch.empty_like(x)
    n_h, n_f = tokens * hidden, tokens * ffn
    yield "copy", 2 * n_h * e, lambda: out.copy_(x)
    yield "add (residual)", 3 * n_h * e, lambda: torch.add(x, y, out=out)
    yield "mul", 3 * n_h * e, lambda: torch.mul(x, y, out=out)
    yield "silu", 2 * n_f * e, lambda: torch.nn.functional.silu(gate)
    # Two kernels: silu writes its output, the product reads it back.
    yield "silu(gate) * up, eager", 5 * n_f * e, lambda: torch.nn.functional.silu(gate) * up
    yield "gelu tanh", 2 * n_f * e, lambda: torch.nn.functional.gelu(gate, approximate="tanh")
    yield "rms_norm", 2 * n_h * e, lambda: torch.nn.functional.rms_norm(x, (hidden,), w)
    yield "layer_norm", 2 * n_h * e, lambda: torch.nn.functional.layer_norm(x, (hidden,), w)
    # As a training step runs it: under autograd, forward and backward (input and weight gradients);
    # bytes as moesim counts a norm's two passes (a + a forward; 4a + a backward, two kernels).
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    yield "rms_norm fwd+bwd (autograd)", 7 * n_h * e, lambda: torch.autograd.grad(
        torch.nn.functional.rms_norm(xg, (hidden,), wg, eps=1e-6), (xg, wg), y)
    yield "softmax (last dim)", 2 * n_f * e, lambda: torch.softmax(gate, dim=-1)
    # AdamW over one 1 GB-class parameter group, fp32 states: reads param, grad, exp_avg, exp_avg_sq
    # and writes param, exp_avg, exp_avg_sq (7 x 4 bytes per parameter).
    n_p = 64 * 1024 * 1024
    ps = [torch.randn(n_p, device=dev, dtype=torch.float32)]
    gs = [torch.randn(n_p, device=dev, dtype=torch.float32)]
    m1 = [torch.zeros(n_p, device=dev, dtype=torch.float32)]
    m2 = [torch.zeros(n_p, device=dev, dtype=torch.float32)]
    steps = [torch.tensor(1.0, device=dev)]
    def adamw():
        torch._fused_adamw_(ps, gs, m1, m2, [], steps, lr=1e-4, beta1=0.9, beta2=0.95, weight_decay=0.1, eps=1e-8,
                            amsgrad=False, maximize=False)
    yield "fused AdamW (fp32)", 7 * 4 * n_p, adamw


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON file to write")
    ap.add_argument("--peak-bytes-per-s", type=float, default=4.8e12, help="HBM peak (H200: 4.8e12)")
    args = ap.parse_args()
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'op':28s} {'tokens':>6s} {'MB':>8s} {'us':>9s} {'TB/s':>6s} {'of peak':>7s}")
    for tokens, hidden, ffn in ((8192, 4096, 14336), (16384, 8192, 28672)):
        for name, nbytes, fn in cases(tokens, hidden, ffn, torch.bfloat16):
            try:
                t = time_op(fn)
            except (RuntimeError, AttributeError, TypeError) as err:  # an op this PyTorch lacks
                print(f"{name:28s} {tokens:6d} skipped: {err}")
                continue
            bw = nbytes / t
            rows.append({"op": name, "tokens": tokens, "hidden": hidden, "ffn": ffn, "bytes": nbytes, "seconds": t,
                         "bytes_per_s": bw, "fraction_of_peak": bw / args.peak_bytes_per_s})
            print(f"{name:28s} {tokens:6d} {nbytes / 1e6:8.1f} {t * 1e6:9.1f} {bw / 1e12:6.2f} {bw / args.peak_bytes_per_s:7.3f}")
            torch.cuda.empty_cache()
    total_b = sum(r["bytes"] for r in rows)
    total_t = sum(r["seconds"] for r in rows)
    print(f"all kernels together: {total_b / total_t / 1e12:.2f} TB/s = {total_b / total_t / args.peak_bytes_per_s:.3f} of peak")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "peak_bytes_per_s": args.peak_bytes_per_s, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
