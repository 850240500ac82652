#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""End-to-end checks of the moesim binary: exit codes (0 ok, 2 bad input), messages on stderr,
nothing on stdout after an error, and machine-readable JSON.

usage: cli_test.py BUILD/moesim   (run from the project root)
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MOESIM = sys.argv[1]
failures = []


def run(*args):
    return subprocess.run([MOESIM, *args], capture_output=True, text=True, timeout=60)


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


# Happy paths.
r = run("model", "info", "kimi-k3-dsa")
expect("model info", r.returncode == 0 and "2,779.8B text" in r.stdout, r.stdout + r.stderr)
r = run("model", "info", "models/kimi-k3.json", "--json", "--seq", "32768")
j = json.loads(r.stdout)
for key in ("total_params", "active_params", "weight_bytes", "flops_per_token_fwd", "flops_per_token_train", "components"):
    expect("model info --json key " + key, key in j)
expect("model info --seq", j["seq_len"] == 32768)
r = run("scenario", "info")
expect("scenario info default", r.returncode == 0 and "k3-lora-fsdp2-ep64" in r.stdout, r.stderr)
r = run("scenario", "info", "--json")
expect("scenario info json", json.loads(r.stdout)["parallel"]["experts_per_ep_rank"] == 14)
for hw in ("a100-80g-hgx", "h100-hgx", "h200-hgx", "gb200-nvl72", "supernode-128", "cloudmatrix-384"):
    r = run("hardware", "info", hw, "--json")
    expect("hardware info " + hw, r.returncode == 0 and json.loads(r.stdout)["name"] == hw, r.stderr)
r = run("describe", "scenario")
expect("describe scenario", r.returncode == 0 and "/parallel/ep" in r.stdout)
r = run("--help")
expect("--help", r.returncode == 0 and "model" in r.stdout)

# Simulation: the report's keys, byte-identical reruns (but for the wall time), a trace that parses.
def without_wall(text):
    j = json.loads(text)
    j.pop("sim_wall_s")
    return j

with tempfile.TemporaryDirectory() as tmp:
    trace = os.path.join(tmp, "trace.json")
    mem = os.path.join(tmp, "mem.csv")
    r1 = run("simulate", "--json", "--steps", "1", "--trace", trace, "--trace-ranks", "2", "--memory-csv", mem)
    r2 = run("simulate", "--json", "--steps", "1")
    expect("simulate", r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr)
    s1 = json.loads(r1.stdout)
    # What the default asks for and the step leaves out is said, not silent (K3 has a vision tower).
    nm = s1.get("not_modelled", [])
    expect("simulate not_modelled", len(nm) == 1 and "vision" in nm[0], str(nm))
    for key in ("step_time_s", "step_time_p50_s", "step_time_p99_s", "tokens_per_step", "tokens_per_s", "mfu", "hfu",
                "model_flops_per_step", "num_devices", "peak_flops_per_device", "peak_hbm_bytes", "hbm_capacity_bytes",
                "peak_ddr_bytes", "fits", "breakdown_s", "critical_path", "sim_wall_s", "num_events"):
        expect("simulate key " + key, key in s1)
    expect("simulate deterministic", without_wall(r1.stdout) == without_wall(r2.stdout))
    expect("simulate sane", 0 < s1["mfu"] <= 1 and s1["num_devices"] == 128 and s1["fits"] is True, str(s1.get("mfu")))
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    expect("trace has ops", sum(1 for e in events if e.get("ph") == "X") > 1000)
    with open(mem) as f:
        expect("memory csv", f.readline().startswith("rank,time_s,hbm_bytes,ddr_bytes,hbm_reserved_bytes"))
    # Exposed time by cause adds up with the compute stream to the step.
    parts = s1["memory_at_peak_bytes"]
    expect("memory at peak adds up", abs(sum(parts.values()) - s1["peak_hbm_bytes"]) < 1e-9 * s1["peak_hbm_bytes"], str(parts))
    expect("memory at peak parts", {"params", "runtime", "activation", "allocator_reserve"} <= set(parts), str(parts))
    b = s1["breakdown_s"]
    expect("breakdown adds up", abs(b["compute_stream"] + b["exposed_total"] - s1["step_time_s"]) < 1e-9 * s1["step_time_s"],
           str(b))
    # A straggler slows the step; one representative per class of ranks gives the same answer. That
    # is exact for equal expert loads (simulate --help), so the experts' inputs are padded to their
    # capacity: with sampled loads each class runs its slowest member's and is close, not equal.
    with open("scenarios/k3-lora-fsdp2-ep64.json") as f:
        even = json.load(f)
    even["model"], even["hardware"] = "kimi-k3-dsa", "supernode-128"
    even.setdefault("routing", {}).update({"capacity_factor": 1.0, "capacity_policy": "pad"})
    even_file, slow_file = os.path.join(tmp, "even.json"), os.path.join(tmp, "slow.json")
    with open(even_file, "w") as f:
        json.dump(even, f)
    with open(slow_file, "w") as f:
        json.dump(dict(even, stragglers=[{"ranks": [5], "slowdown": 1.1}]), f)
    r0 = run("simulate", even_file, "--json", "--steps", "1", "--distinct-ranks")
    r3 = run("simulate", slow_file, "--json", "--steps", "1")
    r4 = run("simulate", slow_file, "--json", "--steps", "1", "--distinct-ranks")
    s0 = json.loads(r0.stdout) if r0.returncode == 0 else {}
    s3 = json.loads(r3.stdout) if r3.returncode == 0 else {}
    s4 = json.loads(r4.stdout) if r4.returncode == 0 else {}
    expect("straggler slower", s3.get("step_time_s", 0) > s0.get("step_time_s", 1e30), r0.stderr + r3.stderr)
    expect("distinct ranks same step", s4.get("step_time_s") == s3.get("step_time_s"), r4.stderr)
    expect("distinct ranks fewer events", s4.get("num_events", 1e30) < s3.get("num_events", 0) / 10)
