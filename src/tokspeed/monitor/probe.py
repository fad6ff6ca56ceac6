"""The probe loop: small requests sent to the target at a low rate, each ending as a RequestRecord.

Probes go out at `rate` per second, evenly spaced (`constant`) or as a Poisson
process (`poisson`, seeded), through `OpenAIHTTPBackend` (its `start()` finds
the model, its `send()` fills the record). Probes run as their own tasks, so a
slow answer never delays the schedule; at most `max_in_flight` run at once and
a probe due while that many are out is skipped (counted in `skipped`).

The target going away is data, not a crash: while the backend cannot start
(target down at launch) or probes fail to connect, every attempt becomes an
error record (kind `connect`) and the gap to the next attempt doubles up to
`max_backoff_s` (never below the probe gap); the first probe that connects
again returns to the normal rate.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter_ns

from tokspeed.backends.http_policy import HttpPolicy
from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.errors import TargetError
from tokspeed.records import ErrorKind, RequestRecord, RequestSpec, Status


@dataclass(frozen=True)
class ProbeSettings:
    target: str
    rate: float  # probes per second
    api: str = "chat"
    model: str | None = None
    api_key: str | None = None
    max_tokens: int = 16
    prompt: str = "Count from 1 to 20."
    arrival: str = "constant"  # constant | poisson
    timeout_s: float = 30.0
    max_in_flight: int = 4
    max_backoff_s: float = 30.0
    seed: int = 0
    policy: HttpPolicy = field(default_factory=HttpPolicy)  # TLS of the probes and the /metrics scrapes


class Prober:
    """Sends probes until cancelled; hands every finished record to `on_record`."""

    def __init__(
        self,
        settings: ProbeSettings,
        on_record: Callable[[RequestRecord], None],
        on_note: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self._on_record = on_record
        self._on_note = on_note
        self._rng = random.Random(settings.seed)
        self._backend = OpenAIHTTPBackend(
            settings.target,
            api=settings.api,
            model=settings.model,
            api_key=settings.api_key,
            timeout_s=settings.timeout_s,
            pool_size=settings.max_in_flight,
            prewarm=1,
            policy=settings.policy,
        )
        self._started = False
        self._in_flight: set[asyncio.Task[None]] = set()
        self._failures = 0  # consecutive connect failures
        self._index = 0
        self.skipped = 0
        self.model: str | None = settings.model

    async def run(self) -> None:
        """Probe until cancelled (then cancel probes in flight and close the backend)."""
        try:
            while True:
                if not self._started:
                    await self._try_start()
                else:
                    self._launch()
                await asyncio.sleep(self._next_gap())
        finally:
            for task in list(self._in_flight):
                task.cancel()
            if self._in_flight:
                await asyncio.gather(*self._in_flight, return_exceptions=True)
            await self._backend.close()

    def _gap(self) -> float:
        rate = self.settings.rate
        return self._rng.expovariate(rate) if self.settings.arrival == "poisson" else 1.0 / rate

    def _next_gap(self) -> float:
        gap = self._gap()
        if self._failures:
            backoff = min(self.settings.max_backoff_s, (1.0 / self.settings.rate) * 2 ** (self._failures - 1))
            return max(gap, backoff)
        return gap

    async def _try_start(self) -> None:
        scheduled = perf_counter_ns()
        try:
            info = await self._backend.start()
        except TargetError as exc:
            await self._backend.close()
            self._failed_start(scheduled, str(exc))
            return
        if not self._started:
            self._on_note(f"target up: model {info.model} ({info.url})")
        self._started = True
        self.model = info.model
        self._failures = 0

    def _failed_start(self, scheduled_ns: int, message: str) -> None:
        kind = ErrorKind.CONNECT if "cannot reach" in message else ErrorKind.OTHER
        now = perf_counter_ns()
        record = RequestRecord(
            index=self._next_index(), iteration=1, warmup=False, scheduled_ns=scheduled_ns,
            sent_ns=scheduled_ns, end_ns=now, status=Status.ERROR, error_kind=kind, error=message[:300],
        )
        if self._failures == 0:
            self._on_note(f"target not usable yet, retrying with backoff: {message}")
        self._failures += 1
        self._on_record(record)

    def _next_index(self) -> int:
        self._index += 1
        return self._index

    def _launch(self) -> None:
        if len(self._in_flight) >= self.settings.max_in_flight:
            self.skipped += 1
            return
        task = asyncio.create_task(self._probe(self._next_index(), perf_counter_ns()))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _probe(self, index: int, scheduled_ns: int) -> None:
        s = self.settings
        spec = RequestSpec(index=index, prompt=s.prompt, max_tokens=s.max_tokens)
        record = RequestRecord(index=index, iteration=1, warmup=False, scheduled_ns=scheduled_ns)
        await self._backend.send(spec, record)
        if record.status is Status.ERROR and record.error_kind is ErrorKind.CONNECT:
            if self._failures == 0:
                self._on_note(f"target unreachable, probing with backoff: {record.error}")
            self._failures += 1
        elif record.status is Status.OK:
            if self._failures:
                self._on_note("target reachable again")
            self._failures = 0
        self._on_record(record)
