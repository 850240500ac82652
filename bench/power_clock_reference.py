#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How a Hopper GPU's sustained SM clock follows its power: the data behind `device.power`.

A GPU at its power limit lowers its SM clock until the board draws no more than the limit, so a
part run below its rated limit (a 500 W H100, a power-capped cluster) runs its compute-bound kernels
slower by the ratio of the clocks. What that ratio is depends on how the SMs' power grows with the
clock (P = C f V(f)^2, the voltage rising with the clock). This measures that curve without
changing any setting of the GPU: a Triton kernel of pure tensor-core work (a BF16 dot on tiles held
on chip, no memory traffic) runs on k SMs only (k programs, one per SM), for k from a few to all of
them, seconds each, while nvidia-smi samples the SM clock and the board power.

- Few SMs: the clock is the maximum and the power stays under the limit; power against k gives the
  board's power with the SMs idle (the intercept) and one busy SM's power at the maximum clock.
- Many SMs: the power sits at the limit and the clock falls; each point gives one busy SM's power at
  that clock, (limit - intercept) / k.

Fitting p(f) = p(f_max) (f / f_max)^gamma to those points gives gamma. Also timed, as the
reference of a training step's state: back-to-back cuBLAS BF16 and FP8 GEMMs on the whole chip.

usage: python3 bench/power_clock_reference.py [--out FILE] [--seconds 6]
Needs PyTorch with CUDA, Triton, nvidia-smi; an sm_90 GPU.
"""
import argparse
import json
import statistics
import subprocess
import tempfile
import time

import torch
import triton
import triton.language as tl


@triton.jit
def _random_bf16(i, j, seed):
    """BF16 values of random sign and mantissa in [0.5, 1) from a hash of (i, j, seed): every bit
    but the exponent's toggles from one element to the next, as in trained weights."""
    h = i * 1103515245 + j * 12345 + seed * 1640531527
    h = h ^ (h >> 13)
    h = h * 1274126177
    h = h ^ (h >> 16)
    bits = (h & 0x807F) | 0x3F00
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _busy_dot(out_ptr, iters, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, RANDOM: tl.constexpr):
    """iters dots of one (BM x BK) by (BK x BN) BF16 tile pair into an fp32 accumulator: tensor-core
    work only. The tiles depend on the program id so that no two programs are the same work; RANDOM
    fills them with random bits (more switching, more power per clock) instead of small integers."""
    pid = tl.program_id(0)
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if RANDOM:
        a = _random_bf16(rm[:, None], rk[None, :], pid)
        b = _random_bf16(rk[:, None], rn[None, :], pid + 7919)
    else:
        a = ((rm[:, None] + rk[None, :] + pid) % 7 - 3).to(tl.bfloat16)
        b = ((rk[:, None] * 3 + rn[None, :] + pid) % 5 - 2).to(tl.bfloat16)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(iters):
        acc = tl.dot(a, b, acc)
    tl.store(out_ptr + pid * BM * BN + rm[:, None] * BN + rn[None, :], acc)


BM, BN, BK = 128, 256, 64


