# SPDX-License-Identifier: MIT
"""Reference harness for `moesim calibrate --from-trace` and `moesim validate --from-trace`.

Small Llama-style dense and Qwen3-MoE-style models written with PyTorch only (FSDP2 through
torch.distributed.fsdp.fully_shard, expert parallelism through all_to_all_single as torchtitan
does), trained for a few steps under torch.profiler; the trace is exported as Kineto JSON (.json.gz).

Every op the simulator models runs inside a record_function range named as the scenario's op
graph names it (`moesim graph export`): "layer3.attn.q_proj" in forward, "layer3.attn.q_proj.bwd"
in backward, "lm_head", "loss.cross_entropy", "embedding.embedding", "head.final_norm", "optimizer" (every
parameter's AdamW update,
the graph's "*.adamw" ops). moesim's matcher maps each kernel to the innermost such range through the
kernel's launch (correlation id); the table of rules is docs/calibration/from-trace.md. Wrap the ops of
your own model the same way (`op_range` below) to calibrate from your training job.

Usage (one GPU; torchrun --nproc-per-node N for N GPUs: FSDP over all, experts split over all):

    python3 harness.py --out traces/ --config dense:4096:2 --config moe:4096:2

A config is MODEL:SEQ:MICRO_BATCHES[:RECOMPUTE] (one sequence per micro-batch; MODEL dense, moe or llama8b;
RECOMPUTE none, the default, or full: each layer's forward rerun in backward, the scenario's
recompute.policy full); the trace of each is OUT/MODEL-sSEQ-mbN[-full].rankR.json.gz, and the .txt
of the same name its summary.
"""
import argparse
import gc
import gzip
import json
import math
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

# The models (models/calibration/llama-slice.json and qwen3-moe-slice.json); keep them equal.
MODELS = {
    "dense": dict(hidden=2048, layers=4, vocab=32768, heads=16, kv_heads=8, head_dim=128, qk_norm=False,
                  ffn=5632, experts=0, top_k=0, expert_ffn=0),
    "moe": dict(hidden=2048, layers=4, vocab=32768, heads=32, kv_heads=4, head_dim=128, qk_norm=True,
                ffn=0, experts=32, top_k=8, expert_ffn=768),
    # Llama 3.1 8B's shapes in 4 layers (models/calibration/llama-3.1-8b-l4.json), written as
    # torchtitan's eager Llama writes them: RoPE through complex numbers, w1 and w3 two projections.
    "llama8b": dict(hidden=4096, layers=4, vocab=128256, heads=32, kv_heads=8, head_dim=128, qk_norm=False,
                    ffn=14336, experts=0, top_k=0, expert_ffn=0, torchtitan=True),
}


# --- ranges: forward by record_function, backward by autograd tags -----------------------------
# A backward range opens when the gradient reaches the op's output (before the op's backward
# kernels are launched) and closes when the first of its inputs receives its gradient (after them).
# Both run on the autograd engine's thread, so the range nests on that thread like a forward one.

_open_ranges = {}


def _enter(name):
    if name not in _open_ranges:  # an op with several differentiable outputs opens once
        _open_ranges[name] = torch.ops.profiler._record_function_enter_new(name, None)


def _exit(name):
    handle = _open_ranges.pop(name, None)
    if handle is not None:
        torch.ops.profiler._record_function_exit._RecordFunction(handle)


class _OpenBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, name):
        ctx.name = name
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        _enter(ctx.name)
        return g, None


class _CloseBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, name):
        ctx.name = name
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        _exit(ctx.name)
        return g, None


_ranges_on = True  # off under --compile: Inductor fuses across the ops, so there are no op ranges to keep


def op_range(name, fn, *inputs):
    """Runs fn(*inputs) inside range `name`, its backward inside `name.bwd`. The first input that
    needs a gradient closes the backward range; without one, a hook on the output's node does."""
    if not _ranges_on:
        return fn(*inputs)
    bwd = name + ".bwd"
    tagged = []
    closer = None
    for x in inputs:
        if closer is None and isinstance(x, torch.Tensor) and x.requires_grad:
            x = _CloseBackward.apply(x, bwd)
            closer = True
        tagged.append(x)
    with record_function(name):
        y = fn(*tagged)
    outs = list(y) if isinstance(y, tuple) else [y]
    for i, t in enumerate(outs):
        if torch.is_grad_enabled() and isinstance(t, torch.Tensor) and t.requires_grad:
            if closer is None:
                t.grad_fn.register_hook(lambda *_: _exit(bwd))
                closer = True
            outs[i] = _OpenBackward.apply(t, bwd)
    return tuple(outs) if isinstance(y, tuple) else outs[0]


