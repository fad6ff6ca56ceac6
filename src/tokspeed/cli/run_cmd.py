"""`tokspeed run`: flags -> RunConfig -> workload + backend -> execute_run -> console + files."""

from __future__ import annotations

import asyncio
import gc
import signal
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import typer

from tokspeed.backends.engine_options import EngineOptions
from tokspeed.cli import engine_flags as ef
from tokspeed.cli.plans import Mode, Plan, float_value, int_value, sweep_request
from tokspeed.cli.workers import check_workers, choose_workers
from tokspeed.config import Api, Arrival, RunConfig, config_from_sources, parse_duration
from tokspeed.errors import ConfigError

HELP = """Benchmark a server, or with no --target a small model on this CPU (the embedded default).

Examples:

  tokspeed run                                  # the embedded default: no server, nothing to download

  tokspeed run --target http://127.0.0.1:8000/v1 --concurrency 8 --requests 200

  tokspeed run --target http://127.0.0.1:8000/v1 --rate 4 --arrival poisson --duration 60s --slo 'ttft_p99_ms<=500'

  tokspeed run --scenario bench.yaml --out runs/today

  tokspeed run --target hf:./my-model --dtype bf16            # a local transformers model, in-process

  tokspeed run --target vllm:./Qwen2-7B-Instruct-AWQ --dataset prompts.json --iterations 3   # the seed's script
"""

TARGET = "Target"
WORK = "Workload"
LOAD = "Load"
OUT = "Output"
SAMPLE = "Sampling"
TELEMETRY = "Telemetry"


def _opt(*names: str, help: str, panel: str, envvar: str | None = None, **kw: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=panel, envvar=envvar, show_envvar=bool(envvar), **kw)


