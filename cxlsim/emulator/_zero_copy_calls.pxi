# Included by _pool_kernel.pyx (the zero-copy calls' bodies; PoolKernel's methods of the same names call them,
# since Cython allows no include inside a class body); compiled as part of that module.

cdef object _send_view(PoolKernel k, count, dtype):
    """The body of PoolKernel.send_view (see its docstring)."""
    cdef uint64_t parity = (k.coll.round + 1) & 1
    k.check_open()
    if k.coll.buffer_epoch[parity] > k.coll.known_done:
        k.prepare_write()
    if dtype is k.zc_dtype and type(count) is int and count == k.zc_count:
        view = k.zc_send1 if parity else k.zc_send0
        if view is not None:
            return view
    view = k._slot_array(k.coll.round + 1, count, dtype, False)
    if type(count) is int:
        if not (dtype is k.zc_dtype and count == k.zc_count):
            k.zc_count, k.zc_dtype, k.zc_nbytes = count, dtype, view.nbytes
            k.zc_send0 = k.zc_send1 = k.zc_all0 = k.zc_all1 = None
        if parity:
            k.zc_send1 = view
        else:
            k.zc_send0 = view
    return view


cdef object _zc_all_view(PoolKernel k):
    """The read-only (size, count) view of the current round's buffer for the cached (count, dtype)."""
    cdef bint odd = k.coll.round & 1
    view = k.zc_all1 if odd else k.zc_all0
    if view is None:
        view = k._slot_array(k.coll.round, k.zc_count, k.zc_dtype, True)
        if odd:
            k.zc_all1 = view
        else:
            k.zc_all0 = view
    return view


cdef ZeroCopyResult _allgather_zero_copy(PoolKernel k, block):
    """The body of PoolKernel.allgather_zero_copy (see its docstring)."""
    cdef int missing
    cdef uint64_t nbytes
    cdef object sent = k.zc_send1 if (k.coll.round + 1) & 1 else k.zc_send0
    cdef bint cached = sent is not None and block is sent
    k.check_open()
    if cached:
        nbytes = k.zc_nbytes
    else:
        views = k._views
        try:
            count, dtype = block.shape[0], block.dtype
        except (AttributeError, IndexError):
            count = dtype = None
        sent = views.get(((k.coll.round + 1) & 1, False, count, dtype))
        if sent is None or sent is not block:
            raise InputError("allgather_zero_copy: pass the view returned by send_view() for this call")
        nbytes = block.nbytes
    k.check_idle()
    with nogil:
        missing = cxl_coll_allgather_step(&k.coll, NULL, NULL, nbytes)
    if missing:
        k.raise_timeout()
    if cached:
        view = _zc_all_view(k)
    else:
        view = views.get((k.coll.round & 1, True, count, dtype))
        if view is None:
            view = k._slot_array(k.coll.round, count, dtype, True)
    return _zero_copy_result(k, k.coll.epoch, view)


cdef object _view_of(PoolKernel k, ViewCache cache, int kind, Py_ssize_t count, object dtype, int root):
    """The result view of kind VIEW_* for (count, dtype, root) in the current round's buffer: the
    cache's (one identity and two int comparisons), or built by CommMixin and kept there."""
    cdef bint odd = k.coll.round & 1
    if not (cache.dtype is dtype and cache.count == count and cache.root == root):
        cache.dtype, cache.count, cache.root = dtype, count, root
        cache.view0 = cache.view1 = None
        cache.rows0 = cache.rows1 = cache.rows_src0 = cache.rows_src1 = None
    view = cache.view1 if odd else cache.view0
    if view is None:
        if kind == VIEW_ALLGATHER:
            view = k._slot_array(k.coll.round, count, dtype, True)
        elif kind == VIEW_BROADCAST:
            view = k._broadcast_array(k.coll.round, root, count, dtype)
        else:
            view = k._alltoall_array(k.coll.round, count, dtype)
        if odd:
            cache.view1 = view
        else:
            cache.view0 = view
    return view


cdef ZeroCopyResult _allgather_view(PoolKernel k, sendbuf):
    """The body of PoolKernel.allgather_view (see its docstring)."""
    cdef Py_buffer s
    cdef int missing
    cdef uint64_t n
    cdef Py_ssize_t count
    cdef ZeroCopyResult result
    k.check_open()
    k.check_idle()
    if type(sendbuf) is ndarray:  # (read from the array's struct: two attribute lookups cost ~50 ns a call)
        count, dtype = cnp.PyArray_SIZE(<cnp.ndarray>sendbuf), <object>cnp.PyArray_DESCR(<cnp.ndarray>sendbuf)
    else:
        count, dtype = count_and_dtype(sendbuf)
    PyObject_GetBuffer(sendbuf, &s, PyBUF_ANY_CONTIGUOUS)
    try:
        n = <uint64_t>s.len
        if n > k.slot_bytes:
            raise InputError(f"allgather_view: sendbuf has {n} bytes but pool slots hold {k.slot_bytes}")
        with nogil:
            missing = cxl_coll_allgather_step(&k.coll, <char *>s.buf, NULL, n)
    finally:
        PyBuffer_Release(&s)
    if missing:
        k.raise_timeout()
    result = _zero_copy_result(k, k.coll.epoch, _view_of(k, k.vc_allgather, VIEW_ALLGATHER, count, dtype, 0))
    _own_row_from(result, k.vc_allgather, k.coll.round & 1, k.coll.pool.rank, sendbuf, 0, count)
    return result


