/* send_modes.c: the synchronous, buffered and ready sends (MPI_Ssend, Bsend, Rsend, Issend, Ibsend,
 * Irsend and their large-count _c forms), passed to PMPI unchanged and traced as SimGrid's `send`
 * and `isend` lines (the format has no send modes; cxlsim replay's sends are eager, so a
 * synchronous send's wait for its receiver is not projected). */
#include "cxlsim_mpi.h"

#define BLOCKING(NAME, COUNT_T)                                                                          \
    int MPI_##NAME(const void *buf, COUNT_T count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) \
    {                                                                                                    \
        if (!cxlsim_trace_on()) return PMPI_##NAME(buf, count, type, dest, tag, comm);                   \
        double t = cxlsim_trace_begin();                                                                 \
        int rc = PMPI_##NAME(buf, count, type, dest, tag, comm);                                         \
        cxlsim_trace_send(t, 1, (MPI_Count)count, type, dest, tag, comm, NULL);                          \
        return rc;                                                                                       \
    }

#define NONBLOCKING(NAME, COUNT_T)                                                                       \
    int MPI_##NAME(const void *buf, COUNT_T count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, \
                   MPI_Request *req)                                                                     \
    {                                                                                                    \
        if (!cxlsim_trace_on()) return PMPI_##NAME(buf, count, type, dest, tag, comm, req);              \
        double t = cxlsim_trace_begin();                                                                 \
        int rc = PMPI_##NAME(buf, count, type, dest, tag, comm, req);                                    \
        cxlsim_trace_send(t, 0, (MPI_Count)count, type, dest, tag, comm, req);                           \
        return rc;                                                                                       \
    }

BLOCKING(Ssend, int)
BLOCKING(Ssend_c, MPI_Count)
BLOCKING(Bsend, int)
BLOCKING(Bsend_c, MPI_Count)
BLOCKING(Rsend, int)
BLOCKING(Rsend_c, MPI_Count)
NONBLOCKING(Issend, int)
NONBLOCKING(Issend_c, MPI_Count)
NONBLOCKING(Ibsend, int)
NONBLOCKING(Ibsend_c, MPI_Count)
NONBLOCKING(Irsend, int)
NONBLOCKING(Irsend_c, MPI_Count)
