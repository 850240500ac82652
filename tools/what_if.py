#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What-ifs on the embedded default: each variant is the default scenario with one field
changed, simulated with `moesim simulate --json`; and on a multi-supernode K3 plan (the default
spread over 7 supernodes, EP 896). Prints the Markdown tables of docs/what-if.md. --write puts them
in the page (replacing the tables that start with "| variant |" and "| multi-supernode variant |");
--check exits 1 when a table is not what the binary gives.

usage: tools/what_if.py [MOESIM] [--steps N] [--write | --check]
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "scenarios", "k3-lora-fsdp2-ep64.json")
PAGE = os.path.join(ROOT, "docs", "what-if.md")


def setp(path, value):
    def change(d):
        keys = path.strip("/").split("/")
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return change


VARIANTS = [
    ("default", "-", []),
    ("swap off", "`/swap/enabled` false", [setp("/swap/enabled", False)]),
    ("unfused DSA", "`/fused_ops/dsa` false", [setp("/fused_ops/dsa", False)]),
    ("unfused KDA", "`/fused_ops/kda` false", [setp("/fused_ops/kda", False)]),
    ("no overlap", "`/overlap/comm_compute` false", [setp("/overlap/comm_compute", False)]),
    ("skewed routing 0.5", "`/routing` skewed, Zipf 0.5", [setp("/routing/distribution", "skewed"), setp("/routing/skew", 0.5)]),
    ("skewed routing 1.0", "`/routing` skewed, Zipf 1.0", [setp("/routing/distribution", "skewed"), setp("/routing/skew", 1.0)]),
    ("EP16", "`/parallel/ep` 16", [setp("/parallel/ep", 16)]),
    ("EP32", "`/parallel/ep` 32", [setp("/parallel/ep", 32)]),
    ("EP128", "`/parallel/ep` 128", [setp("/parallel/ep", 128)]),
    ("PP2, 47/46 layers", "`/parallel/pp` 2 stages, FSDP 64",
     [setp("/parallel/fsdp/shard", 64), setp("/parallel/pp", {"stages": 2, "layers_per_chunk": [47, 46]})]),
    ("PP4, 24/23/23/23 layers", "`/parallel/pp` 4 stages, FSDP 32, EP32",
     [setp("/parallel/fsdp/shard", 32), setp("/parallel/ep", 32),
      setp("/parallel/pp", {"stages": 4, "layers_per_chunk": [24, 23, 23, 23]})]),
    ("PP4 interleaved, 3 chunks", "`/parallel/pp` 4 x 3 virtual, FSDP 32, EP32",
     [setp("/parallel/fsdp/shard", 32), setp("/parallel/ep", 32),
      setp("/parallel/pp", {"stages": 4, "schedule": "interleaved_1f1b", "virtual_stages": 3,
                            "layers_per_chunk": [8] * 9 + [7] * 3})]),
    ("PP4 ZB-H1, 24/23/23/23 layers", "`/parallel/pp` 4 stages zb_h1, FSDP 32, EP32",
     [setp("/parallel/fsdp/shard", 32), setp("/parallel/ep", 32),
      setp("/parallel/pp", {"stages": 4, "schedule": "zb_h1", "layers_per_chunk": [24, 23, 23, 23]})]),
    ("PP4 DualPipe, 24/23/23/23 layers", "`/parallel/pp` 4 stages dualpipe, FSDP 32, EP32",
     [setp("/parallel/fsdp/shard", 32), setp("/parallel/ep", 32),
      setp("/parallel/pp", {"stages": 4, "schedule": "dualpipe", "layers_per_chunk": [24, 23, 23, 23]})]),
    ("PP4 DualPipe without F&B overlap", "as above, `overlap_forward_backward` false",
     [setp("/parallel/fsdp/shard", 32), setp("/parallel/ep", 32),
      setp("/parallel/pp", {"stages": 4, "schedule": "dualpipe", "layers_per_chunk": [24, 23, 23, 23],
                            "overlap_forward_backward": False})]),
    ("gradients synced once", "`/parallel/fsdp/gradient_sync` last_micro_batch",
     [setp("/parallel/fsdp/gradient_sync", "last_micro_batch")]),
    ("CPU offload of the optimizer", "`/parallel/fsdp/offload` optimizer (ZeRO-Offload)",
     [setp("/parallel/fsdp/offload", "optimizer")]),
    ("CPU offload of parameters", "`/parallel/fsdp/offload` parameters (FSDP2 CPUOffloadPolicy)",
     [setp("/parallel/fsdp/offload", "parameters")]),
    ("local-first off", "`/overlap/moe_local_first` false", [setp("/overlap/moe_local_first", False)]),
    ("dispatch in 2 chunks", "`/overlap/moe_dispatch_chunks` 2", [setp("/overlap/moe_dispatch_chunks", 2)]),
    ("dispatch in 4 chunks", "`/overlap/moe_dispatch_chunks` 4", [setp("/overlap/moe_dispatch_chunks", 4)]),
    ("dispatch in 8 chunks", "`/overlap/moe_dispatch_chunks` 8", [setp("/overlap/moe_dispatch_chunks", 8)]),
    ("shared-expert overlap", "`/overlap/moe_shared_expert_overlap` true",
     [setp("/overlap/moe_shared_expert_overlap", True)]),
    ("shared-expert overlap, 4 chunks", "both of the above",
     [setp("/overlap/moe_shared_expert_overlap", True), setp("/overlap/moe_dispatch_chunks", 4)]),
    # Routing mechanisms. The EP group sits in one supernode, so node-limited routing has
    # no nodes to limit here; device-limited M = 1 is refused (14 experts per rank < top-16).
    ("device-limited M=2", "`/routing/devices_per_token` 2", [setp("/routing/devices_per_token", 2)]),
    ("device-limited M=4", "`/routing/devices_per_token` 4", [setp("/routing/devices_per_token", 4)]),
    ("device-limited M=8", "`/routing/devices_per_token` 8", [setp("/routing/devices_per_token", 8)]),
    ("capacity 1.0, drop", "`/routing/capacity_factor` 1.0", [setp("/routing/capacity_factor", 1.0)]),
    ("capacity 1.25, drop", "`/routing/capacity_factor` 1.25", [setp("/routing/capacity_factor", 1.25)]),
    ("capacity 1.0, pad", "`/routing/capacity_factor` 1.0, `capacity_policy` pad",
     [setp("/routing/capacity_factor", 1.0), setp("/routing/capacity_policy", "pad")]),
    ("capacity 1.25, pad", "`/routing/capacity_factor` 1.25, `capacity_policy` pad",
     [setp("/routing/capacity_factor", 1.25), setp("/routing/capacity_policy", "pad")]),
    ("skewed 1.0, capacity 1.25 drop", "`/routing` skewed, Zipf 1.0, `capacity_factor` 1.25",
     [setp("/routing/distribution", "skewed"), setp("/routing/skew", 1.0), setp("/routing/capacity_factor", 1.25)]),
    ("skewed 1.0, bias-balanced from the start", "`/routing` skewed, Zipf 1.0, `bias_update_speed` 0.01",
     [setp("/routing/distribution", "skewed"), setp("/routing/skew", 1.0), setp("/routing/bias_update_speed", 0.01)]),
    ("skewed 1.0, bias-balanced after 1000 steps", "as above, `bias_start_step` 1000",
     [setp("/routing/distribution", "skewed"), setp("/routing/skew", 1.0), setp("/routing/bias_update_speed", 0.01),
      setp("/routing/bias_start_step", 1000)]),
]

