// SPDX-License-Identifier: MIT
#include "trace/kineto_trace.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace moesim {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = static_cast<int>(limits::kMaxJsonDepth);  // as every input file (core/limits.hpp)

// Bytes of an element of a dtype as PyTorch names it in comm args ("BFloat16", "Float", ...).
double dtype_bytes_of(const std::string& d) {
  if (d == "BFloat16" || d == "Half" || d == "bfloat16" || d == "float16") return 2;
  if (d == "Float" || d == "float32" || d == "Int" || d == "int32") return 4;
  if (d == "Double" || d == "Long" || d == "int64" || d == "float64") return 8;
  if (d == "Byte" || d == "Char" || d == "Float8_e4m3fn" || d == "Float8_e5m2" || d == "Bool") return 1;
  return 0;
}

class EventReader {
 public:
  EventReader(KinetoTrace& t) : t_(t) {}

  void take(const json& e, uint64_t index) {
    const std::string path = "/traceEvents/" + std::to_string(index);
    if (!e.is_object()) throw InputError(t_.file, path, "must be an object (a trace event)");
    const std::string ph = string_or(e, path, "ph");
    const std::string cat = string_or(e, path, "cat");
    if (ph == "X") {
      if (cat == "user_annotation") {
        TraceRange r = range(e, path, index);
        t_.ranges.push_back(r);
        if (t_.names[r.name].starts_with("ProfilerStep#")) t_.steps.push_back(r);
      } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
        const json* args = object_or_null(e, path, "args");
        if (args == nullptr || !args->contains("correlation")) return;
        TraceLaunch l;
        l.correlation = integer(*args, path + "/args", "correlation");
        l.pid = thread_id(e, path, "pid");
        l.tid = thread_id(e, path, "tid");
        l.ts_us = number(e, path, "ts");
        if (e.contains("dur")) {
          l.dur_us = number(e, path, "dur");
          if (l.dur_us < 0) fail(path + "/dur", "must not be negative");
        }
        t_.launches.push_back(l);
      } else if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
        kernel(e, path, index, cat);
      }
    } else if (ph == "i" && cat == "cpu_instant_event" && e.contains("name") && e["name"] == "[memory]") {
      const json* args = object_or_null(e, path, "args");
      if (args == nullptr) return;
      if (args->contains("Device Type") && integer(*args, path + "/args", "Device Type") != 1) return;  // 1: CUDA
      AllocatorSample m;
      m.ts_us = number(e, path, "ts");
      m.device = integer(*args, path + "/args", "Device Id");
      m.allocated_bytes = number(*args, path + "/args", "Total Allocated");
      if (args->contains("Total Reserved")) m.reserved_bytes = number(*args, path + "/args", "Total Reserved");
      if (args->contains("Bytes")) m.bytes = number(*args, path + "/args", "Bytes");
      t_.memory.push_back(m);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const { throw InputError(t_.file, path, msg); }

  std::string string_or(const json& e, const std::string& path, const char* key) const {
    auto it = e.find(key);
    if (it == e.end()) return {};
    if (!it->is_string()) fail(path + "/" + key, "must be a string");
    return it->get<std::string>();
  }
  double number(const json& e, const std::string& path, const char* key) const {
    auto it = e.find(key);
    if (it == e.end()) fail(path, std::string("missing \"") + key + "\"");
    if (!it->is_number()) fail(path + "/" + key, "must be a number");
    const double v = it->get<double>();
    if (!std::isfinite(v)) fail(path + "/" + key, "must be finite");
    return v;
  }
  int64_t integer(const json& e, const std::string& path, const char* key) const {
    auto it = e.find(key);
    if (it == e.end()) fail(path, std::string("missing \"") + key + "\"");
    if (!it->is_number_integer()) fail(path + "/" + key, "must be an integer");
    return it->get<int64_t>();
  }
  const json* object_or_null(const json& e, const std::string& path, const char* key) const {
    auto it = e.find(key);
    if (it == e.end()) return nullptr;
    if (!it->is_object()) fail(path + "/" + key, "must be an object");
    return &*it;
  }
  // pid and tid are integers in Kineto's traces; a few writers use strings ("Traces"): those get
  // negative ids of their own.
  int64_t thread_id(const json& e, const std::string& path, const char* key) {
    auto it = e.find(key);
    if (it == e.end()) fail(path, std::string("missing \"") + key + "\"");
    if (it->is_number_integer()) return it->get<int64_t>();
    if (!it->is_string()) fail(path + "/" + key, "must be an integer or a string");
    auto [pos, fresh] = string_ids_.try_emplace(it->get<std::string>(), -static_cast<int64_t>(string_ids_.size()) - 1);
    return pos->second;
  }
  uint32_t intern(const std::string& s) {
    auto [pos, fresh] = name_ids_.try_emplace(s, static_cast<uint32_t>(t_.names.size()));
    if (fresh) t_.names.push_back(s);
    return pos->second;
  }
  TraceRange range(const json& e, const std::string& path, uint64_t index) {
    TraceRange r;
    auto it = e.find("name");
    if (it == e.end() || !it->is_string()) fail(path + "/name", "must be a string");
    r.name = intern(it->get<std::string>());
    r.pid = thread_id(e, path, "pid");
    r.tid = thread_id(e, path, "tid");
    r.ts_us = number(e, path, "ts");
    r.dur_us = number(e, path, "dur");
    if (r.dur_us < 0) fail(path + "/dur", "must not be negative");
    r.event = static_cast<uint32_t>(index);
    return r;
  }
  void kernel(const json& e, const std::string& path, uint64_t index, const std::string& cat) {
    const TraceRange r = range(e, path, index);
    TraceKernel k;
    k.name = r.name;
    k.activity = cat == "kernel" ? GpuActivity::kernel : cat == "gpu_memcpy" ? GpuActivity::memcpy : GpuActivity::memset;
    k.ts_us = r.ts_us;
    k.dur_us = r.dur_us;
    k.event = r.event;
    k.device = r.pid;
    k.stream = r.tid;
    if (const json* args = object_or_null(e, path, "args")) {
      const std::string ap = path + "/args";
      if (args->contains("device")) k.device = integer(*args, ap, "device");
      if (args->contains("stream")) k.stream = integer(*args, ap, "stream");
      if (args->contains("correlation")) k.correlation = integer(*args, ap, "correlation");
      if (args->contains("Collective name")) {
        CommArgs c;
        c.collective = string_or(*args, ap, "Collective name");
        if (args->contains("In msg nelems")) c.in_elements = number(*args, ap, "In msg nelems");
        if (args->contains("Out msg nelems")) c.out_elements = number(*args, ap, "Out msg nelems");
        if (args->contains("Group size")) c.group_size = integer(*args, ap, "Group size");
        c.element_bytes = dtype_bytes_of(string_or(*args, ap, "dtype"));
        k.comm = static_cast<int32_t>(t_.comm_args.size());
        t_.comm_args.push_back(std::move(c));
      }
    }
    t_.kernels.push_back(k);
  }

  KinetoTrace& t_;
  std::unordered_map<std::string, uint32_t> name_ids_;
  std::unordered_map<std::string, int64_t> string_ids_;
};

