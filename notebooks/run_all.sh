#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Writes every file the notebooks read by running moesim, then executes each notebook headless.
#
# usage: notebooks/run_all.sh BUILD/moesim [DATA_DIR]      (DATA_DIR default: BUILD/notebook-data)
#
# (a) DATA_DIR/{sweep,timeline,capacity,whatif}/ get moesim's outputs; the scenario variants they
#     come from are in DATA_DIR/scenarios/ (the shipped default with a few fields changed by
#     notebooks/scenario_variant.py, "model"/"hardware" set to shipped names).
# (b) each notebooks/*.ipynb runs with MOESIM_NOTEBOOK_DATA=DATA_DIR; the executed copies and the
#     figures (DATA_DIR/figures/) stay in DATA_DIR. The notebooks in the tree keep no outputs.
#
# Exit: 0 every moesim run and every notebook cell succeeded; 1 one failed (all notebooks still
# run, the failures are listed); 77 jupyter-nbconvert or a Python package is missing (the meson
# test then counts as skipped; tools/install-deps.sh installs them).
#
# Environment: MOESIM_NOTEBOOK_SWEEP, a sweep scenario to use instead of the small one built here
# (scenarios/k3-sweep.json takes minutes on 2 cores); MOESIM_NOTEBOOK_TOKENS, the capacity
# notebook's token budget (default 1e11).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUILD/moesim [DATA_DIR]" >&2
  exit 2
fi
moesim=$(realpath "$1")
data=$(realpath -m "${2:-$(dirname "$moesim")/notebook-data}")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
base="$here/../scenarios/k3-lora-fsdp2-ep64.json"   # the embedded default, as a file to vary
tokens=${MOESIM_NOTEBOOK_TOKENS:-1e11}
py=/usr/bin/python3   # Debian's python: the one that sees python3-matplotlib & co. (BUILD-NOTES.md)
export PYTHONDONTWRITEBYTECODE=1   # no __pycache__ in the source tree
variant() { "$py" "$here/scenario_variant.py" "$@"; }

# --- prerequisites: skip (77) rather than fail when the notebook tooling is not installed -------
if ! command -v jupyter-nbconvert >/dev/null; then
  echo "run_all: skipped: jupyter-nbconvert not found (apt-get install jupyter-nbconvert)"
  exit 77
fi
if ! "$py" -c 'import nbformat, nbclient, ipykernel, matplotlib, pandas, numpy' 2>/dev/null; then
  echo "run_all: skipped: $py lacks one of nbformat nbclient ipykernel matplotlib pandas numpy"
  exit 77
fi
[ -x "$moesim" ] || { echo "run_all: $moesim is not an executable" >&2; exit 2; }

start=$SECONDS
step() { printf 'run_all: [%3ds] %s\n' $((SECONDS - start)) "$*"; }

# Only what this script writes is removed: DATA_DIR may hold other files.
rm -rf "$data"/{scenarios,sweep,timeline,capacity,whatif,figures}
rm -f "$data"/{strategy_comparison,timeline_and_memory,capacity,what_if}.ipynb
mkdir -p "$data"/{scenarios,sweep,timeline,capacity,whatif,figures}
scen="$data/scenarios"

# --- strategy_comparison: a sweep, then `simulate --json` of the plans it ranks best ------------
# A sweep of the default's plan space small enough for a test (576 configurations, ~100
# simulated): FSDP2 shard x HSDP replicate splits (most products are not 128 devices: rejected),
# EP degree, recompute policy, swap, fused DSA kernels and micro-batch (memory: many do not fit);
# one sampled routing step per configuration.
if [ -n "${MOESIM_NOTEBOOK_SWEEP:-}" ]; then
  sweep_scenario=$(realpath "$MOESIM_NOTEBOOK_SWEEP")
else
  sweep_scenario="$scen/sweep.json"
  variant "$base" "$sweep_scenario" --name=notebook-sweep /routing/num_sampled_steps=1 '/sweep={"axes": [
      {"path": "/parallel/fsdp/shard", "values": [32, 64, 128]},
      {"path": "/parallel/fsdp/replicate", "values": [1, 2, 4]},
      {"path": "/parallel/ep", "values": [16, 32, 64, 128]},
      {"path": "/recompute/policy", "values": ["selective", "full"]},
      {"path": "/swap/enabled", "values": [true, false]},
      {"path": "/fused_ops/dsa", "values": [true, false]},
      {"path": "/batch/micro_batch_size", "values": [1, 2]}]}'
fi
step "sweep $sweep_scenario"
"$moesim" sweep "$sweep_scenario" --json --top 1000000 --threads "$(nproc)" > "$data/sweep/sweep.json"

