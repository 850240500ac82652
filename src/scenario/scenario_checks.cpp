// SPDX-License-Identifier: MIT
#include "scenario/scenario_checks.hpp"

#include <array>
#include <map>
#include <string>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace moesim {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

class ScenarioChecker {
 public:
  explicit ScenarioChecker(const Scenario& s) : s_(s), spec_(s.spec), model_(s.model), hw_(s.hardware) {}

  void run() {
    check_devices();
    check_degrees();
    check_placement();
    check_experts();
    check_pipeline();
    check_tensor_parallel();
    check_batch();
    check_training();
    check_memory_options();
    check_offload();
    check_dp_overlap();
    check_loss();
    check_optimizer();
    check_routing();
    check_fused_ops();
    check_stragglers();
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw InputError(s_.file, path, message);
  }

  void check_stragglers() const {
    std::map<int64_t, double> slowdown;  // a rank named by several entries runs at their product
    for (size_t i = 0; i < spec_.stragglers.size(); ++i) {
      const auto& ranks = spec_.stragglers[i].ranks;
      for (size_t j = 0; j < ranks.size(); ++j) {
        if (ranks[j] < 0 || ranks[j] >= spec_.num_devices) {
          fail("/stragglers/" + std::to_string(i) + "/ranks/" + std::to_string(j),
               "rank " + str(ranks[j]) + " is not one of the " + str(spec_.num_devices) + " devices");
        }
        double& f = slowdown.try_emplace(ranks[j], 1.0).first->second;
        f *= spec_.stragglers[i].slowdown;
        if (!(f <= limits::kMaxSlowdown)) {
          fail("/stragglers/" + std::to_string(i) + "/slowdown",
               "rank " + str(ranks[j]) + "'s slowdowns multiply beyond " + str(static_cast<int64_t>(limits::kMaxSlowdown)) +
                   " (moesim's limit, docs/limits.md)");
        }
      }
    }
  }

  // a x b x ... of plan quantities, each bounded but their product not: refused at `path` beyond
  // `limit` (never computed past int64).
  int64_t product(const std::string& path, std::initializer_list<int64_t> factors, int64_t limit,
                  const std::string& what) const {
    int64_t out = 1;
    for (int64_t f : factors) {
      const auto next = limits::checked_mul(out, f);
      if (!next || *next > limit) {
        fail(path, what + " exceeds " + str(limit) + " (moesim's limit, docs/limits.md)");
      }
      out = *next;
    }
    return out;
  }

  void check_devices() const {
    const int64_t n = spec_.num_devices;
    if (hw_.max_devices && n > *hw_.max_devices) {
      fail("/num_devices", "exceeds " + hw_.name + "'s " + str(*hw_.max_devices) + " devices, got " + str(n));
    }
    const int64_t node = hw_.devices_per_node;
    if (n > node ? n % node != 0 : node % n != 0) {
      fail("/num_devices", "must fill whole nodes of " + str(node) + " (or divide one node), got " + str(n));
    }
  }

  void check_degrees() const {
    const auto& p = spec_.parallel;
    const int64_t product = this->product("/parallel", {p.fsdp.replicate, p.fsdp.shard, p.cp, p.tp.degree, p.pp.stages},
                                          limits::kMaxDevices, "the product of the parallel degrees");
    if (product != spec_.num_devices) {
      fail("/parallel", "the degrees multiply to " + str(product) + " (fsdp.replicate " + str(p.fsdp.replicate) +
                            " x fsdp.shard " + str(p.fsdp.shard) + " x cp " + str(p.cp) + " x tp " +
                            str(p.tp.degree) + " x pp " + str(p.pp.stages) + "), not num_devices (" +
                            str(spec_.num_devices) + ")");
    }
    if (p.tp.degree % p.expert_tp() != 0) {
      fail("/parallel/expert_tensor_parallel",
           "must divide tp.degree (" + str(p.tp.degree) + "), got " + str(p.expert_tensor_parallel));
    }
    const int64_t folded = p.tp.degree / p.expert_tp();
    if ((p.fsdp.shard * p.cp * folded) % p.ep != 0) {
      fail("/parallel/ep", folded == 1 ? "must divide fsdp.shard x cp (" + str(p.fsdp.shard * p.cp) +
                                             "): experts are split over ranks of the shard group, got " + str(p.ep)
                                       : "must divide fsdp.shard x cp x tp / expert_tensor_parallel (" +
                                             str(p.fsdp.shard * p.cp * folded) + "), got " + str(p.ep));
    }
  }

