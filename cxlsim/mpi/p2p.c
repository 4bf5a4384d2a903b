/* p2p.c: point-to-point calls, passed to PMPI unchanged and traced (trace.c) when
 * CXLSIM_MPI_TRACE is set: MPI_Send, MPI_Recv, MPI_Isend, MPI_Irecv, MPI_Sendrecv and their
 * large-count _c forms (mpi4py 4 calls those), and the completion calls MPI_Wait, Waitall,
 * Waitany, Waitsome, Test, Testall, Testany and Testsome: each request one of them completes
 * is written as a `wait` line (trace.c). Sizes are bytes, peers world ranks, in SimGrid's
 * time-independent format. */
#include <string.h>

#include "cxlsim_mpi.h"

enum { SIMGRID_ANY_SOURCE = -333, SIMGRID_ANY_TAG = -444 };

static unsigned long long bytes_of(MPI_Count count, MPI_Datatype type)
{
    MPI_Count size = 0;
    if (count <= 0 || type == MPI_DATATYPE_NULL) return 0;
    PMPI_Type_size_c(type, &size);
    return (unsigned long long)(count * size);
}

static int me(void)
{
    int rank;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

static int peer(MPI_Comm comm, int rank)
{
    return rank == MPI_ANY_SOURCE ? SIMGRID_ANY_SOURCE : cxlsim_trace_world_rank(comm, rank);
}

void cxlsim_trace_send(double t, int blocking, MPI_Count count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                       const MPI_Request *req)
{
    int dst = peer(comm, dest);
    if (!blocking) cxlsim_trace_request_posted(*req, me(), dst, tag);
    cxlsim_trace_line(t, "%s %d %d %llu", blocking ? "send" : "isend", dst, tag, bytes_of(count, type));
}

static int traced_send(int blocking, const void *buf, MPI_Count count, MPI_Datatype type, int dest, int tag,
                       MPI_Comm comm, MPI_Request *req, int large)
{
    double t = cxlsim_trace_begin();
    int rc;
    if (blocking) rc = large ? PMPI_Send_c(buf, count, type, dest, tag, comm) : PMPI_Send(buf, (int)count, type, dest, tag, comm);
    else rc = large ? PMPI_Isend_c(buf, count, type, dest, tag, comm, req)
                    : PMPI_Isend(buf, (int)count, type, dest, tag, comm, req);
    cxlsim_trace_send(t, blocking, count, type, dest, tag, comm, req);
    return rc;
}

static int traced_recv(int blocking, void *buf, MPI_Count count, MPI_Datatype type, int source, int tag,
                       MPI_Comm comm, MPI_Status *status, MPI_Request *req, int large)
{
    double t = cxlsim_trace_begin();
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc, src, tg = tag == MPI_ANY_TAG ? SIMGRID_ANY_TAG : tag;
    if (blocking) {
        rc = large ? PMPI_Recv_c(buf, count, type, source, tag, comm, st)
                   : PMPI_Recv(buf, (int)count, type, source, tag, comm, st);
        src = peer(comm, st->MPI_SOURCE);
        tg = st->MPI_TAG;
    } else {
        rc = large ? PMPI_Irecv_c(buf, count, type, source, tag, comm, req)
                   : PMPI_Irecv(buf, (int)count, type, source, tag, comm, req);
        src = peer(comm, source);
        cxlsim_trace_request_posted(*req, src, me(), tg);
    }
    cxlsim_trace_line(t, "%s %d %d %llu", blocking ? "recv" : "irecv", src, tg, bytes_of(count, type));
    return rc;
}

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Send(buf, count, type, dest, tag, comm);
    return traced_send(1, buf, count, type, dest, tag, comm, NULL, 0);
}

int MPI_Send_c(const void *buf, MPI_Count count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    if (!cxlsim_trace_on()) return PMPI_Send_c(buf, count, type, dest, tag, comm);
    return traced_send(1, buf, count, type, dest, tag, comm, NULL, 1);
}

int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request *req)
{
    if (!cxlsim_trace_on()) return PMPI_Isend(buf, count, type, dest, tag, comm, req);
    return traced_send(0, buf, count, type, dest, tag, comm, req, 0);
}

