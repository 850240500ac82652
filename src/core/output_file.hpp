// SPDX-License-Identifier: MIT
// Writing an output file without ever leaving a half-written one: the text goes to a temporary
// file beside the target, which is renamed over it only once complete.
#pragma once

#include <string>
#include <string_view>

namespace moesim {

// Throws InputError naming `flag` (the option that named the file) when it cannot be written.
void write_file_atomically(const std::string& path, std::string_view text, const std::string& flag);

}  // namespace moesim
