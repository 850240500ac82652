#!/usr/bin/env bash
# One device call: the executor's norms by the width the graph gives them (op.k: the hidden size,
# or a head's dimension for Qwen3's QK-norm and KDA's gated output norm), against main's binaries
# (old/: the QK-norm found by name, the KDA gated norm over the whole row) in the same call.
# The executor's GPU tests with the new module, then three 1-GPU calibration scenarios validated
# with each (K3: KDA gated norm; Qwen3-MoE: QK-norm; Llama 8B: plain RMSNorms). Binaries:
# build-gpubin/{old,new} (moesim and libmoesim_gpu.so, stripped), carried.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
R=$OUT/results; mkdir -p $R
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv; } > $R/machine.txt 2>&1
cat $R/machine.txt
for t in test_backend_executor_gpu test_backend_op_kernels_gpu; do
  timeout 240 build-gpubin/new/$t > $R/$t.txt 2>&1; echo "$t rc=$? ($SECONDS s)"; tail -n 3 $R/$t.txt
done
for s in k3-slice-1gpu qwen3-moe-slice-1gpu llama-8b-slice-1gpu; do
  for v in old new; do
    timeout 150 build-gpubin/$v/moesim validate scenarios/calibration/$s.json --json > $R/validate-$s-$v.json 2> $R/validate-$s-$v.err
    echo "validate $s $v rc=$? ($SECONDS s)"
  done
done
python3 - $R <<'PY'
import glob, json, sys
R = sys.argv[1]
print("| scenario | binary | step error | norm ops: measured / predicted ms | norm error |")
print("|---|---|---|---|---|")
for p in sorted(glob.glob(R + "/validate-*.json")):
    name = p.split("/")[-1][len("validate-"):-len(".json")]
    try:
        d = json.load(open(p))
    except Exception as e:
        print(f"| {name} | unreadable: {e} | | | |"); continue
    norms = [o for o in d.get("ops", []) if "norm" in o["name"]]
    m = sum(o["measured_s"] for o in norms); q = sum(o["predicted_s"] for o in norms)
    err = q / m - 1 if m > 0 else float("nan")
    print(f"| {name} | | {d['step_time']['error']:+.3f} | {m*1e3:.2f} / {q*1e3:.2f} | {err:+.3f} |")
    for o in norms:
        print(f"|  | {o['name']} | | {o['measured_s']*1e3:.3f} / {o['predicted_s']*1e3:.3f} | {o['error']:+.3f} |")
PY
