#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Splice build/tools/fit_efficiency's tables into docs/hardware-efficiency.md.

The page's three tables under "## Fitted curves" (fits, residuals by source, constants) and its
appendix "## Every point" (from the first curve heading to the end of the page) are the tool's
output verbatim; this replaces them and leaves the prose alone.

Usage, from the project root after a build:
    python3 tools/efficiency_page.py [--fit build/tools/fit_efficiency] [--page docs/hardware-efficiency.md] [--check]
--check exits 1 when the page differs from what it would write (nothing is written).
"""
import argparse
import subprocess
import sys

FITS_HEADER = "| hardware | curve | points | sources |"
CONSTANTS_HEADER = "| hardware | field | published | of |"
APPENDIX = "## Every point"


def is_curve_heading(line):
    """The line that opens a curve's table of points in fit_efficiency's --points output."""
    return bool(line) and not line.startswith("|") and "(max " in line and line.endswith(")")


def tool_output(fit):
    """fit_efficiency --points, split into its tables (fits, residuals, constants) and its points."""
    lines = subprocess.run([fit, "--points"], check=True, capture_output=True, text=True).stdout.split("\n")
    first = next(i for i, l in enumerate(lines) if is_curve_heading(l))
    return "\n".join(lines[:first]), lines[first:]


def splice(page, tables, points):
    lines = page.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith(FITS_HEADER))
    constants = next(i for i, l in enumerate(lines) if i > start and l.startswith(CONSTANTS_HEADER))
    end = constants
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    lines[start:end] = tables.strip("\n").split("\n")

    heading = lines.index(APPENDIX)
    # The appendix's prose runs up to its first curve heading.
    first_curve = next(i for i, l in enumerate(lines) if i > heading and is_curve_heading(l))
    lines[first_curve:] = points
    text = "\n".join(lines)
    return text if text.endswith("\n") else text + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", default="build/tools/fit_efficiency")
    ap.add_argument("--page", default="docs/hardware-efficiency.md")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    page = open(a.page, encoding="utf-8").read()
    new = splice(page, *tool_output(a.fit))
    if a.check:
        if new != page:
            print(f"{a.page} is stale: run tools/efficiency_page.py", file=sys.stderr)
            return 1
        return 0
    with open(a.page, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
