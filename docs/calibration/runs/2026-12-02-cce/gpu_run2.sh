#!/usr/bin/env bash
# Second call: the scenarios not re-validated in the first (gpu_run.sh), now with the CCE table in
# hardware/calibration/h200.json: the K3 slice with selective recompute, at 12,288 tokens, with DSA
# unfused, and the Llama slice with a chunked loss (no CCE: a check that nothing else moved). Once
# each; everything in one archive ($OUT/results-cce2.tgz). Binaries: B (default gpubin).
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-gpubin}
OUT=${OUT:-/tmp/out}
R=/tmp/results-cce2; rm -rf $R; mkdir -p $R $OUT
python3 - <<'PY'
import json
j = json.load(open("scenarios/calibration/k3-slice-1gpu.json"))
j["name"] = "k3-slice-1gpu-unfused-dsa"
j["fused_ops"]["dsa"] = False
json.dump(j, open("scenarios/calibration/k3-slice-1gpu-unfused-dsa.json", "w"), indent=2)
PY
for s in k3-slice-1gpu-selective k3-slice-1gpu-seq12k k3-slice-1gpu-unfused-dsa llama-8b-slice-1gpu-chunked; do
  timeout 120 "$B/moesim" validate scenarios/calibration/$s.json --json > $R/validate-$s.json 2> $R/validate-$s.err
  echo "validate $s rc=$? ($SECONDS s)"
  tar czf $OUT/results-cce2.tgz -C $R .
done
python3 - $R <<'PY'
import glob, json, sys
print("| scenario | measured | predicted | step error | memory error | CCE ops error |")
print("|---|---|---|---|---|---|")
for p in sorted(glob.glob(sys.argv[1] + "/validate-*.json")):
    try:
        j = json.load(open(p))
    except Exception:
        print("|", p, "| no result |"); continue
    st, mem = j["step_time"], j["peak_memory_total"]
    cce = "; ".join(f"{o['name']} {100*o['error']:+.1f}%" for o in j["ops"] if o["name"].startswith("loss.cce"))
    print(f"| {j['scenario']} | {st['measured_s']:.4f} s | {st['predicted_s']:.4f} s | {100*st['error']:+.1f}% | {100*mem['error']:+.1f}% | {cce} |")
PY
