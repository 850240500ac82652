// SPDX-License-Identifier: MIT
// Reading input files: from disk, or from the copies of models/, hardware/ and scenarios/ that are
// embedded in the binary, into a JSON tree. Invalid JSON, truncated files and duplicate keys are
// InputErrors with line and column (or JSON path); nothing is silently dropped.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace moesim {

struct InputText {
  std::string name;  // how messages name it: the path as given, or "models/x.json" when embedded
  std::string text;
  bool embedded = false;
};

// A file named on the command line: a path on disk, or else the name of a shipped input in
// `folder` ("kimi-k3" -> models/kimi-k3.json, embedded in the binary). `what` names the argument in
// the error when neither exists ("MODEL").
InputText read_input(std::string_view ref, std::string_view folder, std::string_view what);

// A file named inside another input (a scenario's "model"): a path relative to the naming file's
// folder, in the same store (disk or embedded); or the bare name of a shipped input in `folder`.
// `key_path` is the JSON path of the reference, for the error.
InputText read_referenced(const InputText& from, std::string_view key_path, std::string_view ref,
                          std::string_view folder);

// Parses JSON text. Errors name the file with line and column; duplicate keys name the JSON path.
nlohmann::json parse_json(const InputText& input);

// Appends a key to a JSON pointer, escaping '~' and '/' (RFC 6901).
std::string pointer_append(std::string_view pointer, std::string_view key);

}  // namespace moesim
