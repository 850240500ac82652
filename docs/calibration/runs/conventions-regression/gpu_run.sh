#!/usr/bin/env bash
# Regression of "the CUDA backend in one set of conventions" (one timer, one set of references and
# test helpers, one BF16 spelling, NVTX ranges, the collectives table in nccl-tests' vocabulary) on
# one or more H200s. Run from the repository root with the build folder as B (a meson build dir,
# or a flat folder of stripped binaries: moesim, libmoesim_gpu.so and the test_* executables).
# Writes everything under $OUT; prints one line per check. Compare with
# docs/calibration/runs/2026-12-01-merged/ (the run before this change): the validate errors and
# the collectives' busbw should agree within run-to-run noise. PARTS picks parts (default: all).
# The mpirun lines take the one-rank-per-process paths only with a build configured -Dmpi=enabled
# (without MPI, mpirun just starts the single-process path).
set -u
PARTS=${PARTS:-"tests validate calibrate nvtx"}
part() { [[ " $PARTS " == *" $1 "* ]]; }
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
B=${B:-build-gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; } > "$OUT/machine.txt" 2>&1
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
MPIRUN=$(command -v mpirun || true)
[ -n "$MPIRUN" ] && export LD_LIBRARY_PATH=$(dirname "$(dirname "$(readlink -f "$MPIRUN")")")/lib:${LD_LIBRARY_PATH:-}
bin() { for d in "$B/tests/backend" "$B/src/backend/cuda/attention" "$B"; do [ -x "$d/$1" ] && { echo "$d/$1"; return; }; done; echo "missing:$1"; }
summary() { grep -E '^\[doctest\] (test cases|assertions)' "$1" | tr -s ' ' | tr '\n' ' '; }

# 1. Tests: every GPU test of the backend (one seed variable: MOESIM_TEST_SEED, printed by each),
#    the new timer test, and the CPU tests this change touches.
part tests && for t in test_backend_kernels_gpu test_backend_op_kernels_gpu test_backend_executor_gpu test_backend_nccl_gpu \
         test_backend_timer_gpu test_attention_kda_gpu test_attention_mla_gpu test_attention_dsa_gpu \
         test_attention_sdpa_gpu test_attention_reference test_backend_reference test_backend_collective_table test_backend_nvtx; do
  timeout 300 "$(bin $t)" > "$OUT/$t.txt" 2>&1; rc=$?
  echo "$t rc=$rc $(summary "$OUT/$t.txt") $(grep -m1 -o 'MOESIM_TEST_SEED=[0-9]*' "$OUT/$t.txt")"
done

# 2. validate: measured vs predicted step time (unchanged by this change; compare with 2026-12-01-merged).
part validate && for s in k3-slice-1gpu llama-8b-slice-1gpu qwen3-moe-slice-1gpu; do
  timeout 180 "$B/moesim" validate $s --json > "$OUT/$s.json" 2> "$OUT/$s.err"; echo "validate $s rc=$?"
done
part validate && [ -n "$MPIRUN" ] && { timeout 180 mpirun -np 1 "$B/moesim" validate k3-slice-1gpu --json > "$OUT/k3_mpi.json" 2> "$OUT/k3_mpi.err"; echo "mpirun validate rc=$?"; }

# 3. calibrate: the GEMM tables (autotuning on the one timer) and the collectives table in
#    nccl-tests' columns (size, count, type, redop, time, algbw, busbw). Collectives need 2 GPUs.
part calibrate && { timeout 400 "$B/moesim" calibrate --quick --only gemm,collectives --out "$OUT/cal.json" > "$OUT/cal.txt" 2>&1; echo "calibrate rc=$?"; }
if part calibrate && [ "$GPUS" -ge 2 ] && [ -n "$MPIRUN" ]; then
  timeout 300 mpirun -np 2 "$B/moesim" calibrate --quick --only collectives --out "$OUT/cal_mpi.json" > "$OUT/cal_mpi.txt" 2>&1
  echo "mpirun -np 2 calibrate rc=$?"
