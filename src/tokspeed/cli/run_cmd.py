"""`tokspeed run`: flags -> RunConfig -> workload + backend -> execute_run -> console + files."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tokspeed.backends.credentials import redact_url
from tokspeed.backends.engine_options import EngineOptions
from tokspeed.cli import engine_flags as ef
from tokspeed.cli import run_options as ro
from tokspeed.cli.plans import Mode, Plan, float_value, int_value, sweep_request
from tokspeed.config import RunConfig, config_from_sources, http_url_problem
from tokspeed.errors import ConfigError
from tokspeed.load.setup import refuse_profile_flags
from tokspeed.runner.passes import check_offline
from tokspeed.runner.workers import check_workers, choose_workers

HELP = """Benchmark a server, or with no --target a small model on this CPU (the embedded default).

Examples:

  tokspeed run                                  # the embedded default: no server, nothing to download

  tokspeed run --target http://127.0.0.1:8000/v1 --concurrency 8 --requests 200

  tokspeed run --target http://127.0.0.1:8000/v1 --rate 4 --arrival poisson --duration 60s --slo 'ttft_p99_ms<=500'

  tokspeed run --scenario bench.yaml --out runs/today

  tokspeed run --target hf:./my-model --dtype bf16            # a local transformers model, in-process

  tokspeed run --target vllm:./Qwen2-7B-Instruct-AWQ --dataset prompts.json --iterations 3   # each iteration one pass over the file, all at once
