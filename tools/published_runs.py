#!/usr/bin/env python3
"""Validation against published training runs: simulate every case of tests/validation/cases.json and
compare the predicted step time with the published one.

    tools/published_runs.py MOESIM [--write docs/validation/published.md]
                                   [--check tests/validation/ratchet.json]
                                   [--record tests/validation/ratchet.json]

Prints a table (id | group | split | published s | predicted s | error %, error = (pred - pub) / pub)
and the mean absolute percentage error (MAPE) per group, per group x split and overall; then, for the
cases that also publish a peak device memory (`published.memory`), predicted against published memory
and its MAPE (group "memory"); then the per-layer checks of tests/validation/layers.json (tools/layer_checks.py:
a layer's or pipeline stage's forward and backward against published layer times) and their MAPE (group "layer").
--write   writes the markdown page (reproducible: no date, the moesim version string).
--record  writes {"dense": MAPE, "moe": MAPE, "memory": MAPE, "layer": MAPE} to the ratchet file.
--check   exits 1 when a group's MAPE (or the memory MAPE) exceeds the ratchet by more than 2 points, or when the page
          (--page, default docs/validation/published.md) differs from what --write would produce.
A case whose simulation fails is an error (exit 1) that names it. Every case is simulated with
`MOESIM simulate SCENARIO --json --distinct-ranks` (exact for equal loads; docs/performance.md).
Python 3 standard library only.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

import layer_checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(ROOT, "tests", "validation", "cases.json")
LAYER_CASES = os.path.join(ROOT, "tests", "validation", "layers.json")
EXCLUDED = os.path.join(ROOT, "tests", "validation", "excluded.json")
PAGE = os.path.join(ROOT, "docs", "validation", "published.md")
GROUPS = ("dense", "moe")
RATCHETED = GROUPS + ("memory", "layer")
GIB = 2.0 ** 30
# What a published memory figure counts, and the part of moesim's peak HBM it excludes:
# allocator_reserved is PyTorch's caching-allocator peak (torch.cuda.memory_stats()
# ['reserved_bytes.all.peak']), which leaves out what the CUDA runtime, the libraries and NCCL
# allocate outside it - moesim's `runtime` part (memory.runtime_reserved + comm_buffer_per_group).
MEMORY_MEASURES = {"allocator_reserved": ("runtime",)}
SPLITS = ("fit", "holdout")
RATCHET_SLACK = 2.0  # percentage points
# The step-time targets of the validation work (MAPE per group): what a planner needs the suite to show.
TARGETS = {"dense": 10.0, "moe": 15.0}
SIM_FLAGS = ["--json", "--distinct-ranks"]


class Failure(Exception):
    pass


def load_cases(path):
    with open(path) as f:
        cases = json.load(f)
    seen = set()
    for c in cases:
        for key in ("id", "group", "split", "scenario", "published", "source", "confidence", "assumptions", "deviations"):
            if key not in c:
                raise Failure(f"{path}: case {c.get('id', '?')} has no '{key}'")
        if c["id"] in seen:
            raise Failure(f"{path}: duplicate case id {c['id']}")
        seen.add(c["id"])
        if c["group"] not in GROUPS or c["split"] not in SPLITS:
            raise Failure(f"{path}: case {c['id']}: bad group or split")
        if not c["published"].get("step_time_s", 0) > 0:
            raise Failure(f"{path}: case {c['id']}: no published step time")
        mem = c["published"].get("memory")
        if mem is not None:
            if not mem.get("value_gib", 0) > 0 or mem.get("measures") not in MEMORY_MEASURES or not mem.get("metric"):
                raise Failure(f"{path}: case {c['id']}: published.memory needs value_gib > 0, metric and measures "
                              f"(one of {', '.join(MEMORY_MEASURES)})")
    return cases


def simulate(moesim, scenario):
    proc = subprocess.run([moesim, "simulate", scenario] + SIM_FLAGS, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [f"exit {proc.returncode}"]
    try:
        return json.loads(proc.stdout), None
    except json.JSONDecodeError as e:
        return None, [f"bad JSON: {e}"]


def run_all(moesim, cases, pool, base):
    futures = [pool.submit(simulate, moesim, os.path.join(base, c["scenario"])) for c in cases]
    outcomes = [f.result() for f in futures]
    results, failures = [], []
    for c, (out, err) in zip(cases, outcomes):
        if out is None:
            failures.append(f"{c['id']}: simulation failed: {' '.join(err)}")
            continue
        pub = c["published"]["step_time_s"]
        pred = out["step_time_s"]
        b = out["breakdown_s"]
        memory = None
        if "memory" in c["published"]:
            m = c["published"]["memory"]
            excluded_parts = MEMORY_MEASURES[m["measures"]]
            at_peak = out["memory_at_peak_bytes"]
            pred_gib = (out["peak_hbm_bytes"] - sum(at_peak.get(k, 0.0) for k in excluded_parts)) / GIB
            memory = {"published": m["value_gib"], "predicted": pred_gib,
                      "error": (pred_gib - m["value_gib"]) / m["value_gib"],
                      "capacity": out["hbm_capacity_bytes"] / GIB}
        results.append({
            "case": c,
            "published": pub,
            "predicted": pred,
            "error": (pred - pub) / pub,
            "compute": b["compute_stream"],
            "exposed_comm": b["exposed_comm"],
            "bubble": b["bubble"],
            "fits": out.get("fits", True),
            "memory": memory,
            "parts": list(out["memory_at_peak_bytes"].items()),
            "sim_wall_s": out.get("sim_wall_s", 0.0),
        })
    return results, failures


def mape(rows):
    return 100.0 * sum(abs(r["error"]) for r in rows) / len(rows) if rows else None


def memory_rows(results):
    return [dict(r["memory"], case=r["case"]) for r in results if r["memory"] is not None]


def summary(results, layer_rows):
    s = {"all": mape(results), "memory": mape(memory_rows(results)), "layer": mape(layer_rows)}
    for g in GROUPS:
        s[g] = mape([r for r in results if r["case"]["group"] == g])
        for sp in SPLITS:
            s[f"{g}/{sp}"] = mape([r for r in results if r["case"]["group"] == g and r["case"]["split"] == sp])
    return s


def count(results, group=None, split=None):
    return sum(1 for r in results if (group is None or r["case"]["group"] == group)
               and (split is None or r["case"]["split"] == split))


def fmt_pct(v):
    return "-" if v is None else f"{v:.1f}%"


def fmt_s(v):
    return f"{v:.3f}" if v < 100 else f"{v:.1f}"


def text_table(results, s, layer_rows):
    w = max(len(r["case"]["id"]) for r in results)
    lines = [f"{'id':<{w}}  {'group':<5}  {'split':<7}  {'published s':>11}  {'predicted s':>11}  {'error %':>8}"]
    for r in results:
        c = r["case"]
        lines.append(f"{c['id']:<{w}}  {c['group']:<5}  {c['split']:<7}  {fmt_s(r['published']):>11}  "
                     f"{fmt_s(r['predicted']):>11}  {100 * r['error']:>+8.1f}")
    lines.append("")
    lines.append("MAPE (mean absolute percentage error of the step time):")
    for g in GROUPS:
        lines.append(f"  {g:<5}  {fmt_pct(s[g]):>7}  ({count(results, g)} cases)   "
                     + "   ".join(f"{sp} {fmt_pct(s[f'{g}/{sp}'])} ({count(results, g, sp)})" for sp in SPLITS))
    lines.append(f"  all    {fmt_pct(s['all']):>7}  ({len(results)} cases)")
    mem = memory_rows(results)
    if mem:
        lines.append("")
        lines.append(f"{'id':<{w}}  {'published GiB':>13}  {'predicted GiB':>13}  {'error %':>8}")
        for m in mem:
            lines.append(f"{m['case']['id']:<{w}}  {m['published']:>13.1f}  {m['predicted']:>13.1f}  {100 * m['error']:>+8.1f}")
        lines.append(f"MAPE of the peak memory: {fmt_pct(s['memory'])} ({len(mem)} cases)")
    if layer_rows:
        lw = max(len(r["case"]["id"]) for r in layer_rows)
        lines.append("")
        lines.append(f"{'per-layer case':<{lw}}  {'measure':<10}  {'published ms':>12}  {'predicted ms':>12}  {'error %':>8}")
        for r in layer_rows:
            lines.append(f"{r['case']['id']:<{lw}}  {r['measure']:<10}  {r['published']:>12.3f}  {r['predicted']:>12.3f}  "
                         f"{100 * r['error']:>+8.1f}")
        lines.append(f"MAPE of the per-layer measures: {fmt_pct(s['layer'])} ({len(layer_rows)} measures)")
    return "\n".join(lines) + "\n"


def md_escape(t):
    return t.replace("|", "\\|")


EXPRESSED = """\
Each case is a published training run with its step time (one optimizer step of the global batch) and a
scenario file that states the published plan in moesim's terms (tests/validation/scenarios/; the
conventions are those of docs/inputs.md). The published step time is either printed by the source
(`reported`), tokens per step divided by a published tokens-per-second figure (`exact`), or a published
TFLOP/s or MFU divided into a FLOP count the source does not print (`flops`: the conversion is in
cases.json). Nothing in the simulator or its inputs is fitted to these cases; the split into `fit` and
`holdout` (alternating by id within each group, so that a source with several cases has some in each) is
for future fitting, and both halves are reported.

