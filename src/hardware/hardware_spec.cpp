// SPDX-License-Identifier: MIT
// Field declarations and consistency checks of hardware/*.json.
#include "hardware/hardware_spec.hpp"

#include <cmath>
#include <stdexcept>

#include "core/fields.hpp"
#include "core/limits.hpp"

namespace moesim {

std::optional<FlopsPerSecond> PeakFlopsSpec::of(Dtype d) const {
  switch (d) {
    case Dtype::fp32: return fp32;
    case Dtype::tf32: return tf32;
    case Dtype::bf16: return bf16;
    case Dtype::fp16: return fp16;
    case Dtype::fp8: return fp8;
    case Dtype::int8:
    case Dtype::int4: return int8;
    case Dtype::int32: return std::nullopt;
    case Dtype::fp4: return fp4;
  }
  return std::nullopt;
}

template <class F>
void declare_fields(F& f, PeakFlopsSpec& s) {
  f.maybe("fp32", s.fp32, "Dense FP32 (non-tensor-core) peak.", positive(limits::kMaxFlops));
  f.maybe("tf32", s.tf32, "Dense TF32 tensor peak.", positive(limits::kMaxFlops));
  f.required("bf16", s.bf16, "Dense BF16 tensor peak.", positive(limits::kMaxFlops));
  f.maybe("fp16", s.fp16, "Dense FP16 tensor peak.", positive(limits::kMaxFlops));
  f.maybe("fp8", s.fp8, "Dense FP8 tensor peak.", positive(limits::kMaxFlops));
  f.maybe("int8", s.int8, "Dense INT8 tensor peak (OP/s), also used for int4 weights.", positive(limits::kMaxFlops));
  f.maybe("fp4", s.fp4, "Dense FP4 tensor peak.", positive(limits::kMaxFlops));
}

template <class F>
void declare_fields(F& f, HostMemorySpec& s) {
  f.required("capacity_per_device", s.capacity_per_device, "Host memory one device can use (node total / devices).",
             non_negative(limits::kMaxBytes));
  f.required("bandwidth", s.bandwidth, "Device <-> host copy bandwidth, each way, per device.", positive(limits::kMaxBandwidth));
  f.required("latency", s.latency, "Latency of a device <-> host copy.", non_negative(limits::kMaxLatency));
  f.optional("over_scale_up", s.over_scale_up, false,
             "Host memory is reached over the scale-up fabric (a unified bus): swap copies then share the "
             "device's scale-up port with collectives.");
  f.optional("cpu_optimizer_bandwidth", s.cpu_optimizer_bandwidth, BytesPerSecond{kDefaultCpuOptimizerBytesPerSecond},
             "Host-memory bytes per second the node's CPUs move running the optimizer step of CPU offload "
             "(parallel.fsdp.offload), shared by the node's devices: AdamW moves 28 bytes a parameter. Default: "
             "ZeRO-Offload's CPU-Adam on a DGX-2's two Xeon Platinum 8168 (10 B parameters in 2.57 s, arXiv "
             "2101.06840 Table 3), an assumption for other hosts.",
             positive(limits::kMaxBandwidth));
}

template <class F>
void declare_fields(F& f, DynamicPowerSpec& s) {
  f.required("gemm", s.gemm, "Tensor-core matmuls (dense and grouped GEMMs, router, CCE loss, indexer score).",
             positive(limits::kMaxWatts));
  f.required("attention", s.attention, "Attention cores: flash, sparse (DSA), KDA.", positive(limits::kMaxWatts));
  f.required("memory", s.memory, "Memory-bound kernels: norms, elementwise, copies, the optimizer.",
             positive(limits::kMaxWatts));
}

template <class F>
void declare_fields(F& f, PowerSpec& s) {
  f.required("limit", s.limit, "The board power limit the part runs at.", positive(limits::kMaxWatts));
  f.required("efficiency_limit", s.efficiency_limit,
             "The power limit at which this file's efficiencies (and its calibration) were measured; limit may "
             "not exceed it (a higher clock than measured is not modelled).",
             positive(limits::kMaxWatts));
  f.required("static_power", s.static_power,
             "Board power that does not scale with the SM clock (HBM, board, leakage), below both limits.",
             non_negative(limits::kMaxWatts));
  f.required("clock_exponent", s.clock_exponent,
             "The SMs' power grows as the effective SM clock (a compute-bound kernel's rate relative to its best) to "
             "this power (clock times voltage squared, the voltage rising with the clock); without dynamic_power, "
             "compute-bound kernels run at ((limit - static_power) / (efficiency_limit - static_power))^(1 / "
             "clock_exponent) of their measured rate.",
             between(1, 4));
  f.maybe("idle_power", s.idle_power,
          "Board power between kernels within a step (gaps of microseconds to milliseconds); required with "
          "dynamic_power.",
          positive(limits::kMaxWatts));
  f.maybe("dynamic_power", s.dynamic_power,
          "Each kernel class's power above static_power when it runs at its best rate, the limit not binding (the "
          "effective clock 1). With it the clock follows each step's mix: the step's mean power (idle gaps at "
          "idle_power, pipeline bubbles left out) meets the limit, and each compute class runs at that clock over "
          "the one its efficiencies were measured at, back to back at efficiency_limit (docs/hardware-efficiency.md, "
          "\"The step's power state\").");
}

template <class F>
void declare_fields(F& f, DeviceSpec& s) {
  f.required("name", s.name, "Device name.");
  f.required("description", s.description, "What one device is: a GPU, a dual-die package, a die.");
  f.required("peak_flops", s.peak_flops, "Dense peak throughput per format (no sparsity).");
  f.required("hbm_capacity", s.hbm_capacity, "HBM capacity.", positive(limits::kMaxBytes));
  f.required("hbm_bandwidth", s.hbm_bandwidth, "HBM bandwidth (read + write).", positive(limits::kMaxBandwidth));
  f.required("host_memory", s.host_memory, "The DDR tier reachable from the device.");
  f.optional("num_copy_engines", s.num_copy_engines, int64_t{2},
             "DMA engines for host copies that run beside compute.", at_least(1, limits::kMaxSmall));
  f.required("kernel_launch_overhead", s.kernel_launch_overhead, "Fixed cost of launching one kernel.",
             non_negative(limits::kMaxLatency));
  f.maybe("power", s.power,
          "The power limit the part runs at, when below the one its efficiencies were measured at: compute-bound "
          "kernels slow with the SM clock; absent: the measured limit.");
  f.optional("speed_spread", s.speed_spread, 0.0,
             "Relative standard deviation of compute-bound kernels' sustained speed across parts of this model "
             "(chip-to-chip differences in the clock held at the power limit): a job's expected slowest device runs "
             "its compute-bound kernels 1 + speed_spread x E[max of num_devices standard normals] times as long "
             "(docs/modelling.md, \"Device speed spread\"); 0: all parts alike.",
             between(0.0, 0.5));
}

template <class F>
void declare_fields(F& f, SwitchTierSpec& s) {
  f.required("name", s.name, "Tier name.");
  f.required("span", s.span, "Devices that share one switch group of this tier.", positive(limits::kMaxDevices));
  f.required("bandwidth_per_device", s.bandwidth_per_device,
             "Capacity of this tier per device, each way (below the port bandwidth when oversubscribed).", positive(limits::kMaxBandwidth));
  f.required("latency", s.latency,
             "Latency of a crossing of this tier. Read and checked but not used yet: collectives take the fabric's "
             "small-message latency (scale_up.latency, scale_out.latency) whatever tiers they cross.",
             non_negative(limits::kMaxLatency));
}

template <class F>
void declare_fields(F& f, ScaleUpSpec& s) {
  f.required("technology", s.technology, "NVLink generation, unified bus, ...");
  f.required("domain_size", s.domain_size, "Devices in one scale-up domain.", positive(limits::kMaxDevices));
  f.required("port_bandwidth", s.port_bandwidth, "Scale-up bandwidth per device, each way.", positive(limits::kMaxBandwidth));
  f.required("latency", s.latency, "Small-message latency between two devices of a domain.", non_negative(limits::kMaxLatency));
  f.optional("tiers", s.tiers, std::vector<SwitchTierSpec>{},
             "Switch tiers inside the domain, innermost first; the last spans the domain.");
}

template <class F>
void declare_fields(F& f, ScaleOutSpec& s) {
  f.required("technology", s.technology, "InfiniBand NDR, RoCE, ...");
  f.optional("nics_per_device", s.nics_per_device, int64_t{1}, "NICs per device.", positive(limits::kMaxSmall));
  f.required("nic_bandwidth", s.nic_bandwidth, "Bandwidth of one NIC, each way.", positive(limits::kMaxBandwidth));
  f.required("latency", s.latency, "Small-message latency between two domains.", non_negative(limits::kMaxLatency));
  f.optional("tiers", s.tiers, std::vector<SwitchTierSpec>{}, "Network switch tiers, innermost first.");
}

template <class F>
void declare_fields(F& f, FabricSpec& s) {
  f.required("scale_up", s.scale_up, "The high-bandwidth domain.");
  f.maybe("scale_out", s.scale_out, "The network between domains; absent: a single domain.");
}

template <class F>
void declare_fields(F& f, EfficiencyCurve& s) {
  f.required("max", s.max, "Largest fraction of the peak reached.", between(0.001, 1));
  f.optional("half_at", s.half_at, 0.0, "Size at which half of max is reached; 0: always max.", non_negative(limits::kMaxSize));
}

template <class F>
void declare_fields(F& f, AttentionKernelCurves& s) {
  f.required("forward", s.forward, "The kernel's forward, by query tokens.");
  f.maybe("backward", s.backward, "The kernel's backward, by query tokens; absent: forward for both phases.");
}

template <class F>
void declare_fields(F& f, AttentionKernelsSpec& s) {
  f.maybe("flash1", s.flash1,
          "FlashAttention (version 1, flash-attn 1.x) and its Triton implementation: the kernels of stacks "
          "before FlashAttention-2 (mid-2023).");
  f.maybe("flash2", s.flash2, "FlashAttention-2 (also PyTorch SDPA's flash backend).");
  f.maybe("flash3", s.flash3, "FlashAttention-3.");
  f.maybe("cudnn", s.cudnn, "cuDNN's fused attention (PyTorch SDPA's cudnn backend, Transformer Engine's fused attention).");
}

template <class F>
void declare_fields(F& f, MemoryKindsSpec& s) {
  f.maybe("norm", s.norm, "RMSNorm and LayerNorm kernels, forward and backward.", between(0.01, 1));
  f.maybe("activation", s.activation, "Activation kernels (SiLU, GELU, the SwiGLU product).", between(0.01, 1));
  f.maybe("elementwise", s.elementwise, "Other elementwise kernels (residual adds, scaling, RoPE).", between(0.01, 1));
  f.maybe("optimizer", s.optimizer, "The optimizer step's kernels (fused AdamW).", between(0.01, 1));
  f.maybe("dp_copy", s.dp_copy, "Data-parallel wrappers' copies and casts around their collectives.", between(0.01, 1));
}

template <class F>
void declare_fields(F& f, EfficiencySpec& s) {
  f.required("gemm", s.gemm, "GEMMs, by their smallest dimension.");
  f.maybe("gemm_fp8", s.gemm_fp8,
          "GEMMs with FP8 inputs, as a fraction of the FP8 peak, by their smallest dimension; absent: the gemm "
          "curve.");
  f.required("grouped_gemm", s.grouped_gemm, "Expert grouped GEMMs, by rows (tokens) per expert.");
  f.required("attention", s.attention, "Flash and sparse attention and the DSA indexer, by query tokens.");
  f.maybe("attention_backward", s.attention_backward,
          "The backward of the attention kernels, by query tokens; absent: the attention curve for both phases.");
  f.maybe("attention_kernels", s.attention_kernels,
          "Curves of named attention implementations, for scenarios that state which one their stack ran "
          "(fused_ops.attention_kernel); absent: only attention and attention_backward.");
  f.required("linear_attention", s.linear_attention, "KDA kernels, by tokens.");
  f.required("memory", s.memory, "Fraction of HBM bandwidth memory-bound kernels reach.", between(0.01, 1));
  f.maybe("memory_by_kind", s.memory_by_kind,
          "Memory-bound kernels of these kinds at their own fraction of HBM bandwidth; absent kinds: memory.");
  f.required("host_copy", s.host_copy, "Fraction of the host-memory bandwidth copies reach.", between(0.01, 1));
  f.required("collective", s.collective,
             "Bus bandwidth of a large collective as a fraction of the scale-up port bandwidth (and of the NIC "
             "bandwidth unless collective_scale_out is given).",
             between(0.01, 1));
  f.maybe("collective_scale_out", s.collective_scale_out,
          "Bus bandwidth of a large collective through the scale-out NICs as a fraction of the NIC bandwidth; "
          "absent: collective.",
          between(0.01, 1));
  f.required("overlap_slowdown", s.overlap_slowdown,
             "Fraction by which compute slows while communication overlaps it.", between(0, 1));
}

template <class F>
void declare_fields(F& f, HardwareSpec& s) {
  f.required("name", s.name, "Platform name, as the file is named.");
  f.optional("doc", s.doc, std::string(), "Sources, and which numbers are assumptions.");
  f.required("device", s.device, "One accelerator.");
  f.required("devices_per_node", s.devices_per_node, "Devices per node (server, tray).", positive(limits::kMaxDevices));
  f.maybe("max_devices", s.max_devices, "Largest system of this platform; absent: any number of nodes.", positive(limits::kMaxDevices));
  f.required("fabric", s.fabric, "How devices are wired.");
  f.required("efficiency", s.efficiency, "How close kernels and collectives get to the peaks.");
  f.maybe("calibration", s.calibration, "Calibration file (relative to this file) read by the cost model.");
}

template <class F>
void declare_fields(F& f, CommunicatorBytes& s) {
  f.maybe("all_gather", s.all_gather, "Bytes after running all-gathers.", non_negative(limits::kMaxBytes));
  f.maybe("reduce_scatter", s.reduce_scatter, "Bytes after running reduce-scatters.", non_negative(limits::kMaxBytes));
  f.maybe("all_reduce", s.all_reduce, "Bytes after running all-reduces.", non_negative(limits::kMaxBytes));
  f.maybe("all_to_all", s.all_to_all, "Bytes after running all-to-alls.", non_negative(limits::kMaxBytes));
}

template <class F>
void declare_fields(F& f, StackMemory& s) {
  f.required("runtime_bytes", s.runtime_bytes, "Device memory in use once the CUDA context exists.", non_negative(limits::kMaxBytes));
  f.required("communicator_bytes", s.communicator_bytes, "A fresh communicator's memory, by the collective kind it ran.");
}

namespace {

void check_tiers(const std::string& file, const std::string& path, const std::vector<SwitchTierSpec>& tiers,
                 int64_t first_span) {
  int64_t previous = first_span;
  for (size_t i = 0; i < tiers.size(); ++i) {
    const auto& t = tiers[i];
    if (t.span < previous || t.span % previous != 0) {
      throw InputError(file, path + "/" + std::to_string(i) + "/span",
                       "must be a multiple of the tier below (" + std::to_string(previous) + "), got " +
                           std::to_string(t.span));
    }
    previous = t.span;
  }
}

void check(const std::string& file, const HardwareSpec& h) {
  const auto& up = h.fabric.scale_up;
  if (up.domain_size % h.devices_per_node != 0) {
    throw InputError(file, "/fabric/scale_up/domain_size",
                     "must be a multiple of devices_per_node (" + std::to_string(h.devices_per_node) + "), got " +
                         std::to_string(up.domain_size));
  }
  check_tiers(file, "/fabric/scale_up/tiers", up.tiers, 1);
  if (!up.tiers.empty() && up.tiers.back().span != up.domain_size) {
    throw InputError(file, "/fabric/scale_up/tiers/" + std::to_string(up.tiers.size() - 1) + "/span",
                     "the outermost scale-up tier must span the domain (" + std::to_string(up.domain_size) + ")");
  }
  if (h.fabric.scale_out) check_tiers(file, "/fabric/scale_out/tiers", h.fabric.scale_out->tiers, up.domain_size);
  if (const auto& p = h.device.power) {
    if (p->limit.value > p->efficiency_limit.value) {
      throw InputError(file, "/device/power/limit",
                       "exceeds efficiency_limit (" + format(p->efficiency_limit) + "): a clock above the measured one is "
                           "not modelled, got " + format(p->limit));
    }
    if (p->static_power.value >= p->limit.value) {
      throw InputError(file, "/device/power/static_power",
                       "must be below limit (" + format(p->limit) + "), got " + format(p->static_power));
    }
    if (p->dynamic_power && !p->idle_power) {
      throw InputError(file, "/device/power/idle_power", "required with dynamic_power");
    }
    if (p->idle_power && !p->dynamic_power) {
      throw InputError(file, "/device/power/dynamic_power", "required with idle_power (nothing else reads it)");
    }
    if (p->idle_power && p->idle_power->value >= p->limit.value) {
      throw InputError(file, "/device/power/idle_power",
                       "must be below limit (" + format(p->limit) + "), got " + format(*p->idle_power));
    }
  }
  if (h.max_devices) {
    if (*h.max_devices % h.devices_per_node != 0) {
      throw InputError(file, "/max_devices", "must be a multiple of devices_per_node");
    }
    if (*h.max_devices > up.domain_size && !h.fabric.scale_out) {
      throw InputError(file, "/max_devices",
                       "exceeds one scale-up domain (" + std::to_string(up.domain_size) + ") but there is no scale_out");
    }
  } else if (!h.fabric.scale_out) {
    throw InputError(file, "/max_devices", "required when there is no scale_out (a single domain)");
  }
}

// The calibration file's `memory_overhead` (the rest of that file is the cost model's to read).
std::optional<StackMemory> read_stack_memory(const InputText& calibration, const nlohmann::json& root) {
  if (!root.is_object() || !root.contains("memory_overhead")) return std::nullopt;
  StackMemory out;
  FieldReader::read_object(calibration.name, root["memory_overhead"], "/memory_overhead", out);
  return out;
}

}  // namespace

double PowerSpec::compute_scale() const {
  return std::pow((limit.value - static_power.value) / (efficiency_limit.value - static_power.value), 1 / clock_exponent);
}

std::optional<double> CommunicatorBytes::of(std::string_view kind) const {
  if (kind == "all_gather") return all_gather;
  if (kind == "reduce_scatter") return reduce_scatter;
  if (kind == "all_reduce") return all_reduce;
  if (kind == "all_to_all") return all_to_all;
  return std::nullopt;
}

std::optional<double> CommunicatorBytes::largest() const {
  std::optional<double> out;
  for (const std::optional<double>& x : {all_gather, reduce_scatter, all_reduce, all_to_all}) {
    if (x && (!out || *x > *out)) out = x;
  }
  return out;
}

std::optional<double> MemoryKindsSpec::of(std::string_view kind) const {
  if (kind == "norm") return norm;
  if (kind == "activation") return activation;
  if (kind == "elementwise") return elementwise;
  if (kind == "optimizer") return optimizer;
  if (kind == "dp_copy") return dp_copy;
  throw std::invalid_argument("MemoryKindsSpec: no kind " + std::string(kind));
}

const AttentionKernelCurves* AttentionKernelsSpec::of(AttentionKernel kernel) const {
  const std::optional<AttentionKernelCurves>* curves = nullptr;
  switch (kernel) {
    case AttentionKernel::platform_default: return nullptr;
    case AttentionKernel::flash1: curves = &flash1; break;
    case AttentionKernel::flash2: curves = &flash2; break;
    case AttentionKernel::flash3: curves = &flash3; break;
    case AttentionKernel::cudnn: curves = &cudnn; break;
  }
  return curves && *curves ? &**curves : nullptr;
}

std::optional<EfficiencySpec> with_attention_kernel(EfficiencySpec e, AttentionKernel kernel) {
  if (kernel == AttentionKernel::platform_default) return e;
  const AttentionKernelCurves* curves = e.attention_kernels ? e.attention_kernels->of(kernel) : nullptr;
  if (!curves) return std::nullopt;
  e.attention = curves->forward;
  e.attention_backward = curves->backward;
  return e;
}

HardwareSpec load_hardware(const InputText& input) {
  const nlohmann::json root = parse_json(input);
  HardwareSpec spec;
  FieldReader::read_object(input.name, root, "", spec);
  check(input.name, spec);
  if (spec.calibration) {
    spec.calibration_input = read_referenced(input, "/calibration", *spec.calibration, "hardware/calibration");
    spec.calibration_json = std::make_shared<const nlohmann::json>(parse_json(*spec.calibration_input));
    spec.stack_memory = read_stack_memory(*spec.calibration_input, *spec.calibration_json);
  }
  return spec;
}

std::vector<FieldRow> describe_hardware_fields() { return FieldDescriber::describe<HardwareSpec>(); }

}  // namespace moesim
