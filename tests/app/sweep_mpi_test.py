#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`mpirun -np 2 moesim sweep` gives the single-process result: the CSV byte for byte, the JSON and
the text report byte for byte but for the wall time (skipped with exit code 77 when moesim was built
without MPI or mpirun is missing).

usage: sweep_mpi_test.py BUILD/moesim mpi|no-mpi   (run from the project root)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

MOESIM, BUILT = sys.argv[1], sys.argv[2]
SMALL = "tests/data/sweep-small.json"
if BUILT != "mpi" or shutil.which("mpirun") is None:
    print("skipped: moesim was built without MPI (or mpirun is missing)")
    sys.exit(77)

env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
failures = []


def expect(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


with tempfile.TemporaryDirectory() as tmp:
    single_csv = os.path.join(tmp, "single.csv")
    mpi_csv = os.path.join(tmp, "mpi.csv")
    single = subprocess.run([MOESIM, "sweep", SMALL, "--json", "--threads", "1", "--csv", single_csv],
                            capture_output=True, text=True, timeout=120)
    mpi = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", MOESIM, "sweep", SMALL, "--json", "--threads", "1",
                          "--csv", mpi_csv], capture_output=True, text=True, timeout=240, env=env)
    expect("single exit 0", single.returncode == 0, single.stderr)
    expect("mpirun exit 0", mpi.returncode == 0, mpi.stdout + mpi.stderr)
    if single.returncode == 0 and mpi.returncode == 0:
        with open(single_csv, "rb") as a, open(mpi_csv, "rb") as b:
            expect("CSV byte-identical", a.read() == b.read())
        json.loads(mpi.stdout)  # one JSON document: only rank 0 prints
        no_wall = lambda text: [l for l in text.splitlines() if not l.lstrip().startswith('"wall_s"')]
        expect("JSON byte-identical but for wall_s", no_wall(single.stdout) == no_wall(mpi.stdout))
        # The text report likewise, but for its wall line.
        t1 = subprocess.run([MOESIM, "sweep", SMALL, "--threads", "1"], capture_output=True, text=True, timeout=120)
        t2 = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", MOESIM, "sweep", SMALL, "--threads", "1"],
                            capture_output=True, text=True, timeout=240, env=env)
        strip = lambda t: [l for l in t.splitlines() if not l.startswith("wall ")]
        expect("text identical but for the wall line", t2.returncode == 0 and strip(t1.stdout) == strip(t2.stdout),
               t2.stderr)
        expect("the wall line says 2 processes", "x 2 process(es)" in t2.stdout, t2.stdout)
    expect("no temporary files left", sorted(os.listdir(tmp)) == ["mpi.csv", "single.csv"], os.listdir(tmp))

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("sweep over 2 MPI ranks: identical to the single process")
