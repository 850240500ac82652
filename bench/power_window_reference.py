#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How long the power controller remembers: a GEMM burst's per-call rate after a low-power stretch.

A step is not one mix: a dense backward follows a forward, an optimizer step or a loss of
memory-bound kernels. At its power limit the GPU's clock follows the power of the last stretch of
time, so a dense burst right after a low-power stretch starts fast and slows down as the
controller's window fills with it. This measures that response on the local GPU, without changing
any of its settings: after GEMMs back to back (the GPU at its limit), a low-power stretch of L ms
(the GPU idle, or memory-bound adds back to back), then a burst of BF16 GEMMs (8192 cubed) whose
every call is timed with CUDA events from the burst's start. Printed: each call's mean time in
windows of the burst (0-10, 10-25, ... ms after its start) per L, against back to back.

usage: python3 bench/power_window_reference.py [--out FILE] [--reps 3] [--burst-ms 400]
Needs PyTorch with CUDA.
"""
import argparse
import json
import statistics
import subprocess
import time

import torch

WINDOWS_MS = (0, 10, 25, 50, 100, 200, 400)
LOW_MS = (0, 10, 25, 50, 100, 200, 400)


def gpu_ms(fn, calls):
    """Mean GPU ms of one call over `calls` back to back."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(calls):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / calls


def burst(fn, call_ms, burst_ms):
    """(offset of the call's end from the burst's start, the call's ms) for each call of a burst."""
    calls = max(1, round(burst_ms / call_ms))
    start = torch.cuda.Event(enable_timing=True)
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    start.record()
    for e in ends:
        fn()
        e.record()
    torch.cuda.synchronize()
    offsets = [start.elapsed_time(e) for e in ends]
    return [(t, t - (offsets[i - 1] if i else 0.0)) for i, t in enumerate(offsets)]


def by_window(samples):
    """Mean call ms of the calls ending in each window of the burst."""
    out = []
    for lo, hi in zip(WINDOWS_MS, WINDOWS_MS[1:]):
        ms = [m for t, m in samples if lo <= t < hi or (hi == WINDOWS_MS[-1] and t >= hi)]
        out.append(statistics.mean(ms) if ms else None)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON file to write")
    ap.add_argument("--reps", type=int, default=3, help="bursts per configuration")
    ap.add_argument("--burst-ms", type=float, default=400.0, help="length of each GEMM burst")
    ap.add_argument("--hot-s", type=float, default=1.0, help="GEMMs back to back before each low stretch")
    args = ap.parse_args()
    info = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=name,power.limit,clocks.max.sm,driver_version",
                           "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    print(f"{info}; torch {torch.__version__}")
    dev = "cuda"
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    big = 1 << 28  # 512 MB BF16 tensors, far above the L2
    x = torch.randn(big, device=dev, dtype=torch.bfloat16)
    y = torch.randn(big, device=dev, dtype=torch.bfloat16)
    z = torch.empty_like(x)
    gemm = lambda: torch.mm(a, b.t())  # noqa: E731
    add = lambda: torch.add(x, y, out=z)  # noqa: E731
    for _ in range(5):
        gemm()
        add()
    torch.cuda.synchronize()
    hot_calls = max(1, round(args.hot_s * 1e3 / gpu_ms(gemm, 20)))
    back_ms = gpu_ms(gemm, hot_calls)  # the first second settles at the limit
    back_ms = gpu_ms(gemm, hot_calls)
    add_ms = gpu_ms(add, 50)
    print(f"back to back: GEMM {back_ms:.3f} ms ({2 * n ** 3 / back_ms / 1e9:.0f} TFLOP/s), add {add_ms:.3f} ms")

    res = {"device": info, "torch": torch.__version__, "gemm": [n, n, n], "back_to_back_ms": back_ms,
           "add_ms": add_ms, "windows_ms": list(WINDOWS_MS), "runs": []}
    head = "  ".join(f"{lo:>3d}-{hi:<3d}" for lo, hi in zip(WINDOWS_MS, WINDOWS_MS[1:]))
    print(f"\nper-call ms of the burst's calls by window after its start (ms); back to back {back_ms:.3f}")
    print(f"{'low stretch':18s} {head}")
    for kind in ("idle", "add"):
        for low in LOW_MS:
            if kind == "add" and low == 0:
                continue
            reps = []
            for _ in range(args.reps):
                gpu_ms(gemm, hot_calls)  # at the limit again
                if kind == "idle":
                    torch.cuda.synchronize()
                    time.sleep(low / 1e3)
                else:
                    for _ in range(max(1, round(low / add_ms))):
                        add()
                reps.append(burst(gemm, back_ms, args.burst_ms))
            windows = [by_window(r) for r in reps]
            mean = [statistics.mean(w[i] for w in windows if w[i] is not None)
                    if any(w[i] is not None for w in windows) else None for i in range(len(WINDOWS_MS) - 1)]
            res["runs"].append({"low": kind, "low_ms": low, "bursts": reps, "window_mean_ms": mean})
            cells = "  ".join(f"{m:7.3f}" if m is not None else "      -" for m in mean)
            print(f"{kind + ' ' + str(low) + ' ms':18s} {cells}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