  void check_experts() const {
    const int64_t ep = spec_.parallel.ep;
    if (!model_.moe) {
      if (ep != 1) fail("/parallel/ep", model_.name + " has no MoE layers; ep must be 1, got " + str(ep));
      if (spec_.parallel.expert_tensor_parallel != 0) {
        fail("/parallel/expert_tensor_parallel", model_.name + " has no MoE layers; leave it out");
      }
      if (spec_.parallel.ep_dispatch != ExpertDispatch::direct) {
        fail("/parallel/ep_dispatch", model_.name + " has no MoE layers; leave it out");
      }
      return;
    }
    if (model_.moe->num_experts % ep != 0) {
      fail("/parallel/ep", "must divide " + model_.name + "'s " + str(model_.moe->num_experts) + " experts, got " +
                               str(ep));
    }
    const auto& p = spec_.parallel;
    const int64_t etp = p.expert_tp();
    if (model_.moe->expert_intermediate_size % etp != 0) {
      fail(p.expert_tensor_parallel > 0 ? "/parallel/expert_tensor_parallel" : "/parallel/tp/degree",
           "must divide " + model_.name + "'s expert width " + str(model_.moe->expert_intermediate_size) + ", got " +
               str(etp));
    }
    // Megatron-Core's rule: tokens reach the folded experts as the sequence-parallel shards.
    if (etp < p.tp.degree && !p.tp.sequence_parallel) {
      fail("/parallel/expert_tensor_parallel", "below tp.degree needs /parallel/tp/sequence_parallel");
    }
  }

  void check_placement() const {
    const auto& placement = spec_.parallel.placement;
    std::array<int, 5> seen{};
    for (MeshDim d : placement) ++seen[static_cast<size_t>(d)];
    for (const auto& [name, d] : EnumNames<MeshDim>::names) {
      if (seen[static_cast<size_t>(d)] != 1) {
        fail("/parallel/placement", "must name each of tp, cp, shard, replicate, pp once; " + std::string(name) +
                                        " appears " + str(seen[static_cast<size_t>(d)]) + " times");
      }
    }
  }

  void check_pipeline() const {
    const auto& pp = spec_.parallel.pp;
    if (pp.virtual_stages > 1 && pp.schedule != PipelineSchedule::interleaved_1f1b) {
      // (zb_h1 is a schedule of one chunk per stage; ZB-V, its two-chunk form, is not modelled;
      // dualpipe's second chunk on a stage is the mirror stage, not a virtual stage.)
      fail("/parallel/pp/virtual_stages", "more than one virtual stage needs the interleaved_1f1b schedule");
    }
    if (pp.schedule == PipelineSchedule::dualpipe && (pp.stages < 2 || pp.stages % 2 != 0)) {
      fail("/parallel/pp/stages", "dualpipe pairs stage s with stage p-1-s: needs an even number of stages, got " +
                                      str(pp.stages));
    }
    const int64_t chunks = product("/parallel/pp/virtual_stages", {pp.stages, pp.virtual_stages}, limits::kMaxLayers,
                                   "stages x virtual_stages (model chunks)");
    if (!pp.layers_per_chunk.empty()) {
      if (static_cast<int64_t>(pp.layers_per_chunk.size()) != chunks) {
        fail("/parallel/pp/layers_per_chunk", "needs one count per model chunk (stages x virtual_stages = " +
                                                  str(chunks) + "), got " + str(static_cast<int64_t>(pp.layers_per_chunk.size())));
      }
      int64_t total = 0;
      for (int64_t n : pp.layers_per_chunk) total += n;
      if (total != model_.num_layers) {
        fail("/parallel/pp/layers_per_chunk", "counts add up to " + str(total) + " layers, " + model_.name + " has " +
                                                  str(model_.num_layers));
      }
      // A chunk may hold no layer only where it still has work: the embedding (first) or the
      // head and loss (last), as in Megatron's layouts that give those a stage of their own.
      for (int64_t c = 1; c + 1 < chunks; ++c) {
        if (pp.layers_per_chunk[static_cast<size_t>(c)] == 0) {
          fail("/parallel/pp/layers_per_chunk/" + str(c), "a middle chunk needs at least one layer");
        }
      }
      return;
    }
    if (model_.num_layers % chunks != 0) {
      fail("/parallel/pp/stages", str(model_.num_layers) + " layers of " + model_.name +
                                      " do not split evenly into " + str(pp.stages) + " stages x " +
                                      str(pp.virtual_stages) + " virtual stages; give /parallel/pp/layers_per_chunk " +
                                      "for an uneven split");
    }
  }