# A multi-supernode K3 plan: 7 supernodes (896 devices), one expert per rank (EP 896), the default's
# tokens per device. Its EP group crosses the scale-out network, where dispatch and routing limits
# matter; simulated with --distinct-ranks (a class of interchangeable ranks per representative).
MULTI = [
    setp("/name", "k3-lora-fsdp2-ep896-7sn"), setp("/num_devices", 896), setp("/batch/global_batch_size", 1792),
    setp("/parallel/fsdp/shard", 896), setp("/parallel/ep", 896),
]
MULTI_VARIANTS = [
    ("7 supernodes, direct dispatch", "-", []),
    ("hierarchical dispatch", "`/parallel/ep_dispatch` hierarchical", [setp("/parallel/ep_dispatch", "hierarchical")]),
    ("hierarchical, node-limited M=4", "as above, `/routing/nodes_per_token` 4",
     [setp("/parallel/ep_dispatch", "hierarchical"), setp("/routing/nodes_per_token", 4)]),
    ("hierarchical, node-limited M=2", "as above, `/routing/nodes_per_token` 2",
     [setp("/parallel/ep_dispatch", "hierarchical"), setp("/routing/nodes_per_token", 2)]),
    ("hierarchical, node-limited M=1", "as above, `/routing/nodes_per_token` 1",
     [setp("/parallel/ep_dispatch", "hierarchical"), setp("/routing/nodes_per_token", 1)]),
    ("direct, node-limited M=2", "`/routing/nodes_per_token` 2", [setp("/routing/nodes_per_token", 2)]),
]


