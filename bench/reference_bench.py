# SPDX-License-Identifier: MIT
"""What the PyTorch reference benchmarks (attention_reference.py, kda_reference.py) share with each
other and with attention_bench: the command line (--seq, --batch, --heads, --repeats, --out), the
timing rule (`warmup` calls, then the median of `repeats` individually timed calls, CUDA events;
fn(i) gets the call's index, so that callers can alternate input sets) and the markdown table."""
import argparse
import statistics
import sys

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


def write_table(rows, out):
    """rows: (kernel, shape, median ms, model FLOPs); printed, and written to `out` when given."""
    table = "| kernel | shape | median ms | model TFLOP | TFLOP/s |\n|---|---|---|---|---|\n"
    for name, shape, ms, flops in rows:
        table += f"| {name} | {shape} | {ms:.3f} | {flops / 1e12:.3f} | {flops / (ms * 1e-3) / 1e12:.1f} |\n"
    sys.stdout.write(table)
    if out:
        with open(out, "w") as fh:
            fh.write(table)