int MPI_Isend_c(const void *buf, MPI_Count count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                MPI_Request *req)
{
    if (!cxlsim_trace_on()) return PMPI_Isend_c(buf, count, type, dest, tag, comm, req);
    return traced_send(0, buf, count, type, dest, tag, comm, req, 1);
}

int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    if (!cxlsim_trace_on()) return PMPI_Recv(buf, count, type, source, tag, comm, status);
    return traced_recv(1, buf, count, type, source, tag, comm, status, NULL, 0);
}

int MPI_Recv_c(void *buf, MPI_Count count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    if (!cxlsim_trace_on()) return PMPI_Recv_c(buf, count, type, source, tag, comm, status);
    return traced_recv(1, buf, count, type, source, tag, comm, status, NULL, 1);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request *req)
{
    if (!cxlsim_trace_on()) return PMPI_Irecv(buf, count, type, source, tag, comm, req);
    return traced_recv(0, buf, count, type, source, tag, comm, MPI_STATUS_IGNORE, req, 0);
}

int MPI_Irecv_c(void *buf, MPI_Count count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request *req)
{
    if (!cxlsim_trace_on()) return PMPI_Irecv_c(buf, count, type, source, tag, comm, req);
    return traced_recv(0, buf, count, type, source, tag, comm, MPI_STATUS_IGNORE, req, 1);
}

/* Write the wait line of each request that `completed` marks (all when it is NULL) among the
 * handles the call was given, for those the trace saw posted. No line at all: the call is not
 * compute either (cxlsim_trace_skip). */
static void trace_completed(double t, int count, const MPI_Request posted[], const int completed[])
{
    int src, dst, tag, written = 0;
    for (int i = 0; i < count; i++)
        if ((!completed || completed[i]) && posted[i] != MPI_REQUEST_NULL &&
            cxlsim_trace_request_done(posted[i], &src, &dst, &tag)) {
            cxlsim_trace_line(t, "wait %d %d %d", src, dst, tag);
            written = 1;
        }
    if (!written) cxlsim_trace_skip();
}

/* The completed entries of an index list (Waitsome, Testsome) as flags over `count` requests. */
static void mark(int count, int outcount, const int indices[], int completed[])
{
    for (int i = 0; i < count; i++) completed[i] = 0;
    for (int k = 0; k < outcount && outcount != MPI_UNDEFINED; k++)
        if (indices[k] >= 0 && indices[k] < count) completed[indices[k]] = 1;
}

int MPI_Wait(MPI_Request *req, MPI_Status *status)
{
    if (!cxlsim_trace_on()) return PMPI_Wait(req, status);
    double t = cxlsim_trace_begin();
    MPI_Request posted = *req;
    int rc = PMPI_Wait(req, status);
    trace_completed(t, 1, &posted, NULL);
    return rc;
}

int MPI_Waitall(int count, MPI_Request reqs[], MPI_Status statuses[])
{
    if (!cxlsim_trace_on() || count <= 0) return PMPI_Waitall(count, reqs, statuses);
    double t = cxlsim_trace_begin();
    MPI_Request posted[count];
    memcpy(posted, reqs, sizeof posted);
    int rc = PMPI_Waitall(count, reqs, statuses);
    trace_completed(t, count, posted, NULL);
    return rc;
}

int MPI_Waitany(int count, MPI_Request reqs[], int *index, MPI_Status *status)
{
    if (!cxlsim_trace_on() || count <= 0) return PMPI_Waitany(count, reqs, index, status);
    double t = cxlsim_trace_begin();
    MPI_Request posted[count];
    memcpy(posted, reqs, sizeof posted);
    int rc = PMPI_Waitany(count, reqs, index, status);
    if (*index == MPI_UNDEFINED || *index < 0 || *index >= count) cxlsim_trace_skip();
    else trace_completed(t, 1, &posted[*index], NULL);
    return rc;
}

