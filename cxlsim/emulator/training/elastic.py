"""The async and hybrid modes: training through shared parameters in the pool, without a barrier.

Both keep the shared parameters as theta0 plus the sum of every worker's accumulator, each
worker publishing its own in its seqlock slot of the shared region (`shared_state`): a reader
merges the slots (in worker order) and nobody adds into a shared vector. Both count work with
the region's global counter (one ticket per local step; the run's budget is steps x W tickets,
the samples of a sync run of `steps` steps), so the workers together stop once the budget is
spent and a failed worker's share is taken over by the others. One global step is W tickets.

async (EASGD-style elastic averaging; Zhang, Choromanska, LeCun, NIPS 2015, asynchronous
EASGD): each worker runs plain SGD with the run's lr on its own parameters x and, every `TAU`
local steps, reads the centre c (the merge), moves d = alpha (x - c) with alpha = BETA / W,
x -= d, and adds d to its accumulator (the centre moves by d: c += d). BETA = 0.9 is the
paper's choice of beta = alpha x p. The centre is the model evaluated.

hybrid (the global parameters and step counter of ShmCaffe/EDDIS; the rules are the DES's
`cxlsim.models.training.hybrid` with round size R = W and staleness bound s = its default): a
worker computes a gradient g on its copy (pulled when the counter showed round v), then takes a
ticket c; its contribution belongs to round k = c // W, staleness d = k - v. With d <= s it adds
u = -(lr / W) g to its accumulator (a round of W contributions is one sync step on the mean
gradient), else it is dropped (wasted work, counted). The push and the pull of the global
parameters run on a communication thread while the next local step computes on the last pulled
parameters plus the worker's own update: training overlaps the updates (``--overlap off``: the
exchange runs in line, after the step's compute). A worker stops when the counter reaches the
budget.

--lockstep (deterministic variants): every rank does `steps` local steps; async exchanges with
a barrier before the merge (every push is in) and one after it (every merge is done before the
next push), hybrid pushes, waits at a barrier, merges and waits again, with no communication
thread. Every rank then reads the same pushes, so the shared parameters are bitwise the same on
every rank and in every run of one seed. --lockstep cannot be combined with --fail (the others
would wait for the failed rank at the next barrier).

Each step takes its batch before its start (``ctx.now()``), as sync does: the record counts the
batch with the local work the DES is given, not with the step's communication (comm_s). Every
step's phases and the threads' scheduling go into `mode_stats` (`phases_s`: ASYNC_PHASES or
HYBRID_PHASES; hybrid's `exchange_phases_s`: EXCHANGE_PHASES; `schedule`: per thread, its time
on a CPU and runnable but not running, `phases.ThreadSchedule`).

A worker done (or stopped by --fail: `RankStopped`) pushes a last time with its done flag; the
evaluating rank (0, or 1 when rank 0 is the one to fail) waits until every other slot is done or
its worker dead, merges, and keeps that as the final parameters. Snapshots for evaluation are
the evaluating rank's view of the shared parameters each time the counter passes a multiple of
`eval_every` global steps (the snapshot's step is that multiple).
"""
from __future__ import annotations

import concurrent.futures
import time

import numpy as np

from cxlsim.emulator.training.context import RankStopped
from cxlsim.emulator.training.phases import PhaseClock, ThreadSchedule
from cxlsim.emulator.training.shared_state import SharedState, fold_rows, shared_region as make_region
from cxlsim.errors import InputError, RunError
from cxlsim.models.training.hybrid import DEFAULT_STALENESS

TAU = 1
"""async: local steps between two elastic exchanges (the DES's async default)."""
BETA = 0.9
"""async: the elastic moving rate alpha = BETA / W (EASGD's recommended beta = alpha x p)."""
STALENESS = DEFAULT_STALENESS
"""hybrid: contributions more than this many rounds stale are dropped (the DES's default)."""
DONE = 1
"""Meta word 0 flag: the worker pushed its last contribution."""
POLL_S = 0.001


def shared_region(config, model):
    """The launcher-side hook of async and hybrid: a shared region of one float64 vector per rank."""
    if config.lockstep and config.failure is not None:
        raise InputError("--lockstep: cannot be combined with --fail (the other ranks would wait for the failed "
                         "one at their next barrier)")
    if config.lockstep and config.overlap:
        raise InputError("--overlap on: --lockstep runs hybrid's exchange in line, between two barriers")
    return make_region(config.nranks, model.size, "float64", pool=config.pool, coherence=config.coherence,
                       timeout_s=config.timeout_s)


