// SPDX-License-Identifier: MIT
// ScenarioSpec: a model and a hardware file by reference, then the training recipe and the
// parallel plan, read from scenarios/*.json. A scenario may also declare sweep axes.
//
// load_scenario returns the scenario together with the model and hardware it names, after the
// plan's consistency checks (degrees multiply to the device count, experts divide by EP, layers
// by pipeline stages, heads by TP, ...), so later stages never see an impossible plan.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/enum_names.hpp"
#include "core/field_row.hpp"
#include "core/json_input.hpp"
#include "core/layer_set.hpp"
#include "core/raw_json.hpp"
#include "hardware/hardware_spec.hpp"
#include "model/model_spec.hpp"

namespace moesim {

enum class TrainingMode { pretrain, full_finetune, lora };
enum class OptimizerKind { adamw, sgd };
// How the optimizer step runs on the GPU: one fused kernel per tensor group reading and writing
// each state once (torch.optim's fused=True, Apex / Transformer Engine's FusedAdam), or PyTorch's
// multi-tensor foreach form (its default on CUDA): one kernel per arithmetic step over all
// tensors, and a temporary of the second moment's size (step_graph.cpp, optimizer).
enum class OptimizerImplementation { fused, foreach };
enum class PipelineSchedule { one_f_one_b, interleaved_1f1b, zero_bubble_h1, dualpipe };
// selective_op: PyTorch's per-op selective activation checkpointing as torchtitan configures it
// (graph/tape.cpp, recomputed_by_policy).
enum class RecomputePolicy { none, selective, selective_op, full };
// How the expert all-to-all reaches other scale-up domains: every token copy straight to its
// expert's rank, or once per destination domain and fanned out inside it (DeepEP's internode
// kernels, hierarchical dispatchers).
enum class ExpertDispatch { direct, hierarchical };
// The heads context-parallel ranks exchange keys and values with: the model's key/value heads, or
// those repeated to the query heads before the exchange (an attention that calls the kernel after
// GQA's repeat_kv, as torchtitan's Llama does under PyTorch's context_parallel).
enum class CpKvHeads { kv, query };
enum class LossKind { full, chunked, cce };
// How the full loss runs its cross-entropy: one kernel each way on FP32 logits the head writes, in
// place (a fused loss: Megatron-Core's cross_entropy_loss_fusion, Liger's), or PyTorch's
// F.cross_entropy(logits.float()) as torchtitan calls it (a cast, log-softmax and NLL kernels; their
// FP32 intermediates, loss_ops.cpp).
enum class LossImplementation { fused, eager };
// How the memory-bound ops around the matmuls (norms, activations, RoPE) run: one hand-written
// kernel per op (Transformer Engine, Apex, Megatron's fusions), one Inductor kernel per op under
// torch.compile, or PyTorch eager's decomposition into several kernels (graph/elementwise_kernels.hpp).
enum class ElementwiseExecution { fused, compiled, eager };
// Eager RMSNorm: ATen's fused kernel (aten::_fused_rms_norm), or the composite of PyTorch 2.4-2.7.
enum class EagerRmsNorm { kernel, composite };
// Eager RoPE: complex arithmetic (torchtitan, Meta's Llama reference) or real (pairs rotated by hand).
enum class EagerRope { complex, real };
// A gated FFN's up-projection: one GEMM of the gate and up halves (Megatron-Core's linear_fc1), or
// two GEMMs (torchtitan's w1 and w3).
enum class GateUp { fused, apart };
// How a linear layer's operands are cast to the compute format when it is 8 bits or fewer
// (graph/quantize_casts.hpp): a max pass then a cast per tensor (dynamic tensorwise scaling),
// torchao's rowwise form, one pass writing both layouts (block scales, delayed scaling), or no
// kernels of their own (fused into the producers).
enum class QuantizationCasts { tensorwise, rowwise, one_pass, fused };
enum class RoutingDistribution { uniform, skewed, histogram };
// What an expert does with assignments beyond its capacity (routing.capacity_factor): drop them,
// or drop them and pad every expert's input up to the capacity (fixed-shape buffers).
enum class CapacityPolicy { drop, pad };

// Projections a LoRA adapter can be attached to. Names follow the usual module names; the
// dense_ffn, shared_experts and routed_experts targets cover all matrices of those FFNs.
enum class LoraTarget {
  q_proj, k_proj, v_proj, o_proj, output_gate,
  q_a_proj, q_b_proj, kv_a_proj, kv_b_proj,
  dense_ffn, shared_experts, routed_experts, latent_proj, lm_head
};

// MatMul / grouped-GEMM outputs that swap can move to host memory between their forward use and
// the backward pass.
enum class SwapTarget {
  attention_in_proj,   // q/k/v (and latent) projection outputs
  attention_out_proj,  // output projection
  expert_gmm_up,       // routed experts' gate+up grouped GEMM output (the largest per token)
  expert_gmm_down,     // routed experts' down grouped GEMM output
  shared_expert_up,    // shared experts' gate+up output
  dense_ffn_up,        // dense FFN gate+up output
  latent_down          // latent MoE down-projection output
};

struct LoraSpec {
  int64_t rank = 0;
  double alpha = 0;
  std::vector<LoraTarget> targets;
  Dtype dtype = Dtype::bf16;
};

// Formats of everything a step holds; FSDP2 mixed precision (params gathered in `params`,
// gradients reduced in `grad_reduce`, sharded master weights and optimizer states in fp32).
struct PrecisionSpec {
  Dtype compute = Dtype::bf16;
  Dtype params = Dtype::bf16;
  Dtype master_params = Dtype::fp32;
  Dtype grads = Dtype::fp32;
  Dtype grad_reduce = Dtype::fp32;
  Dtype optimizer_states = Dtype::fp32;
  Dtype activations = Dtype::bf16;
  std::optional<Dtype> attention;  // attention kernels' format; absent: see attention_dtype
  std::optional<QuantizationCasts> quantization;  // compute of 8 bits or fewer only; absent: tensorwise
  bool cache_quantized_weights = false;  // weights cast once per step (micro-batch 0), not per pass
};

// The format of the matmuls a low-precision recipe leaves unquantised - the router and the LM
// head: compute, or the activations' format when compute is 8 bits or fewer (FP8 recipes such as
// Transformer Engine's and torchtitan's float8 quantise the linear layers only).
Dtype unquantized_dtype(const PrecisionSpec& p);
// The format attention kernels (flash, sparse, KDA) run in: the scenario's, or unquantized_dtype.
Dtype attention_dtype(const PrecisionSpec& p);
// How the linear layers' operands are cast to the compute format: the scenario's, or tensorwise.
QuantizationCasts quantization_casts(const PrecisionSpec& p);

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::adamw;
  OptimizerImplementation implementation = OptimizerImplementation::fused;
};

