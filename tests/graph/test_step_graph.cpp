// SPDX-License-Identifier: MIT
// The op graph against closed forms: Megatron's FLOP count, 6 x active parameters x tokens, FSDP
// and all-to-all byte counts, LoRA and recompute; and the invariants on every model and many plans.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "graph/graph_checks.hpp"
#include "graph/graph_stats.hpp"
#include "graph_test_util.hpp"
#include "model/accounting.hpp"

using namespace moesim;
using test::Plan;

namespace {

void check_invariants(const StepGraph& g) {
  for (const Program& p : g.programs) {
    CHECK(check_acyclic(p).empty());
    const auto memory = check_memory_balance(p);
    CHECK_MESSAGE(memory.empty(), (memory.empty() ? "" : memory.front()));
    const auto order = check_memory_order(p);
    CHECK_MESSAGE(order.empty(), (order.empty() ? "" : order.front()));
  }
  const auto p2p = check_p2p_matching(g);
  CHECK_MESSAGE(p2p.empty(), (p2p.empty() ? "" : p2p.front()));
  CHECK(check_collective_order(g).empty());
}

double sum_flops(const StepGraph& g, Phase phase, int64_t first_layer, int64_t last_layer) {
  double f = 0;
  const auto ranks = static_cast<double>(g.plan.num_ranks() / g.plan.num_programs());
  for (const Program& p : g.programs) {
    for (const Op& op : p.ops) {
      if (op.phase == phase && op.layer >= first_layer && op.layer <= last_layer) f += op.flops * ranks;
    }
  }
  return f;
}

}  // namespace

TEST_CASE("GPT-3 175B under TP 8 x PP 4 x DP 2: Megatron's FLOPs per step, with causal attention") {
  // Megatron (Narayanan et al. 2021): 72 B L s h^2 (1 + s/(6h) + V/(12 h L)) per step. The graph
  // counts causal attention, (s+1)/2 keys per query: s/(6h) becomes (s+1)/(12h). The vocabulary
  // is padded to a multiple of TP, as Megatron pads it.
  Plan p;
  p.model = "gpt3-175b";
  p.hardware = "h100-hgx";
  p.devices = 64;
  p.global_batch = 16;
  p.seq = 2048;
  p.shard = 1;
  p.replicate = 2;
  p.tp = 8;
  p.pp = 4;
  const StepGraph g = build_step_graph(test::scenario(p));
  CHECK(g.num_micro_batches == 8);
  CHECK(g.programs.size() == 4);
  const double B = 16, L = 96, s = 2048, h = 12288, V = 6283.0 * 8;
  const double megatron = 72 * B * L * s * h * h * (1 + (s + 1) / (12 * h) + V / (12 * h * L));
  const GraphStats st = compute_stats(g);
  CHECK(st.model_flops_per_step == doctest::Approx(megatron).epsilon(1e-9));
  check_invariants(g);

  // Full recompute adds one forward of every layer: 24 B L s h^2 (1 + (s+1)/(12h)) more FLOPs of
  // matmuls and attention, and model FLOPs are unchanged.
  p.recompute = "full";
  const StepGraph r = build_step_graph(test::scenario(p));
  const GraphStats rs = compute_stats(r);
  CHECK(rs.model_flops_per_step == doctest::Approx(megatron).epsilon(1e-9));
  CHECK(sum_flops(r, Phase::recompute, 1, 96) == doctest::Approx(sum_flops(r, Phase::fwd, 1, 96)).epsilon(1e-12));
  double recompute_model = 0;
  for (const Program& prog : r.programs) {
    for (const Op& op : prog.ops) {
      if (op.phase == Phase::recompute && counts_as_model_flops(op.kind)) recompute_model += op.flops * 16;
    }
  }
  CHECK(recompute_model == doctest::Approx(24 * B * L * s * h * h * (1 + (s + 1) / (12 * h))).epsilon(1e-9));
  check_invariants(r);
}

