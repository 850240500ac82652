#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""End-to-end checks of `moesim sweep` and `moesim plan`: exit codes (0 ok, 2 bad input naming the
flag or the file and JSON path), the JSON keys, the CSV (one row per configuration, written
atomically), and output that does not depend on --threads.

usage: sweep_test.py BUILD/moesim   (run from the project root)
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

MOESIM = sys.argv[1]
SMALL = "tests/data/sweep-small.json"
failures = []


def run(*args, timeout=120):
    return subprocess.run([MOESIM, *args], capture_output=True, text=True, timeout=timeout)


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


def strip_wall(text):
    """The text report with its one run-dependent line (wall time) removed."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("wall "))


# --- sweep: happy path, JSON keys, CSV ----------------------------------------------------------
with tempfile.TemporaryDirectory() as tmp:
    csv1 = os.path.join(tmp, "one.csv")
    csv2 = os.path.join(tmp, "two.csv")
    r1 = run("sweep", SMALL, "--json", "--threads", "1", "--csv", csv1)
    r2 = run("sweep", SMALL, "--json", "--threads", "2", "--csv", csv2, "--top", "20")
    expect("sweep exit 0", r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr)
    j1 = json.loads(r1.stdout)
    j2 = json.loads(r2.stdout)
    for key in ("num_configs_total", "num_configs_rejected", "num_configs_pruned", "num_configs_simulated", "wall_s",
                "results", "pareto", "rejected", "rejected_by_path", "pruned"):
        expect("sweep --json key " + key, key in j1)
    expect("total = product of axes", j1["num_configs_total"] == 2 * 2 * 3 * 2 * 2, j1["num_configs_total"])
    expect("counts add up",
           j1["num_configs_rejected"] + j1["num_configs_pruned"] + j1["num_configs_simulated"] == j1["num_configs_total"])
    expect("some of each", j1["num_configs_rejected"] > 0 and j1["num_configs_pruned"] > 0 and j1["num_configs_simulated"] > 0,
           str(j1))
    for res in j1["results"]:
        for key in ("config", "step_time_s", "tokens_per_s", "mfu", "peak_hbm_bytes", "fits"):
            expect("result key " + key, key in res)
        expect("config keys are axis paths", set(res["config"]) == {a["path"] for a in j1["axes"]}, res["config"])
    times = [(not r["fits"], r["step_time_s"]) for r in j1["results"]]
    expect("results ranked, fits first", times == sorted(times), times)
    front = j1["pareto"]
    expect("pareto non-empty", len(front) > 0)
    for a in front:
        expect("pareto fits", a["fits"])
        for b in front:
            if a is not b:
                expect("pareto not dominated",
                       not (b["step_time_s"] <= a["step_time_s"] and b["peak_hbm_bytes"] <= a["peak_hbm_bytes"]),
                       f"{a['config_index']} by {b['config_index']}")
    expect("rejected reasons name the file and path",
           all(e["reason"].startswith(SMALL + ": /parallel") for e in j1["rejected"]), j1["rejected"][:2])
    # --threads 1 and 2: byte-identical but for the wall time.
    strip_wall_json = lambda text: [l for l in text.splitlines() if not l.lstrip().startswith('"wall_s"')]
    expect("--threads 1 vs 2 JSON identical but for wall_s", strip_wall_json(r1.stdout) == strip_wall_json(r2.stdout))
    with open(csv1) as f1, open(csv2) as f2:
        c1, c2 = f1.read(), f2.read()
    expect("--threads 1 vs 2 CSV byte-identical", c1 == c2)
    rows = list(csv.DictReader(c1.splitlines()))
    expect("CSV one row per configuration", len(rows) == j1["num_configs_total"], len(rows))
    expect("CSV in index order", [int(r["config_index"]) for r in rows] == list(range(len(rows))))
    expect("CSV statuses", {r["status"] for r in rows} == {"rejected", "pruned", "simulated"})
    # The columns plans are compared by, consistent with each other and with the JSON.
    for r in rows:
        if r["status"] != "simulated":
            continue
        per_device = float(r["tokens_per_s"]) / 8
        expect("CSV tokens per device", abs(float(r["tokens_per_s_per_device"]) - per_device) <= 1e-9 * per_device, r)
        expect("CSV breakdown within the step",
               float(r["compute_s"]) + float(r["exposed_comm_s"]) + float(r["bubble_s"]) <= float(r["step_time_s"]) * (1 + 1e-9), r)
        expect("CSV peak DDR column", r["peak_ddr_bytes"] != "", r)
    best = j1["results"][0]
    for key in ("tokens_per_s_per_device", "compute_s", "exposed_comm_s", "bubble_s", "peak_ddr_bytes"):
        expect("JSON result key " + key, key in best, best.keys())
    # --explain: the configuration's full report, the same step time as the sweep found.
    ex = run("sweep", SMALL, "--explain", str(best["config_index"]), "--json")
    expect("--explain exit 0", ex.returncode == 0, ex.stderr)
    if ex.returncode == 0:
        expect("--explain same step", json.loads(ex.stdout)["step_time_s"] == best["step_time_s"], ex.stdout[:200])
    bad_ex = run("sweep", SMALL, "--explain", "0")
    expect("--explain of a rejected plan exit 2", bad_ex.returncode == 2 and "/parallel" in bad_ex.stderr, bad_ex.stderr)
    out_ex = run("sweep", SMALL, "--explain", "48")
    expect("--explain out of range exit 2", out_ex.returncode == 2 and out_ex.stderr.startswith("--explain"), out_ex.stderr)
    expect("no temporary files left", sorted(os.listdir(tmp)) == ["one.csv", "two.csv"], os.listdir(tmp))

    # Text output: the same whatever the thread count (but for the wall line).
    t1 = run("sweep", SMALL, "--threads", "1")
    t2 = run("sweep", SMALL, "--threads", "2")
    expect("text exit 0", t1.returncode == 0, t1.stderr)
    expect("text identical across --threads", strip_wall(t1.stdout) == strip_wall(t2.stdout))
    expect("text has the front", "Pareto front" in t1.stdout)
    expect("no progress bar when stderr is not a terminal", t1.stderr == "", t1.stderr)

    # A failed sweep leaves an existing CSV as it was; a successful one replaces it whole.
    kept = os.path.join(tmp, "kept.csv")
    with open(kept, "w") as f:
        f.write("old\n")
    r = run("sweep", "k3-lora-fsdp2-ep64", "--csv", kept)
    with open(kept) as f:
        expect("failed sweep keeps the old CSV", r.returncode == 2 and f.read() == "old\n", r.stderr)
    r = run("sweep", SMALL, "--csv", kept, "--threads", "2")
    with open(kept) as f:
        expect("successful sweep replaces the CSV", r.returncode == 0 and f.read() == c1, r.stderr)
    os.remove(kept)

    # A CSV that cannot be written: exit 2 naming the flag, nothing on stdout, nothing left behind.
    bad = os.path.join(tmp, "no-such-dir", "x.csv")
    r = run("sweep", SMALL, "--csv", bad)
    expect("unwritable --csv exit 2", r.returncode == 2 and "--csv" in r.stderr and r.stdout == "", r.stderr)

# --- sweep: bad input ------------------------------------------------------------------------------
for args, flag in ((["--threads", "0"], "--threads"), (["--threads", "x"], "--threads"), (["--top", "-1"], "--top"),
                   (["--nope"], "--nope")):
    r = run("sweep", SMALL, *args)
    expect(f"sweep {' '.join(args)} exit 2", r.returncode == 2, r.returncode)
    expect(f"sweep {' '.join(args)} names {flag}", flag in r.stderr, r.stderr)
    expect(f"sweep {' '.join(args)} stdout empty", r.stdout == "")
r = run("sweep")
expect("sweep without SCENARIO exit 2", r.returncode == 2 and "SCENARIO" in r.stderr, r.stderr)
r = run("sweep", "no-such-scenario")
expect("sweep unknown scenario exit 2", r.returncode == 2 and "no-such-scenario" in r.stderr, r.stderr)
r = run("sweep", "k3-lora-fsdp2-ep64")
expect("sweep without axes exit 2", r.returncode == 2 and "/sweep/axes" in r.stderr, r.stderr)
r = run("sweep", "tests/data/bad/scenario/sweep-bad-value.json")
expect("sweep bad axis value exit 2", r.returncode == 2 and "/sweep/axes/0/values/1" in r.stderr, r.stderr)

# --- plan fit ------------------------------------------------------------------------------------
r = run("plan", "fit", SMALL, "--vary", "sequence_length", "--json", "--max", "65536")
expect("plan fit exit 0", r.returncode == 0, r.stderr)
if r.returncode == 0:
    j = json.loads(r.stdout)
    for key in ("vary", "granularity", "probes", "largest_fit", "smallest_miss"):
        expect("plan fit key " + key, key in j)
    fit, miss = j["largest_fit"], j["smallest_miss"]
    expect("plan fit found", fit is not None and fit % j["granularity"] == 0, j)
    by_value = {p["value"]: p for p in j["probes"]}
    if fit is not None:
        expect("largest fit fits", by_value[fit]["fits"])
        expect("largest fit within HBM", by_value[fit]["outcome"]["peak_hbm_bytes"] <= j["hbm_capacity_bytes"])
    if miss is not None:
        expect("next step up does not fit", miss == fit + j["granularity"] and not by_value[miss]["fits"], j)
r = run("plan", "fit", SMALL, "--vary", "micro_batch_size")
expect("plan fit micro-batch text", r.returncode == 0 and "answer: micro_batch_size" in r.stdout, r.stdout + r.stderr)
r = run("plan", "fit", SMALL, "--vary", "hidden_size")
expect("plan fit --vary bad exit 2", r.returncode == 2 and "--vary" in r.stderr, r.stderr)

# --- plan devices --------------------------------------------------------------------------------
# H200 nodes: 8 devices take 2.9 days for 2e10 tokens; the search doubles to 128, then bisects to 96.
r = run("plan", "devices", "tests/data/sweep-plan.json", "--tokens", "2e10", "--days", "1", "--max-devices", "256", "--json")
expect("plan devices exit 0", r.returncode == 0, r.stderr)
if r.returncode == 0:
    j = json.loads(r.stdout)
    for key in ("unit_devices", "evaluated", "found", "answer"):
        expect("plan devices key " + key, key in j)
    expect("plan devices found", j["found"], j)
    expect("plan devices needs more than one node", j["found"] and j["answer"]["num_devices"] > j["unit_devices"], j)
    if j["found"]:
        a = j["answer"]
        n = a["num_devices"]
        expect("answer meets the deadline", a["meets_deadline"] and a["train_days"] <= 1.0, a)
        expect("answer is a multiple of the unit", n % j["unit_devices"] == 0)
        expect("cost = devices x time", abs(a["device_hours"] - n * a["train_days"] * 24) <= 1e-9 * a["device_hours"], a)
        smaller = [c for c in j["evaluated"] if c["num_devices"] < n]
        expect("every smaller count evaluated misses",
               all(c["best"] is None or not c["plans"][c["best"]]["meets_deadline"] for c in smaller), smaller)
        expect("the count below the answer was tried", any(c["num_devices"] == n - j["unit_devices"] for c in j["evaluated"])
               or n == j["unit_devices"], [c["num_devices"] for c in j["evaluated"]])
        # The answer states what it assumes: how full the last node and domain are, the batch
        # used against the one asked for, and the cheapest plan within the deadline.
        last = n - (a["num_domains"] - 1) * j["domain_size"]
        expect("answer: devices in the last domain", a["devices_in_last_domain"] == last, a)
        expect("answer: the batch asked", j["global_batch_size_asked"] == 16, j["global_batch_size_asked"])
        expect("answer: the batch grows with data parallelism", a["global_batch_size"] >= 16, a)
        meets = [p for c in j["evaluated"] for p in c["plans"] if p["meets_deadline"]]
        expect("cheapest: the fewest device-hours within the deadline",
               j["cheapest"] is not None and j["cheapest"]["device_hours"] == min(p["device_hours"] for p in meets), j["cheapest"])
t = run("plan", "devices", "tests/data/sweep-plan.json", "--tokens", "2e10", "--days", "1", "--max-devices", "256")
expect("plan devices text states the batch and occupancy", t.returncode == 0 and "batch " in t.stdout and
       ("all full" in t.stdout or "the last holds" in t.stdout), t.stdout)
# --fixed-batch: a count whose data-parallel degree does not divide the batch is listed with the reason.
f = run("plan", "devices", "tests/data/sweep-plan.json", "--tokens", "2e10", "--days", "1", "--max-devices", "256",
        "--fixed-batch", "--json")
if f.returncode == 0:
    fj = json.loads(f.stdout)
    without = [p for c in fj["evaluated"] if c["best"] is None for p in c["plans"]]
    expect("--fixed-batch: every plan without a fit says why", all(p.get("why_not") for p in without), without[:2])
else:
    expect("plan devices --fixed-batch exit 0", False, f.stderr)
for args, flag in ((["--tokens", "-1", "--days", "1"], "--tokens"), (["--tokens", "1e9"], "--days"),
                   (["--tokens", "1e9", "--days", "1", "--max-devices", "0"], "--max-devices")):
    r = run("plan", "devices", SMALL, *args)
    expect(f"plan devices {' '.join(args)} exit 2", r.returncode == 2 and flag in r.stderr, r.stderr)
r = run("plan")
expect("plan without subcommand exit 2", r.returncode == 2, r.returncode)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("sweep and plan CLI: all checks passed")
