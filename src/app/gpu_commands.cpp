// SPDX-License-Identifier: MIT
#include "app/gpu_commands.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <stdexcept>

namespace moesim {

const GpuCommands& gpu_commands() {
  static const GpuCommands* loaded = [] {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    const std::string path = (ec ? std::filesystem::path(".") : exe.parent_path()) / MOESIM_GPU_MODULE;
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      const char* why = dlerror();
      throw std::runtime_error("cannot load the GPU commands from " + path + ": " + (why ? why : "unknown error"));
    }
    using Entry = const GpuCommands* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(module, kGpuCommandsSymbol));
    if (entry == nullptr) throw std::runtime_error(path + " has no entry point " + kGpuCommandsSymbol);
    const GpuCommands* commands = entry();
    if (commands->abi != kGpuCommandsAbi) {
      throw std::runtime_error(path + " is from another build (interface " + std::to_string(commands->abi) +
                               ", this binary expects " + std::to_string(kGpuCommandsAbi) + ")");
    }
    return commands;
  }();
  return *loaded;
}

}  // namespace moesim
