"""The OTF2 reader (optional extra `otf2`): archives written with otf2.writer as Score-P lays them out
(COMM_LOCATIONS group, MPI_* regions, Score-P's collective byte counts) read into the same calls as the
equivalent SimGrid trace and replay to the same times; every refusal names the event and the field."""
from __future__ import annotations

import os

import pytest

otf2 = pytest.importorskip("otf2")

from otf2.enums import CollectiveOp, GroupType, Paradigm, RegionRole  # noqa: E402

from cxlsim.cli import main  # noqa: E402
from cxlsim.errors import InputError  # noqa: E402
from cxlsim.replay import engine, fabrics, otf2_reader, simgrid  # noqa: E402

NO_ROOT = 0xFFFFFFFF
RESOLUTION = 1_000_000_000  # ticks per second: 1 tick = 1 ns


class Archive:
    """A Score-P-like archive of P ranks; `rank(r)` gives a writer with MPI-call helpers."""

    def __init__(self, path, p, sub=None):
        self.path, self.p = str(path), p
        self._open = otf2.writer.open(self.path, timer_resolution=RESOLUTION)
        self.trace = self._open.__enter__()
        d = self.trace.definitions
        node = d.system_tree_node("machine")
        self.locations = [d.location("Master thread", group=d.location_group(f"MPI Rank {r}", system_tree_parent=node))
                          for r in range(p)]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=self.locations)
        world = d.group("", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=list(range(p)))
        self.world = d.comm("MPI_COMM_WORLD", group=world)
        if sub:
            group = d.group("", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=list(sub))
            self.sub = d.comm("MPI_COMM_SPLIT", group=group, parent=self.world)
        self.regions = {}
        self.user = d.region("solve")

    def region(self, name):
        if name not in self.regions:
            self.regions[name] = self.trace.definitions.region(name, paradigm=Paradigm.MPI,
                                                              region_role=RegionRole.FUNCTION)
        return self.regions[name]

    def rank(self, r):
        return RankWriter(self, self.trace.event_writer_from_location(self.locations[r]))

    def close(self):
        self._open.__exit__(None, None, None)
        return self.path


class RankWriter:
    def __init__(self, archive, w):
        self.a, self.w, self.t = archive, w, 0

    def call(self, name, duration, *events):
        """An MPI call `name` starting now, with `events` (callables taking the time) inside; then `duration` ns."""
        region = self.a.region(name)
        self.w.enter(self.t, region)
        for make in events:
            make(self.w, self.t)
        self.t += duration
        self.w.leave(self.t, region)

    def compute(self, ns):
        self.w.enter(self.t, self.a.user)
        self.t += ns
        self.w.leave(self.t, self.a.user)


def coll(op, sent, received, root=NO_ROOT, comm=None):
    def make(w, t):
        w.mpi_collective_begin(t)
        w.mpi_collective_end(t, op, comm, root, sent, received)
    return make