"""

def run(**flags: Any) -> int:
    return dispatch(flags, Mode())


run.__signature__ = ro.signature()  # type: ignore[attr-defined]  # every option of run_options.RUN_OPTIONS


def dispatch(flags: dict[str, Any], mode: Mode) -> int:
    """Flags (of run, sweep or capacity: every option of `run_options.RUN_OPTIONS`) -> a validated config and a
    plan -> execute. The options with `sets` become config fields as declared; the rest are read here by name."""
    f = flags
    target: list[str] | None = f["target"]
    engine = ef.engine_options(**{name: f[name] for name in ro.ENGINE_FLAGS})
    sweep = sweep_request(target, f["concurrency"], f["rate"], f["input_tokens"], f["max_tokens"], mode.auto)
    concurrency_n = int_value(sweep.first("concurrency", f["concurrency"]), "--concurrency")
    rate_r = float_value(sweep.first("rate", f["rate"]), "--rate")
    input_tokens = sweep.first("input_tokens", f["input_tokens"])
    scheduled = f["trace"] or f["stages"] or f["ramp"]  # a trace, stages or a ramp is open loop: --max-concurrency caps it
    cap = None if f["conversation_rate"] or scheduled else f["max_concurrency"]
    overrides: dict[str, Any] = {
        **ro.config_overrides(f),
        "target": _normalise_target(target[0]) if target else None,
        "output_tokens": sweep.first("output_tokens", f["max_tokens"]),
        "input_tokens": input_tokens,
        "profile": _profile(f["synchronous"], concurrency_n, rate_r, cap),
        "concurrency": concurrency_n,
        "rate": rate_r,
    }
    refuse_profile_flags(rate_r, concurrency_n, f["synchronous"], trace=f["trace"], stages=f["stages"], ramp=f["ramp"])
    cfg = config_from_sources(f["scenario"], overrides)
    if cfg.scheduled is not None and (mode.capacity is not None or mode.auto):  # they set the load themselves
        raise ConfigError(f"{cfg.scheduled} sets its own load: it cannot be searched or auto-swept",
                          hint="run it with tokspeed run (or sweep over targets)")
    engine = engine.over(EngineOptions.from_mapping(cfg.engine))  # the engine flags win over the scenario's
    cfg = cfg.model_copy(update={"engine": engine.as_mapping()})
    if input_tokens and f["dataset"] is None and cfg.dataset == "builtin":
        cfg = cfg.model_copy(update={"dataset": "synthetic"})
    targets: list[str | None] = [_normalise_target(t) for t in target] if target else [None]
    plan = mode.plan(sweep, targets, cfg)
    check_offline(cfg, cfg.model_fields_set)
    if cfg.offline and plan is not None:
        raise ConfigError("--offline measures one load point, not a sweep or a capacity search",
                          hint="drop --offline, or run one point with tokspeed run")
    check_workers(cfg, targets)
    _refuse_proxies(targets if target else [cfg.target], cfg.server_metrics)
    if f["quality"]:
        from tokspeed.cli.quality_cmd import check_run_target

        check_run_target(cfg, len(target or ()))
    from tokspeed.history.location import resolve

    return execute(cfg, quiet=f["quiet"], plain=f["plain"], overwrite=f["overwrite"], html=f["html"], engine=engine,
                   plan=plan, quality=f["quality"], catalog=resolve(f["catalog"], disabled=f["no_catalog"]))


def execute(cfg: RunConfig, *, quiet: bool = False, plain: bool = False, overwrite: bool = False, html: Path | None = None,
            engine: EngineOptions | None = None, plan: Plan | None = None, quality: bool = False,
            catalog: Any = None) -> int:
    """Run a validated config with console output; returns the exit code."""
    from tokspeed.backends.embedded.defaults import is_embedded_target
    from tokspeed.backends.local_target import engine_kind
    from tokspeed.cli.exit_codes import exit_code_for
    from tokspeed.cli.report_exports import prepare_run_html, write_run_html
    from tokspeed.reports.console import Console
    from tokspeed.runner.factory import build_backend, build_workload
    from tokspeed.runner.fdlimit import ensure_fd_limit
    from tokspeed.runner.passes import (
        PROFILE_FIELDS,
        dataset_passes,
        describe_embedded,
        describe_offline,
        embedded_defaults,
    )
    from tokspeed.runner.run import execute_points, single_point

    given = cfg.model_fields_set  # what the user set, before any target's defaults
    embedded = is_embedded_target(cfg.target)  # no --target: the embedded model on this CPU
    if embedded:
        cfg = embedded_defaults(cfg)
    ensure_fd_limit(cfg.streams)
    out_dir = cfg.out or Path("runs") / datetime.now().strftime("%Y%m%d-%H%M%S")
    html_plan = prepare_run_html(html)  # a bad path or a missing extra fails before the run
    workload = build_workload(cfg)
    vllm = engine_kind(cfg.target) == "vllm"
    offline = plan is None and (cfg.offline or (vllm and not PROFILE_FIELDS & given))  # vllm: offline unless a profile is given
    if plan is None:  # one pass over a prompt file per iteration; the offline mode submits it at once
        cfg = dataset_passes(cfg, workload.describe(), given, offline=offline)

    def build(point_cfg: RunConfig) -> Any:
        point_workload = workload if point_cfg is cfg else build_workload(point_cfg)
        return build_backend(point_cfg, point_workload, engine), point_workload

    if cfg.server_profile:  # a server without the profiler's endpoints is refused before anything is sent
        from tokspeed.runner.profiling import check
        from tokspeed.runner.run import target_headers

        for target in getattr(plan, "targets", None) or [cfg.target]:  # a sweep over targets: each of them
            asyncio.run(check(target, target_headers(cfg.model_copy(update={"target": target}))))
    points = single_point(cfg, *build(cfg)) if plan is None else plan.points(cfg, build)
    console = Console(quiet=quiet, plain=plain)
    console.starting(cfg, out_dir)
    if embedded and not quiet:
        console.out.print(f"Measuring the {describe_embedded(cfg)}")
    if offline and not quiet:
        console.out.print(f"Measuring {describe_offline(cfg, vllm)}")
    choice = choose_workers(cfg)
    if choice.count != cfg.client_workers and not quiet:  # auto, or fewer than asked: say what and why
        per_point = " for the first load point; each point chooses its own" if plan is not None else ""
        console.out.print(f"Client processes: {choice.count} ({choice.reason}){per_point}", highlight=False)
    gc.collect()
    gc.freeze()  # start-up objects (modules, models, the workload) are never scanned again: shorter GC pauses
    with console.live(cfg) as observer:
        outcome = _run_async(lambda stop: execute_points(cfg, points, out_dir, observer, overwrite=overwrite,
                                                         interrupt=stop))
    console.final(outcome)
    if cfg.price_per_hour and not quiet:
        _print_costs(console, outcome.result, cfg)
    if quality and outcome.result.status == "complete":  # the probe runs after the load, never during it
        from tokspeed.cli.quality_cmd import probe_after_run

        probe_after_run(console, cfg, outcome, quiet=quiet)
    if html_plan is not None:  # the records are on disk, not in memory: read them back for the report
        write_run_html(html_plan, outcome.result, outcome.load_records(), outcome.directory)
    if catalog is not None:  # the results history; a warning at most, never the exit code
        from tokspeed.cli.history_cmd import catalogue_run

        catalogue_run(console, outcome.directory, cfg, catalog, quiet=quiet)
    return exit_code_for(outcome, cfg)


def _print_costs(console: Any, result: Any, cfg: RunConfig) -> None:
    """What the measured throughput costs at each --price-per-hour (as `tokspeed cost DIR` prints it)."""
    from tokspeed.estimate.cost import costs, measured_rates
    from tokspeed.reports.estimate_text import render_costs

    rows = costs(measured_rates(result), list(cfg.price_per_hour), cfg.gpus)
    if rows:
        console.out.print(render_costs(rows))


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")  # each stops the run, which then saves what it has


def _run_async(make: Callable[[Any], Any]) -> Any:
    """Run `make(interrupt)` on uvloop when available; SIGINT/SIGTERM/SIGHUP ask it to stop, once.

    The first signal cancels the load (the run then summarises and saves what it has); later
    ones only say that it is already stopping, so a second Ctrl-C cannot cut the summary or the
    final writes.
    """
    from tokspeed.runner.run import Interrupt

    async def main() -> Any:
        interrupt = Interrupt()
        loop = asyncio.get_running_loop()

        def on_signal(name: str) -> None:
            if not interrupt.request() and interrupt.asked == 2:
                print(f"{name}: already stopping; saving what was measured", file=sys.stderr, flush=True)

        for name in STOP_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            try:
                loop.add_signal_handler(sig, on_signal, name)
            except (NotImplementedError, RuntimeError):
                pass
        return await make(interrupt)

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())


def _profile(synchronous: bool, concurrency: int | None, rate: float | None, cap: int | None) -> str | None:
    chosen = [name for name, on in (("--synchronous", synchronous), ("--concurrency", concurrency), ("--rate", rate)) if on]
    if len(chosen) > 1:
        raise ConfigError(
            f"{' and '.join(chosen)} cannot be combined: pick one load profile",
            hint="to cap in-flight requests under --rate, use --max-concurrency",
        )
    if cap is not None and rate is None:
        raise ConfigError("--max-concurrency only applies to --rate", hint="for a closed loop use --concurrency N")
    if synchronous:
        return "synchronous"
    if concurrency is not None:
        return "concurrency"
    if rate is not None:
        return "rate"
    return None


def _refuse_proxies(targets: list[str | None], server_metrics: str | None) -> None:
    """ConfigError (before the results directory exists) when a proxy variable applies to an HTTP target
    or to the --server-metrics URL: tokspeed's clients would connect to them directly."""
    from tokspeed.backends.http_policy import refuse_proxy

    for url in targets:
        if url and url.startswith(("http://", "https://")):
            refuse_proxy(url)
    if server_metrics and server_metrics.startswith(("http://", "https://")):
        refuse_proxy(server_metrics, what="--server-metrics")


def _normalise_target(url: str) -> str:
    from tokspeed.backends.embedded.defaults import (
        is_embedded_target,
        normalise_embedded_target,
    )
    from tokspeed.backends.local_target import engine_kind, normalise_engine_target

    if is_embedded_target(url):
        return normalise_embedded_target(url)
    if engine_kind(url) is not None:
        return normalise_engine_target(url)
    url = url.strip()  # a pasted trailing space would end up in the request line ("POST /v1 /chat/completions")
    problem = http_url_problem(url)
    if problem:
        raise ConfigError(
            f"--target {redact_url(url)!r} {problem}",
            hint="use e.g. --target http://127.0.0.1:8000/v1, or hf:PATH / vllm:PATH for a local model directory",
        )
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path == "":
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
