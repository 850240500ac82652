// SPDX-License-Identifier: MIT
// Spreading a sweep over processes. With MPI (built with -Dmpi=enabled and launched by mpirun),
// each process evaluates its share of the configurations and rank 0 gathers them; otherwise there
// is one process. All MPI calls live in distributed_mpi.cpp; a build without MPI links
// distributed_single.cpp instead, so nothing else knows whether MPI exists.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace moesim {

class Distributed {
 public:
  virtual ~Distributed() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: every process passes its bytes; rank 0 gets every process's, in rank order;
  // the others get nothing.
  virtual std::vector<std::string> gather(const std::string& bytes) = 0;
  // Ends every process of the job (after an error on one of them, so that none waits forever).
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

// Whether this binary was built with MPI.
bool built_with_mpi();
// MPI when built with it and launched by mpirun (which sets OMPI_COMM_WORLD_SIZE or PMI_SIZE);
// otherwise a single process. MPI is finalised when the object is destroyed.
std::unique_ptr<Distributed> start_distributed();
// Always a single process (tests, library use).
std::unique_ptr<Distributed> single_process();

}  // namespace moesim
