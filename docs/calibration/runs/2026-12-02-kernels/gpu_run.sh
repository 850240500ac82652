#!/usr/bin/env bash
# After the DSA (mma.sync) and KDA (chunked) kernels and capacity padding in the executor, on one
# H200: the attention and executor GPU tests, the attention bench, calibrate --only attention
# spliced into hardware/calibration/h200.json (this run's copy), then validate of the 1-GPU
# calibration scenarios with those tables, dropless and padded Qwen3 alternated. Run from the
# repository root with B a flat folder of stripped binaries; everything lands in one archive
# ($OUT/results.tgz: the device tool returns at most 8 files) and a summary on stdout.
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-gpubin}
OUT=${OUT:-/tmp/out}
R=/tmp/results; rm -rf $R; mkdir -p $R $OUT
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader; } > $R/machine.txt 2>&1
cat $R/machine.txt
pack() { tar czf $OUT/results.tgz -C $R .; }  # after each phase: what is done comes back even if the call is cut
summary() { grep -E '^\[doctest\] (test cases|assertions)' "$1" | tr -s ' ' | tr '\n' ' '; }

for t in test_attention_dsa_gpu test_attention_kda_gpu test_attention_reference test_backend_op_kernels_gpu test_backend_executor_gpu; do
  timeout 300 "$B/$t" > "$R/$t.txt" 2>&1; echo "$t rc=$? $(summary "$R/$t.txt") $(grep -m1 -o 'MOESIM_TEST_SEED=[0-9]*' "$R/$t.txt")"
done

# The next KDA candidate (branch kda-chunked-next, its stripped test and bench carried apart), if carried.
if [ -x gpubin-kda-next/test_attention_kda_gpu ]; then
  timeout 120 gpubin-kda-next/test_attention_kda_gpu > $R/next_test_attention_kda_gpu.txt 2>&1
  echo "kda-next test rc=$? $(summary $R/next_test_attention_kda_gpu.txt)"
  timeout 120 gpubin-kda-next/attention_bench --only kda --out $R/next_bench_kda.md > /dev/null 2>&1; echo "kda-next bench rc=$?"
  timeout 120 gpubin-kda-next/attention_bench --only kda --seq 32768 --out $R/next_bench_kda_32k.md > /dev/null 2>&1
fi
pack
timeout 200 "$B/attention_bench" --only kda --out $R/bench_kda.md > $R/bench_kda.txt 2>&1; echo "bench kda rc=$?"
timeout 200 "$B/attention_bench" --only kda --seq 32768 --out $R/bench_kda_32k.md > $R/bench_kda_32k.txt 2>&1; echo "bench kda 32k rc=$?"
timeout 200 "$B/attention_bench" --only dsa --out $R/bench_dsa.md > $R/bench_dsa.txt 2>&1; echo "bench dsa rc=$?"
# The public reference beside ours: flash-linear-attention's Triton chunk_kda (its source carried
# in .fla; Triton compiles and autotunes on the first calls, inside the timeout).
PYTHONPATH=.fla timeout 150 python3 bench/kda_reference.py --out $R/fla_kda.md > $R/fla_kda.txt 2>&1; echo "fla kda rc=$?"
grep -hE "^\| (kda|dsa|mla|fla)" $R/bench_*.md $R/next_bench_*.md $R/fla_kda.md
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

# Fusions the executor runs in both forms (docs/fusion.md): DSA's fused LI/SFA kernels against
# its unfused stages, and the permute fused into the experts' up-projection against a permute op.
python3 - <<'PY'
import json
for src, dst, key in [("k3-slice-1gpu", "k3-slice-1gpu-unfused-dsa", "dsa"),
                      ("qwen3-moe-slice-1gpu", "qwen3-moe-slice-1gpu-unfused-permute", "permute_gemm")]:
    j = json.load(open(f"scenarios/calibration/{src}.json"))
    j["name"] = dst
    j["fused_ops"][key] = False
    json.dump(j, open(f"scenarios/calibration/{dst}.json", "w"), indent=2)
PY
for s in k3-slice-1gpu k3-slice-1gpu-unfused-dsa qwen3-moe-slice-1gpu qwen3-moe-slice-1gpu-pad qwen3-moe-slice-1gpu-unfused-permute \
         qwen3-moe-slice-1gpu qwen3-moe-slice-1gpu-pad llama-8b-slice-1gpu k3-slice-1gpu k3-slice-1gpu-unfused-dsa; do
  n=$(ls $R | grep -c "^validate-$s\.[0-9]*\.json$")
  timeout 200 "$B/moesim" validate scenarios/calibration/$s.json --json > $R/validate-$s.$n.json 2> $R/validate-$s.$n.err
  echo "validate $s #$n rc=$?"
  pack
done
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/validate-*.json")):
    try:
        j = json.load(open(f)); st = j["step_time"]; m = j["peak_memory_total"]
        print(os.path.basename(f), f"measured {st['measured_s']:.4f} s predicted {st['predicted_s']:.4f} s error {100*st['error']:+.1f}%",
              f"memory error {100*m['error']:+.1f}%" if isinstance(m, dict) and "error" in m else "")
    except Exception as e:
        print(os.path.basename(f), "unreadable", e)
PY
tar czf $OUT/results.tgz -C $R .
