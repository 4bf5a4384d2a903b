"""Unmodified MPI programs on the emulated CXL pool: libcxlsim_mpi.so, a PMPI interposition library.

Its C sources live here (``*.c``, ``*.h``) beside the Python that builds and launches it:
`build` (the library, built with the environment's mpicc into a cache keyed by the sources
and the MPI), `settings` (the CXLSIM_MPI_* variables it reads) and `cli` (`cxlsim mpi build`,
`cxlsim mpi run`). docs/mpi.md is the manual.
"""
