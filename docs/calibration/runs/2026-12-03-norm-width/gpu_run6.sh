#!/usr/bin/env bash
# Sixth device call: as the fifth (gpu_run5.sh), with the widening copy's index computed in
# double instead of a 128-bit integer division. FSDP2's copies moving the bytes the graph gives them (copies/:
# exec_kernels::move_bytes, the graph's dp_copy tensors sized by bytes read and written) against
# the fused norm backward's build (fused/, which copied the written bytes' size): executor and
# op-kernel GPU tests with copies/, the three 1-GPU validations with each.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
R=$OUT/results; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv; } > $R/machine.txt 2>&1
cat $R/machine.txt
for t in test_backend_op_kernels_gpu test_backend_executor_gpu; do
  timeout 240 build-gpubin/copies/$t > $R/$t.txt 2>&1; echo "$t rc=$? ($SECONDS s)"; tail -n 3 $R/$t.txt
done
for s in k3-slice-1gpu qwen3-moe-slice-1gpu llama-8b-slice-1gpu; do
  for v in fused copies; do
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
    st = d["step_time"]
    print(f"| {name} | step | {st['measured_s']*1e3:.2f} / {st['predicted_s']*1e3:.2f} | {st['error']:+.3f} |")
    mem = d.get("peak_memory_total", {})
    if mem: print(f"| {name} | peak memory | {mem['measured_bytes']/1e9:.3f} / {mem['predicted_bytes']/1e9:.3f} GB | {mem['error']:+.3f} |")
    for o in d.get("ops", []):
        if "fsdp" in o["name"] or "accumulate" in o["name"]:
            print(f"| {name} | {o['name']} | {o['measured_s']*1e3:.3f} / {o['predicted_s']*1e3:.3f} | {o['error']:+.3f} |")
PY
