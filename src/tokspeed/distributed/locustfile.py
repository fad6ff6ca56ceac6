"""tokspeed's Locust user and its master/worker plumbing: a locustfile, run only inside Locust.

    locust -f $(python -c "import tokspeed.distributed.locustfile as m; print(m.__file__)") --host http://llm:8000/v1

Importing this module imports Locust, which monkey-patches the process with gevent: nothing in
tokspeed imports it; `tokspeed locust master|worker` runs it in a `locust` subprocess.

- Each Locust user sends tokspeed workload requests one at a time over its own keep-alive
  connection (`distributed.sync_http`: timestamps as bytes arrive, the asyncio backend's own
  SSE sink) and produces the same `RequestRecord`s as `tokspeed run`. Each finished request
  fires three Locust request events, "TTFT", "TPOT" and "E2E" (type "LLM", in ms), so Locust's
  statistics and web UI show LLM metrics; a failed request is a failure of "E2E".
- Load: Locust users are tokspeed's concurrency (a closed loop). `--tokspeed-rate R` (constant
  or `--tokspeed-arrival poisson`) or rate stages make it an open loop instead: one run-wide
  arrival schedule from the master's start instant, split over the workers, its arrivals sent
  by whichever of a worker's users is free (`distributed.arrivals`; the users cap what is in
  flight, an arrival sent late has its lateness measured).
- Warm-up, `--tokspeed-requests N` and stages (`distributed.shaping`): a request started in the
  first `--tokspeed-warmup-s` seconds (default: the spawn ramp) is warm-up, left out of the
  statistics; each worker sends its share of N measured requests and the master stops at N;
  the concurrency stages' LoadTestShape lives in `tokspeed/distributed/locustfile_stages.py` (this file plus
  the shape), each record labelled with the stage the master announced when it started.
- A worker that cannot start (target unreachable, no model) prints one `Error:` line, tells
  the master why (`tokspeed_failed`) and quits; the master's run.json says "failed" and why.
- Records: each worker serialises its finished records with its own clock anchor (times in
  Unix-epoch ns; durations from the worker's monotonic clock) and sends them in batches
  (`tokspeed_records` messages, every 0.5 s and at stop). The master appends them to
  `--tokspeed-out DIR/requests.jsonl` as they arrive and writes `run.json` at the end.
"""

from __future__ import annotations

import itertools
import logging
import sys
import time
from time import perf_counter_ns
from typing import Any

import gevent  # type: ignore[import-untyped]
import psutil  # type: ignore[import-untyped]
from locust import User, events, task
from locust.env import Environment
from locust.runners import STATE_MISSING, LocalRunner, MasterRunner, WorkerRunner

from tokspeed.backends.http_policy import refuse_proxy
from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.distributed.arrivals import SCHEDULE_LEAD_S, WorkerArrivals, rate_stage_items, schedule_for
from tokspeed.distributed.batching import MESSAGE_TYPE, ClockAnchor, RecordBatcher
from tokspeed.distributed.options import LocustOptions, api_key, request_index
from tokspeed.distributed.shaping import (
    Quota,
    StagePlan,
    WarmupClock,
    default_warmup_s,
    locust_stages,
    worker_quota,
)
from tokspeed.distributed.sync_http import (
    SyncOpenAIClient,
    check_reachable,
    discover_model,
)
from tokspeed.errors import ConfigError, TokspeedError
from tokspeed.metrics.request import e2e_ns, tpot_ns, ttft_ns
from tokspeed.records import RequestRecord, Status

log = logging.getLogger("tokspeed.locust")
REQUEST_TYPE = "LLM"
_SIDE = "tokspeed_worker_side"  # attribute of the Locust Environment holding this process's WorkerSide
_MASTER = "tokspeed_master_side"
STOP_MESSAGE = "tokspeed_stop"  # master -> workers: stop your users and send your last batch now
STAGE_MESSAGE = "tokspeed_stage"  # master -> workers: requests started from now on belong to this stage
FAILED_MESSAGE = "tokspeed_failed"  # worker -> master: this worker cannot run (why), and quits
_STAGE = "tokspeed_stage"  # attribute of the Environment: the stage the master last announced
_FAILED = "tokspeed_failed"  # attribute of the Environment: why this process's WorkerSide could not start
PREFLIGHT_TIMEOUT_S = 15.0  # a worker's first connection to the target, before any user starts
IDLE_S = 0.1  # how long a user whose worker has sent its share of --tokspeed-requests sleeps between looks
FINAL_WAIT_S = 10.0  # beyond --stop-timeout, how long the master waits for the workers' last batches


