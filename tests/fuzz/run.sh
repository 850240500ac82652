#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets of tests/fuzz/ with clang (ASan + UBSan) and runs each for a bounded
# time, seeded with the shipped inputs and the regression inputs of earlier findings. Skips
# (exit 77) when clang++-14 or its fuzzer runtime is absent. A finding fails the run and its input
# is copied to tests/data/fuzz-regressions/TARGET/, which the test fuzz_regressions replays in
# every build (tests/fuzz/README.md). From the project root:
#   tests/fuzz/run.sh [SECONDS_PER_TARGET, default 20] [BUILD_DIR, default build-fuzz] [TARGET...]
set -euo pipefail
seconds=${1:-20}
build=${2:-build-fuzz}
shift $(( $# < 2 ? $# : 2 ))
CXX=${CXX:-clang++-14}
command -v "$CXX" >/dev/null || { echo "fuzz: $CXX not found, skipped"; exit 77; }
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' > /tmp/moesim-fuzz-probe.cpp
"$CXX" -fsanitize=fuzzer /tmp/moesim-fuzz-probe.cpp -o /tmp/moesim-fuzz-probe 2>/dev/null ||
  { echo "fuzz: no libFuzzer runtime for $CXX, skipped"; exit 77; }

# The libraries the targets reach, built by clang with the sanitizers and coverage instrumentation.
if [ ! -d "$build" ]; then
  CXX="$CXX" CC="${CXX/clang++/clang}" meson setup "$build" -Dcuda=disabled -Dmpi=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false -Dcpp_args=-fsanitize=fuzzer-no-link >/dev/null
fi
libs=(src/engine/libmoesim_engine.a src/memory/libmoesim_memory.a src/trace/libmoesim_trace.a
      src/cost/libmoesim_cost.a src/graph/libmoesim_graph.a src/plan/libmoesim_plan.a
      src/scenario/libmoesim_scenario.a src/hardware/libmoesim_hardware.a src/model/libmoesim_model.a
      src/core/libmoesim_core.a)
ninja -C "$build" "${libs[@]}" >/dev/null
flags=(-std=c++20 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -Isrc -I"$build")
json_flags=$(pkg-config --cflags nlohmann_json 2>/dev/null || true)
# targets.cpp once, with coverage instrumentation; then one binary per target.
"$CXX" "${flags[@]}" -fsanitize=fuzzer-no-link $json_flags -c tests/fuzz/targets.cpp -o "$build/fuzz_targets.o"

# Each target and the folders its corpus is seeded from.
declare -A seeds=([model]=models [hardware]=hardware [scenario]="scenarios/calibration scenarios/trace"
                  [calibration]=hardware/calibration [graph]=tests/data/bad/graph [trace]=tests/data/bad/trace)
seeds[simulate]=${seeds[scenario]}
# A fuzzed scenario poses as scenarios/fuzz/fuzz.json (targets.cpp): the scenarios of scenarios/
# name their model and hardware one folder less deep, so their seeds are rewritten to match.
seed_corpus() {
  local name=$1 corpus=$2 dir file
  for dir in ${seeds[$name]}; do
    find "$dir" -maxdepth 1 -name '*.json' -size -200k -exec cp {} "$corpus"/ \;
  done
  if [ "$name" = scenario ] || [ "$name" = simulate ]; then
    for file in scenarios/*.json; do
      [ "$(stat -c %s "$file")" -lt 204800 ] && sed 's#"\.\./#"../../#g' "$file" >"$corpus/$(basename "$file")"
    done
  fi
  return 0
}
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(model hardware scenario calibration graph trace simulate)
failed=0
for name in "${names[@]}"; do
  [ -n "${seeds[$name]:-}" ] || { echo "fuzz: no target named $name"; exit 2; }
  exe="$build/fuzz_$name"
  "$CXX" "${flags[@]}" -fsanitize=fuzzer -DMOESIM_FUZZ_TARGET="\"$name\"" tests/fuzz/fuzz_main.cpp \
    "$build/fuzz_targets.o" "${libs[@]/#/$build/}" -lz -o "$exe"
  corpus="$build/corpus_$name"
  mkdir -p "$corpus"
  seed_corpus "$name" "$corpus"
  # Earlier findings seed the corpus too (libFuzzer writes new inputs to the first folder only).
  regressions="tests/data/fuzz-regressions/$name"
  extra=()
  [ -d "$regressions" ] && extra=("$regressions")
  rm -f "$build/fuzz_$name-"*  # artifacts of an earlier run are not this run's findings
  echo "fuzz $name: ${seconds}s"
  if ! "$exe" "$corpus" "${extra[@]}" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
       -dict=tests/fuzz/json.dict -artifact_prefix="$build/fuzz_$name-" >"$build/fuzz_$name.log" 2>&1; then
    echo "fuzz $name: FAILED (see $build/fuzz_$name.log)"; tail -30 "$build/fuzz_$name.log"; failed=1
    # The finding becomes a regression input: fix the code, keep the file (tests/fuzz/README.md).
    mkdir -p "$regressions"
    for artifact in "$build/fuzz_$name-"*; do
      [ -f "$artifact" ] || continue
      cp "$artifact" "$regressions/${artifact#"$build/fuzz_$name-"}"
      echo "fuzz $name: finding kept as $regressions/${artifact#"$build/fuzz_$name-"}"
    done
  fi
  grep -h '^Done' "$build/fuzz_$name.log" || true
done
exit $failed
