# Included by _pool_kernel.pyx (the reductions' codes and the arguments' checks); compiled as part of that module.

# The reductions the kernels fold (cxl_reduce.h): numpy dtype -> CXL_* code, op name -> CXL_* code.
REDUCE_DTYPES = {np.dtype(np.int8): CXL_I8, np.dtype(np.int16): CXL_I16, np.dtype(np.int32): CXL_I32,
                 np.dtype(np.int64): CXL_I64, np.dtype(np.uint8): CXL_U8, np.dtype(np.uint16): CXL_U16,
                 np.dtype(np.uint32): CXL_U32, np.dtype(np.uint64): CXL_U64, np.dtype(np.float32): CXL_F32,
                 np.dtype(np.float64): CXL_F64}
REDUCE_NUMS = {dtype.num: code for dtype, code in REDUCE_DTYPES.items()}  # (an equal dtype of another number,
# e.g. longlong beside int64 where both are 8 bytes, takes reduction_codes' slow path)
REDUCE_OPS = {"sum": CXL_SUM, "prod": CXL_PROD, "min": CXL_MIN, "max": CXL_MAX, "band": CXL_BAND,
              "bor": CXL_BOR, "bxor": CXL_BXOR, "land": CXL_LAND, "lor": CXL_LOR, "lxor": CXL_LXOR}
FLOAT_OPS = ("sum", "prod", "min", "max")
FLOAT_OP_CODES = {name: REDUCE_OPS[name] for name in FLOAT_OPS}
# The default threshold of the large allreduce: measured, from the profile CXLSIM_PROFILE names, or
# 64 KiB (the MPI library's default too); ALLREDUCE_LARGE_SOURCE says which (cxlsim.emulator.tuning).
# A profile that cannot be used is refused where a threshold is checked (check_large_bytes: every
# communicator's open and launcher), not at import, so a command fails with its message, exit 2.
try:
    ALLREDUCE_LARGE_BYTES, ALLREDUCE_LARGE_SOURCE = allreduce_large_bytes()
    PROFILE_PROBLEM = None
except InputError as exc:
    ALLREDUCE_LARGE_BYTES, ALLREDUCE_LARGE_SOURCE = DEFAULT_ALLREDUCE_LARGE_BYTES, "default"
    PROFILE_PROBLEM = str(exc)


def reduction_codes(sendbuf, recvbuf, op, where):
    """The (dtype, op) codes of a reduction of numpy array sendbuf into recvbuf; InputError naming `where`."""
    if type(sendbuf) is np.ndarray and type(recvbuf) is np.ndarray:  # the fast path: lookups by type number
        dtype = sendbuf.dtype
        if (dtype is recvbuf.dtype or dtype == recvbuf.dtype) and dtype.isnative:
            # (hashing a dtype, as a dict keyed by dtypes does, costs about a microsecond)
            code, op_code = REDUCE_NUMS.get(dtype.num), (FLOAT_OP_CODES if dtype.kind == "f" else REDUCE_OPS).get(op)
            if code is not None and op_code is not None:
                return code, op_code
    if not isinstance(sendbuf, np.ndarray) or not isinstance(recvbuf, np.ndarray):
        raise InputError(f"{where}: sendbuf and recvbuf must be numpy arrays (their dtype names the reduction)")
    if sendbuf.dtype != recvbuf.dtype:
        raise InputError(f"{where}: sendbuf is {sendbuf.dtype} but recvbuf {recvbuf.dtype}")
    dtype = REDUCE_DTYPES.get(sendbuf.dtype.newbyteorder("=") if sendbuf.dtype.isnative else None)
    if dtype is None:
        raise InputError(f"{where}: dtype {sendbuf.dtype} is not reduced on the pool; expected one of "
                         f"{sorted(str(d) for d in REDUCE_DTYPES)}")
    if op not in REDUCE_OPS or (sendbuf.dtype.kind == "f" and op not in FLOAT_OPS):
        allowed = FLOAT_OPS if sendbuf.dtype.kind == "f" else tuple(REDUCE_OPS)
        raise InputError(f"{where}: op {op!r} is not defined on {sendbuf.dtype}; expected one of {list(allowed)}")
    return dtype, REDUCE_OPS[op]


def count_and_dtype(buf):
    """(items, dtype) of a send buffer: a numpy array's own, any other buffer's bytes as uint8."""
    if type(buf) is np.ndarray:
        return buf.size, buf.dtype
    return memoryview(buf).nbytes, np.dtype(np.uint8)


def check_nt_min_bytes(value):
    """The non-temporal copy-in threshold in bytes: an int >= 0 (0 = off); InputError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InputError(f"nt_min_bytes: expected a number of bytes >= 0 (0 = off), got {value!r}")
    return int(value)


def check_large_bytes(value):
    """The large-allreduce threshold in bytes (an int >= 0); InputError otherwise, or when CXLSIM_PROFILE
    names a profile that cannot be used."""
    if PROFILE_PROBLEM is not None:
        raise InputError(PROFILE_PROBLEM)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InputError(f"allreduce_large_bytes: expected a number of bytes >= 0, got {value!r}")
    return int(value)
