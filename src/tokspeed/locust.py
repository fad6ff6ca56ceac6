"""tokspeed's Locust user and its master/worker plumbing: a locustfile, run only inside Locust.

    locust -f $(python -c "import tokspeed.locust as m; print(m.__file__)") --host http://llm:8000/v1

Importing this module imports Locust, which monkey-patches the process with gevent: nothing in
tokspeed imports it; `tokspeed locust master|worker` runs it in a `locust` subprocess.

- Each Locust user sends tokspeed workload requests one at a time over its own keep-alive
  connection (`distributed.sync_http`: timestamps as bytes arrive, the asyncio backend's own
  SSE sink) and produces the same `RequestRecord`s as `tokspeed run`. Each finished request
  fires three Locust request events, "TTFT", "TPOT" and "E2E" (type "LLM", in ms), so Locust's
  statistics and web UI show LLM metrics; a failed request is a failure of "E2E".
- Load: Locust users are tokspeed's concurrency (a closed loop). `--tokspeed-rate R` paces the
  users instead: each of the U users starts a request every U/R seconds on a fixed schedule
  (Locust's constant-throughput idea, with the schedule kept so lateness is measured).
- Records: each worker serialises its finished records with its own clock anchor (times in
  Unix-epoch ns; durations from the worker's monotonic clock) and sends them in batches
  (`tokspeed_records` messages, every 0.5 s and at stop). The master appends them to
  `--tokspeed-out DIR/requests.jsonl` as they arrive and writes `run.json` at the end.
"""

from __future__ import annotations

import itertools
import logging
import sys
from time import perf_counter_ns
from typing import Any

import gevent  # type: ignore[import-untyped]
import psutil  # type: ignore[import-untyped]
from locust import User, events, task
from locust.env import Environment
from locust.runners import STATE_MISSING, LocalRunner, MasterRunner, WorkerRunner

from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.distributed.batching import MESSAGE_TYPE, ClockAnchor, RecordBatcher
from tokspeed.distributed.options import LocustOptions, api_key, request_index
from tokspeed.distributed.sync_http import SyncOpenAIClient, discover_model
from tokspeed.errors import TokspeedError
from tokspeed.metrics.request import e2e_ns, tpot_ns, ttft_ns
from tokspeed.records import RequestRecord, Status

log = logging.getLogger("tokspeed.locust")
REQUEST_TYPE = "LLM"
_SIDE = "tokspeed_worker_side"  # attribute of the Locust Environment holding this process's WorkerSide
_MASTER = "tokspeed_master_side"
STOP_MESSAGE = "tokspeed_stop"  # master -> workers: stop your users and send your last batch now
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
        model = opts.model or discover_model(host, headers)
        self.backend = OpenAIHTTPBackend(host, api=opts.api, model=model, api_key=key,
                                         include_usage=opts.include_usage, timeout_s=opts.timeout_s)
        self.workload = opts.workload()
        runner = environment.runner
        self.worker_index = runner.worker_index if isinstance(runner, WorkerRunner) else 0
        worker_id = runner.client_id if isinstance(runner, WorkerRunner) else "local"
        self.batcher = RecordBatcher(worker_id=worker_id, anchor=ClockAnchor.now())
        self._counter = itertools.count()
        interval = opts.pacing_interval_s()
        self.interval_ns = None if interval is None else int(interval * 1e9)
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # starts the measurement: each batch then carries the CPU share since the last
        self._flusher = gevent.spawn(self._flush_loop)

    def next_index(self) -> int:
        return request_index(next(self._counter), self.worker_index)

    def finished(self, record: RequestRecord) -> None:
        self.batcher.add(record)
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
        if side is None:  # test_start did not run here (should not happen): build it now
            side = _start_worker_side(environment)
        self.side: WorkerSide = side
        self.client = SyncOpenAIClient(side.backend, timeout_s=side.options.timeout_s)
        self._next_ns: int | None = None

    def wait_time(self) -> float:
        return 0.0

    @task
    def request(self) -> None:
        side = self.side
        scheduled = self._scheduled(side.interval_ns)
        index = side.next_index()
        spec = side.workload.request(index)
        record = RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=scheduled)
        try:
            self.client.send(spec, record)
        finally:
            side.finished(record)

    def _scheduled(self, interval_ns: int | None) -> int:
        """When this request is due: now (closed loop), or this user's next slot of a fixed schedule."""
        now = perf_counter_ns()
        if interval_ns is None:
            return now
        due = now if self._next_ns is None else self._next_ns
        self._next_ns = due + interval_ns
        if due > now:
            gevent.sleep((due - now) / 1e9)
        return due

    def on_stop(self) -> None:
        self.client.close()


def _start_worker_side(environment: Environment) -> WorkerSide:
    side = WorkerSide(environment)
    setattr(environment, _SIDE, side)
    return side


class MasterSide:
    """The master's results directory and the facts run.json needs."""

    def __init__(self, environment: Environment) -> None:
        from tokspeed.distributed.master import open_merger

        self.environment = environment
        opts = environment.parsed_options
        assert opts is not None, "Locust parses its options before init"
        if not getattr(opts, "tokspeed_users", 0):
            opts.tokspeed_users = int(getattr(opts, "num_users", 0) or 0)  # sent on to the workers
        self.options = LocustOptions.from_namespace(opts)
        try:
            self.merger = open_merger(self.options, environment.host, _run_facts(environment))
        except TokspeedError as exc:  # e.g. --tokspeed-out holds a run already: say so, like tokspeed does
            print(f"Error: {exc}" + (f"\nHint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
            sys.exit(2)

        self.final: set[str] = set()  # workers whose last batch arrived
        self.started_ns: int | None = None  # when the test started (for an interrupted run's status)

    def on_batch(self, environment: Environment, msg: Any, **_: Any) -> None:
        if msg.data.get("final"):
            self.final.add(str(msg.data.get("worker")))
        if self.merger is not None:
            self.merger.accept(msg.data)

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
            finish_run(self.merger, self.options, ran_s)
            log.info("tokspeed: %d records written to %s", self.merger.received, self.merger.writer.directory)


def _run_facts(environment: Environment) -> dict[str, Any]:
    import locust

    opts = environment.parsed_options
    return {
        "locust_version": locust.__version__,
        "users": int(getattr(opts, "num_users", 0) or 0),
        "spawn_rate": getattr(opts, "spawn_rate", None),
        "run_time": getattr(opts, "run_time", None),
        "expect_workers": getattr(opts, "expect_workers", None),
        "stop_timeout": getattr(opts, "stop_timeout", None),
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
    elif isinstance(runner, WorkerRunner):
        runner.register_message(STOP_MESSAGE, _on_stop_message)


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
    if master is not None and master.started_ns is None:
        master.started_ns = perf_counter_ns()
    if isinstance(environment.runner, (WorkerRunner, LocalRunner)) and getattr(environment, _SIDE, None) is None:
        _start_worker_side(environment)


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
