// SPDX-License-Identifier: MIT
// The one file that calls MPI: a Distributed over MPI_COMM_WORLD.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
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
    // The node: the processes that can share memory with this one; its leader is the lowest
    // world rank among them (the same on every member, so it names the node).
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    check(MPI_Allreduce(&rank_, &node_leader_, 1, MPI_INT, MPI_MIN, node), "MPI_Allreduce");
    check(MPI_Comm_free(&node), "MPI_Comm_free");
  }
  ~MpiProcess() override { MPI_Finalize(); }
  MpiProcess(const MpiProcess&) = delete;
  MpiProcess& operator=(const MpiProcess&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool started_by_launcher() const override { return true; }

  std::vector<std::string> gather(const std::string& bytes) override {
    // Sizes first, then the bytes with MPI_Gatherv (int counts: a sweep round or an executor's
    // timings are far below 2 GiB; checked).
    if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) throw std::runtime_error("MPI: gather of 2 GiB or more");
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
        if (total > std::numeric_limits<int>::max()) throw std::runtime_error("MPI: gather of 2 GiB or more");
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

  std::vector<std::string> all_gather(const std::string& bytes) override {
    std::vector<std::string> all = gather(bytes);
    std::string packed;  // rank 0 packs them as (size, bytes) records, every process unpacks
    for (const std::string& b : all) {
      const uint64_t n = b.size();
      packed.append(reinterpret_cast<const char*>(&n), sizeof n);
      packed += b;
    }
    broadcast(packed, 0);
    all.clear();
    for (size_t at = 0; at < packed.size();) {
      uint64_t n = 0;
      std::memcpy(&n, packed.data() + at, sizeof n);
      all.push_back(packed.substr(at + sizeof n, n));
      at += sizeof n + n;
    }
    return all;
  }

  void broadcast(std::string& bytes, int root) override {
    // The size first, then the bytes (int counts: what is broadcast here is far below 2 GiB).
    uint64_t n = bytes.size();
    if (n > static_cast<uint64_t>(std::numeric_limits<int>::max())) throw std::runtime_error("MPI: broadcast of 2 GiB or more");
    check(MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD), "MPI_Bcast");
    bytes.resize(n);
    check(MPI_Bcast(bytes.data(), static_cast<int>(n), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  int node_leader() const override { return node_leader_; }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  int node_leader_ = 0;
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