// How long the parameter gradients (precision.grads, sharded as the ZeRO stage says) hold HBM:
// the whole run, in buffers of their own (Megatron-Core's gradient buffer, DeepSpeed's partitions,
// zero_grad(set_to_none=False)), or from where the step first writes them to the unit's optimizer
// update, as PyTorch's zero_grad(set_to_none=True) leaves them (FSDP2, torchtitan; step_graph.cpp).
enum class GradientMemory { persistent, per_step };

struct TrainingSpec {
  TrainingMode mode = TrainingMode::pretrain;
  std::optional<LoraSpec> lora;
  PrecisionSpec precision;
  OptimizerSpec optimizer;
  double attention_dropout = 0;  // probability; costs only without flash attention
  double hidden_dropout = 0;     // probability, on each sub-layer's output before its residual add
  GradientMemory gradient_memory = GradientMemory::persistent;
};

struct BatchSpec {
  int64_t global_batch_size = 0;  // sequences per optimizer step
  int64_t micro_batch_size = 1;   // sequences per data-parallel rank per micro-step
  int64_t sequence_length = 0;
};

// When gradients are reduced across data-parallel ranks.
enum class GradientSync {
  automatic,          // what the framework does for this plan (see FsdpSpec::gradient_sync)
  every_micro_batch,  // after each micro-batch's backward (FSDP2's default, DeepSpeed ZeRO-2)
  last_micro_batch    // once per step, in the last micro-batch's backward (DDP no_sync, Megatron)
};

