#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The numbers of docs/sweep.md's k3-sweep paragraph, from the binary: runs `moesim sweep k3-sweep`
and writes the block between the page's `<!-- sweep-page:begin -->` and `<!-- sweep-page:end -->`
markers. With --check, exits 1 when the committed block differs from what the binary gives.

usage: tools/sweep_page.py MOESIM [--check] [--threads N]
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "sweep.md")
BEGIN, END = "<!-- sweep-page:begin -->", "<!-- sweep-page:end -->"


def describe(config):
    """A plan in the words of the page: FSDP/HSDP split, EP, TP/CP/PP when used, memory knobs."""
    fsdp = config["/parallel/fsdp"]
    parts = [f"HSDP {fsdp['shard']} x {fsdp['replicate']}" if fsdp["replicate"] > 1 else f"FSDP {fsdp['shard']}",
             f"EP {config['/parallel/ep']}"]
    for key, name in (("/parallel/tp", "TP"), ("/parallel/pp", "PP")):
        degree = config[key]["degree" if key == "/parallel/tp" else "stages"]
        if degree > 1:
            parts.append(f"{name} {degree}")
    if config["/parallel/cp"] > 1:
        parts.append(f"CP {config['/parallel/cp']}")
    parts.append(f"{config['/recompute/policy']} recompute")
    parts.append("swap" if config["/swap/enabled"] else "no swap")
    parts.append(f"{config['/loss']['kind']} loss")
    if config["/batch/micro_batch_size"] > 1:
        parts.append(f"micro-batch {config['/batch/micro_batch_size']}")
    if config["/routing"]["distribution"] != "uniform":
        parts.append(f"{config['/routing']['distribution']} routing")
    return ", ".join(parts)


def outcome(r):
    return f"{r['step_time_s']:.1f} s per step, {r['peak_hbm_bytes'] / 1e9:.0f} GB"


def block(report, rows):
    simulated = [r for r in rows if r["status"] not in ("rejected", "pruned")]
    pipelined = [r for r in simulated if json.loads(r["/parallel/pp"])["stages"] > 1]
    fit = [r for r in simulated if r["fits"] == "true"]
    selective_fit = [r for r in fit if json.loads(r["/recompute/policy"]) == "selective"]
    front = sorted(report["pareto"], key=lambda r: r["step_time_s"])
    best_pipelined = min((r for r in fit if json.loads(r["/parallel/pp"])["stages"] > 1),
                         key=lambda r: float(r["step_time_s"]), default=None)
    by_path = ", ".join(f"{n:,} at `{p}`" for p, n in sorted(report["rejected_by_path"].items(), key=lambda x: -x[1]))
    lines = [
        f"{report['num_configs_total']:,} configurations: {report['num_configs_rejected']:,} rejected ({by_path}), "
        f"{report['num_configs_pruned']:,} pruned, {report['num_configs_simulated']:,} simulated "
        f"({len(pipelined):,} of them pipelined), {report['num_configs_fit']:,} fit "
        f"({len(selective_fit):,} of them with selective recompute).",
        f"The front has {len(front)} plans, from {describe(front[0]['config'])} ({outcome(front[0])}) "
        f"to {describe(front[-1]['config'])} ({outcome(front[-1])}).",
    ]
    if best_pipelined is not None:
        config = {path: json.loads(best_pipelined[path]) for path in report["pareto"][0]["config"]}
        lines.append(f"The fastest pipelined plan that fits, {describe(config)}, takes "
                     f"{float(best_pipelined['step_time_s']):.1f} s per step.")
    else:
        lines.append("No pipelined plan fits.")
    assert len(simulated) == report["num_configs_simulated"], "the CSV and the report disagree"
    return "\n".join(lines)


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    moesim, check = args[0], "--check" in args
    threads = args[args.index("--threads") + 1] if "--threads" in args else "2"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "all.csv")
        r = subprocess.run([moesim, "sweep", "k3-sweep", "--json", "--threads", threads, "--csv", out],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            sys.exit(f"sweep failed ({r.returncode}): {r.stderr}")
        with open(out, newline="") as f:
            rows = list(csv.DictReader(f))
    text = block(json.loads(r.stdout), rows)
    with open(PAGE) as f:
        page = f.read()
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    old = page[start:end].strip("\n")
    if check:
        if old != text:
            print(f"docs/sweep.md is stale; run tools/sweep_page.py {moesim}\n--- committed\n{old}\n--- binary\n{text}")
            sys.exit(1)
        print("docs/sweep.md matches the binary")
        return
    with open(PAGE, "w") as f:
        f.write(page[:start] + "\n" + text + "\n" + page[end:])


if __name__ == "__main__":
    main()
