// SPDX-License-Identifier: MIT
#include "core/output_file.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/error.hpp"

namespace moesim {

void write_file_atomically(const std::string& path, std::string_view text, const std::string& flag) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  // Appended piece by piece: g++ 12 at -O3 reports a false -Wrestrict on a chain of string `+`.
  std::string name = ".";
  name += target.filename().string();
  name += ".tmp";
  name += std::to_string(::getpid());
  const fs::path temp = target.parent_path() / name;
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(flag, "", "cannot write '" + path + "'");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      throw InputError(flag, "", "cannot write '" + path + "' (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(temp, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw InputError(flag, "", "cannot write '" + path + "': " + ec.message());
  }
}

}  // namespace moesim
