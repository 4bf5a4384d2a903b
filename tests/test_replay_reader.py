"""The SimGrid time-independent trace reader: real traces made by smpirun -trace-ti, and every malformed
input refused with an error naming the file, the line and the field."""
from __future__ import annotations

import json
import os
import re

import pytest

from cxlsim.errors import InputError
from cxlsim.replay import simgrid
from cxlsim.replay.trace import ANY_SOURCE, ANY_TAG, check_collectives

TRACES = os.path.join(os.path.dirname(__file__), "data", "traces")


def real(name):
    return os.path.join(TRACES, name, f"{name}.txt")


def refused(path, *patterns, speed=1e9):
    with pytest.raises(InputError) as err:
        simgrid.read(str(path), speed)
    message = str(err.value)
    for pattern in patterns:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"
    return message


# ------------------------------------------------------------------ real traces

def test_real_p2p_trace_is_read_with_its_wildcards_sizes_and_requests():
    trace = simgrid.read(real("p2p"), 20000.0)
    assert trace.size == 4 and trace.host_speed_flops_per_s == 20000.0
    assert [os.path.basename(f).split("_")[-1] for f in trace.files] == [f"rank-{i}.txt" for i in range(1, 5)]
    rank1 = trace.ranks[1]
    recv = next(c for c in rank1 if c.kind == "recv")
    assert (recv.peer, recv.tag, recv.size_bytes) == (ANY_SOURCE, ANY_TAG, 800)  # 100 MPI_DOUBLE
    rank3 = trace.ranks[3]
    assert [c.kind for c in rank3 if c.kind != "compute"][:3] == ["irecv", "recv", "wait"]
    assert next(c for c in rank3 if c.kind == "recv").size_bytes == 40   # 10 MPI_INT
    sendrecv = next(c for c in rank3 if c.kind == "sendrecv")
    assert (sendrecv.peer, sendrecv.src, sendrecv.size_bytes, sendrecv.recv_bytes) == (0, 2, 512, 512)
    waits = [c for c in trace.ranks[0] if c.kind == "wait" and c.src == ANY_SOURCE]
    assert len(waits) == 3 and all((w.dst, w.tag) == (0, 6) for w in waits)
    assert check_collectives(trace) == 1  # the final barrier


def test_real_collective_trace_sizes_roots_and_sidecar_speed():
    trace = simgrid.read(real("colls"))
    assert trace.host_speed_flops_per_s == 1e9  # from colls.txt.meta.json
    got = [(c.kind, c.size_bytes, c.root) for c in trace.ranks[2] if c.kind not in ("compute", "barrier")]
    assert got == [("allreduce", 128, 0), ("allreduce", 65536, 0), ("allgather", 4096, 0), ("alltoall", 2048, 0),
                   ("reducescatter", 8192, 0), ("bcast", 32768, 1), ("reduce", 8192, 2), ("gather", 2048, 0),
                   ("scatter", 128, 3)]
    rs = next(c for c in trace.ranks[0] if c.kind == "reducescatter")
    assert rs.counts == (2048,) * 4
    assert check_collectives(trace) == 19


def test_ranks_are_ordered_by_the_line_not_by_the_file_name(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["compute 5"], 1: ["compute 7"]}, names=[1, 0])  # rank-1.txt holds rank 1
    trace = simgrid.read(path, 1.0)
    assert [c.amount for c in (trace.ranks[0][0], trace.ranks[1][0])] == [5.0, 7.0]
    assert trace.files[0].endswith("t_rank-2.txt")


def test_index_paths_are_relative_to_the_index_file(tmp_path, write_trace):
    write_trace(tmp_path / "files", {0: ["barrier"], 1: ["barrier"]})
    index = tmp_path / "sub" / "index.txt"
    index.parent.mkdir()
    index.write_text("../files/t_rank-1.txt\n../files/t_rank-2.txt\n")
    assert simgrid.read(str(index)).size == 2
    index.write_text("../files/t_rank-1.txt\n../files/missing.txt\n")
    refused(index, r"index\.txt:2: per-rank file '../files/missing.txt' not found")


def test_a_rank_file_given_as_the_index_is_refused(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["barrier"]})
    refused(os.path.join(path, "t_rank-1.txt"), r"t_rank-1\.txt:1: expected the index file")


# ------------------------------------------------------------------ lossy calls

