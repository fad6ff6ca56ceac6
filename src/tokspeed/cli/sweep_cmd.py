"""`tokspeed sweep` and `tokspeed capacity`: every `run` option, plus what each adds.

Both commands take exactly `run`'s options (their signatures are `run_options.signature()`, extended),
so a flag means the same thing everywhere.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal, Optional

import typer

from tokspeed.cli import run_options
from tokspeed.cli.plans import CapacityPlan, Mode
from tokspeed.cli.run_cmd import dispatch
from tokspeed.errors import ConfigError
from tokspeed.runner.sweep import ProbeSettings
from tokspeed.units import parse_duration

PANEL = "Sweep and capacity"

SWEEP_HELP = """Measure a series of load points into one results directory.

Sweep one dimension by giving it a list, or let --auto choose:

  tokspeed sweep --target URL --concurrency 1,2,4,8,16,32

  tokspeed sweep --target URL --rate 1,2,4,8,16 --arrival poisson

  tokspeed sweep --target URL --input-tokens 128,512,2048,8192 --max-tokens 64 --synchronous

  tokspeed sweep --target URL --auto          # synchronous, saturated, then rates in between

  tokspeed sweep --target URL_A --target URL_B --concurrency 1,8   # the same workload on each target

Each point is an ordinary benchmark (warm-up, limits, iterations) in run.json's benchmarks.
"""

CAPACITY_HELP = """Find the highest load at which every SLO holds (QPS under a latency budget).

  tokspeed capacity --target URL --slo 'ttft_p99_ms<=500' --slo 'itl_p99_ms<=50'

Measures one request at a time (if that misses an SLO, the search ends there), then brackets by
doubling, bisects to --precision, and re-measures the best passing load and the lowest failing one
so noise cannot fake a pass or a fail. Each probe holds its rate (--probe-warmup, then a --probe-duration window judged at steady
state; each with its own arrival seed): a load the server does not keep up with (completions
short of arrivals in that window) fails whatever its percentiles say. The capacity printed is
where the SLO figures of the probes near the bracket, fitted against the rates really sent, meet
their limits, in req/s, with an interval. Bounded by --max-probes,
--max-time and --max-rate; Ctrl-C keeps the probes and the bracket so far. Exit 0 when a
capacity was found, 3 when no probed load met the SLOs.
"""

AUTO = inspect.Parameter(
    "auto", inspect.Parameter.KEYWORD_ONLY, default=False,
    annotation=Annotated[bool, typer.Option("--auto", help="Choose the points: synchronous, saturated throughput, then 6 rates in between.", rich_help_panel=PANEL)],
)
BY = inspect.Parameter(
    "by", inspect.Parameter.KEYWORD_ONLY, default="rate",
    annotation=Annotated[str, typer.Option("--by", help="Search over the offered rate (open loop) or the concurrency (closed loop). [default: rate]", rich_help_panel=PANEL)],
)
PRECISION = inspect.Parameter(
    "precision", inspect.Parameter.KEYWORD_ONLY, default="5%",
    annotation=Annotated[str, typer.Option("--precision", help="Stop when the bracket is this narrow relative to its low end (5% or 0.05). [default: 5%]", rich_help_panel=PANEL)],
)
START = inspect.Parameter(
    "start", inspect.Parameter.KEYWORD_ONLY, default=None,
    annotation=Annotated[Optional[float], typer.Option("--start", help="First load probed (req/s or concurrency). [default: a rate search starts at what one request at a time achieves; a concurrency search at 1]", rich_help_panel=PANEL)],
)
MAX_PROBES = inspect.Parameter(
    "max_probes", inspect.Parameter.KEYWORD_ONLY, default=20,
    annotation=Annotated[int, typer.Option("--max-probes", help="Give up after this many probes. [default: 20]", rich_help_panel=PANEL, min=2)],
)


PROBE_DURATION = inspect.Parameter(
    "probe_duration", inspect.Parameter.KEYWORD_ONLY, default=None,
    annotation=Annotated[Optional[str], typer.Option("--probe-duration", help="Measured window of each probe (10s, 1m); --duration means the same. A rate probe lasts at least --requests arrivals (by default 200, at most 60 s). [default: 10s]", rich_help_panel=PANEL)],
)
PROBE_WARMUP = inspect.Parameter(
    "probe_warmup", inspect.Parameter.KEYWORD_ONLY, default=None,
    annotation=Annotated[Optional[str], typer.Option("--probe-warmup", help="How long each probe holds its load before its window (0 for none); --warmup 5s means the same. [default: 3s]", rich_help_panel=PANEL)],
)
MAX_TIME = inspect.Parameter(
    "max_time", inspect.Parameter.KEYWORD_ONLY, default="30m",
    annotation=Annotated[str, typer.Option("--max-time", help="Stop the search (with the bracket so far) before a probe would end past this. [default: 30m]", rich_help_panel=PANEL)],
)
MAX_RATE = inspect.Parameter(
    "max_rate", inspect.Parameter.KEYWORD_ONLY, default=None,
    annotation=Annotated[Optional[float], typer.Option("--max-rate", help="Never probe above this rate (or concurrency): a pass there ends the search with 'the SLOs held up to' it. [default: none; the client's own limit ends it]", rich_help_panel=PANEL, min=0)],
)


def _extended(name: str, extra: list[inspect.Parameter], body: Callable[..., int]) -> Callable[..., int]:
    """A command with run's options plus `extra`; `body(flags, **extras)` runs it."""
    base = run_options.signature()
    names = [p.name for p in extra]

    def command(**kwargs: Any) -> int:
        extras = {n: kwargs.pop(n) for n in names}
        return body(kwargs, **extras)

    command.__signature__ = base.replace(parameters=[*base.parameters.values(), *extra])  # type: ignore[attr-defined]
    command.__name__ = name
    return command