def run(
    target: Annotated[list[str] | None, _opt("--target", "-t", help="Server base URL ending in /v1, e.g. http://127.0.0.1:8000/v1; embedded[:tiny|:small]; or an in-process engine on a local model directory: hf:PATH (transformers), vllm:PATH (vLLM's offline LLM). Repeat it to measure the same workload on several targets (a sweep). [default: the embedded model on this CPU]", panel=TARGET, envvar="TOKSPEED_TARGET")] = None,
    api: Annotated[Api | None, _opt("--api", help="Endpoint: chat (/v1/chat/completions) or completions (/v1/completions). [default: chat]", panel=TARGET)] = None,
    no_stream: Annotated[bool, _opt("--no-stream", help="Ask for whole responses (no TTFT/ITL; E2E only).", panel=TARGET)] = False,
    model: Annotated[str | None, _opt("--model", "-m", help="Model name. [default: first of GET /v1/models]", panel=TARGET)] = None,
    api_key: Annotated[str | None, _opt("--api-key", help="Bearer token. Never written to results or logs.", panel=TARGET, envvar="OPENAI_API_KEY")] = None,
    header: Annotated[list[str] | None, _opt("--header", "-H", help="Extra HTTP header 'Name: value' (repeatable).", panel=TARGET)] = None,
    extra_body: Annotated[str | None, _opt("--extra-body", help="JSON object merged into every request body, e.g. '{\"ignore_eos\": true}'.", panel=TARGET)] = None,
    timeout: Annotated[str | None, _opt("--timeout", help="Per-request timeout (30s, 5m). [default: 600s]", panel=TARGET)] = None,
    ttft_timeout: Annotated[str | None, _opt("--ttft-timeout", help="Fail a streamed request with no first token after this long (10s). [default: off]", panel=TARGET)] = None,
    retries: Annotated[int | None, _opt("--retries", help="Retry HTTP 429/503 answers up to N times, waiting Retry-After (at most 30 s). [default: 0; a retry hides what the server did]", panel=TARGET, min=0)] = None,
    no_usage: Annotated[bool, _opt("--no-usage", help="Do not send stream_options.include_usage (count tokens by tokenizer or chunks).", panel=TARGET)] = False,
    max_tokens: Annotated[str | None, _opt("--max-tokens", "--output-tokens", help="max_tokens per request: N, uniform:a,b, normal:mean,sd, or 'dataset'. A list (64,256) sweeps it. [default: 256]", panel=SAMPLE)] = None,
    temperature: Annotated[float | None, _opt("--temperature", help="Sampling temperature (sent only when given).", panel=SAMPLE)] = None,
    top_p: Annotated[float | None, _opt("--top-p", help="Nucleus sampling top_p (sent only when given).", panel=SAMPLE)] = None,
    stop: Annotated[list[str] | None, _opt("--stop", help="Stop string (repeatable).", panel=SAMPLE)] = None,
    dataset: Annotated[str | None, _opt("--dataset", "-d", help="builtin (default), synthetic, or a file: prompts.json list, JSON/JSONL with prompt or messages, CSV with a prompt column, ShareGPT.", panel=WORK)] = None,
    input_tokens: Annotated[str | None, _opt("--input-tokens", help="Synthetic prompt length in tokens: N, uniform:a,b or normal:mean,sd. A list (128,512,2048) sweeps it.", panel=WORK)] = None,
    tokenizer: Annotated[str | None, _opt("--tokenizer", help="Local tokenizer.json (or model dir) for exact token counts. [default: approximation]", panel=WORK)] = None,
    seed: Annotated[int | None, _opt("--seed", help="Seed for prompt sampling and arrival times. [default: 0]", panel=WORK)] = None,
    synchronous: Annotated[bool, _opt("--synchronous", help="One request at a time (the default profile).", panel=LOAD)] = False,
    concurrency: Annotated[str | None, _opt("--concurrency", "-c", help="Closed loop: keep N requests in flight. A list (1,2,4,8) sweeps it.", panel=LOAD)] = None,
    rate: Annotated[str | None, _opt("--rate", "-r", help="Open loop: R requests per second on a precomputed schedule. A list (1,2,4) sweeps it.", panel=LOAD)] = None,
    arrival: Annotated[Arrival | None, _opt("--arrival", help="Open-loop arrivals: constant, poisson or gamma. [default: poisson]", panel=LOAD)] = None,
    burstiness: Annotated[float | None, _opt("--burstiness", help="Gamma shape for --arrival gamma: 1 = Poisson, <1 burstier. [default: 1]", panel=LOAD)] = None,
    exact_rate: Annotated[bool, _opt("--exact-rate", help="Rescale the drawn poisson/gamma gaps so N requests take exactly N/rate seconds. [default: gaps as drawn; the offered rate is reported]", panel=LOAD)] = False,
    max_concurrency: Annotated[int | None, _opt("--max-concurrency", help="Cap in-flight requests for --rate (waits count as lateness).", panel=LOAD, min=1)] = None,
    workers: Annotated[str | None, _opt("--workers", help="Client processes that share the streams' HTTP and SSE work, for loads one Python process cannot drive: N, or auto (one per 256 streams, at most cores - 1). HTTP targets only. [default: 1]", panel=LOAD)] = None,
    requests: Annotated[int | None, _opt("--requests", "-n", help="Measured requests per iteration. [default: 100, or unlimited with --duration]", panel=LOAD, min=1)] = None,
    duration: Annotated[str | None, _opt("--duration", help="Stop starting requests after this long per iteration (30s, 5m).", panel=LOAD)] = None,
    warmup: Annotated[int | None, _opt("--warmup", help="Warm-up requests before measuring, excluded from statistics. [default: one per stream, at most 256]", panel=LOAD, min=0)] = None,
    max_error_rate: Annotated[float | None, _opt("--max-error-rate", help="Stop the run (exit 1) once more than this fraction of measured requests failed, judged from the 20th on, e.g. 0.05. [default: off]", panel=LOAD)] = None,
    iterations: Annotated[int | None, _opt("--iterations", "-i", help="Repeat the measurement K times (after one warm-up) and report spread. [default: 1]", panel=LOAD, min=1)] = None,
    slo: Annotated[list[str] | None, _opt("--slo", help="Objective, repeatable: 'ttft_p99_ms<=500' (percentile) or 'tpot_ms<=50' (per request; goodput).", panel=OUT)] = None,
    out: Annotated[Path | None, _opt("--out", "-o", help="Results directory. [default: runs/<date-time>]", panel=OUT)] = None,
    overwrite: Annotated[bool, _opt("--overwrite", help="Replace the results already in --out (otherwise refused).", panel=OUT)] = False,
    scenario: Annotated[Path | None, _opt("--scenario", help="YAML file with any of these options (flags win).", panel=OUT)] = None,
    quiet: Annotated[bool, _opt("--quiet", "-q", help="Print only the results directory and SLO verdicts.", panel=OUT)] = False,
    plain: Annotated[bool, _opt("--plain", help="No live view or colour: plain lines, for CI logs.", panel=OUT)] = False,
    html: Annotated[Path | None, _opt("--html", help="Also write a self-contained HTML report to FILE at the end (also when interrupted; needs the 'report' extra).", panel=OUT, metavar="FILE")] = None,
    server_metrics: Annotated[str | None, _opt("--server-metrics", help="Prometheus endpoint of the server to scrape during the run (vLLM, SGLang, TGI, llama.cpp), or 'off'. [default: the target's /metrics, if it answers]", panel=TELEMETRY, metavar="URL|off")] = None,
    telemetry_interval: Annotated[str | None, _opt("--telemetry-interval", help="Time between telemetry samples (GPU, client, server): 0.25, 250ms, 1s. [default: 0.25 s]", panel=TELEMETRY, metavar="SECONDS")] = None,
    no_telemetry: Annotated[bool, _opt("--no-telemetry", help="Sample nothing beside the load: no telemetry.jsonl, no GPU/client/server figures.", panel=TELEMETRY)] = False,
    price_per_hour: Annotated[list[float] | None, _opt("--price-per-hour", help="Price of one GPU-hour (any currency; repeatable): print what the measured throughput costs (see `tokspeed cost`).", panel=OUT, metavar="PRICE")] = None,
    gpus: Annotated[int | None, _opt("--gpus", help="GPUs serving the target, each paid --price-per-hour. [default: 1]", panel=OUT, min=1)] = None,
    dtype: ef.Dtype = None,
    device: ef.Device = None,
    trust_remote_code: ef.TrustRemoteCode = False,
    engine_arg: ef.EngineArg = None,
    tensor_parallel_size: ef.TensorParallel = None,
    gpu_memory_utilization: ef.GpuMemory = None,
    max_num_seqs: ef.MaxNumSeqs = None,
    max_model_len: ef.MaxModelLen = None,
    enforce_eager: ef.EnforceEager = False,
    quantization: ef.Quantization = None,
    kv_cache_dtype: ef.KvCacheDtype = None,
    load_format: ef.LoadFormat = None,
) -> int:
    return dispatch(dict(locals()), Mode())