def write_halo(write_trace, tmp_path, p=4):
    """Init; 2 iterations of compute, a ring halo (irecv, isend, waitall), an allreduce of 8 B; a bcast of
    100 B from rank 1; a barrier; MPI_Comm_rank (no communication); finalize. And the same as a SimGrid trace."""
    a = Archive(tmp_path / "archive", p)
    world = a.world
    simgrid_lines = {r: [] for r in range(p)}  # between init and finalize
    for r in range(p):
        w = a.rank(r)
        lines = simgrid_lines[r]
        right, left = (r + 1) % p, (r - 1) % p
        w.call("MPI_Init", 5000)
        for it in range(2):
            w.compute(10_000 + 1000 * r)
            lines.append(f"compute {10_000 + 1000 * r}")
            req = 2 * it
            w.call("MPI_Irecv", 100, lambda wr, t, q=req: wr.mpi_irecv_request(t, q))
            w.call("MPI_Isend", 200, lambda wr, t, q=req + 1, to=right: wr.mpi_isend(t, to, world, 3, 4096, q))
            w.compute(50)  # between the isend and the waitall: 50 ns, an MPI_Comm_rank of 100, 50 ns
            w.call("MPI_Comm_rank", 100)
            w.compute(50)
            w.call("MPI_Waitall", 300, lambda wr, t, q=req + 1: wr.mpi_isend_complete(t, q),
                   lambda wr, t, q=req, fr=left: wr.mpi_irecv(t, fr, world, 3, 4096, q))
            # the irecv's 100 ns are MPI time, not compute; MPI_Comm_rank's 100 stay in the 200 ns gap
            lines += [f"irecv {left} 3 4096", f"isend {right} 3 4096", "compute 200",
                      f"wait {r} {right} 3", f"wait {left} {r} 3"]
            w.compute(500)
            w.call("MPI_Allreduce", 700, coll(CollectiveOp.ALLREDUCE, 8 * p, 8 * p, comm=world))
            lines += ["compute 500", "allreduce 8 0"]
        w.compute(1000)
        root = 1
        sent, received = (100 * p, 100) if r == root else (0, 100)
        w.call("MPI_Bcast", 400, coll(CollectiveOp.BCAST, sent, received, root=root, comm=world))
        w.call("MPI_Barrier", 400, coll(CollectiveOp.BARRIER, 0, 0, comm=world))
        lines += ["compute 1000", "bcast 100 1", "barrier"]
        w.compute(300)
        w.call("MPI_Finalize", 1000)
    path = a.close()
    return path, write_trace(tmp_path / "simgrid", simgrid_lines)


def test_an_archive_reads_as_the_equivalent_simgrid_trace_and_replays_the_same(tmp_path, write_trace):
    archive, directory = write_halo(write_trace, tmp_path)
    ours = otf2_reader.read(archive)
    theirs = simgrid.read(directory, 1e9)
    assert ours.host_speed_flops_per_s == RESOLUTION
    strip = [[(c.kind, c.peer, c.tag, c.size_bytes, c.src, c.dst, c.root, c.amount) for c in calls]
             for calls in ours.ranks]
    assert strip == [[(c.kind, c.peer, c.tag, c.size_bytes, c.src, c.dst, c.root, c.amount) for c in calls]
                     for calls in theirs.ranks]
    for spec in ("ib-hdr", "cxl3-pool"):
        a = engine.replay(ours, fabrics.resolve(spec, 4).make())
        b = engine.replay(theirs, fabrics.resolve(spec, 4).make())
        assert a.finish_ns == b.finish_ns
    # the anchor file reads as the directory holding it
    assert otf2_reader.read(os.path.join(archive, "traces.otf2")).ranks == ours.ranks


def test_the_command_replays_an_archive(tmp_path, write_trace, capsys):
    archive, _ = write_halo(write_trace, tmp_path)
    assert main(["replay", archive, "--fabric", "ib-hdr", "--no-plots", "--output", str(tmp_path / "ws")]) == 0
    assert "ib-hdr" in capsys.readouterr().out
    assert main(["replay", archive, "--fabric", "ib-hdr", "--trace-host-speed", "1Gf", "--no-plots",
                 "--output", str(tmp_path / "ws2")]) == 2
    assert "--trace-host-speed: an OTF2 archive's timestamps are in its timer's ticks" in capsys.readouterr().err


@pytest.mark.parametrize("op, sent, in_place, expect", [
    (CollectiveOp.ALLREDUCE, 32, None, ("allreduce", 8)),          # P=4: 32 = 4 x 8 only
    (CollectiveOp.ALLREDUCE, 24, None, InputError),                # 24 = 4 x 6 = 3 x 8: ambiguous
    (CollectiveOp.ALLREDUCE, 24, True, ("allreduce", 8)),
    (CollectiveOp.ALLREDUCE, 24, False, ("allreduce", 6)),
    (CollectiveOp.ALLGATHER, 9, None, ("allgather", 3)),           # 9 = 3 x 3 only: in place
    (CollectiveOp.ALLTOALL, 40, None, ("alltoall", 10)),
    (CollectiveOp.REDUCE_SCATTER_BLOCK, 64, None, ("reducescatter", 64)),  # 4 x 16 B: the vector is 64 B
])
def test_symmetric_collectives_take_the_reading_the_counts_allow(tmp_path, op, sent, in_place, expect):
    a = Archive(tmp_path / "a", 4)
    for r in range(4):
        a.rank(r).call("MPI_X", 10, coll(op, sent, sent, comm=a.world))
    path = a.close()
    if expect is InputError:
        with pytest.raises(InputError, match=r"traces.otf2\[rank 0, location 'Master thread'\]:3: MpiCollectiveEnd "
                                             r"field 'size_sent': 24 B at P=4 reads as 6 B .* or 8 B .*--otf2-in-place"):
            otf2_reader.read(path, in_place)
        return
    call = otf2_reader.read(path, in_place).ranks[2][0]
    assert (call.kind, call.size_bytes) == expect