  void check_tensor_parallel() const {
    const int64_t tp = spec_.parallel.tp.degree;
    if (tp == 1) return;  // comm_overlap has nothing to overlap: allowed, so that sweeps may vary tp
    if (spec_.parallel.tp.comm_overlap != TpCommOverlap::none && !spec_.parallel.tp.sequence_parallel) {
      fail("/parallel/tp/comm_overlap", "needs /parallel/tp/sequence_parallel (it decomposes the sequence-parallel "
                                        "all-gathers and reduce-scatters)");
    }
    auto heads = [&](const std::string& what, int64_t n) {
      if (n % tp != 0) fail("/parallel/tp/degree", "must divide the " + str(n) + " " + what + ", got " + str(tp));
    };
    if (model_.gqa) {
      heads("attention heads", model_.gqa->num_heads);
      if (model_.gqa->num_kv_heads % tp != 0 && tp % model_.gqa->num_kv_heads != 0) {
        fail("/parallel/tp/degree", "must divide or be a multiple of the " + str(model_.gqa->num_kv_heads) +
                                        " key/value heads, got " + str(tp));
      }
    }
    if (model_.mla) heads("MLA heads", model_.mla->num_heads);
    if (model_.dsa_indexer) heads("indexer heads", model_.dsa_indexer->num_heads);
    if (model_.kda) heads("KDA heads", model_.kda->num_heads);
    if (model_.dense_ffn) heads("dense FFN columns", model_.dense_ffn->intermediate_size);
    if (spec_.parallel.tp.sequence_parallel && (spec_.batch.sequence_length / spec_.parallel.cp) % tp != 0) {
      fail("/parallel/tp/sequence_parallel", "needs the per-CP-rank sequence (" +
                                                 str(spec_.batch.sequence_length / spec_.parallel.cp) +
                                                 ") divisible by tp (" + str(tp) + ")");
    }
  }

