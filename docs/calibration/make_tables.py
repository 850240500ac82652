#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Prints the markdown tables of docs/calibration/README.md from a calibration file.

usage: python3 docs/calibration/make_tables.py hardware/calibration/h200.json
Peaks for the roofline columns are the H200 datasheet's (hardware/h200-x2.json): 989 TFLOP/s BF16
dense, 4.8 TB/s HBM; "copy" is the measured copy-kernel bandwidth at the same size.
"""
import json
import sys

PEAK_FLOPS = 989e12
PEAK_HBM = 4.8e12


def interp(points, x):
    import math
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            f = math.log(x / x0) / math.log(x1 / x0)
            return y0 + f * (y1 - y0)


def main(path):
    c = json.load(open(path))
    p = c["provenance"]
    print(f"Provenance: {p['num_gpus']} x {p['gpu']} ({p['sms']} SMs, L2 {p['l2_bytes']/2**20:.0f} MiB), "
          f"driver {p.get('kernel_driver', '') or p['driver']} (CUDA driver API {p['driver']}), runtime {p['cuda_runtime']}, cuBLASLt {p['cublas']}, NCCL {p['nccl']}; "
          f"{p['date']}; `{p['command']}`; median of {p['repeats']} after {p['warmup']} warm-up; {p['wall_s']:.0f} s.\n")

    kernels = c.get("kernels", {})  # a file of some parts only (--only) lacks the others
    if "gemm" in kernels:
        print("### GEMM (BF16 in, FP32 accumulate, BF16 out; cuBLASLt)\n")
        print("| m | n | k | TFLOP/s (heuristic's first choice) | of 989 peak | best of the heuristic's algorithms | heuristic / best | in table |")
        print("|---:|---:|---:|---:|---:|---:|---:|:---:|")
        for s in kernels["gemm"]["samples"]:
            h, b = s["flops_per_s"], s["best_flops_per_s"]
            t = "yes" if s.get("in_table", True) else "no"
            print(f"| {s['m']} | {s['n']} | {s['k']} | {h/1e12:.1f} | {h/PEAK_FLOPS:.2f} | {b/1e12:.1f} | {h/b:.2f} | {t} |")
        print("\nTable the cost model reads (median per min(m, n, k)):", ", ".join(
            f"{x:.0f}: {y/1e12:.0f}" for x, y in kernels["gemm"]["points"]), "TFLOP/s\n")

    if "grouped_gemm" in kernels:
        print("### Grouped GEMM (14 experts = one EP64 rank of K3, latent width; a loop of cuBLASLt calls)\n")
        print("| rows per expert | n | k | TFLOP/s | of 989 peak |")
        print("|---:|---:|---:|---:|---:|")
        for s in kernels["grouped_gemm"]["samples"]:
            print(f"| {s['rows_per_group']} | {s['n']} | {s['k']} | {s['flops_per_s']/1e12:.1f} | {s['flops_per_s']/PEAK_FLOPS:.2f} |")
        print()

    if "memory" in kernels:
        mem = kernels["memory"]
        print("### Memory-bound kernels (bytes = read + written)\n")
        print("| kernel | bytes | time (us) | GB/s | of 4.8 TB/s | of the copy kernel at this size |")
        print("|---|---:|---:|---:|---:|---:|")
        for s in mem["samples"]:
            bw = s["bytes_per_s"]
            print(f"| {s['kernel']} | {s['bytes']:.3g} | {s['seconds']*1e6:.1f} | {bw/1e9:.0f} | {bw/PEAK_HBM:.2f} | "
                  f"{bw/interp(mem['points'], s['bytes']):.2f} |")
        print()

    if "memory" in kernels and "other_kernels" in c:
        print("### Other kernels at K3 shapes (roofline: bytes / copy bandwidth, or FLOPs / 989 TF/s)\n")
        print("| kernel | time (us) | roofline (us) | achieved / roofline |")
        print("|---|---:|---:|---:|")
        for s in c["other_kernels"]:
            roof = max(s["bytes"] / interp(mem["points"], s["bytes"]), s["flops"] / PEAK_FLOPS)
            print(f"| {s['kernel']} | {s['seconds']*1e6:.1f} | {roof*1e6:.1f} | {roof/s['seconds']:.2f} |")
        print()

    if "attention" in c:  # format version 2
        print("### Attention kernels (the executor's launches at K3 per-rank heads; FLOP/s of the graph op's own flops, "
              "TB/s of its bytes for the memory-bound key gather)\n")
        print("| op kind | phase | query rows (= sequence) | time (ms) | TFLOP/s or TB/s | of 989 TF or 4.8 TB/s peak | max / min of the repeats |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for kind, phases in c["attention"].items():
            for phase, t in phases.items():
                for s in t["samples"]:
                    rate, peak = (s["bytes_per_s"], PEAK_HBM) if "bytes_per_s" in s else (s["flops_per_s"], PEAK_FLOPS)
                    print(f"| {kind} | {phase} | {s['query_rows']} | {s['seconds']*1e3:.2f} | {rate/1e12:.2f} | "
                          f"{rate/peak:.3f} | {s['max_seconds']/s['min_seconds']:.3f} |")
        print()

    if "cce" in kernels:
        print("### CCE loss (the executor's chunked loss through its own launches; FLOP/s of the graph op's own flops)\n")
        print("| pass | op | hidden size | rows | vocabulary / chunks | time (ms) | TFLOP/s | of 989 peak | max / min of the repeats | in table |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|:---:|")
        for name, t in kernels["cce"].items():
            for s in t.get("samples", []):
                print(f"| {name} | {s['op']} | {s['hidden_size']} | {s['rows']} | {s['vocab']} / {s['chunks']} | "
                      f"{s['seconds']*1e3:.2f} | {s['flops_per_s']/1e12:.1f} | {s['flops_per_s']/PEAK_FLOPS:.2f} | "
                      f"{s['max_seconds']/s['min_seconds']:.3f} | {'yes' if s.get('in_table', True) else 'no'} |")
        print()
        for name, t in kernels["cce"].items():
            print(f"Table the cost model reads, {name} (by hidden size):", ", ".join(
                f"{x:.0f}: {y/1e12:.0f}" for x, y in t["points"]), "TFLOP/s")
        print()

    if "host_copy" in c:
        print("### Pinned host copies (one direction at a time)\n")
        print("| bytes | H2D GB/s | D2H GB/s |")
        print("|---:|---:|---:|")
        for (x, h2d), (_, d2h) in zip(c["host_copy"]["h2d"]["points"], c["host_copy"]["d2h"]["points"]):
            print(f"| {x:.0f} | {h2d/1e9:.1f} | {d2h/1e9:.1f} |")
        print()

    if not c.get("collectives"):
        return
    print("### NCCL collectives, bus bandwidth (GB/s, nccl-tests' definition; BF16)\n")
    kinds = list(c["collectives"].keys())
    for n in sorted({g for k in kinds for g in c["collectives"][k]}, key=int):
        print(f"{n} GPUs:\n")
        print("| bytes | " + " | ".join(kinds) + " |")
        print("|---:|" + "---:|" * len(kinds))
        sizes = [x for x, _ in c["collectives"][kinds[0]][n]["points"]]
        for i, x in enumerate(sizes):
            cells = [f"{c['collectives'][k][n]['points'][i][1]/1e9:.1f}" for k in kinds]
            print(f"| {x:.0f} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
