// SPDX-License-Identifier: MIT
// Field declarations of scenarios/*.json and the loading of what a scenario names.
#include "scenario/scenario_spec.hpp"

#include <algorithm>

#include "core/fields.hpp"
#include "core/limits.hpp"
#include "scenario/scenario_checks.hpp"

namespace moesim {

template <class F>
void declare_fields(F& f, LoraSpec& s) {
  f.required("rank", s.rank, "Adapter rank r.", positive(limits::kMaxWidth));
  f.required("alpha", s.alpha, "Scaling numerator (the adapter output is scaled by alpha / rank).", positive(limits::kMaxSize));
  f.required("targets", s.targets, "Projections that get an adapter; every other weight is frozen.");
  f.optional("dtype", s.dtype, Dtype::bf16, "Format of the adapter weights.");
}

template <class F>
void declare_fields(F& f, PrecisionSpec& s) {
  f.optional("compute", s.compute, Dtype::bf16, "Format of matmul inputs (selects the device peak).");
  f.optional("params", s.params, Dtype::bf16, "Format parameters are gathered and used in.");
  f.optional("master_params", s.master_params, Dtype::fp32, "Format of the sharded trainable master weights.");
  f.optional("grads", s.grads, Dtype::fp32, "Format of the sharded gradients of trainable weights.");
  f.optional("grad_reduce", s.grad_reduce, Dtype::fp32, "Format gradients are reduce-scattered in.");
  f.optional("optimizer_states", s.optimizer_states, Dtype::fp32, "Format of optimizer states.");
  f.optional("activations", s.activations, Dtype::bf16, "Format of activations saved for backward.");
  f.maybe("attention", s.attention,
          "Format attention kernels (flash, sparse, KDA) compute in. Absent: compute, except the activations' "
          "format when compute is 8 bits or fewer: FP8 recipes (Transformer Engine, torchtitan float8) quantise "
          "only the linear layers, and keep attention, the router and the LM head unquantised.");
  f.maybe("quantization", s.quantization,
          "How the linear layers' inputs, weights and output gradients are cast to compute when it has 8 bits or "
          "fewer; the casts are kernels of their own (docs/modelling.md#fp8-casts). tensorwise (absent): dynamic "
          "per-tensor scaling, a max pass then a cast (torchao float8 tensorwise, Transformer Engine current "
          "scaling); rowwise: torchao's rowwise recipe; one_pass: one kernel writes both layouts (MXFP8, "
          "blockwise 1x128 / 128x128, Transformer Engine delayed scaling); fused: no kernels of their own.");
  f.optional("cache_quantized_weights", s.cache_quantized_weights, false,
             "With compute of 8 bits or fewer: the weights are cast in micro-batch 0's forward and backward only, and "
             "the rest of the step reuses them (Transformer Engine's FP8 weight caching, which Megatron-Core drives "
             "with is_first_microbatch); false: every pass casts them (torchao).");
}

template <class F>
void declare_fields(F& f, OptimizerSpec& s) {
  f.optional("kind", s.kind, OptimizerKind::adamw, "adamw keeps two states per trainable weight, sgd one (momentum).");
  f.optional("implementation", s.implementation, OptimizerImplementation::fused,
             "fused: one kernel reads and writes each state once (torch.optim fused=True, FusedAdam). foreach: "
             "PyTorch's multi-tensor AdamW (its default on CUDA), 8 passes over the states and a temporary of the "
             "second moment's size over the whole step (adamw, on the GPU only).");
}

template <class F>
void declare_fields(F& f, TrainingSpec& s) {
  f.required("mode", s.mode, "pretrain and full_finetune train every weight; lora trains adapters only.");
  f.maybe("lora", s.lora, "Adapters; required when mode is lora, absent otherwise.");
  f.optional("precision", s.precision, PrecisionSpec{}, "Numeric formats.");
  f.optional("optimizer", s.optimizer, OptimizerSpec{}, "The optimizer.");
  f.optional("attention_dropout", s.attention_dropout, 0.0,
             "Attention dropout probability; it costs time and memory only without flash attention "
             "(fused_ops.flash_attention false), which fuses it.",
             between(0.0, 1.0));
  f.optional("hidden_dropout", s.hidden_dropout, 0.0,
             "Dropout probability on each sub-layer's output before its residual add (Megatron-LM's "
             "hidden dropout, fused with the bias and the add): the add also writes a 1-byte mask per "
             "element, which its backward reads, kept from forward to backward unless recompute drops it.",
             between(0.0, 1.0));
  f.optional("gradient_memory", s.gradient_memory, GradientMemory::persistent,
             "How long the parameter gradients hold HBM. persistent: all run, in buffers of their own "
             "(Megatron-Core, DeepSpeed, zero_grad(set_to_none=False)). per_step: from where the step first writes "
             "them (the unit's first backward; its first reduction where the full gradients have a buffer of "
             "their own, ZeRO-2 and FSDP2 over several ranks) to its optimizer update, as "
             "zero_grad(set_to_none=True) leaves them (PyTorch's default: FSDP2, torchtitan).");
}

template <class F>
void declare_fields(F& f, BatchSpec& s) {
  f.required("global_batch_size", s.global_batch_size, "Sequences per optimizer step.", positive(limits::kMaxBatch));
  f.optional("micro_batch_size", s.micro_batch_size, int64_t{1},
             "Sequences per data-parallel rank per micro-step; global / (micro x dp) micro-steps accumulate.",
             positive(limits::kMaxBatch));
  f.required("sequence_length", s.sequence_length, "Tokens per sequence.", positive(limits::kMaxSequence));
}

template <class F>
void declare_fields(F& f, FsdpSpec& s) {
  f.optional("shard", s.shard, int64_t{1},
             "Data-parallel ranks that shard state among them (with cp: the shard group is shard x cp ranks).",
             positive(limits::kMaxDevices));
  f.optional("replicate", s.replicate, int64_t{1}, "Replicate groups (HSDP; plain DP when shard is 1).", positive(limits::kMaxDevices));
  f.optional("zero_stage", s.zero_stage, int64_t{3},
             "What the shard group shards: 0 nothing (DDP), 1 optimizer states and master weights (Megatron's "
             "distributed optimizer), 2 gradients too (ZeRO-2), 3 parameters too (FSDP2).",
             between(0, 3));
  f.optional("gradient_sync", s.gradient_sync, GradientSync::automatic,
             "When gradients are reduced: every_micro_batch, last_micro_batch (once per step), or auto: once per step "
             "for zero_stage 0-1 and for FSDP2 under pipeline parallelism, every micro-batch otherwise.");
  f.optional("reshard_after_forward", s.reshard_after_forward, true,
             "Free gathered parameters after forward and gather again for backward. false: a micro-batch's gather lives "
             "until its backward; under a pipeline schedule, one gather per unit and step, kept to its last backward "
             "(PyTorch's pipelining).");
  f.optional("prefetch", s.prefetch, int64_t{1},
             "FSDP2 (zero_stage 3): units gathered ahead of their use; 0: a unit's gathers start only when it is reached "
             "(after the compute before it), fully exposed. ZeRO 1-2 issue every gather at once (overlap_param_gather): "
             "only 1 is accepted there.",
             non_negative(limits::kMaxSmall));
  f.optional("overlap_grad_reduce", s.overlap_grad_reduce, true,
             "Each unit's gradient reduction starts when its backward is done, overlapping the rest of the backward "
             "(FSDP2, PyTorch DDP, Megatron --overlap-grad-reduce). false: every reduction of the step starts after "
             "the step's last backward op, exposed (Megatron-LM without --overlap-grad-reduce, DeepSpeed's pipeline "
             "engine); needs gradients reduced once per step.");
  f.optional("overlap_param_gather", s.overlap_param_gather, true,
             "zero_stage 1-2: the distributed optimizer's parameter all-gathers overlap the next step's first forward: "
             "issued at the step's start on every stage, each unit's forward waiting for its own (Megatron "
             "--overlap-param-gather with align_param_gather). false: they run after the optimizer step, exposed "
             "(Megatron-LM without the flag, DeepSpeed ZeRO-1/2).");
  f.optional("offload", s.offload, OffloadKind::none,
             "CPU offload of persistent state to host memory, the optimizer step on the CPU: none; optimizer "
             "(DeepSpeed ZeRO-Offload, zero_stage 1-3: fp32 master weights, optimizer states and, from zero_stage 2, "
             "gradient shards in host memory; updated parameter shards copied back to HBM); parameters (FSDP2 "
             "CPUOffloadPolicy, zero_stage 3: the parameter shards too, copied to the device before each "
             "all-gather).");
}

template <class F>
void declare_fields(F& f, TensorParallelSpec& s) {
  f.optional("degree", s.degree, int64_t{1}, "Tensor parallel degree (Megatron style).", positive(limits::kMaxDevices));
  f.optional("sequence_parallel", s.sequence_parallel, true,
             "Shard norms and dropout along the sequence between TP regions.");
  f.optional("comm_overlap", s.comm_overlap, TpCommOverlap::none,
             "Overlap of the attention and dense-FFN projections' sequence-parallel all-gathers and reduce-scatters "
             "with their GEMMs, as tp ring steps: none; chunked, a GEMM of one step's rows per step (Megatron-Core "
             "--tp-comm-overlap with Transformer Engine userbuffers, torchtitan's AsyncTP); fused, one GEMM kernel "
             "that takes each step's rows as they arrive (ByteDance's Flux, MegaScale). A projection of a gathered "
             "input computes all but the last step's rows while the gather is in flight; one that is "
             "reduce-scattered sends its first step's rows while it computes the rest. Needs sequence_parallel.");
  f.optional("sp_backward_input", s.sp_backward_input, SpBackwardInput::gather_again,
             "With sequence_parallel, what a projection of an all-gathered input keeps of it for its weight "
             "gradient: gather_again, its rank's sequence shard, all-gathered again in the backward (Megatron-LM's "
             "linear layers, Transformer Engine: the activation memory of Korthikanti et al. 2022); keep_gathered, "
             "the gathered input itself (PyTorch DTensor's sequence parallelism, as torchtitan runs it).");
}

template <class F>
void declare_fields(F& f, PipelineSpec& s) {
  f.optional("stages", s.stages, int64_t{1}, "Pipeline stages.", positive(limits::kMaxDevices));
  f.optional("schedule", s.schedule, PipelineSchedule::one_f_one_b,
             "Pipeline schedule: 1f1b, interleaved_1f1b (with virtual_stages), zb_h1 (1F1B with each weight "
             "gradient split from its backward and deferred into the bubble: zero-bubble ZB-H1), or dualpipe "
             "(DeepSeek-V3's bidirectional schedule: stage s also holds stage p-1-s, micro-batches enter from both "
             "ends, forward and backward chunks of two micro-batches overlap; needs an even number of stages and "
             "at least 2 x stages micro-batches, an even count).");
  f.optional("virtual_stages", s.virtual_stages, int64_t{1}, "Model chunks per stage (interleaved_1f1b only).",
             positive(limits::kMaxVirtualStages));
  f.optional("overlap_forward_backward", s.overlap_forward_backward, true,
             "dualpipe only: interleave each overlapped forward and backward chunk pair op by op so that one's "
             "communication hides under the other's compute (the model's overlapped_forward_backward); false "
             "runs the pair one after the other.");
  f.optional("layers_per_chunk", s.layers_per_chunk, std::vector<int64_t>{},
             "Layers of each model chunk in pipeline order, stages x virtual_stages counts (chunk c on stage c % "
             "stages); the embedding is part of the first chunk, the head and loss of the last. Empty: an even "
             "split.",
             non_negative(limits::kMaxLayers));
}

template <class F>
void declare_fields(F& f, ParallelSpec& s) {
  f.optional("fsdp", s.fsdp, FsdpSpec{}, "Fully sharded data parallelism (FSDP2 / HSDP).");
  f.optional("ep", s.ep, int64_t{1},
             "Expert parallel degree; experts are split over EP ranks, each expert's weights FSDP-sharded over the "
             "remaining (shard x cp x (tp / expert_tensor_parallel) / ep) ranks.",
             positive(limits::kMaxDevices));
  f.optional("tp", s.tp, TensorParallelSpec{}, "Tensor parallelism.");
  f.optional("expert_tensor_parallel", s.expert_tensor_parallel, int64_t{0},
             "Tensor parallel degree of the routed experts, a divisor of tp.degree (Megatron-Core's "
             "expert_tensor_parallel_size); below tp.degree, expert parallelism also spans the remaining TP ranks "
             "(MoE parallel folding). 0: tp.degree.",
             non_negative(limits::kMaxDevices));
  f.optional("ep_dispatch", s.ep_dispatch, ExpertDispatch::direct,
             "How the expert all-to-all crosses scale-up domains: direct sends every token copy to its expert's "
             "rank; hierarchical sends a token once per destination domain, which fans it out over the scale-up "
             "fabric (DeepEP); the same inside one domain.");
  f.optional("pp", s.pp, PipelineSpec{}, "Pipeline parallelism.");
  f.optional("cp", s.cp, int64_t{1}, "Context parallel degree (sequence split across ranks).", positive(limits::kMaxDevices));
  f.optional("cp_kv_heads", s.cp_kv_heads, CpKvHeads::kv,
             "Heads CP ranks exchange keys and values with (GQA/MHA attention): kv, the model's key/value heads "
             "(Megatron-Core with Transformer Engine); query, repeated to the query heads before the exchange, "
             "query heads / kv heads times the bytes (torchtitan's Llama calls SDPA after repeat_kv, and PyTorch's "
             "context_parallel exchanges what SDPA is given).");
  f.maybe("cp_grad_format", s.cp_grad_format,
          "Format the key/value gradients travel in between CP ranks. Absent: the activations' format. PyTorch's "
          "context_parallel accumulates and sends them in fp32 (its convert_to_f32 option, on by default).");
  f.optional("placement", s.placement, kDefaultPlacement,
             "Order of the mesh dimensions (tp, cp, shard, replicate, pp; each once) from innermost - consecutive "
             "ranks, so within one node or scale-up domain first - to outermost. The default keeps TP groups "
             "inside a node, as torchtitan and Megatron place them; groups that end up spanning scale-up domains "
             "are reported and their collectives cross the network.");
}

template <class F>
void declare_fields(F& f, RecomputeSpec& s) {
  f.optional("policy", s.policy, RecomputePolicy::none,
             "none keeps every activation; selective recomputes cheap ops and attention cores (Megatron's "
             "selective); selective_op is torchtitan's per-op policy (selective_ac_option 'op'): it keeps the outputs "
             "of a layer's BF16 matmuls but every second one (counted in forward order, a gated FFN's up-projection "
             "as two) and of its attention cores, and recomputes everything else - FP8 matmuls (torchao's "
             "_scaled_mm) included; full keeps only layer inputs.");
  f.optional("layers", s.layers, LayerSet::all(), "Layers the policy applies to.");
}

template <class F>
void declare_fields(F& f, SwapSpec& s) {
  f.optional("enabled", s.enabled, false, "Copy chosen op outputs to host memory after forward and back for backward.");
  f.optional("ops", s.ops, std::vector<SwapTarget>{}, "Outputs to swap when enabled (kept when disabled, so a sweep can toggle enabled).");
  f.optional("layers", s.layers, LayerSet::all(), "Layers whose outputs are swapped.");
}

template <class F>
void declare_fields(F& f, LossSpec& s) {
  f.optional("kind", s.kind, LossKind::full,
             "full materialises all logits; chunked splits along the sequence; cce along the vocabulary, never "
             "materialising the logits.");
  f.optional("implementation", s.implementation, LossImplementation::fused,
             "How the full loss's cross-entropy runs. fused: one kernel each way on FP32 logits the head "
             "writes, the gradient in place (4 bytes a logit). eager: PyTorch's F.cross_entropy(logits.float()), "
             "as torchtitan runs it: BF16 logits, an FP32 copy, the FP32 log-probabilities saved; backward "
             "zero-fill, NLL and log-softmax backward in FP32, cast back (up to 12 bytes a logit at once).");
  f.optional("chunk_tokens", s.chunk_tokens, int64_t{0}, "Tokens per chunk (chunked only).", non_negative(limits::kMaxSequence));
  f.optional("vocab_chunk", s.vocab_chunk, int64_t{0}, "Vocabulary entries per chunk (cce only).", non_negative(limits::kMaxVocab));
}

template <class F>
void declare_fields(F& f, RoutingSpec& s) {
  f.optional("distribution", s.distribution, RoutingDistribution::uniform, "How tokens spread over experts.");
  f.optional("skew", s.skew, 0.0, "Zipf exponent of expert popularity (skewed only; 0 is uniform).", non_negative(limits::kMaxSkew));
  f.optional("histogram", s.histogram, std::string(),
             "JSON file of tokens per expert, relative to the scenario (histogram only).");
  f.optional("seed", s.seed, int64_t{1}, "Seed of the routing sampler.", non_negative(limits::kMaxSize));
  f.optional("num_sampled_steps", s.num_sampled_steps, int64_t{1},
             "Steps simulated with freshly sampled routing (for P50/P99).", positive(limits::kMaxSampledSteps));
  f.optional("groups", s.groups, int64_t{1},
             "Expert groups of group-limited routing (DeepSeek-V3's n_group, 8): equal groups of consecutive "
             "experts; 1: none.",
             positive(limits::kMaxExperts));
  f.optional("groups_per_token", s.groups_per_token, int64_t{0},
             "Groups a token's experts come from (DeepSeek-V3's topk_group, 4), its top_k split evenly over them; "
             "sets expert loads and, with groups aligned to scale-up domains, the domains a hierarchical dispatch "
             "reaches (docs/modelling.md#routing). 0: no limit.",
             non_negative(limits::kMaxExperts));
  f.optional("nodes_per_token", s.nodes_per_token, int64_t{0},
             "Node-limited routing (DeepSeek-V3: 4): a token's experts lie on at most this many scale-up domains of "
             "its EP group, its top_k split evenly over them; sets expert loads and all-to-all bytes "
             "(docs/modelling.md). 0: no limit.",
             non_negative(limits::kMaxDevices));
  f.optional("devices_per_token", s.devices_per_token, int64_t{0},
             "Device-limited routing (DeepSeek-V2: 3): a token's experts lie on at most this many EP ranks, its "
             "top_k split evenly over them, and the dispatch sends the token once per destination rank. 0: no "
             "limit.",
             non_negative(limits::kMaxDevices));
  f.maybe("capacity_factor", s.capacity_factor,
          "Expert capacity C = ceil(factor x ep x T x top_k / experts) assignments per expert per micro-batch, T "
          "the routed tokens per EP rank: over the whole EP group's tokens. Absent or null: dropless.",
          positive(limits::kMaxCapacityFactor));
  f.optional("capacity_policy", s.capacity_policy, CapacityPolicy::drop,
             "With a capacity: drop sends and computes min(load, C) per expert; pad drops the same and pads every "
             "expert's input to exactly C rows, the all-to-all carrying the padded buffers.");
  f.optional("bias_update_speed", s.bias_update_speed, 0.0,
             "Auxiliary-loss-free load balancing (DeepSeek-V3's bias update speed): after each sampled step every "
             "expert's routing bias moves this much towards balance, in log-popularity units. 0: off.",
             non_negative(limits::kMaxBiasUpdateSpeed));
  f.optional("bias_start_step", s.bias_start_step, int64_t{0},
             "With bias balancing: the training step the first sampled step stands for (its biases have had this "
             "many updates from the distribution's start), so a run can ask for the balanced steady state.",
             non_negative(limits::kMaxBiasStartStep));
}

template <class F>
void declare_fields(F& f, OverlapSpec& s) {
  f.optional("comm_compute", s.comm_compute, true, "Run collectives on their own stream, overlapping compute.");
  f.optional("moe_local_first", s.moe_local_first, false,
             "Experts start on the assignments that stay on the rank while the dispatch all-to-all carries the rest: "
             "the grouped GEMMs split into a local and a remote part, the local up-projection covering the dispatch "
             "and the local down-projection the combine (an asynchronous all-to-all overlapped with the local experts). Needs ep > 1 to "
             "change anything.");
  f.optional("moe_shared_expert_overlap", s.moe_shared_expert_overlap, false,
             "Shared experts run while the routed tokens travel: their up-projection after the dispatch is issued, "
             "their down-projection after the combine (Megatron-Core's moe_shared_expert_overlap). false: they run "
             "before the dispatch.");
  f.optional("moe_dispatch_chunks", s.moe_dispatch_chunks, int64_t{1},
             "Split each micro-batch's routed assignments into this many chunks, each dispatched, computed and "
             "combined on its own, so that the experts' GEMMs on one chunk overlap the all-to-all of the next "
             "(Tutel/Comet-style pipelining). 1: one dispatch and one combine per layer.",
             positive(limits::kMaxDispatchChunks));
}

template <class F>
void declare_fields(F& f, FusedOpsSpec& s) {
  f.optional("flash_attention", s.flash_attention, true,
             "Flash attention for dense (MHA/GQA/MLA) layers; false: the attention core as Megatron ran it before "
             "FlashAttention - score and context batched GEMMs over the whole s x s square, a fused softmax and "
             "attention dropout, with the probabilities kept for backward.");
  f.optional("attention_kernel", s.attention_kernel, AttentionKernel::platform_default,
             "The flash-attention implementation the stack runs: default (the hardware file's attention curves: "
             "the best kernel of the platform's current stacks), flash1 (FlashAttention 1 or its Triton form), "
             "flash2 (FlashAttention-2, PyTorch SDPA's flash backend), flash3 or cudnn; a named kernel takes its curves from the hardware file's "
             "efficiency.attention_kernels, which must carry it.");
  f.optional("dsa", s.dsa, false, "Fused DSA kernels (LI, SFA, SFAG) instead of small ops; mla_dsa models only.");
  f.optional("kda", s.kda, false, "Fused KDA forward and backward kernels; kda models only.");
  f.optional("permute_gemm", s.permute_gemm, false, "Permute fused into the experts' grouped GEMM; MoE models only.");
  f.optional("elementwise", s.elementwise, ElementwiseExecution::fused,
             "How norms, activations and RoPE run: fused (one hand-written kernel per op, as Transformer Engine, "
             "Apex and Megatron-Core; RoPE inside the attention input), compiled (torch.compile: one generated kernel "
             "per op chain, RoPE one kernel per tensor) or eager (PyTorch eager: each op decomposed into several "
             "kernels that each read and write whole tensors, more intermediates kept for backward); kernels and "
             "bytes per op in docs/modelling.md#elementwise-execution.");
  f.optional("eager_rms_norm", s.eager_rms_norm, EagerRmsNorm::kernel,
             "RMSNorm under elementwise eager: kernel (ATen's fused RMSNorm kernel, PyTorch releases with pytorch "
             "PR 153666) or composite (nn.RMSNorm of PyTorch 2.4-2.7: cast, pow, mean, add, rsqrt, mul, cast, mul).");
  f.optional("eager_rope", s.eager_rope, EagerRope::complex,
             "RoPE under elementwise eager: complex (view_as_complex, a complex multiply, casts, as torchtitan) or "
             "real (even and odd halves rotated with four multiplies, an add, a subtract and a stack).");
  f.maybe("gate_up", s.gate_up,
          "A gated FFN's up-projection (dense layers and shared experts): fused (one GEMM of the gate and up halves, "
          "Megatron-Core's linear_fc1) or apart (two GEMMs, torchtitan's w1 and w3; under elementwise eager the "
          "activation's backward then has no concatenation to undo). Absent: apart under recompute selective_op "
          "(torchtitan's per-op policy, which saves every second matmul's output), fused otherwise.");
}

template <class F>
void declare_fields(F& f, MemoryOverheadSpec& s) {
  f.maybe("runtime_reserved", s.runtime_reserved,
          "Device memory the runtime holds (CUDA context, library workspaces, framework state). Absent: what the "
          "hardware's calibration file measured (memory_overhead.runtime_bytes), else 1 GB.",
          non_negative(limits::kMaxBytes));
  f.maybe("comm_buffer_per_group", s.comm_buffer_per_group,
          "Collective-library buffers per communicator (process group with more than one member). Absent: what "
          "the hardware's calibration file measured (memory_overhead.communicator_bytes), else 128 MiB.",
          non_negative(limits::kMaxBytes));
  f.optional("allocator_fragmentation", s.allocator_fragmentation, 0.0,
             "Memory an allocator loses beyond the simulated best-fit placement of transient tensors (rounding, "
             "split blocks, caches per stream), as a fraction of that placement's slab. 0: an allocator that places "
             "like the simulator, as the GPU backend's does.",
             between(0, 1));
}

template <class F>
void declare_fields(F& f, HostSpec& s) {
  f.optional("op_issue", s.op_issue, Seconds{0},
             "Host time to issue one op of the step graph (Python, framework dispatch), besides kernel_issue per "
             "kernel it launches: the host issues a rank's ops in order without waiting for the GPU, and an op starts "
             "no earlier than its issue; 0 with kernel_issue 0 never delays an op (docs/modelling.md lists values "
             "measured for eager PyTorch).",
             non_negative(limits::kMaxLatency));
  f.optional("kernel_issue", s.kernel_issue, Seconds{0},
             "Host time per kernel an op launches (an eager norm several, a GEMM one), added to op_issue for each "
             "op: the host spends op_issue + kernels x kernel_issue on it. `moesim calibrate --from-trace` and `validate "
             "--from-trace` fit both to a profiler trace (docs/calibration/from-trace.md).",
             non_negative(limits::kMaxLatency));
  f.optional("waits_for_routing", s.waits_for_routing, false,
             "Whether the host waits for each MoE layer's routing in the forward (and its recompute) before it issues "
             "the ops after the router, as dropless dispatch does (Megatron-Core's alltoall and DeepEP dispatchers copy "
             "the tokens per expert to the host to size the expert all-to-all): the host issues nothing after a router "
             "until the router has run, and the GPU then waits for the host to issue what follows. Off by default: the "
             "graph's program order stands for the host's issue order only approximately (docs/modelling.md). With "
             "routing.capacity_policy pad the sizes are static and nothing is waited for.");
}

template <class F>
void declare_fields(F& f, StragglerSpec& s) {
  f.required("ranks", s.ranks, "Ranks (0-based) that run slow.");
  f.required("slowdown", s.slowdown, "Factor on their kernel times: 1.2 is 20% slower.", at_least(1.0, limits::kMaxSlowdown));
}

template <class F>
void declare_fields(F& f, SweepAxis& s) {
  f.required("path", s.path, "JSON pointer of the scenario field to vary, e.g. \"/parallel/ep\".");
  f.required("values", s.values, "Values the field takes, each valid for that field.");
}

template <class F>
void declare_fields(F& f, SweepSpec& s) {
  f.optional("axes", s.axes, std::vector<SweepAxis>{}, "Axes of the sweep; `moesim sweep` runs their product.");
}

template <class F>
void declare_fields(F& f, ScenarioSpec& s) {
  f.required("name", s.name, "Scenario name, as the file is named.");
  f.optional("doc", s.doc, std::string(), "What the scenario represents and why its numbers were chosen.");
  f.required("model", s.model, "Model file (relative to this file) or shipped model name.");
  f.required("hardware", s.hardware, "Hardware file (relative to this file) or shipped hardware name.");
  f.required("num_devices", s.num_devices, "Devices the plan uses.", positive(limits::kMaxDevices));
  f.required("training", s.training, "Mode, precision and optimizer.");
  f.required("batch", s.batch, "Batch and sequence.");
  f.optional("parallel", s.parallel, ParallelSpec{}, "The parallel plan.");
  f.optional("recompute", s.recompute, RecomputeSpec{}, "Activation recomputation.");
  f.optional("swap", s.swap, SwapSpec{}, "Swapping activations to host memory.");
  f.optional("loss", s.loss, LossSpec{}, "Loss computation.");
  f.optional("routing", s.routing, RoutingSpec{}, "Distribution of tokens over experts.");
  f.optional("overlap", s.overlap, OverlapSpec{}, "Communication/compute overlap.");
  f.optional("fused_ops", s.fused_ops, FusedOpsSpec{}, "Fused-kernel switches.");
  f.optional("memory", s.memory, MemoryOverheadSpec{}, "Memory the software stack holds besides tensors.");
  f.optional("host", s.host, HostSpec{}, "The host side of the training loop: how fast it issues ops.");
  f.optional("stragglers", s.stragglers, std::vector<StragglerSpec>{},
             "Slow devices; every collective they join waits for them.");
  f.optional("sweep", s.sweep, SweepSpec{}, "Sweep axes (used by `moesim sweep`).");
}

namespace {

ScenarioSpec read_spec(const std::string& file, const nlohmann::json& root) {
  ScenarioSpec spec;
  FieldReader::read_object(file, root, "", spec);
  return spec;
}

// Each value of each axis must be valid for the field it names: substitute it and read the
// scenario again. Whether a combination is a possible plan is the sweep's business.
void check_sweep_values(const std::string& file, const nlohmann::json& root, const ScenarioSpec& spec) {
  const std::vector<FieldRow> rows = describe_scenario_fields();
  // The sweep's size first, before any value is read: each configuration is a scenario to load and
  // simulate, each value a scenario read here.
  int64_t configs = 1;
  int64_t values = 0;
  for (size_t a = 0; a < spec.sweep.axes.size(); ++a) {
    const auto n = static_cast<int64_t>(spec.sweep.axes[a].values.size());
    values += n;
    const std::string axis_path = "/sweep/axes/" + std::to_string(a) + "/values";
    if (values > limits::kMaxSweepValues) {
      throw InputError(file, axis_path, "the axes list more than " + std::to_string(limits::kMaxSweepValues) +
                                            " values in all (moesim's limit, docs/limits.md)");
    }
    const auto product = limits::checked_mul(configs, std::max<int64_t>(n, 1));
    if (!product || *product > limits::kMaxSweepConfigs) {
      throw InputError(file, axis_path, "the axes multiply to more than " + std::to_string(limits::kMaxSweepConfigs) +
                                            " configurations (moesim's limit, docs/limits.md); split the sweep");
    }
    configs = *product;
  }
  for (size_t a = 0; a < spec.sweep.axes.size(); ++a) {
    const auto& axis = spec.sweep.axes[a];
    const std::string axis_path = "/sweep/axes/" + std::to_string(a);
    bool declared = false;
    for (const auto& r : rows) declared = declared || r.path == axis.path;
    if (!declared || axis.path.starts_with("/sweep") || axis.path.find("/*") != std::string::npos) {
      throw InputError(file, axis_path + "/path", "'" + axis.path + "' is not a scenario field that can be swept");
    }
    if (axis.values.empty()) throw InputError(file, axis_path + "/values", "an axis needs at least one value");
    const nlohmann::json::json_pointer pointer(axis.path);
    for (size_t v = 0; v < axis.values.size(); ++v) {
      nlohmann::json variant = root;
      variant[pointer] = nlohmann::json::parse(axis.values[v].text);
      try {
        (void)read_spec(file, variant);
      } catch (const InputError& e) {
        throw InputError(file, axis_path + "/values/" + std::to_string(v), "invalid for " + axis.path + ": " + e.message());
      }
    }
  }
}

}  // namespace

std::vector<double> load_routing_histogram(const InputText& input, const ModelSpec& model) {
  const nlohmann::json root = parse_json(input);
  struct Histogram {
    std::vector<double> tokens_per_expert;
  } h;
  FieldReader reader(input.name, root, "");
  if (!root.is_object()) throw InputError(input.name, "/", "expected an object with tokens_per_expert");
  reader.required("tokens_per_expert", h.tokens_per_expert, "", non_negative(limits::kMaxTokenCount));
  reader.reject_unknown_keys();
  const int64_t experts = model.moe ? model.moe->num_experts : 0;
  if (h.tokens_per_expert.size() > static_cast<size_t>(limits::kMaxExperts)) {
    throw InputError(input.name, "/tokens_per_expert",
                     "has " + std::to_string(h.tokens_per_expert.size()) + " entries, more than moesim's limit of " +
                         std::to_string(limits::kMaxExperts) + " experts");
  }
  if (static_cast<int64_t>(h.tokens_per_expert.size()) != experts) {
    throw InputError(input.name, "/tokens_per_expert",
                     "has " + std::to_string(h.tokens_per_expert.size()) + " entries; the model has " +
                         std::to_string(experts) + " experts");
  }
  double sum = 0;
  for (double v : h.tokens_per_expert) sum += v;
  if (sum <= 0) throw InputError(input.name, "/tokens_per_expert", "must not be all zero");
  return h.tokens_per_expert;
}

namespace {

Scenario load_scenario_with(const InputText& input, const InputText* hardware) {
  const nlohmann::json root = parse_json(input);
  Scenario s;
  s.file = input.name;
  s.spec = read_spec(input.name, root);
  check_sweep_values(input.name, root, s.spec);

  const InputText model_input = read_referenced(input, "/model", s.spec.model, "models");
  s.model_file = model_input.name;
  s.model = load_model(model_input);
  const InputText hardware_input = hardware ? *hardware : read_referenced(input, "/hardware", s.spec.hardware, "hardware");
  s.hardware_file = hardware_input.name;
  s.hardware = load_hardware(hardware_input);
  const auto efficiency = with_attention_kernel(s.hardware.efficiency, s.spec.fused_ops.attention_kernel);
  if (!efficiency) {
    throw InputError(input.name, "/fused_ops/attention_kernel",
                     "hardware " + s.hardware_file + " has no efficiency.attention_kernels." +
                         std::string(enum_name(s.spec.fused_ops.attention_kernel)) + " curves");
  }
  s.hardware.efficiency = *efficiency;
  check_scenario(s);
  if (s.spec.routing.distribution == RoutingDistribution::histogram) {
    s.routing_histogram = load_routing_histogram(
        read_referenced(input, "/routing/histogram", s.spec.routing.histogram, "scenarios"), s.model);
  }
  return s;
}

}  // namespace

Scenario load_scenario(const InputText& input) { return load_scenario_with(input, nullptr); }

Scenario load_scenario(const InputText& input, const InputText& hardware) { return load_scenario_with(input, &hardware); }

double runtime_reserved_bytes(const ScenarioSpec& spec, const HardwareSpec& hardware) {
  if (spec.memory.runtime_reserved) return spec.memory.runtime_reserved->value;
  return hardware.stack_memory ? hardware.stack_memory->runtime_bytes : kDefaultRuntimeReserved;
}

double comm_buffer_bytes(const ScenarioSpec& spec, const HardwareSpec& hardware, const std::vector<std::string>& kinds) {
  if (spec.memory.comm_buffer_per_group) return spec.memory.comm_buffer_per_group->value;
  const std::optional<double> largest = hardware.stack_memory ? hardware.stack_memory->communicator_bytes.largest() : std::nullopt;
  if (!largest) return kDefaultCommBufferPerGroup;
  double out = 0;
  for (const std::string& kind : kinds) out = std::max(out, hardware.stack_memory->communicator_bytes.of(kind).value_or(*largest));
  return out;
}

std::vector<FieldRow> describe_scenario_fields() { return FieldDescriber::describe<ScenarioSpec>(); }

int64_t micro_batches_per_step(const ScenarioSpec& spec) {
  return spec.batch.global_batch_size / (spec.batch.micro_batch_size * spec.parallel.dp());
}

Dtype unquantized_dtype(const PrecisionSpec& p) {
  return dtype_bytes(p.compute) < 2 ? p.activations : p.compute;
}

Dtype attention_dtype(const PrecisionSpec& p) { return p.attention.value_or(unquantized_dtype(p)); }

QuantizationCasts quantization_casts(const PrecisionSpec& p) {
  return p.quantization.value_or(QuantizationCasts::tensorwise);
}

GradientSync resolved_gradient_sync(const FsdpSpec& fsdp, int64_t pipeline_stages) {
  if (fsdp.gradient_sync != GradientSync::automatic) return fsdp.gradient_sync;
  if (fsdp.zero_stage <= 1) return GradientSync::last_micro_batch;
  if (fsdp.zero_stage == 3 && pipeline_stages > 1) return GradientSync::last_micro_batch;
  return GradientSync::every_micro_batch;
}

std::vector<int64_t> chunk_layer_counts(const PipelineSpec& pp, int64_t num_layers) {
  if (!pp.layers_per_chunk.empty()) return pp.layers_per_chunk;
  const int64_t chunks = pp.stages * pp.virtual_stages;
  return std::vector<int64_t>(static_cast<size_t>(chunks), num_layers / chunks);
}

std::vector<double> rank_speeds(const ScenarioSpec& spec) {
  if (spec.stragglers.empty()) return {};
  std::vector<double> speed(static_cast<size_t>(spec.num_devices), 1.0);
  for (const StragglerSpec& s : spec.stragglers) {
    for (int64_t r : s.ranks) speed[static_cast<size_t>(r)] *= s.slowdown;
  }
  return speed;
}

}  // namespace moesim