class WorkerSide:
    """What one load-generating process shares among its users: workload, request template, batches."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.options = opts = LocustOptions.from_namespace(environment.parsed_options)
        host = environment.host
        if not host:
            raise ValueError("no target: pass --host http://HOST:PORT/v1 (tokspeed locust master --target)")
        key = api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        refuse_proxy(host)  # ConfigError: this client connects directly, whatever HTTP(S)_PROXY says
        policy = opts.policy()
        context = policy.ssl_context() if host.startswith("https://") else None  # ConfigError for a bad file
        if opts.model:
            check_reachable(host, min(opts.timeout_s, PREFLIGHT_TIMEOUT_S), context)
        model = opts.model or discover_model(host, headers, context)
        self.backend = OpenAIHTTPBackend(host, api=opts.api, model=model, api_key=key,
                                         include_usage=opts.include_usage, timeout_s=opts.timeout_s, policy=policy)
        self.workload = opts.workload()
        runner = environment.runner
        self.worker_index = runner.worker_index if isinstance(runner, WorkerRunner) else 0
        worker_id = runner.client_id if isinstance(runner, WorkerRunner) else "local"
        self.batcher = RecordBatcher(worker_id=worker_id, anchor=ClockAnchor.now())
        self._counter = itertools.count()
        self.arrivals = self._arrivals(opts)  # None: a closed loop
        start = perf_counter_ns() if self.arrivals is None else self.arrivals.start_ns
        self.warmup = WarmupClock.starting(start, opts.warmup_s or 0.0)
        share = worker_quota(opts.requests, max(opts.workers, 1), self.worker_index) if opts.requests > 0 else None
        self.quota = Quota(share)
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # starts the measurement: each batch then carries the CPU share since the last
        self._flusher = gevent.spawn(self._flush_loop)

    def _arrivals(self, opts: LocustOptions) -> WorkerArrivals | None:
        """This worker's share of the run's arrival schedule (None: a closed loop), on this worker's clock."""
        schedule = schedule_for(opts)
        if schedule is None:
            return None
        epoch = opts.start_epoch_ns or self.batcher.anchor.wall_ns  # plain Locust without a master: from now
        start = epoch - self.batcher.anchor.epoch_offset_ns
        warm_until = WarmupClock.starting(start, opts.warmup_s or 0.0).until_ns
        return WorkerArrivals(schedule, self.worker_index, max(opts.workers, 1), start, warm_until)

    def next_index(self) -> int:
        return request_index(next(self._counter), self.worker_index)

    def stage(self) -> str | None:
        """The stage the master announced last (None without stages)."""
        return getattr(self.environment, _STAGE, None)

    def finished(self, record: RequestRecord) -> None:
        self.batcher.add(record)
        if not record.warmup:  # Locust's statistics leave warm-up out too
            _fire_events(self.environment, record)

    def _flush_loop(self) -> None:
        while True:
            gevent.sleep(self.batcher.interval_s / 2)
            if self.batcher.due():
                self.send(final=False)

    def send(self, final: bool) -> None:
        runner = self.environment.runner
        if runner is None:
            return
        payload = self.batcher.take(self.worker_index, self._process.cpu_percent(None), final)
        payload["model"] = self.backend.model
        runner.send_message(MESSAGE_TYPE, payload)

    def stop(self) -> None:
        self._flusher.kill(block=True)
        self.send(final=True)


def _fire_events(environment: Environment, record: RequestRecord) -> None:
    """Locust request events for one finished request: TTFT, TPOT (ms) when it succeeded, E2E always."""
    if record.status is Status.INCOMPLETE:
        return
    fire = environment.events.request.fire
    tokens = record.output_tokens or 0
    if record.status is Status.OK:
        ttft = ttft_ns(record)
        if ttft is not None:
            fire(request_type=REQUEST_TYPE, name="TTFT", response_time=ttft / 1e6, response_length=tokens,
                 exception=None, context={})
        tpot = tpot_ns(record)
        if tpot is not None:
            fire(request_type=REQUEST_TYPE, name="TPOT", response_time=tpot / 1e6, response_length=tokens,
                 exception=None, context={})
    e2e = e2e_ns(record)
    kind = record.error_kind.value if record.error_kind is not None else "error"
    failure = None if record.status is Status.OK else RuntimeError(f"{kind}: {record.error}")
    fire(request_type=REQUEST_TYPE, name="E2E", response_time=(e2e or 0) / 1e6, response_length=tokens,
         exception=failure, context={})


