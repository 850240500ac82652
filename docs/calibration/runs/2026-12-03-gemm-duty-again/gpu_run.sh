#!/usr/bin/env bash
# One device call: the seven 1-GPU calibration scenarios validated with the shipped GEMM tables
# (measured back to back, at the power cap's clocks) and with the duty-0.5 GEMM and grouped-GEMM
# tables of 2026-12-02 (runs/2026-12-02-gemm-duty/results/gemm-duty0.5.json) spliced into this
# call's copy of hardware/calibration/h200.json: the question of 2026-12-02 asked again now that
# the norms and FSDP2's copies of the executor do what the graph says. Binaries: build-gpubin/copies.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}
R=$OUT/results; mkdir -p $R
B=build-gpubin/copies
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv; } > $R/machine.txt 2>&1
cat $R/machine.txt
S="k3-slice-1gpu k3-slice-1gpu-seq12k k3-slice-1gpu-selective llama-8b-slice-1gpu llama-8b-slice-1gpu-chunked qwen3-moe-slice-1gpu qwen3-moe-slice-1gpu-pad"
for s in $S; do
  timeout 150 $B/moesim validate scenarios/calibration/$s.json --json > $R/validate-$s-d1.json 2> $R/validate-$s-d1.err
  echo "validate $s d1 rc=$? ($SECONDS s)"
done
python3 tools/splice_calibration.py docs/calibration/runs/2026-12-02-gemm-duty/results/gemm-duty0.5.json hardware/calibration/h200.json --part kernels/gemm --part kernels/grouped_gemm
for s in $S; do
  timeout 150 $B/moesim validate scenarios/calibration/$s.json --json > $R/validate-$s-d05.json 2> $R/validate-$s-d05.err
  echo "validate $s d05 rc=$? ($SECONDS s)"
done
tar czf $OUT/results.tgz -C $R .
python3 - $R <<'PY'
import glob, json, sys
R = sys.argv[1]
def fam(n):
    if "norm" in n: return "norm"
    if "fsdp" in n or "accumulate" in n: return "fsdp"
    if "cce" in n: return "cce"
    if any(k in n for k in ("sparse", "indexer", "topk", "kv_gather", ".kda", "short_conv", "flash_attention")): return "attn"
    if any(k in n for k in ("proj", "experts", "router", "lora")): return "gemm"
    return "other"
for p in sorted(glob.glob(R + "/validate-*.json")):
    name = p.split("/")[-1][len("validate-"):-len(".json")]
    try:
        d = json.load(open(p))
    except Exception as e:
        print(name, "unreadable:", e); continue
    st = d["step_time"]; sums = {}
    for o in d["ops"]:
        f = fam(o["name"]); m, q = sums.get(f, (0, 0)); sums[f] = (m + o["measured_s"], q + o["predicted_s"])
    T = st["measured_s"]
    print(f"{name}: step {st['error']:+.3f} | " + " | ".join(f"{f} {q/m-1:+.3f} ({m/T:.0%})" for f, (m, q) in sorted(sums.items()) if m > 0))
PY
