// SPDX-License-Identifier: MIT
// Chrome trace-event JSON and memory CSV from a Timeline (see trace.hpp for the layout).
//
// Speed matters more than elegance here: a 128-rank step is millions of records. Strings that
// repeat (op names escaped for JSON, enum names) are prepared once; numbers go through
// std::to_chars into a stack buffer; the output is reserved up front from an estimate. One pass
// checks the records against the graph and finds the rank / stream pairs that need names, a
// second writes them.
#include "report/trace.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <vector>

namespace moesim {
namespace {

constexpr int kNumStreams = 3;

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(end - buf));
}

// `value` / 10^num_digits written exactly, trailing zeros (and a bare point) dropped:
// (1234567, 6) -> "1.234567", (1500000, 6) -> "1.5", (3000000, 6) -> "3", (-5, 6) -> "-0.000005".
void append_scaled(std::string& out, int64_t value, int num_digits) {
  uint64_t scale = 1;
  for (int i = 0; i < num_digits; ++i) scale *= 10;
  // Magnitude in unsigned arithmetic so that INT64_MIN does not overflow.
  const uint64_t magnitude = value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  if (value < 0) out += '-';
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, magnitude / scale);
  out.append(buf, static_cast<size_t>(end - buf));
  uint64_t frac = magnitude % scale;
  if (frac == 0) return;
  int len = num_digits;
  while (frac % 10 == 0) {
    frac /= 10;
    --len;
  }
  char digits[20];
  for (int i = len - 1; i >= 0; --i) {
    digits[i] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  out += '.';
  out.append(digits, static_cast<size_t>(len));
}

void append_us(std::string& out, Picoseconds ps) { append_scaled(out, ps, 6); }

// Shortest text that reads back the same double. Counts (FLOPs, bytes) use fixed notation so that
// they read as integers ("123456789", not "1.23456789e+08"); the buffer holds the longest fixed
// double (about 330 characters). JSON has no NaN or infinity: a non-finite value is a bug upstream.
void append_double(std::string& out, double v, std::chars_format format, std::string_view what) {
  if (!std::isfinite(v)) throw std::invalid_argument("trace: non-finite " + std::string(what));
  char buf[400];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, format);
  if (ec != std::errc{}) throw std::logic_error("trace: cannot format " + std::string(what));
  out.append(buf, static_cast<size_t>(end - buf));
}

// A JSON string literal. Op names are ASCII identifiers with dots, but anything is escaped
// correctly: quote, backslash and control characters; other bytes (UTF-8) pass through.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      constexpr char kHex[] = "0123456789abcdef";
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xf];
      }
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

// Enum names indexed by value, looked up once rather than by a linear search per record.
template <class E, size_t N>
std::array<std::string_view, N> names_by_value() {
  std::array<std::string_view, N> out{};
  for (const auto& [name, value] : EnumNames<E>::names) out[static_cast<size_t>(value)] = name;
  return out;
}

int64_t pid_of(int64_t rank) { return rank + 1; }
int64_t tid_of(int64_t rank, size_t stream) { return 10 * pid_of(rank) + 1 + static_cast<int64_t>(stream); }

std::string record_error(size_t index, const std::string& what) {
  return "chrome_trace_json: timeline record " + std::to_string(index) + ": " + what;
}

}  // namespace

