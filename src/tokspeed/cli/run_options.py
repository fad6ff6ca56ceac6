"""`tokspeed run`'s options, each declared once: its flags, type, default, help and help panel, and the
RunConfig fields it sets.

`run`'s signature (and so Typer's parsing, `--help` and the generated reference in docs/cli.md) is
built from `RUN_OPTIONS`; `sweep` and `capacity` extend the same signature, so a flag means the same
everywhere; `config_overrides` turns the parsed values into the RunConfig fields each option sets
(`sets`: None where the value is not a config field — the load profile, the sweep lists, the engine
flags, where the output goes — which `run_cmd.dispatch` reads by name). Why Typer and a table, not
cyclopts or nested settings models: the saved config (run.json's `config`, scenario files) is the flat
RunConfig that results already on disk use, and the option table keeps it so while the CLI, its help
and the reference all come from one declaration.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from tokspeed.cli import engine_flags as ef
from tokspeed.cli import tls_flags as tf
from tokspeed.config import Api, Arrival
from tokspeed.errors import ConfigError
from tokspeed.units import parse_duration

TARGET = "Target"
WORK = "Workload"
LOAD = "Load"
OUT = "Output"
SAMPLE = "Sampling"
TELEMETRY = "Telemetry"
CONVERSATIONS = "Conversations and shared prefixes"
SCHEDULED = "Trace replay, stages and ramps"
HISTORY = "Results history"

Sets = Callable[[Any], dict[str, Any]]  # an option's value -> the RunConfig fields it sets (None: not given)


@dataclass(frozen=True)
class RunOption:
    """One option: its parameter name, `Annotated[type, typer.Option(...)]`, default, and the fields it sets."""

    name: str
    annotation: Any
    default: Any = None
    sets: Sets | None = None
    engine: bool = False  # an engine flag (hf:, vllm: targets): read by `engine_flags.engine_options`

    def parameter(self) -> inspect.Parameter:
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=self.default,
                                 annotation=self.annotation)


def _opt(*names: str, help: str, panel: str, envvar: str | None = None, **kw: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=panel, envvar=envvar, show_envvar=bool(envvar), **kw)


def to(field: str, convert: Callable[[Any], Any] | None = None) -> Sets:
    """The option sets `field` to its value (through `convert`, when given); None, not given, stays None."""
    def sets(value: Any) -> dict[str, Any]:
        return {field: value if convert is None or value is None else convert(value)}

    return sets


def duration(text: str) -> float | None:
    return parse_duration(text) if text else None


def true_or_none(flag: bool) -> bool | None:
    """A flag that turns a field on: True when given, else None (the scenario's or the default)."""
    return True if flag else None


def false_or_none(flag: bool) -> bool | None:
    """A `--no-x` flag: False when given, else None (the scenario's or the default)."""
    return False if flag else None


def or_none(items: Any) -> Any:
    """A repeatable option given no times: None (not [])."""
    return items or None


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


def _percentiles(text: str) -> list[float]:
    """--percentiles as numbers; a usage error names the bad item."""
    from tokspeed.stats.distribution import parse_percentiles

    try:
        return list(parse_percentiles(text))
    except ValueError as exc:
        raise ConfigError(f"--percentiles: {exc}", hint="e.g. --percentiles 50,90,99,99.9") from None


def _commit(text: str) -> str | None:
    return text.strip() or None


def _tags(items: list[str]) -> dict[str, str] | None:
    from tokspeed.cli.history_cmd import tag_values  # the tags' syntax is the history's: it filters by them

    return tag_values(items) if items else None


def _headers(items: list[str]) -> dict[str, str] | None:
    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header {item!r} is not 'Name: value'")
        out[name.strip()] = value.strip()
    return out


def _json_object(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--extra-body is not valid JSON: {exc}", hint="quote it: --extra-body '{\"ignore_eos\": true}'") from exc
    if not isinstance(value, dict):
        raise ConfigError("--extra-body must be a JSON object")
    return value


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("target", Annotated[list[str] | None, _opt("--target", "-t", help="Server base URL ending in /v1, e.g. http://127.0.0.1:8000/v1; embedded[:tiny|:small]; or an in-process engine on a local model directory: hf:PATH (transformers), vllm:PATH (vLLM's offline LLM). Repeat it to measure the same workload on several targets (a sweep). [default: the embedded model on this CPU]", panel=TARGET, envvar="TOKSPEED_TARGET")]),
    RunOption("api", Annotated[Api | None, _opt("--api", help="Endpoint: chat (/v1/chat/completions), completions (/v1/completions), embeddings (/v1/embeddings: latency and input tokens/s, nothing streamed), or a server's native streaming API: tgi, triton, ollama, ollama-chat, llamacpp, sglang (--target is then the server's root URL, e.g. http://127.0.0.1:8080). [default: chat]", panel=TARGET)], sets=to("api")),
    RunOption("no_stream", Annotated[bool, _opt("--no-stream", help="Ask for whole responses (no TTFT/ITL; E2E only).", panel=TARGET)], default=False, sets=to("stream", false_or_none)),
    RunOption("model", Annotated[str | None, _opt("--model", "-m", help="Model name, or a mix of models or LoRA adapters each request picks one of: a,b (equal shares) or a=3,b=1 (weights; see --model-policy). Each name must be listed by GET /v1/models; run.json and the printout break the results down per model. [default: first of GET /v1/models]", panel=TARGET)], sets=to("model")),
    RunOption("model_policy", Annotated[str | None, _opt("--model-policy", help="How a model mix picks each request's model: round-robin (smooth weighted round-robin: exactly the weights' shares, interleaved) or random (a draw by weight per request, seeded by --seed). [default: round-robin]", panel=TARGET, metavar="round-robin|random")], sets=to("model_policy")),
    RunOption("api_key", Annotated[str | None, _opt("--api-key", help="Bearer token. Never written to results or logs. [default: none]", panel=TARGET, envvar="OPENAI_API_KEY")], sets=to("api_key")),
    RunOption("header", Annotated[list[str] | None, _opt("--header", "-H", help="Extra HTTP header 'Name: value' (repeatable). [default: none]", panel=TARGET)], sets=to("headers", _headers)),
    RunOption("extra_body", Annotated[str | None, _opt("--extra-body", help="JSON object merged into every request body, e.g. '{\"ignore_eos\": true}'. [default: none]", panel=TARGET)], sets=to("extra_body", _json_object)),
    RunOption("timeout", Annotated[str | None, _opt("--timeout", help="Per-request timeout (30s, 5m). [default: 600s]", panel=TARGET)], sets=to("timeout_s", duration)),
    RunOption("ttft_timeout", Annotated[str | None, _opt("--ttft-timeout", help="Fail a streamed request with no first token after this long (10s). [default: off]", panel=TARGET)], sets=to("ttft_timeout_s", duration)),
    RunOption("cancel_share", Annotated[float | None, _opt("--cancel-share", help="Share of requests (0-1) the client aborts --cancel-after after sending them, closing the connection (AIPerf's request cancellation): chosen by --seed, recorded as cancelled (not errors: no latency figures, not in the error rate; the tokens received until then are kept). The server's running requests over time show whether it stops the work. [default: none]", panel=TARGET, min=0.0, max=1.0, metavar="SHARE")], sets=to("cancel_share")),
    RunOption("cancel_after", Annotated[str | None, _opt("--cancel-after", help="How long after sending it a --cancel-share request is aborted (200ms, 2s). [default: none; needed with --cancel-share]", panel=TARGET)], sets=to("cancel_after_s", duration)),
    RunOption("retries", Annotated[int | None, _opt("--retries", help="Retry HTTP 429/503 answers up to N times, waiting Retry-After (at most 30 s). [default: 0; a retry hides what the server did]", panel=TARGET, min=0)], sets=to("retries")),
    RunOption("no_usage", Annotated[bool, _opt("--no-usage", help="Do not send stream_options.include_usage (count tokens by tokenizer or chunks).", panel=TARGET)], default=False, sets=to("include_usage", false_or_none)),
    RunOption("ca_cert", tf.CaCert, sets=to("ca_cert")),
    RunOption("insecure", tf.Insecure, default=False, sets=to("insecure", true_or_none)),
    RunOption("client_cert", tf.ClientCert, sets=to("client_cert")),
    RunOption("client_key", tf.ClientKey, sets=to("client_key")),
    RunOption("kernel_stamps", Annotated[bool, _opt("--kernel-stamps", help="Time each read by when it reached the client's socket (the kernel's receive stamp), not by when the client's event loop got to it: takes the client's own scheduling delays out of TTFT and ITL on a busy machine. Costs some client CPU per read (measured in docs/benchmarks.md). Plain http:// targets on Linux.", panel=TARGET)], default=False, sets=to("kernel_stamps", true_or_none)),
    RunOption("max_tokens", Annotated[str | None, _opt("--max-tokens", "--output-tokens", help="max_tokens per request: N, uniform:a,b, normal:mean,sd, or 'dataset'. A list (64,256) sweeps it. [default: 256]", panel=SAMPLE)]),
    RunOption("temperature", Annotated[float | None, _opt("--temperature", help="Sampling temperature (sent only when given). [default: not sent: the server's]", panel=SAMPLE)], sets=to("temperature")),
    RunOption("top_p", Annotated[float | None, _opt("--top-p", help="Nucleus sampling top_p (sent only when given). [default: not sent: the server's]", panel=SAMPLE)], sets=to("top_p")),
    RunOption("stop", Annotated[list[str] | None, _opt("--stop", help="Stop string (repeatable). [default: none]", panel=SAMPLE)], sets=to("stop", or_none)),
    RunOption("dataset", Annotated[str | None, _opt("--dataset", "-d", help="builtin (default), synthetic, or a file: prompts.json list, JSON/JSONL with prompt or messages, CSV with a prompt column, ShareGPT. [default: builtin]", panel=WORK)], sets=to("dataset")),
    RunOption("input_tokens", Annotated[str | None, _opt("--input-tokens", help="Synthetic prompt length in tokens: N, uniform:a,b or normal:mean,sd. A list (128,512,2048) sweeps it. [default: the dataset's own prompts]", panel=WORK)]),
    RunOption("tokenizer", Annotated[str | None, _opt("--tokenizer", help="Local tokenizer.json (or model dir) for exact token counts. [default: approximation]", panel=WORK)], sets=to("tokenizer")),
    RunOption("seed", Annotated[int | None, _opt("--seed", help="Seed for prompt sampling and arrival times. [default: 0]", panel=WORK)], sets=to("seed")),
    RunOption("images", Annotated[int | None, _opt("--images", help="Attach N synthetic PNG images to each chat request (image_url parts; vision models). [default: 0]", panel=WORK, min=0)], sets=to("images")),
    RunOption("image_size", Annotated[str | None, _opt("--image-size", help="Pixel size of each --images image, WIDTHxHEIGHT. [default: 512x512]", panel=WORK)], sets=to("image_size")),
    RunOption("synchronous", Annotated[bool, _opt("--synchronous", help="One request at a time (the default profile).", panel=LOAD)], default=False),
    RunOption("concurrency", Annotated[str | None, _opt("--concurrency", "-c", help="Closed loop: keep N requests in flight. A list (1,2,4,8) sweeps it. [default: none: one request at a time]", panel=LOAD)]),
    RunOption("rate", Annotated[str | None, _opt("--rate", "-r", help="Open loop: R requests per second on a precomputed schedule. A list (1,2,4) sweeps it. [default: none: a closed loop]", panel=LOAD)]),
    RunOption("arrival", Annotated[Arrival | None, _opt("--arrival", help="Open-loop arrivals: constant, poisson or gamma. [default: poisson]", panel=LOAD)], sets=to("arrival")),
    RunOption("burstiness", Annotated[float | None, _opt("--burstiness", help="Gamma shape for --arrival gamma: 1 = Poisson, <1 burstier. [default: 1]", panel=LOAD)], sets=to("burstiness")),
    RunOption("exact_rate", Annotated[bool | None, _opt("--exact-rate/--raw-arrivals", help="Rescale the drawn poisson/gamma gaps so N requests take exactly N/rate seconds (as vLLM's client does), or use the raw draws (the offered rate is then a few percent off, and reported). [default: --exact-rate]", panel=LOAD)], sets=to("exact_rate")),
    RunOption("max_concurrency", Annotated[int | None, _opt("--max-concurrency", help="Cap in-flight requests for --rate (waits count as lateness). [default: unlimited]", panel=LOAD, min=1)], sets=to("max_concurrency")),
    RunOption("workers", Annotated[str | None, _opt("--workers", help="Client processes that share the streams' HTTP and SSE work, for loads one Python process cannot drive: N, or auto (one per 256 streams, at most cores - 1). HTTP targets only. [default: 1]", panel=LOAD)], sets=to("client_workers")),
    RunOption("requests", Annotated[int | None, _opt("--requests", "-n", help="Measured requests per iteration. [default: 100, or unlimited with --duration]", panel=LOAD, min=1)], sets=to("requests")),
    RunOption("duration", Annotated[str | None, _opt("--duration", help="Stop starting requests after this long per iteration (30s, 5m). [default: none: --requests ends an iteration]", panel=LOAD)], sets=to("duration_s", duration)),
    RunOption("warmup", Annotated[str | None, _opt("--warmup", help="Warm-up before measuring, excluded from statistics: N requests (run, then drained), or a duration such as 10s for which the same load runs before the measured requests follow without a pause (the server is then in its steady state when measuring starts). [default: one request per stream, at most 256; capacity probes hold their rate 3s]", panel=LOAD)], sets=warmup_fields),
    RunOption("max_error_rate", Annotated[float | None, _opt("--max-error-rate", help="Stop the run (exit 1) once more than this fraction of measured requests failed, judged from the 20th on, e.g. 0.05. [default: off]", panel=LOAD)], sets=to("max_error_rate")),
    RunOption("iterations", Annotated[int | None, _opt("--iterations", "-i", help="Repeat the measurement K times (after one warm-up) and report spread. With --dataset FILE and no --requests/--duration, each iteration is one pass over the file. [default: 1]", panel=LOAD, min=1)], sets=to("iterations")),
    RunOption("offline", Annotated[bool, _opt("--offline", help="Offline throughput mode: each iteration submits all its requests at once (one pass over --dataset FILE), after one warm-up request, as a script calling llm.generate(prompts) per iteration measures. [default: on for vllm: targets given no load profile, else off]", panel=LOAD)], default=False, sets=to("offline", true_or_none)),
    RunOption("slo", Annotated[list[str] | None, _opt("--slo", help="Objective, repeatable: 'ttft_p99_ms<=500' (percentile) or 'tpot_ms<=50' (per request; goodput). [default: none]", panel=OUT)], sets=to("slo", or_none)),
    RunOption("percentiles", Annotated[str | None, _opt("--percentiles", help="Percentiles to report, e.g. 50,90,99,99.9 (vLLM's metric-percentiles option): the console's columns and compare's latency rows; those beyond p50/p90/p95/p99/p99.9 are added to the summary (ttft_p75_ms, ...). [default: 50,90,95,99,99.9]", panel=OUT)], sets=to("percentiles", _percentiles)),
    RunOption("cooldown", Annotated[float | None, _opt("--cooldown", help="Also summarise each load point without its last SHARE of the run, 0 <= SHARE < 1 (guidellm's cool-down): of the planned --duration, else of the requests by completion; requests sent before the cut are kept (summary.cooldown). [default: off]", panel=OUT, min=0.0, max=0.99, metavar="SHARE")], sets=to("cooldown")),
    RunOption("out", Annotated[Path | None, _opt("--out", "-o", help="Results directory. [default: runs/<date-time>]", panel=OUT)], sets=to("out")),
    RunOption("overwrite", Annotated[bool, _opt("--overwrite", help="Replace the results already in --out (otherwise refused).", panel=OUT)], default=False),
    RunOption("scenario", Annotated[Path | None, _opt("--scenario", help="YAML file with any of these options (flags win). [default: none]", panel=OUT)]),
    RunOption("quiet", Annotated[bool, _opt("--quiet", "-q", help="Print only the results directory and SLO verdicts.", panel=OUT)], default=False),
    RunOption("plain", Annotated[bool, _opt("--plain", help="No live view or colour: plain lines, for CI logs.", panel=OUT)], default=False),
    RunOption("html", Annotated[Path | None, _opt("--html", help="Also write a self-contained HTML report to FILE at the end (also when interrupted). [default: none]", panel=OUT, metavar="FILE")]),
    RunOption("quality", Annotated[bool, _opt("--quality", help="After the speed run, send the quality probe (see `tokspeed quality`) to the same target and add its accuracy per category to run.json ('quality') and the printout. HTTP targets only.", panel=OUT)], default=False),
    RunOption("server_metrics", Annotated[str | None, _opt("--server-metrics", help="Prometheus endpoint of the server to scrape during the run (vLLM, SGLang, TGI, llama.cpp, Triton: its metrics port), or 'off'. [default: the target's /metrics, if it answers]", panel=TELEMETRY, metavar="URL|off")], sets=to("server_metrics")),
    RunOption("telemetry_interval", Annotated[str | None, _opt("--telemetry-interval", help="Time between telemetry samples (GPU, client, server): 0.25, 250ms, 1s. [default: 0.25 s]", panel=TELEMETRY, metavar="SECONDS")], sets=to("telemetry_interval_s", duration)),
    RunOption("server_profile", Annotated[bool, _opt("--profile", help="Run the server's own profiler over each measured window: POST /start_profile after the warm-up and /stop_profile after the last measured request (also on Ctrl-C), then say where the server wrote its trace (run.json: benchmarks[].server_profile). vLLM serves these only when started with --profiler-config (or VLLM_TORCH_PROFILER_DIR on older versions); a server without them is refused before the load. Profiling slows the server: its figures are not a benchmark's.", panel=TELEMETRY)], default=False, sets=to("server_profile", true_or_none)),
    RunOption("no_telemetry", Annotated[bool, _opt("--no-telemetry", help="Sample nothing beside the load: no telemetry.jsonl, no GPU/client/server figures.", panel=TELEMETRY)], default=False, sets=to("telemetry", false_or_none)),
    RunOption("price_per_hour", Annotated[list[float] | None, _opt("--price-per-hour", help="Price of one GPU-hour (any currency; repeatable): print what the measured throughput costs (see `tokspeed cost`). [default: none]", panel=OUT, metavar="PRICE")], sets=to("price_per_hour", or_none)),
    RunOption("gpus", Annotated[int | None, _opt("--gpus", help="GPUs serving the target, each paid --price-per-hour. [default: 1]", panel=OUT, min=1)], sets=to("gpus")),
    RunOption("dtype", ef.Dtype, engine=True),
    RunOption("device", ef.Device, engine=True),
    RunOption("trust_remote_code", ef.TrustRemoteCode, default=False, engine=True),
    RunOption("engine_arg", ef.EngineArg, engine=True),
    RunOption("tensor_parallel_size", ef.TensorParallel, engine=True),
    RunOption("gpu_memory_utilization", ef.GpuMemory, engine=True),
    RunOption("max_num_seqs", ef.MaxNumSeqs, engine=True),
    RunOption("max_model_len", ef.MaxModelLen, engine=True),
    RunOption("enforce_eager", ef.EnforceEager, default=False, engine=True),
    RunOption("quantization", ef.Quantization, engine=True),
    RunOption("kv_cache_dtype", ef.KvCacheDtype, engine=True),
    RunOption("load_format", ef.LoadFormat, engine=True),
    RunOption("multi_turn", Annotated[int | None, _opt("--multi-turn", help="Conversations of TURNS turns: each turn sends the whole history with the model's real answers; --requests then counts conversations, --concurrency N runs N users. Reports TTFT per turn (prefix caching shows as later turns' lower TTFT). [default: off: single requests]", panel=CONVERSATIONS, min=1, metavar="TURNS")], sets=to("multi_turn")),
    RunOption("think_time", Annotated[str | None, _opt("--think-time", help="Pause between an answer and the next turn: 2s (constant), exponential:2s (mean), uniform:1s,3s. [default: 0]", panel=CONVERSATIONS)], sets=to("think_time")),
    RunOption("conversation_rate", Annotated[float | None, _opt("--conversation-rate", help="With --multi-turn: start new conversations at this rate per second (open loop, --arrival applies; --max-concurrency caps requests in flight) instead of a closed loop of users. [default: none: a closed loop of users]", panel=CONVERSATIONS, min=0)], sets=to("conversation_rate")),
    RunOption("shared_prefix_groups", Annotated[int | None, _opt("--shared-prefix-groups", help="K groups of requests sharing a prefix (a system prompt or document; chat: a system message, completions: the first line), to measure prefix caching. Reports TTFT for shared vs unique prefixes and the server's cached tokens. [default: off: no shared prefixes]", panel=CONVERSATIONS, min=1, metavar="K")], sets=to("shared_prefix_groups")),
    RunOption("shared_prefix_tokens", Annotated[int | None, _opt("--shared-prefix-tokens", help="Length of each shared prefix, tokens. [default: 1024]", panel=CONVERSATIONS, min=1)], sets=to("shared_prefix_tokens")),
    RunOption("prefix_reuse", Annotated[float | None, _opt("--prefix-reuse", help="Share of requests that reuse a group's prefix; the rest get a unique prefix of the same length (uncached by design). [default: 1.0]", panel=CONVERSATIONS, min=0, max=1)], sets=to("prefix_reuse")),
    RunOption("trace", Annotated[str | None, _opt("--trace", help="Replay a timestamped trace: each request at its trace time (÷ --trace-speed), with the trace's input and output lengths (synthetic prompts; Mooncake hash_ids become shared prefix blocks). JSONL {timestamp_s, input_tokens, output_tokens[, prompt]} or the public Mooncake, BurstGPT and Azure LLM inference formats. Schedule lag is reported as send lateness. [default: off]", panel=SCHEDULED, metavar="FILE")], sets=to("trace")),
    RunOption("trace_format", Annotated[str | None, _opt("--trace-format", help="auto, tokspeed, mooncake, burstgpt or azure. [default: auto, from the file]", panel=SCHEDULED)], sets=to("trace_format")),
    RunOption("trace_speed", Annotated[float | None, _opt("--trace-speed", help="Replay speed: 2 sends the trace twice as fast (gaps halved). [default: 1]", panel=SCHEDULED)], sets=to("trace_speed")),
    RunOption("trace_window", Annotated[str | None, _opt("--trace-window", help="Replay only START:END of trace time, e.g. 60s:180s (either side may be empty). [default: the whole trace]", panel=SCHEDULED)], sets=to("trace_window")),
    RunOption("stages", Annotated[str | None, _opt("--stages", help="Open-loop stages back to back, each reported on its own: 'warm:rate=2:30s,steady:rate=8:60s,spike:rate=20:10s,cool-down:rate=2:30s' (names optional; --arrival applies). concurrency=N:30s stages run one closed loop whose width changes. [default: off]", panel=SCHEDULED)], sets=to("stages")),
    RunOption("ramp", Annotated[str | None, _opt("--ramp", help="Rate ramp: rate=1..20:60s rises linearly (reported in 5 windows; :windows=N), rate=1..20:60s:steps=5 in 5 equal steps; concurrency=1..32:60s[:steps=N] steps a closed loop. [default: off]", panel=SCHEDULED)], sets=to("ramp")),
    RunOption("token_audit", Annotated[bool, _opt("--token-audit", help="Keep every response's text in requests.jsonl and audit the output token counts: usage vs --tokenizer, tokens per chunk, requests stopped before max_tokens (run.json: benchmarks[].token_audit).", panel=OUT)], default=False, sets=to("token_audit", true_or_none)),
    RunOption("tag", Annotated[list[str] | None, _opt("--tag", help="Label the run, KEY=VALUE (repeatable): --tag release=1.4 --tag branch=main. Saved in run.json's config; `tokspeed history list --tag` filters by it. [default: none]", panel=HISTORY, metavar="KEY=VALUE")], sets=to("tags", _tags)),
    RunOption("deployment_commit", Annotated[str | None, _opt("--deployment-commit", help="Git commit of the deployment measured (saved in run.json, shown by `tokspeed history`). [default: none]", panel=HISTORY, envvar="TOKSPEED_DEPLOYMENT_COMMIT")], sets=to("deployment_commit", _commit)),
    RunOption("catalog", Annotated[str | None, _opt("--catalog", help="Results catalogue the finished run is registered in: a SQLite file, or postgresql://user:password@host/db for a team's (needs tokspeed[postgres]); 'off' registers nothing. A catalogue that cannot be written costs a warning line, never the run. [default: catalog.sqlite in the user data dir: $XDG_DATA_HOME/tokspeed or ~/.local/share/tokspeed]", panel=HISTORY, envvar="TOKSPEED_CATALOG", metavar="PATH|URL")]),
    RunOption("no_catalog", Annotated[bool, _opt("--no-catalog", help="Do not register the run in the results catalogue (the results directory is written as ever).", panel=HISTORY)], default=False),
)


BY_NAME: dict[str, RunOption] = {o.name: o for o in RUN_OPTIONS}
ENGINE_FLAGS: tuple[str, ...] = tuple(o.name for o in RUN_OPTIONS if o.engine)


def signature() -> inspect.Signature:
    """`run`'s signature: one keyword parameter per option, in the table's order (the --help order)."""
    return inspect.Signature([o.parameter() for o in RUN_OPTIONS], return_annotation=int)


def config_overrides(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The RunConfig fields the options with `sets` give (None where not given), from run's parsed flags."""
    out: dict[str, Any] = {}
    for o in RUN_OPTIONS:
        if o.sets is not None:
            out.update(o.sets(flags[o.name]))
    return out