class Sampler:
    """nvidia-smi sampling the SM clock and board power every 100 ms into a temporary CSV."""

    def __enter__(self):
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv")
        self.proc = subprocess.Popen(
            ["nvidia-smi", "-i", "0", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
             "--format=csv,noheader,nounits", "-lms", "100"], stdout=self.file, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()

    def samples(self):
        """[(unix time, MHz, W, C)] so far."""
        self.file.flush()
        self.file.seek(0)
        rows = []
        for line in self.file.read().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 4:
                continue
            try:
                t = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
                rows.append((t, float(parts[1]), float(parts[2]), float(parts[3])))
            except ValueError:
                continue
        return rows


def run_for(seconds, launch):
    """Calls launch() back to back for `seconds`; returns (calls, elapsed seconds, start, end unix time)."""
    torch.cuda.synchronize()
    start = time.time()
    calls = 0
    while time.time() - start < seconds:
        for _ in range(4):
            launch()
        calls += 4
        torch.cuda.synchronize()
    end = time.time()
    return calls, end - start, start, end


def steady(sampler, start, end, settle):
    """Median clock, power and temperature of the samples after the first `settle` seconds."""
    rows = [r for r in sampler.samples() if start + settle <= r[0] <= end]
    if not rows:
        return None, None, None
    return (statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows),
            statistics.median(r[3] for r in rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON file to write")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds per point (the last two thirds are kept)")
    ap.add_argument("--iters", type=int, default=20000, help="dots per program per launch")
    ap.add_argument("--data", default="small,random",
                    help="tile data, in order: small (small integers) and/or random (random bits)")
    args = ap.parse_args()
    args.data = [d == "random" for d in args.data.split(",")]
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    print(f"{torch.cuda.get_device_name()}, {sms} SMs, torch {torch.__version__}, triton {triton.__version__}")
    limit = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=power.limit,clocks.max.sm", "--format=csv,noheader"],
                           capture_output=True, text=True).stdout.strip()
    print(f"power limit, max SM clock: {limit}")
    out = torch.empty(sms * BM * BN, device="cuda", dtype=torch.float32)
    flops_per_program = 2.0 * BM * BN * BK * args.iters
    for random in (False, True):
        _busy_dot[(1,)](out, 10, BM=BM, BN=BN, BK=BK, RANDOM=random, num_warps=8)  # compile
    result = {"device": torch.cuda.get_device_name(), "sms": sms, "limit": limit, "points": [], "gemm": []}
    settle = args.seconds / 3
    with Sampler() as sampler:
        time.sleep(2.0)
        idle = steady(sampler, time.time() - 1.5, time.time(), 0)
        result["idle"] = {"mhz": idle[0], "watts": idle[1], "celsius": idle[2]}
        print(f"idle: {idle[0]} MHz, {idle[1]} W, {idle[2]} C")
        print(f"{'data':>7s} {'SMs':>4s} {'MHz':>6s} {'W':>6s} {'C':>4s} {'TFLOP/s':>8s} {'per SM':>7s}")
        for random in args.data:
            ks = sorted({4, 8, 16, 24, 32, 44, 56, 66, 80, 96, 110, 120, sms})
            for k in ks:
                calls, elapsed, start, end = run_for(
                    args.seconds, lambda: _busy_dot[(k,)](out, args.iters, BM=BM, BN=BN, BK=BK, RANDOM=random, num_warps=8))
                mhz, watts, celsius = steady(sampler, start, end, settle)
                tflops = calls * k * flops_per_program / elapsed / 1e12
                data = "random" if random else "small"
                result["points"].append({"data": data, "sms": k, "mhz": mhz, "watts": watts, "celsius": celsius,
                                         "tflops": tflops})
                print(f"{data:>7s} {k:4d} {mhz:6.0f} {watts:6.1f} {celsius:4.0f} {tflops:8.1f} {tflops / k:7.3f}")
        # A training step's GEMMs on the whole chip, for reference: cuBLAS BF16 and FP8 (tensorwise).
        m = n = k = 8192
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        x8, y8 = x.to(torch.float8_e4m3fn), y.to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device="cuda")
        gemms = {"cublas bf16 8192^3": lambda: torch.mm(x, y.t()),
                 "cublas fp8 8192^3": lambda: torch._scaled_mm(x8, y8.t(), scale_a=one, scale_b=one,
                                                               out_dtype=torch.bfloat16, use_fast_accum=True)}
        for name, fn in gemms.items():
            calls, elapsed, start, end = run_for(args.seconds, fn)
            mhz, watts, celsius = steady(sampler, start, end, settle)
            tflops = calls * 2.0 * m * n * k / elapsed / 1e12
            result["gemm"].append({"name": name, "mhz": mhz, "watts": watts, "celsius": celsius, "tflops": tflops})
            print(f"{name}: {mhz:.0f} MHz, {watts:.1f} W, {celsius:.0f} C, {tflops:.1f} TFLOP/s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
