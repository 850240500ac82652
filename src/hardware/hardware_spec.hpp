// SPDX-License-Identifier: MIT
// HardwareSpec: the platform, read from hardware/*.json - what one device can do, how devices are
// wired, and an optional calibration file. No peak, bandwidth or latency lives in code.
//
// Bandwidths are per device and per direction unless a field says otherwise. A number the vendor
// does not publish is still an explicit input; the file's doc strings say which numbers are
// assumptions.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/enum_names.hpp"
#include "core/field_row.hpp"
#include "core/json_input.hpp"
#include "core/units.hpp"

namespace moesim {

// Dense peak throughput per compute format; absent: the device has no such format.
struct PeakFlopsSpec {
  std::optional<FlopsPerSecond> fp32;
  std::optional<FlopsPerSecond> tf32;
  FlopsPerSecond bf16;
  std::optional<FlopsPerSecond> fp16;
  std::optional<FlopsPerSecond> fp8;
  std::optional<FlopsPerSecond> int8;
  std::optional<FlopsPerSecond> fp4;

  std::optional<FlopsPerSecond> of(Dtype d) const;
};

// The optimizer step of CPU offload on the host CPUs (ZeRO-Offload's CPU-Adam), as host-memory
// bytes per second per node: its AdamW reads fp32 weights, gradients and two moments and writes
// weights and moments (28 bytes a parameter), memory-bound. ZeRO-Offload (arXiv 2101.06840,
// Table 3) reports CPU-Adam stepping 10 B parameters in 2.57 s on a DGX-2's two 24-core Xeon
// Platinum 8168 - 3.9e9 parameters/s, 109 GB/s at 28 bytes each; 110 GB/s is that, an assumption
// for any other host (a newer host is faster: give the field).
inline constexpr double kDefaultCpuOptimizerBytesPerSecond = 110e9;

// The host memory tier a device can reach (CPU DDR / LPDDR): swap target and offload space.
struct HostMemorySpec {
  Bytes capacity_per_device;
  BytesPerSecond bandwidth;  // device <-> host, per device, each way
  Seconds latency;
  bool over_scale_up = false;  // reached over the scale-up fabric: copies share its port
  // Per node, shared by its devices' concurrent CPU optimizer steps (parallel.fsdp.offload).
  BytesPerSecond cpu_optimizer_bandwidth{kDefaultCpuOptimizerBytesPerSecond};
};

// The board power limit, for a part run below the limit its efficiencies were measured at (a 500 W
// H100 with the 700 W part's curves, a power-capped cluster). At its limit a GPU lowers its SM clock
// until the board draws no more than the limit; compute-bound kernels slow by the ratio of the
// clocks. The SMs' power grows as the clock to `clock_exponent` (C f V(f)^2, the voltage rising with
// the clock) on top of `static_power` (HBM, board, leakage), so the clock at `limit` relative to the
// clock at `efficiency_limit` is ((limit - static) / (efficiency_limit - static))^(1 / exponent).
// Memory-bound kernels and collectives keep their rates (HBM and links have clocks of their own).
//
// With `dynamic_power` and `idle_power` the clock follows each step's own mix of kernels (the
// power state, cost/power_state.hpp): each kernel class's power above static_power when it runs
// at its best rate (no limit binding), and the board's power between kernels. "Clock" there is the
// effective one, a compute-bound kernel's rate relative to its best: nvidia-smi's SM clock, a
// 100 ms average, hides how an H100 throttles at its limit.
struct DynamicPowerSpec {
  Watts gemm;       // tensor-core matmuls
  Watts attention;  // attention cores (flash, sparse, KDA)
  Watts memory;     // memory-bound kernels (norms, elementwise, copies, the optimizer)
};

struct PowerSpec {
  Watts limit;             // the power limit the part runs at
  Watts efficiency_limit;  // the limit at which the file's efficiencies (and calibration) were measured
  Watts static_power;      // board power that does not scale with the SM clock
  double clock_exponent = 1;
  std::optional<Watts> idle_power;                // between kernels; with dynamic_power
  std::optional<DynamicPowerSpec> dynamic_power;  // per kernel class at its best rate

