#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/data/bad/: malformed input files, each one mistake away from a shipped file, and
cases.json, the error each must produce (file, JSON path, message fragment), read by
tests/scenario/test_bad_inputs.cpp and tests/app/cli_test.py; and cli_cases.json, hostile inputs
for the other readers (calibration files, exported graphs, flags), read by cli_test.py only.

Every case has a class: schema (a plain mistake), crash (inputs that used to crash:
deep nesting, products past 64 bits), literal (numbers beyond a double), absurd (values beyond
the physical bounds of docs/limits.md), unbounded (work beyond moesim's limits), location (errors
that used to name the wrong file or path), bound (the largest accepted values: exit 0 where they
are built, exit 2 where the engine's clock refuses the step). cli_test.py wants exit 2, the file and path at the start
of stderr, the message, nothing on stdout, and each run within a time and memory bound.

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


CLASS = "schema"
cli_cases = []


def write(name, data, kind, path, message, raw=None, error_file=None):
    """One malformed file: `kind` says which loader reads it (model, hardware, scenario);
    error_file names the file the error is about when it is not this one."""
    os.makedirs(os.path.join(OUT, kind), exist_ok=True)
    rel = f"{kind}/{name}.json"
    with open(os.path.join(OUT, rel), "w") as f:
        f.write(raw if raw is not None else json.dumps(data, indent=2) + "\n")
    cases.append({"file": rel, "kind": kind, "class": CLASS, "path": path, "message": message,
                  "error_file": error_file or rel})


def write_support(rel, data=None, raw=None):
    os.makedirs(os.path.dirname(os.path.join(OUT, rel)), exist_ok=True)
    with open(os.path.join(OUT, rel), "w") as f:
        f.write(raw if raw is not None else json.dumps(data, indent=2) + "\n")


def cli(name, args, error, message, klass):
    """A command line that must fail with exit 2: stderr starts with `error` (the file and JSON path
    or the flag) and holds `message`; files are named relative to tests/data/bad/."""
    cli_cases.append({"name": name, "class": klass, "args": args, "error": error, "message": message})


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
write("parallel-block-moe", mutate(model, setp("/parallel_block", True)), "model", "/parallel_block", "needs dense FFN layers")
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
write("collective-scale-out-above-one", mutate(hw, setp("/efficiency/collective_scale_out", 1.2)), "hardware", "/efficiency/collective_scale_out", "must be in [0.01, 1]")
write("attention-backward-no-max", mutate(hw, setp("/efficiency/attention_backward/max", DELETE)), "hardware", "/efficiency/attention_backward/max", "required")
POWER = {"limit": "500 W", "efficiency_limit": "700 W", "static_power": "100 W", "clock_exponent": 2.5}
write("power-above-measured", mutate(hw, setp("/device/power", dict(POWER, limit="750 W"))), "hardware", "/device/power/limit", "exceeds efficiency_limit (700 W)")
write("power-static-above-limit", mutate(hw, setp("/device/power", dict(POWER, static_power="500 W"))), "hardware", "/device/power/static_power", "must be below limit (500 W)")
write("power-wrong-unit", mutate(hw, setp("/device/power", dict(POWER, limit="500 J"))), "hardware", "/device/power/limit", "'J' is not a unit of watts")
write("power-exponent-absurd", mutate(hw, setp("/device/power", dict(POWER, clock_exponent=0.5))), "hardware", "/device/power/clock_exponent", "must be in [1, 4]")
DYNAMIC = {"gemm": "945 W", "attention": "650 W", "memory": "395 W"}
write("power-dynamic-without-idle", mutate(hw, setp("/device/power", dict(POWER, dynamic_power=DYNAMIC))), "hardware", "/device/power/idle_power", "required with dynamic_power")
write("power-idle-without-dynamic", mutate(hw, setp("/device/power", dict(POWER, idle_power="130 W"))), "hardware", "/device/power/dynamic_power", "required with idle_power")
write("power-idle-above-limit", mutate(hw, setp("/device/power", dict(POWER, idle_power="600 W", dynamic_power=DYNAMIC))), "hardware", "/device/power/idle_power", "must be below limit (500 W)")
write("power-dynamic-class-missing", mutate(hw, setp("/device/power", dict(POWER, idle_power="130 W", dynamic_power={"gemm": "945 W", "attention": "650 W"}))), "hardware", "/device/power/dynamic_power/memory", "missing required key")

# --- scenarios: the plan's consistency checks -----------------------------------------------------
write("degrees-product", mutate(scenario, setp("/parallel/fsdp/shard", 64)), "scenario", "/parallel", "the degrees multiply to 64")
write("ep-not-experts", mutate(scenario, lambda d: (d["parallel"].update(ep=16), d.update(model="mixtral-8x7b"))), "scenario", "/parallel/ep", "must divide mixtral-8x7b's 8 experts, got 16")
write("ep-not-shard", mutate(scenario, lambda d: (d["parallel"]["fsdp"].update(shard=32, replicate=4), d["parallel"].update(ep=64))), "scenario", "/parallel/ep", "must divide fsdp.shard x cp (32)")
write("pp-layers", mutate(scenario, lambda d: (d["parallel"]["fsdp"].update(shard=64), d["parallel"].update(ep=64), d["parallel"]["pp"].update(stages=2), d["batch"].update(global_batch_size=128))), "scenario", "/parallel/pp/stages", "93 layers of kimi-k3-dsa do not split evenly into 2 stages")
write("dualpipe-stages", mutate(scenario, lambda d: d["parallel"]["pp"].update(schedule="dualpipe")), "scenario", "/parallel/pp/stages", "dualpipe pairs stage s with stage p-1-s: needs an even number of stages, got 1")
write("dualpipe-micro", mutate(scenario, lambda d: (d["parallel"]["fsdp"].update(shard=64), d["parallel"].update(ep=64), d["parallel"]["pp"].update(stages=2, schedule="dualpipe", layers_per_chunk=[47, 46]), d["batch"].update(global_batch_size=128))), "scenario", "/batch/global_batch_size", "dualpipe needs an even micro-batch count of at least 2 x stages (4), got 2")
write("placement-twice", mutate(scenario, lambda d: d["parallel"].update(placement=["tp", "shard", "shard", "replicate", "pp"])), "scenario", "/parallel/placement", "must name each of tp, cp, shard, replicate, pp once; cp appears 0 times")
write("tp-comm-overlap-no-sp", mutate(scenario, lambda d: (d["parallel"]["fsdp"].update(shard=32), d["parallel"].update(ep=32), d["parallel"]["tp"].update(degree=4, sequence_parallel=False, comm_overlap="chunked"))), "scenario", "/parallel/tp/comm_overlap", "needs /parallel/tp/sequence_parallel")
write("tp-comm-overlap-kind", mutate(scenario, lambda d: d["parallel"]["tp"].update(comm_overlap="async")), "scenario", "/parallel/tp/comm_overlap", "none")
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
write("quantization-bf16", mutate(scenario, setp("/training/precision/quantization", "rowwise")), "scenario", "/training/precision/quantization", "applies to compute of 8 bits or fewer; compute is bf16")
write("quantization-kind", mutate(scenario, setp("/training/precision/quantization", "delayed")), "scenario", "/training/precision/quantization", "delayed")
write("weight-cache-bf16", mutate(scenario, setp("/training/precision/cache_quantized_weights", True)), "scenario", "/training/precision/cache_quantized_weights", "applies to compute of 8 bits or fewer")
write("swap-layers", mutate(scenario, setp("/swap/layers", "90-100")), "scenario", "/swap/layers", "layer 100 is outside the model (layers 1-93)")
write("swap-empty", mutate(scenario, setp("/swap/ops", [])), "scenario", "/swap/ops", "name at least one op output")
write("offload-ddp", mutate(scenario, lambda d: d["parallel"]["fsdp"].update(zero_stage=0, offload="optimizer")), "scenario", "/parallel/fsdp/offload", "offload optimizer needs a sharded optimizer (zero_stage 1-3)")
write("offload-parameters-zero2", mutate(scenario, lambda d: d["parallel"]["fsdp"].update(zero_stage=2, offload="parameters")), "scenario", "/parallel/fsdp/offload", "offload parameters needs zero_stage 3")
write("offload-kind", mutate(scenario, setp("/parallel/fsdp/offload", "gradients")), "scenario", "/parallel/fsdp/offload", "gradients")
write("overlap-grad-reduce-every-micro-batch", mutate(scenario, lambda d: d["parallel"]["fsdp"].update(gradient_sync="every_micro_batch", overlap_grad_reduce=False)), "scenario", "/parallel/fsdp/overlap_grad_reduce", "gradient_sync resolves to every_micro_batch")
write("overlap-param-gather-fsdp2", mutate(scenario, lambda d: d["parallel"]["fsdp"].update(overlap_param_gather=False)), "scenario", "/parallel/fsdp/overlap_param_gather", "only zero_stage 1-2")
write("prefetch-zero1", mutate(scenario, lambda d: d["parallel"]["fsdp"].update(zero_stage=1, prefetch=2)), "scenario", "/parallel/fsdp/prefetch", "only the default 1 is accepted")
write("cce-chunk", mutate(scenario, setp("/loss/vocab_chunk", 0)), "scenario", "/loss/vocab_chunk", "must be positive for the cce loss")
write("chunk-on-full", mutate(scenario, lambda d: d.update(loss={"kind": "full", "vocab_chunk": 8192})), "scenario", "/loss/vocab_chunk", "only applies to the cce loss")
write("skew-missing", mutate(scenario, setp("/routing/distribution", "skewed")), "scenario", "/routing/skew", "must be positive for a skewed distribution")
write("fused-kda", mutate(scenario, lambda d: d.update(model="deepseek-v3.2", hardware="h200-hgx") or d["fused_ops"].update(kda=True) or d["training"]["lora"].update(targets=["q_a_proj"]) or d["parallel"].update(ep=64) or d["swap"].update(ops=["expert_gmm_up"])), "scenario", "/fused_ops/kda", "deepseek-v3.2 has no kda layers")
write("attention-kernel-absent", mutate(scenario, lambda d: d["fused_ops"].update(attention_kernel="flash2")), "scenario", "/fused_ops/attention_kernel", "has no efficiency.attention_kernels.flash2 curves")
llama = load("tests/validation/scenarios/torchtitan-llama31-8b-8xh100-fsdp.json")
llama.update(model="llama-3.1-8b", hardware="h100-hgx")
write("attention-kernel-unfused", mutate(llama, lambda d: d["fused_ops"].update(flash_attention=False, attention_kernel="flash2")), "scenario", "/fused_ops/attention_kernel", "fused_ops.flash_attention is false")
write("gate-up-selective-op", mutate(llama, lambda d: d["fused_ops"].update(gate_up="fused") or d["recompute"].update(policy="selective_op")), "scenario", "/fused_ops/gate_up", "saves every second matmul's output")
write("gate-up-ungated", mutate(llama, lambda d: d.update(model="gpt3-175b") or d["fused_ops"].update(gate_up="apart")), "scenario", "/fused_ops/gate_up", "gpt3-175b has no gated dense FFN or shared experts")
write("missing-model", mutate(scenario, setp("/model", "../nope/model.json")), "scenario", "/model", "no such file")
write("unknown-model-name", mutate(scenario, setp("/model", "kimi-k4")), "scenario", "/model", "'kimi-k4' is not a shipped models name")
write("model-error", mutate(scenario, setp("/model", "../model/zero-experts.json")), "scenario", "/moe/num_experts", "must be positive, got 0", error_file="model/zero-experts.json")
write("sweep-bad-path", mutate(scenario, setp("/sweep", {"axes": [{"path": "/parallel/epp", "values": [32]}]})), "scenario", "/sweep/axes/0/path", "'/parallel/epp' is not a scenario field")
write("sweep-bad-value", mutate(scenario, setp("/sweep", {"axes": [{"path": "/parallel/ep", "values": [32, "64"]}]})), "scenario", "/sweep/axes/0/values/1", "invalid for /parallel/ep")
write("histogram-length", mutate(scenario, lambda d: d.update(routing={"distribution": "histogram", "histogram": "../routing/short-histogram.json"})), "scenario", "/tokens_per_expert", "has 3 entries; the model has 896 experts", error_file="routing/short-histogram.json")
write("seq-cp", mutate(scenario, lambda d: (d["parallel"].update(cp=2), d["parallel"]["fsdp"].update(shard=64), d["parallel"].update(ep=64), d["batch"].update(sequence_length=32767, global_batch_size=64))), "scenario", "/batch/sequence_length", "must be divisible by cp (2)")
write("straggler-rank", mutate(scenario, setp("/stragglers", [{"ranks": [3, 128], "slowdown": 1.2}])), "scenario", "/stragglers/0/ranks/1", "rank 128 is not one of the 128 devices")
write("straggler-speedup", mutate(scenario, setp("/stragglers", [{"ranks": [3], "slowdown": 0.5}])), "scenario", "/stragglers/0/slowdown", "must be in [1, 1000], got 0.5")
write("fragmentation", mutate(scenario, setp("/memory", {"allocator_fragmentation": 1.5})), "scenario", "/memory/allocator_fragmentation", "must be in [0, 1], got 1.5")
write("runtime-unit", mutate(scenario, setp("/memory", {"runtime_reserved": "1 GHz"})), "scenario", "/memory/runtime_reserved", "is not a unit of bytes")
write("host-issue-negative", mutate(scenario, setp("/host", {"op_issue": "-5 us"})), "scenario", "/host/op_issue", "must be in [0, 1]")
write("host-issue-unit", mutate(scenario, setp("/host", {"op_issue": "5 GB"})), "scenario", "/host/op_issue", "is not a unit of seconds")
write("host-kernel-issue-negative", mutate(scenario, setp("/host", {"op_issue": "200 us", "kernel_issue": "-2 us"})), "scenario", "/host/kernel_issue", "must be in [0, 1]")
write("host-kernel-issue-unit", mutate(scenario, setp("/host", {"kernel_issue": 0.00002})), "scenario", "/host/kernel_issue", "expected a quantity with a unit as a string")
write("devices-per-token-over-ep", mutate(scenario, setp("/routing/devices_per_token", 65)), "scenario", "/routing/devices_per_token", "must be at most parallel.ep (64), got 65")
write("devices-per-token-too-few", mutate(scenario, setp("/routing/devices_per_token", 1)), "scenario", "/routing/devices_per_token", "holds 14 experts, fewer than top_k (16)")
write("two-routing-limits", mutate(scenario, lambda d: d["routing"].update(nodes_per_token=1, devices_per_token=2)), "scenario", "/routing/devices_per_token", "only one of groups_per_token, nodes_per_token and devices_per_token")
write("capacity-zero", mutate(scenario, setp("/routing/capacity_factor", 0)), "scenario", "/routing/capacity_factor", "must be positive, got 0")
write("capacity-text", mutate(scenario, setp("/routing/capacity_factor", "1.25")), "scenario", "/routing/capacity_factor", "expected a number")
write("capacity-policy-alone", mutate(scenario, setp("/routing/capacity_policy", "pad")), "scenario", "/routing/capacity_policy", "only applies with a capacity_factor")
write("capacity-policy-kind", mutate(scenario, lambda d: d["routing"].update(capacity_factor=1.0, capacity_policy="trim")), "scenario", "/routing/capacity_policy", "trim")
write("bias-speed-negative", mutate(scenario, setp("/routing/bias_update_speed", -1)), "scenario", "/routing/bias_update_speed", "must be in [0, 10], got -1")

os.makedirs(os.path.join(OUT, "routing"), exist_ok=True)
with open(os.path.join(OUT, "routing", "short-histogram.json"), "w") as f:
    f.write('{"tokens_per_expert": [1, 2, 3]}\n')

# --- hostile inputs, by class ------------------------------------------------------------
DEPTH = 128  # src/core/limits.hpp kMaxJsonDepth
model_text = json.dumps(model, indent=2)
hw_text = json.dumps(hw, indent=2)
scenario_text = json.dumps(scenario, indent=2)


def replace_once(text, old, new):
    assert text.count(old) == 1, old
    return text.replace(old, new)


CLASS = "crash"
deep = "[" * 30000 + "]" * 30000
write("deep-array", None, "model", "/name" + "/0" * (DEPTH - 1), "nested more than 128 levels deep",
      raw=replace_once(model_text, '"name": "kimi-k3"', '"name": ' + deep))
write("deep-object", None, "hardware", "/doc" + "/a" * (DEPTH - 1), "nested more than 128 levels deep",
      raw=replace_once(hw_text, '"name": "h200-hgx"', '"name": "h200-hgx", "doc": ' + '{"a": ' * 20000 + "1" + "}" * 20000))
write("deep-sweep-value", None, "scenario", "/sweep/axes/0/values/0" + "/0" * (DEPTH - 5), "nested more than 128 levels deep",
      raw=scenario_text[:-2] + ', "sweep": {"axes": [{"path": "/parallel/ep", "values": [' + deep + ']}]}\n}\n')
write("deep-unclosed", None, "scenario", "/0" * DEPTH, "nested more than 128 levels deep", raw="[" * 100000)
write("pp-chunks-overflow", mutate(scenario, lambda d: (d["parallel"]["pp"].update(stages=16, schedule="interleaved_1f1b", virtual_stages=1024), d["parallel"]["fsdp"].update(shard=8), d["parallel"].update(ep=8))), "scenario", "/parallel/pp/virtual_stages", "stages x virtual_stages (model chunks) exceeds 10000")
write("virtual-stages-2p62", mutate(scenario, lambda d: d["parallel"]["pp"].update(stages=1, schedule="interleaved_1f1b", virtual_stages=2**62)), "scenario", "/parallel/pp/virtual_stages", "must be in (0, 1024], got 4611686018427387904")
write("degrees-overflow", mutate(scenario, lambda d: (d["parallel"]["fsdp"].update(shard=2**20, replicate=2**20), d["parallel"]["tp"].update(degree=2**20), d["parallel"].update(cp=2**20))), "scenario", "/parallel", "the product of the parallel degrees exceeds 1048576")
write("micro-dp-overflow", mutate(scenario, setp("/batch/micro_batch_size", 2**30)), "scenario", "/batch/micro_batch_size", "micro_batch_size x dp exceeds 1073741824")
write("global-batch-2p62", mutate(scenario, setp("/batch/global_batch_size", 2**62)), "scenario", "/batch/global_batch_size", "must be in (0, 1073741824], got 4611686018427387904")
write("tokens-per-step", mutate(scenario, lambda d: d["batch"].update(global_batch_size=2**30, sequence_length=2**26)), "scenario", "/batch/global_batch_size", "tokens per step (global_batch_size x sequence_length) exceeds 1099511627776")
write("int64-max-plus-one", None, "model", "/hidden_size", "integer 9223372036854775808 is too large",
      raw=replace_once(model_text, '"hidden_size": 7168', '"hidden_size": 9223372036854775808'))
write("uint64-overflow", None, "model", "/hidden_size", "expected an integer, got a number",
      raw=replace_once(model_text, '"hidden_size": 7168', '"hidden_size": 99999999999999999999999'))

CLASS = "literal"
write("number-1e400", None, "model", "/hidden_size", "the number 1e400 is beyond the range of a double",
      raw=replace_once(model_text, '"hidden_size": 7168', '"hidden_size": 1e400'))
write("number-1e400-top", None, "model", "/", "the number 1e400 is beyond the range of a double", raw="1e400\n")
write("number-neg-1e400", None, "model", "/moe/top_k", "the number -1e400 is beyond the range of a double",
      raw=replace_once(model_text, '"top_k": 16', '"top_k": -1e400'))
write("number-1e400-half-at", None, "hardware", "/efficiency/gemm/half_at", "beyond the range of a double",
      raw=replace_once(hw_text, '"half_at": ' + json.dumps(hw["efficiency"]["gemm"]["half_at"]), '"half_at": 1e400'))
write("number-1e400-seed", None, "scenario", "/routing/seed", "beyond the range of a double",
      raw=replace_once(scenario_text, '"seed": ' + json.dumps(scenario["routing"]["seed"]), '"seed": 1e400'))
write("number-1e400-array", None, "scenario", "/stragglers/0/ranks/1", "beyond the range of a double",
      raw=scenario_text[:-2] + ', "stragglers": [{"ranks": [3, 1e400], "slowdown": 1.5}]\n}\n')
write("number-1e400-sweep", None, "scenario", "/sweep/axes/0/values/1", "beyond the range of a double",
      raw=scenario_text[:-2] + ', "sweep": {"axes": [{"path": "/routing/skew", "values": [0, 1e400]}]}\n}\n')
write("quantity-1e308-tbs", mutate(hw, setp("/device/hbm_bandwidth", "1e308 TB/s")), "hardware", "/device/hbm_bandwidth", "'1e308 TB/s' is beyond the range of a double")
write("quantity-1e400", mutate(hw, setp("/device/hbm_capacity", "1e400 GB")), "hardware", "/device/hbm_capacity", "is not a quantity")
write_support("routing/overflow-histogram.json", raw='{"tokens_per_expert": [1, 2, 3, 1e400]}\n')
write("histogram-1e400", mutate(scenario, lambda d: d.update(routing={"distribution": "histogram", "histogram": "../routing/overflow-histogram.json"})), "scenario", "/tokens_per_expert/3", "beyond the range of a double", error_file="routing/overflow-histogram.json")
write_support("routing/huge-histogram.json", {"tokens_per_expert": [1e300] + [1] * 895})
write("histogram-1e300", mutate(scenario, lambda d: d.update(routing={"distribution": "histogram", "histogram": "../routing/huge-histogram.json"})), "scenario", "/tokens_per_expert/0", "must be in [0, 1e+15], got 1e+300", error_file="routing/huge-histogram.json")

CLASS = "absurd"
write("hidden-2p63", mutate(model, setp("/hidden_size", 2**63 - 1)), "model", "/hidden_size", "must be in (0, 1048576], got 9223372036854775807")
write("experts-2p40", mutate(model, setp("/moe/num_experts", 2**40)), "model", "/moe/num_experts", "must be in (0, 1048576], got 1099511627776")
write("layers-2p40", mutate(model, setp("/num_layers", 2**40)), "model", "/num_layers", "must be in (0, 10000], got 1099511627776")
write("vocab-2p40", mutate(model, setp("/vocab_size", 2**40)), "model", "/vocab_size", "must be in (0, 16777216], got 1099511627776")
write("heads-2p40", mutate(model, setp("/mla/num_heads", 2**40)), "model", "/mla/num_heads", "must be in (0, 65536]")
write("params-1e18", mutate(model, lambda d: d["moe"].update(num_experts=2**20, expert_intermediate_size=2**20)), "model", "/", "parameters, beyond moesim's limit of 1e15")
write("width-float", mutate(model, setp("/hidden_size", 1e300)), "model", "/hidden_size", "expected an integer, got a number")
write("hbm-bandwidth-absurd", mutate(hw, setp("/device/hbm_bandwidth", "1e6 TB/s")), "hardware", "/device/hbm_bandwidth", "must be in (0, 1e+15], got '1e6 TB/s'")
write("peak-absurd", mutate(hw, setp("/device/peak_flops/bf16", "1e9 PFLOP/s")), "hardware", "/device/peak_flops/bf16", "must be in (0, 1e+18]")
write("hbm-capacity-absurd", mutate(hw, setp("/device/hbm_capacity", "1e9 TB")), "hardware", "/device/hbm_capacity", "must be in (0, 1e+15]")
write("latency-absurd", mutate(hw, setp("/fabric/scale_up/latency", "1e6 s")), "hardware", "/fabric/scale_up/latency", "must be in [0, 1]")
write("devices-per-node-absurd", mutate(hw, setp("/devices_per_node", 2**40)), "hardware", "/devices_per_node", "must be in (0, 1048576]")
write("copy-engines-absurd", mutate(hw, setp("/device/num_copy_engines", 10**6)), "hardware", "/device/num_copy_engines", "must be in [1, 1024]")
write("sequence-2p40", mutate(scenario, setp("/batch/sequence_length", 2**40)), "scenario", "/batch/sequence_length", "must be in (0, 67108864], got 1099511627776")
write("straggler-1e308", mutate(scenario, setp("/stragglers", [{"ranks": [3], "slowdown": 1e308}])), "scenario", "/stragglers/0/slowdown", "must be in [1, 1000], got 1e+308")
write("straggler-product", mutate(scenario, setp("/stragglers", [{"ranks": [3], "slowdown": 100}, {"ranks": [3], "slowdown": 100}])), "scenario", "/stragglers/1/slowdown", "rank 3's slowdowns multiply beyond 1000")
write("skew-absurd", mutate(scenario, lambda d: d["routing"].update(distribution="skewed", skew=1e9)), "scenario", "/routing/skew", "must be in [0, 100], got 1000000000")
write("dispatch-chunks-0", mutate(scenario, lambda d: d["overlap"].update(moe_dispatch_chunks=0)), "scenario", "/overlap/moe_dispatch_chunks", "must be positive, got 0")
write("dispatch-chunks-absurd", mutate(scenario, lambda d: d["overlap"].update(moe_dispatch_chunks=10**6)), "scenario", "/overlap/moe_dispatch_chunks", "must be in (0, 64], got 1000000")
write("runtime-absurd", mutate(scenario, setp("/memory", {"runtime_reserved": "1e9 TB"})), "scenario", "/memory/runtime_reserved", "must be in [0, 1e+15]")
write("lora-rank-absurd", mutate(scenario, setp("/training/lora/rank", 2**40)), "scenario", "/training/lora/rank", "must be in (0, 1048576]")

CLASS = "unbounded"
write("layer-set-1e9", mutate(model, setp("/layers/overrides/1/layers", "1-1000000000")), "model", "/layers/overrides/1/layers", "layer 1000000000 is out of range (at most 10000")
write("layer-set-repeated", mutate(scenario, lambda d: d.update(recompute={"policy": "full", "layers": ",".join(["1-10000"] * 5)})), "scenario", "/recompute/layers", "lists more than 40000 layers")
write("sampled-steps-1e6", mutate(scenario, setp("/routing/num_sampled_steps", 10**6)), "scenario", "/routing/num_sampled_steps", "must be in (0, 1000], got 1000000")
write("devices-2p31", mutate(scenario, setp("/num_devices", 2**31)), "scenario", "/num_devices", "must be in (0, 1048576], got 2147483648")
write("global-batch-2p50", mutate(scenario, setp("/batch/global_batch_size", 2**50)), "scenario", "/batch/global_batch_size", "must be in (0, 1073741824]")
write("micro-batches", mutate(scenario, setp("/batch/global_batch_size", 128 * 2**17)), "scenario", "/batch/global_batch_size", "gives 131072 micro-batches per step")
write("layer-passes", mutate(scenario, setp("/batch/global_batch_size", 128 * 2**15)), "scenario", "/batch/global_batch_size", "layer passes per rank's program, more than moesim's limit of 1048576")
write("sweep-1e9", mutate(scenario, setp("/sweep", {"axes": [{"path": "/routing/seed", "values": list(range(1000))}, {"path": "/routing/skew", "values": [0] * 1000}, {"path": "/parallel/fsdp/prefetch", "values": [1] * 1000}]})), "scenario", "/sweep/axes/2/values", "the axes multiply to more than 1048576 configurations")
write("sweep-values", mutate(scenario, setp("/sweep", {"axes": [{"path": "/routing/seed", "values": list(range(6000))}, {"path": "/routing/seed", "values": list(range(6000))}]})), "scenario", "/sweep/axes/1/values", "more than 10000 values in all")

# Calibration files (through `hardware info` and `scenario info`, which now read them whole).
calibration = load("hardware/calibration/h200.json")


def calibration_case(name, data, path, message, klass, raw=None):
    rel = f"calibration/{name}.json"
    write_support(rel, data, raw)
    hw_rel = f"support/hw-{name}.json"
    write_support(hw_rel, mutate(hw, lambda d: d.update(calibration=f"../{rel}")))
    cli("calibration-" + name, ["hardware", "info", hw_rel], f"{rel}: {path}: ", message, klass)


calibration_text = json.dumps(calibration, indent=1)
calibration_case("version-wraps", None, "/version", "unsupported version 4294967299", "absurd",
                 raw=replace_once(calibration_text, '"version": 3', '"version": 4294967299'))
calibration_case("version-string", mutate(calibration, setp("/version", "3")), "/version", "must be an integer", "location")
calibration_case("version-huge", None, "/version", "unsupported version 18446744073709551615", "absurd",
                 raw=replace_once(calibration_text, '"version": 3', '"version": 18446744073709551615'))
calibration_case("bad-table", mutate(calibration, setp("/kernels/gemm/points/0/1", -5)), "/kernels/gemm/points/0/1", "the value must be positive and finite", "location")
calibration_case("unsorted", mutate(calibration, setp("/kernels/memory/points/1/0", 1)), "/kernels/memory/points/1/0", "measures must increase strictly", "location")
calibration_case("number-1e400", None, "/kernels/gemm/points/0/1", "beyond the range of a double", "literal",
                 raw=replace_once(json.dumps(mutate(calibration, setp("/kernels/gemm/points/0/1", "BIG")), indent=1), '"BIG"', "1e400"))
calibration_case("deep", None, "/provenance" + "/0" * (DEPTH - 1), "nested more than 128 levels deep", "crash",
                 raw=replace_once(json.dumps(mutate(calibration, setp("/provenance", "DEEP")), indent=1), '"DEEP"', deep))
calibration_case("group-size", mutate(calibration, lambda d: d["collectives"]["all_reduce"].update({"99999999999": d["collectives"]["all_reduce"]["2"]})), "/collectives/all_reduce/99999999999", "group sizes are integers >= 2 and at most 1048576", "absurd")
# kernels/cce (the CCE loss by hidden size, per pass): one mistake each in a file that has the table.
# The rates are placeholders, not measurements: only the shape of the table matters here.
cce_table = {"measure": "hidden_size", "value": "flops_per_s", "dtype": "bf16", "points": [[1024, 3e14], [8192, 6e14]]}
with_cce = mutate(calibration, lambda d: d["kernels"].update(cce={"forward": copy.deepcopy(cce_table), "backward": copy.deepcopy(cce_table)}))
calibration_case("cce-pass", mutate(with_cce, setp("/kernels/cce/recompute", cce_table)), "/kernels/cce/recompute", "unknown key (known: backward, backward_frozen, forward)", "schema")
calibration_case("cce-measure", mutate(with_cce, setp("/kernels/cce/forward/measure", "min_mnk")), "/kernels/cce/forward/measure", 'must be "hidden_size"', "schema")
calibration_case("cce-value", mutate(with_cce, setp("/kernels/cce/backward/points/1/1", 0)), "/kernels/cce/backward/points/1/1", "the value must be positive and finite", "location")
calibration_case("cce-unsorted", mutate(with_cce, setp("/kernels/cce/forward/points/1/0", 512)), "/kernels/cce/forward/points/1/0", "measures must increase strictly", "location")
sc_rel = "support/scenario-bad-calibration.json"
write_support(sc_rel, mutate(scenario, lambda d: d.update(hardware="hw-bad-table.json", num_devices=8) or d["parallel"]["fsdp"].update(shard=8) or d["parallel"].update(ep=8) or d["batch"].update(global_batch_size=16)))
cli("scenario-info-bad-calibration", ["scenario", "info", sc_rel], "calibration/bad-table.json: /kernels/gemm/points/0/1: ", "the value must be positive and finite", "location")

# Exported graphs (`moesim graph import`): fixtures derived from a small graph written by hand.
graph = {"format": "moesim-graph", "version": 1, "scenario": "tiny",
         "mesh": {"pp": 2, "replicate": 1, "shard": 1, "cp": 1, "tp": 1, "ep": 1},
         "num_micro_batches": 1, "tokens_per_micro_batch": 8, "tokens_per_step": 8, "seq_len": 8,
         "allocator_fragmentation": 0, "routing": None,
         "programs": [{"stage": s, "persistent": {"params": 0, "master_params": 0, "grads": 0, "optimizer_states": 0},
                       "names": ["p2p"], "buffers": [],
                       "ops": [{"kind": "send" if s == 0 else "recv", "name": 0, "phase": "fwd", "stream": "comm",
                                "group": "pp", "peer": 1 if s == 0 else -1, "layer": 0, "micro": 0, "comm_bytes": 16}]}
                      for s in range(2)]}
write_support("graph/valid.json", graph)


def graph_case(name, data, path, message, klass, raw=None):
    rel = f"graph/{name}.json"
    write_support(rel, data, raw)
    cli("graph-" + name, ["graph", "import", rel], f"{rel}: {path}: ", message, klass)


graph_text = json.dumps(graph, indent=1)
graph_case("peer-1000", mutate(graph, setp("/programs/0/ops/0/peer", 1000)), "/programs/0/ops/0/peer", "peer offset 1000 leaves the pp group of 2 ranks", "absurd")
graph_case("peer-negative", mutate(graph, setp("/programs/1/ops/0/peer", -2)), "/programs/1/ops/0/peer", "peer offset -2 leaves the pp group of 2 ranks", "absurd")
graph_case("experts-2p24", mutate(graph, setp("/routing", {"num_experts": 2**24, "top_k": 1, "ep": 1})), "/routing/num_experts", "must be between 1 and 1048576", "unbounded")
graph_case("micro-batches-2p40", mutate(graph, setp("/num_micro_batches", 2**40)), "/num_micro_batches", "must be between 0 and 65536", "unbounded")
graph_case("mesh-2p40", mutate(graph, lambda d: d["mesh"].update(shard=2**20, replicate=2**20)), "/mesh", "more than 1048576 ranks", "unbounded")
graph_case("host-kernel-issue-2s", mutate(graph, setp("/host_kernel_issue_s", 2)), "/host_kernel_issue_s",
           "must be between 0 and 1 (moesim's limit, docs/limits.md), got 2", "absurd")
graph_case("number-1e400", None, "/programs/0/ops/0/comm_bytes", "beyond the range of a double", "literal",
           raw=graph_text.replace('"comm_bytes": 16', '"comm_bytes": 1e400', 1))
graph_case("deep", None, "/scenario" + "/0" * (DEPTH - 1), "nested more than 128 levels deep", "crash",
           raw=graph_text.replace('"scenario": "tiny"', '"scenario": ' + deep, 1))
graph_case("capacity-policy", mutate(graph, setp("/routing", {"num_experts": 8, "top_k": 1, "ep": 1, "capacity_policy": "pad"})), "/routing/capacity_policy", "only applies with a capacity_factor", "schema")
graph_case("two-limits", mutate(graph, setp("/routing", {"num_experts": 8, "top_k": 2, "ep": 1, "groups": 2, "groups_per_token": 1, "devices_per_token": 1})), "/routing/devices_per_token", "only one of groups_per_token, nodes_per_token and devices_per_token", "schema")
graph_case("sampled-steps", mutate(graph, setp("/routing", {"num_experts": 8, "top_k": 1, "ep": 1, "num_sampled_steps": 10**6})), "/routing/num_sampled_steps", "must be between 1 and 1000", "unbounded")

# Amounts and counts of an exported graph, bounded as the loaders' fields are (docs/limits.md).
graph_case("flops-1e30", mutate(graph, setp("/programs/0/ops/0/flops", 1e30)), "/programs/0/ops/0/flops", "must be between 0 and 1e+21", "absurd")
graph_case("comm-bytes-1e20", mutate(graph, setp("/programs/0/ops/0/comm_bytes", 1e20)), "/programs/0/ops/0/comm_bytes", "must be between 0 and 1e+15", "absurd")
graph_case("buffer-bytes-1e20", mutate(graph, setp("/programs/0/buffers", [{"name": 0, "category": "activation", "bytes": 1e20}])), "/programs/0/buffers/0/bytes", "must be between 0 and 1e+15", "absurd")
graph_case("persistent-1e300", mutate(graph, setp("/programs/1/persistent/params", 1e300)), "/programs/1/persistent/params", "must be between 0 and 1e+15", "absurd")
graph_case("tensor-elements", mutate(graph, setp("/programs/0/ops/0/in", [[2**30, 2**30, "bf16"]])), "/programs/0/ops/0/in/0", "has more than 1125899906842624 elements", "absurd")
graph_case("tensor-dim-2p62", mutate(graph, setp("/programs/0/ops/0/in", [[2**62, "bf16"]])), "/programs/0/ops/0/in/0/0", "must be between 0 and 1125899906842624", "absurd")
graph_case("gemm-m-2p62", mutate(graph, setp("/programs/0/ops/0/m", 2**62)), "/programs/0/ops/0/m", "must be between 0 and 1125899906842624", "absurd")
graph_case("layer-2p31", mutate(graph, setp("/programs/0/ops/0/layer", 2**31)), "/programs/0/ops/0/layer", "must be between 0 and 10001", "absurd")
graph_case("micro-2p20", mutate(graph, setp("/programs/0/ops/0/micro", 2**20)), "/programs/0/ops/0/micro", "must be between -1 and 65535", "absurd")
graph_case("routing-layer-1e6", mutate(graph, setp("/programs/0/ops/0/routing_layer", 10**6)), "/programs/0/ops/0/routing_layer", "must be between -1 and 10000", "absurd")
graph_case("num-groups-2p30", mutate(graph, setp("/programs/0/ops/0/num_groups", 2**30)), "/programs/0/ops/0/num_groups", "must be between 0 and 1048576", "absurd")
graph_case("histogram-1e300", mutate(graph, setp("/routing", {"num_experts": 2, "top_k": 1, "ep": 1, "distribution": "histogram", "histogram": [1e300, 1]})), "/routing/histogram/0", "must be between 0 and 1e+15", "absurd")
graph_case("fragmentation-5", mutate(graph, setp("/allocator_fragmentation", 5)), "/allocator_fragmentation", "must be between 0 and 1", "absurd")
graph_case("routed-assignments", mutate(graph, lambda d: (d.update(tokens_per_micro_batch=2**40), d.update(routing={"num_experts": 2**20, "top_k": 2**20, "ep": 1}))), "/routing/top_k", "(expert assignments per EP group and micro-batch) exceeds 1125899906842624", "unbounded")

# At the bounds: inputs at the largest values the loaders accept must not overflow an
# int64 product or crash on the way (the sanitizer build runs them too). A one-device, two-layer
# MoE slice with 2^40 tokens per micro-batch and the widest layers is built whole (`graph stats`,
# exit 0) and refused by the engine, whose clock a step of such ops would pass (exit 2, the
# scenario's file), as are 2^20 experts and two EP ranks at the routing sampler's bound; 2^20
# devices and the largest micro-batches x layers per program load and build.
slice_scenario = load("scenarios/calibration/qwen3-moe-slice-1gpu.json")
slice_model = load("models/calibration/qwen3-30b-a3b-l2-e16.json")


def bound_case(name, model_data, scenario_data, command, path=None, message=None, klass="bound"):
    """A scenario (and its model) at the bounds: exit 0 (`graph stats`, `scenario info`) when no
    message is given, else exit 2 naming the scenario (at `path`) with `message`."""
    write_support(f"bound/{name}-model.json", model_data)
    rel = f"bound/{name}.json"
    write_support(rel, mutate(scenario_data, lambda d: d.update(model=f"{name}-model.json", hardware="h200-hgx")))
    args = [*command, rel]
    if message is None:
        cli_cases.append({"name": "bound-" + name, "class": klass, "args": args, "exit": 0})
    else:
        cli("bound-" + name, args, f"{rel}: " + (f"{path}: " if path else ""), message, klass)


def widest(d):
    d.update(hidden_size=2**20, vocab_size=2**24)
    d["gqa"].update(num_heads=2**12, num_kv_heads=2**12)
    d["moe"].update(num_experts=16, top_k=16, expert_intermediate_size=2**16)


def many_experts(top_k):
    return lambda d: d["moe"].update(num_experts=2**20, top_k=top_k, expert_intermediate_size=16)


# 2^40 tokens per micro-batch: 2^14 sequences of 2^26 tokens.
most_tokens = mutate(slice_scenario, lambda d: d["batch"].update(global_batch_size=2**14, micro_batch_size=2**14, sequence_length=2**26))
clock = "the simulated step would last more than 1000000 s"
bound_case("widest-stats", mutate(slice_model, widest), most_tokens, ["graph", "stats"])
bound_case("widest-simulate", mutate(slice_model, widest), most_tokens, ["simulate"], "", clock)
# 2^20 experts, top-1024: 2^50 assignments, the sampler's bound; a capacity of 1000x the
# balanced load, padded.
padded = mutate(most_tokens, lambda d: d["routing"].update(capacity_factor=1000, capacity_policy="pad"))
bound_case("experts-simulate", mutate(slice_model, many_experts(2**10)), padded, ["simulate"], "", clock)
# Two EP ranks at the sampler's bound (2 x 2^39 tokens x top-1024 = 2^50 assignments), padded to
# 1,000x the balanced load: the engine samples the routing and sizes the dispatch before the
# clock stops it (the experts' GEMMs).
sampled = mutate(padded, lambda d: (d.update(num_devices=2), d["parallel"]["fsdp"].update(shard=2), d["parallel"].update(ep=2),
                                    d["batch"].update(global_batch_size=2**30, micro_batch_size=2**29, sequence_length=2**10)))
bound_case("sampler-simulate", mutate(slice_model, lambda d: d["moe"].update(num_experts=2**11, top_k=2**10, expert_intermediate_size=16)),
           sampled, ["simulate"], "", clock)
# 2^20 devices in one FSDP group.
bound_case("devices-stats", slice_model, mutate(slice_scenario, lambda d: (d.update(num_devices=2**20), d["parallel"]["fsdp"].update(shard=2**20), d["batch"].update(global_batch_size=2**20))), ["graph", "stats"])
# 65,536 micro-batches x 3 layers per stage: 196,608 layer passes, under 2^20.
bound_case("micro-batches-info", slice_model, mutate(slice_scenario, setp("/batch/global_batch_size", 2**16)), ["scenario", "info"])
# Just past the bounds: refused by the loader, before any work.
bound_case("routed-assignments", mutate(slice_model, many_experts(2**11)), most_tokens, ["scenario", "info"], "/batch/micro_batch_size",
           "expert assignments per EP group and micro-batch (ep x micro_batch_size x sequence_length / cp x top_k) exceeds 1125899906842624",
           "unbounded")
bound_case("step-layer-passes", mutate(slice_model, setp("/num_layers", 64)),
           mutate(slice_scenario, lambda d: (d.update(num_devices=64), d["parallel"]["pp"].update(stages=64), d["batch"].update(global_batch_size=2**16))),
           ["scenario", "info"], "/batch/global_batch_size", "gives 8388608 layer passes over the step's 64 pipeline stages, more than moesim's limit of 4194304",
           "unbounded")

# PyTorch profiler traces (calibrate / validate --from-trace): a tiny valid trace, then one mistake each.
TRACE_SCENARIO = "../../../scenarios/trace/dense-s4k-mb2.json"
trace = {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0},
    {"ph": "X", "cat": "user_annotation", "name": "layer1.attn.q_proj", "pid": 1, "tid": 1, "ts": 10.0, "dur": 20.0},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 15.0, "dur": 2.0,
     "args": {"correlation": 7}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "pid": 0, "tid": 7,
     "ts": 20.0, "dur": 30.0, "args": {"device": 0, "stream": 7, "correlation": 7}},
]}
write_support("trace/valid.json", trace)


