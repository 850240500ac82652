#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The memory fractions of a bench/memory_bound_reference.py JSON as the hardware files carry them:
all rows together (`efficiency.memory`) and by kind (`memory_by_kind`), each its bytes over its
time at both sizes. usage: by_kind.py MEMORY_BOUND.json"""
import json
import sys

KINDS = {
    "norm": ("rms_norm", "layer_norm", "rms_norm fwd+bwd (autograd)"),
    "activation": ("silu", "silu(gate) * up, eager", "gelu tanh"),
    "elementwise": ("add (residual)", "mul"),
    "dp_copy": ("copy",),
    "optimizer": ("fused AdamW (fp32)",),
}

j = json.load(open(sys.argv[1]))
rows, peak = j["rows"], j["peak_bytes_per_s"]


def rate(rs):
    return sum(r["bytes"] for r in rs) / sum(r["seconds"] for r in rs)


every = rate(rows)
print(f"memory: {every / 1e9:.1f} GB/s = {every / peak:.3f} of {peak / 1e9:.0f} GB/s ({len(rows)} rows)")
for kind, ops in KINDS.items():
    rs = [r for r in rows if r["op"] in ops]
    print(f"memory_by_kind.{kind}: {rate(rs) / 1e9:.1f} GB/s = {rate(rs) / peak:.3f} ({len(rs)} rows)")
