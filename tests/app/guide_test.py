#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""docs/calibration/guide.md, run: every ```sh block as a bash script (set -e) in a scratch folder
with this repository's hardware/, models/, scenarios/ and tests/ linked beside it and `moesim` on the PATH;
every `moesim` line of a ```sh gpu block must get past its flags (exit 0, or exit 2 saying there is
no GPU or no CUDA build). Then what the guide promises of the outputs, and that the pages of
docs/calibration/ cite only files the repository has and no internal issue numbers.

usage: guide_test.py BUILD/moesim   (run from the project root)
"""
import os
import re
import subprocess
import sys
import tempfile

MOESIM = os.path.abspath(sys.argv[1])
ROOT = os.getcwd()
GUIDE = os.path.join(ROOT, "docs/calibration/guide.md")
failures = []


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


def blocks(text):
    """(info string, body) of every fenced block."""
    return re.findall(r"^```([^\n]*)\n(.*?)^```", text, flags=re.S | re.M)


with tempfile.TemporaryDirectory() as scratch:
    bindir = os.path.join(scratch, "bin")
    os.mkdir(bindir)
    os.symlink(MOESIM, os.path.join(bindir, "moesim"))
    for d in ("hardware", "models", "scenarios", "tests"):
        os.symlink(os.path.join(ROOT, d), os.path.join(scratch, d))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])
    outputs = {}
    ran = 0
    for info, body in blocks(open(GUIDE).read()):
        if info.strip() == "sh":
            r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=scratch, env=env,
                               capture_output=True, text=True, timeout=600)
            expect("guide block", r.returncode == 0, f"{body}\nexit {r.returncode}\n{r.stderr[-2000:]}")
            outputs[body] = r.stdout
            ran += 1
        elif info.strip() == "sh gpu":
            for line in body.splitlines():
                if not line.startswith("moesim "):
                    continue
                r = subprocess.run(["bash", "-c", line], cwd=scratch, env=env, capture_output=True, text=True, timeout=600)
                no_gpu = r.returncode == 2 and any(s in r.stderr for s in ("without CUDA", "no CUDA device", " 0 GPU(s) are visible"))
                expect("guide gpu command", r.returncode == 0 or no_gpu, f"{line}\nexit {r.returncode}\n{r.stderr[-1000:]}")
                ran += 1
    expect("guide has commands", ran >= 10, str(ran))
    # The outputs the guide describes.
    text = "\n".join(outputs.values())
    expect("slice files", os.path.isfile(os.path.join(scratch, "k3-slice.json"))
           and os.path.isfile(os.path.join(scratch, "k3-slice.model.json")))
    expect("slice summary", "28 routed experts, top-16" in text, text[-3000:])
    expect("hardware info names the calibration", "calibration" in text)
    expect("the H200 band", "step time -5.3% .. +5.7% over 11 run(s)" in text and "within 4.9%" in text, text[-3000:])
    expect("unvalidated under another name", "unvalidated: no validation record for hardware 'my-box'" in text)
    # The bad flags are named.
    r = subprocess.run([MOESIM, "calibrate", "--only", "gemm,tensor-cores"], capture_output=True, text=True)
    expect("--only named", r.returncode == 2 and "--only" in r.stderr and "tensor-cores" in r.stderr, r.stderr)
    r = subprocess.run([MOESIM, "calibrate", "--devices", "0"], capture_output=True, text=True)
    expect("--devices named", r.returncode == 2 and "--devices" in r.stderr, r.stderr)
    r = subprocess.run([MOESIM, "calibrate", "--only", "collectives", "--scenario", "k3-slice-1gpu"], capture_output=True,
                       text=True)
    expect("--scenario needs attention", r.returncode == 2 and "--scenario" in r.stderr, r.stderr)

# Ties in a sweep (docs/sweep.md): on the calibrated 2 x H200 a plan is marked tie_with_best exactly
# when it fits and its step time is within the band's tie_fraction of the best's; CPU offload is an
# axis like any other; on hardware without records nothing is a tie and the band says unvalidated.
import json  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    base = json.load(open("scenarios/calibration/k3-slice-2gpu.json"))
    base["model"] = os.path.join(ROOT, "models/calibration/k3-slice-e28.json")
    base["sweep"] = {"axes": [
        {"path": "/parallel/fsdp/offload", "values": ["none", "optimizer", "parameters"]},
        {"path": "/recompute/policy", "values": ["full", "selective"]},
        {"path": "/swap/enabled", "values": [True, False]}]}
    for hardware, validated in (("h200-x2", True), ("supernode-128", False)):
        base["hardware"] = hardware
        path = os.path.join(tmp, hardware + ".json")
        json.dump(base, open(path, "w"))
        r = subprocess.run([MOESIM, "sweep", path, "--json", "--threads", "2"], capture_output=True, text=True, timeout=600)
        expect("sweep " + hardware, r.returncode == 0, r.stderr[-500:])
        if r.returncode != 0:
            continue
        j = json.loads(r.stdout)
        band = j["error_band"]
        expect("sweep band " + hardware, band["validated"] == validated, str(band))
        fits = [p for p in j["results"] if p["fits"]]
        best = fits[0]["step_time_s"] if fits else 0
        ties = 0
        for p in j["results"]:
            want = validated and p["fits"] and abs(p["step_time_s"] - best) <= band.get("tie_fraction", 0) * best
            expect(f"tie {hardware} {p['config_index']}", p["tie_with_best"] == want, str(p))
            ties += p["tie_with_best"]
        expect("sweep " + hardware + " ties", ties >= (1 if validated else 0) and (validated or ties == 0), str(ties))
        expect("offload axis", any(p["config"].get("/parallel/fsdp/offload") == "optimizer" for p in j["results"]))
        if validated:
            expect("a plan outside the band", any(not p["tie_with_best"] for p in j["results"]), str(j["results"]))
            expect("tie fraction", abs(band["tie_fraction"] - 0.049) < 1e-12, str(band))

# docs/calibration/: links and paths resolve, no internal issue numbers.
calib = os.path.join(ROOT, "docs/calibration")
for name in sorted(os.listdir(calib)):
    if not name.endswith(".md"):
        continue
    text = open(os.path.join(calib, name)).read()
    for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", text):
        if "://" in target:
            continue
        expect(f"{name} link", os.path.exists(os.path.normpath(os.path.join(calib, target))), target)
    for path in re.findall(r"`((?:src|tools|tests|hardware|scenarios|models|docs|bench)/[A-Za-z0-9_./-]+)`", text):
        if any(c in path for c in "*"):
            continue
        expect(f"{name} cites", os.path.exists(os.path.join(ROOT, path.rstrip("/."))), path)
    for m in re.finditer(r"(?i)\bissues? #?\d+|\(#\d+\)", text):
        expect(f"{name} internal issue number", False, m.group(0))

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"guide: {ran} commands ran")