  void check_batch() const {
    const auto& b = spec_.batch;
    const auto& p = spec_.parallel;
    (void)product("/batch/global_batch_size", {b.global_batch_size, b.sequence_length}, limits::kMaxTokensPerStep,
                  "tokens per step (global_batch_size x sequence_length)");
    const int64_t per_step = product("/batch/micro_batch_size", {b.micro_batch_size, p.fsdp.shard, p.fsdp.replicate},
                                     limits::kMaxBatch, "micro_batch_size x dp");
    if (b.global_batch_size % per_step != 0) {
      fail("/batch/global_batch_size", "must be a multiple of micro_batch_size x dp (" + str(b.micro_batch_size) +
                                           " x " + str(p.dp()) + " = " + str(per_step) + "), got " +
                                           str(b.global_batch_size));
    }
    if (b.sequence_length % p.cp != 0) {
      fail("/batch/sequence_length", "must be divisible by cp (" + str(p.cp) + "), got " + str(b.sequence_length));
    }
    const int64_t micro_steps = b.global_batch_size / per_step;
    if (p.pp.schedule == PipelineSchedule::interleaved_1f1b && p.pp.stages > 1 && micro_steps % p.pp.stages != 0) {
      fail("/batch/global_batch_size", "interleaved 1F1B needs the micro-batch count (" + str(micro_steps) +
                                           ") to be a multiple of the stages (" + str(p.pp.stages) + ")");
    }
    // DualPipe feeds half the micro-batches from each end and needs both pipelines full in its
    // steady phase (DeepSeek's implementation asserts the same).
    if (p.pp.schedule == PipelineSchedule::dualpipe && (micro_steps % 2 != 0 || micro_steps < 2 * p.pp.stages)) {
      fail("/batch/global_batch_size", "dualpipe needs an even micro-batch count of at least 2 x stages (" +
                                           str(2 * p.pp.stages) + "), got " + str(micro_steps));
    }
    // The work the graph builder and the engine would do, before they start: every rank's program
    // holds each micro-batch's pass through each of its stage's layers.
    if (micro_steps > limits::kMaxMicroBatches) {
      fail("/batch/global_batch_size", "gives " + str(micro_steps) + " micro-batches per step (global_batch_size / "
                                       "(micro_batch_size x dp)), more than moesim's limit of " +
                                           str(limits::kMaxMicroBatches) + " (docs/limits.md)");
    }
    const int64_t layers_per_stage = (model_.num_layers + p.pp.stages - 1) / p.pp.stages + 1;
    if (micro_steps * layers_per_stage > limits::kMaxLayerPasses) {
      fail("/batch/global_batch_size", "gives " + str(micro_steps) + " micro-batches x " + str(layers_per_stage) +
                                           " layers per stage = " + str(micro_steps * layers_per_stage) +
                                           " layer passes per rank's program, more than moesim's limit of " +
                                           str(limits::kMaxLayerPasses) + " (docs/limits.md)");
    }
    // Every stage's program is built: the step holds stages times as many layer passes.
    if (micro_steps * layers_per_stage * p.pp.stages > limits::kMaxStepLayerPasses) {
      fail("/batch/global_batch_size", "gives " + str(micro_steps * layers_per_stage * p.pp.stages) +
                                           " layer passes over the step's " + str(p.pp.stages) +
                                           " pipeline stages, more than moesim's limit of " +
                                           str(limits::kMaxStepLayerPasses) + " (docs/limits.md)");
    }
    // The routing sampler draws an EP group's expert assignments of a micro-batch at once; its
    // products (capacity, padded rows, copies) stay far from int64 below this bound.
    if (model_.moe) {
      (void)product("/batch/micro_batch_size", {p.ep, b.micro_batch_size, b.sequence_length / p.cp, model_.moe->top_k},
                    limits::kMaxRoutedAssignments,
                    "expert assignments per EP group and micro-batch (ep x micro_batch_size x sequence_length / cp x "
                    "top_k)");
    }
  }

  void check_training() const {
    const auto& t = spec_.training;
    if (t.mode == TrainingMode::lora && !t.lora) fail("/training/lora", "required when mode is lora");
    if (t.mode != TrainingMode::lora && t.lora) fail("/training/lora", "only applies when mode is lora");
    if (t.lora) {
      if (t.lora->targets.empty()) fail("/training/lora/targets", "name at least one projection");
      for (size_t i = 0; i < t.lora->targets.size(); ++i) {
        const LoraTarget target = t.lora->targets[i];
        if (!lora_target_exists(model_, target)) {
          fail("/training/lora/targets/" + std::to_string(i),
               model_.name + " has no " + std::string(enum_name(target)) + " projection");
        }
        for (size_t j = 0; j < i; ++j) {
          if (t.lora->targets[j] == target) {
            fail("/training/lora/targets/" + std::to_string(i), "'" + std::string(enum_name(target)) + "' is listed twice");
          }
        }
      }
    }
    auto has_peak = [&](const std::string& path, Dtype d) {
      if (!hw_.device.peak_flops.of(d)) {
        fail(path, hw_.name + " has no " + std::string(enum_name(d)) + " peak (see its device.peak_flops)");
      }
    };
    has_peak("/training/precision/compute", t.precision.compute);
    has_peak("/training/precision/attention", attention_dtype(t.precision));
    has_peak("/training/precision/compute", unquantized_dtype(t.precision));
    const auto only_quantized = [&](bool set, const std::string& path) {
      if (set && dtype_bytes(t.precision.compute) >= 2) {
        fail(path, "applies to compute of 8 bits or fewer; compute is " + std::string(enum_name(t.precision.compute)));
      }
    };
    only_quantized(t.precision.quantization.has_value(), "/training/precision/quantization");
    only_quantized(t.precision.cache_quantized_weights, "/training/precision/cache_quantized_weights");
  }

  void check_layers(const std::string& path, const LayerSet& layers) const {
    if (layers.max_layer() > model_.num_layers) {
      fail(path, "layer " + str(layers.max_layer()) + " is outside the model (layers 1-" + str(model_.num_layers) + ")");
    }
  }