// Data parallelism over the shard group (fsdp.shard x cp ranks), with ZeRO's stages of sharding:
//   0  DDP: everything replicated; gradients all-reduced
//   1  distributed optimizer (Megatron's, ZeRO-1): optimizer states and fp32 master weights
//      sharded; gradients reduce-scattered, updated parameters all-gathered, once per step
//   2  ZeRO-2: gradients sharded too (reduce-scattered as they are produced)
//   3  FSDP2 / ZeRO-3: parameters sharded too, gathered per unit before use
// and replicate groups on top (HSDP: gradients all-reduced across replicas after the shard group).
// CPU offload of persistent training state to host memory, as the frameworks run it (the model:
// docs/pipeline.md, "CPU offload"):
//   optimizer   DeepSpeed ZeRO-Offload (offload_optimizer): fp32 master weights and optimizer
//               states in host memory, gradient shards copied there after their reduction (held
//               there from ZeRO-2 on), the optimizer step on the CPU, updated parameter shards
//               copied back; the low-precision parameters stay in HBM (zero_stage 1-3)
//   parameters  PyTorch FSDP2 CPUOffloadPolicy (DeepSpeed ZeRO-3 with offload_param too): the
//               sharded parameters as well, copied to the device before each all-gather; the
//               CPU updates them in place (zero_stage 3)
enum class OffloadKind { none, optimizer, parameters };

struct FsdpSpec {
  int64_t shard = 1;      // shard group size
  int64_t replicate = 1;  // HSDP replicate groups (plain DP when shard is 1)
  int64_t zero_stage = 3;
  GradientSync gradient_sync = GradientSync::automatic;
  bool reshard_after_forward = true;
  int64_t prefetch = 1;   // units gathered ahead of use
  bool overlap_grad_reduce = true;   // false: the step's reductions after its last backward
  bool overlap_param_gather = true;  // ZeRO 1-2, false: the parameter all-gather after the optimizer
  OffloadKind offload = OffloadKind::none;
};

// The gradient synchronisation a plan runs: automatic resolves to what the frameworks do -
// once per step for DDP and the distributed optimizer (ZeRO 0-1) and for FSDP2 under pipeline
// parallelism (torch.distributed.pipelining syncs only the last backward); every micro-batch for
// ZeRO-2 and FSDP2 without pipelining (FSDP2's and torchtitan's gradient accumulation).
GradientSync resolved_gradient_sync(const FsdpSpec& fsdp, int64_t pipeline_stages);

// How the attention and dense-FFN projections' sequence-parallel all-gathers and reduce-scatters
// overlap their GEMMs: as ring steps under them (graph/tape_builder.hpp), the GEMM run either as one
// kernel per step or as one kernel that takes each step's rows as they arrive.
enum class TpCommOverlap {
  none,
  chunked,  // a GEMM per ring step (Transformer Engine userbuffers, PyTorch's AsyncTP)
  fused     // one GEMM kernel that waits for each step's tiles (ByteDance's Flux, MegaScale)
};

// What a column-parallel projection keeps of its sequence-parallel all-gathered input for the
// weight gradient: its rank's sequence shard, gathered again in the backward (Megatron-LM's
// linear layers, Transformer Engine), or the gathered tensor itself (PyTorch DTensor, torchtitan).
enum class SpBackwardInput { gather_again, keep_gathered };

struct TensorParallelSpec {
  int64_t degree = 1;
  bool sequence_parallel = true;
  TpCommOverlap comm_overlap = TpCommOverlap::none;
  SpBackwardInput sp_backward_input = SpBackwardInput::gather_again;
};

struct PipelineSpec {
  int64_t stages = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  int64_t virtual_stages = 1;  // model chunks per stage (interleaved 1F1B)
  // DualPipe: each overlapped pair of a forward and a backward chunk runs interleaved, so that
  // one's communication hides under the other's compute; false runs them one after the other.
  bool overlap_forward_backward = true;
  // Layers of each model chunk in pipeline order (stages x virtual_stages entries; chunk c runs
  // on stage c % stages); empty: an even split. The embedding belongs to chunk 0, the final norm,
  // head and loss to the last chunk (Megatron's pipeline layout).
  std::vector<int64_t> layers_per_chunk;
};

// The layers of each model chunk, in pipeline order: the scenario's layout, or an even split.
std::vector<int64_t> chunk_layer_counts(const PipelineSpec& pp, int64_t num_layers);

// The dimensions of the device mesh; a plan's placement orders them from innermost (consecutive
// ranks, so one scale-up domain first) to outermost.
enum class MeshDim : uint8_t { tp, cp, shard, replicate, pp };
// TP innermost, then CP, the FSDP shard, HSDP replicas, and pipeline stages outermost: how
// torchtitan builds its mesh (pp, dp_replicate, dp_shard, cp, tp, outermost first) and Megatron
// orders its ranks by default (tp-cp-ep-dp-pp).
inline const std::vector<MeshDim> kDefaultPlacement{MeshDim::tp, MeshDim::cp, MeshDim::shard, MeshDim::replicate,
                                                    MeshDim::pp};