r = run("simulate", "--steps", "0")
expect("simulate --steps 0", r.returncode == 2 and "--steps" in r.stderr, r.stderr)

# The op graph: stats, and export / import round trip.
r = run("graph", "stats", "--json")
j = json.loads(r.stdout)
for key in ("num_ops", "num_ranks", "num_programs", "flops_per_step", "tokens_per_step", "ops_by_kind", "bytes_by_collective"):
    expect("graph stats key " + key, key in j)
expect("graph stats ranks", j["num_ranks"] == 128 and j["num_programs"] == 1)
expect("graph stats kinds", {"kda", "all_to_all", "all_gather", "reduce_scatter", "grouped_gemm"} <= set(j["ops_by_kind"]))
with tempfile.TemporaryDirectory() as tmp:
    # The round trip on a 2-GPU slice: the default's 128-rank graph is 20 s of JSON under ASan, and
    # tests/graph/test_graph_json.cpp already round-trips every op field of the default's graph.
    slice_scenario = "scenarios/calibration/k3-slice-2gpu.json"
    sliced = json.loads(run("graph", "stats", slice_scenario, "--json").stdout)
    out = os.path.join(tmp, "g.json")
    r = run("graph", "export", slice_scenario, "-o", out)
    expect("graph export", r.returncode == 0 and os.path.getsize(out) > 0, r.stderr)
    r = run("graph", "import", out, "--json")
    imported = json.loads(r.stdout) if r.returncode == 0 else {}
    expect("graph import stats", imported.get("flops_per_step") == sliced["flops_per_step"] and
           imported.get("num_ops") == sliced["num_ops"], r.stderr)
    with open(out) as f:
        text = f.read()
    with open(out, "w") as f:
        f.write(text[: len(text) // 3])
    r = run("graph", "import", out)
    expect("graph import truncated", r.returncode == 2 and "invalid JSON at line" in r.stderr, r.stderr)
    r = run("graph", "export", "-o", os.path.join(tmp, "no", "such", "dir.json"))
    expect("graph export unwritable", r.returncode == 2 and r.stderr.startswith("--output: cannot write"), r.stderr)
    expect("graph export leaves nothing", os.listdir(tmp) == ["g.json"], str(os.listdir(tmp)))

# simulate --graph: an exported graph simulates to the same step; an edited one to its own; a graph
# of another mesh is refused (exit 2) naming the file and /mesh.
with tempfile.TemporaryDirectory() as tmp:
    scenario = "scenarios/calibration/k3-slice-2gpu.json"
    out = os.path.join(tmp, "g.json")
    run("graph", "export", scenario, "-o", out)
    built = run("simulate", scenario, "--json")
    again = run("simulate", scenario, "--graph", out, "--json")
    expect("simulate --graph", again.returncode == 0, again.stderr)
    if again.returncode == 0:
        expect("simulate --graph same step", json.loads(again.stdout)["step_time_s"] == json.loads(built.stdout)["step_time_s"])
    with open(out) as f:
        g = json.load(f)
    for p in g["programs"]:
        for op in p["ops"]:
            if op["kind"] == "gemm":
                op["flops"] *= 4
    edited = os.path.join(tmp, "edited.json")
    with open(edited, "w") as f:
        json.dump(g, f)
    slower = run("simulate", scenario, "--graph", edited, "--json")
    expect("simulate --graph edited", slower.returncode == 0 and
           json.loads(slower.stdout)["step_time_s"] > json.loads(built.stdout)["step_time_s"], slower.stderr)
    for p in g["programs"]:  # a buffer allocated and never freed
        p["ops"][-1].setdefault("effects", []).append([0, "alloc"])
    with open(edited, "w") as f:
        json.dump(g, f)
    r = run("simulate", scenario, "--graph", edited)
    expect("simulate --graph unbalanced", r.returncode == 2 and "edited.json: /programs" in r.stderr, r.stderr)
    r = run("simulate", "scenarios/calibration/k3-slice-1gpu.json", "--graph", out)
    expect("simulate --graph other mesh", r.returncode == 2 and "/mesh" in r.stderr and r.stdout == "", r.stderr)
    r = run("simulate", scenario, "--graph", os.path.join(tmp, "none.json"))
    expect("simulate --graph missing", r.returncode == 2 and r.stderr.startswith("--graph"), r.stderr)

# moesim fusion: candidates re-simulated; the graph --apply writes simulates to the cumulative step.
with tempfile.TemporaryDirectory() as tmp:
    scenario = "scenarios/calibration/k3-slice-2gpu.json"
    r = run("fusion", scenario, "--top", "2", "--json")
    expect("fusion", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        f = json.loads(r.stdout)
        expect("fusion candidates", len(f["candidates"]) >= 2, str(f.keys()))
        expect("fusion never slower", all(c["step_delta_s"] <= 0 for c in f["cumulative"]), str(f["cumulative"]))
        applied = os.path.join(tmp, "fused.json")
        a = run("fusion", scenario, "--top", "2", "--apply", "2", "-o", applied)
        expect("fusion --apply", a.returncode == 0 and os.path.exists(applied), a.stderr)
        sim = run("simulate", scenario, "--graph", applied, "--json")
        expect("fusion --apply simulates to the cumulative step", sim.returncode == 0 and
               abs(json.loads(sim.stdout)["step_time_s"] - f["cumulative"][-1]["step_time_s"]) < 1e-9, sim.stderr)
    r = run("fusion", scenario, "--apply", "2")
    expect("fusion --apply without -o exit 2", r.returncode == 2 and r.stdout == "", r.stderr)

# Bad input: exit code 2, a message naming the file and JSON path, nothing on stdout, within a
# time and memory bound (hostile inputs: tests/data/make_bad_inputs.py groups them by class).
BAD_SECONDS = 10           # each refusal; they take milliseconds
BAD_RSS_BYTES = 1 << 30    # each refusal's peak resident memory (ASan builds included)


def run_bounded(args, cwd=None):
    """Runs moesim with a timeout; returns (returncode, stdout, stderr, seconds, peak RSS bytes)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        p = subprocess.Popen([os.path.abspath(MOESIM), *args], stdout=out, stderr=err, cwd=cwd)
        timer = threading.Timer(BAD_SECONDS * 3, p.kill)
        timer.start()
        _, status, usage = os.wait4(p.pid, 0)
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return (p.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"), seconds,
                usage.ru_maxrss * 1024)


def expect_refused(name, args, prefix, message, cwd=None):
    rc, out, err, seconds, rss = run_bounded(args, cwd)
    expect(name, rc == 2 and err.startswith(prefix) and message in err and out == "",
           f"rc={rc} stderr={err[:400]!r}")
    expect(name + " time", seconds < BAD_SECONDS, f"{seconds:.1f} s")
    expect(name + " memory", rss < BAD_RSS_BYTES, f"{rss / 2**20:.0f} MiB")


with open("tests/data/bad/cases.json") as f:
    cases = json.load(f)
commands = {"model": ["model", "info"], "hardware": ["hardware", "info"], "scenario": ["scenario", "info"]}
for c in cases:
    prefix = "tests/data/bad/" + c["error_file"] + ": " + (c["path"] + ": " if c["path"] else "")
    expect_refused(f"bad {c['file']} ({c.get('class')})", [*commands[c["kind"]], "tests/data/bad/" + c["file"]],
                   prefix, c["message"])
classes = {c.get("class") for c in cases}
# The other readers (calibration files, exported graphs) and flags, run from tests/data/bad/.
with open("tests/data/bad/cli_cases.json") as f:
    cli_cases = json.load(f)
for c in cli_cases:
    if c.get("exit", 2) == 0:
        # At the bounds, accepted: within the same time and memory, finite numbers only.
        name = f"bound {c['name']}"
        rc, out, err, seconds, rss = run_bounded(c["args"], cwd="tests/data/bad")
        expect(name, rc == 0 and out and err == "" and not re.search(r"\b(inf|nan)\b", out, re.I),
               f"rc={rc} stderr={err[:400]!r} stdout={out[:400]!r}")
        expect(name + " time", seconds < BAD_SECONDS, f"{seconds:.1f} s")
        expect(name + " memory", rss < BAD_RSS_BYTES, f"{rss / 2**20:.0f} MiB")
        continue
    expect_refused(f"bad {c['name']} ({c['class']})", c["args"], c["error"], c["message"], cwd="tests/data/bad")
classes |= {c["class"] for c in cli_cases}
expect("bad input classes", {"schema", "crash", "literal", "absurd", "unbounded", "location", "bound"} <= classes,
       str(classes))
expect("bad input count", len(cases) + len(cli_cases) >= 116, str(len(cases) + len(cli_cases)))
# The fixtures the graph cases derive from is itself valid (so each case fails for its one mistake).
rc, out, err, _, _ = run_bounded(["graph", "import", "graph/valid.json"], cwd="tests/data/bad")
expect("bad graph base is valid", rc == 0, err)

# Bad flags and arguments.
for args, fragment in [
    (("model", "info", "kimi-k4"), "MODEL: 'kimi-k4' is neither a file nor a shipped models name"),
    (("model", "info"), "MODEL is required"),
    (("model", "info", "kimi-k3", "--seq", "0"), "--seq"),
    (("model", "info", "kimi-k3", "--seq", "x"), "--seq"),
    (("describe", "nonsense"), "KIND"),
    (("frobnicate",), "frobnicate"),
    ((), "A subcommand is required"),
]:
    r = run(*args)
    expect("flags " + " ".join(args), r.returncode == 2 and fragment in r.stderr + r.stdout, f"rc={r.returncode} {r.stderr!r}")

# Only the GPU commands load the CUDA libraries (from libmoesim_gpu.so beside the binary): every
# other command starts without mapping cuBLAS or NCCL.
def loaded_libraries(*args):
    env = dict(os.environ, LD_DEBUG="libs")
    r = subprocess.run([MOESIM, *args], capture_output=True, text=True, timeout=60, env=env)
    return r, [line for line in r.stderr.splitlines() if "calling init:" in line]


for args in (("--version",), ("model", "info", "kimi-k3"), ("scenario", "info")):
    r, libs = loaded_libraries(*args)
    cuda = [line for line in libs if any(k in line for k in ("cublas", "nccl", "libcuda", "cudnn"))]
    expect("no CUDA library loaded by " + " ".join(args), r.returncode == 0 and not cuda, "\n".join(cuda))
module = os.path.join(os.path.dirname(MOESIM), "libmoesim_gpu.so")
if os.path.exists(module):
    # A bad input inside the module is still exit 2 naming it (errors cross the module boundary).
    r, libs = loaded_libraries("validate", "no-such-scenario")
    expect("validate bad scenario exit 2", r.returncode == 2 and "no-such-scenario" in r.stderr, r.stderr[-300:])
    expect("validate loads the GPU module", any("libmoesim_gpu" in line for line in libs))
    if shutil.which("nvidia-smi") is None:  # no GPU here: the GPU commands say so, exit 2
        r = run("calibrate", "--quick")
        expect("calibrate without a GPU exit 2", r.returncode == 2 and "no CUDA device" in r.stderr, r.stderr[-300:])
        r = run("calibrate", "--only", "loss", "--quick")  # a known part: past the flag check, to the device
        expect("calibrate --only loss without a GPU exit 2", r.returncode == 2 and "no CUDA device" in r.stderr
               and "--only" not in r.stderr, r.stderr[-300:])

# calibrate / validate --from-trace (docs/calibration/from-trace.md): CPU-only, end to end on the
# shipped traces of the harness, in every build.
TRACES = "tests/data/traces/"
for name in sorted(os.listdir("scenarios/trace")):  # the harness's scenarios all load and plan
    r = run("scenario", "info", "scenarios/trace/" + name)
    expect("scenario info scenarios/trace/" + name, r.returncode == 0, r.stderr[-300:])
FIT_ARGS = ["--from-trace", TRACES + "dense-s8192-mb1.rank0.json.gz", "--scenario", "scenarios/trace/dense-s8k-mb1.json",
            "--from-trace", TRACES + "moe-s8192-mb1.rank0.json.gz", "--scenario", "scenarios/trace/moe-s8k-mb1.json"]
with tempfile.TemporaryDirectory() as tmp:
    fitted = os.path.join(tmp, "fitted.json")
    r = run("calibrate", *FIT_ARGS, "--out", fitted)
    expect("calibrate --from-trace", r.returncode == 0 and "fitted 101 calibration point(s)" in r.stdout
           and "range layer*.attn.rope" not in r.stdout, r.stdout[-500:] + r.stderr[-500:])
    if os.path.exists(fitted):
        # The shipped fit is what the shipped traces give (provenance aside: command and date).
        with open(fitted) as f:
            new = json.load(f)
        with open("hardware/calibration/h200-pytorch.json") as f:
            shipped = json.load(f)
        new.pop("provenance", None)
        shipped.pop("provenance", None)
        expect("hardware/calibration/h200-pytorch.json is current", new == shipped,
               "regenerate: build/moesim calibrate " + " ".join(FIT_ARGS) + " --out hardware/calibration/h200-pytorch.json")
    # Without --out the calibration file goes to stdout and the summary to stderr.
    r = run("calibrate", *FIT_ARGS[:4])
    expect("calibrate --from-trace to stdout", r.returncode == 0 and json.loads(r.stdout)["format"] == "moesim-calibration"
           and "fitted" in r.stderr, r.stderr[-300:])
    # The GEMM duty cycle: a GPU calibration flag, in (0, 1], checked before any device is looked for.
    r = run("calibrate", *FIT_ARGS[:4], "--gemm-duty", "0.5")
    expect("calibrate --from-trace --gemm-duty exit 2", r.returncode == 2 and "--gemm-duty" in r.stderr
           and r.stdout == "", r.stderr[-300:])
    for bad in ("0", "1.5", "-1"):
        r = run("calibrate", "--gemm-duty", bad)
        expect("calibrate --gemm-duty " + bad + " exit 2", r.returncode == 2 and "--gemm-duty" in r.stderr
               and "(0, 1]" in r.stderr, r.stderr[-300:])
    # A bad trace writes nothing, not even over an existing file.
    kept = os.path.join(tmp, "kept.json")
    with open(kept, "w") as f:
        f.write("previous")
    r = run("calibrate", "--from-trace", "tests/data/bad/trace/dur-string.json", "--scenario",
            "scenarios/trace/dense-s4k-mb2.json", "--out", kept)
    with open(kept) as f:
        expect("calibrate --from-trace bad trace leaves --out alone", r.returncode == 2 and f.read() == "previous", r.stderr)
    # Validate a configuration the fit did not see: GEMMs carry over (their family within 5%), the
    # report names the calibration file used, and the trace's allocator peak is compared.
    r = run("validate", "--json", "--from-trace", TRACES + "dense-s4096-mb2.rank0.json.gz", "--scenario",
            "scenarios/trace/dense-s4k-mb2.json", "--calibration", fitted)
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    expect("validate --from-trace", r.returncode == 0 and j.get("calibration") == fitted, r.stderr[-300:])
    if j:
        fam = {f["family"]: f for f in j["families"]}
        expect("validate --from-trace gemm carries over", abs(fam["gemm"]["error"]) < 0.05, str(fam.get("gemm")))
        expect("validate --from-trace memory", j["peak_memory"]["measured_allocated_bytes"] == 8357668864, str(j.get("peak_memory")))
        expect("validate --from-trace steps", len(j["trace"]["steps"]) == 2 and j["step_time"]["measured_s"] > 0.08)
    # The loop closed on a GPU-bound held-out configuration with full recompute (2026-12-02 traces,
    # docs/calibration/from-trace.md): calibrated on one 8,192-token micro-batch, predicted for two
    # of 16,384 tokens with each layer's forward rerun. Every range of the rerun is matched (two per
    # forward op and micro-batch), and the step and families are the recorded ones.
    for model, step_error in (("dense", -0.023), ("moe", -0.020)):
        cal = os.path.join(tmp, model + "-8k.json")
        r = run("calibrate", "--from-trace", TRACES + "2026-12-02/" + model + "-s8192-mb1.rank0.json.gz", "--scenario",
                "scenarios/trace/" + model + "-s8k-mb1.json", "--out", cal)
        expect(model + " calibrate on the 2026-12-02 trace", r.returncode == 0, r.stderr[-300:])
        r = run("validate", "--json", "--from-trace", TRACES + "2026-12-02/" + model + "-s16384-mb2-full.rank0.json.gz",
                "--scenario", "scenarios/trace/" + model + "-s16k-mb2-full.json", "--calibration", cal)
        j = json.loads(r.stdout) if r.returncode == 0 else {}
        expect(model + " validate held-out full recompute", r.returncode == 0, r.stderr[-300:])
        if j:
            err = j["step_time"]["error"]
            expect(model + " held-out step error as recorded", abs(err - step_error) < 0.002, f"{err:+.4f}")
            attn = [o for o in j["ops"] if o["name"] == "layer*.attn.flash_attention"]
            expect(model + " recompute reruns matched", len(attn) == 1 and attn[0]["num_ops"] == 16, str(attn))
            # RoPE's two ranges (q and k) per op are the only counts that differ from the graph's.
            odd = [w for w in j["trace"]["warnings"] if "ranges per step" in w and "attn.rope" not in w]
            expect(model + " every other op's ranges as the graph's ops", not odd, str(odd))
            fam = {f["family"]: f for f in j["families"]}
            for f in ("gemm", "attention", "loss", "optimizer", "norm"):  # norm: by width (QK-norm's own table)
                expect(model + " held-out " + f + " within 10%", abs(fam[f]["error"]) < 0.10, str(fam.get(f)))
            # The trace's process held earlier configurations' state (harness before 2026-12-02 16:00
            # UTC); above the step's start the eager loss and per-step gradients predict the peak.
            pm = j["peak_memory"]
            expect(model + " held-out memory above the step's start", abs(pm.get("error_above_start", 1)) < 0.005, str(pm))
    # The uncalibrated H100 file against a step of Llama 3.1 8B's kernels traced on an H100
    # (2026-12-05; docs/hardware-efficiency.md, "The step's power state"): the kernel efficiencies
    # measured on an H100 and the step's power state predict the step and its GEMMs and attention.
    # Before the power state the step agreed only by cancellation (GEMMs +10..+12%, attention -11..-12%).
    # The loss family was -17% before its log-softmax read a 128,256-class row three times.
    # (hardware/efficiency/kernel-points.json's h100-fsdp-copies-trace takes FSDP's copy rate from
    # the first trace: its data_parallel family is no independent check.)
    # Traced again with w1 and w3 in ranges of their own (gate_proj, up_proj), as the scenarios state
    # them (fused_ops.gate_up apart; docs/calibration/runs/2026-12-05-gate-proj/): the activation's
    # backward was +53% while the scenarios costed one GEMM of both halves and a concatenation.
    for trace, scenario, step_error in (("llama8b-s8192-mb1", "llama8b-s8k-mb1", -0.0014),
                                        ("llama8b-s8192-mb2-full", "llama8b-s8k-mb2-full", -0.0017)):
        r = run("validate", "--json", "--from-trace", TRACES + "2026-12-05-h100-gate-proj/" + trace + ".rank0.json.gz",
                "--scenario", "scenarios/trace/" + scenario + ".json")
        j = json.loads(r.stdout) if r.returncode == 0 else {}
        expect(trace + " on h100-hgx, no calibration", r.returncode == 0 and not j.get("calibration"), r.stderr[-300:])
        if j:
            err = j["step_time"]["error"]
            expect(trace + " step error as recorded", abs(err - step_error) < 0.002, f"{err:+.4f}")
            fam = {f["family"]: f for f in j["families"]}
            expect(trace + " GEMMs within 2%", abs(fam["gemm"]["error"]) < 0.02, str(fam.get("gemm")))
            expect(trace + " attention within 4%", abs(fam["attention"]["error"]) < 0.04, str(fam.get("attention")))
            expect(trace + " loss within 3%", abs(fam["loss"]["error"]) < 0.03, str(fam.get("loss")))
            ops = {o["name"]: o for o in j["ops"]}
            for op in ("layer*.ffn.gate_proj", "layer*.ffn.up_proj", "layer*.ffn.act.bwd"):
                expect(f"{trace} {op} within 5%", op in ops and abs(ops[op]["error"]) < 0.05, str(ops.get(op)))
    # The same steps with nn.RMSNorm as PyTorch 2.4-2.7 computed it (harness --rms-norm composite,
    # docs/calibration/runs/2026-12-05-gate-proj/): the eager_rms_norm composite form of the
    # end-2024 torchtitan runs, its norms at the norm kind's rate (+20%: its casts and products
    # run at the elementwise rate).
    for trace, scenario in (("llama8b-s8192-mb1", "llama8b-s8k-mb1"), ("llama8b-s8192-mb2-full", "llama8b-s8k-mb2-full")):
        r = run("validate", "--json", "--from-trace",
                f"docs/calibration/runs/2026-12-05-gate-proj/h100/traces/{trace}-composite-norm.rank0.json.gz",
                "--scenario", f"scenarios/trace/{scenario}-composite-norm.json")
        j = json.loads(r.stdout) if r.returncode == 0 else {}
        expect(trace + " composite norm validates", bool(j), r.stderr[-300:])
        if j:
            err = j["step_time"]["error"]
            expect(trace + " composite norm step within 2%", abs(err) < 0.02, f"{err:+.4f}")
            fam = {f["family"]: f for f in j["families"]}
            # A recorded miss, not a target: the family at +20% (measured +20.5% / +19.7%).
            expect(trace + " composite norm family at its recorded +20%", abs(fam["norm"]["error"] - 0.20) < 0.02,
                   str(fam.get("norm")))
    # The same steps with each layer under torch.compile (harness --compile, one H100 call beside
    # its eager steps; docs/calibration/runs/2026-12-05-compile/): no op ranges to match, so the
    # step against the traced process's unprofiled step time, and compile's elementwise saving.
    for mb in (1, 2):
        with open(f"docs/calibration/runs/2026-12-05-compile/h100/traces/llama8b-s8192-mb{mb}-compiled.rank0.txt") as f:
            measured = statistics.median(json.load(f)["unprofiled_step_wall_s"])
        sims = {}
        for form in ("", "-compiled"):
            r = run("simulate", "--json", f"scenarios/trace/llama8b-s8k-mb{mb}{form}.json")
            sims[form] = json.loads(r.stdout) if r.returncode == 0 else {}
        if all(sims.values()):
            err = sims["-compiled"]["step_time_s"] / measured - 1
            expect(f"llama8b mb{mb} compiled step within 2% of the H100's", abs(err) < 0.02, f"{err:+.4f}")
            eager, compiled = (sims[k]["breakdown_s"]["compute"]["elementwise"] for k in ("", "-compiled"))
            expect(f"llama8b mb{mb} compile shrinks the elementwise work", compiled < 0.7 * eager, f"{compiled} vs {eager}")
    r = run("validate", "--from-trace", TRACES + "moe-s4096-mb2.rank0.json.gz", "--scenario", "scenarios/trace/moe-s4k-mb2.json")
    expect("validate --from-trace text", r.returncode == 0 and "per op family" in r.stdout and "grouped_gemm" in r.stdout,
           r.stderr[-300:])
    # The --from-trace forms never load the GPU module or the CUDA libraries.
    r, libs = loaded_libraries("calibrate", *FIT_ARGS[:4], "--out", os.path.join(tmp, "x.json"))
    expect("calibrate --from-trace loads no CUDA library",
           r.returncode == 0 and not [l for l in libs if any(k in l for k in ("cublas", "nccl", "libcuda", "libmoesim_gpu"))],
           r.stderr[-300:])

# The expert-dispatch overlap switches are sweep axes like any scenario field: four plans, each
# simulated, and chunked local-first dispatch is not the plain plan's time.
with tempfile.TemporaryDirectory() as tmp:
    with open("scenarios/calibration/qwen3-moe-slice-2gpu.json") as f:
        sweep = json.load(f)
    for key in ("model", "hardware"):
        sweep[key] = os.path.normpath(os.path.join(os.getcwd(), "scenarios/calibration", sweep[key]))
    sweep["sweep"] = {"axes": [{"path": "/overlap/moe_local_first", "values": [False, True]},
                               {"path": "/overlap/moe_dispatch_chunks", "values": [1, 4]}]}
    path = os.path.join(tmp, "overlap-sweep.json")
    with open(path, "w") as f:
        json.dump(sweep, f)
    r = run("sweep", path, "--json")
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    times = {json.dumps(x["config"], sort_keys=True): x["step_time_s"] for x in j.get("results", [])}
    expect("sweep over overlap switches", r.returncode == 0 and j.get("num_configs_simulated") == 4 and len(times) == 4 and
           len(set(times.values())) > 1, r.stderr[-300:] + str(times))

# The reference page is generated from the declarations.
with open("docs/inputs.md") as f:
    expect("docs/inputs.md up to date", f.read() == run("describe", "--markdown").stdout,
           "regenerate: build/moesim describe --markdown > docs/inputs.md")


# Progress lines: on stderr when it is a terminal (a pty here), never on stdout, and not when the
# output is --json going to a pipe; the results are the same with or without them.
def run_on_tty(*args):
    """Runs moesim with stderr on a pseudo-terminal, read while it runs (a pty holds a few KB: a
    long progress line would block the program if it were read only at the end)."""
    import pty
    import threading
    master, slave = pty.openpty()
    chunks = []

    def drain():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the pty's other end is closed and drained
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        p = subprocess.run([MOESIM, *args], stdout=subprocess.PIPE, stderr=slave, text=True, timeout=300)
    finally:
        os.close(slave)
        reader.join()
        os.close(master)
    return p, b"".join(chunks).decode(errors="replace")


try:
    import pty
    for fd in pty.openpty():
        os.close(fd)
    have_pty = True
except OSError:  # a machine without pseudo-terminals: nothing to draw progress on
    have_pty = False
    print("cli: no pseudo-terminal here; the progress checks are skipped")
for args, unit in () if not have_pty else ((("plan", "fit", "scenarios/k3-lora-fsdp2-ep64.json"), "plans evaluated"),
                   (("plan", "devices", "scenarios/k3-lora-fsdp2-ep64.json", "--tokens", "1e12", "--days", "30"), "plans evaluated"),
                   (("simulate", "--distinct-ranks"), "sampled steps")):
    p, err = run_on_tty(*args)
    plain = run(*args)
    name = " ".join(args[:2])
    expect(name + " progress on a terminal", p.returncode == 0 and unit in err, err[-300:])
    drop = lambda text: re.sub(r"simulated in +[0-9.]+ s", "", text)  # wall time in the report
    expect(name + " same output with progress", drop(p.stdout) == drop(plain.stdout) and unit not in p.stdout)
    expect(name + " no progress off a terminal", unit not in plain.stderr, plain.stderr[-300:])
    pj, errj = run_on_tty(*args, "--json")
    expect(name + " --json to a pipe: no progress", pj.returncode == 0 and unit not in errj, errj[-300:])

# calibrate's progress (on a GPU machine): every measurement the plan counted is made and
# counted, so the line ends at "N / N measurements"; the log lines stay on lines of their own.
if have_pty and os.path.exists(module) and shutil.which("nvidia-smi") is not None:
    with tempfile.TemporaryDirectory() as tmp:
        p, err = run_on_tty("calibrate", "--quick", "--only", "gemm,memory,copies,loss", "--out", os.path.join(tmp, "c.json"))
        counts = [(int(d), int(t)) for d, t in re.findall(r"\] (\d+) / (\d+) measurements", err)]
        expect("calibrate progress on a terminal", p.returncode == 0 and counts and counts[-1][0] == counts[-1][1] > 0
               and all(a[0] <= b[0] and a[1] == b[1] for a, b in zip(counts, counts[1:])), err[-400:])
        expect("calibrate log lines beside the progress", "\rcalibrate: gemm" in err.replace("\x1b[K", ""), err[-400:])

for f in failures:
    print("FAIL", f)
print(f"cli: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
