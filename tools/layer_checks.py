"""Per-layer checks against published layer and pipeline-stage times (tests/validation/layers.json), for
tools/published_runs.py: where a source times one layer's (or one pipeline stage's) forward and backward,
the simulator's times of the same ops are compared, which isolates the compute (and the tensor-parallel
communication inside a layer) from the rest of the step.

Each case names a scenario, the rank, the transformer layers (first and last, inclusive; as the trace
numbers them) and the micro-batch to read, and one or more published measures in milliseconds, each the
time those ops occupy the rank: the union of their intervals over all its streams (so a wait between
them, for a pipeline receive or the host, is not counted, and overlapped ops count once):
  fwd         the layers' forward ops
  bwd         their backward ops, recomputed forward ops included (a framework runs them inside its
              backward)
  fwd+bwd     fwd + bwd
  bwd_input   bwd without the deferred weight gradients (`.wgrad`, ZB-H1)
  bwd_weight  the deferred weight-gradient ops (they run apart, in the bubbles)
Pipeline sends and receives are left out (a source's stage times do not count them). The times come from
`moesim simulate SCENARIO --steps 1 --distinct-ranks --trace FILE`.
Python 3 standard library only.
"""
import json
import os
import subprocess
import tempfile

MEASURES = ("fwd", "bwd", "fwd+bwd", "bwd_input", "bwd_weight")
P2P = ("send", "recv")


class LayerCaseError(Exception):
    pass


def load(path):
    with open(path) as f:
        cases = json.load(f)
    seen = set()
    for c in cases:
        for key in ("id", "scenario", "rank", "layers", "micro", "published", "what", "source", "confidence",
                    "assumptions", "deviations"):
            if key not in c:
                raise LayerCaseError(f"{path}: case {c.get('id', '?')} has no '{key}'")
        if c["id"] in seen:
            raise LayerCaseError(f"{path}: duplicate case id {c['id']}")
        seen.add(c["id"])
        first, last = c["layers"]
        if not 0 <= first <= last:
            raise LayerCaseError(f"{path}: case {c['id']}: layers must be [first, last] with first <= last")
        for p in c["published"]:
            if p.get("measure") not in MEASURES or not p.get("ms", 0) > 0:
                raise LayerCaseError(f"{path}: case {c['id']}: each published entry needs a measure "
                                     f"({', '.join(MEASURES)}) and ms > 0")
    return cases


def rank_events(trace, rank):
    """The trace's complete events of `rank` (its process is named 'rank R (program P)')."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    pids = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
            and e["args"]["name"].split(" ")[:2] == ["rank", str(rank)]}
    return [e for e in events if e.get("ph") == "X" and e.get("pid") in pids]


def measure_ms(events, case, measure):
    first, last = case["layers"]
    mine = [e for e in events if first <= e["args"].get("layer", -1) <= last and e["args"].get("micro") == case["micro"]
            and e.get("cat") not in P2P]

    def busy(selected):
        if not selected:
            raise LayerCaseError(f"case {case['id']}: no {measure} ops of layers {first}-{last}, micro-batch "
                                 f"{case['micro']} on rank {case['rank']}")
        total, end = 0.0, float("-inf")
        for start, stop in sorted((e["ts"], e["ts"] + e["dur"]) for e in selected):
            total += max(0.0, stop - max(start, end))
            end = max(end, stop)
        return total / 1e3  # us -> ms

    fwd = [e for e in mine if e["args"].get("phase") == "fwd"]
    bwd = [e for e in mine if e["args"].get("phase") in ("bwd", "recompute")]
    wgrad = [e for e in bwd if e["name"].endswith(".wgrad")]
    if measure == "fwd":
        return busy(fwd)
    if measure == "bwd":
        return busy(bwd)
    if measure == "fwd+bwd":
        return busy(fwd) + busy(bwd)
    if measure == "bwd_input":
        return busy([e for e in bwd if not e["name"].endswith(".wgrad")])
    if not wgrad:
        raise LayerCaseError(f"case {case['id']}: no deferred weight-gradient ops (a schedule that splits them: zb_h1)")
    return busy(wgrad)


def simulate_case(moesim, case, base):
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = os.path.join(tmp, "trace.json")
        proc = subprocess.run([moesim, "simulate", os.path.join(base, case["scenario"]), "--steps", "1",
                               "--distinct-ranks", "--trace", trace_path], capture_output=True, text=True)
        if proc.returncode != 0:
            lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise LayerCaseError(f"case {case['id']}: simulation failed: {lines[-1] if lines else proc.returncode}")
        with open(trace_path) as f:
            events = rank_events(json.load(f), case["rank"])
    rows = []
    for p in case["published"]:
        pred = measure_ms(events, case, p["measure"])
        rows.append({"case": case, "measure": p["measure"], "published": p["ms"], "predicted": pred,
                     "error": (pred - p["ms"]) / p["ms"]})
    return rows


def run(moesim, cases, base, pool):
    """Rows of (case, measure, published ms, predicted ms, error), cases simulated on `pool`."""
    futures = [pool.submit(simulate_case, moesim, c, base) for c in cases]
    return [row for f in futures for row in f.result()]


SECTION = """\
Where a source times one transformer layer, or one pipeline stage, by itself, the simulator's time of the
same ops is compared: the time the layer's (or stage's) forward ops and its backward ops occupy the
named rank (the union of their intervals), one micro-batch, pipeline sends and receives left out (tools/layer_checks.py has the
measures; tests/validation/layers.json the cases, their assumptions and deviations). These isolate the
kernels and the tensor-parallel communication inside a layer from the rest of the step. Error =
(predicted - published) / published; the MAPE is over every measure below (group `layer` of the
ratchet)."""


def section(rows, layer_mape, fmt_pct):
    out = ["## Per-layer checks", "", SECTION, "",
           f"MAPE of the per-layer measures: **{fmt_pct(layer_mape)}** ({len(rows)} measures, "
           f"{len({r['case']['id'] for r in rows})} cases).", "",
           "| case | conf. | what | measure | published ms | predicted ms | error % |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["case"]
        out.append(f"| [{c['id']}]({c['source']['url']}) | {c['confidence']} | {c['what'].replace('|', '/')} | "
                   f"{r['measure']} | {r['published']:.3f} | {r['predicted']:.3f} | {100 * r['error']:+.1f} |")
    out.append("")
    return out
