// SPDX-License-Identifier: MIT
// The single-process Distributed of builds without MPI.
#include <cstdlib>

#include "search/distributed.hpp"

namespace moesim {
namespace {

class SingleProcess final : public Distributed {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool started_by_launcher() const override { return false; }
  std::vector<std::string> gather(const std::string& bytes) override { return {bytes}; }
  std::vector<std::string> all_gather(const std::string& bytes) override { return {bytes}; }
  void broadcast(std::string&, int) override {}
  void barrier() override {}
  int node_leader() const override { return 0; }
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }
};

}  // namespace

std::unique_ptr<Distributed> single_process() { return std::make_unique<SingleProcess>(); }

#ifndef MOESIM_HAVE_MPI
bool built_with_mpi() { return false; }
std::unique_ptr<Distributed> start_distributed() { return single_process(); }
#endif

}  // namespace moesim
