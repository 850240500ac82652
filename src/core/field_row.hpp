// SPDX-License-Identifier: MIT
// One row of the input reference (`moesim describe`, docs/inputs.md).
#pragma once

#include <string>
#include <vector>

namespace moesim {

struct FieldRow {
  std::string path;           // JSON pointer; "*" stands for any array index
  std::string type;           // "integer > 0", "bytes/s", "one of mla | kda", "object", ...
  std::string default_value;  // empty: required; "absent": optional without a default
  std::string doc;
};

// A Markdown table of the rows.
std::string rows_to_markdown(const std::vector<FieldRow>& rows);

}  // namespace moesim
