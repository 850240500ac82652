#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One rank per process on a machine without GPUs: test_backend_rank_bootstrap (bootstrap, GPU
mapping, result gathering; tests/backend/test_rank_bootstrap.cpp) as one process, then under
`mpirun -np 2, 3, 4`; with the CUDA module, `mpirun moesim run|validate|calibrate` end to end up to
the first GPU call: a plan whose rank count is not the job's, and no GPU for the processes, are
input errors (exit 2) that process 0 alone reports, every process ending normally. The MPI runs are left out (the single process
still runs) when moesim was built without MPI or mpirun is missing.

usage: ranks_mpi_test.py TEST_EXE BUILD/moesim mpi|no-mpi cuda|no-cuda   (from the project root)
"""
import os
import shutil
import subprocess
import sys

TEST, MOESIM, BUILT_MPI, BUILT_CUDA = sys.argv[1:5]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
failures = []


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


def run(args, timeout=240):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(args, 124, e.stdout or "", f"timed out after {timeout} s")


single = run([TEST])
expect("one process", single.returncode == 0, single.stdout + single.stderr)
mpi = BUILT_MPI == "mpi" and shutil.which("mpirun") is not None
if mpi:
    for n in (2, 3, 4):
        r = run(["mpirun", "-np", str(n), "--oversubscribe", TEST])
        expect(f"{n} processes", r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:])
    if BUILT_CUDA == "cuda" and not os.path.exists("/dev/nvidia0"):
        two = "scenarios/calibration/k3-slice-2gpu.json"
        r = run(["mpirun", "-np", "3", "--oversubscribe", MOESIM, "run", two])
        expect("3 processes for a 2-rank plan: exit 2", r.returncode == 2, r.stdout + r.stderr)
        msg = "the plan has 2 rank(s) but the job has 3 process(es)"
        expect("... said once, by process 0", r.stderr.count(msg) == 1, r.stderr)
        expect("... every process ends normally (no MPI_Abort)", "MPI_ABORT" not in r.stderr, r.stderr)
        r = run(["mpirun", "-np", "2", "--oversubscribe", MOESIM, "validate", two])
        expect("2 processes, no GPU: exit 2", r.returncode == 2, r.stdout + r.stderr)
        msg = "runs 2 process(es) but 0 GPU(s) are visible"
        expect("... said once, by process 0", r.stderr.count(msg) == 1, r.stderr)
        expect("... nothing on stdout", r.stdout == "", r.stdout)
        r = run(["mpirun", "-np", "2", "--oversubscribe", MOESIM, "calibrate", "--quick"])
        expect("calibrate without a GPU: exit 2", r.returncode == 2, r.stdout + r.stderr)
        # One process started by mpirun takes the per-process path too, and refuses the same way.
        r = run(["mpirun", "-np", "1", MOESIM, "run", two])
        expect("mpirun -np 1 for a 2-rank plan: exit 2", r.returncode == 2, r.stdout + r.stderr)
        expect("... names the job", "the job has 1 process(es)" in r.stderr, r.stderr)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("one rank per process: bootstrap and gathering checked" + (" over 1-4 MPI processes" if mpi else " in one process"))
