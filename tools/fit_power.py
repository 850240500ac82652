#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fits the clock-power relation of hardware files' `device.power` to bench/power_clock_reference.py's
output: board power P = static + sum over data sets of k * c_data * (f / f_max)^exponent, for k busy
SMs at SM clock f. Static power and the exponent are the silicon's and shared; c_data (one busy SM's
power at f_max) depends on how many bits the data switches, so each data set has its own. Least
squares: a scan of the exponent, linear in static and the c's at each.

usage: python3 tools/fit_power.py [--rate] docs/calibration/runs/2026-12-05-power-clock/power_clock_h200.json
With --rate the SM clock is replaced by the kernel's measured rate per busy SM relative to its best
(TFLOP/s per SM): the effective clock, which is what a kernel's time follows. nvidia-smi's clock is a
100 ms average that hides the fast throttling an H100 does at its limit, where the two part
(docs/hardware-efficiency.md, "The step's power state"); points on fewer than 8 SMs, whose per-SM
rate carries the launch overhead, are left out of a --rate fit.
Prints the fit, its residuals per point and the rms, and the clock the fit gives the whole chip of
a training GEMM at lower power limits.
"""
import json
import sys


def solve(rows, ys):
    """Least squares of ys ~ rows (normal equations, Gauss-Jordan; a handful of unknowns)."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * y for r, y in zip(rows, ys))] for i in range(n)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[piv] = a[piv], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def fit(points, f_max):
    sets = sorted({p.get("data", "small") for p in points})
    best = None
    for e100 in range(100, 501):
        e = e100 / 100
        rows = [[1.0] + [p["sms"] * (p["mhz"] / f_max) ** e if p.get("data", "small") == s else 0.0 for s in sets]
                for p in points]
        ys = [p["watts"] for p in points]
        x = solve(rows, ys)
        sse = sum((sum(a * b for a, b in zip(r, x)) - y) ** 2 for r, y in zip(rows, ys))
        if best is None or sse < best[0]:
            best = (sse, e, x, rows)
    sse, e, x, rows = best
    return e, x[0], dict(zip(sets, x[1:])), rows, (sse / len(points)) ** 0.5, x


def main():
    rate = "--rate" in sys.argv[1:]
    result = json.load(open([a for a in sys.argv[1:] if a != "--rate"][0]))
    points = result["points"]
    if rate:
        points = [dict(p) for p in points if p["sms"] >= 8]
        best = max(p["tflops"] / p["sms"] for p in points)
        for p in points:
            p["mhz"] = p["tflops"] / p["sms"] / best  # the effective clock, relative
    f_max = max(p["mhz"] for p in points)
    e, static, c, rows, rms, x = fit(points, f_max)
    top = "the best rate" if rate else f"{f_max:.0f} MHz"
    print(f"exponent {e:.2f}, static power {static:.1f} W, one busy SM at {top}: "
          + ", ".join(f"{k} {v:.3f} W" for k, v in c.items()) + f"; rms {rms:.1f} W over {len(rows)} points")
    print(f"{'data':>7s} {'SMs':>4s} {'MHz':>6s} {'W':>7s} {'fit W':>7s}")
    for p, r in zip(points, rows):
        clock = f"{p['mhz']:6.3f}" if rate else f"{p['mhz']:6.0f}"
        print(f"{p.get('data', 'small'):>7s} {p['sms']:4d} {clock} {p['watts']:7.1f} {sum(a * b for a, b in zip(r, x)):7.1f}")
    for g in [] if rate else result.get("gemm", []):
        # The GEMM's SM power at its limit: what the board draws less the static part.
        dyn = g["watts"] - static
        print(f"{g['name']}: {g['mhz']:.0f} MHz at {g['watts']:.0f} W; at a lower limit L its clock is "
              f"{g['mhz']:.0f} x ((L - {static:.0f}) / {dyn:.0f})^(1/{e:.2f}):")
        for limit in (600, 500, 400, 300):
            print(f"  {limit} W: {g['mhz'] * ((limit - static) / dyn) ** (1 / e):.0f} MHz "
                  f"({((limit - static) / dyn) ** (1 / e):.3f} of the rate)")


if __name__ == "__main__":
    main()
