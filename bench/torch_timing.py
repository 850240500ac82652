# SPDX-License-Identifier: MIT
"""The timing rule of the reference benchmarks, as attention_bench's: `warmup` calls, then the
median of `repeats` individually timed calls (CUDA events); fn(i) gets the call's index, so that
callers can alternate input sets."""
import statistics

import torch


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
