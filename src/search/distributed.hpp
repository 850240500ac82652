// SPDX-License-Identifier: MIT
// The processes of a job (core/distributed.hpp): with MPI (built with -Dmpi=enabled and launched
// by mpirun) one per MPI rank, otherwise one. A sweep gives each process its share of the
// configurations; the GPU commands give each one rank of the plan. All MPI calls live in
// distributed_mpi.cpp; a build without MPI links distributed_single.cpp instead, so nothing else
// knows whether MPI exists.
#pragma once

#include <memory>

#include "core/distributed.hpp"  // the interface

namespace moesim {

// Whether this binary was built with MPI.
bool built_with_mpi();
// MPI when built with it and launched by mpirun (which sets OMPI_COMM_WORLD_SIZE or PMI_SIZE);
// otherwise a single process. MPI is finalised when the object is destroyed.
std::unique_ptr<Distributed> start_distributed();
// Always a single process (tests, library use).
std::unique_ptr<Distributed> single_process();

}  // namespace moesim