  // Compute-bound throughput at `limit` as a fraction of that at `efficiency_limit` (<= 1).
  double compute_scale() const;
};

struct DeviceSpec {
  std::string name;
  std::string description;  // what one device is (a die, a package, a GPU)
  PeakFlopsSpec peak_flops;
  Bytes hbm_capacity;
  BytesPerSecond hbm_bandwidth;  // read + write combined
  HostMemorySpec host_memory;
  int64_t num_copy_engines = 2;
  Seconds kernel_launch_overhead;
  std::optional<PowerSpec> power;  // absent: the part runs at the limit its efficiencies were measured at
  // Relative standard deviation of the sustained speed of compute-bound kernels from one part of
  // this model to the next (chip-to-chip differences in the clock held at the power limit); a job
  // waits for its slowest device (scenario/device_spread.hpp). 0: all parts alike.
  double speed_spread = 0;
};

// One tier of switches: `span` devices share a switch (group) of this tier.
struct SwitchTierSpec {
  std::string name;
  int64_t span = 0;
  BytesPerSecond bandwidth_per_device;  // capacity of this tier available to each device, each way
  Seconds latency;                      // added per crossing of this tier
};

// The high-bandwidth domain (NVLink/NVSwitch, unified bus): load/store between its devices.
struct ScaleUpSpec {
  std::string technology;
  int64_t domain_size = 0;
  BytesPerSecond port_bandwidth;  // per device, each way
  Seconds latency;                // small-message latency between two devices
  std::vector<SwitchTierSpec> tiers;
};

// Between scale-up domains: NICs and a network of switches.
struct ScaleOutSpec {
  std::string technology;
  int64_t nics_per_device = 1;
  BytesPerSecond nic_bandwidth;  // per NIC, each way
  Seconds latency;
  std::vector<SwitchTierSpec> tiers;
};

struct FabricSpec {
  ScaleUpSpec scale_up;
  std::optional<ScaleOutSpec> scale_out;
};

// The achieved fraction of a peak as the work grows: max * x / (x + half_at), x being the op's
// size measure (see EfficiencySpec); half_at 0 makes it the constant max.
struct EfficiencyCurve {
  double max = 1;
  double half_at = 0;

  double at(double x) const { return half_at <= 0 ? max : max * x / (x + half_at); }
};

// Attention kernel implementations whose curves a hardware file can carry beside its default
// (`attention`, the best kernel the platform's current stacks run), because the same GPU runs them
// at very different fractions of its peak (H100, causal head dim 128 forward at 16k: FlashAttention-2
// 335 TFLOP/s, cuDNN 539, FlashAttention-3 616; A100: FlashAttention 25-40% of the peak, FlashAttention-2
// 50-73%). A scenario names the one its stack ran (fused_ops.attention_kernel).
enum class AttentionKernel { platform_default, flash1, flash2, flash3, cudnn };

struct AttentionKernelCurves {
  EfficiencyCurve forward;
  std::optional<EfficiencyCurve> backward;  // absent: forward for both phases
};

struct AttentionKernelsSpec {
  std::optional<AttentionKernelCurves> flash1, flash2, flash3, cudnn;

  // The curves of `kernel`; nullptr for platform_default or a kernel the file does not carry.
  const AttentionKernelCurves* of(AttentionKernel kernel) const;
};

// Memory-bound kernels of one kind at their own fraction of the HBM bandwidth, where measurements
// show kinds apart (norms reach far less than copies); absent: EfficiencySpec::memory.
struct MemoryKindsSpec {
  std::optional<double> norm, activation, elementwise, optimizer, dp_copy;