def dispatch(flags: dict[str, Any], mode: Mode) -> int:
    """Flags (of run, sweep or capacity) -> a validated config and a plan -> execute."""
    return _dispatch(mode=mode, **flags)


def _dispatch(*, mode: Mode, target: list[str] | None, api: Any, no_stream: bool, model: str | None,
              api_key: str | None, header: list[str] | None, extra_body: str | None, timeout: str | None,
              ttft_timeout: str | None, retries: int | None, no_usage: bool, max_tokens: str | None,
              temperature: float | None, top_p: float | None, stop: list[str] | None, dataset: str | None,
              input_tokens: str | None, tokenizer: str | None, seed: int | None, synchronous: bool,
              concurrency: str | None, rate: str | None, arrival: Any, burstiness: float | None, exact_rate: bool,
              max_concurrency: int | None, workers: str | None, requests: int | None, duration: str | None, warmup: int | None,
              max_error_rate: float | None, iterations: int | None, slo: list[str] | None, out: Path | None,
              overwrite: bool, scenario: Path | None, quiet: bool, plain: bool, html: Path | None,
              server_metrics: str | None, telemetry_interval: str | None, no_telemetry: bool,
              price_per_hour: list[float] | None, gpus: int | None,
              dtype: Any, device: Any, trust_remote_code: bool, engine_arg: Any, tensor_parallel_size: Any,
              gpu_memory_utilization: Any, max_num_seqs: Any, max_model_len: Any, enforce_eager: bool,
              quantization: Any, kv_cache_dtype: Any, load_format: Any) -> int:
    engine = ef.engine_options(
        dtype=dtype, device=device, trust_remote_code=trust_remote_code, engine_arg=engine_arg,
        tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
        max_num_seqs=max_num_seqs, max_model_len=max_model_len, enforce_eager=enforce_eager,
        quantization=quantization, kv_cache_dtype=kv_cache_dtype, load_format=load_format,
    )
    sweep = sweep_request(target, concurrency, rate, input_tokens, max_tokens, mode.auto)
    concurrency_n = int_value(sweep.first("concurrency", concurrency), "--concurrency")
    rate_r = float_value(sweep.first("rate", rate), "--rate")
    input_tokens = sweep.first("input_tokens", input_tokens)
    max_tokens = sweep.first("output_tokens", max_tokens)
    profile = _profile(synchronous, concurrency_n, rate_r, max_concurrency)
    overrides: dict[str, Any] = {
        "target": _normalise_target(target[0]) if target else None,
        "api": api,
        "stream": False if no_stream else None,
        "model": model,
        "api_key": api_key,
        "headers": _headers(header) if header else None,
        "extra_body": _json_object(extra_body) if extra_body else None,
        "timeout_s": parse_duration(timeout) if timeout else None,
        "ttft_timeout_s": parse_duration(ttft_timeout) if ttft_timeout else None,
        "retries": retries,
        "include_usage": False if no_usage else None,
        "output_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "stop": stop or None,
        "dataset": dataset,
        "input_tokens": input_tokens,
        "tokenizer": tokenizer,
        "seed": seed,
        "profile": profile,
        "concurrency": concurrency_n,
        "rate": rate_r,
        "arrival": arrival,
        "burstiness": burstiness,
        "exact_rate": True if exact_rate else None,
        "max_concurrency": max_concurrency,
        "client_workers": workers,
        "requests": requests,
        "duration_s": parse_duration(duration) if duration else None,
        "warmup": warmup,
        "iterations": iterations,
        "max_error_rate": max_error_rate,
        "slo": slo or None,
        "out": out,
        "server_metrics": server_metrics,
        "telemetry_interval_s": parse_duration(telemetry_interval) if telemetry_interval else None,
        "telemetry": False if no_telemetry else None,
        "price_per_hour": price_per_hour or None,
        "gpus": gpus,
    }
    cfg = config_from_sources(scenario, overrides)
    engine = engine.over(EngineOptions.from_mapping(cfg.engine))  # the engine flags win over the scenario's
    cfg = cfg.model_copy(update={"engine": engine.as_mapping()})
    if input_tokens and dataset is None and cfg.dataset == "builtin":
        cfg = cfg.model_copy(update={"dataset": "synthetic"})
    targets = [_normalise_target(t) for t in target] if target else [None]
    plan = mode.plan(sweep, targets, cfg)
    check_workers(cfg, targets)
    return execute(cfg, quiet=quiet, plain=plain, overwrite=overwrite, html=html, engine=engine, plan=plan)


