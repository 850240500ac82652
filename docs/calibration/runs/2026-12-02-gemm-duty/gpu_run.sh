#!/usr/bin/env bash
# One device call: the GEMM tables measured back to back (--gemm-duty 1, as before) and at a 50%
# duty cycle (--gemm-duty 0.5, idle gaps between calls), with the SM clock and power sampled by
# nvidia-smi (read-only) every 100 ms during both; the duty-0.5 tables spliced into this copy of
# hardware/calibration/h200.json; then every 1-GPU calibration scenario validated with them.
# Everything in one archive ($OUT/results.tgz), repacked after each phase. Binaries: B (gpubin).
set -u
export NCCL_NVLS_ENABLE=0
B=${B:-gpubin}
OUT=${OUT:-/tmp/out}
R=/tmp/results; rm -rf $R; mkdir -p $R $OUT
pack() { tar czf $OUT/results.tgz -C $R .; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv; } > $R/machine.txt 2>&1
cat $R/machine.txt
timeout 60 "$B/test_backend_timer_gpu" > $R/test_timer_gpu.txt 2>&1; echo "timer gpu test rc=$?"; tail -n 2 $R/test_timer_gpu.txt
sample() { nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$1" 2>&1 & echo $!; }
for d in 1 0.5; do
  P=$(sample $R/smi-gemm-duty$d.csv)
  timeout 240 "$B/moesim" calibrate --only gemm --gemm-duty $d --out $R/gemm-duty$d.json > $R/calibrate-duty$d.txt 2> $R/calibrate-duty$d.log
  echo "calibrate --only gemm --gemm-duty $d rc=$? ($SECONDS s)"
  kill $P
  pack
done
cp hardware/calibration/h200.json $R/h200-before.json
python3 tools/splice_calibration.py $R/gemm-duty0.5.json hardware/calibration/h200.json --part kernels/gemm --part kernels/grouped_gemm
cp hardware/calibration/h200.json $R/h200-spliced.json
for s in k3-slice-1gpu k3-slice-1gpu-selective k3-slice-1gpu-seq12k llama-8b-slice-1gpu llama-8b-slice-1gpu-chunked qwen3-moe-slice-1gpu qwen3-moe-slice-1gpu-pad; do
  P=$(sample $R/smi-validate-$s.csv)
  timeout 120 "$B/moesim" validate scenarios/calibration/$s.json --json > $R/validate-$s.json 2> $R/validate-$s.err
  echo "validate $s rc=$? ($SECONDS s)"
  kill $P
  timeout 120 "$B/moesim" validate scenarios/calibration/$s.json > $R/validate-$s.txt 2>&1
  pack
done
python3 - $R <<'PY'
import csv, glob, json, statistics, sys
R = sys.argv[1]
for p in sorted(glob.glob(R + "/smi-*.csv")):
    clocks, watts = [], []
    for row in csv.reader(open(p)):
        try:
            clocks.append(float(row[1])); watts.append(float(row[2]))
        except (ValueError, IndexError):
            pass
    if clocks:
        print(f"{p.split('/')[-1]}: {len(clocks)} samples, SM clock median {statistics.median(clocks):.0f} MHz "
              f"({min(clocks):.0f}-{max(clocks):.0f}), power median {statistics.median(watts):.0f} W")
for d in ("1", "0.5"):
    try:
        g = json.load(open(f"{R}/gemm-duty{d}.json"))["kernels"]["gemm"]["samples"]
        big = [s for s in g if (s["m"], s["n"], s["k"]) == (8192, 12288, 7168)]
        print(f"duty {d}: 8192 x 12288 x 7168 at {big[0]['flops_per_s']/1e12:.1f} TFLOP/s" if big else f"duty {d}: no sample")
    except Exception as e:
        print("duty", d, "no result:", e)
print("| scenario | measured | predicted | step error | memory error |")
print("|---|---|---|---|---|")
for p in sorted(glob.glob(R + "/validate-*.json")):
    try:
        j = json.load(open(p))
    except Exception:
        print("|", p, "| no result |"); continue
    st, mem = j["step_time"], j["peak_memory_total"]
    print(f"| {j['scenario']} | {st['measured_s']:.4f} s | {st['predicted_s']:.4f} s | {100*st['error']:+.1f}% | {100*mem['error']:+.1f}% |")
PY
pack