struct ParallelSpec {
  FsdpSpec fsdp;
  int64_t ep = 1;  // expert parallel degree, carved out of fsdp.shard x cp x (tp / expert_tp)
  TensorParallelSpec tp;
  int64_t expert_tensor_parallel = 0;  // 0: the routed experts are split over tp.degree ranks
  ExpertDispatch ep_dispatch = ExpertDispatch::direct;
  PipelineSpec pp;
  int64_t cp = 1;  // context parallel degree
  CpKvHeads cp_kv_heads = CpKvHeads::kv;
  std::optional<Dtype> cp_grad_format;  // the key/value gradients' exchange; absent: the activations'
  std::vector<MeshDim> placement = kDefaultPlacement;  // innermost first, each dimension once

  int64_t dp() const { return fsdp.shard * fsdp.replicate; }
  int64_t expert_tp() const { return expert_tensor_parallel > 0 ? expert_tensor_parallel : tp.degree; }
};

struct RecomputeSpec {
  RecomputePolicy policy = RecomputePolicy::none;
  LayerSet layers = LayerSet::all();
};

struct SwapSpec {
  bool enabled = false;
  std::vector<SwapTarget> ops;
  LayerSet layers = LayerSet::all();
};

struct LossSpec {
  LossKind kind = LossKind::full;
  LossImplementation implementation = LossImplementation::fused;  // full only
  int64_t chunk_tokens = 0;  // chunked: tokens per chunk
  int64_t vocab_chunk = 0;   // cce: vocabulary entries per chunk
};

struct RoutingSpec {
  RoutingDistribution distribution = RoutingDistribution::uniform;
  double skew = 0;        // skewed: Zipf exponent of expert popularity
  std::string histogram;  // histogram: file of tokens per expert, relative to the scenario
  int64_t seed = 1;
  int64_t num_sampled_steps = 1;
  // Group-limited routing (DeepSeek-V3's n_group / topk_group): the experts form `groups` equal
  // groups and a token's top_k come from `groups_per_token` of them; 0: no limit.
  int64_t groups = 1;
  int64_t groups_per_token = 0;
  // Node-limited routing (DeepSeek-V3): a token's experts on at most this many scale-up domains
  // of its EP group; 0: no limit.
  int64_t nodes_per_token = 0;
  // Device-limited routing (DeepSeek-V2): a token's experts on at most this many EP ranks, the
  // token sent once per destination rank; 0: no limit.
  int64_t devices_per_token = 0;
  // Expert capacity, as a multiple of the balanced load; absent: dropless.
  std::optional<double> capacity_factor;
  CapacityPolicy capacity_policy = CapacityPolicy::drop;
  // Auxiliary-loss-free bias balancing (DeepSeek-V3): each step every expert's bias moves by this
  // much (log-popularity units) towards balance; 0: off.
  double bias_update_speed = 0;
  // The training step the first sampled step stands for: its biases have had this many updates.
  int64_t bias_start_step = 0;
};

// How an MoE layer hides its expert all-to-all (docs/modelling.md#expert-dispatch-overlap).
struct OverlapSpec {
  bool comm_compute = true;              // collectives on their own stream, overlapping compute
  bool moe_local_first = false;          // experts compute the rank's own tokens while the remote ones travel
  bool moe_shared_expert_overlap = false;  // shared experts computed while dispatch and combine travel
  int64_t moe_dispatch_chunks = 1;       // dispatch, experts and combine pipelined over this many chunks
};

// What the software stack holds besides the model's tensors (assumptions, to be calibrated).
struct MemoryOverheadSpec {
  // Absent: what the hardware's calibration file measured, else the defaults below
  // (runtime_reserved_bytes, comm_buffer_bytes).
  std::optional<Bytes> runtime_reserved;       // CUDA context, library workspaces, framework state
  std::optional<Bytes> comm_buffer_per_group;  // collective library buffers per communicator used
  double allocator_fragmentation = 0;      // what an allocator loses beyond best-fit placement, as a fraction of the slab
};

