#!/usr/bin/env bash
# Fourth device call: as the third (gpu_run3.sh), with prefetch/: the fused backward asking L2 for
# the next row while it computes this one. Kernel tests with prefetch/; microbenchmarks and
# validations with dw/, fused/ and prefetch/ in one call.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
R=$OUT/results; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv; } > $R/machine.txt 2>&1
cat $R/machine.txt
for t in test_backend_kernels_gpu; do
  timeout 240 build-gpubin/prefetch/$t > $R/$t.txt 2>&1; echo "$t rc=$? ($SECONDS s)"; tail -n 3 $R/$t.txt
done
for v in dw fused prefetch; do
  timeout 200 build-gpubin/$v/moesim calibrate --only memory --out $R/memory-$v.json > $R/calibrate-memory-$v.txt 2>&1
  echo "calibrate --only memory $v rc=$? ($SECONDS s)"; grep -i "rmsnorm" $R/calibrate-memory-$v.txt
done
for s in k3-slice-1gpu qwen3-moe-slice-1gpu llama-8b-slice-1gpu; do
  for v in dw fused prefetch; do
    timeout 150 build-gpubin/$v/moesim validate scenarios/calibration/$s.json --json > $R/validate-$s-$v.json 2> $R/validate-$s-$v.err
    echo "validate $s $v rc=$? ($SECONDS s)"
  done
done
tar czf $OUT/results.tgz -C $R .
python3 - $R <<'PY'
import glob, json, sys
R = sys.argv[1]
print("| scenario | op | measured / predicted ms | error |")
print("|---|---|---|---|")
for p in sorted(glob.glob(R + "/validate-*.json")):
    name = p.split("/")[-1][len("validate-"):-len(".json")]
    try:
        d = json.load(open(p))
    except Exception as e:
        print(f"| {name} | unreadable: {e} | | |"); continue
    norms = [o for o in d.get("ops", []) if "norm" in o["name"]]
    m = sum(o["measured_s"] for o in norms); q = sum(o["predicted_s"] for o in norms)
    st = d["step_time"]
    print(f"| {name} | step | {st['measured_s']*1e3:.2f} / {st['predicted_s']*1e3:.2f} | {st['error']:+.3f} |")
    print(f"| {name} | all norms | {m*1e3:.2f} / {q*1e3:.2f} | {q / m - 1:+.3f} |")
    bwd = [o for o in norms if o["name"].endswith(".bwd")]
    mb = sum(o["measured_s"] for o in bwd); qb = sum(o["predicted_s"] for o in bwd)
    print(f"| {name} | norm backwards | {mb*1e3:.2f} / {qb*1e3:.2f} | {qb / mb - 1:+.3f} |")
PY
