"""The sharded centre of the DES's pool slots (models/training/pool_shared.py, centre="sharded")."""
from __future__ import annotations

import collections

import pytest

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.models.training import cluster, pool_shared
from cxlsim.models.training.core import Job

LINE = 64


def region(W, G, coherence, centre="sharded"):
    return pool_shared.SharedRegion(get_cxl_preset("cxl3-pool"), W, G, coherence, centre)


def merged_bytes(r, owned):
    """Run worker 0's merge alone; per event kind, the bytes (READ, WRITE, FLUSH) or the count (others)."""
    log = r.tr.enable_log()
    if r.centre == "sharded":
        r.env.run(r.env.process(r.merge_sharded(0, owned, 0.0)))
    else:
        r.env.run(r.env.process(r.merge(0, 0.0)))
    totals = collections.Counter()
    for _, op, _, arg in log:
        kind = PoolEvent(op)
        totals[kind] += arg if kind in (PoolEvent.READ, PoolEvent.WRITE, PoolEvent.FLUSH) else 1
    return totals


@pytest.mark.parametrize("coherence", list(Coherence))
@pytest.mark.parametrize("W, G", [(2, 137808), (4, 4096), (16, 1 << 20), (3, 1000)])
def test_a_sharded_merge_reads_its_shard_of_every_slot_and_the_centre_and_writes_its_shard(coherence, W, G):
    r = region(W, G, coherence)
    assert sum(r.shard_span(s)[1] for s in range(W)) == r.vector  # the shards tile the vector
    lo, n = r.shard_span(0)
    got = merged_bytes(r, [0])
    assert got[PoolEvent.READ] == W * (2 * LINE + n) + W * LINE + r.vector  # ~2G, not W x G
    assert got[PoolEvent.WRITE] == n and got[PoolEvent.FLAG_STORE] == 2  # the shard; its sequence, odd then even
    slots = merged_bytes(region(W, G, coherence, "slots"), None)
    assert slots[PoolEvent.READ] == W * r.slot_stride
    if coherence is Coherence.FLUSH:  # flush mode drops stale copies of all it reads, and writes its shard back
        assert got[PoolEvent.FLUSH] == W * (2 * LINE + n) + (LINE + n) + LINE + W * LINE + r.vector


def test_a_sharded_merge_is_its_two_reads_its_fold_and_a_push_of_the_shard():
    """Cross-check on cxl3-pool (uncongested, hw): the reads are one load plus their lines at the host's
    bandwidth each (as the slot merge's), the fold (W - 1) x the shard's bytes at the reduction rate, and the
    shard's write a push: its streamed bytes and their write-back (2 x path), plus at most the sequence
    stores' reads for ownership and a fence."""
    W, G, ns_per_byte = 2, 137808, 0.5
    r = region(W, G, Coherence.HW)
    fig = r.tr.figures()
    _, n = r.shard_span(0)
    r.env.run(r.env.process(r.merge_sharded(0, [0], ns_per_byte)))
    reads = 2 * fig.load_ns + (W * (2 * LINE + n) + W * LINE + r.vector) / fig.host_bw_bytes_per_ns
    fold = (W - 1) * n * G / r.vector * ns_per_byte
    write = r.env.now - reads - fold
    streamed = n / fig.host_bw_bytes_per_ns + 2 * fig.path_ns
    assert streamed <= write <= streamed + 2 * fig.load_ns + fig.fence_ns


def test_shards_of_failed_workers_go_to_the_next_live_one():
    owners = pool_shared.ShardOwners(4)
    assert [owners.owned(w) for w in range(4)] == [[0], [1], [2], [3]]
    owners.failed[1] = owners.failed[3] = True
    assert [owners.owned(w) for w in range(4)] == [[0, 3], [], [1, 2], []]


def test_an_unknown_centre_is_refused_naming_it():
    with pytest.raises(InputError, match="centre"):
        region(2, 4096, Coherence.HW, "tree")


def _spec_job(W, G, step_ns):
    spec = cluster.from_dict({"name": "t", "interconnect": "ib-hdr", "precision": "fp32",
                              "nodes": [{"gpu": "v100", "repeat": W}]})
    job = Job(model="t", batch=32, precision="fp32", gradient_dtype="fp32", gradient_bytes=G,
              iteration_ns=(step_ns,) * W, reduce_bw_bytes_per_ns=(6.0,) * W)
    return spec, job


@pytest.mark.parametrize("run", [pool_shared.run_async_on_pool, pool_shared.run_hybrid_on_pool])
def test_sixteen_workers_with_a_large_vector_run_faster_with_the_sharded_centre(run):
    """16 workers, an 8 MB vector, 2 ms steps on cxl3-pool: a slot merge reads 16 x 8 MB (about 11 ms at a
    host's 12.3 GB/s), a sharded one about 2 x 8 MB (1.4 ms); the same tickets are spent either way."""
    W, G, steps = 16, 8 << 20, 3
    spec, job = _spec_job(W, G, 2e6)
    pool = get_cxl_preset("cxl3-pool")
    kw = dict(steps=steps, local_ns=[[2e6]] * W, pool=pool, coherence=Coherence.HW)
    slots, sharded = run(spec, job, **kw), run(spec, job, centre="sharded", **kw)
    assert slots.extra["tickets"] == sharded.extra["tickets"] == steps * W
    assert sharded.params["centre"] == "sharded" and slots.params["centre"] == "slots"
    assert sharded.elapsed_ns < slots.elapsed_ns / 3


def test_a_failed_workers_shard_is_merged_by_the_next_one_and_the_run_ends():
    W, G, steps = 4, 1 << 16, 6
    spec, job = _spec_job(W, G, 1e6)
    result = pool_shared.run_async_on_pool(spec, job, steps=steps, local_ns=[[1e6]] * W,
                                           pool=get_cxl_preset("cxl3-pool"), centre="sharded",
                                           stop_after=[None, 2, None, None])
    assert result.extra["tickets"] == steps * W and result.extra["local_steps"][1] == 2