TEST_CASE("MoE and hybrid models: model FLOPs = tokens x (6 x active matmul params + attention terms)") {
  struct Case {
    const char* model;
    const char* hardware;
    int64_t devices, shard, ep, pp, cp, seq;
  };
  for (const Case& c : {Case{"qwen3-30b-a3b", "h200-hgx", 8, 8, 8, 1, 1, 4096},
                        Case{"mixtral-8x7b", "h200-hgx", 16, 8, 8, 2, 1, 4096},
                        Case{"kimi-linear-48b-a3b", "h200-hgx", 8, 4, 8, 1, 2, 8192},
                        Case{"deepseek-v3.2", "h200-hgx", 16, 16, 16, 1, 1, 8192},
                        Case{"kimi-k3-dsa", "supernode-128", 128, 128, 64, 1, 1, 8192},
                        Case{"kimi-k3", "supernode-128", 128, 64, 32, 1, 2, 16384}}) {
    CAPTURE(c.model);
    Plan p;
    p.model = c.model;
    p.hardware = c.hardware;
    p.devices = c.devices;
    p.shard = c.shard;
    p.cp = c.cp;
    p.ep = c.ep;
    p.pp = c.pp;
    p.seq = c.seq;
    p.global_batch = c.devices / c.pp / c.cp * 2;
    if (std::string(c.model) == "mixtral-8x7b") p.ep = 8;
    const Scenario s = test::scenario(p);
    const StepGraph g = build_step_graph(s);
    const double expected = static_cast<double>(g.tokens_per_step) * count_flops(s.model, c.seq).train;
    CHECK(compute_stats(g).model_flops_per_step == doctest::Approx(expected).epsilon(1e-9));
    check_invariants(g);
  }
}

TEST_CASE("FSDP2: each all-gather moves a unit's parameters; two per layer per micro-batch when resharding") {
  Plan p;  // qwen3-30b-a3b, 8 devices, shard 8, ep 8
  p.ep = 8;
  p.global_batch = 16;  // 2 micro-batches
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const double bytes = 2;  // bf16 parameters
  std::map<int32_t, int> gathers;
  for (const Op& op : g.programs[0].ops) {
    if (op.kind != OpKind::all_gather || op.group == GroupKind::tp) continue;
    ++gathers[op.layer];
    if (op.layer >= 1 && op.layer <= 48) {
      const LayerParams lp = layer_params(s.model, op.layer);
      const double expected = op.group == GroupKind::fsdp ? static_cast<double>(lp.non_expert) * bytes
                                                          : static_cast<double>(lp.expert) / 8 * bytes;
      CHECK(op.comm_bytes == doctest::Approx(expected));
    }
  }
  // non-expert (fsdp group of 8) and expert (edp group of 1: nothing to gather) per pass.
  CHECK(gathers[1] == 2 * 2);
  CHECK(gathers[0] == 2 * 2);  // the embedding unit too: resharded after forward, gathered again in backward
  p.reshard = false;
  const StepGraph kept = build_step_graph(test::scenario(p));
  int n = 0;
  for (const Op& op : kept.programs[0].ops) n += op.kind == OpKind::all_gather && op.layer == 1;
  CHECK(n == 2);  // gathered once per micro-batch, held through backward
  check_invariants(kept);
}

TEST_CASE("all-to-all: tokens x top_k x width x bytes per dispatch, (ep-1)/ep of it remote under uniform routing") {
  Plan p;
  p.model = "kimi-k3-dsa";
  p.hardware = "supernode-128";
  p.devices = 128;
  p.shard = 128;
  p.ep = 64;
  p.global_batch = 128;
  p.seq = 4096;
  const StepGraph g = build_step_graph(test::scenario(p));
  const double per_dispatch = 4096.0 * 16 * 3584 * 2;  // latent width 3584, bf16
  int dispatches = 0;
  for (const Op& op : g.programs[0].ops) {
    if (op.kind != OpKind::all_to_all) continue;
    CHECK(op.comm_bytes == doctest::Approx(per_dispatch));
    CHECK(op.group == GroupKind::ep);
    ++dispatches;
  }
  CHECK(dispatches == 92 * 4);  // dispatch and combine, forward and backward, 92 MoE layers
  const GraphStats st = compute_stats(g);
  CHECK(st.all_to_all_remote_bytes == doctest::Approx(per_dispatch * 92 * 4 * 128 * 63 / 64));
}

