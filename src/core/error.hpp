// SPDX-License-Identifier: MIT
// Typed errors. InputError is bad user input (exit code 2), always naming the file and the JSON
// path; everything else that escapes to src/app is an internal error (exit code 1).
#pragma once

#include <stdexcept>
#include <string>

namespace moesim {

class InputError : public std::runtime_error {
 public:
  // file: where the input came from ("models/x.json", "--seq"); path: a JSON pointer ("/moe/top_k"),
  // empty when the error concerns the whole file.
  InputError(std::string file, std::string path, const std::string& message)
      : std::runtime_error(compose(file, path, message)),
        file_(std::move(file)),
        path_(std::move(path)),
        message_(message) {}

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const std::string& message() const { return message_; }

 private:
  static std::string compose(const std::string& file, const std::string& path, const std::string& message) {
    std::string out = file;
    if (!path.empty()) out += ": " + path;
    return out + ": " + message;
  }

  std::string file_;
  std::string path_;
  std::string message_;
};

// A bad value for a value-level parser (units, layer sets) that does not know where the value came
// from; the field reader rethrows it as an InputError with file and path.
class ValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace moesim
