#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/data/bad/: malformed input files, each one mistake away from a shipped file, and
cases.json, the error each must produce (file, JSON path, message fragment).

Run from the project root after a schema change: python3 tests/data/make_bad_inputs.py
The files are committed; the tests read them, they never regenerate them.
"""
import copy
import json
import os

OUT = "tests/data/bad"
cases = []


def load(path):
    with open(path) as f:
        return json.load(f)


def write(name, data, kind, path, message, raw=None, error_file=None):
    """One malformed file: `kind` says which loader reads it (model, hardware, scenario);
    error_file names the file the error is about when it is not this one."""
    os.makedirs(os.path.join(OUT, kind), exist_ok=True)
    rel = f"{kind}/{name}.json"
    with open(os.path.join(OUT, rel), "w") as f:
        f.write(raw if raw is not None else json.dumps(data, indent=2) + "\n")
    cases.append({"file": rel, "kind": kind, "path": path, "message": message, "error_file": error_file or rel})


def mutate(base, fn):
    d = copy.deepcopy(base)
    fn(d)
    return d


model = load("models/kimi-k3.json")
hw = load("hardware/h200-hgx.json")
scenario = load("scenarios/k3-lora-fsdp2-ep64.json")
# Fixtures live two folders below tests/data, so shipped inputs are referenced by name.
scenario["model"] = "kimi-k3-dsa"
scenario["hardware"] = "supernode-128"

# --- models: every error class -----------------------------------------------------------------
def setp(path, value):
    def fn(d):
        node = d
        keys = path.strip("/").split("/")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if value is DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return fn


DELETE = object()

write("zero-experts", mutate(model, setp("/moe/num_experts", 0)), "model", "/moe/num_experts", "must be positive, got 0")
write("topk-too-large", mutate(model, setp("/moe/top_k", 1000)), "model", "/moe/top_k", "must not exceed num_experts (896), got 1000")
write("unknown-key", mutate(model, setp("/moe/num_expert", 896)), "model", "/moe/num_expert", "unknown key")
write("unknown-top-key", mutate(model, setp("/hidden", 1)), "model", "/hidden", "unknown key")
write("missing-key", mutate(model, setp("/hidden_size", DELETE)), "model", "/hidden_size", "missing required key")
write("wrong-type-string", mutate(model, setp("/hidden_size", "7168")), "model", "/hidden_size", "expected an integer, got a string")
write("wrong-type-float", mutate(model, setp("/num_layers", 93.5)), "model", "/num_layers", "expected an integer, got a number")
write("wrong-type-bool", mutate(model, setp("/tie_word_embeddings", "no")), "model", "/tie_word_embeddings", "expected true or false")
write("bad-enum", mutate(model, setp("/activation", "swish")), "model", "/activation", "'swish' is not one of")
write("layer-outside", mutate(model, setp("/layers/overrides/1/layers", "4-96:4")), "model", "/layers/overrides/1/layers", "layer 96 is outside the model (layers 1-93)")
write("layer-syntax", mutate(model, setp("/layers/overrides/1/layers", "4-x")), "model", "/layers/overrides/1/layers", "is not a layer number")
write("layer-zero", mutate(model, setp("/layers/overrides/0/layers", "0")), "model", "/layers/overrides/0/layers", "layer numbers start at 1")
write("unused-block", mutate(model, setp("/gqa", {"num_heads": 8, "num_kv_heads": 8, "head_dim": 64})), "model", "/gqa", "configured but no layer uses it")
write("missing-block", mutate(model, setp("/kda", DELETE)), "model", "/kda", "missing: kda layers need it")
write("negative-width", mutate(model, setp("/dense_ffn/intermediate_size", -1)), "model", "/dense_ffn/intermediate_size", "must be positive, got -1")
write("kda-gate-rank", mutate(model, setp("/kda/output_gate_rank", 64)), "model", "/kda/output_gate_rank", "only applies when output_gate is low_rank")
text = json.dumps(model, indent=2)
write("truncated", None, "model", "", "invalid JSON at line", raw=text[: len(text) // 2])
write("not-json", None, "model", "", "invalid JSON at line 2, column", raw='{\n  "name": kimi\n}\n')
write("duplicate-key", None, "model", "/moe/top_k", "duplicate key 'top_k'",
      raw=text.replace('"top_k": 16,', '"top_k": 16,\n    "top_k": 8,'))
write("not-object", None, "model", "/", "expected an object, got an array", raw="[1, 2]\n")

# --- hardware ---------------------------------------------------------------------------------------
write("negative-bandwidth", mutate(hw, setp("/device/hbm_bandwidth", "-4.8 TB/s")), "hardware", "/device/hbm_bandwidth", "must be positive, got '-4.8 TB/s'")
write("missing-unit", mutate(hw, setp("/device/hbm_capacity", "141")), "hardware", "/device/hbm_capacity", "has no unit")
write("bare-number", mutate(hw, setp("/device/hbm_capacity", 141e9)), "hardware", "/device/hbm_capacity", "expected a quantity with a unit as a string")
write("wrong-dimension", mutate(hw, setp("/device/hbm_bandwidth", "4.8 TB")), "hardware", "/device/hbm_bandwidth", "'TB' is not a unit of bytes/s")
write("bad-unit", mutate(hw, setp("/fabric/scale_up/latency", "2 usec")), "hardware", "/fabric/scale_up/latency", "'usec' is not a unit of seconds")
write("bad-flops-unit", mutate(hw, setp("/device/peak_flops/bf16", "989 TFLOPS")), "hardware", "/device/peak_flops/bf16", "'TFLOPS' is not a unit of FLOP/s")
write("domain-not-nodes", mutate(hw, setp("/fabric/scale_up/domain_size", 12)), "hardware", "/fabric/scale_up/domain_size", "must be a multiple of devices_per_node (8)")
write("tier-span", mutate(hw, setp("/fabric/scale_out/tiers/0/span", 100)), "hardware", "/fabric/scale_out/tiers/0/span", "must be a multiple of the tier below (8)")
write("no-scale-out", mutate(hw, setp("/fabric/scale_out", DELETE)), "hardware", "/max_devices", "required when there is no scale_out")
write("missing-calibration", mutate(hw, setp("/calibration", "calibration/nope.json")), "hardware", "/calibration", "no such file")

# --- scenarios: the plan's consistency checks -----------------------------------------------------
write("degrees-product", mutate(scenario, setp("/parallel/fsdp/shard", 64)), "scenario", "/parallel", "the degrees multiply to 64")
write("ep-not-experts", mutate(scenario, lambda d: (d["parallel"].update(ep=16), d.update(model="mixtral-8x7b"))), "scenario", "/parallel/ep", "must divide mixtral-8x7b's 8 experts, got 16")
write("ep-not-shard", mutate(scenario, lambda d: (d["parallel"]["fsdp"].update(shard=32, replicate=4), d["parallel"].update(ep=64))), "scenario", "/parallel/ep", "must divide fsdp.shard x cp (32)")
write("pp-layers", mutate(scenario, lambda d: (d["parallel"]["fsdp"].update(shard=64), d["parallel"].update(ep=64), d["parallel"]["pp"].update(stages=2), d["batch"].update(global_batch_size=128))), "scenario", "/parallel/pp/stages", "93 layers of kimi-k3-dsa do not split evenly into 2 stages")
write("tp-heads", mutate(scenario, lambda d: (d["parallel"]["fsdp"].update(shard=2), d["parallel"].update(ep=2), d["parallel"]["tp"].update(degree=64))), "scenario", "/parallel/tp/degree", "must divide the 96 MLA heads, got 64")
write("batch-dp", mutate(scenario, setp("/batch/global_batch_size", 100)), "scenario", "/batch/global_batch_size", "must be a multiple of micro_batch_size x dp (1 x 128 = 128), got 100")
# A valid single-node platform (no scale-out, at most 8 devices) for the device-count check.
one_node = mutate(hw, lambda d: (d.update(name="one-node", max_devices=8), d["fabric"].pop("scale_out")))
os.makedirs(os.path.join(OUT, "support"), exist_ok=True)
with open(os.path.join(OUT, "support", "one-node.json"), "w") as f:
    f.write(json.dumps(one_node, indent=2) + "\n")
write("too-many-devices", mutate(scenario, lambda d: (d.update(num_devices=16, hardware="../support/one-node.json"), d["parallel"]["fsdp"].update(shard=16), d["parallel"].update(ep=16))), "scenario", "/num_devices", "exceeds one-node's 8 devices")
write("lora-missing", mutate(scenario, setp("/training/lora", DELETE)), "scenario", "/training/lora", "required when mode is lora")
write("lora-target", mutate(scenario, lambda d: d["training"]["lora"].update(targets=["q_proj", "routed_experts"]) or d.update(model="llama-3.1-405b") or d["parallel"].update(ep=1)), "scenario", "/training/lora/targets/1", "llama-3.1-405b has no routed_experts projection")
write("lora-target-absent", mutate(scenario, lambda d: d["training"]["lora"].update(targets=["q_proj", "q_a_proj"]) or d.update(model="kimi-linear-48b-a3b") or d["parallel"].update(ep=64) or d["fused_ops"].update(dsa=False)), "scenario", "/training/lora/targets/1", "kimi-linear-48b-a3b has no q_a_proj projection")
write("no-fp8", mutate(scenario, setp("/training/precision/compute", "fp8")), "scenario", "/training/precision/compute", "supernode-128 has no fp8 peak")
write("swap-layers", mutate(scenario, setp("/swap/layers", "90-100")), "scenario", "/swap/layers", "layer 100 is outside the model (layers 1-93)")
write("swap-empty", mutate(scenario, setp("/swap/ops", [])), "scenario", "/swap/ops", "name at least one op output")
write("cce-chunk", mutate(scenario, setp("/loss/vocab_chunk", 0)), "scenario", "/loss/vocab_chunk", "must be positive for the cce loss")
write("chunk-on-full", mutate(scenario, lambda d: d.update(loss={"kind": "full", "vocab_chunk": 8192})), "scenario", "/loss/vocab_chunk", "only applies to the cce loss")
write("skew-missing", mutate(scenario, setp("/routing/distribution", "skewed")), "scenario", "/routing/skew", "must be positive for a skewed distribution")
write("fused-kda", mutate(scenario, lambda d: d.update(model="deepseek-v3.2", hardware="h200-hgx") or d["fused_ops"].update(kda=True) or d["training"]["lora"].update(targets=["q_a_proj"]) or d["parallel"].update(ep=64) or d["swap"].update(ops=["expert_gmm_up"])), "scenario", "/fused_ops/kda", "deepseek-v3.2 has no kda layers")
write("missing-model", mutate(scenario, setp("/model", "../nope/model.json")), "scenario", "/model", "no such file")
write("unknown-model-name", mutate(scenario, setp("/model", "kimi-k4")), "scenario", "/model", "'kimi-k4' is not a shipped models name")
write("model-error", mutate(scenario, setp("/model", "../model/zero-experts.json")), "scenario", "/moe/num_experts", "must be positive, got 0", error_file="model/zero-experts.json")
write("sweep-bad-path", mutate(scenario, setp("/sweep", {"axes": [{"path": "/parallel/epp", "values": [32]}]})), "scenario", "/sweep/axes/0/path", "'/parallel/epp' is not a scenario field")
write("sweep-bad-value", mutate(scenario, setp("/sweep", {"axes": [{"path": "/parallel/ep", "values": [32, "64"]}]})), "scenario", "/sweep/axes/0/values/1", "invalid for /parallel/ep")
write("histogram-length", mutate(scenario, lambda d: d.update(routing={"distribution": "histogram", "histogram": "../routing/short-histogram.json"})), "scenario", "/tokens_per_expert", "has 3 entries; the model has 896 experts", error_file="routing/short-histogram.json")
write("seq-cp", mutate(scenario, lambda d: (d["parallel"].update(cp=2), d["parallel"]["fsdp"].update(shard=64), d["parallel"].update(ep=64), d["batch"].update(sequence_length=32767, global_batch_size=64))), "scenario", "/batch/sequence_length", "must be divisible by cp (2)")
write("straggler-rank", mutate(scenario, setp("/stragglers", [{"ranks": [3, 128], "slowdown": 1.2}])), "scenario", "/stragglers/0/ranks/1", "rank 128 is not one of the 128 devices")
write("straggler-speedup", mutate(scenario, setp("/stragglers", [{"ranks": [3], "slowdown": 0.5}])), "scenario", "/stragglers/0/slowdown", "must be >= 1, got 0.5")
write("fragmentation", mutate(scenario, setp("/memory", {"allocator_fragmentation": 1.5})), "scenario", "/memory/allocator_fragmentation", "must be in [0, 1], got 1.5")
write("runtime-unit", mutate(scenario, setp("/memory", {"runtime_reserved": "1 GHz"})), "scenario", "/memory/runtime_reserved", "is not a unit of bytes")

os.makedirs(os.path.join(OUT, "routing"), exist_ok=True)
with open(os.path.join(OUT, "routing", "short-histogram.json"), "w") as f:
    f.write('{"tokens_per_expert": [1, 2, 3]}\n')

with open(os.path.join(OUT, "cases.json"), "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")
print(f"{len(cases)} cases")