  // The kinds by their names in the file, and the fraction of one of them (nullopt when the file
  // gives none; std::invalid_argument for a name that is no kind).
  static constexpr std::array<std::string_view, 5> kinds = {"norm", "activation", "elementwise", "optimizer", "dp_copy"};
  std::optional<double> of(std::string_view kind) const;
};

// How close kernels and collectives get to the peaks, by kind. Measured where a measurement is
// cited in the file's doc, otherwise explicit assumptions; a calibration file refines them.
struct EfficiencySpec {
  EfficiencyCurve gemm;              // x = min(m, n, k)
  // GEMMs with FP8 inputs, as a fraction of the FP8 peak (they reach less of their doubled peak
  // than BF16 GEMMs of theirs); absent: `gemm`.
  std::optional<EfficiencyCurve> gemm_fp8;
  EfficiencyCurve grouped_gemm;      // x = rows per group (tokens per expert)
  EfficiencyCurve attention;         // dense and sparse flash attention, the DSA indexer; x = query tokens
  // The backward of those kernels (phase bwd), which published kernels run at a lower fraction of
  // the peak than their forward; absent: `attention` for both phases.
  std::optional<EfficiencyCurve> attention_backward;
  // Named attention implementations (AttentionKernel); absent: only the default curves above.
  std::optional<AttentionKernelsSpec> attention_kernels;
  EfficiencyCurve linear_attention;  // KDA kernels; x = tokens
  double memory = 0.85;              // fraction of HBM bandwidth memory-bound kernels reach
  std::optional<MemoryKindsSpec> memory_by_kind;  // kinds that reach another fraction
  double host_copy = 0.9;            // fraction of the host-memory bandwidth copies reach
  double collective = 0.75;          // bus bandwidth of a large collective / scale-up port bandwidth
  // The same over the scale-out NICs (bus bandwidth / NIC bandwidth); absent: `collective`.
  std::optional<double> collective_scale_out;
  double overlap_slowdown = 0.1;     // compute runs this much slower while communication overlaps it
};

// Device memory the software stack holds, as `moesim calibrate` measured it on this hardware (the
// calibration file's `memory_overhead`): the CUDA context with its libraries, and what a
// collective-library communicator holds once it has run one collective kind (all_gather,
// reduce_scatter, all_reduce, all_to_all) at every size.
struct CommunicatorBytes {
  std::optional<double> all_gather, reduce_scatter, all_reduce, all_to_all;
  std::optional<double> of(std::string_view kind) const;  // by the kind's name; empty if not measured
  std::optional<double> largest() const;                  // empty if none was measured
};

struct StackMemory {
  double runtime_bytes = 0;
  CommunicatorBytes communicator_bytes;
};

struct HardwareSpec {
  std::string name;
  std::string doc;
  DeviceSpec device;
  int64_t devices_per_node = 0;
  std::optional<int64_t> max_devices;  // absent: any number of nodes (through scale_out)
  FabricSpec fabric;
  EfficiencySpec efficiency;
  std::optional<std::string> calibration;  // path relative to the hardware file
  std::optional<InputText> calibration_input;  // that file as read by load_hardware
  // That file parsed once (load_hardware): the cost model reads its tables from it.
  std::shared_ptr<const nlohmann::json> calibration_json;
  std::optional<StackMemory> stack_memory;  // the calibration file's memory_overhead, if it has one
};

// `e` with the attention curves of `kernel` in place of the default ones; platform_default leaves it
// as it is; empty when the hardware file does not carry that kernel.
std::optional<EfficiencySpec> with_attention_kernel(EfficiencySpec e, AttentionKernel kernel);

HardwareSpec load_hardware(const InputText& input);
std::vector<FieldRow> describe_hardware_fields();

template <>
struct EnumNames<AttentionKernel> {
  static constexpr std::array<std::pair<std::string_view, AttentionKernel>, 5> names{{
      {"default", AttentionKernel::platform_default},
      {"flash1", AttentionKernel::flash1},
      {"flash2", AttentionKernel::flash2},
      {"flash3", AttentionKernel::flash3},
      {"cudnn", AttentionKernel::cudnn},
  }};
};

}  // namespace moesim
