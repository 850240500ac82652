#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The compute one rank of PyTorch's ring attention does (torch.distributed.tensor.experimental
context_parallel as torchtitan ran it at the end of 2024: round-robin load balancing, fp32 merges),
timed on one GPU beside the kernel the simulator costs it as: one FlashAttention call with the
rank's share of the causal (query, key) pairs. No communication: the question is whether the ring's
per-step calls and merges cost more than their FLOPs at one kernel's rate.

A rank r of CP degree c holds chunks r and 2c-1-r of the sequence's 2c equal chunks (S tokens in
all). Its ring runs c SDPA calls (PyTorch's _templated_ring_attention): step 0 causal over its own
S keys; a step i <= r all S queries against the first chunk of rank r-i (S/2 keys); a step i > r
the second half of its queries against all S keys of rank r-i, each non-causal. Each step's output
and log-sum-exp are upcast to fp32 and merged (out -= sigmoid(lse_i - lse) (out - out_i),
lse -= logsigmoid(lse - lse_i)); a half-query step updates the second half through a torch.cat.
The backward runs each step's flash backward and accumulates dq, dk, dv in fp32. Both patterns
(rank 0: every step i > r; rank c-1: every step i <= r) are timed, the slower counted.

The reference: one causal flash call over the whole sequence (c S tokens), its time divided by c -
the rank's share at the rate of one kernel, which is how moesim costs the core.

    python3 bench/cp_ring_reference.py [--local 32768] [--heads 32] [--cps 1,2,4,8] [--repeats 3] [--out FILE]

--check runs a small ring on real positions and compares its output with one causal call.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from reference_bench import reach_power_limit, time_ms  # bench/reference_bench.py, beside this file


def flash_with_lse(q, k, v, causal):
    """FlashAttention-2 (PyTorch's flash backend) returning the output and its log-sum-exp."""
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
    return out[0], out[1]


def merge(out, lse, out_i, lse_i, partial):
    """PyTorch's _SDPAMerger step, in fp32; `partial`: out_i covers the second half of the rows."""
    out_i, lse_i = out_i.float(), lse_i.float().unsqueeze(-1)
    if out is None:
        return out_i, lse_i
    if partial:
        half = out.shape[2] // 2
        o1, o2 = out[:, :, :half], out[:, :, half:]
        l1, l2 = lse[:, :, :half], lse[:, :, half:]
        o2 = o2 - torch.sigmoid(lse_i - l2) * (o2 - out_i)
        l2 = l2 - F.logsigmoid(l2 - lse_i)
        return torch.cat([o1, o2], dim=2), torch.cat([l1, l2], dim=2)
    out = out - torch.sigmoid(lse_i - lse) * (out - out_i)
    lse = lse - F.logsigmoid(lse - lse_i)
    return out, lse


def ring_steps(c, r):
    """(query half or None, key/value half or None, causal) per step for rank r: 'None' = all."""
    steps = [(None, None, True)]
    for i in range(1, c):
        steps.append((None, 0, False) if i <= r else (1, None, False))
    return steps


def half(x, which):
    if which is None:
        return x
    n = x.shape[2] // 2
    return x[:, :, :n] if which == 0 else x[:, :, n:]


def ring_forward(q, kvs, c, r):
    """kvs[i]: the keys and values of step i's source rank (local layout, S rows)."""
    out = lse = None
    for (qh, kh, causal), (k, v) in zip(ring_steps(c, r), kvs):
        o, l = flash_with_lse(half(q, qh), half(k, kh), half(v, kh), causal)
        out, lse = merge(out, lse, o, l, partial=qh == 1)
    return out.to(q.dtype), lse


def ring_backward_setup(q, kvs, c, r):
    """Each step's forward with autograd (flash backend), for timing its backward alone."""
    graphs = []
    for (qh, kh, causal), (k, v) in zip(ring_steps(c, r), kvs):
        qi = half(q, qh).detach().requires_grad_(True)
        ki = half(k, kh).detach().requires_grad_(True)
        vi = half(v, kh).detach().requires_grad_(True)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            oi = F.scaled_dot_product_attention(qi, ki, vi, is_causal=causal)
        graphs.append((qh, kh, qi, ki, vi, oi))
    return graphs


def ring_backward(graphs, grad_out, dq, dkv):
    """Every step's flash backward, dq and each source's dk, dv accumulated in fp32."""
    for step, (qh, kh, qi, ki, vi, oi) in enumerate(graphs):
        g = half(grad_out, qh)
        gq, gk, gv = torch.autograd.grad(oi, (qi, ki, vi), g, retain_graph=True)
        half(dq, qh).add_(gq.float())
        half(dkv[step][0], kh).add_(gk.float())
        half(dkv[step][1], kh).add_(gv.float())


def timed(fn, warmup, repeats):
    """time_ms for a call that takes no index."""
    return time_ms(lambda i: fn(), warmup, repeats)


def check(dev):
    """A ring of CP 4 over real positions against one causal call: the merge and the layout."""
    torch.manual_seed(0)
    c, s, h, d = 4, 512, 4, 64
    n = c * s
    q, k, v = (torch.randn(1, h, n, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    full, _ = flash_with_lse(q, k, v, True)
    chunk = s // 2
    def local(x, r):
        return torch.cat([x[:, :, r * chunk:(r + 1) * chunk], x[:, :, (2 * c - 1 - r) * chunk:(2 * c - r) * chunk]], 2)
    worst = 0.0
    for r in range(c):
        kvs = [(local(k, (r - i) % c), local(v, (r - i) % c)) for i in range(c)]
        out, _ = ring_forward(local(q, r), kvs, c, r)
        worst = max(worst, (out.float() - local(full, r).float()).abs().max().item())
    print(f"check: ring CP {c} against one causal call, max |difference| {worst:.3e} (bf16 outputs)")
    return worst < 2e-2


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--local", type=int, default=32768, help="tokens a rank holds (S)")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--cps", default="1,2,4,8")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    dev = torch.device("cuda")
    ok = check(dev)
    if a.check:
        return 0 if ok else 1
    reach_power_limit()
    s, h, d = a.local, a.heads, a.head_dim
    rows = []
    for c in (int(x) for x in a.cps.split(",")):
        n = c * s

        def t(rows_):
            return torch.empty(1, h, rows_, d, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)

        # The reference: one causal call over the whole sequence, forward and backward.
        qf, kf, vf = (t(n).requires_grad_(True) for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            of = F.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
        gof = torch.randn_like(of)
        ref_fwd = timed(lambda: flash_with_lse(qf.detach(), kf.detach(), vf.detach(), True), a.warmup, a.repeats)
        ref_bwd = timed(lambda: torch.autograd.grad(of, (qf, kf, vf), gof, retain_graph=True), a.warmup, a.repeats)
        del qf, kf, vf, of, gof
        torch.cuda.empty_cache()
        # The ring of the two extreme ranks.
        q = t(s)
        kvs = [(t(s), t(s)) for _ in range(c)]
        grad_out = torch.randn_like(q)
        fwd = bwd = merges = 0.0
        for r in sorted({0, c - 1}):
            f_ms = timed(lambda: ring_forward(q, kvs, c, r), a.warmup, a.repeats)
            calls_ms = timed(lambda: [flash_with_lse(half(q, qh), half(k, kh), half(v, kh), cz)
                                      for (qh, kh, cz), (k, v) in zip(ring_steps(c, r), kvs)], a.warmup, a.repeats)
            graphs = ring_backward_setup(q, kvs, c, r)
            dq = torch.zeros(q.shape, device=dev, dtype=torch.float32)
            dkv = [(torch.zeros(k.shape, device=dev, dtype=torch.float32),
                    torch.zeros(v.shape, device=dev, dtype=torch.float32)) for k, v in kvs]
            b_ms = timed(lambda: ring_backward(graphs, grad_out, dq, dkv), a.warmup, a.repeats)
            del graphs, dq, dkv
            if f_ms + b_ms > fwd + bwd:
                fwd, bwd, merges = f_ms, b_ms, f_ms - calls_ms
        del q, kvs, grad_out
        torch.cuda.empty_cache()
        rows.append((c, n, ref_fwd / c, ref_bwd / c, fwd, merges, bwd))
    table = ("| CP | sequence | reference fwd / CP (ms) | reference bwd / CP (ms) | ring fwd (ms) | of which merges (ms) "
             "| ring bwd (ms) | ring / reference, fwd | bwd |\n|---|---|---|---|---|---|---|---|---|\n")
    for c, n, rf, rb, f, m, b in rows:
        table += f"| {c} | {n} | {rf:.2f} | {rb:.2f} | {f:.2f} | {m:.2f} | {b:.2f} | {f / rf:.3f} | {b / rb:.3f} |\n"
    sys.stdout.write(table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