fi
grep -A12 "^NCCL collectives" "$OUT/cal.txt" "$OUT/cal_mpi.txt" 2>/dev/null | head -40

# 4. NVTX: the executor's ranges under Nsight Systems, named as the simulator's trace names ops.
# (On the lent H200 machines nsys is not on PATH: the one seen there, 2026-12-01, is the copy inside
# Nsight Compute, /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys.)
NSYS=${NSYS:-$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys \
  /opt/nvidia/nsight-systems*/bin/nsys /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)}
part nvtx && { "$B/moesim" simulate scenarios/calibration/k3-slice-1gpu.json --trace "$OUT/sim_trace.json" > /dev/null 2>&1; echo "simulate --trace rc=$?"; }
if ! part nvtx; then
  :
elif [ -n "$NSYS" ]; then
  timeout 300 "$NSYS" profile --trace=cuda,nvtx --force-overwrite=true -o "$OUT/k3_nvtx" \
    "$B/moesim" run scenarios/calibration/k3-slice-1gpu.json --trace "$OUT/run_trace.json" > "$OUT/nsys.txt" 2>&1
  echo "nsys profile rc=$?"
  "$NSYS" stats --report nvtx_sum --format csv --force-export=true --output "$OUT/k3_nvtx" "$OUT/k3_nvtx.nsys-rep" > "$OUT/nsys_stats.txt" 2>&1
  echo "nsys stats rc=$?"
else
  echo "nsys not found: NVTX ranges not checked (run_trace.json still written)"
  timeout 300 "$B/moesim" run scenarios/calibration/k3-slice-1gpu.json --trace "$OUT/run_trace.json" > /dev/null 2>&1
fi

python3 - "$OUT" <<'PY'
import csv, glob, json, re, sys
out = sys.argv[1]
for s in ["k3-slice-1gpu", "llama-8b-slice-1gpu", "qwen3-moe-slice-1gpu", "k3_mpi"]:
    try:
        j = json.load(open(f"{out}/{s}.json")); st = j["step_time"]
        print(s, f"measured {st['measured_s']:.4f} s predicted {st['predicted_s']:.4f} s error {100*st['error']:+.1f}%")
    except Exception as e:
        print(s, "unreadable", e)
for f in ["cal.json", "cal_mpi.json"]:
    try:
        c = json.load(open(f"{out}/{f}"))
    except Exception:
        continue
    for kind, by_n in c.get("collectives", {}).items():
        for n, t in by_n.items():
            bad = [x for x in t["samples"] if not {"bytes", "count", "type", "redop", "seconds", "algbw", "busbw"} <= x.keys()]
            f_n = 2 * (int(n) - 1) / int(n) if kind == "all_reduce" else (int(n) - 1) / int(n)
            off = max(abs(x["busbw"] / x["algbw"] / f_n - 1) for x in t["samples"])
            print(f, kind, n, "samples", len(t["samples"]), "missing keys" if bad else "keys ok", f"busbw/algbw vs factor {off:.1e}")
def names(path):
    try:
        return {e["name"] for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"}
    except Exception as e:
        print(path, "unreadable", e); return set()
sim, run = names(f"{out}/sim_trace.json"), names(f"{out}/run_trace.json")
print("trace op names: simulate", len(sim), "run", len(run), "same" if sim == run else f"differ ({len(sim ^ run)})")
for f in glob.glob(f"{out}/k3_nvtx*nvtx_sum*.csv"):
    rows = list(csv.DictReader(open(f)))
    ranges = {r.get("Range", "").split(":", 1)[-1].lstrip(":") for r in rows}
    steps = sorted(r for r in ranges if re.fullmatch(r"(warm-up )?step \d+", r)); micro = sorted(r for r in ranges if r.startswith("micro-batch"))
    ops = ranges - set(steps) - set(micro)
    print("nvtx ranges:", len(ranges), "steps", steps, "micro-batches", micro[:4], "ops", len(ops),
          "all op ranges are trace op names" if ops <= run else f"not in the trace: {sorted(ops - run)[:5]}",
          "every trace op has a range" if run <= ops else f"without a range: {sorted(run - ops)[:5]}")
PY
