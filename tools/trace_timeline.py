#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws the compute streams of a `moesim simulate --trace` file as an SVG timeline.

One row per rank; consecutive compute ops of the same micro-batch and phase merge into one block,
coloured by phase (forward, backward, recompute, optimizer) and labelled with the micro-batch.
Gaps are the time the rank's compute stream waited (pipeline bubble, exposed communication).

    tools/trace_timeline.py TRACE.json OUT.svg [--title TEXT] [--width PIXELS]
"""
import argparse
import json
import sys

COLOURS = {"fwd": "#4c78a8", "bwd": "#54a24b", "recompute": "#f58518", "optimizer": "#9d9d9d"}


def blocks_of(events):
    """Per rank (pid): merged [start, end, phase, micro] blocks of its compute thread."""
    compute_tid = {}
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"]["name"] == "compute":
            compute_tid[e["pid"]] = e["tid"]
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
    rows = {}
    for e in sorted((e for e in events if e.get("ph") == "X"), key=lambda e: (e["pid"], e["ts"])):
        if compute_tid.get(e["pid"]) != e.get("tid"):
            continue
        if e.get("cat") in ("send", "recv"):
            continue
        args = e.get("args", {})
        phase, micro = args.get("phase", "fwd"), args.get("micro", 0)
        start, end = e["ts"], e["ts"] + e["dur"]
        row = rows.setdefault(e["pid"], [])
        if row and row[-1][2] == phase and row[-1][3] == micro and start - row[-1][1] < 1.0:
            row[-1][1] = max(row[-1][1], end)
        else:
            row.append([start, end, phase, micro])
    return rows, names


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--title", default="")
    ap.add_argument("--width", type=int, default=900)
    a = ap.parse_args()
    with open(a.trace) as f:
        t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    rows, names = blocks_of(events)
    if not rows:
        sys.exit("no compute ops in " + a.trace)
    end = max(b[1] for row in rows.values() for b in row)
    left, top, row_h, gap = 110, 28 if a.title else 8, 22, 6
    scale = (a.width - left - 10) / end
    height = top + len(rows) * (row_h + gap) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{a.width}" height="{height}" font-family="sans-serif" font-size="10">']
    out.append(f'<rect width="{a.width}" height="{height}" fill="white"/>')
    if a.title:
        out.append(f'<text x="{left}" y="16" font-size="12">{a.title}</text>')
    for i, pid in enumerate(sorted(rows)):
        y = top + i * (row_h + gap)
        out.append(f'<text x="4" y="{y + row_h * 0.7:.1f}">{names.get(pid, pid).split(" (")[0]}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{end * scale:.1f}" height="{row_h}" fill="#f0f0f0"/>')
        for start, stop, phase, micro in rows[pid]:
            x, w = left + start * scale, max((stop - start) * scale, 0.5)
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h}" fill="{COLOURS.get(phase, "#bbb")}" stroke="white" stroke-width="0.5"/>')
            if w > 9 and phase != "optimizer":
                out.append(f'<text x="{x + w / 2:.1f}" y="{y + row_h * 0.7:.1f}" fill="white" text-anchor="middle">{micro}</text>')
    y = top + len(rows) * (row_h + gap) + 14
    out.append(f'<text x="{left}" y="{y}">0 s</text><text x="{a.width - 10}" y="{y}" text-anchor="end">{end / 1e6:.3f} s</text>')
    x = left + 60
    for phase, colour in COLOURS.items():
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour}"/><text x="{x + 14}" y="{y}">{phase}</text>')
        x += 90
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
