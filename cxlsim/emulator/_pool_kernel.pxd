# The rank kernel's C-level attributes, for the compiled modules that drive it (_probes).
from libc.stdint cimport uint64_t

from cxlsim.emulator.cxl_ops cimport cxl_pool_t


cdef class PoolKernel:
    cdef cxl_pool_t pool
    cdef Py_buffer mapping
    cdef bint has_mapping
    cdef readonly uint64_t epoch
    cdef readonly uint64_t data_round
    cdef readonly uint64_t slot_bytes
    cdef public double timeout_ns
    cdef object log_array
    # Zero-copy fast path: the views of the last (count, dtype) that send_view was asked for, per
    # buffer (data round % 2), so send_view and allgather_zero_copy skip the view dictionary.
    cdef object zc_count
    cdef object zc_dtype
    cdef uint64_t zc_nbytes
    cdef object zc_send0, zc_send1, zc_all0, zc_all1
    cdef void check_open(self) except *
    cdef object _zc_all_view(self)
    cdef raise_timeout(self)
