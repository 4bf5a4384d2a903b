/* rooted.c: MPI_Reduce, MPI_Gather and MPI_Scatter (and their large-count _c forms), passed to PMPI
 * unchanged (they do not run on the pool) and traced (trace.c) when CXLSIM_MPI_TRACE is set, in
 * SimGrid's time-independent format with bytes as counts and world ranks as roots:
 *
 *   reduce BYTES 0 ROOT             the vector's bytes; 0: the reduction's time is in the trace
 *   gather BLOCK BLOCK ROOT         every rank's block (at an MPI_IN_PLACE root, its recvcount's)
 *   scatter BLOCK BLOCK ROOT        every rank's block (at an MPI_IN_PLACE root, its sendcount's)
 *
 * so every rank writes the same line, as `cxlsim replay` requires of a collective. */
#include "cxlsim_mpi.h"

static unsigned long long bytes(MPI_Count count, MPI_Datatype type)
{
    MPI_Count size = 0;
    if (count <= 0 || type == MPI_DATATYPE_NULL) return 0;
    PMPI_Type_size_c(type, &size);
    return (unsigned long long)(count * size);
}

static int traced_reduce(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype type, MPI_Op op,
                         int root, MPI_Comm comm, int large)
{
    double t = cxlsim_trace_begin();
    int rc = large ? PMPI_Reduce_c(sendbuf, recvbuf, count, type, op, root, comm)
                   : PMPI_Reduce(sendbuf, recvbuf, (int)count, type, op, root, comm);
    cxlsim_trace_line(t, "reduce %llu 0 %d", bytes(count, type), cxlsim_trace_world_rank(comm, root));
    return rc;
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
    return traced_reduce(sendbuf, recvbuf, count, type, op, root, comm, 0);
}

int MPI_Reduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype type, MPI_Op op, int root,
                 MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Reduce_c(sendbuf, recvbuf, count, type, op, root, comm);
    return traced_reduce(sendbuf, recvbuf, count, type, op, root, comm, 1);
}

static int is_root(MPI_Comm comm, int root)
{
    int rank;
    PMPI_Comm_rank(comm, &rank);
    return rank == root;
}

static int traced_gather(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, void *recvbuf, MPI_Count rcount,
                         MPI_Datatype rtype, int root, MPI_Comm comm, int large)
{
    double t = cxlsim_trace_begin();
    int rc = large ? PMPI_Gather_c(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm)
                   : PMPI_Gather(sendbuf, (int)scount, stype, recvbuf, (int)rcount, rtype, root, comm);
    unsigned long long block = sendbuf == MPI_IN_PLACE && is_root(comm, root) ? bytes(rcount, rtype)
                                                                              : bytes(scount, stype);
    cxlsim_trace_line(t, "gather %llu %llu %d", block, block, cxlsim_trace_world_rank(comm, root));
    return rc;
}

int MPI_Gather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype,
               int root, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Gather(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm);
    return traced_gather(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm, 0);
}

int MPI_Gather_c(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, void *recvbuf, MPI_Count rcount,
                 MPI_Datatype rtype, int root, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Gather_c(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm);
    return traced_gather(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm, 1);
}

static int traced_scatter(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, void *recvbuf, MPI_Count rcount,
                          MPI_Datatype rtype, int root, MPI_Comm comm, int large)
{
    double t = cxlsim_trace_begin();
    int rc = large ? PMPI_Scatter_c(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm)
                   : PMPI_Scatter(sendbuf, (int)scount, stype, recvbuf, (int)rcount, rtype, root, comm);
    unsigned long long block = recvbuf == MPI_IN_PLACE && is_root(comm, root) ? bytes(scount, stype)
                                                                              : bytes(rcount, rtype);
    cxlsim_trace_line(t, "scatter %llu %llu %d", block, block, cxlsim_trace_world_rank(comm, root));
    return rc;
}

int MPI_Scatter(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype,
                int root, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Scatter(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm);
    return traced_scatter(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm, 0);
}

int MPI_Scatter_c(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, void *recvbuf, MPI_Count rcount,
                  MPI_Datatype rtype, int root, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Scatter_c(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm);
    return traced_scatter(sendbuf, scount, stype, recvbuf, rcount, rtype, root, comm, 1);
}