def execute(cfg: RunConfig, *, quiet: bool = False, plain: bool = False, overwrite: bool = False, html: Path | None = None,
            engine: EngineOptions | None = None, plan: Plan | None = None) -> int:
    """Run a validated config with console output; returns the exit code."""
    from tokspeed.backends.embedded.defaults import (
        describe_plan,
        embedded_defaults,
        is_embedded_target,
    )
    from tokspeed.backends.local_target import engine_kind
    from tokspeed.backends.vllm_offline.defaults import (
        describe_offline,
        offline_defaults,
    )
    from tokspeed.cli.exit_codes import exit_code_for
    from tokspeed.cli.fdlimit import ensure_fd_limit
    from tokspeed.cli.report_exports import prepare_run_html, write_run_html
    from tokspeed.cli.session import build_backend, build_workload
    from tokspeed.reports.console import Console
    from tokspeed.runner.run import execute_points, single_point

    embedded = is_embedded_target(cfg.target)  # no --target: the embedded model on this CPU
    if embedded:
        cfg = embedded_defaults(cfg)
    ensure_fd_limit(cfg.streams)
    out_dir = cfg.out or Path("runs") / datetime.now().strftime("%Y%m%d-%H%M%S")
    html_plan = prepare_run_html(html)  # a bad path or a missing extra fails before the run
    workload = build_workload(cfg)
    offline_vllm = engine_kind(cfg.target) == "vllm" and plan is None
    if offline_vllm:  # the seed's offline throughput run unless a load profile was given
        cfg = offline_defaults(cfg, workload.describe())

    def build(point_cfg: RunConfig) -> Any:
        point_workload = workload if point_cfg is cfg else build_workload(point_cfg)
        return build_backend(point_cfg, point_workload, engine), point_workload

    points = single_point(cfg, *build(cfg)) if plan is None else plan.points(cfg, build)
    console = Console(quiet=quiet, plain=plain)
    console.starting(cfg, out_dir)
    if embedded and not quiet:
        console.out.print(f"Measuring the {describe_plan(cfg)}")
    if offline_vllm and not quiet:
        console.out.print(f"Measuring {describe_offline(cfg)}")
    choice = choose_workers(cfg)
    if choice.count != cfg.client_workers and not quiet:  # auto, or fewer than asked: say what and why
        per_point = " for the first load point; each point chooses its own" if plan is not None else ""
        console.out.print(f"Client processes: {choice.count} ({choice.reason}){per_point}", highlight=False)
    gc.collect()
    gc.freeze()  # start-up objects (modules, models, the workload) are never scanned again: shorter GC pauses
    with console.live(cfg) as observer:
        outcome = _run_async(execute_points(cfg, points, out_dir, observer, overwrite=overwrite))
    console.final(outcome)
    if cfg.price_per_hour and not quiet:
        _print_costs(console, outcome.result, cfg)
    if html_plan is not None:  # the records are on disk, not in memory: read them back for the report
        write_run_html(html_plan, outcome.result, outcome.load_records(), outcome.directory)
    return exit_code_for(outcome, cfg)


