"""The validated run configuration; every default lives here.

`RunConfig` is built from CLI flags, a scenario YAML file, or both (flags win).
It is saved in `run.json` with secrets removed (`redacted_dump`).
"""

from __future__ import annotations

import math
import re
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from tokspeed.backends.credentials import SECRET_HEADERS
from tokspeed.errors import ConfigError
from tokspeed.load.classes import ClassConfig
from tokspeed.load.stages import StageConfig, stages_value
from tokspeed.metrics.slo import FROM_SCHEDULE, SLO, parse_slo
from tokspeed.units import parse_duration

if TYPE_CHECKING:
    from tokspeed.backends.http_policy import HttpPolicy

DEFAULT_REQUESTS = 100
DEFAULT_OUTPUT_TOKENS = "256"
DEFAULT_TIMEOUT_S = 600.0
# at the end of --duration, requests still in flight get this long again as the duration (at least
# DURATION_GRACE_MIN_S, at most --timeout) to finish; then they are cut off and recorded as incomplete
DURATION_GRACE_MIN_S = 10.0
MAX_ERROR_RATE_MIN_REQUESTS = 20  # --max-error-rate is judged once this many measured requests finished
MAX_CLIENT_WORKERS = 256  # --workers N: at most this many client processes
MAX_COUNT = 1_000_000_000  # --requests, --warmup, --iterations: more is a typo (and past what JSON tools read exactly)
MAX_SEED = 2**63 - 1  # numpy seeds and run.json (a 64-bit integer)
REFUSED_HEADERS = ("content-length", "transfer-encoding", "host")  # tokspeed frames each request itself
SAMPLE_OUTPUTS = 3  # records that keep their full output text (for the console sample)
DEFAULT_TELEMETRY_INTERVAL_S = 0.25  # GPU, client and server samples, 4 per second


class Api(str, Enum):
    COMPLETIONS = "completions"
    CHAT = "chat"
    EMBEDDINGS = "embeddings"  # /v1/embeddings: latency and input tokens/s, no tokens streamed
    # servers' native streaming APIs (tokspeed.backends.native); --target is then the server's root URL
    TGI = "tgi"  # POST /generate_stream
    TRITON = "triton"  # POST /v2/models/{model}/generate_stream
    OLLAMA = "ollama"  # POST /api/generate
    OLLAMA_CHAT = "ollama-chat"  # POST /api/chat
    LLAMACPP = "llamacpp"  # POST /completion
    SGLANG = "sglang"  # POST /generate


class Arrival(str, Enum):
    CONSTANT = "constant"
    POISSON = "poisson"
    GAMMA = "gamma"