How plans are expressed:

- Megatron data parallelism with the distributed optimizer: `fsdp.shard` = DP with `zero_stage` 1;
  DeepSpeed ZeRO-1 and BLOOM's BF16_Optimizer likewise; FSDP2 / torchtitan and Megatron-FSDP:
  `zero_stage` 3; Llama 3's FSDP variant (optimizer states and gradients sharded): `zero_stage` 2.
- Tensor parallelism with sequence parallelism where the framework uses it (Megatron with TP,
  torchtitan's TP plan); expert tensor parallelism (MoE parallel folding) in
  `/parallel/expert_tensor_parallel`, EP carved out of shard x cp x tp / etp. TP communication
  overlap where the source turns it on: `tp.comm_overlap` chunked for Megatron's --tp-comm-overlap
  (Transformer Engine userbuffers) and torchtitan's AsyncTP, fused for MegaScale's. A projection of a
  sequence-parallel gathered input keeps the shard and gathers it again for its weight gradient in
  Megatron-LM and Transformer Engine (`tp.sp_backward_input` gather_again, the default) and keeps the
  gathered input in torchtitan (keep_gathered).
- Pipelines: 1F1B or interleaved 1F1B with the published virtual stages; uneven layer layouts in
  `pp.layers_per_chunk`, as the framework splits them (torchtitan's generated split points, Megatron's
  --pipeline-model-parallel-layout or its embedding/loss accounting).
- Recompute: none, selective (torchtitan's per-op SAC, Megatron's selective and --recompute-modules) or
  full. FP8 runs (Float8, FP8 blockwise, MXFP8) use `precision.compute` fp8 with the casts of their
  stack (docs/modelling.md#fp8-casts): torchao's Float8 `precision.quantization` tensorwise;
  Transformer Engine under Megatron (delayed scaling, blockwise, MXFP8) one_pass with
  `cache_quantized_weights`; fp8 parameter gathers `precision.params` fp8; BF16 optimizer moments
  `precision.optimizer_states` bf16.
- MoE routing is uniform (one sampled step, seed 1) for forced-balance, dropless and token-drop runs
  alike.
- Attention kernel: the hardware file's default (its best current kernel: FlashAttention-3 on H100)
  unless the source's stack is known to have run another; torchtitan's end-of-2024 H100 runs state
  `fused_ops.attention_kernel` flash2 (PyTorch SDPA's flash backend, its default on H100 then).
- GPU and cluster variants: the hardware file of the part and network the source names where one
  exists (h100-hbm2e-500w for Meta's 500 W, HBM2e Grand Teton H100s; a100-80g-opa for BLOOM's
  Jean Zay nodes, 4 x 100 Gb/s Omni-Path per 8 A100s).
- Dropout: the run's own settings (Megatron-LM's default 0.1 where its script sets none); attention
  dropout costs time and memory only without flash attention.
- Micro-batch sizes and other plan fields the source does not state are listed under each case's
  `assumptions`; plan details the scenario schema cannot express (dispatchers such as DeepEP/HybridEP,
  other communication overlaps, CUDA graphs, torch.compile, GPU variants without a hardware file, FP8 on the
  attention core) under its `deviations`.
"""


MEMORY_TEXT = """\
Cases whose source also prints a peak device memory. torchtitan logs the caching allocator's peak
reserved bytes (`torch.cuda.memory_stats()['reserved_bytes.all.peak']`, the maximum over the GPUs), which
leaves out the CUDA context, library handles and NCCL's own buffers; the prediction compared is
therefore moesim's peak HBM of the fullest rank without its `runtime` part (memory.runtime_reserved and the
communicators' buffers): persistent state, transient tensors and the allocator reserve of the simulated
placement (docs/modelling.md#memory). Error = (predicted - published) / published."""


def page(results, s, version, excluded, layer_rows):
    out = []
    out.append("# Validation against published training runs")
    out.append("")
    out.append("<!-- Generated by tools/published_runs.py from tests/validation/cases.json; do not edit. -->")
    out.append("")
    out.append(f"Simulator: `{version}`. Regenerate with `tools/published_runs.py build/moesim --write "
               "docs/validation/published.md`; `--check tests/validation/ratchet.json` fails when a group's MAPE "
               f"rises more than {RATCHET_SLACK:g} points above the ratchet or when this page is stale.")
    out.append("")
    out.append("Error = (predicted - published) / published; MAPE = mean of |error|.")
    out.append("")
    out.append("| group | cases | MAPE | target | fit | holdout |")
    out.append("|---|---|---|---|---|---|")
    for g in GROUPS:
        met = "no cases" if s[g] is None else "met" if s[g] <= TARGETS[g] else "not met"
        out.append(f"| {g} | {count(results, g)} | {fmt_pct(s[g])} | <= {TARGETS[g]:g}% ({met}) | "
                   + " | ".join(f"{fmt_pct(s[f'{g}/{sp}'])} ({count(results, g, sp)})" for sp in SPLITS) + " |")
    out.append(f"| all | {len(results)} | {fmt_pct(s['all'])} | - | "
               + " | ".join(f"{fmt_pct(mape([r for r in results if r['case']['split'] == sp]))} ({count(results, split=sp)})"
                            for sp in SPLITS) + " |")
    out.append("")
    if layer_rows:
        out.append(f"Per-layer checks (a layer's or pipeline stage's forward and backward against published layer times): "
                   f"MAPE {fmt_pct(s['layer'])} over {len(layer_rows)} measures, [below](#per-layer-checks).")
        out.append("")
    out.append("What moved each group's recorded MAPE, with its date, is the ratchet history in tests/validation/README.md.")
    out.append("")
    out.append("## Cases")
    out.append("")
    out.append("Compute, exposed communication and pipeline bubble are the simulator's breakdown of the step-"
               "ending rank (`breakdown_s`: compute stream busy, waiting for collectives, pipeline bubble); kind and confidence as in "
               "cases.json.")
    out.append("")
    out.append("| id | group | split | kind | conf. | published s | predicted s | error % | compute s | exposed comm s | bubble s |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        c = r["case"]
        out.append(f"| [{c['id']}]({c['source']['url']}) | {c['group']} | {c['split']} | {c['published']['kind']} | "
                   f"{c['confidence']} | {fmt_s(r['published'])} | {fmt_s(r['predicted'])} | {100 * r['error']:+.1f} | "
                   f"{fmt_s(r['compute'])} | {fmt_s(r['exposed_comm'])} | {fmt_s(r['bubble'])} |")
    out.append("")
    nofit = [r["case"]["id"] for r in results if not r["fits"]]
    if nofit:
        out.append("Predicted not to fit in HBM (the step time is still simulated): " + ", ".join(nofit) + ".")
        out.append("")
    mem = memory_rows(results)
    if mem:
        out.append("## Peak memory")
        out.append("")
        out.append(MEMORY_TEXT)
        out.append("")
        out.append(f"MAPE of the peak memory: **{fmt_pct(s['memory'])}** ({len(mem)} cases).")
        out.append("")
        out.append("| id | published GiB | predicted GiB | error % | HBM GiB | moesim's parts at its peak (GiB) |")
        out.append("|---|---|---|---|---|---|")
        for m, r in zip(mem, [r for r in results if r["memory"] is not None]):
            parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in r["parts"] if v / GIB >= 0.05)
            out.append(f"| {m['case']['id']} | {m['published']:.1f} | {m['predicted']:.1f} | {100 * m['error']:+.1f} | "
                       f"{m['capacity']:.1f} | {parts} |")
        out.append("")
    if layer_rows:
        out.extend(layer_checks.section(layer_rows, s["layer"], fmt_pct))
    out.append("## How cases are expressed")
    out.append("")
    out.append(EXPRESSED)
    out.append("## Deviations")
    out.append("")
    out.append("What the scenario could not express, each with the cases it applies to (cases.json has them per "
               "case, with the assumptions).")
    out.append("")
    devs = {}
    for r in results:
        for d in r["case"]["deviations"]:
            devs.setdefault(d, []).append(r["case"]["id"])
    for d, ids in sorted(devs.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out.append(f"- {md_escape(d)} ({len(ids)}: {', '.join(ids)})")
    out.append("")
    out.append("## Cases not in the suite")
    out.append("")
    out.append("Published runs researched but not simulated, with the reason (tests/validation/excluded.json):")
    out.append("")
    out.append("| id | group | published s | source | reason |")
    out.append("|---|---|---|---|---|")
    for e in excluded:
        st = e.get("published_step_time_s")
        out.append(f"| {e['id']} | {e['group']} | {'-' if st is None else fmt_s(st)} | "
                   f"[{md_escape(e['source']['title'])}]({e['source']['url']}) | {md_escape(e['reason'])} |")
    out.append("")
    out.append("Excluded by policy and not collected: the Megatron-LM SC'21 paper (arXiv 2104.04473) and "
               "'Reducing Activation Recomputation' (arXiv 2205.05198) tables, the NeMo Automodel and "
               "Megatron-Bridge performance pages, and DeepSeek-V3's H800 throughput.")
    out.append("")
    return "\n".join(out)


def moesim_version(moesim):
    proc = subprocess.run([moesim, "--version"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failure(f"{moesim} --version failed")
    return proc.stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("moesim", help="the moesim binary")
    ap.add_argument("--write", metavar="PAGE", help="write the markdown page")
    ap.add_argument("--check", metavar="RATCHET", help="fail on a MAPE above the ratchet + 2 points or a stale page")
    ap.add_argument("--record", metavar="RATCHET", help="write the per-group MAPE to the ratchet")
    ap.add_argument("--page", default=PAGE, help="the page --check compares (default docs/validation/published.md)")
    ap.add_argument("--cases", default=CASES, help=argparse.SUPPRESS)
    ap.add_argument("--layer-cases", default=LAYER_CASES, help=argparse.SUPPRESS)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="simulations run at once")
    args = ap.parse_args()
    cases_path = os.path.abspath(args.cases)
    try:
        moesim = os.path.abspath(args.moesim) if os.sep in args.moesim else args.moesim
        version = moesim_version(moesim)
        cases = load_cases(cases_path)
        with open(EXCLUDED) as f:
            excluded = json.load(f)
        layer_cases = layer_checks.load(args.layer_cases)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results, failures = run_all(moesim, cases, pool, os.path.dirname(cases_path))
            layer_rows = layer_checks.run(moesim, layer_cases, os.path.dirname(os.path.abspath(args.layer_cases)), pool)
        if failures:
            for msg in failures:
                print(f"published_runs: {msg}", file=sys.stderr)
            return 1
        s = summary(results, layer_rows)
        sys.stdout.write(text_table(results, s, layer_rows))
        print(f"published_runs: {len(results)} cases simulated in {sum(r['sim_wall_s'] for r in results):.1f} s "
              "(sum of sim_wall_s)", file=sys.stderr)
        text = page(results, s, version, excluded, layer_rows)
        if args.write:
            os.makedirs(os.path.dirname(os.path.abspath(args.write)), exist_ok=True)
            with open(args.write, "w") as f:
                f.write(text)
        if args.record:
            with open(args.record, "w") as f:
                json.dump({g: round(s[g], 2) for g in RATCHETED if s[g] is not None}, f, indent=2)
                f.write("\n")
        status = 0
        if args.check:
            with open(args.check) as f:
                ratchet = json.load(f)
            for g in RATCHETED:
                if s[g] is None:
                    continue
                if g not in ratchet:
                    print(f"published_runs: {args.check} has no '{g}'", file=sys.stderr)
                    status = 1
                elif s[g] > ratchet[g] + RATCHET_SLACK:
                    print(f"published_runs: {g} MAPE {s[g]:.2f}% exceeds the ratchet {ratchet[g]:.2f}% by more "
                          f"than {RATCHET_SLACK:g} points", file=sys.stderr)
                    status = 1
            try:
                with open(args.page) as f:
                    current = f.read()
            except FileNotFoundError:
                current = None
            if current != text:
                print(f"published_runs: {os.path.relpath(args.page)} is not what --write produces; regenerate it "
                      "with tools/published_runs.py MOESIM --write docs/validation/published.md", file=sys.stderr)
                status = 1
        return status
    except (Failure, layer_checks.LayerCaseError, OSError, json.JSONDecodeError) as e:
        print(f"published_runs: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