def test_derived_datatype_is_refused_naming_file_line_and_field():
    refused(real("derived"), r"rank-1\.txt:3: send: field 'datatype' \(field 6\)", "derived datatype")


def test_reduce_scatter_block_is_refused_naming_file_line_and_field():
    refused(real("block"), r"rank-1\.txt:3: reducescatter: field 'recvcounts'", "MPI_Reduce_scatter_block")


@pytest.mark.parametrize("action", ["allgatherv 4 4 4 0 0", "gatherv 4 4 4 0 0 0", "alltoallv 8 4 4 8 4 4"])
def test_v_collectives_are_refused(tmp_path, write_trace, action):
    path = write_trace(tmp_path, {0: [action], 1: [action]})
    refused(path, r"rank-1\.txt:2: .*field 'action'", "not replayed")


# ------------------------------------------------------------------ malformed lines

@pytest.mark.parametrize("line, field", [
    ("frobnicate 1", "action"),
    ("send 1 0 ten 0", "count"),
    ("send 1 0 10.5 0", "count"),
    ("send 1 0 -3 0", "count"),
    ("send 2 0 10 0", "dst"),
    ("send -333 0 10 0", "dst"),
    ("send 1 -444 10 0", "tag"),
    ("recv 7 0 10 0", "src"),
    ("send 1 0 10 99", "datatype"),
    ("send 1 0", "count"),
    ("send 1 0 10 0 0", r"\(extra\)"),
    ("compute fast", "flops"),
    ("compute -1", "flops"),
    ("compute nan", "flops"),
    ("bcast 10 5 0", "root"),
    ("allreduce 10", "flops"),
    ("allgather 4 8 0 0", "recvcount"),
    ("reducescatter 1 2", "flops"),
    ("wait 0 1 x", "tag"),
    ("sendRecv 4 1 4", "src"),
])
def test_malformed_line_names_file_line_and_field(tmp_path, write_trace, line, field):
    path = write_trace(tmp_path, {0: ["compute 1", line], 1: ["compute 1"]})
    refused(path, r"t_rank-1\.txt:3: ", f"field '{field}")


def test_a_line_of_another_rank_in_a_file_is_refused(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["compute 1"], 1: ["compute 1"]})
    with open(os.path.join(path, "t_rank-1.txt"), "a") as fh:
        fh.write("1 compute 2\n")
    refused(path, r"t_rank-1\.txt:4: compute: field 'rank' \(field 1\): expected 0")


def test_two_files_of_one_rank_are_refused(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["compute 1"], 1: ["compute 1"]}, names=[0, 0])
    refused(path, r"t_rank-2\.txt:1: .*field 'rank'.*also in .*t_rank-1\.txt")


def test_a_wait_that_names_no_request_is_refused(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["isend 1 3 4 0", "wait 0 1 4"], 1: ["recv 0 3 4 0"]})
    refused(path, r"t_rank-1\.txt:3: wait: fields 'src dst tag' \(0 1 4\) name no request")


def test_a_wait_after_a_test_of_its_request_is_allowed(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["irecv 1 9 1 0", "test 1 0 9", "wait 1 0 9"], 1: ["send 0 9 1 0"]})
    assert [c.kind for c in simgrid.read(path).ranks[0]] == ["irecv", "test", "wait"]


def test_collective_sequences_that_disagree_are_refused_naming_the_line(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["barrier", "allreduce 4 0 0"], 1: ["barrier", "bcast 4 0 0"]})
    trace = simgrid.read(path)
    with pytest.raises(InputError, match=r"t_rank-2\.txt:3: rank 1's collective #2 is bcast of 32 B \(root 0\), "
                                         r"but rank 0's is allreduce of 32 B \(.*t_rank-1\.txt:3\)"):
        check_collectives(trace)
    path = write_trace(tmp_path / "b", {0: ["barrier", "barrier"], 1: ["barrier"]})
    with pytest.raises(InputError, match=r"t_rank-1\.txt:3: rank 0's collective #2 \(barrier of 0 B\) has no "
                                         "counterpart on rank 1"):
        check_collectives(simgrid.read(path))


