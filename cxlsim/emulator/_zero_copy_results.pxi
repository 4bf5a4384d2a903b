# Included by _pool_kernel.pyx (the zero-copy results and their view caches); compiled as part of that module.

@cython.freelist(8)
@cython.auto_pickle(False)
cdef class ZeroCopyResult:
    """The blocks of one zero-copy call, read in place; valid until the owner's next call.

    `array` is the read-only view of the pool: (size, count) for allgather and alltoall (row r =
    rank r's block), (count,) for broadcast. `rows` is the tuple of the blocks to read, row r =
    rank r's, in which this rank's own block is its send buffer, not the pool: the caller wrote it
    there itself, so it is in this core's cache, where its pool copy is not (the allgather's own slot
    went in with the copy-in's stores, the alltoall's own block is not stored at all: see
    cxl_coll_view_skips_own). Any access after the owner's epoch moved on raises StaleViewError. One
    is made per call (a result of an older call must keep its own epoch), so the Cython kernel
    builds it without argument parsing (`_zero_copy_result`) and recycles the memory of dead ones
    (freelist).
    """
    cdef object owner
    cdef PoolKernel kernel  # the owner when it is a Cython kernel: its epoch is read without a lookup
    cdef uint64_t result_epoch
    cdef object view
    cdef object row_views  # the rows tuple, or None: built when first asked for
    # Where the own row comes from while row_views is None: items own_start..+own_count of own_send
    # (None: the view's own row), for row own_rank; row_cache (the kernel's) keeps the tuple built.
    cdef object own_send
    cdef Py_ssize_t own_start, own_count
    cdef int own_rank
    cdef ViewCache row_cache
    cdef bint row_odd
    # An alltoall whose own block the kernel left out of the pool: `array` first copies it there.
    cdef bint own_unstored
    cdef uint64_t own_offset  # its byte offset in the pool mapping

    def __init__(self, owner, uint64_t epoch, view, rows=None):
        self.owner, self.result_epoch, self.view, self.row_views = owner, epoch, view, rows
        self.kernel = owner if isinstance(owner, PoolKernel) else None

    cdef void check_fresh(self) except *:
        if self.kernel is not None and self.kernel.coll.epoch == self.result_epoch:
            return
        if self.owner.epoch != self.result_epoch:
            raise StaleViewError(f"zero-copy result of epoch {self.result_epoch} used after epoch "
                                 f"{self.owner.epoch} began: copy what you need before the next collective call")

    @property
    def array(self):
        self.check_fresh()
        if self.own_unstored:
            self.kernel.store_own_block(self.rows[self.own_rank], self.own_offset)
            self.own_unstored = False
        return self.view

    @property
    def rows(self):
        """The blocks as a tuple of read-only 1-D arrays, row r = rank r's (this rank's: its send buffer)."""
        self.check_fresh()
        if self.row_views is None:
            if self.row_cache is not None:
                self.row_views = self.row_cache.rows_for(self.row_odd, self.view, self.own_rank, self.own_send,
                                                         self.own_start, self.own_count)
            else:
                self.row_views = (self.view,) if self.view.ndim == 1 else tuple(self.view)
        return self.row_views

    @property
    def epoch(self):
        return self.result_epoch

    def __array__(self, dtype=None, copy=None):
        if copy:
            return np.array(self.array, dtype=dtype, copy=True)
        return np.asarray(self.array, dtype=dtype)

    def __getitem__(self, index):
        return self.array[index]

    def __len__(self):
        return len(self.array)


cdef inline ZeroCopyResult _zero_copy_result(PoolKernel kernel, uint64_t epoch, object view, object rows=None):
    """A ZeroCopyResult of `kernel`'s call `epoch` over `view`, built without calling __init__."""
    cdef ZeroCopyResult result = ZeroCopyResult.__new__(ZeroCopyResult)
    result.owner = kernel
    result.kernel = kernel
    result.result_epoch = epoch
    result.view = view
    result.row_views = rows
    return result


cdef inline void _own_row_from(ZeroCopyResult result, ViewCache cache, bint odd, int rank, object sendbuf,
                               Py_ssize_t start, Py_ssize_t count):
    """Give `result` its rows with row `rank` from items start..start+count of `sendbuf`: the cache's tuple
    if it was built for sendbuf, else built when `rows` is first asked for (a caller that reads `array`
    only, or passes a new buffer each call, pays nothing for them)."""
    if (cache.rows_src1 if odd else cache.rows_src0) is sendbuf:
        result.row_views = cache.rows1 if odd else cache.rows0
        result.own_rank = rank
        return
    result.own_send, result.own_start, result.own_count, result.own_rank = sendbuf, start, count, rank
    result.row_cache, result.row_odd = cache, odd


def own_block(sendbuf, Py_ssize_t start, Py_ssize_t count):
    """The read-only 1-D view of items start..start+count of `sendbuf` (a numpy array, in its memory
    order, or any other buffer as uint8): a zero-copy result's own row."""
    flat = sendbuf.reshape(-1, order="A") if type(sendbuf) is ndarray else np.frombuffer(sendbuf, np.uint8)
    block = flat[start:start + count]  # a new array object, so the flag below leaves sendbuf as it is
    block.flags.writeable = False
    return block


def rows_with_own(view, int rank, block):
    """The rows of a (size, count) result view, row `rank` replaced by `block` (the own block from send)."""
    return tuple(block if r == rank else view[r] for r in range(view.shape[0]))


cdef enum:
    VIEW_ALLGATHER, VIEW_BROADCAST, VIEW_ALLTOALL
ndarray = np.ndarray


cdef class ViewCache:
    """The result views of one fused zero-copy call for its last (count, dtype, root), per buffer;
    and (broadcast) the dtype argument last given with its numpy dtype."""

    def __cinit__(self):
        self.count = -1

    cdef object rows_for(self, bint odd, object view, int rank, object sendbuf, Py_ssize_t start, Py_ssize_t count):
        """The rows tuple of this buffer's `view` with the own row from `sendbuf` (items start..start+count):
        the cached one while sendbuf is the object it was built for (the cache holds it, so its identity
        cannot be reused), else built and kept."""
        if (self.rows_src1 if odd else self.rows_src0) is sendbuf:
            return self.rows1 if odd else self.rows0
        rows = rows_with_own(view, rank, own_block(sendbuf, start, count))
        if odd:
            self.rows1, self.rows_src1 = rows, sendbuf
        else:
            self.rows0, self.rows_src0 = rows, sendbuf
        return rows