  bool swap_target_exists(SwapTarget t) const {
    switch (t) {
      case SwapTarget::attention_in_proj:
      case SwapTarget::attention_out_proj: return true;
      case SwapTarget::expert_gmm_up:
      case SwapTarget::expert_gmm_down: return model_.moe.has_value();
      case SwapTarget::shared_expert_up: return model_.moe && model_.moe->num_shared_experts > 0;
      case SwapTarget::dense_ffn_up: return model_.uses(FfnKind::dense);
      case SwapTarget::latent_down: return model_.moe && model_.moe->latent_size > 0;
    }
    return false;
  }

  void check_memory_options() const {
    check_layers("/recompute/layers", spec_.recompute.layers);
    check_layers("/swap/layers", spec_.swap.layers);
    const auto& swap = spec_.swap;
    if (swap.enabled && swap.ops.empty()) fail("/swap/ops", "name at least one op output when swap is enabled");
    for (size_t i = 0; i < swap.ops.size(); ++i) {
      if (!swap_target_exists(swap.ops[i])) {
        fail("/swap/ops/" + std::to_string(i), model_.name + " has no " + std::string(enum_name(swap.ops[i])) + " op");
      }
    }
    if (swap.enabled && hw_.device.host_memory.capacity_per_device.value <= 0) {
      fail("/swap/enabled", hw_.name + " has no host memory to swap to");
    }
    if (spec_.recompute.policy == RecomputePolicy::none && !spec_.recompute.layers.is_all()) {
      fail("/recompute/layers", "set but the policy is none");
    }
  }

  // CPU offload only where a framework runs it (docs/pipeline.md, "CPU offload").
  void check_offload() const {
    const auto& p = spec_.parallel;
    if (p.fsdp.offload == OffloadKind::none) return;
    const std::string what = std::string(enum_name(p.fsdp.offload));
    if (p.fsdp.zero_stage == 0) {
      fail("/parallel/fsdp/offload", "offload " + what + " needs a sharded optimizer (zero_stage 1-3): DeepSpeed "
                                     "offloads only under ZeRO, FSDP2 only with fully_shard; got zero_stage 0");
    }
    if (p.fsdp.offload == OffloadKind::parameters && p.fsdp.zero_stage < 3) {
      fail("/parallel/fsdp/offload", "offload parameters needs zero_stage 3 (FSDP2 CPUOffloadPolicy, ZeRO-3 "
                                     "offload_param), got zero_stage " + str(p.fsdp.zero_stage) +
                                     "; offload optimizer keeps parameters in HBM");
    }
    if (p.pp.schedule == PipelineSchedule::dualpipe && p.pp.stages > 1) {
      fail("/parallel/fsdp/offload", "not with pp.schedule dualpipe: no framework runs CPU offload with it");
    }
    if (hw_.device.host_memory.capacity_per_device.value <= 0) {
      fail("/parallel/fsdp/offload", hw_.name + " has no host memory to offload to");
    }
  }

  // The data-parallel switches only where they act (docs/pipeline.md, "Data-parallel overlap").
  void check_dp_overlap() const {
    const auto& p = spec_.parallel;
    if (!p.fsdp.overlap_grad_reduce && resolved_gradient_sync(p.fsdp, p.pp.stages) == GradientSync::every_micro_batch) {
      fail("/parallel/fsdp/overlap_grad_reduce",
           "false reduces the gradients once, after the step's last backward; gradient_sync resolves to "
           "every_micro_batch here (set it to last_micro_batch)");
    }
    if (p.fsdp.prefetch != 1 && p.fsdp.zero_stage < 3) {
      fail("/parallel/fsdp/prefetch", "paces FSDP2's per-unit gathers (zero_stage 3); zero_stage " + str(p.fsdp.zero_stage) +
                                          " issues every gather at once, so only the default 1 is accepted");
    }
    if (!p.fsdp.overlap_param_gather && (p.fsdp.zero_stage < 1 || p.fsdp.zero_stage > 2)) {
      fail("/parallel/fsdp/overlap_param_gather",
           "only zero_stage 1-2 gather updated parameters after the optimizer step; got zero_stage " +
               str(p.fsdp.zero_stage) + (p.fsdp.zero_stage == 3 ? " (FSDP2 gathers each unit where it is used)" : ""));
    }
  }

