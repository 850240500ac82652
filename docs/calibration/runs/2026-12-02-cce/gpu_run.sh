#!/usr/bin/env bash
# The CCE loss table (kernels/cce, docs/calibration/format.md) on one H200: the loss's GPU tests,
# `calibrate --only loss` (the graph's CCE ops through the executor's launches at hidden sizes
# 1024-8192), that table spliced into this call's copy of hardware/calibration/h200.json (the
# tree's copy on the device; the repository's is spliced afterwards, README.md), then `validate`
# of the four 1-GPU scenarios with it, twice each, alternated, and the step predicted without the
# table (`simulate` with the file as it was) for comparison, the executor's GPU test last. Run from
# the repository root with B
# a flat folder of stripped binaries (moesim, libmoesim_gpu.so, test_backend_kernels_gpu,
# test_backend_executor_gpu, test_backend_calibrate_cce); everything lands in one archive
# ($OUT/results-cce.tgz, packed after each phase: the device tool returns at most 8 files) and a
# summary on stdout. Each phase is skipped once 330 s have passed (the call's budget is 6 minutes).
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-gpubin}
OUT=${OUT:-/tmp/out}
R=/tmp/results-cce; rm -rf $R; mkdir -p $R $OUT
pack() { tar czf $OUT/results-cce.tgz -C $R .; }
summary() { grep -E '^\[doctest\] (test cases|assertions)' "$1" | tr -s ' ' | tr '\n' ' '; }
in_time() { [ $SECONDS -lt 330 ] || { echo "skipped (time): $*"; return 1; }; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader; git log -1 --format=%h 2>/dev/null; } > $R/machine.txt 2>&1
cat $R/machine.txt

# 1. Tests: the CCE cases on the CPU (dry launches), the loss kernels against their CPU references
# (cross-entropy, chunked LM head: loss, dh, dW). The executor's own GPU test comes last (6).
run_test() {
  in_time "$1" || return
  timeout "$2" "$B/$1" > "$R/$1.txt" 2>&1; echo "$1 rc=$? $(summary "$R/$1.txt") $(grep -m1 -o 'MOESIM_TEST_SEED=[0-9]*' "$R/$1.txt") ($SECONDS s)"
}
run_test test_backend_calibrate_cce 30
run_test test_backend_kernels_gpu 60
pack

# 2. Calibrate the loss, splice its table into the tree's calibration (the original kept for step 4).
cp hardware/calibration/h200.json hardware/calibration/h200-before.json
python3 -c "import json; h = json.load(open('hardware/h200-x2.json')); h['calibration'] = 'calibration/h200-before.json'; json.dump(h, open('hardware/h200-x2-before.json', 'w'), indent=2)"
SPLICED=0
if in_time calibrate; then
  timeout 150 "$B/moesim" calibrate --only loss --out $R/cce.json > $R/calibrate.txt 2>&1; echo "calibrate --only loss rc=$? ($SECONDS s)"
  python3 tools/splice_calibration.py $R/cce.json hardware/calibration/h200.json --part kernels/cce && SPLICED=1
  cp hardware/calibration/h200.json $R/h200-spliced.json
  "$B/moesim" hardware info hardware/h200-x2.json > $R/hardware-info.txt 2>&1; echo "hardware info with the table rc=$?"
  python3 docs/calibration/make_tables.py $R/cce.json > $R/tables.md 2>&1
  grep -E "^Table the cost model reads" $R/tables.md
fi
pack

# 3. Validate with the spliced table, twice each, alternated (not at all without a table).
SCENARIOS="qwen3-moe-slice-1gpu qwen3-moe-slice-1gpu-pad llama-8b-slice-1gpu k3-slice-1gpu"
[ $SPLICED = 1 ] || echo "no kernels/cce table: validate skipped (see calibrate.txt)"
for run in 0 1; do
  [ $SPLICED = 1 ] || break
  for s in $SCENARIOS; do
    in_time validate $s $run || continue
    timeout 90 "$B/moesim" validate scenarios/calibration/$s.json --json > $R/validate-$s.$run.json 2> $R/validate-$s.$run.err
    echo "validate $s #$run rc=$? ($SECONDS s)"
    pack
  done
done

# 4. The step each scenario's simulator predicted before the table (the calibration as it was).
for s in $SCENARIOS; do
  "$B/moesim" simulate scenarios/calibration/$s.json --hardware hardware/h200-x2-before.json --json > $R/simulate-before-$s.json 2> $R/simulate-before-$s.err
done
pack

# 5. The executor on the GPU (the K3 slice, CCE loss included, keeps the execution contract).
run_test test_backend_executor_gpu 90
pack

# 6. Summary: step time with the table (and before it), the CCE ops measured against predicted.
python3 - $R $SCENARIOS <<'PY'
import glob, json, os, sys
r, scenarios = sys.argv[1], sys.argv[2:]
print("\n| scenario | run | measured step | predicted | error | predicted without the table | error | CCE op: measured / predicted (without the table) ms, error |")
print("|---|---|---|---|---|---|---|---|")
for s in scenarios:
    try:
        sim = json.load(open(f"{r}/simulate-before-{s}.json"))
        before, before_ops = sim["step_time_s"], {o["op"]: o["time_s"] for o in sim["busiest_ops"]}
    except Exception:
        before, before_ops = None, {}
    for path in sorted(glob.glob(f"{r}/validate-{s}.*.json")):
        run = path.split(".")[-2]
        try:
            j = json.load(open(path))
            st = j["step_time"]
        except Exception:
            print(f"| {s} | {run} | no result ({os.path.basename(path)[:-5]}.err) | | | | | |")
            continue
        m = st["measured_s"]
        ops = {o["name"]: o for o in j.get("ops", []) if o["name"].startswith("loss.cce")}
        cells = "; ".join(f"{n} {o['measured_s']*1e3:.1f} / {o['predicted_s']*1e3:.1f} ({before_ops.get(n, 0)*1e3:.1f}) ms, "
                          f"{100*o['error']:+.1f}% ({100*(before_ops.get(n, 0)/o['measured_s']-1):+.1f}%)" for n, o in sorted(ops.items()))
        b = f"{before:.4f} s | {100*(before/m-1):+.1f}%" if before else "? | ?"
        print(f"| {s} | {run} | {m:.4f} s | {st['predicted_s']:.4f} s | {100*st['error']:+.1f}% | {b} | {cells} |")
PY
echo "total ${SECONDS} s"
pack
