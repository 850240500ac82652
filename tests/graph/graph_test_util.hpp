// SPDX-License-Identifier: MIT
// Small scenarios for graph tests, written inline so each test states its plan.
#pragma once

#include <string>

#include "graph/step_graph.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim::test {

struct Plan {
  std::string model = "qwen3-30b-a3b";
  std::string hardware = "h200-hgx";
  int64_t devices = 8;
  std::string mode = "pretrain";
  int64_t global_batch = 8;
  int64_t micro_batch = 1;
  int64_t seq = 4096;
  int64_t shard = 8;
  int64_t replicate = 1;
  int64_t ep = 1;
  int64_t tp = 1;
  int64_t etp = 0;  // expert_tensor_parallel; 0: left out (= tp)
  std::string ep_dispatch = "direct";
  bool sp = true;
  std::string tp_comm_overlap = "none";  // parallel.tp.comm_overlap
  std::string sp_backward_input;         // parallel.tp.sp_backward_input; empty: left out (the default)
  int64_t pp = 1;
  std::string schedule = "1f1b";
  int64_t virtual_stages = 1;
  bool overlap_forward_backward = true;  // dualpipe only
  int64_t cp = 1;
  std::string cp_options;  // further parallel keys as JSON members, e.g. "\"cp_kv_heads\": \"query\""
  std::string placement;  // parallel.placement as JSON; empty: left out (the default)
  std::string recompute = "none";
  bool swap = false;
  std::string swap_ops = "[\"expert_gmm_up\"]";
  std::string loss = "{\"kind\": \"full\"}";
  std::string lora_targets = "[\"q_proj\", \"o_proj\"]";
  bool reshard = true;
  std::string fused = "{}";
  bool overlap = true;
  int64_t zero_stage = 3;
  std::string gradient_sync = "auto";
  bool overlap_grad_reduce = true;   // parallel.fsdp.overlap_grad_reduce
  bool overlap_param_gather = true;  // parallel.fsdp.overlap_param_gather
  std::string offload = "none";
  std::string layers_per_chunk = "[]";
  std::string routing = "{}";
  std::string precision = "{}";
  double allocator_fragmentation = 0;
};

// The default scenario's plan at test size: LoRA on Kimi K3 (DSA) over one 128-device supernode,
// FSDP2 128 + EP64, 1,024-token sequences, full recompute with swap, fused kernels.
inline Plan k3_supernode() {
  Plan p;
  p.model = "kimi-k3-dsa";
  p.hardware = "supernode-128";
  p.devices = 128;
  p.shard = 128;
  p.ep = 64;
  p.global_batch = 128;
  p.seq = 1024;
  p.mode = "lora";
  p.recompute = "full";
  p.swap = true;
  p.fused = R"({"dsa": true, "kda": true, "permute_gemm": true})";
  return p;
}

// Qwen3-30B-A3B (128 experts, top-8) with EP 16 over two 8-GPU H100 nodes: 8 experts per rank.
inline Plan qwen3_two_nodes() {
  Plan p;
  p.hardware = "h100-hgx";
  p.devices = 16;
  p.shard = 16;
  p.ep = 16;
  p.global_batch = 16;
  p.seq = 4096;
  return p;
}

// One GPU of an H200 node, FSDP2 over that one rank, one sequence a step.
inline Plan one_gpu(const std::string& model, int64_t seq) {
  Plan p;
  p.model = model;
  p.devices = 1;
  p.shard = 1;
  p.global_batch = 1;
  p.seq = seq;
  return p;
}

// A dense model under tensor parallelism: Llama-3.1-405B, TP8 x FSDP2 2, full recompute.
inline Plan dense_tp8() {
  Plan p;
  p.model = "llama-3.1-405b";
  p.devices = 16;
  p.tp = 8;
  p.shard = 2;
  p.global_batch = 4;
  p.seq = 2048;
  p.recompute = "full";
  return p;
}

inline Scenario scenario(const Plan& p) {
  std::string text = R"({"name": "t", "model": ")" + p.model + R"(", "hardware": ")" + p.hardware +
                     R"(", "num_devices": )" + std::to_string(p.devices) + R"(, "training": {"mode": ")" + p.mode + "\"";
  if (p.mode == "lora") text += R"(, "lora": {"rank": 16, "alpha": 32, "targets": )" + p.lora_targets + "}";
  text += R"(, "precision": )" + p.precision;
  text += R"(}, "batch": {"global_batch_size": )" + std::to_string(p.global_batch) + R"(, "micro_batch_size": )" +
          std::to_string(p.micro_batch) + R"(, "sequence_length": )" + std::to_string(p.seq) +
          R"(}, "parallel": {"fsdp": {"shard": )" + std::to_string(p.shard) + R"(, "replicate": )" +
          std::to_string(p.replicate) + R"(, "zero_stage": )" + std::to_string(p.zero_stage) +
          R"(, "gradient_sync": ")" + p.gradient_sync + R"(", "reshard_after_forward": )" + (p.reshard ? "true" : "false") +
          (p.offload != "none" ? R"(, "offload": ")" + p.offload + "\"" : std::string()) +
          (p.overlap_grad_reduce ? "" : R"(, "overlap_grad_reduce": false)") +
          (p.overlap_param_gather ? "" : R"(, "overlap_param_gather": false)") +
          R"(}, "ep": )" + std::to_string(p.ep) + R"(, "tp": {"degree": )" + std::to_string(p.tp) +
          R"(, "sequence_parallel": )" + (p.sp ? "true" : "false") +
          (p.tp_comm_overlap != "none" ? R"(, "comm_overlap": ")" + p.tp_comm_overlap + "\"" : std::string()) +
          (p.sp_backward_input.empty() ? std::string() : R"(, "sp_backward_input": ")" + p.sp_backward_input + "\"") + "}" +
          (p.etp > 0 ? R"(, "expert_tensor_parallel": )" + std::to_string(p.etp) : std::string()) +
          R"(, "ep_dispatch": ")" + p.ep_dispatch + "\"" +
          R"(, "pp": {"stages": )" + std::to_string(p.pp) +
          R"(, "schedule": ")" + p.schedule + R"(", "virtual_stages": )" + std::to_string(p.virtual_stages) +
          R"(, "layers_per_chunk": )" + p.layers_per_chunk +
          R"(, "overlap_forward_backward": )" + (p.overlap_forward_backward ? "true" : "false") + R"(}, "cp": )" +
          std::to_string(p.cp) + (p.cp_options.empty() ? std::string() : ", " + p.cp_options) +
          (p.placement.empty() ? std::string() : R"(, "placement": )" + p.placement) +
          R"(}, "recompute": {"policy": ")" + p.recompute +
          R"("}, "swap": {"enabled": )" + (p.swap ? "true" : "false") + R"(, "ops": )" + (p.swap ? p.swap_ops : "[]") +
          R"(}, "loss": )" + p.loss + R"(, "fused_ops": )" + p.fused + R"(, "overlap": {"comm_compute": )" +
          (p.overlap ? "true" : "false") + R"(}, "routing": )" + p.routing +
          R"(, "memory": {"allocator_fragmentation": )" + std::to_string(p.allocator_fragmentation) + "}}";
  return load_scenario(InputText{"t.json", text, false});
}

}  // namespace moesim::test