def trace_case(name, data, path, message, klass, raw=None, command="calibrate"):
    rel = f"trace/{name}.json"
    write_support(rel, data, raw)
    cli("trace-" + name, [command, "--from-trace", rel, "--scenario", TRACE_SCENARIO],
        f"{rel}: {path + ': ' if path else ''}", message, klass)


trace_text = json.dumps(trace, indent=1)
trace_case("not-json", None, "", "invalid JSON at line", "location", raw=trace_text[:200])
trace_case("no-events", {"schemaVersion": 1}, "/traceEvents", "missing: not a Chrome/Kineto trace", "schema")
trace_case("events-not-array", mutate(trace, setp("/traceEvents", {"a": 1})), "/traceEvents", "must be an array", "schema")
trace_case("event-not-object", mutate(trace, lambda d: d["traceEvents"].insert(1, 5)), "/traceEvents/1", "must be an object", "schema")
trace_case("dur-string", mutate(trace, setp("/traceEvents/3/dur", "30")), "/traceEvents/3/dur", "must be a number", "schema",
           command="validate")
trace_case("dur-negative", mutate(trace, setp("/traceEvents/1/dur", -5)), "/traceEvents/1/dur", "must not be negative", "absurd")
trace_case("launch-dur-negative", mutate(trace, setp("/traceEvents/2/dur", -2.0)), "/traceEvents/2/dur", "must not be negative",
           "absurd", command="validate")
