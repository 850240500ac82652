#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets of tests/fuzz/ with clang (ASan + UBSan) and runs each for a bounded
# time, seeded with the shipped inputs. Skips (exit 77) when clang++-14 or its fuzzer runtime is
# absent. From the project root:  tests/fuzz/run.sh [SECONDS_PER_TARGET, default 20] [BUILD_DIR]
set -euo pipefail
seconds=${1:-20}
build=${2:-build-fuzz}
CXX=${CXX:-clang++-14}
command -v "$CXX" >/dev/null || { echo "fuzz: $CXX not found, skipped"; exit 77; }
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' > /tmp/moesim-fuzz-probe.cpp
"$CXX" -fsanitize=fuzzer /tmp/moesim-fuzz-probe.cpp -o /tmp/moesim-fuzz-probe 2>/dev/null ||
  { echo "fuzz: no libFuzzer runtime for $CXX, skipped"; exit 77; }

# The loaders' libraries, built by clang with the sanitizers and coverage instrumentation.
if [ ! -d "$build" ]; then
  CXX="$CXX" CC="${CXX/clang++/clang}" meson setup "$build" -Dcuda=disabled -Dmpi=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false -Dcpp_args=-fsanitize=fuzzer-no-link >/dev/null
fi
libs=(src/graph/libmoesim_graph.a src/plan/libmoesim_plan.a src/scenario/libmoesim_scenario.a
      src/hardware/libmoesim_hardware.a src/model/libmoesim_model.a src/core/libmoesim_core.a)
cost=src/cost/libmoesim_cost.a
trace=src/trace/libmoesim_trace.a
ninja -C "$build" "${libs[@]}" "$cost" "$trace" >/dev/null
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc -I"$build")
names=(model hardware scenario calibration graph trace)
seeds=(models hardware scenarios hardware/calibration tests/data/bad/graph tests/data/bad/trace)
failed=0
for i in 0 1 2 3 4 5; do
  name=${names[$i]}
  exe="$build/fuzz_$name"
  "$CXX" "${flags[@]}" -DMOESIM_FUZZ_LOADER=$((i + 1)) tests/fuzz/fuzz_loader.cpp \
    "$build/$trace" "$build/$cost" "${libs[@]/#/$build/}" $(pkg-config --libs --cflags nlohmann_json 2>/dev/null) -lz -o "$exe"
  corpus="$build/corpus_$name"
  mkdir -p "$corpus"
  find "${seeds[$i]}" -maxdepth 1 -name '*.json' -size -200k -exec cp {} "$corpus"/ \;
  echo "fuzz $name: ${seconds}s"
  if ! "$exe" "$corpus" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
       -dict=tests/fuzz/json.dict -artifact_prefix="$build/fuzz_$name-" >"$build/fuzz_$name.log" 2>&1; then
    echo "fuzz $name: FAILED (see $build/fuzz_$name.log)"; tail -30 "$build/fuzz_$name.log"; failed=1
  fi
  grep -h '^Done' "$build/fuzz_$name.log" || true
done
exit $failed