@pytest.mark.parametrize("op, root_bytes, other_bytes, expect", [
    (CollectiveOp.REDUCE, (16, 64), (16, 0), 16),     # root not in place: sent s, received P*s
    (CollectiveOp.REDUCE, (0, 48), (16, 0), 16),      # root in place: received (P-1)*s
    (CollectiveOp.GATHER, (16, 64), (16, 0), 16),
    (CollectiveOp.SCATTER, (64, 16), (0, 16), 16),
    (CollectiveOp.SCATTER, (48, 0), (0, 16), 16),     # root in place
    (CollectiveOp.BCAST, (64, 16), (0, 16), 16),
])
def test_rooted_collectives_read_their_size_and_root(tmp_path, op, root_bytes, other_bytes, expect):
    a = Archive(tmp_path / "a", 4)
    for r in range(4):
        sent, received = root_bytes if r == 2 else other_bytes
        a.rank(r).call("MPI_X", 10, coll(op, sent, received, root=2, comm=a.world))
    trace = otf2_reader.read(a.close())
    assert [(c.size_bytes, c.root) for calls in trace.ranks for c in calls] == [(expect, 2)] * 4


def test_refusals_name_the_event_and_field(tmp_path):
    a = Archive(tmp_path / "sub", 4, sub=(0, 2))
    for r in (0, 2):
        a.rank(r).call("MPI_Allreduce", 10, coll(CollectiveOp.ALLREDUCE, 16, 16, comm=a.sub))
    with pytest.raises(InputError, match=r"\[rank 0, .*\]:3: MpiCollectiveEnd field 'communicator': allreduce on "
                                         r"'MPI_COMM_SPLIT' with 2 of 4 ranks"):
        otf2_reader.read(a.close())
    a = Archive(tmp_path / "scan", 2)
    for r in range(2):
        a.rank(r).call("MPI_Scan", 10, coll(CollectiveOp.SCAN, 8, 8, comm=a.world))
    with pytest.raises(InputError, match=r"field 'collective_op': scan is not replayed"):
        otf2_reader.read(a.close())
    a = Archive(tmp_path / "orphan", 2)
    a.rank(0).call("MPI_Wait", 10, lambda w, t: w.mpi_isend_complete(t, 7))
    a.rank(1).call("MPI_Barrier", 10, coll(CollectiveOp.BARRIER, 0, 0, comm=a.world))
    with pytest.raises(InputError, match=r"\[rank 0, .*\]:2: MpiIsendComplete field 'request_id': 7 names no isend"):
        otf2_reader.read(a.close())
    a = Archive(tmp_path / "peer", 2)
    a.rank(0).call("MPI_Send", 10, lambda w, t: w.mpi_send(t, 5, a.world, 0, 8))
    with pytest.raises(InputError, match=r"MpiSend field 'receiver': rank 5 is not in communicator 'MPI_COMM_WORLD'"):
        otf2_reader.read(a.close())
    a = Archive(tmp_path / "nbc", 2)
    for r in range(2):
        a.rank(r).call("MPI_Iallreduce", 10, lambda w, t: w.non_blocking_collective_request(t, 3))
    with pytest.raises(InputError, match=r"\[rank 0, .*\]:2: NonBlockingCollectiveRequest field 'event': "
                                         r"NonBlockingCollectiveRequest is not replayed"):
        otf2_reader.read(a.close())
    with pytest.raises(InputError, match=r"no OTF2 anchor file"):
        otf2_reader.read(str(tmp_path / "nothing"))
