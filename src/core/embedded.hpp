// SPDX-License-Identifier: MIT
// The input files shipped inside the binary (models/, hardware/, scenarios/), so that
// `moesim simulate` and `moesim model info kimi-k3` work from any folder. Generated at build time
// by tools/embed.py.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace moesim {

struct EmbeddedFile {
  std::string_view path;  // relative to the project root: "models/kimi-k3.json"
  std::string_view text;
};

std::span<const EmbeddedFile> embedded_files();
std::optional<std::string_view> find_embedded(std::string_view path);

}  // namespace moesim