  void check_optimizer() const {
    const auto& o = spec_.training.optimizer;
    if (o.implementation != OptimizerImplementation::foreach) return;
    if (o.kind != OptimizerKind::adamw) fail("/training/optimizer/implementation", "foreach is modelled for adamw only");
    if (spec_.parallel.fsdp.offload != OffloadKind::none) {
      fail("/training/optimizer/implementation", "foreach runs the step on the GPU; parallel.fsdp.offload moves it to the host");
    }
  }

  void check_loss() const {
    const auto& l = spec_.loss;
    if (l.implementation != LossImplementation::fused && l.kind != LossKind::full) {
      fail("/loss/implementation", "only applies to the full loss");
    }
    if (l.kind == LossKind::chunked) {
      if (l.chunk_tokens == 0) fail("/loss/chunk_tokens", "must be positive for the chunked loss");
      if (l.chunk_tokens > spec_.batch.sequence_length) {
        fail("/loss/chunk_tokens", "exceeds the sequence length (" + str(spec_.batch.sequence_length) + ")");
      }
    } else if (l.chunk_tokens != 0) {
      fail("/loss/chunk_tokens", "only applies to the chunked loss");
    }
    if (l.kind == LossKind::cce) {
      if (l.vocab_chunk == 0) fail("/loss/vocab_chunk", "must be positive for the cce loss");
      if (l.vocab_chunk > model_.vocab_size) {
        fail("/loss/vocab_chunk", "exceeds the vocabulary (" + str(model_.vocab_size) + ")");
      }
    } else if (l.vocab_chunk != 0) {
      fail("/loss/vocab_chunk", "only applies to the cce loss");
    }
  }

  void check_routing() const {
    const auto& r = spec_.routing;
    if (r.distribution == RoutingDistribution::skewed && r.skew <= 0) {
      fail("/routing/skew", "must be positive for a skewed distribution");
    }
    if (r.distribution != RoutingDistribution::skewed && r.skew != 0) {
      fail("/routing/skew", "only applies to the skewed distribution");
    }
    if (r.distribution == RoutingDistribution::histogram && r.histogram.empty()) {
      fail("/routing/histogram", "name a histogram file");
    }
    if (r.distribution != RoutingDistribution::histogram && !r.histogram.empty()) {
      fail("/routing/histogram", "only applies to the histogram distribution");
    }
    if (r.distribution != RoutingDistribution::uniform && !model_.moe) {
      fail("/routing/distribution", model_.name + " has no experts to route to");
    }
    if (r.groups != 1 || r.groups_per_token != 0) {
      if (!model_.moe) fail("/routing/groups", model_.name + " has no experts to route to");
      const int64_t experts = model_.moe->num_experts;
      if (experts % r.groups != 0) {
        fail("/routing/groups", "must divide " + model_.name + "'s " + str(experts) + " experts, got " + str(r.groups));
      }
      if (r.groups_per_token > r.groups) {
        fail("/routing/groups_per_token", "must be at most groups (" + str(r.groups) + "), got " + str(r.groups_per_token));
      }
      if (r.groups_per_token > 0 && r.groups_per_token * (experts / r.groups) < model_.moe->top_k) {
        fail("/routing/groups_per_token", "holds " + str(r.groups_per_token * (experts / r.groups)) +
                                              " experts, fewer than top_k (" + str(model_.moe->top_k) + ")");
      }
    }
    // One limit at a time: each names the units a token's experts may span.
    const int limits = (r.groups_per_token > 0) + (r.nodes_per_token > 0) + (r.devices_per_token > 0);
    if (r.nodes_per_token > 0 && !model_.moe) fail("/routing/nodes_per_token", model_.name + " has no experts to route to");
    if (r.devices_per_token > 0 && !model_.moe) fail("/routing/devices_per_token", model_.name + " has no experts to route to");
    if (limits > 1) {
      fail(r.devices_per_token > 0 ? "/routing/devices_per_token" : "/routing/nodes_per_token",
           "only one of groups_per_token, nodes_per_token and devices_per_token may limit a token's experts");
    }
    if (r.devices_per_token > 0) {
      const int64_t ep = spec_.parallel.ep;
      if (r.devices_per_token > ep) {
        fail("/routing/devices_per_token", "must be at most parallel.ep (" + str(ep) + "), got " + str(r.devices_per_token));
      }
      const int64_t held = r.devices_per_token * (model_.moe->num_experts / std::max<int64_t>(ep, 1));
      if (held < model_.moe->top_k) {
        fail("/routing/devices_per_token",
             "holds " + str(held) + " experts, fewer than top_k (" + str(model_.moe->top_k) + ")");
      }
    }
    if (r.capacity_factor && !model_.moe) fail("/routing/capacity_factor", model_.name + " has no experts to route to");
    if (r.capacity_policy != CapacityPolicy::drop && !r.capacity_factor) {
      fail("/routing/capacity_policy", "only applies with a capacity_factor");
    }
    if (r.bias_update_speed > 0 && !model_.moe) fail("/routing/bias_update_speed", model_.name + " has no experts to route to");
    if (r.bias_start_step > 0 && r.bias_update_speed == 0) fail("/routing/bias_start_step", "only applies with a bias_update_speed");
  }

