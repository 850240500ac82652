#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Copies parts of one calibration file into another (docs/calibration/format.md).

usage: python3 tools/splice_calibration.py FROM.json INTO.json --part kernels/cce [--part attention/kda ...]

Each part is a path of object keys (kernels/cce, attention/kda, attention); FROM's object there
replaces INTO's (created if INTO has none), the rest of INTO is kept as it is, key order included,
so that the diff shows the spliced part only. INTO's provenance gets one `spliced` entry per run:
the parts and FROM's provenance (date, command, GPU, driver, CUDA, cuBLASLt), since the top-level
provenance describes the run the rest of the file came from. INTO's version becomes the larger of
the two files' versions, the lowest that admits both (a part is valid in the version its file has).

A part FROM lacks is an error (exit 2), and nothing is written. Read the result back with the
simulator before committing it: `moesim hardware info hardware/h200-x2.json` (the cost model's
reader; a bad table is an error naming the file and the JSON path).
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="calibration file the parts come from (e.g. calibrate --only loss's output)")
    ap.add_argument("into", help="calibration file to update in place (e.g. hardware/calibration/h200.json)")
    ap.add_argument("--part", action="append", required=True, help="path of object keys, e.g. kernels/cce")
    args = ap.parse_args()
    with open(args.source) as f:
        src = json.load(f)
    with open(args.into) as f:
        dst = json.load(f)
    for key in ("format", "version"):
        if key not in src or key not in dst:
            sys.exit(f"splice_calibration: {args.source if key not in src else args.into} has no '{key}': not a calibration file")
    for part in args.part:
        keys = [k for k in part.split("/") if k]
        node = src
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                print(f"splice_calibration: {args.source} has no /{part}", file=sys.stderr)
                sys.exit(2)
            node = node[k]
        target = dst
        for k in keys[:-1]:
            target = target.setdefault(k, {})
        target[keys[-1]] = node
    prov = src.get("provenance", {})
    entry = {"parts": args.part, "from": args.source}
    for k in ("date", "command", "gpu", "kernel_driver", "driver", "cuda_runtime", "cublas", "only"):
        if k in prov:
            entry[k] = prov[k]
    dst.setdefault("provenance", {}).setdefault("spliced", []).append(entry)
    dst["version"] = max(dst["version"], src["version"])
    with open(args.into, "w") as f:
        json.dump(dst, f, indent=1)
        f.write("\n")
    print(f"spliced {', '.join(args.part)} from {args.source} into {args.into} (version {dst['version']})")


if __name__ == "__main__":
    main()
