# The rank kernel's C-level attributes, for the compiled modules that drive it (_probes).
from libc.stdint cimport uint64_t

from cxlsim.emulator.cxl_coll cimport cxl_allreduce_t, cxl_coll_t


cdef class ViewCache:
    cdef Py_ssize_t count
    cdef object dtype
    cdef int root
    cdef object view0, view1
    cdef object dtype_arg, dtype_of_arg
    cdef Py_ssize_t itemsize_of_arg
    # The rows tuples (ZeroCopyResult.rows) per buffer, and the send buffers their own rows view.
    cdef object rows0, rows1, rows_src0, rows_src1
    cdef object rows_for(self, bint odd, object view, int rank, object sendbuf, Py_ssize_t start, Py_ssize_t count)


cdef class PoolKernel:
    # The pool (coll.pool) and the step state every call goes through (cxl_coll.h): epoch = the
    # last step, round = the last data round, and what the buffer-reuse waits need.
    cdef cxl_coll_t coll
    cdef Py_buffer mapping
    cdef bint has_mapping
    cdef readonly uint64_t slot_bytes
    # The split-phase allreduce in flight (between allreduce_start and allreduce_wait).
    cdef cxl_allreduce_t pending
    cdef Py_buffer pending_send, pending_recv
    cdef bint has_pending
    cdef object log_array
    # Zero-copy fast path: the views of the last (count, dtype) that send_view was asked for, per
    # buffer (data round % 2), so send_view and allgather_zero_copy skip the view dictionary.
    cdef object zc_count
    cdef object zc_dtype
    cdef uint64_t zc_nbytes
    cdef object zc_send0, zc_send1, zc_all0, zc_all1
    # Fused zero-copy calls: their result views (allgather_view, broadcast_view, alltoall_view).
    cdef ViewCache vc_allgather, vc_broadcast, vc_alltoall
    cdef void store_own_block(self, object block, uint64_t offset) except *
    cdef void check_open(self) except *
    cdef raise_timeout(self, str what=*)
    cdef void check_idle(self) except *
    cdef void release_pending(self) noexcept
    cdef tuple _allreduce_args(self, sendbuf, recvbuf, op, large_bytes)
    # The last reduction's dtype and op objects and their codes (_reduction_codes).
    cdef object rc_dtype, rc_op
    cdef int rc_dt, rc_code
    cdef void _reduction_codes(self, sendbuf, recvbuf, op, str where) except *