TEST_CASE("LoRA removes exactly the base weights' gradient FLOPs") {
  Plan p;
  p.model = "kimi-k3";
  p.hardware = "supernode-128";
  p.devices = 128;
  p.shard = 128;
  p.ep = 64;
  p.global_batch = 128;
  p.seq = 4096;
  const Scenario full = test::scenario(p);
  p.mode = "lora";
  p.lora_targets = R"(["q_proj", "o_proj", "q_a_proj", "shared_experts"])";
  const Scenario lora = test::scenario(p);
  const GraphStats fs = compute_stats(build_step_graph(full));
  const StepGraph lg = build_step_graph(lora);
  const GraphStats ls = compute_stats(lg);
  const double adapters = ls.by_kind.at(OpKind::lora_gemm).flops;
  CHECK(adapters > 0);
  const double tokens = static_cast<double>(fs.tokens_per_step);
  CHECK(fs.model_flops_per_step - (ls.model_flops_per_step - adapters) ==
        doctest::Approx(tokens * count_flops(full.model, 4096).matmul_fwd).epsilon(1e-9));
  // No base-weight gradients: only adapter gradients are reduced, and they are small.
  double reduced = 0;
  for (const Op& op : lg.programs[0].ops) {
    if (op.kind == OpKind::reduce_scatter && op.group != GroupKind::tp) reduced += op.comm_bytes;
  }
  CHECK(reduced > 0);
  CHECK(reduced < 0.01 * 2 * static_cast<double>(count_params(full.model).total_params) * 4 / 128);
  check_invariants(lg);
}

TEST_CASE("selective recompute re-runs exactly the dropped cheap ops, once") {
  Plan p;
  p.recompute = "selective";
  const StepGraph g = build_step_graph(test::scenario(p));
  std::map<std::string, int> fwd, re;
  for (const Op& op : g.programs[0].ops) {
    const std::string& name = g.programs[0].name_of(op);
    if (op.phase == Phase::recompute) ++re[name];
    if (op.phase == Phase::fwd) ++fwd[name];
  }
  REQUIRE_FALSE(re.empty());
  for (const auto& [name, n] : re) {
    CAPTURE(name);
    CHECK(n == fwd[name]);  // once per forward
    CHECK(name.find("proj") == std::string::npos);  // GEMMs are kept, not recomputed
  }
  check_invariants(g);
}

TEST_CASE("swap: every swapped buffer goes to host after forward and comes back before backward") {
  Plan p = test::k3_supernode();
  p.seq = 4096;
  p.recompute = "selective";
  p.fused = R"({"dsa": true, "kda": true})";
  const StepGraph g = build_step_graph(test::scenario(p));
  const GraphStats st = compute_stats(g);
  REQUIRE(st.by_kind.contains(OpKind::swap_out));
  CHECK(st.by_kind.at(OpKind::swap_out).count == st.by_kind.at(OpKind::swap_in).count);
  CHECK(st.by_kind.at(OpKind::swap_out).comm_bytes == doctest::Approx(st.by_kind.at(OpKind::swap_in).comm_bytes));
  // One expert gate/up output per MoE layer: R x 2f rows of bf16, R = 4096 x 16 expected.
  CHECK(st.by_kind.at(OpKind::swap_out).count == 92 * 128);
  CHECK(st.by_kind.at(OpKind::swap_out).comm_bytes == doctest::Approx(92.0 * 128 * 4096 * 16 * 6144 * 2));
  check_invariants(g);
}

