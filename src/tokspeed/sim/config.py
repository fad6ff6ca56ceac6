"""The simulator's configuration: one validated, frozen `SimConfig` and its one-line summary.

Field names are the contract with the `tokspeed sim` CLI flags; every default lives here.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tokspeed.sim.faults import Fault, check_rates


class SimConfig(BaseModel):
    """How the simulated OpenAI-compatible server behaves and what it logs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float = Field(default=50.0, ge=0, description="base time to first token, ms")
    itl_ms: float = Field(default=10.0, ge=0, description="interval between consecutive tokens, ms")
    per_prompt_token_us: float = Field(
        default=0.0, ge=0, description="extra prefill time per prompt token, µs (added to TTFT)"
    )
    tokens_per_chunk: int = Field(default=1, ge=1, description="tokens carried by each SSE chunk")
    max_concurrency: int | None = Field(
        default=None, ge=1, description="requests served at once; more queue FIFO (the wait adds to TTFT)"
    )
    output_tokens: int = Field(default=128, ge=1, description="tokens generated when a request sets no max_tokens")
    kv_capacity_tokens: int = Field(
        default=65536, ge=1, description="tokens the simulated KV cache holds (/metrics kv_cache_usage_perc)"
    )
    reasoning_tokens: int = Field(
        default=0, ge=0, description="chat: the first N generated tokens stream as delta.reasoning_content"
    )
    usage: bool = Field(default=True, description="report usage (trailing chunk when include_usage is asked)")
    reject_stream_options: bool = Field(
        default=False, description="answer 400 to any request carrying stream_options (tests client fallback)"
    )
    sse_comments: bool = Field(default=False, description="send ': keep-alive' SSE comments between events")
    crlf: bool = Field(default=False, description="end SSE lines with \\r\\n instead of \\n")
    keep_alive: bool = Field(default=True, description="keep connections open between requests (False: Connection: close)")
    model: str = Field(default="tokspeed-sim", min_length=1, description="model name served")
    served_models: tuple[str, ...] = Field(
        default=(), description="further model names served beside model (a base model's adapters, a mix)"
    )
    log_path: Path | None = Field(default=None, description="append one JSON line per finished request here")
    api_key: str | None = Field(
        default=None, min_length=1, description="require 'Authorization: Bearer KEY' on /v1 (401 without, 403 if wrong)"
    )
    leaky_errors: bool = Field(
        default=False, description="error messages echo the request's Authorization header (tests client redaction)"
    )
    basic_auth: str | None = Field(
        default=None, pattern=r"^[^:]*:.+$",
        description="USER:PASSWORD: /v1 also takes 'Authorization: Basic' with these (a URL's user:password@)",
    )
    echo_auth: bool = Field(
        default=False, description="200 answers echo the request's Authorization header: /version, /v1/models "
        "fields and the generated text (tests client redaction)"
    )
    # fault injection (see sim/faults.py)
    faults: dict[Fault, float] = Field(default_factory=dict, description="per-request probability of each fault")
    seed: int = Field(default=0, description="seeds the fault draws")
    clean_requests: int = Field(default=0, ge=0, description="the first N generation requests get no fault")
    fault_after_chunks: int = Field(default=2, ge=0, description="mid-stream faults strike after this many token chunks")
    retry_after_s: int = Field(default=1, ge=0, description="Retry-After header of http_429 and http_503, seconds")
    stall_ms: float = Field(default=1000.0, ge=0, description="how long the stall fault sends nothing, ms")
    slow_headers_ms: float = Field(default=1000.0, ge=0, description="how late slow_headers starts the response, ms")

    prefix_cache_tokens: int = Field(
        default=0, ge=0, description="prompt tokens the simulated prefix cache holds (0: no prefix caching)"
    )
    prefix_block_tokens: int = Field(default=16, ge=1, description="tokens per prefix-cache block (hashed as a unit)")
    profile_endpoints: bool = Field(
        default=False, description="serve POST /start_profile and /stop_profile, logged (sim/profile.py)"
    )
    control: bool = Field(default=False, description="serve /sim/control to change timing live (sim/control.py)")
    quality_accuracy: float | None = Field(
        default=None, ge=0, le=1, description="answer quality-probe questions right with this probability (sim/quality.py)"
    )
    spec_decode_tokens: int = Field(
        default=0, ge=0, description="speculative decoding: draft tokens proposed per step (0: off; sim/spec_decode.py)"
    )
    spec_decode_acceptance: float = Field(
        default=0.7, ge=0, le=1, description="probability a draft position is accepted, given the ones before it were"
    )
    quality_probes: str = Field(default="builtin", min_length=1, description="probe set whose questions it answers")

    @field_validator("faults")
    @classmethod
    def _check_faults(cls, v: dict[Fault, float]) -> dict[Fault, float]:
        check_rates(v)
        return v


def describe(cfg: SimConfig) -> str:
    """A short human summary of the timing and shape settings, for the startup line."""
    parts = [f"ttft {cfg.ttft_ms:g} ms", f"itl {cfg.itl_ms:g} ms"]
    if cfg.per_prompt_token_us:
        parts.append(f"prefill {cfg.per_prompt_token_us:g} µs/token")
    if cfg.prefix_cache_tokens:
        parts.append(f"prefix cache {cfg.prefix_cache_tokens} tokens ({cfg.prefix_block_tokens}/block)")
    if cfg.tokens_per_chunk != 1:
        parts.append(f"{cfg.tokens_per_chunk} tokens/chunk")
    if cfg.quality_accuracy is not None:
        parts.append(f"probe accuracy {cfg.quality_accuracy:g}")
    parts.append(f"concurrency {cfg.max_concurrency or 'unlimited'}")
    if cfg.spec_decode_tokens:
        parts.append(f"spec decode {cfg.spec_decode_tokens} tokens, acceptance {cfg.spec_decode_acceptance:g}")
    if cfg.reasoning_tokens:
        parts.append(f"{cfg.reasoning_tokens} reasoning tokens")
    flags = [
        name
        for name, on in (
            ("no usage", not cfg.usage),
            ("rejects stream_options", cfg.reject_stream_options),
            ("sse comments", cfg.sse_comments),
            ("crlf", cfg.crlf),
            ("no keep-alive", not cfg.keep_alive),
        )
        if on
    ]
    parts.extend(flags)
    if cfg.api_key is not None or cfg.basic_auth is not None:
        parts.append("api key required" if cfg.basic_auth is None else "basic auth required")
    if cfg.faults:
        faults = " ".join(f"{f.value}={p:g}" for f, p in cfg.faults.items())
        parts.append(f"faults {faults} (seed {cfg.seed})")
    if cfg.log_path is not None:
        parts.append(f"log {cfg.log_path}")
    return ", ".join(parts)


def serves(cfg: SimConfig, model: object) -> bool:
    """Whether a request's `model` is one the simulator serves (a request without one is taken)."""
    return model is None or model == cfg.model or model in cfg.served_models
