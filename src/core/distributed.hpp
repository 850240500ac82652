// SPDX-License-Identifier: MIT
// The processes of a job: a sweep spread over them (search/sweep.hpp), the GPU executor and
// calibration with one rank per process (backend/). Only an interface: the MPI implementation is
// search/distributed_mpi.cpp, the one file that calls MPI, and search/distributed.hpp makes one;
// code that takes a Distributed& never knows whether MPI exists, so it is testable with any
// number of processes (or none).
#pragma once

#include <string>
#include <vector>

namespace moesim {

class Distributed {
 public:
  virtual ~Distributed() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether a launcher (mpirun) started this process, even as a job of one.
  virtual bool started_by_launcher() const = 0;
  // Collective: every process passes its bytes; rank 0 gets every process's, in rank order;
  // the others get nothing.
  virtual std::vector<std::string> gather(const std::string& bytes) = 0;
  // Collective: every process gets every process's bytes, in rank order.
  virtual std::vector<std::string> all_gather(const std::string& bytes) = 0;
  // Collective: `bytes` of rank `root` replace every other process's.
  virtual void broadcast(std::string& bytes, int root) = 0;
  // Collective: returns when every process has called it.
  virtual void barrier() = 0;
  // The lowest rank running on this process's node (processes that share memory; MPI:
  // MPI_Comm_split_type with MPI_COMM_TYPE_SHARED). Not collective after construction.
  virtual int node_leader() const = 0;
  // Ends every process of the job (after an error on one of them, so that none waits forever).
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

}  // namespace moesim
