# SPDX-License-Identifier: MIT
"""PyTorch's grouped GEMM (torch._grouped_mm, BF16) at the shapes of grouped_gemm_bench: 14 experts
of Kimi K3, forward (y = x W^T) and input-gradient (dx = dy W) layouts, 64 to 8,192 rows per expert.
Run next to grouped_gemm_bench in the same device call (bench/grouped_gemm_device.sh). Timing as reference_bench.time_ms (median of `--repeats` after 2
warm-ups, two input sets alternated).
    python3 bench/grouped_gemm_reference.py [--repeats 20] [--out FILE]"""
import torch

from reference_bench import arguments, emit, time_ms

EXPERTS, LATENT, WIDTH = 14, 3584, 3072
SHAPES = [("gate|up fwd", 2 * WIDTH, LATENT, True), ("down fwd", LATENT, WIDTH, True), ("down dx", WIDTH, LATENT, False)]
ROWS = [64, 128, 256, 512, 1024, 2048, 4096, 8192]


def main():
    args = arguments(__doc__)
    if not hasattr(torch, "_grouped_mm"):
        print(f"torch {torch.__version__} has no _grouped_mm")
        return
    lines = ["| shape | rows/expert | n | k | torch._grouped_mm: us | TFLOP/s |", "|---|---|---|---|---|---|"]
    for name, n, k, transposed in SHAPES:
        for rows in ROWS:
            offs = torch.arange(1, EXPERTS + 1, device="cuda", dtype=torch.int32) * rows
            sets = []
            for _ in range(2):
                x = torch.randn(rows * EXPERTS, k, device="cuda", dtype=torch.bfloat16)
                # W_e stored [n, k] (forward) or [k, n] (input gradient); the product takes [k, n].
                w = torch.randn(EXPERTS, n, k, device="cuda", dtype=torch.bfloat16) if transposed else \
                    torch.randn(EXPERTS, k, n, device="cuda", dtype=torch.bfloat16)
                sets.append((x, w.transpose(-2, -1) if transposed else w))
            ms = time_ms(lambda i: torch._grouped_mm(sets[i % 2][0], sets[i % 2][1], offs=offs), 2, args.repeats)
            flops = 2.0 * rows * EXPERTS * n * k
            lines.append(f"| {name} | {rows} | {n} | {k} | {ms * 1e3:.1f} | {flops / (ms * 1e-3) / 1e12:.1f} |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