def _print_costs(console: Any, result: Any, cfg: RunConfig) -> None:
    """What the measured throughput costs at each --price-per-hour (as `tokspeed cost DIR` prints it)."""
    from tokspeed.estimate.cost import costs, measured_rates
    from tokspeed.reports.estimate_text import render_costs

    rows = costs(measured_rates(result), list(cfg.price_per_hour), cfg.gpus)
    if rows:
        console.out.print(render_costs(rows))


def _run_async(coro: Any) -> Any:
    """Run on uvloop when available; SIGINT/SIGTERM cancel the run, which then saves what it has."""

    async def main() -> Any:
        task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, task.cancel)
            except (NotImplementedError, RuntimeError):
                pass
        return await task

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
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # "http://[::1/v1", "http://host:port/v1", a port past 65535
        valid = False
    if not valid:
        raise ConfigError(
            f"--target {url!r} is not an http(s) URL",
            hint="use e.g. --target http://127.0.0.1:8000/v1, or hf:PATH / vllm:PATH for a local model directory",
        )
    path = parts.path.rstrip("/")
    if path == "":
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _headers(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header {item!r} is not 'Name: value'")
        out[name.strip()] = value.strip()
    return out


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--extra-body is not valid JSON: {exc}", hint="quote it: --extra-body '{\"ignore_eos\": true}'") from exc
    if not isinstance(value, dict):
        raise ConfigError("--extra-body must be a JSON object")
    return value
