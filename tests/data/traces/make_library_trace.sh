#!/bin/sh
# Re-make the committed interposition-library trace library/ (the test suite does not need MPI):
# halo_timed.c under MPICH at np=2 with libcxlsim_mpi.so preloaded and CXLSIM_MPI_TRACE set
# (`cxlsim mpi run --trace`), which writes library/rank0.txt, rank1.txt and trace.meta.json in
# SimGrid's time-independent format. The program prints its own wall time (first barrier to last).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
mpicc -O0 -o "$build/halo_timed" "$here/src/halo_timed.c"
rm -rf "$here/library"
python -m cxlsim mpi run --trace "$here/library" -- mpiexec -n 2 "$build/halo_timed"
