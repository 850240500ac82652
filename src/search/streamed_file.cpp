// SPDX-License-Identifier: MIT
#include "search/streamed_file.hpp"

#include <filesystem>

#include <unistd.h>

#include "core/error.hpp"

namespace moesim {

StreamedFile::StreamedFile(std::string path, std::string flag) : path_(std::move(path)), flag_(std::move(flag)) {
  const std::filesystem::path target(path_);
  temp_ = (target.parent_path() / ("." + target.filename().string() + ".tmp" + std::to_string(::getpid()))).string();
  out_.open(temp_, std::ios::binary | std::ios::trunc);
  if (!out_) throw InputError(flag_, "", "cannot write '" + path_ + "'");
}

StreamedFile::~StreamedFile() {
  if (committed_) return;
  out_.close();
  std::error_code ignored;
  std::filesystem::remove(temp_, ignored);
}

void StreamedFile::write(std::string_view text) { out_.write(text.data(), static_cast<std::streamsize>(text.size())); }

void StreamedFile::commit() {
  out_.flush();
  const bool ok = static_cast<bool>(out_);
  out_.close();
  if (!ok) throw InputError(flag_, "", "cannot write '" + path_ + "' (disk full?)");
  std::error_code ec;
  std::filesystem::rename(temp_, path_, ec);
  if (ec) throw InputError(flag_, "", "cannot write '" + path_ + "': " + ec.message());
  committed_ = true;
}

}  // namespace moesim
