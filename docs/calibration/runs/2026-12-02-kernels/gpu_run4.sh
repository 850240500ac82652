#!/usr/bin/env bash
# Fourth call: calibrate --only attention now also times the unfused DSA form's own kinds (the
# indexer's score and the key gather, the gather as bytes/s); spliced into this call's copy of
# the calibration, then validate the K3 slice with DSA unfused and fused.
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-gpubin}
OUT=${OUT:-/tmp/out}
R=/tmp/results4; rm -rf $R; mkdir -p $R $OUT
pack() { tar czf $OUT/results4.tgz -C $R .; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader; } > $R/machine.txt 2>&1
timeout 200 "$B/moesim" calibrate --only attention --out $R/attention.json > $R/calibrate.txt 2>&1; echo "calibrate --only attention rc=$?"
grep -E "kv_gather|indexer_score" $R/calibrate.txt | head -20
python3 - $R/attention.json hardware/calibration/h200.json <<'PY'
import json, sys
new = json.load(open(sys.argv[1])); cal = json.load(open(sys.argv[2]))
for kind, table in new.get("attention", {}).items():
    cal["attention"][kind] = table
    print("spliced attention", kind, {d: [round(p[1] / 1e12, 2) for p in t["points"]] for d, t in table.items() if isinstance(t, dict) and "points" in t})
json.dump(cal, open(sys.argv[2], "w"), indent=1)
PY
pack
python3 - <<'PY'
import json
j = json.load(open("scenarios/calibration/k3-slice-1gpu.json"))
j["name"] = "k3-slice-1gpu-unfused-dsa"
j["fused_ops"]["dsa"] = False
json.dump(j, open("scenarios/calibration/k3-slice-1gpu-unfused-dsa.json", "w"), indent=2)
PY
for s in k3-slice-1gpu-unfused-dsa k3-slice-1gpu; do
  timeout 120 "$B/moesim" validate scenarios/calibration/$s.json --json > $R/validate-$s.json 2> $R/validate-$s.err
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); s=j['step_time']; m=j['peak_memory_total']; print(sys.argv[1].split('/')[-1], 'measured %.4f predicted %.4f error %+.1f%% memory %+.1f%%' % (s['measured_s'], s['predicted_s'], 100*s['error'], 100*m['error']))" $R/validate-$s.json || tail -3 $R/validate-$s.err
  pack
done