int MPI_Waitsome(int count, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[])
{
    if (!cxlsim_trace_on() || count <= 0) return PMPI_Waitsome(count, reqs, outcount, indices, statuses);
    double t = cxlsim_trace_begin();
    MPI_Request posted[count];
    int completed[count];
    memcpy(posted, reqs, sizeof posted);
    int rc = PMPI_Waitsome(count, reqs, outcount, indices, statuses);
    mark(count, *outcount, indices, completed);
    trace_completed(t, count, posted, completed);
    return rc;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    if (!cxlsim_trace_on()) return PMPI_Test(req, flag, status);
    double t = cxlsim_trace_begin();
    MPI_Request posted = *req;
    int rc = PMPI_Test(req, flag, status);
    if (*flag) trace_completed(t, 1, &posted, NULL);
    else cxlsim_trace_skip();
    return rc;
}

int MPI_Testall(int count, MPI_Request reqs[], int *flag, MPI_Status statuses[])
{
    if (!cxlsim_trace_on() || count <= 0) return PMPI_Testall(count, reqs, flag, statuses);
    double t = cxlsim_trace_begin();
    MPI_Request posted[count];
    memcpy(posted, reqs, sizeof posted);
    int rc = PMPI_Testall(count, reqs, flag, statuses);
    if (*flag) trace_completed(t, count, posted, NULL);
    else cxlsim_trace_skip();
    return rc;
}

int MPI_Testany(int count, MPI_Request reqs[], int *index, int *flag, MPI_Status *status)
{
    if (!cxlsim_trace_on() || count <= 0) return PMPI_Testany(count, reqs, index, flag, status);
    double t = cxlsim_trace_begin();
    MPI_Request posted[count];
    memcpy(posted, reqs, sizeof posted);
    int rc = PMPI_Testany(count, reqs, index, flag, status);
    if (*flag && *index != MPI_UNDEFINED && *index >= 0 && *index < count) trace_completed(t, 1, &posted[*index], NULL);
    else cxlsim_trace_skip();
    return rc;
}

int MPI_Testsome(int count, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[])
{
    if (!cxlsim_trace_on() || count <= 0) return PMPI_Testsome(count, reqs, outcount, indices, statuses);
    double t = cxlsim_trace_begin();
    MPI_Request posted[count];
    int completed[count];
    memcpy(posted, reqs, sizeof posted);
    int rc = PMPI_Testsome(count, reqs, outcount, indices, statuses);
    mark(count, *outcount, indices, completed);
    trace_completed(t, count, posted, completed);
    return rc;
}

static int traced_sendrecv(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, int dest, int stag,
                           void *recvbuf, MPI_Count rcount, MPI_Datatype rtype, int source, int rtag, MPI_Comm comm,
                           MPI_Status *status, int large)
{
    double t = cxlsim_trace_begin();
    MPI_Status local;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &local : status;
    int rc = large ? PMPI_Sendrecv_c(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, st)
                   : PMPI_Sendrecv(sendbuf, (int)scount, stype, dest, stag, recvbuf, (int)rcount, rtype, source, rtag,
                                   comm, st);
    cxlsim_trace_line(t, "sendRecv %llu %d %llu %d", bytes_of(scount, stype), peer(comm, dest),
                      bytes_of(rcount, rtype), peer(comm, st->MPI_SOURCE));
    return rc;
}

int MPI_Sendrecv(const void *sendbuf, int scount, MPI_Datatype stype, int dest, int stag, void *recvbuf, int rcount,
                 MPI_Datatype rtype, int source, int rtag, MPI_Comm comm, MPI_Status *status)
{
    if (!cxlsim_trace_on())
        return PMPI_Sendrecv(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, status);
    return traced_sendrecv(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, status, 0);
}

int MPI_Sendrecv_c(const void *sendbuf, MPI_Count scount, MPI_Datatype stype, int dest, int stag, void *recvbuf,
                   MPI_Count rcount, MPI_Datatype rtype, int source, int rtag, MPI_Comm comm, MPI_Status *status)
{
    if (!cxlsim_trace_on())
        return PMPI_Sendrecv_c(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, status);
    return traced_sendrecv(sendbuf, scount, stype, dest, stag, recvbuf, rcount, rtype, source, rtag, comm, status, 1);
}
