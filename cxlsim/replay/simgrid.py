"""Reader of SimGrid's time-independent (TI) traces, as `smpirun -trace-ti` (SimGrid 3.32) writes them.

`smpirun -trace-ti --cfg=tracing/filename:T ./app` writes an index file `T`
listing one file per rank (paths relative to the index), `T_files/..._rank-1.txt`
to `..._rank-N.txt`. The files are numbered from 1, but every line starts with
the 0-based rank, so ranks are ordered by the line, never by the file name.
`read(path)` takes the index file or a directory of per-rank `.txt` files.

Each line is `RANK ACTION FIELDS...`. Counts are in datatype units, converted
to bytes with SimGrid 3.32's datatype codes (`DATATYPE_BYTES`; sizes of the C
types on x86-64 Linux, where the traces are made). A datatype field that is
absent means MPI_BYTE, or MPI_DOUBLE if the `init` line has an argument, as
SimGrid's replay reads it. Actions (fields in order; [optional]):

    compute FLOPS | sleep SECONDS
    send|isend DST TAG COUNT [TYPE]        recv|irecv SRC TAG COUNT [TYPE]
    wait SRC DST TAG | test SRC DST TAG    waitall [N]
    sendRecv SENDCOUNT DST RECVCOUNT SRC [SENDTYPE [RECVTYPE]]
    barrier | bcast COUNT [ROOT [TYPE]]    reduce COUNT FLOPS [ROOT [TYPE]]
    allreduce COUNT FLOPS [TYPE]           allgather|alltoall SENDCOUNT RECVCOUNT [SENDTYPE [RECVTYPE]]
    gather|scatter SENDCOUNT RECVCOUNT [ROOT [SENDTYPE [RECVTYPE]]]
    reducescatter RECVCOUNT_0 .. RECVCOUNT_{P-1} FLOPS [TYPE]
    init [X] | finalize | comm_size N | comm_split | comm_dup | location FILE LINE   (no time)

SRC may be -333 (MPI_ANY_SOURCE) and TAG -444 (MPI_ANY_TAG) on receives.
Refused with a named error, because the trace lost the size: a derived
datatype (code -1), and `reducescatter 0 0 0 ...`, which is how SimGrid 3.32
traces MPI_Reduce_scatter_block (one 0 per element, then the datatype).
The v-collectives (allgatherv, gatherv, scatterv, alltoallv) are refused
too: the replay has no algorithms for them.
Every malformed line is an InputError naming the file, the line and the field.

`compute` holds the traced seconds multiplied by the `smpi/host-speed` in
force when tracing (about 20 kflop/s by default, not the platform's speed).
The speed comes from `--trace-host-speed` or from a sidecar JSON file
(`TRACE.meta.json` beside an index file, `trace.meta.json` in a directory)
with the key `host_speed_flops_per_s`.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter

from cxlsim import config
from cxlsim.errors import InputError
from cxlsim.replay.trace import ANY_SOURCE, ANY_TAG, Call, Trace

__all__ = ["DATATYPE_BYTES", "DERIVED", "LIBRARY_STATS_NAME", "read", "request_key", "sidecar_path", "parse_speed"]

DATATYPE_BYTES = {
    0: 8,    # MPI_DOUBLE
    1: 4,    # MPI_INT
    2: 1,    # MPI_CHAR
    3: 2,    # MPI_SHORT
    4: 8,    # MPI_LONG
    5: 4,    # MPI_FLOAT
    6: 1,    # MPI_BYTE
    7: 8,    # MPI_LONG_LONG
    8: 1,    # MPI_SIGNED_CHAR
    9: 1,    # MPI_UNSIGNED_CHAR
    10: 2,   # MPI_UNSIGNED_SHORT
    11: 4,   # MPI_UNSIGNED
    12: 8,   # MPI_UNSIGNED_LONG
    13: 8,   # MPI_UNSIGNED_LONG_LONG
    14: 16,  # MPI_LONG_DOUBLE
    15: 4,   # MPI_WCHAR
    16: 1,   # MPI_C_BOOL
    17: 1,   # MPI_INT8_T
    18: 2,   # MPI_INT16_T
    19: 4,   # MPI_INT32_T
    20: 8,   # MPI_INT64_T
    21: 1,   # MPI_UINT8_T
    22: 2,   # MPI_UINT16_T
    23: 4,   # MPI_UINT32_T
    24: 8,   # MPI_UINT64_T
    25: 8,   # MPI_C_FLOAT_COMPLEX
    26: 16,  # MPI_C_DOUBLE_COMPLEX
    27: 32,  # MPI_C_LONG_DOUBLE_COMPLEX
    28: 8,   # MPI_AINT
    29: 8,   # MPI_OFFSET
    30: 8,   # MPI_FLOAT_INT
    31: 16,  # MPI_LONG_INT
    32: 16,  # MPI_DOUBLE_INT
    33: 8,   # MPI_SHORT_INT
    34: 8,   # MPI_2INT
    35: 8,   # MPI_2FLOAT
    36: 16,  # MPI_2DOUBLE
    37: 16,  # MPI_2LONG
    57: 1,   # MPI_PACKED
}
"""Bytes per element by SimGrid 3.32 datatype code (`CREATE_MPI_DATATYPE` in smpi_datatype.cpp; the
Fortran codes 38-54 are left out, their SimGrid C types differ from Fortran's)."""
DERIVED = -1
"""The code SimGrid writes for a derived (user-defined) datatype: its size is lost."""

_DEFAULT_BYTE, _DEFAULT_DOUBLE = 1, 8
_NO_TIME = ("init", "finalize", "comm_size", "comm_split", "comm_dup", "location")
_REFUSED = {name: f"{name} is not replayed (no algorithm for the v-collectives); trace without it"
            for name in ("allgatherv", "gatherv", "scatterv", "alltoallv")}
_SPEED = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kMGTP]?)(?:f|flops?)?(?:/s)?\s*$")
_SPEED_PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_speed(value, where: str = "--trace-host-speed") -> float:
    """Flops per second from a number or SimGrid-style text ('20kf', '1Gf', '20000')."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        speed = float(value)
    else:
        match = _SPEED.match(str(value))
        if not match:
            raise InputError(f"{where}: expected a speed in flop/s like '20kf' or '20000', got {value!r}")
        speed = float(match.group(1)) * _SPEED_PREFIX[match.group(2)]
    if not math.isfinite(speed) or speed <= 0:
        raise InputError(f"{where}: expected a speed above 0 flop/s, got {value!r}")
    return speed


class _Line:
    """One line's fields, with errors that name the file, the line and the field."""

    __slots__ = ("path", "number", "fields", "action")

    def __init__(self, path, number, fields):
        self.path, self.number, self.fields = path, number, fields
        self.action = fields[1] if len(fields) > 1 else ""

    def fail(self, field: str, expected: str, got=None, index: int | None = None) -> InputError:
        at = f" (field {index + 1})" if index is not None else ""
        shown = f", got {got!r}" if got is not None else ""
        return InputError(f"{self.path}:{self.number}: {self.action or 'line'}: field {field!r}{at}: "
                          f"expected {expected}{shown}")

    def arity(self, names: list[str], optional: int = 0) -> None:
        given = len(self.fields) - 2
        if given < len(names) or given > len(names) + optional:
            missing = names[given] if given < len(names) else None
            if missing:
                raise self.fail(missing, f"{len(names)} field(s) after '{self.action}' "
                                         f"({' '.join(names)}), found {given}", index=given + 2)
            raise self.fail("(extra)", f"at most {len(names) + optional} field(s) after '{self.action}'",
                            " ".join(self.fields[len(names) + optional + 2:]), index=len(names) + optional + 2)

    def integer(self, index: int, name: str, low: int | None = 0, wildcard: int | None = None) -> int:
        text = self.fields[index]
        try:
            value = float(text)
        except ValueError:
            raise self.fail(name, "an integer", text, index) from None
        if not math.isfinite(value) or value != int(value):
            raise self.fail(name, "an integer", text, index)
        value = int(value)
        if wildcard is not None and value == wildcard:
            return value
        if low is not None and value < low:
            raise self.fail(name, f"an integer >= {low}" + (f" (or {wildcard})" if wildcard is not None else ""),
                            text, index)
        return value

    def number_(self, index: int, name: str) -> float:
        text = self.fields[index]
        try:
            value = float(text)
        except ValueError:
            raise self.fail(name, "a number", text, index) from None
        if not math.isfinite(value) or value < 0:
            raise self.fail(name, "a finite number >= 0", text, index)
        return value

    def rank(self, index: int, name: str, size: int, wildcard: int | None = None) -> int:
        value = self.integer(index, name, 0, wildcard)
        if value != wildcard and value >= size:
            raise self.fail(name, f"a rank below {size} (the trace has {size} ranks)", self.fields[index], index)
        return value

    def datatype(self, index: int, default: int, name: str = "datatype") -> int:
        """Bytes per element of the datatype field at `index` (`default` if the line stops before it)."""
        if index >= len(self.fields):
            return default
        code = self.integer(index, name, low=None)
        if code == DERIVED:
            raise self.fail(name, "a predefined MPI datatype: -1 is a derived datatype, whose size the "
                                  "trace does not record; trace with predefined types", self.fields[index], index)
        if code not in DATATYPE_BYTES:
            raise self.fail(name, f"a SimGrid 3.32 datatype code ({', '.join(map(str, sorted(DATATYPE_BYTES)))})",
                            self.fields[index], index)
        return DATATYPE_BYTES[code]