// Line and column (1-based) of a byte offset, for parse errors.
std::pair<size_t, size_t> line_column(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

}  // namespace

std::string gunzip(std::string_view data, const std::string& name) {
  std::string out;
  z_stream z{};
  if (data.size() > std::numeric_limits<uInt>::max()) {
    throw InputError(name, "", "a gzip file over 4 GiB: decompress it first (gunzip) and give the JSON");
  }
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw InputError(name, "", "cannot start zlib");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  char buf[1 << 16];
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      inflateReset(&z);  // another gzip member follows (next_in already points at it)
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string why = z.msg ? z.msg : "error " + std::to_string(rc);
      inflateEnd(&z);
      throw InputError(name, "", "corrupt gzip data (" + why + ")");
    }
    if (rc == Z_BUF_ERROR || (z.avail_in == 0 && z.avail_out != 0)) {
      inflateEnd(&z);
      throw InputError(name, "", "truncated gzip data (the file ends inside the compressed stream)");
    }
  }
  inflateEnd(&z);
  return out;
}

KinetoTrace parse_kineto_trace(std::string_view text, const std::string& name) {
  KinetoTrace t;
  t.file = name;
  EventReader reader(t);
  bool in_events = false, saw_events = false;
  uint64_t index = 0;
  // Each element of traceEvents is read when its object ends and then discarded (return false).
  const json::parser_callback_t keep = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth > kMaxDepth) {
      throw InputError(name, "", "nested more than " + std::to_string(kMaxDepth) + " levels deep (a trace is 4 or 5)");
    }
    if (depth == 1 && ev == json::parse_event_t::key) {
      in_events = parsed.is_string() && parsed.get<std::string>() == "traceEvents";
      saw_events = saw_events || in_events;
      return true;
    }
    if (in_events && depth == 1 && ev == json::parse_event_t::object_start) {
      throw InputError(name, "/traceEvents", "must be an array");
    }
    if (!in_events || depth != 2) return true;
    if (ev == json::parse_event_t::object_end || ev == json::parse_event_t::value ||
        ev == json::parse_event_t::array_end) {
      reader.take(parsed, index++);
      ++t.num_events;
      return false;
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), keep);
  } catch (const json::parse_error& e) {
    auto [line, column] = line_column(text, e.byte == 0 ? 0 : e.byte - 1);
    std::string why = e.what();
    if (auto colon = why.find(": ", why.find("column")); colon != std::string::npos) why = why.substr(colon + 2);
    if (why.size() > 160) why = why.substr(0, 157) + "...";
    throw InputError(name, "", "invalid JSON at line " + std::to_string(line) + ", column " + std::to_string(column) +
                                   ": " + why);
  } catch (const json::out_of_range& e) {
    // A number literal beyond a double (1e400): nlohmann's 406.
    throw InputError(name, in_events ? "/traceEvents/" + std::to_string(index) : "",
                     "a number beyond the range of a double (about 1.8e308)");
  } catch (const json::exception& e) {
    throw InputError(name, "", std::string("unreadable JSON: ") + e.what());
  }
  if (!root.is_object()) throw InputError(name, "", "must be a JSON object (a Chrome trace with \"traceEvents\")");
  if (!saw_events) throw InputError(name, "/traceEvents", "missing: not a Chrome/Kineto trace");
  if (!root["traceEvents"].is_array()) throw InputError(name, "/traceEvents", "must be an array");
  if (auto d = root.find("distributedInfo"); d != root.end() && d->is_object() && d->contains("rank")) {
    if (!(*d)["rank"].is_number_integer() || (*d)["rank"].get<int64_t>() < 0) {
      throw InputError(name, "/distributedInfo/rank", "must be a non-negative integer");
    }
    t.rank = (*d)["rank"].get<int64_t>();
  }

  // One device: the lowest id that ran kernels.
  if (t.kernels.empty()) {
    throw InputError(name, "/traceEvents",
                     "holds no GPU kernels (was the profiler run with ProfilerActivity.CUDA, and did the GPU work "
                     "fall inside its active steps?)");
  }
  std::vector<int64_t> devices;
  for (const TraceKernel& k : t.kernels) devices.push_back(k.device);
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  t.device = devices.front();
  t.num_devices_seen = static_cast<int64_t>(devices.size());
  std::erase_if(t.kernels, [&](const TraceKernel& k) { return k.device != t.device; });
  std::erase_if(t.memory, [&](const AllocatorSample& m) { return m.device != t.device; });
  auto by_start = [](const auto& a, const auto& b) { return a.ts_us != b.ts_us ? a.ts_us < b.ts_us : a.event < b.event; };
  std::sort(t.kernels.begin(), t.kernels.end(), by_start);
  std::sort(t.steps.begin(), t.steps.end(), by_start);
  std::stable_sort(t.memory.begin(), t.memory.end(), [](const auto& a, const auto& b) { return a.ts_us < b.ts_us; });
  return t;
}

KinetoTrace read_kineto_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the trace file");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string data = std::move(ss).str();
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b) {
    data = gunzip(data, path);
  }
  return parse_kineto_trace(data, path);
}

}  // namespace moesim