def simulate(moesim, tmp, base, variants, flags):
    rows = []
    for name, field, changes in variants:
        scenario = copy.deepcopy(base)
        for change in changes:
            change(scenario)
        path = os.path.join(tmp, "variant.json")
        with open(path, "w") as f:
            json.dump(scenario, f)
        out = subprocess.run([moesim, "simulate", path, "--json"] + flags, capture_output=True, text=True, check=True)
        rows.append((name, field, json.loads(out.stdout)))
    return rows


def table_of(rows, first_column, versus):
    t0 = rows[0][2]["step_time_s"]
    table = [f"| {first_column} | field changed | step time | {versus} | MFU | peak HBM | peak DDR | exposed comm | "
             "exposed all-to-all | busiest EP rank | fits |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, (name, field, r) in enumerate(rows):
        t = r["step_time_s"]
        vs = "-" if i == 0 else f"{100 * (t / t0 - 1):+.1f}%"
        comm = r["breakdown_s"]["exposed_comm"]
        a2a = r["breakdown_s"]["exposed"].get("all_to_all", 0.0)
        load = r.get("ep_load_imbalance")
        busiest = f"{load['p50']:.2f}x" if load else "-"
        table.append(f"| {name} | {field} | {t:.2f} s | {vs} | {100 * r['mfu']:.1f}% | {r['peak_hbm_bytes'] / 1e9:.1f} GB | "
                     f"{r['peak_ddr_bytes'] / 1e9:.1f} GB | {comm:.2f} s | {a2a:.2f} s | {busiest} | "
                     f"{'yes' if r['fits'] else 'no'} |")
    return table


def span_of(lines, header_start):
    """The lines of the table whose header starts with header_start: [start, end)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def main():
    args = sys.argv[1:]
    steps = "2"
    if "--steps" in args:
        i = args.index("--steps")
        steps = args[i + 1]
        del args[i:i + 2]
    write, check = "--write" in args, "--check" in args
    args = [a for a in args if a not in ("--write", "--check")]
    moesim = args[0] if args else os.path.join(ROOT, "build", "moesim")
    with open(DEFAULT) as f:
        base = json.load(f)
    base["model"], base["hardware"] = "kimi-k3-dsa", "supernode-128"
    multi = copy.deepcopy(base)
    for change in MULTI:
        change(multi)
    with tempfile.TemporaryDirectory() as tmp:
        tables = [("| variant |", table_of(simulate(moesim, tmp, base, VARIANTS, ["--steps", steps]), "variant", "vs default")),
                  ("| multi-supernode variant |",
                   table_of(simulate(moesim, tmp, multi, MULTI_VARIANTS, ["--steps", steps, "--distinct-ranks"]),
                            "multi-supernode variant", "vs direct"))]
    if not (write or check):
        print("\n\n".join("\n".join(t) for _, t in tables))
        return
    with open(PAGE) as f:
        lines = f.read().split("\n")
    stale = False
    for header, table in tables:
        start, end = span_of(lines, header)
        if check and lines[start:end] != table:
            stale = True
            for old, new in zip(lines[start:end], table):
                if old != new:
                    print(f"- {old}\n+ {new}")
        lines[start:end] = table
    if check:
        if stale:
            print("docs/what-if.md is stale; run tools/what_if.py MOESIM --write")
            sys.exit(1)
        print("docs/what-if.md matches the binary")
        return
    with open(PAGE, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
