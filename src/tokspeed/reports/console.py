"""The console during and after `tokspeed run`: a live view, then the final printout.

Three modes: rich (live view, colour), plain (a line per phase, no control
codes; for CI logs) and quiet (only the results directory and SLO verdicts).
The live view reads counters the observer keeps; it does no per-token work.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter_ns

from rich.console import Console as RichConsole
from rich.live import Live
from rich.text import Text

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.credentials import redact_url
from tokspeed.config import RunConfig
from tokspeed.records import RequestRecord, Status
from tokspeed.reports.format import fmt
from tokspeed.reports.summary_text import render_result
from tokspeed.runner.loops import Phase
from tokspeed.runner.run import RunOutcome

NS = 1_000_000_000
_RECENT = 512
# points at least this large say so while their summary is built (~0.1 ms of CPU a request)
SUMMARY_NOTICE_REQUESTS = 10_000
PLAIN_EVERY_S = 10.0  # the plain console's progress line while a phase runs (a CI log shows a run is alive)


class Progress:
    """Counters for the phase in progress; also the Observer the runner calls.

    What it echoes (the plain console's log) is never wrapped: a line broken at
    the console's width breaks a grep of the log, at a place that moves with the
    length of a path.
    """

    def __init__(self, echo: RichConsole | None) -> None:
        self.echo = echo
        self.label = ""
        self.phase: Phase | None = None
        self.reset()

    def reset(self) -> None:
        self.started_ns = perf_counter_ns()
        self.sent = self.done = self.errored = self.cancelled = 0
        self.output_tokens = 0
        self.ttfts: list[int] = []
        self.conversations: set[int] = set()  # multi-turn: the phase's n counts these, not requests
        self.status = ""  # what follows the phase's figures once its load is over
        self.running = False  # between phase_started and phase_finished

    def tick(self) -> None:
        """The plain console's periodic line: the phase's figures so far, while it runs."""
        if self.echo is not None and self.running:
            self.echo.print(self.line(), highlight=False, soft_wrap=True)

    # Observer ---------------------------------------------------------------
    def target_ready(self, info: TargetInfo) -> None:
        if self.echo is not None:
            notes = "".join(f"\n  note: {n}" for n in info.notes)
            where = info.url or "in-process"
            self.echo.print(f"Target ready: model {info.model} at {where}{notes}", highlight=False, soft_wrap=True)
            if isinstance(cold := info.extra.get("cold_start"), dict):
                from tokspeed.reports.cold_start_text import start_line

                self.echo.print(start_line(cold), highlight=False, soft_wrap=True)

    def phase_started(self, label: str, phase: Phase) -> None:
        self.label, self.phase = label, phase
        self.reset()
        self.running = True

    def started(self, record: RequestRecord) -> None:
        self.sent += 1

    def record(self, record: RequestRecord) -> None:
        self.done += 1
        if record.conversation is not None:
            self.conversations.add(record.conversation)
        if record.status is Status.CANCELLED:  # --cancel-share: the client's own abort, not an error
            self.cancelled += 1
            return
        if not record.ok:
            self.errored += 1
            return
        self.output_tokens += record.output_tokens or 0
        if record.first_token_ns is not None:
            self.ttfts.append(record.first_token_ns - record.sent_ns)
            if len(self.ttfts) > 2 * _RECENT:
                del self.ttfts[:_RECENT]

    def phase_finished(self, phase: Phase) -> None:
        self.running = False
        if self.echo is not None:
            self.echo.print(self.line(), highlight=False, soft_wrap=True)

    def summarising(self, label: str, requests: int) -> None:
        """A point's load is over and its summary is being built: said when that takes a while."""
        if requests < SUMMARY_NOTICE_REQUESTS:
            return
        self.status = f"summarising {requests:,} requests"
        if self.echo is not None:
            self.echo.print(f"{label}: summarising {requests:,} requests…", highlight=False, soft_wrap=True)

    # view -------------------------------------------------------------------
    def line(self) -> str:
        phase = self.phase
        name = "warm-up" if phase is None or phase.warmup else f"iteration {phase.iteration}"
        total = f"/{phase.n}" if phase is not None and phase.n is not None else ""
        elapsed = (perf_counter_ns() - self.started_ns) / NS
        tps = self.output_tokens / elapsed if elapsed > 0 else 0.0
        recent = sorted(self.ttfts[-_RECENT:])
        p50 = recent[len(recent) // 2] / 1e6 if recent else None
        done = f"{self.done}{total} done"
        if self.conversations:  # e.g. "9 requests of 3/3 conversations done", never "9/3 done"
            done = f"{self.done} requests of {len(self.conversations)}{total} conversations done"
        return (
            f"{self.label} · {name}: {done}, {self.errored} errored, "
            + (f"{self.cancelled} cancelled, " if self.cancelled else "")
            + f"{self.sent - self.done} in flight · {elapsed:.1f} s · {fmt(tps, 1)} output tok/s · "
            f"TTFT p50 {fmt(p50, 1)} ms" + (f" · {self.status}…" if self.status else "")
        )

    def __rich__(self) -> Text:
        return Text(self.line())


def _every(stop: threading.Event, interval_s: float, call: Callable[[], None]) -> None:
    while not stop.wait(interval_s):
        call()


class Console:
    """Chooses the output mode and renders the start, the live view and the end."""

    def __init__(self, quiet: bool = False, plain: bool = False) -> None:
        self.quiet = quiet
        self.plain = plain or not sys.stdout.isatty()
        self.out = RichConsole(
            highlight=False, no_color=self.plain, force_terminal=None if not self.plain else False, width=None if not self.plain else 160
        )

    def starting(self, cfg: RunConfig, out_dir: Path) -> None:
        if not self.quiet:
            stamps = " · reads timed by the kernel's receive stamps" if cfg.kernel_stamps else ""
            self.out.print(f"tokspeed: benchmarking {redact_url(cfg.target) if cfg.target else cfg.target}{stamps} · "
                           f"results in {out_dir}", soft_wrap=self.plain)

    @contextmanager
    def live(self, cfg: RunConfig) -> Iterator[Progress]:
        if self.quiet:
            yield Progress(echo=None)
            return
        if self.plain:
            progress = Progress(echo=self.out)
            stop = threading.Event()
            ticker = threading.Thread(target=_every, args=(stop, PLAIN_EVERY_S, progress.tick), daemon=True)
            ticker.start()
            try:
                yield progress
            finally:
                stop.set()
            return
        progress = Progress(echo=None)
        with Live(progress, console=self.out, refresh_per_second=4, transient=True):
            yield progress

    def final(self, outcome: RunOutcome) -> None:
        result = outcome.result
        if self.quiet:
            for bench in result.benchmarks:
                for v in bench.summary.slo:
                    print(f"SLO {'PASS' if v.met else 'FAIL'} {v.slo}")
            print(outcome.directory)
            return
        self.out.print(render_result(result, outcome.directory))
        if outcome.interrupted:
            self.out.print(f"Interrupted: {outcome.requests} finished requests saved in {outcome.directory}")
        else:
            self.out.print(f"Results: {outcome.directory}/run.json, {outcome.directory}/requests.jsonl")
