"""Selectors against the cited MPICH and Open MPI rules (../shared/reference/allgather.md)."""
import pytest

from cxlsim.errors import InputError
from cxlsim.models.collectives import registry
from cxlsim.models.collectives.selectors import select


@pytest.mark.parametrize("p, m, expect", [
    # MPICH: total n = p*m; power-of-two p and n < 524288 -> RD; else n < 81920 -> Bruck; else ring.
    (8, 65535, "recursive_doubling"),   # n = 524280 < 524288
    (8, 65536, "ring"),                 # n = 524288: not < 524288, and not < 81920
    (4, 20479, "recursive_doubling"),
    (6, 13653, "bruck"),                # n = 81918 < 81920, p not a power of two
    (6, 13654, "ring"),                 # n = 81924
    (5, 16383, "bruck"),                # n = 81915
    (5, 16384, "ring"),                 # n = 81920: strict
    (1024, 1, "recursive_doubling"),
    (1000, 81, "bruck"),
    (1000, 82, "ring"),
])
def test_mpich_allgather(p, m, expect):
    assert select("mpich", "allgather", p, m) == (expect, None)


@pytest.mark.parametrize("p, m, expect, noted", [
    (2, 10**7, "two_proc", False),
    (16, 10**7, "recursive_doubling", False),      # p < 32: RD at any size
    (12, 1, "bruck", True),                        # non-power-of-two: Bruck
    (32, 1023, "recursive_doubling", False),       # p < 64: m < 1024 RD
    (32, 1024, "neighbor_exchange", False),        # m < 65536 NE
    (33, 1024, "ring", True),                      # NE with odd p -> ring
    (48, 1023, "bruck", True),                     # RD on non-power-of-two -> Bruck
    (32, 65536, "ring", False),
    (64, 511, "recursive_doubling", False),        # p < 128: m < 512 RD
    (64, 512, "neighbor_exchange", False),
    (64, 65536, "ring", False),
    (128, 131071, "neighbor_exchange", False),     # p < 256: < 131072 NE
    (128, 131072, "ring", False),                  # < 524288 ring
    (128, 524288, "neighbor_exchange", False),     # < 1048576 NE
    (128, 1048576, "ring", False),
    (512, 1, "recursive_doubling", True),          # beyond the reference's rows: says so
])
def test_ompi_allgather(p, m, expect, noted):
    name, note = select("ompi", "allgather", p, m)
    assert name == expect
    assert bool(note) == noted


def test_other_collectives():
    assert select("mpich", "allreduce", 8, 2047) == ("recursive_doubling", None)
    assert select("mpich", "allreduce", 8, 2048) == ("rabenseifner", None)
    assert select("ompi", "allreduce", 8, 10)[0] == "recursive_doubling"
    assert select("mpich", "broadcast", 8, 12287) == ("binomial", None)
    assert select("mpich", "broadcast", 7, 10**6) == ("binomial", None)            # P < 8
    assert select("mpich", "broadcast", 8, 12288) == ("scatter_recursive_doubling_allgather", None)
    assert select("mpich", "broadcast", 8, 524288) == ("scatter_ring_allgather", None)
    assert select("mpich", "broadcast", 12, 12288) == ("scatter_ring_allgather", None)  # not a power of two
    assert select("ompi", "broadcast", 8, 10) == ("binary_tree", None)  # Open MPI 5.0.9: 8 <= P < 16, s < 64
    assert select("ompi", "gather", 8, 10) == ("binomial", None)
    assert select("mpich", "reduce_scatter", 8, 10) == ("recursive_halving", None)
    with pytest.raises(InputError, match="workload.selector"):
        select("intel", "allgather", 8, 1)
    with pytest.raises(InputError, match="workload.collective"):
        select("mpich", "scan", 8, 1)


def test_every_choice_is_a_network_algorithm_in_the_registry():
    for library in ("mpich", "ompi"):
        for collective in ("allgather", "allreduce", "reduce_scatter", "broadcast", "gather"):
            for p in (2, 3, 8, 16, 33, 64, 300):
                for size in (1, 1024, 65536, 1 << 20):
                    name, _ = select(library, collective, p, size)
                    algo, _ = registry.lookup(collective, name, p)
                    assert algo.transport == "network", (library, collective, p, size, name)