// The host (CPU) side of the training loop: Python, the framework's dispatch and the kernel
// launches. The host spends op_issue + kernels x kernel_issue on each op of the graph (kernels:
// Op::num_kernels), and the engine lets an op start no earlier than the host issued it
// (engine.hpp). `validate --from-trace` fits both from a profiler trace.
struct HostSpec {
  Seconds op_issue{0};      // host time per op of the graph; 0 with kernel_issue 0: the host is always ahead
  Seconds kernel_issue{0};  // host time per kernel an op launches, on top of op_issue
  // The host waits for each forward (or recomputed) MoE router before issuing what follows it:
  // dropless dispatch copies the tokens per expert to the host to size the all-to-all.
  bool waits_for_routing = false;
};

struct FusedOpsSpec {
  bool flash_attention = true;  // false: scores and probabilities materialised (pre-FlashAttention)
  // Which flash-attention implementation the stack ran; load_scenario puts that kernel's curves in
  // place of the hardware's default attention curves.
  AttentionKernel attention_kernel = AttentionKernel::platform_default;
  bool dsa = false;           // LI / SFA / SFAG fused kernels
  bool kda = false;           // fused KDA forward and backward
  bool permute_gemm = false;  // permute fused into the grouped GEMM
  ElementwiseExecution elementwise = ElementwiseExecution::fused;
  EagerRmsNorm eager_rms_norm = EagerRmsNorm::kernel;  // under elementwise eager
  EagerRope eager_rope = EagerRope::complex;           // under elementwise eager
  std::optional<GateUp> gate_up;  // absent: apart under recompute selective_op, fused otherwise
};

// Devices that run slower than the rest (thermal throttling, a bad link, a noisy neighbour).
struct StragglerSpec {
  std::vector<int64_t> ranks;
  double slowdown = 1.0;  // factor on their kernel times
};

struct SweepAxis {
  std::string path;  // JSON pointer of a scenario field, e.g. "/parallel/ep"
  std::vector<RawJson> values;
};

struct SweepSpec {
  std::vector<SweepAxis> axes;
};

struct ScenarioSpec {
  std::string name;
  std::string doc;
  std::string model;     // path relative to this file, or a shipped model name
  std::string hardware;  // path relative to this file, or a shipped hardware name
  int64_t num_devices = 0;
  TrainingSpec training;
  BatchSpec batch;
  ParallelSpec parallel;
  RecomputeSpec recompute;
  SwapSpec swap;
  LossSpec loss;
  RoutingSpec routing;
  OverlapSpec overlap;
  FusedOpsSpec fused_ops;
  MemoryOverheadSpec memory;
  HostSpec host;
  std::vector<StragglerSpec> stragglers;
  SweepSpec sweep;
};

// Each rank's slowdown factor from the scenario's stragglers (1 = nominal); empty when none.
std::vector<double> rank_speeds(const ScenarioSpec& spec);

// A checked scenario with what it refers to.
struct Scenario {
  std::string file;
  ScenarioSpec spec;
  std::string model_file;
  ModelSpec model;
  std::string hardware_file;
  HardwareSpec hardware;  // with the attention curves of fused_ops.attention_kernel
  std::vector<double> routing_histogram;  // tokens per expert, when routing is a histogram
};

// Micro-batches each data-parallel rank runs per optimizer step: global_batch_size / (micro_batch_size
// x dp), whole for a checked scenario (check_scenario refuses a remainder).
int64_t micro_batches_per_step(const ScenarioSpec& spec);

Scenario load_scenario(const InputText& input);
// The same with `hardware` in place of the file the scenario names (`--hardware` on the command
// line: a calibration scenario run on the user's own machine). The plan's checks run against it.
Scenario load_scenario(const InputText& input, const InputText& hardware);
// Device memory of the software stack: the scenario's memory.runtime_reserved and
// memory.comm_buffer_per_group when given, else what the hardware's calibration file measured
// (HardwareSpec::stack_memory), else 1 GB and 128 MiB (assumptions).
inline constexpr double kDefaultRuntimeReserved = 1e9;
inline constexpr double kDefaultCommBufferPerGroup = 128.0 * (1 << 20);
double runtime_reserved_bytes(const ScenarioSpec& spec, const HardwareSpec& hardware);
// One communicator that runs the collective kinds `kinds` (all_gather, reduce_scatter,
// all_reduce, all_to_all; point-to-point counts as all_to_all): measured, the largest of the
// kinds' (their buffers are shared, the largest set is what stays); a kind not measured counts
// as the largest measured one.
double comm_buffer_bytes(const ScenarioSpec& spec, const HardwareSpec& hardware, const std::vector<std::string>& kinds);
std::vector<FieldRow> describe_scenario_fields();
// A routing histogram file: {"tokens_per_expert": [one non-negative number per expert]}.
std::vector<double> load_routing_histogram(const InputText& input, const ModelSpec& model);