def evaluator(config) -> int:
    """The rank whose view of the shared parameters is evaluated: 0, or 1 if rank 0 is the one to fail."""
    return 1 if config.failure is not None and config.failure.worker == 0 else 0


class SharedModel:
    """A rank's side of the shared parameters: theta0 + the sum of every worker's published accumulator."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.state = SharedState.attach(ctx.shared, ctx.rank)
        self.base = ctx.params0
        self.acc = np.zeros_like(ctx.params0)  # this worker's accumulator, the vector it publishes
        self.accepted = 0                      # contributions in it (hybrid) or exchanges (async)
        self.next_eval = ctx.config.eval_every
        ctx.evaluates = ctx.rank == evaluator(ctx.config)

    def publish(self, local_steps: int, done: bool = False) -> None:
        self.state.push(self.acc, meta=(DONE if done else 0, local_steps, self.accepted))

    def pull(self, out: np.ndarray, clock: PhaseClock | None = None) -> list:
        """out = theta0 + every worker's accumulator; returns the slots' reads. clock: marks "read" (the
        slots copied out of the pool) and "fold" (their sum, plus theta0)."""
        rows, reads = self.state.read_all()
        if clock is not None:
            clock.mark("read")
        fold_rows(rows, out)
        out += self.base
        if clock is not None:
            clock.mark("fold")
        return reads

    def offer(self, global_step: int, params: np.ndarray) -> None:
        """Snapshot `params` if the counter passed the next multiple of eval_every global steps."""
        if self.ctx.evaluates and global_step >= self.next_eval:
            due = global_step // self.ctx.config.eval_every * self.ctx.config.eval_every
            self.ctx.snapshot(due, params)
            self.next_eval = due + self.ctx.config.eval_every

    def finish(self, local_steps: int, out: np.ndarray) -> None:
        """Push the done flag; then (the evaluating rank after every other worker's done flag, every rank
        after a barrier in lockstep) merge into `out` and keep it as the final parameters."""
        ctx = self.ctx
        self.publish(local_steps, done=True)
        if ctx.config.lockstep:
            ctx.comm.barrier()
        elif ctx.evaluates:
            self.wait_for_others()
        if ctx.config.lockstep or ctx.evaluates:
            self.pull(out)
            ctx.final_params = out.copy()
            step = min(self.state.counter(), ctx.config.steps * ctx.nranks) // ctx.nranks
            if ctx.snapshots and ctx.snapshots[-1][1] == step:
                ctx.snapshots.pop()  # a view from before the others' last pushes: the merge after them replaces it
            ctx.snapshot(step, out, final=True)
        self.state.close()

    def wait_for_others(self) -> None:
        """Until every other slot shows the done flag or its worker died (RunError after the run's timeout)."""
        scratch = np.empty_like(self.acc)
        waiting = [w for w in range(self.ctx.nranks) if w != self.ctx.rank]
        deadline = time.monotonic() + self.ctx.config.timeout_s
        while waiting:
            waiting = [w for w in waiting if not self.state.read(w, scratch).meta[0] & DONE and self.state.alive(w)]
            if waiting and time.monotonic() > deadline:
                raise RunError(f"{self.ctx.config.mode}: rank {self.ctx.rank} waited {self.ctx.config.timeout_s:g} s "
                               f"for rank(s) {waiting} to finish")
            if waiting:
                time.sleep(POLL_S)


def _take_ticket(ctx, shared, local: int) -> int | None:
    """This step's ticket, or None once the run's budget is spent (lockstep: `steps` local steps each)."""
    if ctx.config.lockstep and local >= ctx.config.steps:
        return None
    ticket = shared.state.fetch_add()
    return ticket if ctx.config.lockstep or ticket < ctx.config.steps * ctx.nranks else None


ASYNC_PHASES = ("batch", "ticket", "compute", "sgd", "read", "fold", "elastic", "push")
"""async's phases of a step (`PhaseClock`): the batch (taken before the step starts, so the record counts it as
local work, as sync's), the ticket (with the pacer's set-up), the paced compute, the SGD update, the merge's
copy of the slots out of the pool and their fold with theta0, the elastic update, the push (and centre += d)."""


def async_loop(ctx) -> None:
    """The async mode's rank loop (EASGD-style; the contract: `context`)."""
    cfg, model, W = ctx.config, ctx.model, ctx.nranks
    shared = SharedModel(ctx)
    alpha = BETA / W
    x = ctx.params0.copy()
    grad, centre, diff = np.empty_like(x), ctx.params0.copy(), np.empty_like(x)
    local = 0
    clock, schedule = PhaseClock(ASYNC_PHASES), ThreadSchedule()
    schedule.start()
    try:
        while True:
            clock.begin()
            xb, yb = ctx.batch(local)
            clock.mark("batch")
            start = ctx.now()
            paced = ctx.pace(local)  # a failed rank stops here, before it takes a ticket it would not use
            ticket = _take_ticket(ctx, shared, local)
            if ticket is None:
                break
            clock.mark("ticket")
            with paced as pacer:
                loss = model.loss_grad(x, xb, yb, grad)
            clock.mark("compute")
            grad *= cfg.lr
            x -= grad
            local += 1
            clock.mark("sgd")
            if local % TAU == 0:
                if cfg.lockstep:
                    ctx.comm.barrier()
                    clock.begin()  # the barrier's wait is no phase of the exchange
                shared.pull(centre, clock)
                if cfg.lockstep:
                    ctx.comm.barrier()
                    clock.begin()
                np.subtract(x, centre, out=diff)
                diff *= alpha
                x -= diff
                shared.acc += diff
                shared.accepted += 1
                clock.mark("elastic")
                shared.publish(local)
                centre += diff
                clock.mark("push")
            ctx.log.step(start, pacer.seconds, loss)
            shared.offer(local if cfg.lockstep else (ticket + 1) // W, centre)
    except RankStopped:
        _record_async(ctx, shared, clock, schedule)
        shared.finish(local, centre)
        raise
    _record_async(ctx, shared, clock, schedule)
    shared.finish(local, centre)


def _record_async(ctx, shared, clock: PhaseClock, schedule: ThreadSchedule) -> None:
    """async's counts on the context (`mode_stats`, recorded per rank in train.json), with the step's phases
    and the rank's scheduling over the loop."""
    schedule.stop()
    ctx.mode_stats = {"exchanges": shared.accepted, "tau": TAU, "alpha": BETA / ctx.nranks,
                      "counter": ctx.shared.counter, "phases_s": clock.summary(),
                      "schedule": {"main": schedule.summary()}}


HYBRID_PHASES = ("batch", "compute", "ticket", "scale", "wait", "handover", "apply")
"""hybrid's phases of a step on the main thread (`PhaseClock`): the batch (before the step starts: local work),
the paced compute, the ticket, the update (the gradient scaled), the wait for the previous exchange, the
hand-over (the pulled parameters copied in, the snapshot offered, the next exchange submitted; without a
thread the exchange itself), the update applied to the parameters."""
EXCHANGE_PHASES = ("handoff", "update", "push", "counter", "read", "fold")
"""hybrid's phases of an exchange (`PhaseClock`, on the thread that runs it): from its submission until it
starts, acc += update, the push, the counter's load, the merge's copy of the slots and their fold."""


class Exchanger:
    """hybrid's push and pull: add an update to the accumulator, publish it, merge the global parameters.

    With a thread, `submit` runs the exchange on it and `result` waits for the last one; without,
    `submit` runs it at once. The result is (global parameters, the round the counter showed).
    `clock` times the exchanges' phases, `schedule` the scheduling of the thread that runs them.
    """

    def __init__(self, shared: SharedModel, threaded: bool):
        self.shared = shared
        self.theta = shared.base.copy()
        self.version = 0
        self.pool = concurrent.futures.ThreadPoolExecutor(1, "cxlsim-hybrid-comm") if threaded else None
        self.pending = None
        self.clock, self.schedule = PhaseClock(EXCHANGE_PHASES), ThreadSchedule()
        if self.pool is not None:
            self.pool.submit(self.schedule.start).result()

    def _exchange(self, update, local_steps: int, barrier, submitted: float) -> None:
        clock = self.clock
        clock.last = submitted
        clock.mark("handoff")
        if update is not None:
            self.shared.acc += update
            self.shared.accepted += 1
        clock.mark("update")
        self.shared.publish(local_steps)
        clock.mark("push")
        if barrier is not None:
            barrier()
            clock.begin()
        counter = self.shared.state.counter()
        clock.mark("counter")
        self.shared.pull(self.theta, clock)
        if barrier is not None:
            barrier()
        self.version = counter // self.shared.ctx.nranks

    def submit(self, update, local_steps: int, barrier=None) -> None:
        submitted = time.perf_counter()
        if self.pool is None:
            self._exchange(update, local_steps, barrier, submitted)
        else:
            self.pending = self.pool.submit(self._exchange, update, local_steps, barrier, submitted)

    def result(self) -> None:
        """Wait for the exchange in flight (if any); its error, if it failed, is raised here."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()

    def close(self) -> None:
        self.result()
        if self.pool is not None:
            self.pool.submit(self.schedule.stop).result()
            self.pool.shutdown()


def hybrid_loop(ctx) -> None:
    """The hybrid mode's rank loop (global counter, staleness bound, overlapped updates; the contract: `context`)."""
    cfg, model, W = ctx.config, ctx.model, ctx.nranks
    shared = SharedModel(ctx)
    exchanger = Exchanger(shared, threaded=not cfg.lockstep and cfg.overlap is not False)
    barrier = ctx.comm.barrier if cfg.lockstep else None
    params, grad = ctx.params0.copy(), np.empty_like(ctx.params0)
    version, local, budget = 0, 0, cfg.steps * W
    dropped, staleness = 0, {}
    clock, schedule = PhaseClock(HYBRID_PHASES), ThreadSchedule()
    schedule.start()
    try:
        while cfg.lockstep and local < cfg.steps or not cfg.lockstep and shared.state.counter() < budget:
            clock.begin()
            xb, yb = ctx.batch(local)
            clock.mark("batch")
            start = ctx.now()
            with ctx.pace(local) as pacer:
                loss = model.loss_grad(params, xb, yb, grad)
            clock.mark("compute")
            ticket = shared.state.fetch_add()
            if ticket >= budget:  # the budget ran out while this step computed: its work is not counted
                break
            clock.mark("ticket")
            local += 1
            d = ticket // W - version
            staleness[d] = staleness.get(d, 0) + 1
            update = None
            if d <= STALENESS:
                update = grad * (-cfg.lr / W)
            else:
                dropped += 1
            clock.mark("scale")
            exchanger.result()  # the previous exchange: its pull is what this step's update lands on
            clock.mark("wait")
            params[:] = exchanger.theta
            version = exchanger.version
            shared.offer(version, params)
            exchanger.submit(update, local, barrier)
            clock.mark("handover")
            if exchanger.pool is None:  # no thread: the exchange above already pulled this update in
                params[:] = exchanger.theta
                version = exchanger.version
            elif update is not None:
                params += update
            clock.mark("apply")
            ctx.log.step(start, pacer.seconds, loss)
    except RankStopped:
        exchanger.close()
        _record_hybrid(ctx, shared, dropped, staleness, clock, schedule, exchanger)
        shared.finish(local, exchanger.theta)
        raise
    exchanger.close()
    _record_hybrid(ctx, shared, dropped, staleness, clock, schedule, exchanger)
    shared.finish(local, exchanger.theta)


def _record_hybrid(ctx, shared, dropped: int, staleness: dict, clock: PhaseClock, schedule: ThreadSchedule,
                   exchanger: Exchanger) -> None:
    """hybrid's counts on the context (`mode_stats`, recorded per rank in train.json): accepted and dropped
    contributions, the staleness histogram (rounds: count), the bound, the counter scheme, overlap, the step's
    and the exchange's phases, and the scheduling of the main thread and of the exchange's thread (if any)."""
    schedule.stop()
    threads = {"main": schedule.summary()}
    if exchanger.pool is not None:
        threads["exchange"] = exchanger.schedule.summary()
    ctx.mode_stats = {"accepted": shared.accepted, "dropped": dropped,
                      "staleness_histogram": {str(k): v for k, v in sorted(staleness.items())},
                      "staleness_bound": STALENESS, "counter": ctx.shared.counter,
                      "overlap": not ctx.config.lockstep and ctx.config.overlap is not False,
                      "phases_s": clock.summary(), "exchange_phases_s": exchanger.clock.summary(),
                      "schedule": threads}
