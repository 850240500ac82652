// SPDX-License-Identifier: MIT
#include "core/json_input.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/embedded.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"

namespace moesim {
namespace fs = std::filesystem;

namespace {

bool is_bare_name(std::string_view ref) {
  return ref.find('/') == std::string_view::npos && !ref.ends_with(".json");
}

std::optional<InputText> read_embedded(const std::string& path) {
  if (auto text = find_embedded(path)) return InputText{path, std::string(*text), true};
  return std::nullopt;
}

std::optional<InputText> read_disk(const fs::path& path, const std::string& name) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(name, "", "cannot open for reading");
  std::ostringstream buf;
  buf << in.rdbuf();
  return InputText{name, buf.str(), false};
}

// Line and column (both 1-based) of a byte offset.
std::pair<size_t, size_t> line_column(std::string_view text, size_t offset) {
  size_t line = 1;
  size_t column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// Tracks the JSON path while nlohmann's parser walks the document, to reject duplicate keys
// (nlohmann keeps the last one silently) and nesting deeper than limits::kMaxJsonDepth (every later
// walk of the tree - dump, copy, the readers - recurses), and to name the path of a value the
// parser itself refuses (a number beyond a double).
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(const std::string& file) : file_(file) {}

  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        step_into_array_element();
        if (frames_.size() >= static_cast<size_t>(limits::kMaxJsonDepth)) {
          throw InputError(file_, current_path(),
                           "nested more than " + std::to_string(limits::kMaxJsonDepth) +
                               " levels deep (the limit on objects and arrays within each other)");
        }
        frames_.push_back(Frame{event == Event::array_start, {}, -1, {}});
        break;
      case Event::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) {
          throw InputError(file_, current_path(), "duplicate key '" + top.key + "'");
        }
        break;
      }
      case Event::value:
        step_into_array_element();
        break;
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        break;
    }
    return true;
  }

  // The path of the value being read now (the parser failed inside it): the element after the
  // last one read in an array, the last key in an object.
  std::string pending_path() const {
    std::string path;
    for (const auto& f : frames_) {
      path = f.is_array ? path + "/" + std::to_string(f.index + (&f == &frames_.back() ? 1 : 0))
                        : pointer_append(path, f.key);
    }
    return path.empty() ? "/" : path;
  }

 private:
  struct Frame {
    bool is_array;
    std::set<std::string> keys;
    int64_t index;
    std::string key;
  };

  void step_into_array_element() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
  }

  std::string current_path() const {
    std::string path;
    for (const auto& f : frames_) {
      path = f.is_array ? path + "/" + std::to_string(f.index) : pointer_append(path, f.key);
    }
    return path;
  }

  const std::string& file_;
  std::vector<Frame> frames_;
};

}  // namespace

InputText read_input(std::string_view ref, std::string_view folder, std::string_view what) {
  const std::string ref_s(ref);
  if (auto disk = read_disk(fs::path(ref_s), ref_s)) return *disk;
  if (is_bare_name(ref)) {
    if (auto shipped = read_embedded(std::string(folder) + "/" + ref_s + ".json")) return *shipped;
    // The GPU calibration scenarios are called by name too ("k3-slice-2gpu"); only scenarios: a
    // bare hardware name must never find a calibration table (hardware/calibration/).
    if (folder == "scenarios") {
      if (auto shipped = read_embedded(std::string(folder) + "/calibration/" + ref_s + ".json")) return *shipped;
    }
  } else if (auto shipped = read_embedded(fs::path(ref_s).lexically_normal().generic_string())) {
    return *shipped;
  }
  std::string known;
  for (const auto& f : embedded_files()) {
    if (f.path.starts_with(std::string(folder) + "/")) {
      std::string_view name = f.path.substr(folder.size() + 1);
      if (folder == "scenarios" && name.starts_with("calibration/")) name.remove_prefix(12);
      if (name.ends_with(".json") && name.find('/') == std::string_view::npos) {
        known += (known.empty() ? "" : ", ") + std::string(name.substr(0, name.size() - 5));
      }
    }
  }
  throw InputError(std::string(what), "",
                   "'" + ref_s + "' is neither a file nor a shipped " + std::string(folder) +
                       " name (shipped: " + known + ")");
}

InputText read_referenced(const InputText& from, std::string_view key_path, std::string_view ref,
                          std::string_view folder) {
  const std::string ref_s(ref);
  if (is_bare_name(ref)) {
    if (auto shipped = read_embedded(std::string(folder) + "/" + ref_s + ".json")) return *shipped;
    throw InputError(from.name, std::string(key_path),
                     "'" + ref_s + "' is not a shipped " + std::string(folder) + " name; give a path to a .json file");
  }
  const fs::path base = fs::path(from.name).parent_path();
  const std::string resolved = (base / fs::path(ref_s)).lexically_normal().generic_string();
  auto found = from.embedded ? read_embedded(resolved) : read_disk(fs::path(resolved), resolved);
  if (!found) {
    throw InputError(from.name, std::string(key_path), "no such file '" + ref_s + "' (looked for " + resolved + ")");
  }
  return *found;
}

nlohmann::json parse_json(const InputText& input) {
  DuplicateKeyCheck check(input.name);
  try {
    return nlohmann::json::parse(input.text, std::ref(check));
  } catch (const nlohmann::json::parse_error& e) {
    auto [line, column] = line_column(input.text, e.byte == 0 ? 0 : e.byte - 1);
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at line L, column C: why".
    std::string why = e.what();
    if (auto colon = why.find(": ", why.find("column")); colon != std::string::npos) why = why.substr(colon + 2);
    // nlohmann quotes everything it read of an unfinished token; keep the message one short line.
    if (auto last = why.find("; last read: '"); last != std::string::npos && why.size() - last > 60) {
      why = why.substr(0, last + 14) + "..." + why.substr(why.size() - 21);
    }
    throw InputError(input.name, "",
                     "invalid JSON at line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + why);
  } catch (const nlohmann::json::out_of_range& e) {
    // A number literal beyond a double (1e400): nlohmann's 406, "number overflow parsing '1e400'".
    std::string why = e.what();
    if (auto q = why.find("parsing '"); q != std::string::npos) why = why.substr(q + 9, why.size() - q - 10);
    if (why.size() > 40) why = why.substr(0, 37) + "...";
    throw InputError(input.name, check.pending_path(),
                     "the number " + why + " is beyond the range of a double (about 1.8e308)");
  } catch (const nlohmann::json::exception& e) {
    throw InputError(input.name, check.pending_path(), std::string("unreadable JSON: ") + e.what());
  }
}

std::string pointer_append(std::string_view pointer, std::string_view key) {
  std::string out(pointer);
  out += '/';
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace moesim