class TokspeedUser(User):
    """One tokspeed stream: sends the workload's requests back to back (or paced by --tokspeed-rate)."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        side = getattr(environment, _SIDE, None)
        if side is None and getattr(environment, _FAILED, None) is None:  # test_start did not run here: build it now
            side = _try_worker_side(environment)
        self.side: WorkerSide | None = side  # None: this worker could not start and is quitting
        self.client = None if side is None else SyncOpenAIClient(side.backend, timeout_s=side.options.timeout_s)

    def wait_time(self) -> float:
        return 0.0

    @task
    def request(self) -> None:
        side, client = self.side, self.client
        if side is None or client is None:
            gevent.sleep(1.0)
            return
        slot = self._due(side)
        if slot is None:  # the arrival schedule has ended: nothing more to send
            gevent.sleep(IDLE_S)
            return
        scheduled, stage = slot
        warmup = side.warmup.warm(scheduled)
        if not warmup and not side.quota.claim():  # this worker's share of --requests is sent
            gevent.sleep(IDLE_S)
            return
        index = side.next_index()
        spec = side.workload.request(index)
        record = RequestRecord(index=index, iteration=0 if warmup else 1, warmup=warmup, scheduled_ns=scheduled)
        if not warmup:
            record.stage = stage
        try:
            client.send(spec, record)
        finally:
            side.finished(record)

    @staticmethod
    def _due(side: WorkerSide) -> tuple[int, str | None] | None:
        """When this request is due and its stage: now (closed loop), or the worker's next arrival, slept to."""
        now = perf_counter_ns()
        if side.arrivals is None:
            return now, side.stage()
        slot = side.arrivals.claim(now)
        if slot is None:
            return None
        if slot.due_ns > now:
            gevent.sleep((slot.due_ns - now) / 1e9)
        return slot.due_ns, slot.stage

    def on_stop(self) -> None:
        if self.client is not None:
            self.client.close()


def _try_worker_side(environment: Environment) -> WorkerSide | None:
    """This process's WorkerSide; None when it cannot start (the failure is reported, the process quits)."""
    try:
        side = WorkerSide(environment)
    except (TokspeedError, OSError, ValueError) as exc:
        _worker_failed(environment, exc)
        return None
    setattr(environment, _SIDE, side)
    return side