def parse_workers(value: Any) -> int | Literal["auto"]:
    """`auto` or a whole number from 1 to MAX_CLIENT_WORKERS (`--workers`, scenario `client_workers`)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        n = int(value) if not isinstance(value, (bool, float)) else None
    except (TypeError, ValueError):
        n = None
    if n is None or not 1 <= n <= MAX_CLIENT_WORKERS:
        raise ValueError(f"workers must be auto or a whole number from 1 to {MAX_CLIENT_WORKERS}, not {value!r}")
    return n


_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an HTTP header name (RFC 9110 token)


def header_problem(name: str, value: str) -> str | None:
    """Why `name: value` cannot be sent as a request header, or None. Never quotes the value (it may be a secret)."""
    if not _TOKEN.match(name):
        return f"header name {name!r} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~ only)"
    if name.lower() in REFUSED_HEADERS:
        return f"header {name} is set by tokspeed itself (it frames every request and names the host from --target)"
    return value_problem(f"header {name}'s value", value)


def value_problem(what: str, value: str) -> str | None:
    """Why `value` cannot be a header value (a line break, a control character, not latin-1), or None."""
    for i, ch in enumerate(value):
        if ch in "\r\n\0" or (ord(ch) < 32 and ch != "\t") or ord(ch) == 127:
            return f"{what} holds a line break or control character (at character {i + 1})"
        if ord(ch) > 255:
            return f"{what} holds {ch!r} (character {i + 1}), which an HTTP/1.1 header cannot carry (latin-1 only)"
    return None


def http_url_problem(url: str, *, query_ok: bool = False) -> str | None:
    """Why `url` is not a usable http(s) base URL, or None (surrounding whitespace is the caller's to strip)."""
    from urllib.parse import urlsplit

    for i, ch in enumerate(url):
        if ch.isspace() or ord(ch) < 32 or ord(ch) == 127:
            return f"holds whitespace or a control character (at character {i + 1})"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "http://[::1/v1", a port past 65535 or not a number
        return f"is not an http(s) URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http(s) URL"
    if port == 0:
        return "names port 0, where no server listens"
    if not query_ok and (parts.query or parts.fragment or url.endswith(("?", "#"))):
        return "has a query (?…) or fragment (#…): tokspeed appends the API's path to the URL, so it would be lost"
    return None


class ModelWeight(BaseModel):
    """One model of a mix and its weight (its share of requests is weight / the weights' sum)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    weight: float = Field(1.0, gt=0, allow_inf_nan=False)


class RunConfig(BaseModel):
    """Everything a run needs. Field docs double as the scenario-file reference."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # target
    target: str | None = Field(None, description="http(s)://host:port/v1 of an OpenAI-compatible server")
    api: Api = Field(Api.CHAT, description="completions or chat")
    stream: bool = Field(True, description="stream with SSE (needed for TTFT and ITL)")
    model: str | None = Field(
        None, description="model name; discovered from /v1/models when omitted. A mix: 'a,b' or 'a=3,b=1' (weights) "
        "sets models, and model becomes the first name"
    )
    models: list[ModelWeight] | None = Field(
        None, description="a model (or adapter) mix: [{name, weight}], each request asking for one (model_policy)"
    )
    model_policy: Literal["round-robin", "random"] = Field(
        "round-robin", description="how a model mix picks each request's model: smooth weighted round-robin "
        "(exact shares) or seeded random draws by weight"
    )
    api_key: SecretStr | None = Field(None, description="bearer token; never written to results")
    headers: dict[str, str] = Field(default_factory=dict, description="extra HTTP headers")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, description="per-request timeout, seconds")
    include_usage: bool = Field(True, description="ask for stream_options.include_usage")
    ttft_timeout_s: float | None = Field(
        None, gt=0, description="fail a streamed request with no first token within this many seconds"
    )
    retries: int = Field(0, ge=0, le=100, description="retry HTTP 429/503 answers this many times (Retry-After honoured)")
    cancel_share: float | None = Field(
        None, gt=0, le=1, description="share of requests the client aborts cancel_after_s after sending them "
        "(seeded choice; status cancelled, not an error)"
    )
    cancel_after_s: float | None = Field(None, gt=0, description="how long after sending a chosen request is aborted")
    # TLS, for every client of the target (the load, discovery, the probe, /version, /metrics): paths only
    ca_cert: str | None = Field(None, description="PEM file of the CAs to trust for https targets (instead of the system's)")
    insecure: bool = Field(False, description="https without checking the server's certificate or host name")
    client_cert: str | None = Field(None, description="PEM client certificate, for servers that ask for one")
    client_key: str | None = Field(None, description="PEM private key of client_cert (when not in the same file)")
    kernel_stamps: bool = Field(
        False, description="time each read by the kernel's receive stamp, not by when the client's event loop got to it "
        "(plain http:// targets on Linux; --kernel-stamps)"
    )

    # sampling
    temperature: float | None = Field(None, ge=0, allow_inf_nan=False, description="sampling temperature (sent only when given)")
    top_p: float | None = Field(None, gt=0, le=1, description="nucleus sampling top_p, in (0, 1] (sent only when given)")
    stop: list[str] = Field(default_factory=list)

    # workload
    dataset: str = Field("builtin", description="builtin, synthetic, or a path to a prompt file")
    input_tokens: str | None = Field(None, description="synthetic prompt length: N, uniform:a,b, normal:m,sd")
    output_tokens: str = Field(DEFAULT_OUTPUT_TOKENS, description="max_tokens per request: N or a distribution")
    tokenizer: str | None = Field(None, description="local tokenizer.json or model dir for exact counts")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="seeds prompt sampling and arrival times")
    images: int = Field(0, ge=0, le=64, description="synthetic images attached to each chat request (image_url parts)")
    image_size: str = Field("512x512", description="pixel size of each synthetic image, WIDTHxHEIGHT")

    # load
    profile: Literal["synchronous", "concurrency", "rate"] = "synchronous"
    concurrency: int | None = Field(None, ge=1)
    rate: float | None = Field(None, gt=0, description="requests per second (open loop)")
    arrival: Arrival = Arrival.POISSON
    burstiness: float = Field(1.0, gt=0, description="gamma shape; 1 = Poisson, <1 burstier")
    exact_rate: bool = Field(
        True, description="rescale drawn poisson/gamma gaps so the schedule offers exactly the rate asked; "
        "false uses the raw draws (--raw-arrivals)"
    )
    max_concurrency: int | None = Field(None, ge=1, description="cap on in-flight requests for --rate")
    client_workers: int | Literal["auto"] = Field(
        1, description="client processes that share the streams' per-token work: N or auto (--workers)"
    )

    # limits
    requests: int | None = Field(None, ge=1, le=MAX_COUNT)
    duration_s: float | None = Field(None, gt=0)
    warmup: int | None = Field(None, ge=0, le=MAX_COUNT, description="warm-up requests; default one per stream")
    warmup_s: float | None = Field(
        None, gt=0, description="warm-up held at the load for this long before the measured requests (instead of warm-up requests)"
    )
    iterations: int = Field(1, ge=1, le=MAX_COUNT)
    offline: bool = Field(
        False, description="offline throughput: every request of an iteration submitted at once, after one warm-up request"
    )

    # judging and output
    slo: list[str] = Field(default_factory=list)
    percentiles: list[float] = Field(
        default_factory=list,
        description="percentiles reported beside the standard p50/p90/p95/p99/p99.9 (console columns, summary, compare)",
    )
    cooldown: float | None = Field(
        None, ge=0, lt=1, description="also summarise each point without its last share of the run (guidellm's cool-down)"
    )
    max_error_rate: float | None = Field(
        None, ge=0, le=1, description="stop the run when this fraction of measured requests failed"
    )
    out: Path | None = None
    tags: dict[str, str] = Field(
        default_factory=dict, description="labels of the run in the results history (--tag k=v): branch, config, release"
    )
    deployment_commit: str | None = Field(
        None, max_length=200, description="git commit of the deployment measured, kept in the results history"
    )

    # telemetry
    telemetry: bool = Field(True, description="sample GPUs (NVML), the client and the server's metrics beside the load")
    price_per_hour: list[float] = Field(
        default_factory=list, description="price of one GPU-hour (any currency): the run prints what its throughput costs"
    )
    gpus: int = Field(1, ge=1, description="GPUs serving the target, each paid price_per_hour")
    engine: dict[str, Any] = Field(
        default_factory=dict,
        description="in-process engine options (hf:, vllm: targets), keyed like the engine flags: dtype, device, "
        "trust_remote_code, engine_args, tensor_parallel_size, gpu_memory_utilization, max_num_seqs, "
        "max_model_len, enforce_eager, quantization, kv_cache_dtype, load_format; the flags win",
    )
    telemetry_interval_s: float = Field(
        DEFAULT_TELEMETRY_INTERVAL_S, ge=0.01, le=60, description="seconds between telemetry samples"
    )
    server_metrics: str | None = Field(
        None, description="Prometheus endpoint to scrape: a URL, 'off', or unset for the target's /metrics when it answers"
    )
    server_profile: bool = Field(
        False, description="call the server's /start_profile before each measured window and /stop_profile after it (vLLM, SGLang)"
    )

    # scheduled open-loop load: trace replay, stages and ramps, mixed classes (tokspeed.load.timeline)
    trace: str | None = Field(None, description="replay a timestamped trace file: its arrival times and lengths")
    trace_format: str = Field("auto", description="trace format: auto, tokspeed, mooncake, burstgpt or azure")
    trace_speed: float = Field(1.0, gt=0, description="trace replay speed: 2 sends it twice as fast")
    trace_window: str | None = Field(None, description="START:END of trace time to replay, e.g. 60s:180s")
    stages: list[StageConfig] | None = Field(
        None, description="stages run back to back: [{name, rate (or concurrency), duration, rate_end?}] or 'warm:rate=2:30s,...'"
    )
    ramp: str | None = Field(None, description="ramp: rate=A..B:DURATION (linear), rate=A..B:DURATION:steps=N, concurrency=A..B:DURATION")
    classes: list[ClassConfig] | None = Field(
        None, description="workload classes in one run, each with name, rate, arrival, lengths and slo"
    )

    # multi-turn conversations and shared prefixes (runner/conversations.py, workload/conversation.py, workload/prefix.py)
    multi_turn: int | None = Field(
        None, ge=1, le=1000, description="conversations of this many turns, each turn sending the history; requests then counts conversations"
    )
    think_time: str | None = Field(
        None, description="pause between a turn's answer and the next turn: 2s, exponential:2s, uniform:1s,3s [default: 0]"
    )
    conversation_rate: float | None = Field(
        None, gt=0, description="multi-turn open loop: new conversations per second (instead of concurrency users)"
    )
    shared_prefix_groups: int | None = Field(
        None, ge=1, description="K groups of requests that share a prefix (system prompt or document)"
    )
    shared_prefix_tokens: int = Field(1024, ge=1, description="length of each shared prefix, tokens")
    prefix_reuse: float = Field(
        1.0, ge=0, le=1, description="share of requests that reuse a group's prefix (the rest get a unique one)"
    )
    token_audit: bool = Field(
        False, description="keep every response's text in requests.jsonl and audit the output token counts"
    )

    @field_validator("stages", mode="before")
    @classmethod
    def _stages(cls, v: Any) -> Any:
        return stages_value(v)

    @model_validator(mode="before")
    @classmethod
    def _scheduled(cls, data: Any) -> Any:
        from tokspeed.load.setup import scheduled_defaults

        return scheduled_defaults(data)

    @model_validator(mode="before")
    @classmethod
    def _model_mix(cls, data: Any) -> Any:
        """`model: a=3,b=1` (or `a,b`) becomes `models` and `model: a`; `models` alone sets `model`."""
        if not isinstance(data, dict):
            return data
        model, models = data.get("model"), data.get("models")
        if isinstance(model, str) and ("," in model or "=" in model):
            from tokspeed.workload.mix import parse_models

            try:
                shares = parse_models(model)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
            if models is not None:
                raise ValueError("give the model mix once: model: a=3,b=1 or models: [...], not both")
            data = {**data, "model": shares[0].name, "models": [{"name": s.name, "weight": s.weight} for s in shares]}
        elif models and model is None:
            first = models[0]
            data = {**data, "model": first.get("name") if isinstance(first, dict) else getattr(first, "name", None)}
        return data

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not key.strip() or "=" in key or len(key) > 200 or len(str(value)) > 1000:
                raise ValueError(f"tag {key[:40]!r}: a key is 1-200 characters without '=', a value at most 1000")
        return {k.strip(): str(val).strip() for k, val in v.items()}

    @field_validator("price_per_hour")
    @classmethod
    def _positive_prices(cls, v: list[float]) -> list[float]:
        if any(p <= 0 for p in v):
            raise ValueError("price_per_hour (--price-per-hour) must be positive")
        return v

    @field_validator("server_metrics")
    @classmethod
    def _metrics_url(cls, v: str | None) -> str | None:
        if v is None or v.strip().lower() == "off":
            return None if v is None else "off"
        v = v.strip()
        problem = http_url_problem(v, query_ok=True) if v.startswith(("http://", "https://")) else "is not an http(s) URL or 'off'"
        if problem:
            from tokspeed.backends.credentials import redact_url

            raise ValueError(f"server_metrics (--server-metrics) {redact_url(v)!r} {problem}")
        return v

    @field_validator("target", mode="before")
    @classmethod
    def _target_url(cls, v: Any) -> Any:
        if not isinstance(v, str) or not v.strip().startswith(("http://", "https://")):
            return v  # embedded, hf:PATH, vllm:PATH (checked where they are loaded)
        v = v.strip()  # a pasted trailing space would end up in the request line
        problem = http_url_problem(v)
        if problem:
            from tokspeed.backends.credentials import redact_url

            raise ValueError(f"target (--target) {redact_url(v)!r} {problem}")
        return v

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            problem = header_problem(name, value)
            if problem:
                raise ValueError(problem)
        return v

    @field_validator("api_key")
    @classmethod
    def _sendable_key(cls, v: SecretStr | None) -> SecretStr | None:
        problem = value_problem("the API key", v.get_secret_value()) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _usable_tls_files(self) -> RunConfig:
        """A TLS file that cannot be read or used fails here, before anything is sent (ConfigError, exit 2)."""
        policy = self.http_policy()
        if policy != type(policy)():
            policy.check()
        return self

    @model_validator(mode="after")
    def _check_kernel_stamps(self) -> RunConfig:
        """Kernel receive stamps are read from a plain TCP socket, on Linux: say so before anything is sent."""
        if not self.kernel_stamps:
            return self
        from tokspeed.backends.kernel_stamps import supported

        if not supported():
            raise ValueError("kernel_stamps (--kernel-stamps) needs Linux (SO_TIMESTAMPNS on TCP sockets)")
        if self.target is None or not self.target.lower().startswith("http://"):
            raise ValueError("kernel_stamps (--kernel-stamps) needs a plain http:// target: TLS and in-process engines "
                             "do not read a socket the kernel stamps")
        return self

    def http_policy(self) -> HttpPolicy:
        """The one HTTP policy (TLS; proxies and redirects are fixed) of every client of the target."""
        from tokspeed.backends.http_policy import HttpPolicy

        return HttpPolicy(ca_cert=self.ca_cert, insecure=self.insecure, client_cert=self.client_cert,
                          client_key=self.client_key)

    @field_validator("output_tokens", "input_tokens", mode="before")
    @classmethod
    def _length_as_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v

    @field_validator("client_workers", mode="before")
    @classmethod
    def _client_workers(cls, v: Any) -> Any:
        return parse_workers(v)

    @field_validator("percentiles", mode="before")
    @classmethod
    def _percentiles(cls, v: Any) -> Any:
        from tokspeed.stats.distribution import parse_percentiles

        return [] if v is None or v == [] else list(parse_percentiles(v))

    @field_validator("slo")
    @classmethod
    def _check_slos(cls, v: list[str]) -> list[str]:
        for s in v:
            parse_slo(s)
        return v

    @field_validator("duration_s", "telemetry_interval_s", "cancel_after_s", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration(v)

    @model_validator(mode="after")
    def _check_profile(self) -> RunConfig:
        if self.profile == "concurrency" and self.concurrency is None:
            raise ValueError("profile 'concurrency' needs concurrency: N")
        if self.profile == "rate" and self.rate is not None and math.isinf(self.rate) and self.measured_requests is None:
            raise ValueError("--rate inf sends a request count at once, not a duration: give --requests N (and --max-concurrency to cap them)")
        if self.profile == "rate" and self.rate is None:
            raise ValueError("profile 'rate' needs rate: R")
        if self.burstiness != 1.0 and self.arrival is not Arrival.GAMMA:
            raise ValueError(f"burstiness (--burstiness) shapes gamma arrivals only; add --arrival gamma "
                             f"(arrivals are {self.arrival.value})")
        if self.ttft_timeout_s is not None and not self.stream:
            raise ValueError("ttft_timeout (--ttft-timeout) needs a streamed response: drop --no-stream or it")
        if self.ttft_timeout_s is not None and self.ttft_timeout_s >= self.timeout_s:
            raise ValueError("ttft_timeout (--ttft-timeout) must be shorter than timeout (--timeout)")
        scheduled = [s for s in self.slo if s.strip().startswith(tuple(f"{m}_" for m in FROM_SCHEDULE))]
        if scheduled and self.profile != "rate":
            raise ValueError(
                f"SLO {scheduled[0]!r} measures from the scheduled arrival, which only an open-loop run has: "
                "use --rate (a closed loop schedules each request when the previous one ends)"
            )
        return self

    @field_validator("think_time", mode="before")
    @classmethod
    def _think_as_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _check_conversations(self) -> RunConfig:
        scheduled = getattr(self, "scheduled", None)  # trace replay, stages, ramps, classes: their own workloads
        if scheduled and (self.multi_turn is not None or self.shared_prefix_groups is not None):
            raise ValueError(f"multi_turn and shared_prefix_groups cannot be combined with {scheduled}")
        if self.multi_turn is None:
            if self.conversation_rate is not None or self.think_time is not None:
                raise ValueError("conversation_rate and think_time (--conversation-rate, --think-time) need multi_turn (--multi-turn TURNS)")
            return self
        if self.profile == "rate":
            raise ValueError("multi_turn cannot take a request rate (each turn waits for the last answer): use conversation_rate (--conversation-rate)")
        if self.conversation_rate is not None and self.profile == "concurrency":
            raise ValueError("conversation_rate (--conversation-rate) and concurrency (users) cannot be combined: pick one")
        if self.max_concurrency is not None and self.conversation_rate is None:
            raise ValueError("max_concurrency (--max-concurrency) applies to conversation_rate (--conversation-rate) only")
        if self.images:  # a turn is built from the user text alone: images would silently not be sent
            raise ValueError("images (--images) cannot be combined with multi_turn (--multi-turn) yet")
        if self.think_time is not None:
            from tokspeed.workload.conversation import parse_think_time

            try:
                parse_think_time(self.think_time)
            except ConfigError as exc:
                raise ValueError(f"think_time (--think-time): {exc}") from exc
        return self

    @model_validator(mode="after")
    def _check_mix_and_cancel(self) -> RunConfig:
        if self.models is not None:
            names = [m.name for m in self.models]
            if len(set(names)) != len(names):
                raise ValueError(f"models: each model may be named once ({', '.join(names)})")
            if self.model is not None and self.model not in names:
                raise ValueError(f"model {self.model!r} is not among models ({', '.join(names)}): drop one of them")
        if (self.cancel_share is None) != (self.cancel_after_s is None):
            raise ValueError("cancel_share and cancel_after (--cancel-share, --cancel-after) go together: give both")
        if self.cancel_after_s is not None and self.cancel_after_s >= self.timeout_s:
            raise ValueError("cancel_after (--cancel-after) must be shorter than timeout (--timeout)")
        mixed = [f for f, on in (("a model mix", self.model_mix), ("cancel_share", self.cancel_share)) if on]
        if mixed and self.api.value not in (Api.CHAT.value, Api.COMPLETIONS.value, Api.EMBEDDINGS.value):
            raise ValueError(f"{mixed[0]} needs an OpenAI-compatible API (--api chat, completions or embeddings)")
        if mixed and self.multi_turn is not None:
            raise ValueError(f"{mixed[0]} cannot be combined with multi_turn (--multi-turn) yet")
        return self

    # derived values -------------------------------------------------------
    @property
    def model_mix(self) -> bool:
        """Whether requests ask for several models (`models` with more than one name)."""
        return self.models is not None and len(self.models) > 1

    @property
    def slos(self) -> list[SLO]:
        return [parse_slo(s) for s in self.slo]

    @property
    def streams(self) -> int:
        """How many requests can be in flight at once (sizes the connection pool)."""
        if self.conversation_rate is not None:  # multi-turn, open loop: each conversation has one turn in flight
            return self.max_concurrency or max(1, min(1024, int(self.conversation_rate * 10 * (self.multi_turn or 1))))
        if self.profile == "synchronous":
            return 1
        if self.profile == "concurrency":
            return self.concurrency or 1
        if self.max_concurrency:
            return self.max_concurrency
        if self.rate is not None and math.isinf(self.rate):  # --rate inf: every request at once
            return max(1, min(1024, self.measured_requests or 1024))
        return max(1, min(1024, int((self.rate or 1) * 10)))

    @property
    def warmup_requests(self) -> int:
        """Warm-up requests run (and drained) before the load; none when the warm-up is held at the load."""
        if self.warmup_s is not None:
            return 0
        if self.warmup is not None:
            return self.warmup
        if self.scheduled is not None:  # a trace, stages or classes: no warm-up unless asked for
            return 0
        return min(self.streams, 256)

    @property
    def measured_requests(self) -> int | None:
        """Requests per iteration; None means 'until --duration ends'."""
        if self.scheduled is not None:  # the timeline already holds the count (tokspeed.load.setup)
            return None
        if self.requests is not None:
            return self.requests
        return None if self.duration_s is not None else DEFAULT_REQUESTS

    @property
    def scheduled(self) -> str | None:
        """Which scheduled open-loop load this is: "trace", "stages", "ramp", "classes", or None."""
        for kind in ("trace", "stages", "ramp", "classes"):
            if getattr(self, kind) is not None:
                return kind
        return None

    def redacted_dump(self) -> dict[str, Any]:
        """The config as saved in run.json: no API key, secret headers masked, URL passwords as `***`."""
        from tokspeed.backends.credentials import redact_url

        d = self.model_dump(mode="json", exclude={"api_key"})
        for key in ("target", "server_metrics"):
            if d.get(key):
                d[key] = redact_url(d[key])
        if self.rate is not None and math.isinf(self.rate):  # JSON has no infinity; "inf" validates back
            d["rate"] = "inf"
        d["api_key_set"] = self.api_key is not None
        d["headers"] = {
            k: ("***" if k.lower() in SECRET_HEADERS else v) for k, v in self.headers.items()
        }
        return d


def config_from_sources(scenario: Path | None, overrides: dict[str, Any]) -> RunConfig:
    """Merge a scenario YAML file with flag overrides (flags win) and validate."""
    data: dict[str, Any] = {}
    if scenario is not None:
        data.update(_read_scenario(scenario))
    data.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("profile") is None and "profile" not in data:
        if data.get("rate") is not None:
            data["profile"] = "rate"
        elif data.get("concurrency") is not None:
            data["profile"] = "concurrency"
    try:
        return RunConfig(**data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "config"
        raise ConfigError(
            f"invalid {where}: {str(first.get('msg')).removeprefix('Value error, ')}",
            hint="see `tokspeed run --help` for every option and its range",
        ) from exc


def _read_scenario(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read scenario {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"scenario {path} is not UTF-8 text (byte {exc.start})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"scenario {path} is not valid YAML: {_one_line(str(exc))}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"scenario {path} must be a mapping of option: value")
    if "workers" in raw and "client_workers" not in raw:
        raw["client_workers"] = raw.pop("workers")
    if "duration" in raw and "duration_s" not in raw:
        raw["duration_s"] = raw.pop("duration")
    for key in ("timeout", "ttft_timeout", "telemetry_interval"):
        if key in raw and f"{key}_s" not in raw:
            raw[f"{key}_s"] = _scenario_duration(path, key, raw.pop(key))
    return {k.replace("-", "_"): v for k, v in raw.items()}


def _scenario_duration(path: Path, key: str, value: Any) -> float:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(f"scenario {path}: {key} must be a duration such as 30s, got {value!r}")
    return parse_duration(value)


def _one_line(text: str) -> str:
    return " ".join(text.split())