def test_datatype_codes_convert_counts_to_bytes(tmp_path, write_trace):
    lines = ["allreduce 3 0 4", "allreduce 3 0 5", "allreduce 3 0 19", "allreduce 3 0 21", "allreduce 3 0 7",
             "allreduce 3 0 9", "allreduce 3 0 20", "allreduce 3 0 2", "allreduce 3 0 3", "allreduce 3 0 6",
             "allreduce 3 0 0", "allreduce 3 0 1"]
    path = write_trace(tmp_path, {0: lines})
    sizes = [c.size_bytes for c in simgrid.read(path).ranks[0]]
    assert sizes == [24, 12, 12, 3, 24, 3, 24, 3, 6, 3, 24, 12]


def test_default_datatype_is_byte_or_double_after_an_init_with_an_argument(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["send 0 1 10"]})
    assert simgrid.read(path).ranks[0][0].size_bytes == 10
    with open(os.path.join(path, "t_rank-1.txt"), "w") as fh:
        fh.write("0 init 1\n0 send 0 1 10\n0 finalize\n")
    assert simgrid.read(path).ranks[0][0].size_bytes == 80


def test_host_speed_option_and_sidecar(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["compute 5"]})
    assert simgrid.read(path).host_speed_flops_per_s is None
    (tmp_path / "trace.meta.json").write_text(json.dumps({"host_speed_flops_per_s": 2e4}))
    assert simgrid.read(path).host_speed_flops_per_s == 2e4
    assert simgrid.read(path, 2e4).host_speed_flops_per_s == 2e4
    refused(path, r"--trace-host-speed: 1e\+09 flop/s, but the trace's sidecar .*trace\.meta\.json says 20000")
    (tmp_path / "trace.meta.json").write_text("{\n  \"speed\": 1\n}")
    refused(path, r"trace\.meta\.json: expected a JSON object with the key host_speed_flops_per_s", speed=None)
    (tmp_path / "trace.meta.json").write_text("{\n  oops\n}")
    refused(path, r"trace\.meta\.json:2: not valid JSON", speed=None)


@pytest.mark.parametrize("text, speed", [("20kf", 2e4), ("1Gf", 1e9), ("20000", 2e4), ("1.5e3", 1500.0),
                                         ("3 Mflops", 3e6)])
def test_parse_speed(text, speed):
    assert simgrid.parse_speed(text) == speed


@pytest.mark.parametrize("text", ["fast", "0", "-5kf", "1 GB/s"])
def test_parse_speed_refuses(text):
    with pytest.raises(InputError, match="--trace-host-speed"):
        simgrid.parse_speed(text)


def test_a_binary_rank_file_is_refused(tmp_path, write_trace):
    path = write_trace(tmp_path, {0: ["barrier"]})
    with open(os.path.join(path, "t_rank-1.txt"), "wb") as fh:
        fh.write(b"0 init\n\x00\x01")
    refused(path, r"per-rank trace file .*t_rank-1\.txt.*binary")


def test_an_empty_directory_is_refused(tmp_path):
    refused(tmp_path, "no per-rank .txt files")


@pytest.mark.parametrize("raw, pattern", [
    ("0", r"t_rank-1\.txt:2: line: field 'action' \(field 2\): expected 'RANK ACTION FIELDS\.\.\.'"),
    ("x compute 1", r"t_rank-1\.txt:2: compute: field 'rank' \(field 1\): expected an integer"),
    ("5 compute 1", r"t_rank-1\.txt:2: compute: field 'rank' \(field 1\): expected a rank below 1"),
])
def test_a_line_without_an_action_or_with_a_bad_rank_is_refused(tmp_path, raw, pattern):
    (tmp_path / "t_rank-1.txt").write_text(f"0 init\n{raw}\n")
    refused(tmp_path, pattern)


def test_otf2_without_the_extra_is_a_named_error_and_its_option_is_refused_elsewhere(tmp_path, monkeypatch):
    import sys

    from cxlsim.replay import cli, otf2_reader

    (tmp_path / "traces.otf2").write_text("")
    monkeypatch.setitem(sys.modules, "otf2", None)  # import otf2 raises ImportError
    assert not otf2_reader.available()
    assert cli.is_otf2(str(tmp_path)) and cli.is_otf2("x/traces.otf2") and not cli.is_otf2(str(tmp_path / "t.txt"))
    with pytest.raises(InputError, match=r"reading OTF2 needs the otf2 package: pip install 'cxlsim\[otf2\]'"):
        cli.read_trace(str(tmp_path), None, None)
    with pytest.raises(InputError, match=r"--otf2-in-place: .* is not an OTF2 archive"):
        cli.read_trace(os.path.join(TRACES, "halo", "halo.txt"), None, "yes")