  void check_fused_ops() const {
    const auto& f = spec_.fused_ops;
    if (f.dsa && !model_.uses(AttentionKind::mla_dsa)) fail("/fused_ops/dsa", model_.name + " has no mla_dsa layers");
    if (f.kda && !model_.uses(AttentionKind::kda)) fail("/fused_ops/kda", model_.name + " has no kda layers");
    if (f.permute_gemm && !model_.moe) fail("/fused_ops/permute_gemm", model_.name + " has no MoE layers");
    const bool dense_attention = model_.uses(AttentionKind::mha) || model_.uses(AttentionKind::gqa) ||
                                 model_.uses(AttentionKind::mla);
    if (!f.flash_attention && !dense_attention) {
      fail("/fused_ops/flash_attention", model_.name + " has no mha, gqa or mla layers");
    }
    if (f.attention_kernel != AttentionKernel::platform_default && !f.flash_attention &&
        !model_.uses(AttentionKind::mla_dsa)) {
      fail("/fused_ops/attention_kernel", "names a flash-attention kernel, but fused_ops.flash_attention is false");
    }
    if (f.gate_up) {
      const bool gated_ffn = is_gated(model_.activation) &&
                             (model_.uses(FfnKind::dense) || (model_.moe && model_.moe->num_shared_experts > 0));
      if (!gated_ffn) fail("/fused_ops/gate_up", model_.name + " has no gated dense FFN or shared experts");
      if (*f.gate_up == GateUp::fused && spec_.recompute.policy == RecomputePolicy::selective_op) {
        fail("/fused_ops/gate_up",
             "fused, but recompute selective_op saves every second matmul's output: its stack (torchtitan) runs the "
             "gate and up projections as two matmuls");
      }
    }
  }

  const Scenario& s_;
  const ScenarioSpec& spec_;
  const ModelSpec& model_;
  const HardwareSpec& hw_;
};

}  // namespace

bool lora_target_exists(const ModelSpec& model, LoraTarget t) {
  const bool has_mla = model.mla.has_value();
  const bool q_lora = has_mla && model.mla->q_lora_rank > 0;
  switch (t) {
    case LoraTarget::q_proj: return model.gqa || model.kda || (has_mla && !q_lora);
    case LoraTarget::k_proj:
    case LoraTarget::v_proj: return model.gqa || model.kda;
    case LoraTarget::o_proj: return true;
    case LoraTarget::output_gate:
      return (has_mla && model.mla->output_gate != OutputGate::none) ||
             (model.kda && model.kda->output_gate != OutputGate::none);
    case LoraTarget::q_a_proj:
    case LoraTarget::q_b_proj: return q_lora;
    case LoraTarget::kv_a_proj:
    case LoraTarget::kv_b_proj: return has_mla;
    case LoraTarget::dense_ffn: return model.uses(FfnKind::dense);
    case LoraTarget::shared_experts: return model.moe && model.moe->num_shared_experts > 0;
    case LoraTarget::routed_experts: return model.moe.has_value();
    case LoraTarget::latent_proj: return model.moe && model.moe->latent_size > 0;
    case LoraTarget::lm_head: return true;
  }
  return false;
}

void check_scenario(const Scenario& scenario) { ScenarioChecker(scenario).run(); }

}  // namespace moesim