TEST_CASE("invariants hold for every shipped model under several plans") {
  struct Model {
    const char* name;
    int64_t ep;
    int64_t tp;
    int64_t pp;
  };
  for (const Model& m : {Model{"kimi-k3", 64, 1, 1}, Model{"kimi-k3-dsa", 32, 2, 1}, Model{"deepseek-v3", 16, 1, 1},
                         Model{"deepseek-v3.2", 8, 2, 1}, Model{"kimi-k2", 32, 1, 1},
                         Model{"kimi-linear-48b-a3b", 8, 2, 3}, Model{"qwen3-235b-a22b", 8, 2, 2},
                         Model{"qwen3-30b-a3b", 8, 4, 2}, Model{"mixtral-8x7b", 8, 2, 2},
                         Model{"mixtral-8x22b", 8, 8, 1}, Model{"llama-3.1-405b", 1, 8, 2}, Model{"gpt3-175b", 1, 4, 4}}) {
    for (const char* recompute : {"none", "selective", "full"}) {
      CAPTURE(m.name);
      CAPTURE(recompute);
      Plan p;
      p.model = m.name;
      p.hardware = "h200-hgx";
      p.tp = m.tp;
      p.pp = m.pp;
      p.shard = std::max<int64_t>(16, m.ep);
      p.devices = p.shard * m.tp * m.pp;
      p.ep = m.ep;
      p.seq = 2048;
      p.global_batch = p.shard * 4;
      p.recompute = recompute;
      p.sp = std::string(recompute) != "full";  // both TP flavours
      p.mode = std::string(recompute) == "selective" ? "lora" : "pretrain";
      p.lora_targets = R"(["o_proj"])";
      check_invariants(build_step_graph(test::scenario(p)));
    }
  }
}

TEST_CASE("interleaved 1F1B: every stage runs each micro-batch's forward and backward of each chunk once") {
  Plan p;
  p.model = "llama-3.1-405b";
  p.devices = 32;
  p.tp = 8;
  p.pp = 2;
  p.shard = 2;
  p.schedule = "interleaved_1f1b";
  p.virtual_stages = 3;
  p.global_batch = 8;  // 4 micro-batches per data-parallel rank
  p.seq = 2048;
  const StepGraph g = build_step_graph(test::scenario(p));
  CHECK(g.num_micro_batches == 4);
  for (const Program& prog : g.programs) {
    std::map<std::pair<int32_t, int32_t>, int> fwd_norms;
    for (const Op& op : prog.ops) {
      if (op.kind == OpKind::norm && op.phase == Phase::fwd && prog.name_of(op).ends_with("attn_norm")) {
        ++fwd_norms[{op.layer, op.micro}];
      }
    }
    CHECK(fwd_norms.size() == 126 / 2 * 4);  // 63 layers per stage, 4 micro-batches
    for (const auto& [key, n] : fwd_norms) CHECK(n == 1);
  }
  check_invariants(g);
}

TEST_CASE("without overlap, communication runs on the compute stream") {
  Plan p;
  p.ep = 8;
  p.overlap = false;
  const StepGraph g = build_step_graph(test::scenario(p));
  for (const Op& op : g.programs[0].ops) {
    if (is_communication(op.kind)) CHECK(op.stream == Stream::compute);
  }
  check_invariants(g);
}

TEST_CASE("tensor parallelism splits the embedding over the vocabulary: 1/tp of the table, its partial sums reduce-scattered") {
  Plan p = test::dense_tp8();  // Llama-3.1-405B, TP8 x FSDP2 2, sequence parallel
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const double table = static_cast<double>(s.model.vocab_size * s.model.hidden_size);
  int gathers = 0, reduce_scatters = 0;
  for (const Op& op : g.programs[0].ops) {
    if (op.layer != 0) continue;
    if (op.kind == OpKind::all_gather && op.group == GroupKind::fsdp) {
      ++gathers;
      CHECK(op.comm_bytes == doctest::Approx(table / 8 * 2));  // this TP rank's vocabulary rows, bf16
    }
    if (op.kind == OpKind::reduce_scatter && op.group == GroupKind::tp && op.phase == Phase::fwd) {
      ++reduce_scatters;
      CHECK(op.comm_bytes == doctest::Approx(static_cast<double>(g.tokens_per_micro_batch * s.model.hidden_size) * 2));
    }
  }
  CHECK(gathers > 0);
  CHECK(reduce_scatters == g.num_micro_batches);
  check_invariants(g);
}