trace_case("correlation-float", mutate(trace, setp("/traceEvents/2/args/correlation", 7.5)), "/traceEvents/2/args/correlation",
           "must be an integer", "schema")
trace_case("no-kernels", mutate(trace, lambda d: d["traceEvents"].pop(3)), "/traceEvents", "holds no GPU kernels", "location")
trace_case("rank-2p40", mutate(trace, setp("/distributedInfo/rank", 2**40)), "/distributedInfo/rank",
           "is not a rank of the scenario", "absurd")
trace_case("number-1e400", None, "/traceEvents/3", "beyond the range of a double", "literal",
           raw=trace_text.replace('"dur": 30.0', '"dur": 1e400', 1))
trace_case("deep", None, "", "nested more than 128 levels deep", "crash",
           raw=trace_text.replace('"schemaVersion": 1', '"schemaVersion": ' + deep, 1))
trace_case("no-op-named", mutate(trace, setp("/traceEvents/1/name", "my_module.forward")), "",
           "no op of the scenario was measured", "location")
# A gzip file cut short: the reader inflates .gz traces itself.
import gzip as _gzip
with open(os.path.join(OUT, "trace/truncated.json.gz"), "wb") as f:
    f.write(_gzip.compress(trace_text.encode())[:60])
cli("trace-truncated-gz", ["calibrate", "--from-trace", "trace/truncated.json.gz", "--scenario", TRACE_SCENARIO],
    "trace/truncated.json.gz: ", "truncated gzip data", "crash")