def _sweep(flags: dict[str, Any], *, auto: bool) -> int:
    return dispatch(flags, Mode(command="sweep", auto=auto))


def _capacity(flags: dict[str, Any], *, by: str, precision: str, start: float | None, max_probes: int,
              probe_duration: str | None, probe_warmup: str | None, max_time: str, max_rate: float | None) -> int:
    if by not in ("rate", "concurrency"):
        raise ConfigError(f"--by {by!r}: search by rate or concurrency")
    settings = probe_settings(flags, probe_duration, probe_warmup, max_time, max_rate, parse_precision(precision))
    plan = CapacityPlan(by=by_value(by), precision=settings.precision, start=start, max_probes=max_probes,
                        settings=settings)
    return dispatch(flags, Mode(command="capacity", capacity=plan))


def probe_settings(flags: dict[str, Any], probe_duration: str | None, probe_warmup: str | None, max_time: str,
                   max_rate: float | None, precision: float) -> ProbeSettings:
    """How each probe holds its load, from the capacity flags and run's --duration, --requests, --warmup."""
    default = ProbeSettings()
    duration = probe_duration or flags.get("duration")
    warmup = probe_warmup
    if warmup is None and flags.get("warmup") is not None and not str(flags["warmup"]).strip().isdigit():
        warmup = flags["warmup"]
    return ProbeSettings(
        duration_s=parse_duration(duration) if duration else default.duration_s,
        warmup_s=parse_duration(warmup) if warmup is not None else default.warmup_s,
        min_requests=flags.get("requests"),
        max_time_s=parse_duration(max_time),
        max_value=max_rate or None,
        precision=precision,
    )


def by_value(text: str) -> Literal["rate", "concurrency"]:
    return "rate" if text == "rate" else "concurrency"


def parse_precision(text: str) -> float:
    """`5%` or `0.05` -> 0.05."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError as exc:
        raise ConfigError(f"--precision {text!r} is not a percentage", hint="e.g. --precision 5%") from exc
    if not 0 < value < 1:
        raise ConfigError(f"--precision must be between 0% and 100%, not {text}")
    return value


sweep = _extended("sweep", [AUTO], _sweep)
capacity = _extended("capacity", [BY, PRECISION, START, MAX_PROBES, PROBE_DURATION, PROBE_WARMUP, MAX_TIME, MAX_RATE], _capacity)
