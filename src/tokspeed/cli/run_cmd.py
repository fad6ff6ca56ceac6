"""`tokspeed run`: flags -> RunConfig -> workload + backend -> execute_run -> console + files."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import typer

from tokspeed.backends.credentials import redact_url
from tokspeed.backends.engine_options import EngineOptions
from tokspeed.cli import engine_flags as ef
from tokspeed.cli import tls_flags as tf
from tokspeed.cli.plans import Mode, Plan, float_value, int_value, sweep_request
from tokspeed.config import Api, Arrival, RunConfig, config_from_sources, http_url_problem
from tokspeed.errors import ConfigError
from tokspeed.load.setup import refuse_profile_flags
from tokspeed.runner.passes import check_offline
from tokspeed.runner.workers import check_workers, choose_workers
from tokspeed.units import parse_duration

HELP = """Benchmark a server, or with no --target a small model on this CPU (the embedded default).

Examples:

  tokspeed run                                  # the embedded default: no server, nothing to download

  tokspeed run --target http://127.0.0.1:8000/v1 --concurrency 8 --requests 200

  tokspeed run --target http://127.0.0.1:8000/v1 --rate 4 --arrival poisson --duration 60s --slo 'ttft_p99_ms<=500'

  tokspeed run --scenario bench.yaml --out runs/today

  tokspeed run --target hf:./my-model --dtype bf16            # a local transformers model, in-process

  tokspeed run --target vllm:./Qwen2-7B-Instruct-AWQ --dataset prompts.json --iterations 3   # each iteration one pass over the file, all at once