TEST_CASE("every ZeRO stage and gradient sync mode balances memory, with and without a pipeline") {
  for (int64_t zero = 0; zero <= 3; ++zero) {
    for (const char* sync : {"every_micro_batch", "last_micro_batch"}) {
      for (int64_t pp : {1, 2, 3}) {  // 3: two stages under ZB-H1
        CAPTURE(zero);
        CAPTURE(sync);
        CAPTURE(pp);
        Plan p;  // qwen3-30b-a3b: experts over EP 4 of the shard group 8 (expert-data-parallel 2)
        p.ep = 4;
        p.pp = std::min<int64_t>(pp, 2);
        p.schedule = pp == 3 ? "zb_h1" : "1f1b";
        p.devices = 8 * p.pp;
        p.replicate = 1;
        p.zero_stage = zero;
        p.gradient_sync = sync;
        p.global_batch = 32;
        p.seq = 1024;
        check_invariants(build_step_graph(test::scenario(p)));
      }
    }
  }
}

TEST_CASE("FP8 quantises the linear layers only: attention, the router and the LM head stay in BF16 unless stated") {
  Plan p;  // Qwen3-30B-A3B: GQA attention, a router, an untied head
  p.ep = 8;
  p.seq = 2048;
  const int32_t head_layer = 48 + 1;
  // Formats by op kind, the LM head (a GEMM after the last layer) apart.
  auto dtypes = [&](const std::string& precision) {
    p.precision = precision;
    std::map<std::string, std::set<Dtype>> out;
    const StepGraph g = build_step_graph(test::scenario(p));
    for (const Op& op : g.programs[0].ops) {
      const bool head = op.kind == OpKind::gemm && op.layer == head_layer;
      out[head ? "lm_head" : std::string(enum_name(op.kind))].insert(op.dtype);
    }
    return out;
  };
  const auto bf16 = dtypes("{}");
  for (const char* kind : {"gemm", "grouped_gemm", "flash_attention", "router", "lm_head"}) {
    CAPTURE(kind);
    CHECK(bf16.at(kind) == std::set<Dtype>{Dtype::bf16});
  }
  const auto fp8 = dtypes(R"({"compute": "fp8"})");
  CHECK(fp8.at("gemm") == std::set<Dtype>{Dtype::fp8});
  CHECK(fp8.at("grouped_gemm") == std::set<Dtype>{Dtype::fp8});
  CHECK(fp8.at("flash_attention") == std::set<Dtype>{Dtype::bf16});
  CHECK(fp8.at("router") == std::set<Dtype>{Dtype::bf16});
  CHECK(fp8.at("lm_head") == std::set<Dtype>{Dtype::bf16});
  const auto fp8_attention = dtypes(R"({"compute": "fp8", "attention": "fp8"})");
  CHECK(fp8_attention.at("flash_attention") == std::set<Dtype>{Dtype::fp8});
  CHECK(fp8_attention.at("router") == std::set<Dtype>{Dtype::bf16});
}

TEST_CASE("without flash attention the core is materialised: s x s scores, softmax, dropout, kept for backward") {
  Plan p = test::dense_tp8();  // Llama-3.1-405B: 128 heads of 128, TP 8 -> 16 heads a rank
  p.recompute = "none";
  p.seq = 2048;
  p.fused = R"({"flash_attention": false})";
  p.precision = "{}";
  const StepGraph g = build_step_graph(test::scenario(p));
  const double h = 16, s = 2048, d = 128;
  int scores = 0, contexts = 0, softmaxes = 0;
  for (const Op& op : g.programs[0].ops) {
    const std::string& name = g.programs[0].name_of(op);
    if (op.layer != 1 || op.micro != 0) continue;
    if (name.find("attn.scores") != std::string::npos && op.phase == Phase::fwd) {
      ++scores;
      CHECK(op.flops == doctest::Approx(2 * h * s * s * d));  // the whole square, masked afterwards
    }
    if (name.find("attn.context") != std::string::npos && op.phase == Phase::fwd) {
      ++contexts;
      CHECK(op.flops == doctest::Approx(2 * h * s * s * d));
    }
    if (name.find("attn.scores") != std::string::npos && op.phase == Phase::bwd) CHECK(op.flops == doctest::Approx(4 * h * s * s * d));
    softmaxes += name.find("attn.softmax") != std::string::npos && op.phase == Phase::fwd;
    CHECK(op.kind != OpKind::flash_attention);
  }
  CHECK(scores == 1);
  CHECK(contexts == 1);
  CHECK(softmaxes == 1);
  check_invariants(g);
}

