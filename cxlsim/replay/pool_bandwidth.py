"""Windowed bandwidth over the pool's send/recv protocol: OSU's osu_bw and osu_mbw_mr loops, and their closed forms.

The loop (OMB's osu_bw for one pair, osu_mbw_mr for `pairs` pairs at once). Each
iteration, every sender posts `window` sends of m bytes to its receiver and waits
for them, then receives a 4-byte acknowledgement message; every receiver posts
`window` receives, waits for them and sends that acknowledgement. OSU's window is
64 messages. The bandwidth is pairs * window * m / T (bytes/ns = GB/s), T being one
steady iteration; the message rate is pairs * window / T. Messages go through
`cxlsim.replay.pool_messages` (mailbox slots with full/ack flags, messages longer
than a slot in pieces): its slots are what lets several messages be in flight.

Placement (`simulate_iteration_ns`): two hosts, as cMPI ran osu_mbw_mr: every
sender on host 0 and every receiver on host 1 (rank q sends to rank q + pairs), so
the pairs share their host's issue port. With one pair this is OSU's osu_bw.

Closed form (`iteration_ns`), flush mode (steady state: every piece number at least
`slots`, so every send first polls its slot's ack). Figures as in
`pool_messages.message_ns`: X = 64/b, L, path p, F (clflushopt per line), f (fence),
I (a flush's acknowledgement), K (a write's least time to acknowledgement); for a
piece of W bytes (whole lines, n = W/64), D = W/b and S = max(D, W/B):

    poll  = max(2F + I, X + 2p, K) + f + (X + L)      a poll just after one's own flag's clflushopt
                                                      (the fence waits for that line's write-back)
    write = max(D + nF + I, 2p + S, K) + f + (X + L)   stream, flush, sfence, flag store
    sender cycle   s(W) = poll + write
    receiver cycle r(W) = poll + (nF + I + f) + (L + S) + (X + L)   drop stale lines, read, ack store

With `pairs` = k senders on one host, their streams share the host's issue port
at once, so a sender's cycle grows by (k - 1) D: s_k(W) = s(W) + (k - 1) D. The
slots let the faster side run ahead, so in the steady state the slower side sets
the pace, c(W) = max(r(W), s_k(W)) per piece. One iteration over the pieces
W_1..W_N of the window's messages (N = window x pieces per message):

    T = [poll + write(W_1) + F]                        the first send, after the last ack's receipt
      + [(F + I + f + X + L) + (n_1 F + I + f) + (L + S_1) + (X + L)]   its receipt
      + sum_{i=2..N} c(W_i)
      + [poll + write(64) + F]                         the 4-byte acknowledgement message's send
      + [(F + I + f + X + L) + (F + I + f) + (L + S(64)) + (X + L)]     and its receipt

It follows the DES's own rules (`cxlsim.fabric.pool_path`). One pair: within 0.3% of
the DES from 1 B to 4 MiB on the cMPI descriptions (vp-cmpi-direct, vp-cmpi-switch),
equal to rounding up to 100 B; the rest is the device FIFO's queueing between the
sender's stream and the receiver's read, which the form leaves out. Several pairs:
the senders' single-line polls and flag stores also queue behind the other senders'
streams, in part; on vp-cmpi-direct, 2 pairs within 1.02% (the worst at 64 KiB + 1 B),
4 pairs within 1.6% (4 KiB), and 8 and 16 pairs within 0.06% at 1 MiB; between 512 B and
16 KiB the misses are larger: 8 pairs -2.48% at 512 B (the form slower), +1.21% at 2 KiB,
16 pairs -1.45% at 512 B, +1.39% at 1 KiB (benchmarks/pool_bw.py, 512 B-64 KiB). A port
reserves a whole transfer at its issue (`Port.reserve_run`), so a sender's single-line
poll, read for ownership and flag write-back wait behind every stream issued before them;
(k - 1) D is that wait when the senders issue in lockstep, which the DES reaches at 1 MiB
but not in between: at 4 pairs and 4 KiB a sender's piece cycles range from 949 ns (s,
no wait) to 2158 ns, mean 1525 against s_4 = 1549. The receivers' reads share host 1's
port too (r carries none of that wait: 2 pairs 2 KiB, the DES 0.7% slower).
Where the sender sets the pace, the receiver polls
for each flag, and the last piece's find is up to one poll late (under 0.2% of a
64-message window).

Hardware coherence (CXL 3 back-invalidation), one pair. With R = X + L + 2p, a load
or store of a line the peer holds (fetched with a recall, or after a BISnp to the
peer's copy), and a stream's acknowledgement waiting for its BISnp to the reader's
cached copies of the slot:

    s(W) = R + max(S + 4p, K) + f + R             ack poll, stream and sfence, flag store
    r(W) = R + (L + S) + R                        flag read, slot read, ack store
    T = sum_i s(W_i) + sum_{i>=2} max(0, r(W_i) - s(W_i)) - R
      + [(R if a message is one piece, else 2p) + r(W_N)]      the last piece's receipt
      + [R + max(S(64) + 4p, K) + f + R] + [R + L + S(64) + R] the acknowledgement message

Equal to the DES to rounding on cxl3-pool and mhd3-pool wherever a message's pieces
are all one size (1 B-1 MiB checked); a message with a shorter last piece (64 KiB +
1 B) within 1.2%, 200000 B within 0.42%. Several pairs on a hw pool: the DES only
(`iteration_ns` refuses them: the senders' streams do not share the port in lockstep
there; adding (k - 1) D per sender, as in flush mode, missed by up to 20%).
"""
from __future__ import annotations

