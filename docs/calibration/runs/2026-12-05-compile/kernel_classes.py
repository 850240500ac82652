#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""GPU kernel time of a harness trace by class, per traced step: the step totals that a compiled
trace (no op ranges: Inductor fuses across ops) can still be compared on.

usage: kernel_classes.py TRACE.json.gz [...]   (prints one table per trace)
"""
import gzip
import json
import re
import sys

# First match wins; names as PyTorch 2.11 on Hopper launches them.
CLASSES = [
    ("nccl", r"^nccl|ncclDevKernel"),
    ("attention", r"flash|fmha|cudnn|sdpa|attn"),
    ("gemm", r"nvjet|gemm|sm90_xmma|cutlass|Kernel2|cublas"),
    ("inductor", r"^triton_"),
    ("optimizer", r"multi_tensor_apply|adam"),
    ("loss", r"log_softmax|nll_loss|cross_entropy|softmax"),
    ("copy", r"memcpy|memset|copy|cat|CatArray|fill|split|chunk"),
    ("other", r"."),
]


def classify(name):
    for cls, pattern in CLASSES:
        if re.search(pattern, name, re.IGNORECASE):
            return cls
    return "other"


def main():
    for path in sys.argv[1:]:
        with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
            events = json.load(f)["traceEvents"]
        steps = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation" and re.match(r"ProfilerStep#\d+", e.get("name", ""))]
        kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
        total, count, names = {}, {}, {}
        for k in kernels:
            c = classify(k["name"])
            total[c] = total.get(c, 0) + k["dur"]
            count[c] = count.get(c, 0) + 1
            if c in ("inductor", "other"):
                names.setdefault(c, {}).setdefault(k["name"][:70], [0, 0])
                names[c][k["name"][:70]][0] += k["dur"]
                names[c][k["name"][:70]][1] += 1
        n = max(len(steps), 1)
        print(f"{path}: {n} traced steps; per step:")
        for c, _ in CLASSES:
            if c in total:
                print(f"  {c:10s} {total[c] / n / 1e3:9.3f} ms  {count[c] / n:7.0f} kernels")
        print(f"  {'all':10s} {sum(total.values()) / n / 1e3:9.3f} ms")
        for c in ("inductor", "other"):
            top = sorted(names.get(c, {}).items(), key=lambda kv: -kv[1][0])[:12]
            for name, (us, k) in top:
                print(f"    {c}: {us / n / 1e3:8.3f} ms {k / n:5.0f}x  {name}")


if __name__ == "__main__":
    main()
