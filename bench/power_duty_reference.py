#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How fast a kernel runs depends on what else the GPU does: the data behind the step's power state.

At its power limit a GPU sets one SM clock for whatever runs, so a kernel's rate depends on the
power of the whole mix around it: a GEMM runs faster with idle gaps or memory-bound kernels between
its calls than back to back, and attention runs slower beside GEMMs than alone. This times, on the
local GPU and without changing any of its settings:

1. kinds alone: each kernel kind back to back for a few seconds (per-call time from CUDA events,
   SM clock and board power from nvidia-smi every 100 ms): its power at the clock the limit leaves.
2. duty: the BF16 GEMM in bursts with the GPU idle between them (host sleeps after a synchronise),
   busy a fraction D of each period: per-call time against D.
3. mixes: the GEMM alternating with another kind, no idle: each kind's per-call time in the mix.
4. window: D = 0.5 with periods from milliseconds to seconds, per-call times early and late in each
   burst: how long the power controller averages over.

usage: python3 bench/power_duty_reference.py [--out FILE] [--seconds 4]
Needs PyTorch with CUDA and nvidia-smi; an sm_90 GPU for the FP8 GEMM.
"""
import argparse
import json
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from power_clock_reference import Sampler, steady  # bench/, beside this file


def kernels():
    """name -> (call, model FLOPs or None, bytes or None): the kinds of a training step."""
    dev = "cuda"
    m = n = k = 8192
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device=dev)
    # Llama-3.1-8B attention at 8k tokens: 32 query heads, 8 key/value heads, 128 dims, causal.
    t, hq, hkv, d = 8192, 32, 8, 128
    q = torch.randn(1, hq, t, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    kk = torch.randn(1, hkv, t, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, hkv, t, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    go = torch.randn(1, hq, t, d, device=dev, dtype=torch.bfloat16)
    attn_flops = 4.0 * hq * d * t * (t + 1) / 2  # forward, causal pairs

    def attention_fwd_bwd():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
        torch.autograd.grad(o, (q, kk, v), go)

    big = 1 << 28  # 256 Mi elements: 512 MB per BF16 tensor, far above the L2
    x = torch.randn(big, device=dev, dtype=torch.bfloat16)
    y = torch.randn(big, device=dev, dtype=torch.bfloat16)
    z = torch.empty_like(x)
    return {
        "gemm_bf16": (lambda: torch.mm(a, b.t()), 2.0 * m * n * k, None),
        "gemm_fp8": (lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                              use_fast_accum=True), 2.0 * m * n * k, None),
        "attention_fwd_bwd": (attention_fwd_bwd, 3.0 * attn_flops, None),
        "add": (lambda: torch.add(x, y, out=z), None, 3.0 * big * 2),
    }


class CallTimer:
    """Times every call with its own pair of CUDA events; read after a synchronise."""

    def __init__(self):
        self.pending = []

    def call(self, fn):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        self.pending.append((time.time(), s, e))

    def collect(self):
        torch.cuda.synchronize()
        out = [(t, s.elapsed_time(e)) for t, s, e in self.pending]
        self.pending = []
        return out


def summarise(samples, sampler, start, end, settle):
    """Median per-call ms after `settle` seconds, with the steady clock and power."""
    ms = [m for t, m in samples if t >= start + settle] or [m for _, m in samples]
    mhz, watts, _ = steady(sampler, start, end, settle)
    return {"ms": statistics.median(ms), "calls": len(ms), "mhz": mhz, "watts": watts}


def back_to_back(fn, seconds):
    timer, start = CallTimer(), time.time()
    samples = []
    while time.time() - start < seconds:
        for _ in range(8):
            timer.call(fn)
        samples += timer.collect()
    return samples, start, time.time()


def duty(fn, call_ms, busy_fraction, period_ms, seconds):
    """Bursts of calls filling busy_fraction of each period, the GPU idle for the rest."""
    calls = max(1, round(busy_fraction * period_ms / call_ms))
    timer, start = CallTimer(), time.time()
    samples, bursts = [], []
    while time.time() - start < seconds:
        b0 = time.time()
        for _ in range(calls):
            timer.call(fn)
        got = timer.collect()
        samples += got
        bursts.append(got)
        busy = time.time() - b0
        gap = busy * (1 - busy_fraction) / busy_fraction
        time.sleep(max(gap, 0))
    return samples, bursts, start, time.time(), calls


def mix(fns, counts, seconds):
    """Calls of each kind in turn (counts[i] of fns[i]), no idle: per-kind samples."""
    timers = [CallTimer() for _ in fns]
    start = time.time()
    samples = [[] for _ in fns]
    while time.time() - start < seconds:
        for fn, c, timer in zip(fns, counts, timers):
            for _ in range(c):
                timer.call(fn)
        for i, timer in enumerate(timers):
            samples[i] += timer.collect()
    return samples, start, time.time()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON file to write")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement (the first third settles)")
    args = ap.parse_args()
    info = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=name,power.limit,clocks.max.sm,driver_version",
                           "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    print(f"{info}; torch {torch.__version__}")
    ks = kernels()
    for fn, _, _ in ks.values():  # compile, plan, autotune
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    settle = args.seconds / 3
    res = {"device": info, "torch": torch.__version__, "alone": {}, "duty": [], "mix": [], "window": []}
    with Sampler() as sampler:
        time.sleep(1.5)
        idle = steady(sampler, time.time() - 1.2, time.time(), 0)
        res["idle"] = {"mhz": idle[0], "watts": idle[1]}
        print(f"idle: {idle[0]} MHz, {idle[1]} W")

        print("\n1. kinds alone, back to back")
        for name, (fn, flops, nbytes) in ks.items():
            samples, s, e = back_to_back(fn, args.seconds)
            r = summarise(samples, sampler, s, e, settle)
            if flops:
                r["tflops"] = flops / (r["ms"] * 1e-3) / 1e12
            if nbytes:
                r["gbps"] = nbytes / (r["ms"] * 1e-3) / 1e9
            res["alone"][name] = r
            rate = f"{r['tflops']:.1f} TFLOP/s" if flops else f"{r['gbps']:.0f} GB/s"
            print(f"  {name:18s} {r['ms']:8.3f} ms  {rate:>14s}  {r['mhz']:.0f} MHz  {r['watts']:.0f} W")

        print("\n2. duty: the BF16 GEMM busy a fraction D of 20 ms periods")
        gemm, _, _ = ks["gemm_bf16"]
        call_ms = res["alone"]["gemm_bf16"]["ms"]
        for d in (1.0, 0.8, 0.65, 0.5, 0.35, 0.2):
            samples, _, s, e, calls = duty(gemm, call_ms, d, 20.0, args.seconds)
            r = summarise(samples, sampler, s, e, settle)
            r.update({"duty": d, "period_ms": 20.0, "calls_per_burst": calls})
            res["duty"].append(r)
            print(f"  D {d:4.2f}: {r['ms']:7.3f} ms a call ({call_ms / r['ms']:.3f}x back to back)"
                  f"  {r['mhz']:.0f} MHz  {r['watts']:.0f} W (mean)")

        print("\n3. mixes, no idle: the GEMM and another kind in turn (per-call ms, ratio to alone)")
        for other, counts in (("add", (4, 8)), ("add", (4, 24)), ("attention_fwd_bwd", (4, 2)), ("gemm_fp8", (4, 8))):
            fns = [gemm, ks[other][0]]
            samples, s, e = mix(fns, counts, args.seconds)
            rs = [summarise(x, sampler, s, e, settle) for x in samples]
            share = [r["ms"] * c for r, c in zip(rs, counts)]
            entry = {"kinds": ["gemm_bf16", other], "counts": list(counts), "gemm_ms": rs[0]["ms"],
                     "other_ms": rs[1]["ms"], "gemm_time_share": share[0] / sum(share), "mhz": rs[0]["mhz"],
                     "watts": rs[0]["watts"]}
            res["mix"].append(entry)
            print(f"  gemm x{counts[0]} + {other} x{counts[1]} (GEMM {entry['gemm_time_share']:.0%} of the time):"
                  f" gemm {rs[0]['ms']:.3f} ({res['alone']['gemm_bf16']['ms'] / rs[0]['ms']:.3f}x),"
                  f" {other} {rs[1]['ms']:.3f} ({res['alone'][other]['ms'] / rs[1]['ms']:.3f}x),"
                  f" {rs[0]['mhz']:.0f} MHz {rs[0]['watts']:.0f} W")

        print("\n4. window: D = 0.5, per-call ms in the first and last quarter of each burst")
        for period in (4.0, 40.0, 400.0, 2000.0):
            samples, bursts, s, e, calls = duty(gemm, call_ms, 0.5, period, max(args.seconds, 3 * period / 1e3))
            kept = [b for b in bursts if b and b[0][0] >= s + settle] or bursts
            q = max(1, calls // 4)
            first = statistics.median(m for b in kept for _, m in b[:q])
            last = statistics.median(m for b in kept for _, m in b[-q:])
            mhz, watts, _ = steady(sampler, s, e, settle)
            res["window"].append({"period_ms": period, "calls_per_burst": calls, "first_quarter_ms": first,
                                  "last_quarter_ms": last, "mhz": mhz, "watts": watts})
            print(f"  period {period:6.0f} ms ({calls} calls a burst): first quarter {first:.3f} ms,"
                  f" last {last:.3f} ms; {mhz:.0f} MHz {watts:.0f} W (mean)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
