// SPDX-License-Identifier: MIT
// The one file that calls MPI: a Distributed over MPI_COMM_WORLD.
#include <cstdlib>
#include <stdexcept>

#include <mpi.h>

#include "search/distributed.hpp"

namespace moesim {
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed");
}

class MpiProcess final : public Distributed {
 public:
  MpiProcess() {
    check(MPI_Init(nullptr, nullptr), "MPI_Init");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  ~MpiProcess() override { MPI_Finalize(); }
  MpiProcess(const MpiProcess&) = delete;
  MpiProcess& operator=(const MpiProcess&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> gather(const std::string& bytes) override {
    // Sizes first, then the bytes with MPI_Gatherv (int counts: a round is far below 2 GiB).
    const int count = static_cast<int>(bytes.size());
    std::vector<int> counts(rank_ == 0 ? static_cast<size_t>(size_) : 0);
    check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
    std::vector<int> offsets(counts.size(), 0);
    std::string all;
    if (rank_ == 0) {
      long long total = 0;
      for (size_t r = 0; r < counts.size(); ++r) {
        offsets[r] = static_cast<int>(total);
        total += counts[r];
      }
      all.resize(static_cast<size_t>(total));
    }
    check(MPI_Gatherv(bytes.data(), count, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, 0,
                      MPI_COMM_WORLD),
          "MPI_Gatherv");
    std::vector<std::string> out;
    for (size_t r = 0; r < counts.size(); ++r)
      out.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(counts[r])));
    return out;
  }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

bool built_with_mpi() { return true; }

std::unique_ptr<Distributed> start_distributed() {
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
                        std::getenv("PMIX_RANK") != nullptr;
  if (!launched) return single_process();
  return std::make_unique<MpiProcess>();
}

}  // namespace moesim
