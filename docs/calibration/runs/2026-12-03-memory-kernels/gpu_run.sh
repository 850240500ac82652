#!/usr/bin/env bash
# One device call: the executor's short convolution in row tiles (8 channels a thread, each row read
# once), and the Attention Residuals mix, permute and unpermute with 16-byte accesses (after/),
# against main's build (before/): the kernel and executor GPU tests with after/, then the three
# K3 1-GPU scenarios and the Qwen3-MoE one validated with each.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
R=$OUT/results; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv; } > $R/machine.txt 2>&1
cat $R/machine.txt
for t in test_backend_kernels_gpu test_backend_op_kernels_gpu test_backend_executor_gpu; do
  timeout 240 build-gpubin/after/$t > $R/$t.txt 2>&1; echo "$t rc=$? ($SECONDS s)"; tail -n 3 $R/$t.txt
done
for s in k3-slice-1gpu k3-slice-1gpu-seq12k k3-slice-1gpu-selective qwen3-moe-slice-1gpu; do
  for v in before after; do
    timeout 150 build-gpubin/$v/moesim validate scenarios/calibration/$s.json --json > $R/validate-$s-$v.json 2> $R/validate-$s-$v.err
    echo "validate $s $v rc=$? ($SECONDS s)"
  done
done
tar czf $OUT/results.tgz -C $R .
python3 - $R <<'PY'
import glob, json, sys
R = sys.argv[1]
keys = ("short_conv", "unpermute", "_res", "permute_up", "residual")
for p in sorted(glob.glob(R + "/validate-*.json")):
    name = p.split("/")[-1][len("validate-"):-len(".json")]
    try:
        d = json.load(open(p))
    except Exception as e:
        print(name, "unreadable:", e); continue
    st = d["step_time"]
    ops = [o for o in d["ops"] if any(k in o["name"] for k in keys) and "swap" not in o["name"]]
    print(f"{name}: step {st['measured_s']*1e3:.1f} ms {st['error']:+.3f} | " +
          " | ".join(f"{o['name'].replace('layer*.', '')} {o['measured_s']*1e3:.2f}/{o['predicted_s']*1e3:.2f}" for o in ops))
PY
