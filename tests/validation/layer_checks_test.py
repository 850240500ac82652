"""tools/layer_checks.py: the per-layer measures on hand-built traces (closed forms), and on a simulated
trace, that the measures read the ops the trace names as the layer's.

    python3 tests/validation/layer_checks_test.py MOESIM
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import layer_checks  # noqa: E402

MOESIM = None


def op(pid, name, ts, dur, phase, layer, micro=0, cat="gemm", tid=11):
    return {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name, "cat": cat,
            "args": {"phase": phase, "layer": layer, "micro": micro}}


def trace(events):
    names = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rank 0 (program 0)"}},
             {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "rank 1 (program 1)"}},
             {"ph": "M", "name": "process_name", "pid": 12, "args": {"name": "rank 11 (program 1)"}}]
    return {"traceEvents": names + events}


CASE = {"id": "hand", "rank": 1, "layers": [3, 4], "micro": 1}


class HandBuilt(unittest.TestCase):
    def setUp(self):
        # Rank 1, micro-batch 1, layers 3-4: forward 100..400 us on two streams, a receive before it; backward
        # input gradients 950..1,300 us (a recomputed norm first), weight gradients apart (50 + 70 us); decoys on rank 11 (whose name
        # starts with "rank 1"), on micro-batch 0 and on layer 5.
        ev = [op(2, "pp_recv.activation", 0, 100, "fwd", 3, 1, cat="recv", tid=22),
              op(2, "layer3.q_proj", 100, 50, "fwd", 3, 1),
              op(2, "layer3.tp_all_reduce", 160, 40, "fwd", 3, 1, cat="all_reduce", tid=13),
              op(2, "layer4.up_proj", 250, 150, "fwd", 4, 1),
              op(2, "layer4.attn_norm", 950, 50, "recompute", 4, 1),
              op(2, "layer4.up_proj.bwd", 1000, 200, "bwd", 4, 1),
              op(2, "layer3.q_proj.bwd", 1200, 100, "bwd", 3, 1),
              op(2, "pp_send.gradient", 1300, 500, "bwd", 3, 1, cat="send", tid=22),
              op(2, "layer4.up_proj.wgrad", 5000, 50, "bwd", 4, 1),
              op(2, "layer3.q_proj.wgrad", 9000, 70, "bwd", 3, 1),
              op(2, "layer3.q_proj", 20, 900, "fwd", 3, 0),
              op(2, "layer5.q_proj", 400, 900, "fwd", 5, 1),
              op(12, "layer3.q_proj", 0, 9000, "fwd", 3, 1)]
        self.events = layer_checks.rank_events(trace(ev), 1)

    def ms(self, measure):
        return layer_checks.measure_ms(self.events, CASE, measure)

    def test_rank_by_name_not_prefix(self):
        self.assertEqual(len(self.events), 12)  # rank 11's op is not rank 1's

    def test_forward_busy_time_over_streams_without_p2p(self):
        # 100-150, 160-200 (another stream), 250-400 us: 240 us; the receive before them and the gaps left out.
        self.assertAlmostEqual(self.ms("fwd"), 0.240)

    def test_overlapped_ops_count_once(self):
        overlapped = self.events + [op(2, "layer3.tp_reduce_scatter", 120, 100, "fwd", 3, 1, cat="reduce_scatter", tid=13)]
        self.assertAlmostEqual(layer_checks.measure_ms(overlapped, CASE, "fwd"), 0.270)  # 100-220 (three ops) + 250-400

    def test_backward_spans(self):
        self.assertAlmostEqual(self.ms("bwd_input"), 0.350)  # 950 .. 1,300 us, back to back
        self.assertAlmostEqual(self.ms("bwd"), 0.470)  # and the two weight gradients, not the time between
        self.assertAlmostEqual(self.ms("fwd+bwd"), 0.240 + 0.470)

    def test_weight_gradients_summed(self):
        self.assertAlmostEqual(self.ms("bwd_weight"), 0.120)

    def test_missing_ops_are_an_error(self):
        with self.assertRaises(layer_checks.LayerCaseError):
            layer_checks.measure_ms(self.events, dict(CASE, layers=[7, 7]), "fwd")
        no_wgrad = [e for e in self.events if not e["name"].endswith(".wgrad")]
        with self.assertRaises(layer_checks.LayerCaseError):
            layer_checks.measure_ms(no_wgrad, CASE, "bwd_weight")


class Simulated(unittest.TestCase):
    """The shipped single-GPU case: its layer's forward runs back to back on the compute stream, so the
    forward span is the sum of the layer's forward op times; the ZB-H1 case's weight gradients are the
    `.wgrad` ops the trace has."""

    def simulated(self, scenario):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.json")
            subprocess.run([MOESIM, "simulate", os.path.join(ROOT, "tests", "validation", scenario), "--steps", "1",
                            "--distinct-ranks", "--trace", path], check=True, capture_output=True)
            with open(path) as f:
                return json.load(f)

    def test_single_gpu_forward_is_its_ops(self):
        case = {"id": "te", "rank": 0, "layers": [2, 2], "micro": 0}
        events = layer_checks.rank_events(self.simulated("layers/te-getting-started-1xh100-bf16.json"), 0)
        fwd = [e for e in events if e["args"].get("layer") == 2 and e["args"].get("phase") == "fwd"]
        self.assertGreaterEqual(len(fwd), 10)  # norms, projections, attention, MLP, residual adds
        self.assertAlmostEqual(layer_checks.measure_ms(events, case, "fwd"), sum(e["dur"] for e in fwd) / 1e3, places=6)

    def test_zb_h1_stage_has_deferred_weight_gradients(self):
        case = {"id": "zb", "rank": 1, "layers": [3, 5], "micro": 1}
        events = layer_checks.rank_events(self.simulated("layers/zero-bubble-gpt-1.5b-8xa100.json"), 1)
        wgrad = [e for e in events if e["name"].endswith(".wgrad") and e["args"].get("micro") == 1
                 and 3 <= e["args"].get("layer", -1) <= 5]
        self.assertEqual(len(wgrad), 3 * 6)  # q, k, v, o, up, down of three layers
        self.assertAlmostEqual(layer_checks.measure_ms(events, case, "bwd_weight"), sum(e["dur"] for e in wgrad) / 1e3)
        # Apart, the input gradients and the weight gradients add up to the whole backward.
        self.assertAlmostEqual(layer_checks.measure_ms(events, case, "bwd_input") + layer_checks.measure_ms(events, case, "bwd_weight"),
                               layer_checks.measure_ms(events, case, "bwd"))


if __name__ == "__main__":
    MOESIM = sys.argv.pop(1)
    unittest.main()