// Context parallelism as ring attention runs it: one layer's key/value exchanges on rank 0, in
// program order, with the phase of each and its bytes.
struct CpExchange {
  std::string name;
  Phase phase;
  OpKind kind;
  double bytes;
};
std::vector<CpExchange> cp_exchanges(const StepGraph& g, int32_t layer) {
  std::vector<CpExchange> out;
  const Program& prog = g.programs[0];
  for (const Op& op : prog.ops) {
    if (op.layer != layer || op.group != GroupKind::cp || op.micro != 0) continue;
    out.push_back({prog.name_of(op), op.phase, op.kind, op.comm_bytes});
  }
  return out;
}

TEST_CASE("context parallelism: ring attention exchanges keys and values again for the backward, keeping only its own") {
  // Llama 3.1 8B (32 query heads, 8 key/value heads of 128) over CP 4: 4,096 keys, 1,024 tokens a rank.
  Plan p;
  p.model = "llama-3.1-8b";
  p.devices = 4;
  p.shard = 1;
  p.cp = 4;
  p.global_batch = 1;
  const double kv_bytes = 4096.0 * 8 * 128 * 2;  // one of K or V for all 4,096 keys, bf16
  const Phase fwd = Phase::fwd, re = Phase::recompute, bwd = Phase::bwd;
  const OpKind ag = OpKind::all_gather, rs = OpKind::reduce_scatter;
  auto phases = [](const std::vector<CpExchange>& xs, OpKind kind) {
    std::vector<Phase> out;
    for (const auto& x : xs) {
      if (x.kind == kind) out.push_back(x.phase);
    }
    return out;
  };

  SUBCASE("no recompute: gathered once in forward, again right before the attention's backward") {
    const StepGraph g = build_step_graph(test::scenario(p));
    const auto xs = cp_exchanges(g, 1);
    CHECK(phases(xs, ag) == std::vector<Phase>{fwd, fwd, bwd, bwd});
    CHECK(phases(xs, rs) == std::vector<Phase>{bwd, bwd});
    for (const auto& x : xs) CHECK(x.bytes == doctest::Approx(kv_bytes));
    // The backward's gathers come before the attention's backward, which frees what they gathered;
    // the forward's gathered keys and values are freed in the forward.
    const Program& prog = g.programs[0];
    std::map<uint32_t, Phase> allocated_in;
    int64_t attention_bwd = -1, regathers_before = 0;
    for (size_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      if (op.layer != 1 || op.micro != 0) continue;
      const std::string& name = prog.name_of(op);
      if (op.kind == OpKind::flash_attention && op.phase == bwd) attention_bwd = static_cast<int64_t>(i);
      if (op.group == GroupKind::cp && op.kind == ag) {
        if (op.phase == bwd) {
          CHECK(name.ends_with(".for_bwd"));
          if (attention_bwd < 0) ++regathers_before;
        }
        for (const MemEffect& e : prog.effects_of(op)) {
          if (e.action == MemAction::alloc) allocated_in[e.buffer] = op.phase;
        }
      }
      for (const MemEffect& e : prog.effects_of(op)) {
        if (e.action != MemAction::free || !allocated_in.contains(e.buffer)) continue;
        CAPTURE(name);
        // Freed in the phase it was gathered in: forward, or the attention's backward.
        CHECK(op.phase == allocated_in[e.buffer]);
        if (op.phase == bwd) CHECK(static_cast<int64_t>(i) == attention_bwd);
        allocated_in.erase(e.buffer);
      }
    }
    CHECK(regathers_before == 2);
    CHECK(allocated_in.empty());
    check_invariants(g);
  }

  SUBCASE("full recompute: forward, recompute and backward each gather") {
    p.recompute = "full";
    const auto xs = cp_exchanges(build_step_graph(test::scenario(p)), 1);
    CHECK(phases(xs, ag) == std::vector<Phase>{fwd, fwd, re, re, bwd, bwd});
  }

  SUBCASE("selective recompute of the attention core gathers in the recompute too") {
    p.recompute = "selective";
    const auto xs = cp_exchanges(build_step_graph(test::scenario(p)), 1);
    CHECK(phases(xs, ag) == std::vector<Phase>{fwd, fwd, re, re, bwd, bwd});
  }

  SUBCASE("PyTorch's context_parallel: query heads exchanged, gradients in fp32") {
    p.cp_options = R"("cp_kv_heads": "query", "cp_grad_format": "fp32")";
    const StepGraph g = build_step_graph(test::scenario(p));
    const auto xs = cp_exchanges(g, 1);
    REQUIRE(xs.size() == 6);
    for (const auto& x : xs) {
      CAPTURE(x.name);
      // 32 / 8 = 4 times the heads; the gradients' reduce-scatter in 4 bytes, not 2.
      CHECK(x.bytes == doctest::Approx(kv_bytes * 4 * (x.kind == rs ? 2 : 1)));
    }
    check_invariants(g);
  }
}

