#!/usr/bin/env bash
# Second call of the kernels run, after landing the kda-chunked-next KDA kernels (measured in the
# first call): their test and bench from this tree's binaries, calibrate --only attention again
# (the KDA table is of the new kernels), then validate the K3 slices on it. Last, with whatever
# device time is left, flash-linear-attention's Triton KDA (its first calls compile and autotune).
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-gpubin}
OUT=${OUT:-/tmp/out}
R=/tmp/results2; rm -rf $R; mkdir -p $R $OUT
pack() { tar czf $OUT/results2.tgz -C $R .; }
summary() { grep -E '^\[doctest\] (test cases|assertions)' "$1" | tr -s ' ' | tr '\n' ' '; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader; } > $R/machine.txt 2>&1
timeout 120 "$B/test_attention_kda_gpu" > $R/test_attention_kda_gpu.txt 2>&1; echo "kda test rc=$? $(summary $R/test_attention_kda_gpu.txt)"
timeout 120 "$B/attention_bench" --only kda --out $R/bench_kda.md > /dev/null 2>&1; echo "bench kda rc=$?"
timeout 120 "$B/attention_bench" --only kda --seq 32768 --out $R/bench_kda_32k.md > /dev/null 2>&1; echo "bench kda 32k rc=$?"
grep -hE "^\| kda" $R/bench_kda*.md
pack
timeout 300 "$B/moesim" calibrate --only attention --out $R/attention.json > $R/calibrate.txt 2>&1; echo "calibrate --only attention rc=$?"
python3 - $R/attention.json hardware/calibration/h200.json <<'PY'
import json, sys
new = json.load(open(sys.argv[1])); cal = json.load(open(sys.argv[2]))
for kind, table in new.get("attention", {}).items():
    cal["attention"][kind] = table
    print("spliced attention", kind, {d: [round(p[1] / 1e12, 1) for p in t["points"]] for d, t in table.items() if isinstance(t, dict) and "points" in t})
json.dump(cal, open(sys.argv[2], "w"), indent=1)
PY
cp hardware/calibration/h200.json $R/h200-spliced.json
pack
python3 - <<'PY'
import json
j = json.load(open("scenarios/calibration/k3-slice-1gpu.json"))
j["name"] = "k3-slice-1gpu-unfused-dsa"
j["fused_ops"]["dsa"] = False
json.dump(j, open("scenarios/calibration/k3-slice-1gpu-unfused-dsa.json", "w"), indent=2)
PY
for s in k3-slice-1gpu k3-slice-1gpu-unfused-dsa k3-slice-1gpu; do
  n=$(ls $R | grep -c "^validate-$s\.[0-9]*\.json$")
  timeout 200 "$B/moesim" validate scenarios/calibration/$s.json --json > $R/validate-$s.$n.json 2> $R/validate-$s.$n.err
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); s=j['step_time']; m=j['peak_memory_total']; print(sys.argv[1].split('/')[-1], 'measured %.4f predicted %.4f error %+.1f%% memory %+.1f%%' % (s['measured_s'], s['predicted_s'], 100*s['error'], 100*m['error']))" $R/validate-$s.$n.json
  pack
done
PYTHONPATH=.fla timeout 240 python3 bench/kda_reference.py --out $R/fla_kda.md > $R/fla_kda.txt 2>&1; echo "fla kda rc=$?"; cat $R/fla_kda.md 2>/dev/null
pack
