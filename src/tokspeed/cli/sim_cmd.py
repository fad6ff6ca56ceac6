"""`tokspeed sim`: run the simulated OpenAI-compatible server (for tests, demos, what-ifs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

HELP = """Serve a simulated OpenAI-compatible model on 127.0.0.1 with known timings.

Token i of a response is sent at start + TTFT + prompt_tokens × per-prompt-token + i × ITL
(absolute deadlines: jitter never accumulates). With --log, every request's true
timings are appended to a JSON-lines file, the ground truth tokspeed's tests use.

  tokspeed sim --port 8001 --ttft-ms 50 --itl-ms 10 &

  tokspeed run --target http://127.0.0.1:8001/v1 --concurrency 8

Fault injection (--fault NAME=P, repeatable): each generation request has
probability P of fault NAME, drawn from --seed; at most one fault per request
(the P's add up to at most 1); the log's `fault` field says which it got.

  http_429, http_503   status with Retry-After: --retry-after
  http_500             status with an error body
  reset                connection aborted before any response byte
  slow_headers         response starts --slow-headers-ms late
  disconnect           connection closed mid-stream
  malformed_sse        a line that is no SSE field, mid-stream
  invalid_json         a data event with cut-off JSON, mid-stream
  error_event          an error object mid-stream, then the end
  stall                --stall-ms of silence mid-stream
  no_done              the stream ends without data: [DONE]
  bad_usage            usage reports half the tokens sent
  stall_reset          --stall-ms of silence, then a reset (streamed or not)
  done_hang            [DONE], then no chunk terminator for --stall-ms
  done_close           [DONE], then a close without the chunk terminator
  done_reset           [DONE], then a reset without the chunk terminator
  json_body            a streamed request answered with one JSON body
  sse_error            an `event: error` SSE event mid-stream

Mid-stream faults strike after --fault-after-chunks token chunks. Stream
faults spare non-streamed requests.

  tokspeed sim --fault http_429=0.05 --fault disconnect=0.02 --seed 7
"""


def sim(
    port: Annotated[int, typer.Option("--port", "-p", help="TCP port (0 picks a free one).", min=0, max=65535)] = 8001,
    host: Annotated[str, typer.Option("--host", help="Address to bind. Keep it on loopback.")] = "127.0.0.1",
    kernel_stamps: Annotated[bool, typer.Option("--kernel-stamps", help="Log each request's arrival as the kernel's receive time (SO_TIMESTAMPNS; Linux), not when the simulator's event loop got to read it: under load the loop reads late (while it writes a burst of chunks) and the log's TTFT is short by that wait. Costs the simulator CPU (a Python transport instead of uvloop's).")] = False,
    reuse_port: Annotated[bool, typer.Option("--reuse-port", help="Share --port with other simulators started with --reuse-port (SO_REUSEPORT; Linux and BSD): the kernel spreads connections among them, to serve more load than one simulator process can (each keeps its own --log and /metrics).")] = False,
    ttft_ms: Annotated[float, typer.Option("--ttft-ms", help="Time to first token, ms.", min=0)] = 50.0,
    itl_ms: Annotated[float, typer.Option("--itl-ms", help="Interval between tokens, ms.", min=0)] = 10.0,
    per_prompt_token_us: Annotated[float, typer.Option("--per-prompt-token-us", help="Extra prefill time per prompt token, µs.", min=0)] = 0.0,
    tokens_per_chunk: Annotated[int, typer.Option("--tokens-per-chunk", help="Tokens carried by each SSE chunk.", min=1)] = 1,
    max_concurrency: Annotated[int | None, typer.Option("--max-concurrency", help="Requests served at once; more queue FIFO (the wait adds to TTFT). [default: unlimited]", min=1)] = None,
    output_tokens: Annotated[int, typer.Option("--output-tokens", help="Tokens generated when a request gives no max_tokens.", min=1)] = 128,
    kv_capacity_tokens: Annotated[int, typer.Option("--kv-capacity-tokens", help="Tokens the simulated KV cache holds: /metrics reports running requests' tokens over it.", min=1)] = 65536,
    reasoning_tokens: Annotated[int, typer.Option("--reasoning-tokens", help="Chat: stream the first N tokens as reasoning_content.", min=0)] = 0,
    no_usage: Annotated[bool, typer.Option("--no-usage", help="Never report usage.")] = False,
    reject_stream_options: Annotated[bool, typer.Option("--reject-stream-options", help="Answer 400 to requests with stream_options.")] = False,
    sse_comments: Annotated[bool, typer.Option("--sse-comments", help="Send ': keep-alive' SSE comments between events.")] = False,
    crlf: Annotated[bool, typer.Option("--crlf", help="End SSE lines with CRLF.")] = False,
    no_keep_alive: Annotated[bool, typer.Option("--no-keep-alive", help="Close each connection after its response (Connection: close), as a server with keep-alive off does.")] = False,
    model: Annotated[str, typer.Option("--model", help="Model name served.")] = "tokspeed-sim",
    served_model: Annotated[list[str] | None, typer.Option("--served-model", metavar="NAME", help="Another model name served beside --model (repeatable), as a server with LoRA adapters lists them: GET /v1/models lists them all, requests may ask for any; the --log says which each asked for. [default: none]")] = None,
    log: Annotated[Path | None, typer.Option("--log", help="Append each request's true timings (JSON lines) here. [default: none]")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Require 'Authorization: Bearer KEY' on /v1 (401 without it, 403 if wrong). [default: none: no authentication]")] = None,
    leaky_errors: Annotated[bool, typer.Option("--leaky-errors", help="Error messages echo the request's Authorization header (to test that clients redact it).")] = False,
    basic_auth: Annotated[str | None, typer.Option("--basic-auth", metavar="USER:PASSWORD", help="Also take 'Authorization: Basic' with these credentials on /v1 (what a client sends for http://USER:PASSWORD@host/v1). [default: none]")] = None,
    echo_auth: Annotated[bool, typer.Option("--echo-auth", help="200 answers echo the request's Authorization header: /version, /v1/models fields and the generated text (to test that clients redact it).")] = False,
    fault: Annotated[list[str] | None, typer.Option("--fault", help="NAME=P: give each request probability P of fault NAME (repeatable; see above). [default: none]", rich_help_panel="Faults")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fault draws.", rich_help_panel="Faults")] = 0,
    clean_requests: Annotated[int, typer.Option("--clean-requests", help="Serve the first N generation requests without faults (e.g. a client's probe).", min=0, rich_help_panel="Faults")] = 0,
    fault_after_chunks: Annotated[int, typer.Option("--fault-after-chunks", help="Mid-stream faults strike after this many token chunks.", min=0, rich_help_panel="Faults")] = 2,
    retry_after: Annotated[int, typer.Option("--retry-after", help="Retry-After of http_429 and http_503, seconds.", min=0, rich_help_panel="Faults")] = 1,
    stall_ms: Annotated[float, typer.Option("--stall-ms", help="How long the stall fault sends nothing, ms.", min=0, rich_help_panel="Faults")] = 1000.0,
    slow_headers_ms: Annotated[float, typer.Option("--slow-headers-ms", help="How late the slow_headers fault starts the response, ms.", min=0, rich_help_panel="Faults")] = 1000.0,
    prefix_cache_tokens: Annotated[int, typer.Option("--prefix-cache-tokens", help="Simulate a prefix cache holding this many prompt tokens (LRU, vLLM-style chained block hashes): cached prompt tokens skip --per-prompt-token-us and are reported as usage.prompt_tokens_details.cached_tokens and in the log. [default: 0, off]", min=0)] = 0,
    prefix_block_tokens: Annotated[int, typer.Option("--prefix-block-tokens", help="Tokens per prefix-cache block; only whole blocks are cached.", min=1)] = 16,
    control: Annotated[bool, typer.Option("--control", help="Serve POST /sim/control (JSON, e.g. {\"ttft_ms\": 900}) to change ttft_ms, itl_ms, per_prompt_token_us, output_tokens or tokens_per_chunk while running; GET shows them. Off by default so a benchmark's simulator cannot be changed by accident.")] = False,
    spec_decode_tokens: Annotated[int, typer.Option("--spec-decode-tokens", help="Simulate speculative decoding: K draft tokens per decode step, counted in /metrics as vLLM's spec_decode_* counters (under tokspeed_sim:) and in the log (timing unchanged). [default: 0, off]", min=0, metavar="K", rich_help_panel="Speculative decoding")] = 0,
    spec_decode_acceptance: Annotated[float, typer.Option("--spec-decode-acceptance", help="Probability that a draft position is accepted when the ones before it were (seeded by --seed per request): the acceptance rate is (R + R² + ... + R^K) / K.", min=0, max=1, metavar="R", rich_help_panel="Speculative decoding")] = 0.7,
    profile_endpoints: Annotated[bool, typer.Option("--profile-endpoints", help="Serve POST /start_profile and /stop_profile as vLLM started with a profiler does (profiling nothing), each call a line in --log (for `tokspeed run --profile`). Without it they answer 404, as vLLM without a profiler.")] = False,
    quality_accuracy: Annotated[float | None, typer.Option("--quality-accuracy", help="Answer `tokspeed quality` probe questions correctly with probability P (seeded by --seed, per question), otherwise with an answer the probe's checker rejects. [default: off]", min=0, max=1, rich_help_panel="Quality")] = None,
    quality_probes: Annotated[str, typer.Option("--quality-probes", help="Probe set whose questions --quality-accuracy answers: builtin or a JSONL file.", rich_help_panel="Quality")] = "builtin",
) -> int:
    from pydantic import ValidationError

    from tokspeed.errors import ConfigError
    from tokspeed.runner.fdlimit import raise_fd_limit
    from tokspeed.sim import SimConfig, run_server
    from tokspeed.sim.faults import parse_fault

    try:
        faults = dict(parse_fault(f) for f in fault or ())
    except ValueError as exc:
        raise ConfigError(f"--fault: {exc}", hint="use NAME=P with P between 0 and 1, e.g. --fault http_429=0.1") from exc
    options: dict[str, Any] = dict(
        ttft_ms=ttft_ms,
        itl_ms=itl_ms,
        per_prompt_token_us=per_prompt_token_us,
        tokens_per_chunk=tokens_per_chunk,
        max_concurrency=max_concurrency,
        output_tokens=output_tokens,
        kv_capacity_tokens=kv_capacity_tokens,
        reasoning_tokens=reasoning_tokens,
        usage=not no_usage,
        reject_stream_options=reject_stream_options,
        sse_comments=sse_comments,
        crlf=crlf,
        keep_alive=not no_keep_alive,
        model=model,
        served_models=tuple(served_model or ()),
        log_path=log,
        api_key=api_key,
        leaky_errors=leaky_errors,
        basic_auth=basic_auth,
        echo_auth=echo_auth,
        faults=faults,
        seed=seed,
        clean_requests=clean_requests,
        fault_after_chunks=fault_after_chunks,
        retry_after_s=retry_after,
        stall_ms=stall_ms,
        slow_headers_ms=slow_headers_ms,
        prefix_cache_tokens=prefix_cache_tokens,
        prefix_block_tokens=prefix_block_tokens,
        control=control,
        quality_accuracy=quality_accuracy,
        quality_probes=quality_probes,
        spec_decode_tokens=spec_decode_tokens,
        profile_endpoints=profile_endpoints,
        spec_decode_acceptance=spec_decode_acceptance,
    )
    try:
        cfg = SimConfig(**options)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "option"
        raise ConfigError(f"invalid {where}: {first.get('msg')}", hint="see `tokspeed sim --help`") from exc
    raise_fd_limit()  # a server accepts as many connections as its clients open
    run_server(cfg, host=host, port=port, reuse_port=reuse_port, kernel_stamps=kernel_stamps)
    return 0