// The name of the embedded default scenario (scenarios/<name>.json).
inline constexpr std::string_view kDefaultScenario = "k3-lora-fsdp2-ep64";

template <>
struct EnumNames<TrainingMode> {
  static constexpr std::array<std::pair<std::string_view, TrainingMode>, 3> names{{
      {"pretrain", TrainingMode::pretrain},
      {"full_finetune", TrainingMode::full_finetune},
      {"lora", TrainingMode::lora},
  }};
};
template <>
struct EnumNames<OptimizerImplementation> {
  static constexpr std::array<std::pair<std::string_view, OptimizerImplementation>, 2> names{{
      {"fused", OptimizerImplementation::fused},
      {"foreach", OptimizerImplementation::foreach},
  }};
};
template <>
struct EnumNames<OptimizerKind> {
  static constexpr std::array<std::pair<std::string_view, OptimizerKind>, 2> names{{
      {"adamw", OptimizerKind::adamw},
      {"sgd", OptimizerKind::sgd},
  }};
};
template <>
struct EnumNames<PipelineSchedule> {
  static constexpr std::array<std::pair<std::string_view, PipelineSchedule>, 4> names{{
      {"1f1b", PipelineSchedule::one_f_one_b},
      {"interleaved_1f1b", PipelineSchedule::interleaved_1f1b},
      {"zb_h1", PipelineSchedule::zero_bubble_h1},
      {"dualpipe", PipelineSchedule::dualpipe},
  }};
};
template <>
struct EnumNames<MeshDim> {
  static constexpr std::array<std::pair<std::string_view, MeshDim>, 5> names{{
      {"tp", MeshDim::tp},
      {"cp", MeshDim::cp},
      {"shard", MeshDim::shard},
      {"replicate", MeshDim::replicate},
      {"pp", MeshDim::pp},
  }};
};
template <>
struct EnumNames<ExpertDispatch> {
  static constexpr std::array<std::pair<std::string_view, ExpertDispatch>, 2> names{{
      {"direct", ExpertDispatch::direct},
      {"hierarchical", ExpertDispatch::hierarchical},
  }};
};
template <>
struct EnumNames<CpKvHeads> {
  static constexpr std::array<std::pair<std::string_view, CpKvHeads>, 2> names{{
      {"kv", CpKvHeads::kv},
      {"query", CpKvHeads::query},
  }};
};
template <>
struct EnumNames<OffloadKind> {
  static constexpr std::array<std::pair<std::string_view, OffloadKind>, 3> names{{
      {"none", OffloadKind::none},
      {"optimizer", OffloadKind::optimizer},
      {"parameters", OffloadKind::parameters},
  }};
};
template <>
struct EnumNames<SpBackwardInput> {
  static constexpr std::array<std::pair<std::string_view, SpBackwardInput>, 2> names{{
      {"gather_again", SpBackwardInput::gather_again},
      {"keep_gathered", SpBackwardInput::keep_gathered},
  }};
};