# --- the model ------------------------------------------------------------------------------------

class CompositeRMSNorm(nn.Module):
    """nn.RMSNorm as PyTorch 2.4-2.7 computed it (ATen's composite rms_norm, before the fused
    kernel of pytorch/pytorch PR 153666): FP32 upcast, pow, mean, add, rsqrt, multiply, cast back,
    times the weight: 8 kernels forward, autograd's backward of each (the scenario's
    fused_ops.eager_rms_norm composite)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        r = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True).add_(self.eps))
        return (x32 * r).type_as(x) * self.weight


def rms_norm(dim):
    return CompositeRMSNorm(dim, 1e-6) if _composite_norm else nn.RMSNorm(dim, eps=1e-6)


_composite_norm = False  # --rms-norm composite

def rope_tables(seq, head_dim, device):
    inv = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    return torch.cos(ang).to(torch.bfloat16), torch.sin(ang).to(torch.bfloat16)


def swiglu(u):
    # One split, so that its backward is one concatenation (graph/elementwise_kernels.cpp). Traces
    # recorded before 2026-12-01 08:00 split twice: two zero-fills, a second concatenation and an add
    # more in each activation's backward.
    gate, up = u.chunk(2, -1)
    return F.silu(gate) * up


def apply_rope(x, cos, sin):  # x: [b, s, h, d]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


_phasors = {}  # the complex tables of each (cos, sin) pair, made once as torchtitan's freqs_cis


def apply_rope_complex(x, cos, sin):
    # torchtitan's apply_rotary_emb: pairs as complex numbers in FP32, times the unit phasors,
    # back to the input's type (the scenario's eager_rope "complex").
    if torch.compiler.is_compiling():  # traced once: the table's cast and complex view fuse into the kernel
        phasors = torch.complex(cos.float(), sin.float())[None, :, None, :]
    else:
        key = (cos.data_ptr(), sin.data_ptr())
        if key not in _phasors:
            _phasors.clear()
            _phasors[key] = torch.complex(cos.float(), sin.float())[None, :, None, :]
        phasors = _phasors[key]
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * phasors).flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        d, h, kv, hd = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
        self.h, self.kv, self.hd, self.p = h, kv, hd, f"layer{layer}.attn"
        self.q_proj = nn.Linear(d, h * hd, bias=False)
        self.k_proj = nn.Linear(d, kv * hd, bias=False)
        self.v_proj = nn.Linear(d, kv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, d, bias=False)
        self.qk_norm = cfg["qk_norm"]
        self.rope = apply_rope_complex if cfg.get("torchtitan") else apply_rope
        if self.qk_norm:
            self.q_norm = rms_norm(hd)
            self.k_norm = rms_norm(hd)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        p = self.p
        q = op_range(p + ".q_proj", self.q_proj, x).view(b, s, self.h, self.hd)
        k = op_range(p + ".k_proj", self.k_proj, x).view(b, s, self.kv, self.hd)
        v = op_range(p + ".v_proj", self.v_proj, x).view(b, s, self.kv, self.hd)
        if self.qk_norm:
            q = op_range(p + ".q_norm", self.q_norm, q)
            k = op_range(p + ".k_norm", self.k_norm, k)
        # The graph's attn.rope op (fused_ops.elementwise compiled or eager) rotates q and k: both
        # ranges carry its name, and the matcher adds their kernels (eager_rope "real" is this form).
        q = op_range(p + ".rope", lambda t: self.rope(t, cos, sin), q)
        k = op_range(p + ".rope", lambda t: self.rope(t, cos, sin), k)
        o = op_range(p + ".flash_attention",
                     lambda q, k, v: F.scaled_dot_product_attention(
                         q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                         enable_gqa=True).transpose(1, 2).reshape(b, s, self.h * self.hd), q, k, v)
        return op_range(p + ".o_proj", self.o_proj, o)


class DenseFFN(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        d, f = cfg["hidden"], cfg["ffn"]
        self.p = f"layer{layer}.ffn"
        self.split = bool(cfg.get("torchtitan"))
        if self.split:  # torchtitan's w1 (gate) and w3 (up): the graph's gate_proj and up_proj (fused_ops.gate_up apart)
            self.w1 = nn.Linear(d, f, bias=False)
            self.w3 = nn.Linear(d, f, bias=False)
        else:
            self.up_proj = nn.Linear(d, 2 * f, bias=False)  # gate and up fused, as the graph's up_proj
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        if self.split:
            g = op_range(self.p + ".gate_proj", self.w1, x)
            u = op_range(self.p + ".up_proj", self.w3, x)
            a = op_range(self.p + ".act", lambda g, u: F.silu(g) * u, g, u)
        else:
            u = op_range(self.p + ".up_proj", self.up_proj, x)
            a = op_range(self.p + ".act", swiglu, u)
        return op_range(self.p + ".down_proj", self.down_proj, a)


class MoE(nn.Module):
    """Router, permute, dispatch (all_to_all_single over the EP group), grouped GEMMs
    (torch._grouped_mm), combine, unpermute: torchtitan's MoE without its load-balancing extras."""

    def __init__(self, cfg, layer, ep_group):
        super().__init__()
        d, e, f = cfg["hidden"], cfg["experts"], cfg["expert_ffn"]
        self.ep = dist.get_world_size(ep_group) if ep_group is not None else 1
        self.group = ep_group
        self.e, self.top_k, self.p = e, cfg["top_k"], f"layer{layer}.moe"
        self.local = e // self.ep
        self.router = nn.Linear(d, e, bias=False)
        # [experts, out, in], used transposed (column-major), as torchtitan's GroupedExperts
        self.w_up = nn.Parameter(torch.empty(self.local, 2 * f, d).normal_(std=d ** -0.5))
        self.w_down = nn.Parameter(torch.empty(self.local, d, f).normal_(std=f ** -0.5))

    def _route(self, x):
        scores = F.softmax(self.router(x).float(), dim=-1)
        w, idx = torch.topk(scores, self.top_k, dim=-1)
        return w / w.sum(-1, keepdim=True), idx

    def _grouped(self, x, w, offs):
        global _grouped_mm_ok
        w = w.to(x.dtype).transpose(-2, -1)
        if _grouped_mm_ok:
            try:
                return torch._grouped_mm(x, w, offs=offs)
            except (RuntimeError, AttributeError) as e:  # no fused kernel here: one GEMM per expert
                print(f"torch._grouped_mm unavailable ({e}); a loop of GEMMs instead", flush=True)
                _grouped_mm_ok = False
        out, start = [], 0
        for i, end in enumerate(offs.tolist()):
            out.append(x[start:end] @ w[i])
            start = end
        return torch.cat(out)

    def forward(self, x):
        b, s, d = x.shape
        x = x.reshape(b * s, d)
        p = self.p
        weights, idx = op_range(p + ".router", self._route, x)
        routed = {}

        def permute(x):  # the routing bookkeeping (sort by expert, counts) is part of the permute
            flat = idx.flatten()
            routed["order"] = torch.argsort(flat, stable=True)
            routed["counts"] = torch.bincount(flat, minlength=self.e)
            return x.index_select(0, routed["order"] // self.top_k)

        permuted = op_range(p + ".permute", permute, x)
        order, counts = routed["order"], routed["counts"]
        if self.ep > 1:
            send = counts.view(self.ep, self.local).sum(1)
            recv_counts = torch.empty_like(counts)
            dist.all_to_all_single(recv_counts, counts, group=self.group)
            recv = recv_counts.view(self.ep, self.local).sum(1)
            in_splits, out_splits = send.tolist(), recv.tolist()
            permuted = op_range(p + ".dispatch", lambda t: _AllToAll.apply(t, out_splits, in_splits, self.group),
                                permuted)
            # tokens arrive by source rank, then expert: regroup by local expert
            by_src = recv_counts.view(self.ep, self.local)
            local_counts = by_src.sum(0)
            src_expert = torch.arange(self.local, device=x.device).repeat(self.ep).repeat_interleave(by_src.flatten())
            regroup = torch.argsort(src_expert, stable=True)
            permuted = permuted.index_select(0, regroup)
        else:
            local_counts = counts
        offs = torch.cumsum(local_counts, 0).to(torch.int32)
        up = op_range(p + ".experts.up_proj", lambda t: self._grouped(t, self.w_up, offs), permuted)
        act = op_range(p + ".experts.act", swiglu, up)
        down = op_range(p + ".experts.down_proj", lambda t: self._grouped(t, self.w_down, offs), act)
        if self.ep > 1:
            down = down.index_select(0, torch.argsort(regroup))
            down = op_range(p + ".combine", lambda t: _AllToAll.apply(t, in_splits, out_splits, self.group), down)

        def unpermute(down, weights):
            out = torch.zeros(b * s * self.top_k, d, device=x.device, dtype=down.dtype)
            out = out.index_copy(0, order, down)
            return (out.view(b * s, self.top_k, d) * weights.to(down.dtype).unsqueeze(-1)).sum(1)

        y = op_range(p + ".unpermute", unpermute, down, weights)
        return y.view(b, s, d)


_grouped_mm_ok = hasattr(torch, "_grouped_mm")


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.splits, ctx.group = (in_splits, out_splits), group
        out = x.new_empty(sum(out_splits), x.shape[1])
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        out_splits, in_splits = ctx.splits
        out = g.new_empty(sum(out_splits), g.shape[1])
        dist.all_to_all_single(out, g.contiguous(), out_splits, in_splits, group=ctx.group)
        return out, None, None, None


class Block(nn.Module):
    def __init__(self, cfg, layer, ep_group, recompute=False):
        super().__init__()
        d = cfg["hidden"]
        self.p = f"layer{layer}"
        self.recompute = recompute
        self.attn_norm = rms_norm(d)
        self.attn = Attention(cfg, layer)
        self.ffn_norm = rms_norm(d)
        self.ffn = MoE(cfg, layer, ep_group) if cfg["experts"] else DenseFFN(cfg, layer)

    def forward(self, h, cos, sin):
        if not self.recompute:
            return self._forward(h, cos, sin)
        # Full recompute as torchtitan's full activation checkpointing runs it (non-reentrant
        # checkpoint of each layer inside its FSDP unit, no RNG state kept): only the layer's inputs
        # are saved and its whole forward reruns, in the same ranges, before its backward. Early stop
        # is off so that the rerun goes to the layer's last op, as the graph's recompute ops do (with
        # it on, PyTorch stops after the last op whose saved tensors backward needs).
        with set_checkpoint_early_stop(False):
            return checkpoint(self._forward, h, cos, sin, use_reentrant=False, preserve_rng_state=False)

    def _forward(self, h, cos, sin):
        p = self.p
        y = self.attn(op_range(p + ".attn_norm", self.attn_norm, h), cos, sin)
        h = op_range(p + ".attn_residual_add", torch.add, h, y)
        y = self.ffn(op_range(p + ".ffn_norm", self.ffn_norm, h))
        return op_range(p + ".ffn_residual_add", torch.add, h, y)


class Model(nn.Module):
    def __init__(self, cfg, ep_group, recompute=False):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg["vocab"], cfg["hidden"])
        self.layers = nn.ModuleList(Block(cfg, i + 1, ep_group, recompute) for i in range(cfg["layers"]))
        self.final_norm = rms_norm(cfg["hidden"])
        self.lm_head = nn.Linear(cfg["hidden"], cfg["vocab"], bias=False)

    def forward(self, tokens, labels, cos, sin):
        h = op_range("embedding.embedding", self.embedding, tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        h = op_range("head.final_norm", self.final_norm, h)
        logits = op_range("lm_head", self.lm_head, h)
        return op_range("loss.cross_entropy",
                        lambda z: F.cross_entropy(z.flatten(0, 1).float(), labels.flatten()), logits)


# --- one configuration ----------------------------------------------------------------------------

def run_config(args, spec, rank, world, device, ep_group):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    fields = spec.split(":")
    if len(fields) not in (3, 4) or (len(fields) == 4 and fields[3] not in ("none", "full")):
        raise SystemExit(f"--config {spec}: expected MODEL:SEQ:MICRO_BATCHES[:none|full]")
    name, seq, micro = fields[0], int(fields[1]), int(fields[2])
    recompute = len(fields) == 4 and fields[3] == "full"
    cfg = MODELS[name]
    # What an earlier configuration of this process left allocated (0 when it was all freed): the
    # peak below counts it too.
    allocated_at_start = torch.cuda.memory_allocated(device)
    torch.manual_seed(1234)
    with torch.device(device):
        model = Model(cfg, ep_group, recompute)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if args.compile:  # torchtitan's order: each transformer block compiled whole, then sharded
        for i, block in enumerate(model.layers):
            model.layers[i] = torch.compile(block, fullgraph=True)
    for block in model.layers:  # one FSDP unit per layer, the graph's units (embedding, layers, head)
        # With experts split over the EP group (all ranks here) their weights are not FSDP-sharded
        # too (expert data parallelism of degree world / ep = 1).
        inner = getattr(block, "_orig_mod", block)
        ignored = {inner.ffn.w_up, inner.ffn.w_down} if cfg["experts"] and world > 1 else None
        fully_shard(block, mp_policy=mp, reshard_after_forward=True, ignored_params=ignored)
    # The embedding and the head (final norm + output projection) are units of their own, as
    # torchtitan wraps them and as the scenario's graph has them (embedding, layers, head).
    fully_shard(model.embedding, mp_policy=mp, reshard_after_forward=True)
    fully_shard([model.final_norm, model.lm_head], mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mp_policy=mp, reshard_after_forward=True)
    # FSDP2's parameters are DTensors; experts left out of FSDP (EP > 1) are plain tensors, which a
    # foreach AdamW cannot mix with them: one optimizer per kind, stepped together.
    from torch.distributed.tensor import DTensor
    params = list(model.parameters())
    sharded = [p for p in params if isinstance(p, DTensor)]
    plain = [p for p in params if not isinstance(p, DTensor)]
    opts = [torch.optim.AdamW(group, lr=1e-4, foreach=True) for group in (sharded, plain) if group]
    cos, sin = rope_tables(seq, cfg["head_dim"], device)
    gen = torch.Generator(device=device).manual_seed(rank)
    batches = [torch.randint(0, cfg["vocab"], (1, seq + 1), device=device, generator=gen) for _ in range(micro)]

    def step():
        for mb, t in enumerate(batches):
            loss = model(t[:, :-1], t[:, 1:], cos, sin)
            loss.backward()
        with record_function("optimizer"):
            for opt in opts:
                opt.step()
                opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()  # the step ends on the host when the GPU is done, as with loss.item()

    unprofiled = []
    for _ in range(args.warmup):
        start = time.perf_counter()
        step()
        unprofiled.append(time.perf_counter() - start)
    torch.cuda.reset_peak_memory_stats()
    tag = (f"{name}-s{seq}-mb{micro}" + ("-full" if recompute else "") + ("-compiled" if args.compile else "")
           + ("-composite-norm" if _composite_norm else ""))
    path = os.path.join(args.out, f"{tag}.rank{rank}.json")
    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=args.memory,
                 record_shapes=False, schedule=schedule(wait=0, warmup=1, active=args.steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(1 + args.steps):
            start = time.perf_counter()
            step()
            walls.append(time.perf_counter() - start)
            prof.step()
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(path)
    peak = torch.cuda.max_memory_allocated()
    summary = {"config": tag, "rank": rank, "world": world, "device": torch.cuda.get_device_name(device),
               "torch": torch.__version__, "seq": seq, "micro_batches": micro,
               "recompute": "full" if recompute else "none", "compiled": args.compile, "traced_steps": args.steps,
               "step_wall_s": walls[1:], "unprofiled_step_wall_s": unprofiled[1:],
               "peak_allocated_bytes": peak, "allocated_at_start_bytes": allocated_at_start,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(os.path.join(args.out, f"{tag}.rank{rank}.txt"), "w") as f:
        json.dump(summary, f, indent=1)
    if rank == 0:
        print(json.dumps(summary), flush=True)
    # The model, its FSDP2 hooks and the optimizers hold each other in reference cycles: collect
    # them, or the next configuration's peak counts this one's state (traces before 2026-12-02
    # 16:00 UTC: every configuration after the first of a process).
    del model, opts, step, batches, prof
    gc.collect()
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", action="append", required=True, help="MODEL:SEQ:MICRO_BATCHES[:none|full], repeatable")
    ap.add_argument("--warmup", type=int, default=3, help="untraced steps first (the last ones timed without the profiler)")
    ap.add_argument("--steps", type=int, default=2, help="traced steps (after one profiler warm-up step)")
    ap.add_argument("--no-memory", dest="memory", action="store_false", help="leave out memory events")
    ap.add_argument("--compile", action="store_true",
                    help="each layer under torch.compile (fullgraph), as torchtitan's compile; no op ranges "
                         "(Inductor fuses across ops): the trace's kernels only, for step and kernel-class totals")
    ap.add_argument("--rms-norm", choices=("kernel", "composite"), default="kernel",
                    help="nn.RMSNorm (ATen's fused kernel since PyTorch 2.8), or the composite form of 2.4-2.7")
    args = ap.parse_args()
    global _ranges_on, _composite_norm
    _ranges_on = not args.compile
    _composite_norm = args.rms_norm == "composite"
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    ep_group = dist.group.WORLD if world > 1 else None
    for spec in args.config:
        run_config(args, spec, rank, world, device, ep_group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