std::string chrome_trace_json(const StepGraph& graph, const Timeline& timeline, const TraceOptions& options) {
  const int64_t num_ranks = graph.plan.num_ranks();
  const int64_t num_ranks_written = std::clamp<int64_t>(options.max_ranks, 0, num_ranks);

  // Pass 1: check every record and sample against the graph (also those of ranks left out: a
  // mismatch there is the same bug), and note which ranks and streams appear.
  std::vector<int64_t> program_of_rank(static_cast<size_t>(num_ranks));
  for (int64_t r = 0; r < num_ranks; ++r) program_of_rank[static_cast<size_t>(r)] = graph.plan.program_of(r);
  std::vector<std::array<bool, kNumStreams>> stream_used(static_cast<size_t>(num_ranks_written));
  std::vector<bool> rank_used(static_cast<size_t>(num_ranks_written), false);
  int64_t num_records_left_out = 0;
  for (size_t i = 0; i < timeline.records.size(); ++i) {
    const ExecRecord& rec = timeline.records[i];
    if (rec.rank < 0 || rec.rank >= num_ranks) {
      throw std::invalid_argument(record_error(i, "rank " + std::to_string(rec.rank) + " outside the plan's " +
                                                      std::to_string(num_ranks) + " ranks"));
    }
    if (rec.program != program_of_rank[static_cast<size_t>(rec.rank)]) {
      throw std::invalid_argument(record_error(i, "rank " + std::to_string(rec.rank) + " runs program " +
                                                      std::to_string(program_of_rank[static_cast<size_t>(rec.rank)]) +
                                                      ", not " + std::to_string(rec.program)));
    }
    const Program& program = graph.programs.at(static_cast<size_t>(rec.program));
    if (rec.op >= program.ops.size()) {
      throw std::invalid_argument(record_error(i, "op " + std::to_string(rec.op) + " outside program " +
                                                      std::to_string(rec.program) + "'s " +
                                                      std::to_string(program.ops.size()) + " ops"));
    }
    const auto stream = static_cast<size_t>(rec.stream);
    if (stream >= kNumStreams) throw std::invalid_argument(record_error(i, "unknown stream"));
    if (rec.end < rec.start) throw std::invalid_argument(record_error(i, "ends before it starts"));
    if (rec.rank >= num_ranks_written) {
      ++num_records_left_out;
      continue;
    }
    stream_used[static_cast<size_t>(rec.rank)][stream] = true;
    rank_used[static_cast<size_t>(rec.rank)] = true;
  }
  int64_t num_samples_left_out = 0;
  for (size_t i = 0; i < timeline.memory.size(); ++i) {
    const MemorySample& s = timeline.memory[i];
    if (s.rank < 0 || s.rank >= num_ranks) {
      throw std::invalid_argument("chrome_trace_json: memory sample " + std::to_string(i) + ": rank " +
                                  std::to_string(s.rank) + " outside the plan's " + std::to_string(num_ranks) +
                                  " ranks");
    }
    if (s.rank >= num_ranks_written) {
      ++num_samples_left_out;
      continue;
    }
    rank_used[static_cast<size_t>(s.rank)] = true;
  }

  // Strings that repeat, prepared once: each program's names as JSON literals, enum names.
  std::vector<std::vector<std::string>> op_names(graph.programs.size());
  for (size_t p = 0; p < graph.programs.size(); ++p) {
    const auto& names = graph.programs[p].names;
    op_names[p].reserve(names.size());
    for (const std::string& name : names) op_names[p].push_back(json_string(name));
  }
  const auto kind_names = names_by_value<OpKind, kNumOpKinds>();
  const auto phase_names = names_by_value<Phase, 4>();
  const auto group_names = names_by_value<GroupKind, kNumGroupKinds>();
  const auto stream_names = names_by_value<Stream, kNumStreams>();

  std::string out;
  // About 230 bytes per op event and 110 per counter event: one allocation in the common case.
  out.reserve(static_cast<size_t>(timeline.records.size() - static_cast<size_t>(num_records_left_out)) * 240 +
              static_cast<size_t>(timeline.memory.size() - static_cast<size_t>(num_samples_left_out)) * 120 +
              static_cast<size_t>(num_ranks_written) * 600 + 1024);
  out += "{\"traceEvents\":[\n";
  bool first_event = true;
  auto begin_event = [&]() {
    if (!first_event) out += ",\n";
    first_event = false;
  };

  // Metadata: names and sort order of processes (ranks) and threads (streams).
  for (int64_t rank = 0; rank < num_ranks_written; ++rank) {
    if (!rank_used[static_cast<size_t>(rank)]) continue;
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":";
    append_int(out, pid_of(rank));
    out += ",\"args\":{\"name\":\"rank ";
    append_int(out, rank);
    out += " (program ";
    append_int(out, program_of_rank[static_cast<size_t>(rank)]);
    out += ")\"}},\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":";
    append_int(out, pid_of(rank));
    out += ",\"args\":{\"sort_index\":";
    append_int(out, rank);
    out += "}}";
    for (size_t stream = 0; stream < kNumStreams; ++stream) {
      if (!stream_used[static_cast<size_t>(rank)][stream]) continue;
      out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":";
      append_int(out, pid_of(rank));
      out += ",\"tid\":";
      append_int(out, tid_of(rank, stream));
      out += ",\"args\":{\"name\":\"";
      out += stream_names[stream];
      out += "\"}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":";
      append_int(out, pid_of(rank));
      out += ",\"tid\":";
      append_int(out, tid_of(rank, stream));
      out += ",\"args\":{\"sort_index\":";
      append_int(out, static_cast<int64_t>(stream));
      out += "}}";
    }
  }
  if (num_ranks_written < num_ranks) {
    // Not a name the viewers display, but it travels with the file; otherData says it too.
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"ranks_left_out\",\"pid\":1,\"args\":{\"first_rank\":";
    append_int(out, num_ranks_written);
    out += ",\"num_ranks\":";
    append_int(out, num_ranks - num_ranks_written);
    out += ",\"num_records\":";
    append_int(out, num_records_left_out);
    out += ",\"num_memory_samples\":";
    append_int(out, num_samples_left_out);
    out += ",\"reason\":\"max_ranks = ";
    append_int(out, options.max_ranks);
    out += ": ranks ";
    append_int(out, num_ranks_written);
    out += " to ";
    append_int(out, num_ranks - 1);
    out += " are left out of this trace\"}}";
  }

  // Op executions.
  for (const ExecRecord& rec : timeline.records) {
    if (rec.rank >= num_ranks_written) continue;
    const Program& program = graph.programs[static_cast<size_t>(rec.program)];
    const Op& op = program.ops[rec.op];
    begin_event();
    out += "{\"ph\":\"X\",\"pid\":";
    append_int(out, pid_of(rec.rank));
    out += ",\"tid\":";
    append_int(out, tid_of(rec.rank, static_cast<size_t>(rec.stream)));
    out += ",\"ts\":";
    append_us(out, rec.start);
    out += ",\"dur\":";
    append_us(out, rec.end - rec.start);
    out += ",\"name\":";
    out += op_names[static_cast<size_t>(rec.program)][op.name];
    out += ",\"cat\":\"";
    out += kind_names[static_cast<size_t>(op.kind)];
    out += "\",\"args\":{\"phase\":\"";
    out += phase_names[static_cast<size_t>(op.phase)];
    out += "\",\"layer\":";
    append_int(out, op.layer);
    out += ",\"micro\":";
    append_int(out, op.micro);
    out += ",\"flops\":";
    append_double(out, op.flops, std::chars_format::fixed, "flops");
    out += ",\"bytes\":";
    const bool moves_bytes = is_communication(op.kind) || op.kind == OpKind::swap_out || op.kind == OpKind::swap_in;
    append_double(out, moves_bytes ? op.comm_bytes : op.bytes_read + op.bytes_written, std::chars_format::fixed,
                  "bytes");
    if (rec.routed >= 0) {
      // The routing draw's size of this execution beside the graph's expected one.
      const bool rows = op.kind == OpKind::grouped_gemm || op.kind == OpKind::lora_gemm;
      out += rows ? ",\"rows\":" : ",\"routed_bytes\":";
      append_double(out, rec.routed, std::chars_format::fixed, "routed amount");
      if (rows) {
        out += ",\"rows_expected\":";
        append_int(out, op.m);
      }
    }
    if (is_communication(op.kind)) {
      out += ",\"group\":\"";
      out += group_names[static_cast<size_t>(op.group)];
      out += '"';
    }
    out += "}}";
  }

  // Memory in use: one counter track per rank.
  for (const MemorySample& s : timeline.memory) {
    if (s.rank >= num_ranks_written) continue;
    begin_event();
    out += "{\"ph\":\"C\",\"name\":\"memory\",\"pid\":";
    append_int(out, pid_of(s.rank));
    out += ",\"ts\":";
    append_us(out, s.time);
    out += ",\"args\":{\"hbm_GB\":";
    append_double(out, s.hbm_bytes / 1e9, std::chars_format::general, "hbm_bytes");
    out += ",\"ddr_GB\":";
    append_double(out, s.ddr_bytes / 1e9, std::chars_format::general, "ddr_bytes");
    out += ",\"hbm_reserved_GB\":";
    append_double(out, s.hbm_reserved_bytes / 1e9, std::chars_format::general, "hbm_reserved_bytes");
    out += "}}";
  }

  out += "\n],\n\"otherData\":{\"generator\":\"moesim\",\"scenario\":";
  append_json_string(out, graph.scenario);
  out += ",\"num_ranks\":";
  append_int(out, num_ranks);
  out += ",\"num_ranks_written\":";
  append_int(out, num_ranks_written);
  out += ",\"step_end_us\":";
  append_us(out, timeline.step_end);
  out += "}}\n";
  return out;
}

std::string memory_csv(const Timeline& timeline) {
  std::string out;
  out.reserve(timeline.memory.size() * 64 + 64);
  out += "rank,time_s,hbm_bytes,ddr_bytes,hbm_reserved_bytes\n";
  for (const MemorySample& s : timeline.memory) {
    append_int(out, s.rank);
    out += ',';
    append_scaled(out, s.time, 12);
    out += ',';
    append_double(out, s.hbm_bytes, std::chars_format::fixed, "hbm_bytes");
    out += ',';
    append_double(out, s.ddr_bytes, std::chars_format::fixed, "ddr_bytes");
    out += ',';
    append_double(out, s.hbm_reserved_bytes, std::chars_format::fixed, "hbm_reserved_bytes");
    out += '\n';
  }
  return out;
}

}  // namespace moesim