def _parse(line: _Line, size: int, default_type: int) -> Call | None:
    """The Call of one line (None for an action that takes no time)."""
    a, f = line.action, line.fields
    call = {"kind": a, "file": line.path, "line": line.number}
    if a in _NO_TIME:
        return None
    if a in _REFUSED:
        raise line.fail("action", _REFUSED[a], a, 1)
    if a in ("compute", "sleep"):
        line.arity(["flops" if a == "compute" else "seconds"])
        return Call(**call, amount=line.number_(2, "flops" if a == "compute" else "seconds"))
    if a in ("send", "isend", "recv", "irecv"):
        line.arity(["peer", "tag", "count"], optional=1)
        receive = a.endswith("recv")
        peer = line.rank(2, "src" if receive else "dst", size, ANY_SOURCE if receive else None)
        tag = line.integer(3, "tag", 0, ANY_TAG if receive else None)
        count = line.integer(4, "count")
        return Call(**call, peer=peer, tag=tag, size_bytes=count * line.datatype(5, default_type))
    if a in ("wait", "test"):
        line.arity(["src", "dst", "tag"])
        return Call(**call, src=line.rank(2, "src", size, ANY_SOURCE), dst=line.rank(3, "dst", size),
                    tag=line.integer(4, "tag", 0, ANY_TAG))
    if a == "waitall":
        line.arity([], optional=1)
        if len(f) > 2:
            line.integer(2, "count")
        return Call(**call)
    if a == "sendRecv":
        line.arity(["sendcount", "dst", "recvcount", "src"], optional=2)
        send = line.integer(2, "sendcount") * line.datatype(6, default_type, "sendtype")
        recv = line.integer(4, "recvcount") * line.datatype(7, default_type, "recvtype")
        return Call(**{**call, "kind": "sendrecv"}, peer=line.rank(3, "dst", size), size_bytes=send,
                    recv_bytes=recv, src=line.rank(5, "src", size))
    if a == "barrier":
        line.arity([])
        return Call(**call)
    if a == "bcast":
        line.arity(["count"], optional=2)
        root = line.rank(3, "root", size) if len(f) > 3 else 0
        return Call(**call, size_bytes=line.integer(2, "count") * line.datatype(4, default_type), root=root)
    if a in ("reduce", "allreduce"):
        if a == "reduce":
            line.arity(["count", "flops"], optional=2)
        else:
            line.arity(["count", "flops"], optional=1)
        root = line.rank(4, "root", size) if a == "reduce" and len(f) > 4 else 0
        bytes_ = line.integer(2, "count") * line.datatype(5 if a == "reduce" else 4, default_type)
        return Call(**call, size_bytes=bytes_, amount=line.number_(3, "flops"), root=root)
    if a in ("allgather", "alltoall", "gather", "scatter"):
        rooted = a in ("gather", "scatter")
        line.arity(["sendcount", "recvcount"], optional=3 if rooted else 2)
        first = 5 if rooted else 4
        send = line.integer(2, "sendcount") * line.datatype(first, default_type, "sendtype")
        recv = line.integer(3, "recvcount") * line.datatype(first + 1, default_type, "recvtype")
        root = line.rank(4, "root", size) if rooted and len(f) > 4 else 0
        if a in ("allgather", "alltoall") and send != recv:
            raise line.fail("recvcount", f"the bytes sent per rank ({send} B), as {a} moves equal blocks",
                            f"{recv} B", 3)
        return Call(**call, size_bytes=recv if a == "scatter" else send, root=root)
    if a == "reducescatter":
        if len(f) > 3 and all(x == "0" for x in f[2:-1]):
            raise line.fail("recvcounts", "per-rank counts, not all 0: SimGrid 3.32 traces "
                                          "MPI_Reduce_scatter_block as 'reducescatter 0 ... 0 TYPE' (one 0 per "
                                          "element), which loses the size; trace MPI_Reduce_scatter instead",
                            " ".join(f[2:]), 2)
        line.arity([f"recvcount_{r}" for r in range(size)] + ["flops"], optional=1)
        element = line.datatype(3 + size, default_type)
        counts = tuple(line.integer(2 + r, f"recvcount_{r}") * element for r in range(size))
        return Call(**call, size_bytes=sum(counts), counts=counts, amount=line.number_(2 + size, "flops"))
    raise line.fail("action", "a SimGrid 3.32 TI action (compute, send, isend, recv, irecv, wait, waitall, "
                              "test, sendRecv, barrier, bcast, reduce, allreduce, allgather, alltoall, gather, "
                              "scatter, reducescatter, init, finalize, ...)", a, 1)


