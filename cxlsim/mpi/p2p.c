/* p2p.c: point-to-point calls, passed to PMPI unchanged and traced (trace.c) when
 * CXLSIM_MPI_TRACE is set: MPI_Send, MPI_Recv, MPI_Isend, MPI_Irecv, MPI_Wait, MPI_Waitall,
 * MPI_Sendrecv, and the large-count _c forms of those that have one (mpi4py 4 calls those).
 * Sizes are bytes; peers are ranks of the call's communicator. */
#include "cxlsim_mpi.h"

static unsigned long long bytes_of(MPI_Count count, MPI_Datatype type)
{
    MPI_Count size = 0;
    if (count <= 0 || type == MPI_DATATYPE_NULL) return 0;
    PMPI_Type_size_c(type, &size);
    return (unsigned long long)(count * size);
}

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Send(buf, count, type, dest, tag, comm);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Send(buf, count, type, dest, tag, comm);
    cxlsim_trace_line(t, "send %d %llu", dest, bytes_of(count, type));
    return rc;
}

int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    if (!cxlsim_trace_on()) return PMPI_Recv(buf, count, type, source, tag, comm, status);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Recv(buf, count, type, source, tag, comm, status);
    cxlsim_trace_line(t, "recv %d %llu", source, bytes_of(count, type));
    return rc;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request *req)
{
    if (!cxlsim_trace_on()) return PMPI_Isend(buf, count, type, dest, tag, comm, req);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Isend(buf, count, type, dest, tag, comm, req);
    cxlsim_trace_line(t, "isend %d %llu", dest, bytes_of(count, type));
    return rc;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request *req)
{
    if (!cxlsim_trace_on()) return PMPI_Irecv(buf, count, type, source, tag, comm, req);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Irecv(buf, count, type, source, tag, comm, req);
    cxlsim_trace_line(t, "irecv %d %llu", source, bytes_of(count, type));
    return rc;
}

int MPI_Wait(MPI_Request *req, MPI_Status *status)
{
    if (!cxlsim_trace_on()) return PMPI_Wait(req, status);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Wait(req, status);
    cxlsim_trace_line(t, "wait");
    return rc;
}

int MPI_Waitall(int count, MPI_Request reqs[], MPI_Status statuses[])
{
    if (!cxlsim_trace_on()) return PMPI_Waitall(count, reqs, statuses);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Waitall(count, reqs, statuses);
    cxlsim_trace_line(t, "waitall %d", count);
    return rc;
}

int MPI_Sendrecv(const void *sendbuf, int scount, MPI_Datatype stype, int dest, int stag, void *recvbuf, int rcount,
                 MPI_Datatype rtype, int source, int rtag, MPI_Comm comm, MPI_Status *status)
{
    if (!cxlsim_trace_on())
        return PMPI_Sendrecv(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, status);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Sendrecv(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, status);
    cxlsim_trace_line(t, "sendrecv %llu %d %llu %d", bytes_of(scount, stype), dest, bytes_of(rcount, rtype), source);
    return rc;
}

int MPI_Send_c(const void *buf, MPI_Count count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Send_c(buf, count, type, dest, tag, comm);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Send_c(buf, count, type, dest, tag, comm);
    cxlsim_trace_line(t, "send %d %llu", dest, bytes_of(count, type));
    return rc;
}

int MPI_Recv_c(void *buf, MPI_Count count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    if (!cxlsim_trace_on()) return PMPI_Recv_c(buf, count, type, source, tag, comm, status);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Recv_c(buf, count, type, source, tag, comm, status);
    cxlsim_trace_line(t, "recv %d %llu", source, bytes_of(count, type));
    return rc;
}

int MPI_Isend_c(const void *buf, MPI_Count count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                MPI_Request *req)
{
    if (!cxlsim_trace_on()) return PMPI_Isend_c(buf, count, type, dest, tag, comm, req);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Isend_c(buf, count, type, dest, tag, comm, req);
    cxlsim_trace_line(t, "isend %d %llu", dest, bytes_of(count, type));
    return rc;
}

int MPI_Irecv_c(void *buf, MPI_Count count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request *req)
{
    if (!cxlsim_trace_on()) return PMPI_Irecv_c(buf, count, type, source, tag, comm, req);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Irecv_c(buf, count, type, source, tag, comm, req);
    cxlsim_trace_line(t, "irecv %d %llu", source, bytes_of(count, type));
    return rc;
}

int MPI_Sendrecv_c(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, int dest, int stag, void *recvbuf,
                   MPI_Count rcount, MPI_Datatype rtype, int source, int rtag, MPI_Comm comm, MPI_Status *status)
{
    if (!cxlsim_trace_on())
        return PMPI_Sendrecv_c(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, status);
    double t = cxlsim_trace_begin();
    int rc = PMPI_Sendrecv_c(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, status);
    cxlsim_trace_line(t, "sendrecv %llu %d %llu %d", bytes_of(scount, stype), dest, bytes_of(rcount, rtype), source);
    return rc;
}
