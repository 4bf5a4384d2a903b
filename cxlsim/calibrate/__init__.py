"""Calibration: fit the simulator to this machine, or to a user's OSU results, and state its error.

Two sources of figures, one profile format.

**Local measurements** (`cxlsim calibrate`). Primitive microbenchmarks of this host,
never the allgather itself:

- the flag round trip: two processes bounce the pool's flag lines
  (`PoolKernel.flag_pingpong`, the allgather's own publish/poll code, hw and flush);
- cache maintenance: clflushopt over dirty lines then sfence (the writer), over clean
  lines then mfence (the reader), over dirty lines then mfence (the write-backs'
  acknowledgement), and a bare mfence, by size (`_kernels.line_op_ns`);
- the per-call software overhead: an np = 1, zero-byte call of the bench's own steps
  (`bench.side_op`), timed by the same loop (`bench.time_loop`): the copy call for copy
  mode, the whole zero-copy step (send_view, write_block, allgather_zero_copy, read_pass)
  for zero-copy mode; measured with the primitives and again before every allgather job;
- the copy bandwidth by size (`copybw.copy_bandwidth_curve`) and the application's
  write pass (`_kernels.write_block` of a block, the bench's store) and read pass (`_kernels.read_pass` over np blocks);
- the concurrent copy (`PoolKernel.concurrent_copy`, np = 2): both ranks at once write their
  block into their slot, then copy out the other ranks' blocks and their own from the send
  buffer, as the copy-mode kernel does (or read every block of the round in place), the other's
  freshly written by the other core, timed per phase (in, write-back, invalidate, out;
  'in' and 'write-back' end with an mfence, so the stores' drain and the write-backs'
  acknowledgement, which the flag store waits behind, are in them and not in the untimed
  wait) and never through the allgather; one process at a time, copies miss that cross-core
  traffic in both directions, which made the DES about 2x too fast at 16-64 KiB. It is
  measured in its own jobs (A B A B) and, like the flag round trip, before and after every
  allgather job, so the fit and the kept runs share the host placement; jobs in a slow
  placement are left out and the rest taken by median (`concurrent_curves`). The ranks are
  joined per round (`join_ranks`): the phases before the publish by the slower rank of each
  round, since every rank's call waits for the last publish (at hw 16-64 KiB the median of
  the per-round max is 1.3x the larger rank median), the others by the mean over the ranks.

From these alone `fit_local` builds a `local-host` pool model: no switch, no media
latency, a host-to-pool path solved so that the DES's own flag ping-pong on
`CXLPoolTransport` reproduces the measured round trip (the DES is linear in the path, so two
runs give it, unless an acknowledgement below outlasts the path: then it bisects; in flush
mode the DES's polls are quantised, so its round trip jumps with the path and the solve
lands on the jump, reported as its residual); that is the 'pingpong' rule, used in flush
mode. In hw mode ('auto' rule, `AUTO_PATH_RULE`) the path is solved with the 'sync' rule
instead: the DES's bare sync, where both ranks' flags cross at once, costs one hop, half the
round trip. The DES's sync costs about a whole round trip at the ping-pong path, since its
store waits to take the line before the poll starts, where x86 posts the store (no parameter
is fitted to the allgather),
host bandwidth per size from the concurrent copy (copy-in + copy-out less the latency the
DES already charges around them, 4 x path; without the primitive, e.g. np != 2, a blend of
one-process and remote copies), clflushopt per line from the
maintenance lines or, if larger, from the concurrent write-back and invalidation at that
size, fences from the maintenance lines: in flush mode a bare mfence, plus a clean line's
and a dirty line's acknowledgement beyond it (`CXLHostParams.invalidate_ns` and
`writeback_ns`, which the DES's fences wait for: a flush-mode call of 1 B costs about 400 ns
more than one of 0 B here, almost all of it these waits and the misses after them), the
per-call overhead as CPU time. `predict_local` then
runs the DES (`cxl_pool`, `cxl_pool_zero_copy`) for every allgather measurement, which
are all held out (`measure_allgather`: the emulator's bench harness, interleaved A B A B,
medians; each bench run judged by its own probes, as the collectives' blocks are, `states`:
a job whose round trips before and after it are not fast is repeated and its primitives not used).

**The allreduce threshold** (`allreduce_threshold`): the emulator's small and large pool
allreduce, timed one after the other per size at np 2; the smallest size from which the
large one wins at every larger size is kept in the profile (``emulator.allreduce_large_bytes``)
and becomes the emulator's default when CXLSIM_PROFILE names the profile
(`cxlsim.emulator.tuning`).

**The other pool collectives** (`collective_measure`, `collectives`; issue 14 item 7): two more
primitives, the fold (the kernels' own reduction of two blocks, per dtype and op, one process;
and the same with the other block rewritten by the other core) and each collective's np = 1
per-call overhead, predict the emulator's allreduce, reduce_scatter, broadcast, alltoall and
barrier at np 2 in the DES (`models/collectives/pool_collectives.py` on the local-host
transport), with a host bandwidth per collective from the concurrent-copy phases of the bytes
it moves; they are measured as held-out data in jobs that carry their own concurrent-copy
primitive and placement probes.

**Emulated CXL timing.** `predict_injected` adds the charges cxl_ops.h documents
(flags +L per wait, +L per block read one block after the other, copies at min(host,
B)) as a DES workload on the same transport and predicts the emulator under them.

**Users' OSU files** (`cxlsim calibrate --from-osu FILE...`). osu_latency and osu_bw
give LogGP per protocol regime (`cxlsim.loggp.fit_loggp`); that is the fit. The allgather
is projected with it by the DES on the base preset (nic o, g, G and link latency per
regime; `network_model`), and an osu_allgather file, when given, is re-predicted and
compared per size. Point-to-point tables cannot see two things an MPI_Allgather adds:
a per-collective software overhead and, in MPICH, a copy of the rank's own block into
recvbuf. The report shows the pure prediction and a labelled variant that adds both:
the overhead anchored on the smallest osu_allgather row only (which is then left out of
the error statistics; without that file it is 0, and said so) and the own-block copy at
the host memcpy bandwidth.

**Profiles** are JSON (`SCHEMA`, `VERSION`), written atomically with provenance;
`load_profile` rejects another version or missing keys, naming them. A profile stands
wherever a preset does (`fabric.preset: PATH.json`; `project`), at any rank count: a
local-host model fitted at np 2 projects to P ranks by the pool protocol's own scaling
(every rank copies or reads P blocks; `local_model`), and the output says so.

**Layout.** `profile` (the JSON format), `allreduce_threshold` (the measured threshold), `project` (a profile as a scenario's preset),
`osu_fit` (the `--from-osu` LogGP fit), `network_model` (a network profile's projection),
`collective_measure` and `collectives` (the other pool collectives: primitives, measurement,
prediction), `states` (a stretch of measurement judged fast, slow placement or disturbed), `local_model` (`LocalModel` and its CXLPoolPreset), `des` (the model in the DES: ping-pong,
path solve, predictions), `fit` (`fit_local` and its least-squares lines), `measure` (this
machine's primitives and held-out allgather jobs), `validation` (errors, summaries, plot),
`pipeline` (`calibrate_local`, end to end) and `cli` (the `cxlsim calibrate` command). This
package re-exports their public names.

**Where it misses** (this machine, fast host placement; `benchmarks/calibration_error.py`):
every mode's median is within 10%, but single sizes reach 10-16% (hw zero-copy at
256-512 B, flush zero-copy at 16 KiB); flush mode moves by several points from run to run,
since the DES's polls are quantised (its round trip jumps with the path); in the slow
placement (hw flag round trip ~450 ns instead of ~80) hw copy at 1 B-1 KiB is 30-50% too
slow: there the concurrent copy's lines cost ~120 ns each and the round trip is 5x, but a
1-byte call costs only ~300 ns beyond its overhead, so the transfers overlap the flag hop
in a way the DES (which charges them one after the other) does not reproduce.

Units inside: ns, bytes, bytes/ns.
"""
from cxlsim.calibrate.allreduce_threshold import choose_threshold, measure_allreduce_threshold  # noqa: F401
from cxlsim.calibrate.cli import main, register, report_local, run_local_calibration  # noqa: F401
from cxlsim.calibrate.project import ProfilePreset, is_profile, predict_profile, projection_note, run_profile  # noqa: F401
from cxlsim.calibrate.des import (AUTO_PATH_RULE, PATH_RULES, des_pingpong_ns, des_sync_ns, predict_injected,  # noqa: F401
                                  predict_local, solve_path_ns)