cdef ZeroCopyResult _broadcast_view(PoolKernel k, count, dtype, int root, sendbuf):
    """The body of PoolKernel.broadcast_view (see its docstring)."""
    cdef Py_buffer s
    cdef int status
    cdef uint64_t n
    cdef Py_ssize_t items
    cdef const char *out = NULL
    cdef const char *src = NULL
    cdef bint is_root = k.coll.pool.rank == root
    cdef ViewCache cache = k.vc_broadcast
    k.check_open()
    k.check_idle()
    if not 0 <= root < k.coll.pool.nranks:
        raise InputError(f"broadcast_view: root {root} is outside 0..{k.coll.pool.nranks - 1}")
    if dtype is not cache.dtype_arg:  # the argument as given (np.uint8, 'f8', a dtype)
        cache.dtype_arg, cache.dtype_of_arg = dtype, np.dtype(dtype)
        cache.itemsize_of_arg = cache.dtype_of_arg.itemsize
    dtype = cache.dtype_of_arg
    # (the checks in C where they can be: a microsecond call's bookkeeping is a few percent of it)
    if type(count) is not int and (isinstance(count, bool) or not isinstance(count, np.integer)):
        raise InputError(f"broadcast_view: count must be a whole number >= 0, got {count!r}")
    try:
        items = count
    except OverflowError:
        items = -1
    if items < 0:
        raise InputError(f"broadcast_view: count must be a whole number >= 0, got {count!r}")
    n = <uint64_t>items * <uint64_t>cache.itemsize_of_arg
    if n > k.slot_bytes:
        raise InputError(f"broadcast_view: {count} x {dtype} ({n} bytes) do not fit the pool's "
                         f"{k.slot_bytes}-byte slot (a zero-copy call is one step; broadcast() chunks)")
    if sendbuf is None:
        with nogil:
            status = cxl_coll_broadcast_view(&k.coll, NULL if not is_root else
                                             cxl_slot(&k.coll.pool, k.coll.round + 1, root), n, root, &out)
    else:
        if not is_root:
            raise InputError(f"broadcast_view: only the root (rank {root}) passes sendbuf")
        PyObject_GetBuffer(sendbuf, &s, PyBUF_ANY_CONTIGUOUS)
        try:
            if <uint64_t>s.len != n:
                raise InputError(f"broadcast_view: sendbuf has {s.len} bytes, expected {count} x {dtype} = {n}")
            src = <const char *>s.buf
            with nogil:
                status = cxl_coll_broadcast_view(&k.coll, src, n, root, &out)
        finally:
            PyBuffer_Release(&s)
    if status:
        k._status(status, "broadcast_view")
    return _zero_copy_result(k, k.coll.epoch, _view_of(k, cache, VIEW_BROADCAST, items, dtype, root))


cdef ZeroCopyResult _alltoall_view(PoolKernel k, sendbuf):
    """The body of PoolKernel.alltoall_view (see its docstring)."""
    cdef Py_buffer s
    cdef int status
    cdef uint64_t n, P = <uint64_t>k.coll.pool.nranks
    cdef Py_ssize_t total, count
    cdef const char *out = NULL
    cdef const char *src = NULL
    cdef char *mine
    cdef int me = k.coll.pool.rank
    cdef ZeroCopyResult result
    k.check_open()
    k.check_idle()
    if type(sendbuf) is ndarray:
        total, dtype = cnp.PyArray_SIZE(<cnp.ndarray>sendbuf), <object>cnp.PyArray_DESCR(<cnp.ndarray>sendbuf)
    else:
        total, dtype = count_and_dtype(sendbuf)
    if <uint64_t>total % P:
        raise InputError(f"alltoall_view: sendbuf has {total} items, not {P} equal blocks")
    PyObject_GetBuffer(sendbuf, &s, PyBUF_ANY_CONTIGUOUS)
    try:
        if <uint64_t>s.len > k.slot_bytes:
            raise InputError(f"alltoall_view: sendbuf has {s.len} bytes but pool slots hold {k.slot_bytes} "
                             f"(a zero-copy call is one step; alltoall() chunks)")
        n = <uint64_t>s.len // P
        src = <const char *>s.buf
        with nogil:
            status = cxl_coll_alltoall_view(&k.coll, src, n, &out)
    finally:
        PyBuffer_Release(&s)
    if status:
        k._status(status, "alltoall_view")
    count = total // <Py_ssize_t>P
    result = _zero_copy_result(k, k.coll.epoch, _view_of(k, k.vc_alltoall, VIEW_ALLTOALL, count, dtype, 0))
    _own_row_from(result, k.vc_alltoall, k.coll.round & 1, me, sendbuf, me * count, count)
    mine = cxl_slot(&k.coll.pool, k.coll.round, me)
    if n and src != mine and cxl_coll_view_skips_own(&k.coll):  # the own block is not in the pool
        result.own_unstored = True
        result.own_offset = <uint64_t>(mine - k.coll.pool.base) + <uint64_t>me * n
    return result
