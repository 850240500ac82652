// SPDX-License-Identifier: MIT
// A PyTorch profiler trace (Chrome trace JSON as torch.profiler's export_chrome_trace writes it,
// from Kineto; plain or gzip-compressed) reduced to what calibration and validation read: the
// record_function ranges of the host threads, the kernel launches (runtime and driver calls with
// their correlation ids), the GPU activities (kernels, memory copies and sets), the profiler's
// step ranges and the caching allocator's memory samples.
//
// Use read_kineto_trace on a file; parse_kineto_trace on text already in memory (tests). Events
// are streamed one at a time out of nlohmann/json's parser (its callback discards each event once
// read), so memory grows with the events kept, never with the whole JSON tree: a trace of a large
// job holds mostly CPU-op and flow events, which are dropped.
//
// Caveats: times are Kineto's microseconds (doubles); only the first GPU (the lowest device id
// seen) is read when a trace holds several; an event the reader keeps with a field of the wrong
// type is an InputError naming the file and the JSON path ("/traceEvents/812/dur").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moesim {

// A record_function range (category user_annotation) or a profiler step ("ProfilerStep#N").
struct TraceRange {
  uint32_t name = 0;   // into KinetoTrace::names
  int64_t pid = 0, tid = 0;
  double ts_us = 0, dur_us = 0;
  uint32_t event = 0;  // index in traceEvents
  double end_us() const { return ts_us + dur_us; }
};

// A host call that launched GPU work (cudaLaunchKernel, cuLaunchKernel, cudaMemcpyAsync, ...).
struct TraceLaunch {
  int64_t correlation = 0;
  int64_t pid = 0, tid = 0;
  double ts_us = 0;
  double dur_us = 0;  // the call's duration (0 when the event has none): a synchronous copy waits in it
  double end_us() const { return ts_us + dur_us; }
};

enum class GpuActivity : uint8_t { kernel, memcpy, memset };

// What a communication kernel's args say (PyTorch records them on NCCL kernels since 2.4).
struct CommArgs {
  std::string collective;    // "Collective name": "allgather", "all_to_allv", ...; empty: not recorded
  double in_elements = -1;   // "In msg nelems"
  double out_elements = -1;  // "Out msg nelems"
  int64_t group_size = -1;   // "Group size"
  double element_bytes = 0;  // from "dtype"; 0 when unknown
};

struct TraceKernel {
  uint32_t name = 0;  // into KinetoTrace::names
  GpuActivity activity = GpuActivity::kernel;
  int64_t device = 0, stream = 0, correlation = -1;
  double ts_us = 0, dur_us = 0;
  uint32_t event = 0;
  int32_t comm = -1;  // into KinetoTrace::comm_args, -1 when the kernel has none
  double end_us() const { return ts_us + dur_us; }
};

// One "[memory]" instant event of the caching allocator (profile_memory=True).
struct AllocatorSample {
  double ts_us = 0;
  int64_t device = 0;
  double allocated_bytes = 0;  // "Total Allocated" after the event
  double reserved_bytes = 0;   // "Total Reserved"
  std::optional<double> bytes;  // "Bytes": this event's allocation (negative: a free), where recorded
};

struct KinetoTrace {
  std::string file;
  std::vector<std::string> names;  // interned event names
  std::vector<TraceRange> ranges;  // user annotations, ProfilerStep ranges included
  std::vector<TraceRange> steps;   // the ProfilerStep#N ranges, by start time
  std::vector<TraceLaunch> launches;
  std::vector<TraceKernel> kernels;  // of one device, by start time
  std::vector<CommArgs> comm_args;
  std::vector<AllocatorSample> memory;  // GPU samples of that device, by time
  int64_t rank = 0;                  // distributedInfo.rank: the rank that wrote the trace
  int64_t device = 0;                // the device read
  int64_t num_devices_seen = 0;
  uint64_t num_events = 0;           // all events of traceEvents, kept or not

  const std::string& name_of(const TraceRange& r) const { return names[r.name]; }
  const std::string& name_of(const TraceKernel& k) const { return names[k.name]; }
};

// Reads a trace file (gzip when it starts with the gzip magic bytes). Throws InputError naming
// the file, and the JSON path where an event is malformed.
KinetoTrace read_kineto_trace(const std::string& path);
// The same for text in memory; `name` names it in errors.
KinetoTrace parse_kineto_trace(std::string_view text, const std::string& name);
// Inflates gzip data (several members are concatenated); throws InputError naming `name`.
std::string gunzip(std::string_view data, const std::string& name);

}  // namespace moesim