def _worker_failed(environment: Environment, exc: Exception) -> None:
    """One `Error:` line here, the reason to the master (run.json: failed), then quit with exit code 1."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    hint = getattr(exc, "hint", None)
    print(f"Error: {reason}" + (f" (hint: {hint})" if hint else ""), file=sys.stderr, flush=True)
    setattr(environment, _FAILED, reason)
    runner = environment.runner
    master: MasterSide | None = getattr(environment, _MASTER, None)
    if master is not None:  # plain `locust` without workers: this process is the master too
        master.failures.append(f"local: {reason}")
    elif isinstance(runner, WorkerRunner):
        import socket

        runner.send_message(FAILED_MESSAGE, {"worker": runner.client_id, "index": runner.worker_index,
                                             "host": socket.gethostname(), "error": reason})
    environment.process_exit_code = 1
    if runner is not None:
        gevent.spawn(runner.quit)  # not from this handler's own greenlet, which quit() kills


class MasterSide:
    """The master's results directory and the facts run.json needs."""

    def __init__(self, environment: Environment) -> None:
        from tokspeed.distributed.master import open_merger

        self.environment = environment
        opts = environment.parsed_options
        assert opts is not None, "Locust parses its options before init"
        try:
            self.stages = _stage_plan(opts)
            if self.stages is not None:  # the shape sets the users: the widest stage, for the workers' pacing and facts
                opts.tokspeed_users = self.stages.max_users
            if not getattr(opts, "tokspeed_users", 0):
                opts.tokspeed_users = int(getattr(opts, "num_users", 0) or 0)  # sent on to the workers
            staged = self.stages is not None or rate_stage_items(getattr(opts, "tokspeed_stages", None) or None,
                                                                 getattr(opts, "tokspeed_ramp", None) or None) is not None
            opts.tokspeed_warmup_s = _warmup_s(opts, staged=staged)  # sent on to the workers
            opts.tokspeed_duration_s = float(getattr(opts, "run_time", None) or 0)  # the arrival schedule's length
            self.options = LocustOptions.from_namespace(opts)
            self.schedule = schedule_for(self.options)  # the workers draw the same (a bad --arrival fails here)
            self.merger = open_merger(self.options, environment.host, _run_facts(environment, self.stages))
        except TokspeedError as exc:  # e.g. --tokspeed-out holds a run already: say so, like tokspeed does
            print(f"Error: {exc}" + (f"\nHint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
            sys.exit(2)

        self.final: set[str] = set()  # workers whose last batch arrived
        self.failures: list[str] = []  # workers that could not start, and why
        self.started_ns: int | None = None  # when the test started (for an interrupted run's status)
        self.stopping = False  # --tokspeed-requests reached: the stop is under way

    def on_start(self) -> None:
        """The test starts: note when; tell the workers how many share --tokspeed-requests and the
        arrivals, and when the arrival schedule starts (all of it travels with the spawn messages sent next)."""
        if self.started_ns is None:
            self.started_ns = perf_counter_ns()
        runner, opts = self.environment.runner, self.environment.parsed_options
        if opts is None:
            return
        workers = len(runner.clients.ready + runner.clients.running + runner.clients.spawning) \
            if isinstance(runner, MasterRunner) else 1
        opts.tokspeed_workers = max(workers, 1)
        if self.schedule is not None:
            opts.tokspeed_start_epoch_ns = time.time_ns() + round(SCHEDULE_LEAD_S * 1e9)

    def on_failure(self, environment: Environment, msg: Any, **_: Any) -> None:
        data = msg.data or {}
        reason = f"worker {data.get('index')} ({data.get('host')}): {data.get('error')}"
        log.error("tokspeed: %s", reason)
        self.failures.append(reason)

    def on_batch(self, environment: Environment, msg: Any, **_: Any) -> None:
        if msg.data.get("final"):
            self.final.add(str(msg.data.get("worker")))
        if self.merger is not None:
            self.merger.accept(msg.data)
            wanted = self.options.requests
            if wanted > 0 and self.merger.measured >= wanted and not self.stopping:
                self.stopping = True
                log.info("tokspeed: %d measured requests arrived (--requests): stopping", self.merger.measured)
                gevent.spawn(self._stop)

    def _stop(self) -> None:
        runner, opts = self.environment.runner, self.environment.parsed_options
        if runner is None:
            return
        if opts is not None and getattr(opts, "headless", False):
            runner.quit()
        else:
            runner.stop()

    def collect_final_batches(self) -> None:
        """Before Locust stops (or quits, which does not wait for workers): have every live worker
        stop its users and send its last batch, and wait for those batches, so nothing finished is lost."""
        runner = self.environment.runner
        if not isinstance(runner, MasterRunner):
            return
        live = [c.id for c in runner.clients.all if c.state != STATE_MISSING]
        for client_id in live:
            runner.send_message(STOP_MESSAGE, None, client_id=client_id)
        deadline = perf_counter_ns() + int((self.environment.stop_timeout + FINAL_WAIT_S) * 1e9)
        while perf_counter_ns() < deadline:
            waiting = [c for c in live if c not in self.final and c in runner.clients
                       and runner.clients[c].state != STATE_MISSING]
            if not waiting:
                return
            gevent.sleep(0.05)
        log.warning("tokspeed: no last batch from %d workers; their unsent records are lost", len(waiting))

    def finish(self) -> None:
        if self.merger is not None and self.merger.stale:
            from tokspeed.distributed.master import finish_run

            ran_s = None if self.started_ns is None else (perf_counter_ns() - self.started_ns) / 1e9
            result = finish_run(self.merger, self.options, ran_s, self.failures,
                                None if self.stages is None else self.stages.windows,
                                None if self.schedule is None else self.schedule.timeline)
            if result.status == "failed":
                self.environment.process_exit_code = 1
            log.info("tokspeed: %d records written to %s", self.merger.received, self.merger.writer.directory)


def _stage_plan(opts: Any) -> StagePlan | None:
    """The concurrency stages of --tokspeed-stages / --tokspeed-ramp (None without; ConfigError when bad)."""
    windows = locust_stages(getattr(opts, "tokspeed_stages", None) or None, getattr(opts, "tokspeed_ramp", None) or None)
    return StagePlan(tuple(windows)) if windows else None


def _warmup_s(opts: Any, staged: bool) -> float:
    """--tokspeed-warmup-s as given, else the default (the spawn ramp; 0 with stages)."""
    given = getattr(opts, "tokspeed_warmup_s", None)
    if given in (None, ""):
        return default_warmup_s(int(opts.tokspeed_users), getattr(opts, "spawn_rate", None), staged=staged)
    try:
        value = float(given)
    except ValueError:
        raise ConfigError(f"--tokspeed-warmup-s {given!r} is not a number of seconds", hint="e.g. --tokspeed-warmup-s 5") from None
    if value < 0:
        raise ConfigError(f"--tokspeed-warmup-s {given!r} is negative", hint="0 measures the spawn ramp")
    return value


def _run_facts(environment: Environment, stages: StagePlan | None = None) -> dict[str, Any]:
    import locust

    opts = environment.parsed_options
    return {
        "locust_version": locust.__version__,
        "users": stages.max_users if stages is not None else int(getattr(opts, "num_users", 0) or 0),
        "spawn_rate": getattr(opts, "spawn_rate", None),
        "run_time": stages.duration_s if stages is not None else getattr(opts, "run_time", None),
        "expect_workers": getattr(opts, "expect_workers", None),
        "stop_timeout": getattr(opts, "stop_timeout", None),
        "warmup_s": getattr(opts, "tokspeed_warmup_s", None),
    }


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    group = parser.add_argument_group("tokspeed", "tokspeed workload and results (see `tokspeed locust --help`)")
    for dest, (flag, default, help_text) in LocustOptions.arguments().items():
        if isinstance(default, bool):
            group.add_argument(flag, dest=dest, action="store_true", default=default, help=help_text)
        else:
            kind = type(default) if default is not None else str
            group.add_argument(flag, dest=dest, type=kind, default=default, help=help_text)


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, (MasterRunner, LocalRunner)):
        master = MasterSide(environment)
        setattr(environment, _MASTER, master)
        runner.register_message(MESSAGE_TYPE, master.on_batch)
        runner.register_message(FAILED_MESSAGE, master.on_failure)
    if isinstance(runner, WorkerRunner):
        runner.register_message(STOP_MESSAGE, _on_stop_message)
        _cache_default_args()
    if isinstance(runner, (WorkerRunner, LocalRunner)):
        runner.register_message(STAGE_MESSAGE, _on_stage_message)


def _cache_default_args() -> None:
    """Stop a worker's event loop from stalling ~0.1 s at every spawn message (a stage change, each step of a ramp).

    Locust's worker filters the master's options with `argument_parser.default_args_dict()` once per
    option, and each call builds Locust's whole argument parser: ~100 calls of ~1 ms, during which
    no stream is read, so every request in flight gets a 0.1 s inter-token gap that the server
    never made (seen against the simulator's log). The function's result depends on nothing but
    Locust's own arguments, so this process computes it once and hands out copies.
    """
    from locust import argument_parser

    original = argument_parser.default_args_dict
    if getattr(original, "tokspeed_cached", False):
        return
    defaults = original()

    def cached() -> dict[str, Any]:
        return dict(defaults)

    cached.tokspeed_cached = True  # type: ignore[attr-defined]
    argument_parser.default_args_dict = cached  # type: ignore[assignment]


def _on_stage_message(environment: Environment, msg: Any, **_: Any) -> None:
    setattr(environment, _STAGE, (msg.data or {}).get("stage"))


def _on_stop_message(environment: Environment, msg: Any, **_: Any) -> None:
    if environment.runner is not None:
        environment.runner.stop()  # fires test_stop here, which sends the last batch


@events.test_stopping.add_listener
def _on_test_stopping(environment: Environment, **_: Any) -> None:
    master: MasterSide | None = getattr(environment, _MASTER, None)
    if master is not None:
        master.collect_final_batches()


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    master: MasterSide | None = getattr(environment, _MASTER, None)
    if master is not None:
        master.on_start()
    if (isinstance(environment.runner, (WorkerRunner, LocalRunner)) and getattr(environment, _SIDE, None) is None
            and getattr(environment, _FAILED, None) is None):
        _try_worker_side(environment)


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    side: WorkerSide | None = getattr(environment, _SIDE, None)
    if side is not None:
        side.stop()
        setattr(environment, _SIDE, None)  # a new test (web UI) starts a fresh side
    master: MasterSide | None = getattr(environment, _MASTER, None)
    if master is not None:
        master.finish()


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    master: MasterSide | None = getattr(environment, _MASTER, None)
    if master is not None:
        master.finish()
        if master.merger is not None:
            master.merger.close()
