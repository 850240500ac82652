#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Keeps the published-run entries of hardware/validation/error-bands.json equal to the per-run
# errors of docs/validation/published.md (each case's hardware from its scenario in
# tests/validation/). Other entries (the executor validations) are kept as they are.
#   tools/error_bands.py --write    rewrite the file
#   tools/error_bands.py --check    exit 1 when the file differs from the page
import collections
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BANDS = os.path.join(ROOT, "hardware/validation/error-bands.json")
PUBLISHED_BASIS = "published training runs"


def published_runs():
    cases = {c["id"]: c for c in json.load(open(os.path.join(ROOT, "tests/validation/cases.json")))}
    by_hw = collections.defaultdict(list)
    section = None
    for line in open(os.path.join(ROOT, "docs/validation/published.md")):
        if line.startswith("## "):
            section = line[3:].strip()
        if section != "Cases" or not line.startswith("| ["):  # the step-time table only
            continue
        cells = [c.strip() for c in line.split("|")[1:-1]]
        case_id = re.match(r"\[([^\]]+)\]", cells[0]).group(1)
        scenario = json.load(open(os.path.join(ROOT, "tests/validation", cases[case_id]["scenario"])))
        hw = os.path.basename(scenario["hardware"])[: -len(".json")]
        model = os.path.basename(scenario["model"])[: -len(".json")]
        by_hw[hw].append({"run": case_id, "model": model, "step": round(float(cells[7]) / 100, 4)})
    return by_hw


def updated(bands):
    by_hw = published_runs()
    out = dict(bands)
    out["hardware"] = [e for e in bands["hardware"] if not e["basis"].startswith(PUBLISHED_BASIS)]
    for hw in sorted(by_hw):
        out["hardware"].append({
            "names": [hw],
            "basis": PUBLISHED_BASIS + " (step time as published) simulated on " + hw,
            "source": "docs/validation/published.md (tests/validation/cases.json)",
            "runs": sorted(by_hw[hw], key=lambda r: r["run"]),
        })
    return out


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("--write", "--check"):
        sys.exit("usage: tools/error_bands.py --write | --check")
    bands = json.load(open(BANDS))
    text = json.dumps(updated(bands), indent=1) + "\n"
    if sys.argv[1] == "--write":
        open(BANDS, "w").write(text)
        return
    if open(BANDS).read() != text:
        sys.exit(BANDS + " differs from docs/validation/published.md: run tools/error_bands.py --write")
    print("error bands match docs/validation/published.md")


if __name__ == "__main__":
    main()
