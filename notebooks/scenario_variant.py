#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes a variant of a scenario file: a few fields replaced by JSON pointer, nothing else touched.

usage: scenario_variant.py BASE.json OUT.json [--name=NAME] [--keep-sweep] [/pointer=JSON ...]

The variant is written where BASE's relative "model"/"hardware" paths would no longer resolve, so
they are replaced by the shipped names they point to ("../models/kimi-k3-dsa.json" ->
"kimi-k3-dsa"); moesim embeds the shipped files and finds them by name from any folder. The base's
"sweep" block is dropped unless --keep-sweep (a variant is one plan). Each /pointer=JSON sets one
field; the value is JSON ("/parallel/ep=32", "/swap/enabled=false",
'/routing={"distribution": "skewed", "skew": 0.5}'), or a bare word taken as a string
("/recompute/policy=full"). Missing intermediate objects are created. Only run_all.sh uses this.
"""
import json
import os
import sys


def shipped_name(ref):
    """'../models/kimi-k3-dsa.json' -> 'kimi-k3-dsa'; a bare name stays as it is."""
    base = os.path.basename(ref)
    return base[:-5] if base.endswith(".json") else base


def set_pointer(doc, pointer, value):
    """Sets doc at an RFC 6901 JSON pointer, creating missing objects on the way."""
    if not pointer.startswith("/"):
        raise SystemExit(f"scenario_variant: not a JSON pointer: {pointer!r}")
    keys = [k.replace("~1", "/").replace("~0", "~") for k in pointer[1:].split("/")]
    node = doc
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise SystemExit(f"scenario_variant: {pointer}: {key} is not an object")
    node[keys[-1]] = value


def apply_config(doc, config):
    """Applies a sweep result's config ({pointer: value}) to a scenario."""
    for pointer, value in config.items():
        set_pointer(doc, pointer, value)
    return doc


def make_variant(base_path, name=None, keep_sweep=False):
    with open(base_path) as f:
        doc = json.load(f)
    for key in ("model", "hardware"):
        doc[key] = shipped_name(doc[key])
    if not keep_sweep:
        doc.pop("sweep", None)
    if name:
        doc["name"] = name
    return doc


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    if len(args) < 2:
        raise SystemExit(__doc__)
    name = None
    for flag in flags:
        if flag.startswith("--name="):
            name = flag[len("--name="):]
        elif flag != "--keep-sweep":
            raise SystemExit(f"scenario_variant: unknown flag {flag}")
    doc = make_variant(args[0], name, "--keep-sweep" in flags)
    for assignment in args[2:]:
        pointer, _, text = assignment.partition("=")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        set_pointer(doc, pointer, value)
    with open(args[1], "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