from collections import Counter

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError, RunError
from cxlsim.replay.pool_messages import DEFAULT_SLOT_BYTES, DEFAULT_SLOTS, LINE_BYTES, PoolMessages, whole_lines

__all__ = ["OSU_WINDOW", "ACK_BYTES", "pieces_of", "piece_cycles_ns", "iteration_ns", "simulate_iteration_ns",
           "bandwidth_gb_s"]

OSU_WINDOW = 64
"""Messages in flight per window (OMB's osu_bw and osu_mbw_mr default)."""
ACK_BYTES = 4
"""The receiver's acknowledgement message at the end of a window, bytes (OMB's osu_bw)."""
_DATA_TAG, _ACK_TAG = 1, 2


def pieces_of(size_bytes: int, slot_bytes: int = DEFAULT_SLOT_BYTES) -> list[int]:
    """The pieces one message of `size_bytes` is cut into by the protocol, each in whole lines, bytes."""
    slot = whole_lines(slot_bytes)
    count = max(1, -(-size_bytes // slot))
    return [whole_lines(min(slot, size_bytes - i * slot)) for i in range(count)]


def _terms(fig):
    b, big_b = fig.host_bw_bytes_per_ns, fig.device_bw_bytes_per_ns
    x, load, path = LINE_BYTES / b, fig.load_ns, fig.path_ns
    flush, fence, inv, wb = fig.flush_ns_per_line, fig.fence_ns, fig.invalidate_ns, fig.writeback_ns
    poll = max(2 * flush + inv, x + 2 * path, wb) + fence + (x + load)

    def stream(w):
        return max(w / b, w / big_b)

    def write(w):
        return max(w / b + (w // LINE_BYTES) * flush + inv, 2 * path + stream(w), wb) + fence + (x + load)

    def drain(w):  # a receiver's work on a piece once its flag is seen: drop stale lines, read, store the ack
        return (w // LINE_BYTES) * flush + inv + fence + (load + stream(w)) + (x + load)

    first_poll = flush + inv + fence + x + load  # a poll with no write-back of one's own pending
    return poll, write, drain, first_poll, flush, b


def _hw_terms(fig):
    b = fig.host_bw_bytes_per_ns
    path = fig.path_ns
    recall = LINE_BYTES / b + fig.load_ns + 2 * path  # a load or store of a line the peer holds

    def stream(w):
        return max(w / b, w / fig.device_bw_bytes_per_ns)

    def write(w):  # stream, its BISnp to the reader's copies, sfence
        return max(stream(w) + 4 * path, fig.writeback_ns) + fig.fence_ns

    def drain(w):
        return fig.load_ns + stream(w) + recall
    return recall, write, drain, path


def piece_cycles_ns(fig, piece_bytes: int, pairs: int = 1) -> tuple[float, float]:
    """(sender, receiver) steady cycle per piece of `piece_bytes` (whole lines), ns, with `pairs` senders
    sharing one host's issue port (see the module docstring): s_k(W) and r(W), either coherence mode."""
    w = whole_lines(piece_bytes)
    if fig.coherence == Coherence.HW:
        _check_hw_pairs(pairs)
        recall, write, drain, _ = _hw_terms(fig)
        return recall + write(w) + recall, recall + drain(w)
    poll, write, drain, _, _, b = _terms(fig)
    return poll + write(w) + (pairs - 1) * w / b, poll + drain(w)


def iteration_ns(fig, size_bytes: int, window: int = OSU_WINDOW, pairs: int = 1,
                 slot_bytes: int = DEFAULT_SLOT_BYTES) -> float:
    """One steady iteration of the windowed loop (the module docstring's T), ns, on a pool with figures `fig`
    (`PoolTransport.figures()`); hw coherence: one pair."""
    _check(size_bytes, window, pairs)
    message = pieces_of(size_bytes, slot_bytes)
    if fig.coherence == Coherence.HW:
        return _hw_iteration_ns(fig, message, window, pairs)
    poll, write, drain, first_poll, flush, _ = _terms(fig)
    later = Counter(message * window)  # every piece but the window's first one, by size
    later[message[0]] -= 1
    ack = whole_lines(ACK_BYTES)
    total = poll + write(message[0]) + flush + first_poll + drain(message[0])
    for w, count in later.items():
        total += count * max(piece_cycles_ns(fig, w, pairs))
    return total + poll + write(ack) + flush + first_poll + drain(ack)


def _hw_iteration_ns(fig, message, window, pairs) -> float:
    """hw mode's T (the module docstring), one pair."""
    _check_hw_pairs(pairs)
    recall, write, drain, path = _hw_terms(fig)
    counts = Counter(message * window)
    total = 0.0
    for w, count in counts.items():
        sender, receiver = piece_cycles_ns(fig, w)
        total += count * sender + (count - (w == message[0])) * max(0.0, receiver - sender)
    last = message[-1]
    total -= recall                                             # the last piece: up to its flag store
    total += (recall if len(message) == 1 else 2 * path) + recall + drain(last)
    ack = whole_lines(ACK_BYTES)
    return total + recall + write(ack) + recall + recall + drain(ack)


def _check_hw_pairs(pairs) -> None:
    if pairs != 1:
        raise InputError(f"pairs: the windowed bandwidth's hw closed form covers one pair, got {pairs}; "
                         f"several pairs on a hw pool: simulate_iteration_ns")


def bandwidth_gb_s(size_bytes: int, iteration: float, window: int = OSU_WINDOW, pairs: int = 1) -> float:
    """The loop's aggregate bandwidth, GB/s (bytes/ns), from one iteration of `iteration` ns."""
    return pairs * window * size_bytes / iteration


def simulate_iteration_ns(transport, size_bytes: int, window: int = OSU_WINDOW, pairs: int = 1,
                          iterations: int = 1, skip: int = DEFAULT_SLOTS,
                          slot_bytes: int = DEFAULT_SLOT_BYTES) -> float:
    """The windowed loop on the DES, ns per iteration: the mean over `iterations` iterations after `skip`
    warm-up ones (at least the slots per pair, so that every send polls its slot's ack, as in the steady
    state). `transport`: a fresh pool transport of 2 x `pairs` ranks (senders 0..pairs-1, receivers
    pairs..2 pairs-1; e.g. `CXLPoolTransport(preset, 2, ranks_per_host=pairs)`, cMPI's placement)."""
    _check(size_bytes, window, pairs)
    if transport.size != 2 * pairs:
        raise InputError(f"transport: the loop of {pairs} pairs needs 2 x {pairs} ranks, the transport has "
                         f"{transport.size}")
    if not isinstance(iterations, int) or iterations < 1:
        raise InputError(f"iterations: expected an integer >= 1, got {iterations!r}")
    if not isinstance(skip, int) or skip < 0:
        raise InputError(f"skip: expected an integer >= 0, got {skip!r}")
    messages = PoolMessages(transport, slot_bytes=slot_bytes)
    stamps: list[float] = []

    def sender(rank, peer):
        for _ in range(skip + iterations):
            yield transport.all_of([messages.send(rank, peer, size_bytes, payload=k, tag=_DATA_TAG)
                                    for k in range(window)])
            yield messages.recv(rank, peer, tag=_ACK_TAG)
            if rank == 0:
                stamps.append(transport.now())

    def receiver(rank, peer):
        for _ in range(skip + iterations):
            posted = [messages.recv(rank, peer, tag=_DATA_TAG) for _ in range(window)]
            got = yield transport.all_of(posted)
            if [got[event] for event in posted] != list(range(window)):
                raise RunError(f"rank {rank}: a window's messages arrived out of order or lost")
            yield messages.send(rank, peer, ACK_BYTES, payload=None, tag=_ACK_TAG)

    processes = {}
    for q in range(pairs):
        processes[q] = sender(q, q + pairs)
        processes[q + pairs] = receiver(q + pairs, q)
    messages.run(processes)
    start = stamps[skip - 1] if skip else 0.0
    return (stamps[-1] - start) / iterations


def _check(size_bytes, window, pairs) -> None:
    if not isinstance(size_bytes, int) or size_bytes < 1:
        raise InputError(f"size_bytes: expected an integer >= 1, got {size_bytes!r}")
    if not isinstance(window, int) or window < 1:
        raise InputError(f"window: expected an integer >= 1, got {window!r}")
    if not isinstance(pairs, int) or pairs < 1:
        raise InputError(f"pairs: expected an integer >= 1, got {pairs!r}")
