# SPDX-License-Identifier: MIT
"""What the PyTorch reference benchmarks (attention_reference.py, kda_reference.py,
memory_bound_reference.py, fp8_gemm_reference.py, attention_cap_reference.py, cp_ring_reference.py) share with each other
and with attention_bench: the command line (--seq, --batch, --heads, --repeats, --out), the timing
rule (`warmup` calls, then the median of `repeats` individually timed calls, CUDA events; fn(i) gets
the call's index, so that callers can alternate input sets), the warm-up to a training step's power
state and the markdown table."""
import argparse
import statistics
import sys
import time

import torch


def arguments(doc):
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out")
    return ap.parse_args()


def time_ms(fn, warmup=2, repeats=5):
    for i in range(warmup):
        fn(i)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for i in range(warmup, warmup + repeats):
        start.record()
        fn(i)
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop))
    return statistics.median(ms)


def time_seconds(fn, warmup=2, repeats=5):
    """time_ms for a call that takes no index, in seconds."""
    return time_ms(lambda i: fn(), warmup, repeats) * 1e-3


def time_seconds_back_to_back(fn, calls=10, warmup=2, repeats=5):
    """Seconds per call of `calls` calls enqueued back to back between the two events, median of
    `repeats` such batches. For kernels of tens of microseconds: an event pair around one call also
    times the host's launch of it (Python dispatch, 10-25 us), during which the GPU idles."""
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        per_call.append(start.elapsed_time(stop) * 1e-3 / calls)
    return statistics.median(per_call)


def reach_power_limit(seconds=5.0):
    """Back-to-back BF16 GEMMs for `seconds`: a training step runs its kernels in that power state
    (at the power limit, the clock lowered), not in the cool state of a short benchmark."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(20):
            torch.mm(a, a)
        torch.cuda.synchronize()


def write_table(rows, out):
    """rows: (kernel, shape, median ms, model FLOPs); printed, and written to `out` when given."""
    table = "| kernel | shape | median ms | model TFLOP | TFLOP/s |\n|---|---|---|---|---|\n"
    for name, shape, ms, flops in rows:
        table += f"| {name} | {shape} | {ms:.3f} | {flops / 1e12:.3f} | {flops / (ms * 1e-3) / 1e12:.1f} |\n"
    emit(table, out)


def emit(text, out):
    """Prints `text` and writes it to `out` when given."""
    sys.stdout.write(text)
    if out:
        with open(out, "w") as fh:
            fh.write(text)