LIBRARY_STATS_NAME = "cxlsim_mpi_stats.txt"
"""The interposition library's stats file in its trace directory (CXLSIM_MPI_TRACE=DIR): not a rank file."""


def _rank_files(path: str) -> list[str]:
    if os.path.isdir(path):
        files = sorted(os.path.join(path, name) for name in os.listdir(path)
                       if name.endswith(".txt") and name != LIBRARY_STATS_NAME
                       and os.path.isfile(os.path.join(path, name)))
        if not files:
            raise InputError(f"trace {path!r}: a directory with no per-rank .txt files")
        return files
    text = config.read_text(path, "trace index")
    base = os.path.dirname(os.path.abspath(path))
    files = []
    for number, raw in enumerate(text.splitlines(), start=1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        if re.match(r"^-?\d+\s+\S", entry):
            raise InputError(f"{path}:{number}: expected the index file that lists one per-rank file a line, "
                             f"found a trace line ({entry[:40]!r}); give the index file or the directory")
        full = entry if os.path.isabs(entry) else os.path.join(base, entry)
        if not os.path.isfile(full):
            raise InputError(f"{path}:{number}: per-rank file {entry!r} not found (paths are relative to the "
                             f"index file, {base})")
        files.append(full)
    if not files:
        raise InputError(f"trace index {path!r}: lists no per-rank files")
    return files


def sidecar_path(path: str) -> str:
    """Where the tracer's sidecar for `path` lives: TRACE.meta.json, or DIR/trace.meta.json."""
    return os.path.join(path, "trace.meta.json") if os.path.isdir(path) else path + ".meta.json"


def _sidecar_speed(path: str) -> float | None:
    side = sidecar_path(path)
    if not os.path.isfile(side):
        return None
    try:
        data = json.loads(config.read_text(side, "trace sidecar"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{side}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or "host_speed_flops_per_s" not in data:
        raise InputError(f"{side}: expected a JSON object with the key host_speed_flops_per_s")
    return parse_speed(data["host_speed_flops_per_s"], f"{side}: host_speed_flops_per_s")


def request_key(rank: int, call: Call) -> tuple:
    """The (src, dst, tag) that names a request of `rank`, as `wait` and `test` lines name it."""
    if call.kind == "isend":
        return rank, call.peer, call.tag
    if call.kind == "irecv":
        return call.peer, rank, call.tag
    return call.src, call.dst, call.tag


def _check_requests(rank: int, calls: list[Call]) -> None:
    """Every wait and test names a request posted before it and not yet completed (waitall completes
    them all; a test may complete one, so a later wait of it is allowed, as SimGrid replays it)."""
    pending: Counter = Counter()
    tested: set = set()
    for c in calls:
        if c.kind in ("isend", "irecv"):
            pending[request_key(rank, c)] += 1
        elif c.kind in ("wait", "test"):
            key = request_key(rank, c)
            if not pending[key] and key not in tested:
                raise InputError(f"{c.where}: {c.kind}: fields 'src dst tag' ({c.src} {c.dst} {c.tag}) name no "
                                 "request posted by isend/irecv and not yet completed")
            if c.kind == "test":
                tested.add(key)
            elif pending[key]:
                pending[key] -= 1
        elif c.kind == "waitall":
            pending.clear()


def read(path: str, host_speed_flops_per_s: float | None = None) -> Trace:
    """Read the trace at `path` (index file or directory); `host_speed_flops_per_s` overrides the sidecar.

    A sidecar that disagrees with `host_speed_flops_per_s` is an error naming both.
    """
    files = _rank_files(path)
    size = len(files)
    by_rank: dict[int, tuple[str, list]] = {}
    for file in files:
        text = config.read_text(file, "per-rank trace file")
        rank = None
        default_type = _DEFAULT_BYTE
        calls = []
        for number, raw in enumerate(text.splitlines(), start=1):
            fields = raw.split()
            if not fields or fields[0].startswith("#"):
                continue
            line = _Line(file, number, fields)
            if len(fields) < 2:
                raise line.fail("action", "'RANK ACTION FIELDS...'", raw.strip(), 1)
            this = line.rank(0, "rank", size)
            if rank is None:
                rank = this
                if rank in by_rank:
                    raise line.fail("rank", f"one file per rank, but rank {rank} is also in "
                                            f"{by_rank[rank][0]}", fields[0], 0)
            elif this != rank:
                raise line.fail("rank", f"{rank}, the rank of this file's first line", fields[0], 0)
            if line.action == "init" and len(fields) > 2:
                default_type = _DEFAULT_DOUBLE
            call = _parse(line, size, default_type)
            if call is not None:
                calls.append(call)
        if rank is None:
            raise InputError(f"{file}: no trace lines")
        _check_requests(rank, calls)
        by_rank[rank] = (file, calls)
    sidecar = _sidecar_speed(path)
    if host_speed_flops_per_s is not None and sidecar is not None and \
            not math.isclose(host_speed_flops_per_s, sidecar, rel_tol=1e-9):
        raise InputError(f"--trace-host-speed: {host_speed_flops_per_s:g} flop/s, but the trace's sidecar "
                         f"{sidecar_path(path)} says {sidecar:g} flop/s; give one")
    ordered = [by_rank[r] for r in range(size)]
    return Trace(ranks=[calls for _, calls in ordered], files=[file for file, _ in ordered], source=path,
                 host_speed_flops_per_s=host_speed_flops_per_s or sidecar)