# The plans whose time breakdown the notebook compares: the Pareto front and the fastest plans that
# fit (at most 5), each the sweep's scenario with the result's config applied.
plan_names=$("$py" - "$here" "$data/sweep/sweep.json" "$sweep_scenario" "$scen" "$data/sweep/plans.json" <<'EOF'
import json, os, sys
sys.path.insert(0, sys.argv[1])
from scenario_variant import apply_config, make_variant
sweep_path, scenario_path, out_dir, manifest_path = sys.argv[2:]
with open(sweep_path) as f:
    sweep = json.load(f)
fitting = sorted((r for r in sweep["results"] if r["fits"]), key=lambda r: r["step_time_s"])
chosen = []
for r in sweep["pareto"] + fitting:
    if r["config_index"] not in [c["config_index"] for c in chosen] and len(chosen) < 5:
        chosen.append(r)
plans = []
for r in chosen:
    name = f"plan-{r['config_index']}"
    doc = apply_config(make_variant(scenario_path, name), r["config"])
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(doc, f, indent=2)
    plans.append({"name": name, "config_index": r["config_index"], "config": r["config"],
                  "on_pareto": any(p["config_index"] == r["config_index"] for p in sweep["pareto"]),
                  "scenario": "scenarios/" + name + ".json", "simulate": name + ".json"})
with open(manifest_path, "w") as f:
    json.dump(plans, f, indent=2)
print(" ".join(p["name"] for p in plans))
EOF
)
for name in $plan_names; do
  step "simulate $name"
  "$moesim" simulate "$scen/$name.json" --json --distinct-ranks > "$data/sweep/$name.json"
done

# --- timeline_and_memory: one plan, every rank simulated (a trace needs more than the -----------
# representatives --distinct-ranks keeps), the first 4 ranks traced, rank 0's memory over time.
step "simulate the default with a trace"
"$moesim" simulate "$base" --json --steps 1 --trace "$data/timeline/trace.json" --trace-ranks 4 \
  --memory-csv "$data/timeline/memory.csv" > "$data/timeline/simulate.json"

# --- capacity: `moesim plan devices` for one token budget at several deadlines, with the global ----
# batch growing with data parallelism (the default) and with it fixed (--fixed-batch).
for days in 1 7 30; do
  for recipe in growing-batch fixed-batch; do
    step "plan devices --tokens $tokens --days $days ($recipe)"
    flag=(); [ "$recipe" = fixed-batch ] && flag=(--fixed-batch)
    "$moesim" plan devices "$base" --tokens "$tokens" --days "$days" "${flag[@]}" --json \
      > "$data/capacity/plan-$recipe-${days}d.json"
  done
done

# --- what_if: what-ifs of the default, each the default with one field changed ----------------------
# slug | group | changes (pointer=JSON ...); the notebook reads groups and changes from the manifest.
# Skew 0 is the default's uniform routing (a skewed distribution needs a positive exponent).
whatifs=(
  "default|baseline|"
  "swap-off|swap|/swap/enabled=false"
  "dsa-unfused|fused ops|/fused_ops/dsa=false"
  "kda-unfused|fused ops|/fused_ops/kda=false"
  "permute-unfused|fused ops|/fused_ops/permute_gemm=false"
  "overlap-off|overlap|/overlap/comm_compute=false"
  "skew-0.5|routing skew|/routing/distribution=\"skewed\" /routing/skew=0.5"
  "skew-1.0|routing skew|/routing/distribution=\"skewed\" /routing/skew=1.0"
  "ep-16|EP degree|/parallel/ep=16"
  "ep-32|EP degree|/parallel/ep=32"
  "ep-128|EP degree|/parallel/ep=128"
)
manifest=()
for entry in "${whatifs[@]}"; do
  IFS='|' read -r slug group changes <<<"$entry"
  read -r -a assignments <<<"$changes"
  variant "$base" "$scen/whatif-$slug.json" --name="whatif-$slug" "${assignments[@]}"
  step "simulate what-if $slug"
  "$moesim" simulate "$scen/whatif-$slug.json" --json --distinct-ranks > "$data/whatif/$slug.json"
  manifest+=("$slug|$group|$changes")
done
printf '%s\n' "${manifest[@]}" | "$py" -c '
import json, sys
base = json.load(open(sys.argv[1]))
def get(doc, pointer):
    for key in pointer[1:].split("/"):
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc
rows = []
for line in sys.stdin.read().splitlines():
    slug, group, changes = line.split("|")
    pairs = [a.partition("=")[::2] for a in changes.split()]
    rows.append({"name": slug, "group": group, "simulate": slug + ".json",
                 "changes": {p: json.loads(v) for p, v in pairs},
                 "default": {p: get(base, p) for p, _ in pairs}})
json.dump(rows, open(sys.argv[2], "w"), indent=2)
' "$base" "$data/whatif/variants.json"

# --- (b) execute the notebooks headless -----------------------------------------------------------
export MOESIM_NOTEBOOK_DATA="$data"
export PYDEVD_DISABLE_FILE_VALIDATION=1   # silences ipykernel's debugger warning
failed=()
for nb in strategy_comparison timeline_and_memory capacity what_if; do
  step "execute $nb.ipynb"
  if ! jupyter-nbconvert --to notebook --execute --ExecutePreprocessor.timeout=300 \
      "$here/$nb.ipynb" --output-dir "$data" --log-level=WARN; then
    failed+=("$nb")
  fi
done
step "done: figures in $data/figures, executed notebooks in $data"
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_all: FAILED: ${failed[*]}" >&2
  exit 1
fi