template <>
struct EnumNames<TpCommOverlap> {
  static constexpr std::array<std::pair<std::string_view, TpCommOverlap>, 3> names{{
      {"none", TpCommOverlap::none},
      {"chunked", TpCommOverlap::chunked},
      {"fused", TpCommOverlap::fused},
  }};
};
template <>
struct EnumNames<GradientSync> {
  static constexpr std::array<std::pair<std::string_view, GradientSync>, 3> names{{
      {"auto", GradientSync::automatic},
      {"every_micro_batch", GradientSync::every_micro_batch},
      {"last_micro_batch", GradientSync::last_micro_batch},
  }};
};
template <>
struct EnumNames<RecomputePolicy> {
  static constexpr std::array<std::pair<std::string_view, RecomputePolicy>, 4> names{{
      {"none", RecomputePolicy::none},
      {"selective", RecomputePolicy::selective},
      {"selective_op", RecomputePolicy::selective_op},
      {"full", RecomputePolicy::full},
  }};
};
template <>
struct EnumNames<LossKind> {
  static constexpr std::array<std::pair<std::string_view, LossKind>, 3> names{{
      {"full", LossKind::full},
      {"chunked", LossKind::chunked},
      {"cce", LossKind::cce},
  }};
};
template <>
struct EnumNames<GradientMemory> {
  static constexpr std::array<std::pair<std::string_view, GradientMemory>, 2> names{{
      {"persistent", GradientMemory::persistent},
      {"per_step", GradientMemory::per_step},
  }};
};
template <>
struct EnumNames<LossImplementation> {
  static constexpr std::array<std::pair<std::string_view, LossImplementation>, 2> names{{
      {"fused", LossImplementation::fused},
      {"eager", LossImplementation::eager},
  }};
};
template <>
struct EnumNames<ElementwiseExecution> {
  static constexpr std::array<std::pair<std::string_view, ElementwiseExecution>, 3> names{{
      {"fused", ElementwiseExecution::fused},
      {"compiled", ElementwiseExecution::compiled},
      {"eager", ElementwiseExecution::eager},
  }};
};
template <>
struct EnumNames<EagerRmsNorm> {
  static constexpr std::array<std::pair<std::string_view, EagerRmsNorm>, 2> names{{
      {"kernel", EagerRmsNorm::kernel},
      {"composite", EagerRmsNorm::composite},
  }};
};
template <>
struct EnumNames<EagerRope> {
  static constexpr std::array<std::pair<std::string_view, EagerRope>, 2> names{{
      {"complex", EagerRope::complex},
      {"real", EagerRope::real},
  }};
};
template <>
struct EnumNames<GateUp> {
  static constexpr std::array<std::pair<std::string_view, GateUp>, 2> names{{
      {"fused", GateUp::fused},
      {"apart", GateUp::apart},
  }};
};
template <>
struct EnumNames<QuantizationCasts> {
  static constexpr std::array<std::pair<std::string_view, QuantizationCasts>, 4> names{{
      {"tensorwise", QuantizationCasts::tensorwise},
      {"rowwise", QuantizationCasts::rowwise},
      {"one_pass", QuantizationCasts::one_pass},
      {"fused", QuantizationCasts::fused},
  }};
};
template <>
struct EnumNames<RoutingDistribution> {
  static constexpr std::array<std::pair<std::string_view, RoutingDistribution>, 3> names{{
      {"uniform", RoutingDistribution::uniform},
      {"skewed", RoutingDistribution::skewed},
      {"histogram", RoutingDistribution::histogram},
  }};
};
template <>
struct EnumNames<CapacityPolicy> {
  static constexpr std::array<std::pair<std::string_view, CapacityPolicy>, 2> names{{
      {"drop", CapacityPolicy::drop},
      {"pad", CapacityPolicy::pad},
  }};
};
template <>
struct EnumNames<LoraTarget> {
  static constexpr std::array<std::pair<std::string_view, LoraTarget>, 14> names{{
      {"q_proj", LoraTarget::q_proj},
      {"k_proj", LoraTarget::k_proj},
      {"v_proj", LoraTarget::v_proj},
      {"o_proj", LoraTarget::o_proj},
      {"output_gate", LoraTarget::output_gate},
      {"q_a_proj", LoraTarget::q_a_proj},
      {"q_b_proj", LoraTarget::q_b_proj},
      {"kv_a_proj", LoraTarget::kv_a_proj},
      {"kv_b_proj", LoraTarget::kv_b_proj},
      {"dense_ffn", LoraTarget::dense_ffn},
      {"shared_experts", LoraTarget::shared_experts},
      {"routed_experts", LoraTarget::routed_experts},
      {"latent_proj", LoraTarget::latent_proj},
      {"lm_head", LoraTarget::lm_head},
  }};
};
template <>
struct EnumNames<SwapTarget> {
  static constexpr std::array<std::pair<std::string_view, SwapTarget>, 7> names{{
      {"attention_in_proj", SwapTarget::attention_in_proj},
      {"attention_out_proj", SwapTarget::attention_out_proj},
      {"expert_gmm_up", SwapTarget::expert_gmm_up},
      {"expert_gmm_down", SwapTarget::expert_gmm_down},
      {"shared_expert_up", SwapTarget::shared_expert_up},
      {"dense_ffn_up", SwapTarget::dense_ffn_up},
      {"latent_down", SwapTarget::latent_down},
  }};
};

}  // namespace moesim
