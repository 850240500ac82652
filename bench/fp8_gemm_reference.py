#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""FP8 GEMMs as PyTorch's float8 training runs them, next to BF16 GEMMs of the same shapes.

The hardware files' `efficiency.gemm` was measured on BF16 GEMMs; FP8 GEMMs (torchao's float8
training and Transformer Engine call cuBLASLt through torch._scaled_mm) have a peak twice as high and
need not reach the same fraction of it. This times torch._scaled_mm (e4m3 x e4m3 -> bf16,
tensorwise float32 scales) and torch.mm in BF16 on the same (m, n, k), back to back as a training
step runs its GEMMs (the GPU at its power limit, as the BF16 calibration tables were measured: a
warm-up of a few seconds first). Shapes: the forward, input-gradient and weight-gradient GEMMs of
Llama-3.1-8B, 70B and 405B (TP 8) linear layers at 8,192 and 16,384 tokens. The FP8 forward uses
fast accumulation and the two backward GEMMs do not (torchao's Float8LinearConfig defaults).

usage: python3 bench/fp8_gemm_reference.py [--out FILE] [--bf16-peak 989e12] [--fp8-peak 1979e12]
Needs PyTorch with CUDA on a GPU with FP8 tensor cores (sm_89 or later).
"""
import argparse
import json

import torch

from reference_bench import reach_power_limit, time_seconds  # bench/reference_bench.py, beside this file


def time_op(fn):
    return time_seconds(fn, warmup=3, repeats=20)


def linear_shapes():
    """(model, layer, pass, m, n, k) of the linear layers' GEMMs: y = x W^T with x (T, in), W (out, in)."""
    layers = {
        "llama-3.1-8b": [("q_proj", 4096, 4096), ("kv_proj", 1024, 4096), ("up_proj", 14336, 4096),
                         ("down_proj", 4096, 14336)],
        "llama-3.1-70b": [("q_proj", 8192, 8192), ("up_proj", 28672, 8192), ("down_proj", 8192, 28672)],
        "llama-3.1-405b tp8": [("q_proj", 2048, 16384), ("up_proj", 6656, 16384), ("down_proj", 16384, 6656)],
    }
    for tokens in (8192, 16384):
        for model, ls in layers.items():
            for layer, out_f, in_f in ls:
                yield model, layer, "forward", tokens, out_f, in_f, True
                yield model, layer, "input_grad", tokens, in_f, out_f, False
                yield model, layer, "weight_grad", out_f, in_f, tokens, False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON file to write")
    ap.add_argument("--bf16-peak", type=float, default=989e12, help="dense BF16 peak, FLOP/s (H100/H200 SXM: 989e12)")
    ap.add_argument("--fp8-peak", type=float, default=1979e12, help="dense FP8 peak, FLOP/s (H100/H200 SXM: 1979e12)")
    ap.add_argument("--warmup-s", type=float, default=5.0, help="seconds of back-to-back GEMMs before timing")
    args = ap.parse_args()
    dev = "cuda"
    f8 = torch.float8_e4m3fn
    one = torch.tensor(1.0, device=dev)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    reach_power_limit(args.warmup_s)  # the power state of a training step
    rows = []
    print(f"{'model':20s} {'layer':10s} {'pass':12s} {'m':>6s} {'n':>6s} {'k':>6s} {'bf16 TF/s':>9s} {'of peak':>7s} "
          f"{'fp8 TF/s':>9s} {'of peak':>7s} {'fp8/bf16':>8s}")
    for model, layer, phase, m, n, k, fast in linear_shapes():
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        x8, w8 = x.to(f8), w.to(f8)
        wt, w8t = w.t(), w8.t()  # (k, n) column-major, as _scaled_mm wants its second operand
        t_bf16 = time_op(lambda: torch.mm(x, wt))
        t_fp8 = time_op(lambda: torch._scaled_mm(x8, w8t, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                 use_fast_accum=fast))
        flops = 2.0 * m * n * k
        r = {"model": model, "layer": layer, "pass": phase, "m": m, "n": n, "k": k, "fast_accum": fast,
             "bf16_seconds": t_bf16, "fp8_seconds": t_fp8, "bf16_flops_per_s": flops / t_bf16,
             "fp8_flops_per_s": flops / t_fp8, "bf16_of_peak": flops / t_bf16 / args.bf16_peak,
             "fp8_of_peak": flops / t_fp8 / args.fp8_peak}
        rows.append(r)
        print(f"{model:20s} {layer:10s} {phase:12s} {m:6d} {n:6d} {k:6d} {r['bf16_flops_per_s'] / 1e12:9.1f} "
              f"{r['bf16_of_peak']:7.3f} {r['fp8_flops_per_s'] / 1e12:9.1f} {r['fp8_of_peak']:7.3f} {t_bf16 / t_fp8:8.2f}")
        del x, w, x8, w8, wt, w8t
    tf = sum(2.0 * r["m"] * r["n"] * r["k"] for r in rows)
    tb, t8 = sum(r["bf16_seconds"] for r in rows), sum(r["fp8_seconds"] for r in rows)
    print(f"all together: bf16 {tf / tb / args.bf16_peak:.3f} of its peak, fp8 {tf / t8 / args.fp8_peak:.3f} of its peak, "
          f"fp8 {tb / t8:.2f}x faster")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "bf16_peak": args.bf16_peak,
                       "fp8_peak": args.fp8_peak, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
