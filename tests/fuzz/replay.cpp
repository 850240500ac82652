// SPDX-License-Identifier: MIT
// Replays the inputs the fuzzers once crashed on (tests/data/fuzz-regressions/TARGET/*, copied
// there by tests/fuzz/run.sh) through the same targets, in every build: a fixed finding stays
// fixed. Exit 0 when each input loads or is refused with an InputError; 1 when one throws anything
// else (a crash or a sanitizer report ends the process, which fails the test as well).
//   replay DIR
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "targets.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: replay DIR (DIR/TARGET/* for each fuzz target)\n");
    return 2;
  }
  const fs::path root = argv[1];
  if (!fs::is_directory(root)) {
    std::fprintf(stderr, "replay: %s is not a directory\n", root.c_str());
    return 1;
  }
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  const auto& names = moesim::fuzz::target_names();
  int num_inputs = 0;
  for (const fs::path& dir : dirs) {
    const std::string target = dir.filename().string();
    if (std::find(names.begin(), names.end(), target) == names.end()) {
      std::fprintf(stderr, "replay: %s names no fuzz target\n", dir.c_str());
      return 1;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      std::ifstream in(file, std::ios::binary);
      std::ostringstream bytes;
      bytes << in.rdbuf();
      try {
        moesim::fuzz::run_target(target, bytes.str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "replay: %s: %s\n", file.c_str(), e.what());
        return 1;
      }
      ++num_inputs;
    }
    std::printf("%s: %zu inputs\n", target.c_str(), files.size());
  }
  std::printf("%d inputs replayed\n", num_inputs);
  return 0;
}