namespace {

// Layer 1, micro-batch 0: the dense TP regions' all-gathers (not the reduce-scatters' adjoints in the
// backward) by phase, and the bytes of the buffers alive from the layer's forward into its backward
// (allocated in the forward, freed in the backward).
struct SpGathers {
  std::vector<Phase> phases;
  std::vector<double> bytes;
  double held_into_backward = 0;
};
SpGathers sp_gathers(const StepGraph& g) {
  SpGathers out;
  const Program& prog = g.programs[0];
  std::map<uint32_t, Phase> allocated_in;
  for (const Op& op : prog.ops) {
    if (op.layer != 1 || op.micro != 0) continue;
    if (op.group == GroupKind::tp && op.kind == OpKind::all_gather && prog.name_of(op).find("reduce_scatter") == std::string::npos) {
      out.phases.push_back(op.phase);
      out.bytes.push_back(op.comm_bytes);
    }
    for (const MemEffect& e : prog.effects_of(op)) {
      if (e.action == MemAction::alloc) allocated_in[e.buffer] = op.phase;
      if (e.action == MemAction::free && allocated_in.contains(e.buffer) && allocated_in[e.buffer] == Phase::fwd &&
          op.phase == Phase::bwd) {
        out.held_into_backward += prog.buffers[e.buffer].bytes;
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("sequence parallelism: Megatron's projections gather their input again for the weight gradient") {
  // Llama 3.1 8B (hidden 4,096) over TP 4 with sequence parallelism, 4,096 tokens: each TP region's
  // all-gather makes 4,096 x 4,096 BF16 from a 1,024-row shard.
  Plan p;
  p.model = "llama-3.1-8b";
  p.devices = 4;
  p.shard = 1;
  p.tp = 4;
  p.global_batch = 1;
  const double gathered = 4096.0 * 4096 * 2;
  const Phase fwd = Phase::fwd, bwd = Phase::bwd;

  const StepGraph again = build_step_graph(test::scenario(p));
  p.sp_backward_input = "keep_gathered";
  const StepGraph kept = build_step_graph(test::scenario(p));
  const SpGathers a = sp_gathers(again), k = sp_gathers(kept);
  // Two regions a layer (attention, FFN): gathered in the forward; again before their backward.
  CHECK(a.phases == std::vector<Phase>{fwd, fwd, bwd, bwd});
  CHECK(k.phases == std::vector<Phase>{fwd, fwd});
  for (double b : a.bytes) CHECK(b == doctest::Approx(gathered));
  // What the layer holds from forward to backward: each region's shard instead of its gathered input.
  CHECK(k.held_into_backward - a.held_into_backward == doctest::Approx(2 * gathered * (1 - 1.0 / 4)));
  check_invariants(again);
  check_invariants(kept);

  SUBCASE("full recompute gathers three times, as Megatron's linear layers do under it") {
    // The recomputed forward gathers, and its projections again keep only the shard.
    p.sp_backward_input = "";
    p.recompute = "full";
    const Phase re = Phase::recompute;
    CHECK(sp_gathers(build_step_graph(test::scenario(p))).phases == std::vector<Phase>{fwd, fwd, re, re, bwd, bwd});
    p.sp_backward_input = "keep_gathered";
    CHECK(sp_gathers(build_step_graph(test::scenario(p))).phases == std::vector<Phase>{fwd, fwd, re, re});
  }
}