"""

TARGET = "Target"
WORK = "Workload"
LOAD = "Load"
OUT = "Output"
SAMPLE = "Sampling"
TELEMETRY = "Telemetry"
CONVERSATIONS = "Conversations and shared prefixes"
SCHEDULED = "Trace replay, stages and ramps"
HISTORY = "Results history"


def _opt(*names: str, help: str, panel: str, envvar: str | None = None, **kw: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=panel, envvar=envvar, show_envvar=bool(envvar), **kw)


def run(
    target: Annotated[list[str] | None, _opt("--target", "-t", help="Server base URL ending in /v1, e.g. http://127.0.0.1:8000/v1; embedded[:tiny|:small]; or an in-process engine on a local model directory: hf:PATH (transformers), vllm:PATH (vLLM's offline LLM). Repeat it to measure the same workload on several targets (a sweep). [default: the embedded model on this CPU]", panel=TARGET, envvar="TOKSPEED_TARGET")] = None,
    api: Annotated[Api | None, _opt("--api", help="Endpoint: chat (/v1/chat/completions), completions (/v1/completions), embeddings (/v1/embeddings: latency and input tokens/s, nothing streamed), or a server's native streaming API: tgi, triton, ollama, ollama-chat, llamacpp, sglang (--target is then the server's root URL, e.g. http://127.0.0.1:8080). [default: chat]", panel=TARGET)] = None,
    no_stream: Annotated[bool, _opt("--no-stream", help="Ask for whole responses (no TTFT/ITL; E2E only).", panel=TARGET)] = False,
    model: Annotated[str | None, _opt("--model", "-m", help="Model name, or a mix of models or LoRA adapters each request picks one of: a,b (equal shares) or a=3,b=1 (weights; see --model-policy). Each name must be listed by GET /v1/models; run.json and the printout break the results down per model. [default: first of GET /v1/models]", panel=TARGET)] = None,
    model_policy: Annotated[str | None, _opt("--model-policy", help="How a model mix picks each request's model: round-robin (smooth weighted round-robin: exactly the weights' shares, interleaved) or random (a draw by weight per request, seeded by --seed). [default: round-robin]", panel=TARGET, metavar="round-robin|random")] = None,
    api_key: Annotated[str | None, _opt("--api-key", help="Bearer token. Never written to results or logs. [default: none]", panel=TARGET, envvar="OPENAI_API_KEY")] = None,
    header: Annotated[list[str] | None, _opt("--header", "-H", help="Extra HTTP header 'Name: value' (repeatable). [default: none]", panel=TARGET)] = None,
    extra_body: Annotated[str | None, _opt("--extra-body", help="JSON object merged into every request body, e.g. '{\"ignore_eos\": true}'. [default: none]", panel=TARGET)] = None,
    timeout: Annotated[str | None, _opt("--timeout", help="Per-request timeout (30s, 5m). [default: 600s]", panel=TARGET)] = None,
    ttft_timeout: Annotated[str | None, _opt("--ttft-timeout", help="Fail a streamed request with no first token after this long (10s). [default: off]", panel=TARGET)] = None,
    cancel_share: Annotated[float | None, _opt("--cancel-share", help="Share of requests (0-1) the client aborts --cancel-after after sending them, closing the connection (AIPerf's request cancellation): chosen by --seed, recorded as cancelled (not errors: no latency figures, not in the error rate; the tokens received until then are kept). The server's running requests over time show whether it stops the work. [default: none]", panel=TARGET, min=0.0, max=1.0, metavar="SHARE")] = None,
    cancel_after: Annotated[str | None, _opt("--cancel-after", help="How long after sending it a --cancel-share request is aborted (200ms, 2s). [default: none; needed with --cancel-share]", panel=TARGET)] = None,
    retries: Annotated[int | None, _opt("--retries", help="Retry HTTP 429/503 answers up to N times, waiting Retry-After (at most 30 s). [default: 0; a retry hides what the server did]", panel=TARGET, min=0)] = None,
    no_usage: Annotated[bool, _opt("--no-usage", help="Do not send stream_options.include_usage (count tokens by tokenizer or chunks).", panel=TARGET)] = False,
    ca_cert: tf.CaCert = None,
    insecure: tf.Insecure = False,
    client_cert: tf.ClientCert = None,
    client_key: tf.ClientKey = None,
    max_tokens: Annotated[str | None, _opt("--max-tokens", "--output-tokens", help="max_tokens per request: N, uniform:a,b, normal:mean,sd, or 'dataset'. A list (64,256) sweeps it. [default: 256]", panel=SAMPLE)] = None,
    temperature: Annotated[float | None, _opt("--temperature", help="Sampling temperature (sent only when given). [default: not sent: the server's]", panel=SAMPLE)] = None,
    top_p: Annotated[float | None, _opt("--top-p", help="Nucleus sampling top_p (sent only when given). [default: not sent: the server's]", panel=SAMPLE)] = None,
    stop: Annotated[list[str] | None, _opt("--stop", help="Stop string (repeatable). [default: none]", panel=SAMPLE)] = None,
    dataset: Annotated[str | None, _opt("--dataset", "-d", help="builtin (default), synthetic, or a file: prompts.json list, JSON/JSONL with prompt or messages, CSV with a prompt column, ShareGPT. [default: builtin]", panel=WORK)] = None,
    input_tokens: Annotated[str | None, _opt("--input-tokens", help="Synthetic prompt length in tokens: N, uniform:a,b or normal:mean,sd. A list (128,512,2048) sweeps it. [default: the dataset's own prompts]", panel=WORK)] = None,
    tokenizer: Annotated[str | None, _opt("--tokenizer", help="Local tokenizer.json (or model dir) for exact token counts. [default: approximation]", panel=WORK)] = None,
    seed: Annotated[int | None, _opt("--seed", help="Seed for prompt sampling and arrival times. [default: 0]", panel=WORK)] = None,
    images: Annotated[int | None, _opt("--images", help="Attach N synthetic PNG images to each chat request (image_url parts; vision models). [default: 0]", panel=WORK, min=0)] = None,
    image_size: Annotated[str | None, _opt("--image-size", help="Pixel size of each --images image, WIDTHxHEIGHT. [default: 512x512]", panel=WORK)] = None,
    synchronous: Annotated[bool, _opt("--synchronous", help="One request at a time (the default profile).", panel=LOAD)] = False,
    concurrency: Annotated[str | None, _opt("--concurrency", "-c", help="Closed loop: keep N requests in flight. A list (1,2,4,8) sweeps it. [default: none: one request at a time]", panel=LOAD)] = None,
    rate: Annotated[str | None, _opt("--rate", "-r", help="Open loop: R requests per second on a precomputed schedule. A list (1,2,4) sweeps it. [default: none: a closed loop]", panel=LOAD)] = None,
    arrival: Annotated[Arrival | None, _opt("--arrival", help="Open-loop arrivals: constant, poisson or gamma. [default: poisson]", panel=LOAD)] = None,
    burstiness: Annotated[float | None, _opt("--burstiness", help="Gamma shape for --arrival gamma: 1 = Poisson, <1 burstier. [default: 1]", panel=LOAD)] = None,
    exact_rate: Annotated[bool | None, _opt("--exact-rate/--raw-arrivals", help="Rescale the drawn poisson/gamma gaps so N requests take exactly N/rate seconds (as vLLM's client does), or use the raw draws (the offered rate is then a few percent off, and reported). [default: --exact-rate]", panel=LOAD)] = None,
    max_concurrency: Annotated[int | None, _opt("--max-concurrency", help="Cap in-flight requests for --rate (waits count as lateness). [default: unlimited]", panel=LOAD, min=1)] = None,
    workers: Annotated[str | None, _opt("--workers", help="Client processes that share the streams' HTTP and SSE work, for loads one Python process cannot drive: N, or auto (one per 256 streams, at most cores - 1). HTTP targets only. [default: 1]", panel=LOAD)] = None,
    requests: Annotated[int | None, _opt("--requests", "-n", help="Measured requests per iteration. [default: 100, or unlimited with --duration]", panel=LOAD, min=1)] = None,
    duration: Annotated[str | None, _opt("--duration", help="Stop starting requests after this long per iteration (30s, 5m). [default: none: --requests ends an iteration]", panel=LOAD)] = None,
    warmup: Annotated[str | None, _opt("--warmup", help="Warm-up before measuring, excluded from statistics: N requests (run, then drained), or a duration such as 10s for which the same load runs before the measured requests follow without a pause (the server is then in its steady state when measuring starts). [default: one request per stream, at most 256; capacity probes hold their rate 3s]", panel=LOAD)] = None,
    max_error_rate: Annotated[float | None, _opt("--max-error-rate", help="Stop the run (exit 1) once more than this fraction of measured requests failed, judged from the 20th on, e.g. 0.05. [default: off]", panel=LOAD)] = None,
    iterations: Annotated[int | None, _opt("--iterations", "-i", help="Repeat the measurement K times (after one warm-up) and report spread. With --dataset FILE and no --requests/--duration, each iteration is one pass over the file. [default: 1]", panel=LOAD, min=1)] = None,
    offline: Annotated[bool, _opt("--offline", help="Offline throughput mode: each iteration submits all its requests at once (one pass over --dataset FILE), after one warm-up request, as a script calling llm.generate(prompts) per iteration measures. [default: on for vllm: targets given no load profile, else off]", panel=LOAD)] = False,
    slo: Annotated[list[str] | None, _opt("--slo", help="Objective, repeatable: 'ttft_p99_ms<=500' (percentile) or 'tpot_ms<=50' (per request; goodput). [default: none]", panel=OUT)] = None,
    percentiles: Annotated[str | None, _opt("--percentiles", help="Percentiles to report, e.g. 50,90,99,99.9 (vLLM's metric-percentiles option): the console's columns and compare's latency rows; those beyond p50/p90/p95/p99/p99.9 are added to the summary (ttft_p75_ms, ...). [default: 50,90,95,99,99.9]", panel=OUT)] = None,
    cooldown: Annotated[float | None, _opt("--cooldown", help="Also summarise each load point without its last SHARE of the run, 0 <= SHARE < 1 (guidellm's cool-down): of the planned --duration, else of the requests by completion; requests sent before the cut are kept (summary.cooldown). [default: off]", panel=OUT, min=0.0, max=0.99, metavar="SHARE")] = None,
    out: Annotated[Path | None, _opt("--out", "-o", help="Results directory. [default: runs/<date-time>]", panel=OUT)] = None,
    overwrite: Annotated[bool, _opt("--overwrite", help="Replace the results already in --out (otherwise refused).", panel=OUT)] = False,
    scenario: Annotated[Path | None, _opt("--scenario", help="YAML file with any of these options (flags win). [default: none]", panel=OUT)] = None,
    quiet: Annotated[bool, _opt("--quiet", "-q", help="Print only the results directory and SLO verdicts.", panel=OUT)] = False,
    plain: Annotated[bool, _opt("--plain", help="No live view or colour: plain lines, for CI logs.", panel=OUT)] = False,
    html: Annotated[Path | None, _opt("--html", help="Also write a self-contained HTML report to FILE at the end (also when interrupted). [default: none]", panel=OUT, metavar="FILE")] = None,
    quality: Annotated[bool, _opt("--quality", help="After the speed run, send the quality probe (see `tokspeed quality`) to the same target and add its accuracy per category to run.json ('quality') and the printout. HTTP targets only.", panel=OUT)] = False,
    server_metrics: Annotated[str | None, _opt("--server-metrics", help="Prometheus endpoint of the server to scrape during the run (vLLM, SGLang, TGI, llama.cpp, Triton: its metrics port), or 'off'. [default: the target's /metrics, if it answers]", panel=TELEMETRY, metavar="URL|off")] = None,
    telemetry_interval: Annotated[str | None, _opt("--telemetry-interval", help="Time between telemetry samples (GPU, client, server): 0.25, 250ms, 1s. [default: 0.25 s]", panel=TELEMETRY, metavar="SECONDS")] = None,
    server_profile: Annotated[bool, _opt("--profile", help="Run the server's own profiler over each measured window: POST /start_profile after the warm-up and /stop_profile after the last measured request (also on Ctrl-C), then say where the server wrote its trace (run.json: benchmarks[].server_profile). vLLM serves these only when started with --profiler-config (or VLLM_TORCH_PROFILER_DIR on older versions); a server without them is refused before the load. Profiling slows the server: its figures are not a benchmark's.", panel=TELEMETRY)] = False,
    no_telemetry: Annotated[bool, _opt("--no-telemetry", help="Sample nothing beside the load: no telemetry.jsonl, no GPU/client/server figures.", panel=TELEMETRY)] = False,
    price_per_hour: Annotated[list[float] | None, _opt("--price-per-hour", help="Price of one GPU-hour (any currency; repeatable): print what the measured throughput costs (see `tokspeed cost`). [default: none]", panel=OUT, metavar="PRICE")] = None,
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
    multi_turn: Annotated[int | None, _opt("--multi-turn", help="Conversations of TURNS turns: each turn sends the whole history with the model's real answers; --requests then counts conversations, --concurrency N runs N users. Reports TTFT per turn (prefix caching shows as later turns' lower TTFT). [default: off: single requests]", panel=CONVERSATIONS, min=1, metavar="TURNS")] = None,
    think_time: Annotated[str | None, _opt("--think-time", help="Pause between an answer and the next turn: 2s (constant), exponential:2s (mean), uniform:1s,3s. [default: 0]", panel=CONVERSATIONS)] = None,
    conversation_rate: Annotated[float | None, _opt("--conversation-rate", help="With --multi-turn: start new conversations at this rate per second (open loop, --arrival applies; --max-concurrency caps requests in flight) instead of a closed loop of users. [default: none: a closed loop of users]", panel=CONVERSATIONS, min=0)] = None,
    shared_prefix_groups: Annotated[int | None, _opt("--shared-prefix-groups", help="K groups of requests sharing a prefix (a system prompt or document; chat: a system message, completions: the first line), to measure prefix caching. Reports TTFT for shared vs unique prefixes and the server's cached tokens. [default: off: no shared prefixes]", panel=CONVERSATIONS, min=1, metavar="K")] = None,
    shared_prefix_tokens: Annotated[int | None, _opt("--shared-prefix-tokens", help="Length of each shared prefix, tokens. [default: 1024]", panel=CONVERSATIONS, min=1)] = None,
    prefix_reuse: Annotated[float | None, _opt("--prefix-reuse", help="Share of requests that reuse a group's prefix; the rest get a unique prefix of the same length (uncached by design). [default: 1.0]", panel=CONVERSATIONS, min=0, max=1)] = None,
    trace: Annotated[str | None, _opt("--trace", help="Replay a timestamped trace: each request at its trace time (÷ --trace-speed), with the trace's input and output lengths (synthetic prompts; Mooncake hash_ids become shared prefix blocks). JSONL {timestamp_s, input_tokens, output_tokens[, prompt]} or the public Mooncake, BurstGPT and Azure LLM inference formats. Schedule lag is reported as send lateness. [default: off]", panel=SCHEDULED, metavar="FILE")] = None,
    trace_format: Annotated[str | None, _opt("--trace-format", help="auto, tokspeed, mooncake, burstgpt or azure. [default: auto, from the file]", panel=SCHEDULED)] = None,
    trace_speed: Annotated[float | None, _opt("--trace-speed", help="Replay speed: 2 sends the trace twice as fast (gaps halved). [default: 1]", panel=SCHEDULED)] = None,
    trace_window: Annotated[str | None, _opt("--trace-window", help="Replay only START:END of trace time, e.g. 60s:180s (either side may be empty). [default: the whole trace]", panel=SCHEDULED)] = None,
    stages: Annotated[str | None, _opt("--stages", help="Open-loop stages back to back, each reported on its own: 'warm:rate=2:30s,steady:rate=8:60s,spike:rate=20:10s,cool-down:rate=2:30s' (names optional; --arrival applies). concurrency=N:30s stages run one closed loop whose width changes. [default: off]", panel=SCHEDULED)] = None,
    ramp: Annotated[str | None, _opt("--ramp", help="Rate ramp: rate=1..20:60s rises linearly (reported in 5 windows; :windows=N), rate=1..20:60s:steps=5 in 5 equal steps; concurrency=1..32:60s[:steps=N] steps a closed loop. [default: off]", panel=SCHEDULED)] = None,
    token_audit: Annotated[bool, _opt("--token-audit", help="Keep every response's text in requests.jsonl and audit the output token counts: usage vs --tokenizer, tokens per chunk, requests stopped before max_tokens (run.json: benchmarks[].token_audit).", panel=OUT)] = False,
    tag: Annotated[list[str] | None, _opt("--tag", help="Label the run, KEY=VALUE (repeatable): --tag release=1.4 --tag branch=main. Saved in run.json's config; `tokspeed history list --tag` filters by it. [default: none]", panel=HISTORY, metavar="KEY=VALUE")] = None,
    deployment_commit: Annotated[str | None, _opt("--deployment-commit", help="Git commit of the deployment measured (saved in run.json, shown by `tokspeed history`). [default: none]", panel=HISTORY, envvar="TOKSPEED_DEPLOYMENT_COMMIT")] = None,
    catalog: Annotated[str | None, _opt("--catalog", help="Results catalogue the finished run is registered in: a SQLite file, or postgresql://user:password@host/db for a team's (needs tokspeed[postgres]); 'off' registers nothing. A catalogue that cannot be written costs a warning line, never the run. [default: catalog.sqlite in the user data dir: $XDG_DATA_HOME/tokspeed or ~/.local/share/tokspeed]", panel=HISTORY, envvar="TOKSPEED_CATALOG", metavar="PATH|URL")] = None,
    no_catalog: Annotated[bool, _opt("--no-catalog", help="Do not register the run in the results catalogue (the results directory is written as ever).", panel=HISTORY)] = False,
) -> int:
    return dispatch(dict(locals()), Mode())


def dispatch(flags: dict[str, Any], mode: Mode) -> int:
    """Flags (of run, sweep or capacity) -> a validated config and a plan -> execute."""
    return _dispatch(mode=mode, **flags)


def _dispatch(*, mode: Mode, target: list[str] | None, api: Any, no_stream: bool, model: str | None,
              api_key: str | None, header: list[str] | None, extra_body: str | None, timeout: str | None,
              ttft_timeout: str | None, retries: int | None, no_usage: bool, max_tokens: str | None,
              temperature: float | None, top_p: float | None, stop: list[str] | None, dataset: str | None,
              input_tokens: str | None, tokenizer: str | None, seed: int | None, images: int | None,
              image_size: str | None, synchronous: bool,
              concurrency: str | None, rate: str | None, arrival: Any, burstiness: float | None, exact_rate: bool | None,
              max_concurrency: int | None, workers: str | None, requests: int | None, duration: str | None, warmup: str | None,
              max_error_rate: float | None, iterations: int | None, slo: list[str] | None, out: Path | None,
              offline: bool = False,
              overwrite: bool, scenario: Path | None, quiet: bool, plain: bool, html: Path | None,
              server_metrics: str | None, telemetry_interval: str | None, no_telemetry: bool, server_profile: bool = False,
              price_per_hour: list[float] | None, gpus: int | None, quality: bool = False,
              dtype: Any, device: Any, trust_remote_code: bool, engine_arg: Any, tensor_parallel_size: Any,
              gpu_memory_utilization: Any, max_num_seqs: Any, max_model_len: Any, enforce_eager: bool,
              quantization: Any, kv_cache_dtype: Any, load_format: Any, multi_turn: int | None = None,
              think_time: str | None = None, conversation_rate: float | None = None,
              shared_prefix_groups: int | None = None, shared_prefix_tokens: int | None = None,
              prefix_reuse: float | None = None, trace: str | None = None, trace_format: str | None = None,
              trace_speed: float | None = None, trace_window: str | None = None, stages: str | None = None,
              ramp: str | None = None, token_audit: bool = False, tag: list[str] | None = None,
              deployment_commit: str | None = None, catalog: str | None = None, no_catalog: bool = False,
              percentiles: str | None = None, cooldown: float | None = None, model_policy: str | None = None,
              cancel_share: float | None = None, cancel_after: str | None = None, ca_cert: str | None = None,
              insecure: bool = False, client_cert: str | None = None, client_key: str | None = None) -> int:
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
    scheduled_cap = trace or stages or ramp  # a trace, stages or a ramp is open loop: --max-concurrency caps it
    profile = _profile(synchronous, concurrency_n, rate_r, None if conversation_rate or scheduled_cap else max_concurrency)
    overrides: dict[str, Any] = {
        "target": _normalise_target(target[0]) if target else None,
        "api": api,
        "stream": False if no_stream else None,
        "model": model,
        "model_policy": model_policy,
        "cancel_share": cancel_share,
        "cancel_after_s": parse_duration(cancel_after) if cancel_after else None,
        "api_key": api_key,
        "headers": _headers(header) if header else None,
        "extra_body": _json_object(extra_body) if extra_body else None,
        "timeout_s": parse_duration(timeout) if timeout else None,
        "ttft_timeout_s": parse_duration(ttft_timeout) if ttft_timeout else None,
        "retries": retries,
        **tf.tls_fields(ca_cert=ca_cert, insecure=insecure, client_cert=client_cert, client_key=client_key),
        "include_usage": False if no_usage else None,
        "output_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "stop": stop or None,
        "dataset": dataset,
        "input_tokens": input_tokens,
        "tokenizer": tokenizer,
        "seed": seed,
        "images": images,
        "image_size": image_size,
        "profile": profile,
        "concurrency": concurrency_n,
        "rate": rate_r,
        "arrival": arrival,
        "burstiness": burstiness,
        "exact_rate": exact_rate,
        "max_concurrency": max_concurrency,
        "client_workers": workers,
        "requests": requests,
        "duration_s": parse_duration(duration) if duration else None,
        **warmup_fields(warmup),
        "iterations": iterations,
        "offline": True if offline else None,
        "max_error_rate": max_error_rate,
        "slo": slo or None,
        "percentiles": _percentiles(percentiles),
        "cooldown": cooldown,
        "out": out,
        "server_metrics": server_metrics,
        "telemetry_interval_s": parse_duration(telemetry_interval) if telemetry_interval else None,
        "telemetry": False if no_telemetry else None,
        "server_profile": True if server_profile else None,
        "price_per_hour": price_per_hour or None,
        "gpus": gpus,
        "multi_turn": multi_turn,
        "think_time": think_time,
        "conversation_rate": conversation_rate,
        "shared_prefix_groups": shared_prefix_groups,
        "shared_prefix_tokens": shared_prefix_tokens,
        "prefix_reuse": prefix_reuse,
        "trace": trace,
        "trace_format": trace_format,
        "trace_speed": trace_speed,
        "trace_window": trace_window,
        "stages": stages,
        "ramp": ramp,
        "token_audit": True if token_audit else None,
        "tags": _tags(tag),
        "deployment_commit": deployment_commit.strip() if deployment_commit and deployment_commit.strip() else None,
    }
    refuse_profile_flags(rate_r, concurrency_n, synchronous, trace=trace, stages=stages, ramp=ramp)
    cfg = config_from_sources(scenario, overrides)
    if cfg.scheduled is not None and (mode.capacity is not None or mode.auto):  # they set the load themselves
        raise ConfigError(f"{cfg.scheduled} sets its own load: it cannot be searched or auto-swept",
                          hint="run it with tokspeed run (or sweep over targets)")
    engine = engine.over(EngineOptions.from_mapping(cfg.engine))  # the engine flags win over the scenario's
    cfg = cfg.model_copy(update={"engine": engine.as_mapping()})
    if input_tokens and dataset is None and cfg.dataset == "builtin":
        cfg = cfg.model_copy(update={"dataset": "synthetic"})
    targets: list[str | None] = [_normalise_target(t) for t in target] if target else [None]
    plan = mode.plan(sweep, targets, cfg)
    check_offline(cfg, cfg.model_fields_set)
    if cfg.offline and plan is not None:
        raise ConfigError("--offline measures one load point, not a sweep or a capacity search",
                          hint="drop --offline, or run one point with tokspeed run")
    check_workers(cfg, targets)
    _refuse_proxies(targets if target else [cfg.target], cfg.server_metrics)
    if quality:
        from tokspeed.cli.quality_cmd import check_run_target

        check_run_target(cfg, len(target or ()))
    from tokspeed.history.location import resolve

    return execute(cfg, quiet=quiet, plain=plain, overwrite=overwrite, html=html, engine=engine, plan=plan,
                   quality=quality, catalog=resolve(catalog, disabled=no_catalog))


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


def _percentiles(text: str | None) -> list[float] | None:
    """--percentiles as numbers (None: not given); a usage error names the bad item."""
    if text is None:
        return None
    from tokspeed.stats.distribution import parse_percentiles

    try:
        return list(parse_percentiles(text))
    except ValueError as exc:
        raise ConfigError(f"--percentiles: {exc}", hint="e.g. --percentiles 50,90,99,99.9") from None


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


def warmup_fields(text: str | None) -> dict[str, Any]:
    """`--warmup 16` (requests) or `--warmup 10s` (held at the load) -> the config fields it sets."""
    if text is None:
        return {}
    raw = text.strip()
    if raw.isdigit():
        return {"warmup": int(raw)}
    try:
        seconds = parse_duration(raw)
    except ConfigError as exc:
        raise ConfigError(f"--warmup {text!r}: not a request count nor a duration",
                          hint="--warmup 16 (requests, run and drained) or --warmup 10s (the load held that long)") from exc
    if seconds <= 0:
        raise ConfigError(f"--warmup {text!r}: a duration must be positive", hint="--warmup 0 runs no warm-up")
    return {"warmup_s": seconds}


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


def _tags(items: list[str] | None) -> dict[str, str] | None:
    from tokspeed.cli.history_cmd import tag_values  # the tags' syntax is the history's: it filters by them

    return tag_values(items) if items else None


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