cli("trace-missing-file", ["calibrate", "--from-trace", "trace/nonexistent.json", "--scenario", TRACE_SCENARIO],
    "--from-trace: ", "no such file", "location")
cli("trace-no-scenario", ["validate", "--from-trace", "trace/valid.json"], "--scenario: ", "is required with --from-trace",
    "location")
cli("trace-scenario-count", ["calibrate", "--from-trace", "trace/valid.json", "--from-trace", "trace/valid.json",
                             "--scenario", TRACE_SCENARIO, "--scenario", TRACE_SCENARIO, "--scenario", TRACE_SCENARIO],
    "--scenario: ", "one per --from-trace", "location")

# Flags.
for flag, value, message in [("--tokens", "nan", "must be a positive number of at most 1e+18, got nan"),
                             ("--tokens", "1e30", "got 1e+30"),
                             ("--days", "nan", "must be a positive number of at most 36500, got nan"),
                             ("--days", "1e9", "got 1e+09")]:
    args = ["plan", "devices", "k3-lora-fsdp2-ep64", "--tokens", "1e12", "--days", "30"]
    args[args.index(flag) + 1] = value
    cli(f"flag{flag}-{value}", args, flag + ": ", message, "absurd")
cli("calibrate-only-unknown", ["calibrate", "--only", "loss,cross-entropy"], "--only: ",
    "'cross-entropy' is not a calibration family (one of: gemm, memory, attention, loss, collectives, copies)", "location")
cli("graph-unknown-subcommand", ["graph", "frobnicate"], "graph: ", "'frobnicate' is not a subcommand (one of: stats, export, import)", "location")
cli("model-no-subcommand", ["model"], "model: ", "a subcommand is required (one of: info)", "location")
cli("steps-1e6", ["simulate", "--steps", "1000000"], "--steps", "", "unbounded")

with open(os.path.join(OUT, "cases.json"), "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")
with open(os.path.join(OUT, "cli_cases.json"), "w") as f:
    json.dump(cli_cases, f, indent=1)
    f.write("\n")
print(f"{len(cases)} cases, {len(cli_cases)} command-line cases")