from cxlsim.calibrate.fit import fit_flush_line, fit_line, fit_local  # noqa: F401
from cxlsim.calibrate.local_model import GiB, MIN_PATH_NS, PRIMITIVE_RANKS, LocalModel, local_preset  # noqa: F401
from cxlsim.calibrate.measure import (BUSY, CONCURRENT_ITERATIONS, CONCURRENT_WARMUP, PRE_SYNC_KINDS,  # noqa: F401
                                      PROBE_BYTES, REMOTE_WARMUP, REPEATS, STABLE, concurrent_curves, join_ranks,
                                      measure_allgather,
                                      measure_concurrent, measure_mpi, measure_primitives, measure_roundtrip,
                                      steady)
from cxlsim.calibrate.network_model import predict_network, project_regime  # noqa: F401
from cxlsim.calibrate.osu_fit import from_osu, report_from_osu  # noqa: F401
from cxlsim.calibrate.pipeline import calibrate_local, parse_settings  # noqa: F401
from cxlsim.calibrate.profile import (KINDS, MODEL_KEYS, PROFILE_KEYS, SCHEMA, VERSION, check_profile,  # noqa: F401
                                      load_profile, make_profile, save_profile)
from cxlsim.calibrate.validation import (MODES, TARGET_INJECTED, TARGET_MEDIAN, TARGET_WORST,  # noqa: F401
                                         comparable, format_validation, plot_validation, summarize, validate)

__all__ = ["SCHEMA", "VERSION", "save_profile", "load_profile", "from_osu", "fit_flush_line",
           "LocalModel", "fit_local", "local_preset", "des_pingpong_ns", "solve_path_ns",
           "predict_local", "predict_injected", "measure_primitives", "measure_allgather", "register"]
