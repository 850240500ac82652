#!/usr/bin/env bash
# One device call: the attention tables of hardware/calibration/h200.json (measured 2026-11-30,
# before the KDA and DSA kernels of 2026-12-02 landed) measured again with main's kernels
# (`calibrate --only attention`), spliced into this call's copy of h200.json, and the three K3
# 1-GPU calibration scenarios validated before and after the splice. Binaries: build-gpubin/copies.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
R=$OUT/results; mkdir -p $R
B=build-gpubin/copies
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv; } > $R/machine.txt 2>&1
cat $R/machine.txt
S="k3-slice-1gpu k3-slice-1gpu-seq12k k3-slice-1gpu-selective"
for s in $S; do
  timeout 150 $B/moesim validate scenarios/calibration/$s.json --json > $R/validate-$s-before.json 2> $R/validate-$s-before.err
  echo "validate $s before rc=$? ($SECONDS s)"
done
timeout 300 $B/moesim calibrate --only attention --out $R/attention.json > $R/calibrate-attention.txt 2>&1
echo "calibrate --only attention rc=$? ($SECONDS s)"
cp hardware/calibration/h200.json $R/h200-before.json
python3 tools/splice_calibration.py $R/attention.json hardware/calibration/h200.json --part attention
cp hardware/calibration/h200.json $R/h200-spliced.json
$B/moesim hardware info hardware/h200-x2.json > $R/hardware-info.txt 2>&1; echo "hardware info rc=$?"
for s in $S; do
  timeout 150 $B/moesim validate scenarios/calibration/$s.json --json > $R/validate-$s-after.json 2> $R/validate-$s-after.err
  echo "validate $s after rc=$? ($SECONDS s)"
done
tar czf $OUT/results.tgz -C $R .
python3 - $R <<'PY'
import glob, json, sys
R = sys.argv[1]
fam = lambda n: ("sparse" if "sparse" in n else "indexer" if "indexer" in n or "topk" in n or "kv_gather" in n
                 else "kda" if ".kda" in n or "short_conv" in n else None)
for p in sorted(glob.glob(R + "/validate-*.json")):
    name = p.split("/")[-1][len("validate-"):-len(".json")]
    try:
        d = json.load(open(p))
    except Exception as e:
        print(name, "unreadable:", e); continue
    st = d["step_time"]; sums = {}
    for o in d["ops"]:
        f = fam(o["name"])
        if f: m, q = sums.get(f, (0, 0)); sums[f] = (m + o["measured_s"], q + o["predicted_s"])
    print(f"{name}: step {st['error']:+.3f} | " + " | ".join(f"{f} {m*1e3:.1f}/{q*1e3:.1f} ms {q/m-1:+.3f}" for f, (m, q) in sorted(sums.items())))
PY
