// SPDX-License-Identifier: MIT
// An output file written piece by piece that still never exists half-written: the pieces go to
// a temporary file beside the target (named as core/output_file names it), renamed over the
// target by commit(); destroyed without commit, the temporary file is removed. For outputs too
// large to hold (a sweep's CSV); core/output_file's write_file_atomically is the one-shot form.
#pragma once

#include <fstream>
#include <string>
#include <string_view>

namespace moesim {

class StreamedFile {
 public:
  // Throws InputError naming `flag` when the file cannot be created.
  StreamedFile(std::string path, std::string flag);
  ~StreamedFile();
  StreamedFile(const StreamedFile&) = delete;
  StreamedFile& operator=(const StreamedFile&) = delete;

  void write(std::string_view text);
  // Throws InputError naming the flag when writing failed (disk full) or the rename fails.
  void commit();

 private:
  std::string path_;
  std::string flag_;
  std::string temp_;
  std::ofstream out_;
  bool committed_ = false;
};

}  // namespace moesim
