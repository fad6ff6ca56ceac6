"""`tokspeed sim`: run the simulated OpenAI-compatible server (for tests, demos, what-ifs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

HELP = """Serve a simulated OpenAI-compatible model on 127.0.0.1 with known timings.

Token i of a response is sent at start + TTFT + prompt_tokens × per-prompt-token + i × ITL
(absolute deadlines: jitter never accumulates). With --log, every request's true
timings are appended to a JSON-lines file, the ground truth tokspeed's tests use.

  tokspeed sim --port 8001 --ttft-ms 50 --itl-ms 10 &

  tokspeed run --target http://127.0.0.1:8001/v1 --concurrency 8
"""


def sim(
    port: Annotated[int, typer.Option("--port", "-p", help="TCP port (0 picks a free one).")] = 8001,
    host: Annotated[str, typer.Option("--host", help="Address to bind. Keep it on loopback.")] = "127.0.0.1",
    ttft_ms: Annotated[float, typer.Option("--ttft-ms", help="Time to first token, ms.", min=0)] = 50.0,
    itl_ms: Annotated[float, typer.Option("--itl-ms", help="Interval between tokens, ms.", min=0)] = 10.0,
    per_prompt_token_us: Annotated[float, typer.Option("--per-prompt-token-us", help="Extra prefill time per prompt token, µs.", min=0)] = 0.0,
    tokens_per_chunk: Annotated[int, typer.Option("--tokens-per-chunk", help="Tokens carried by each SSE chunk.", min=1)] = 1,
    max_concurrency: Annotated[Optional[int], typer.Option("--max-concurrency", help="Requests served at once; more queue FIFO (the wait adds to TTFT). [default: unlimited]", min=1)] = None,
    output_tokens: Annotated[int, typer.Option("--output-tokens", help="Tokens generated when a request gives no max_tokens.", min=1)] = 128,
    reasoning_tokens: Annotated[int, typer.Option("--reasoning-tokens", help="Chat: stream the first N tokens as reasoning_content.", min=0)] = 0,
    no_usage: Annotated[bool, typer.Option("--no-usage", help="Never report usage.")] = False,
    reject_stream_options: Annotated[bool, typer.Option("--reject-stream-options", help="Answer 400 to requests with stream_options.")] = False,
    sse_comments: Annotated[bool, typer.Option("--sse-comments", help="Send ': keep-alive' SSE comments between events.")] = False,
    crlf: Annotated[bool, typer.Option("--crlf", help="End SSE lines with CRLF.")] = False,
    model: Annotated[str, typer.Option("--model", help="Model name served.")] = "tokspeed-sim",
    log: Annotated[Optional[Path], typer.Option("--log", help="Append each request's true timings (JSON lines) here.")] = None,
) -> int:
    from tokspeed.sim import SimConfig, run_server

    cfg = SimConfig(
        ttft_ms=ttft_ms,
        itl_ms=itl_ms,
        per_prompt_token_us=per_prompt_token_us,
        tokens_per_chunk=tokens_per_chunk,
        max_concurrency=max_concurrency,
        output_tokens=output_tokens,
        reasoning_tokens=reasoning_tokens,
        usage=not no_usage,
        reject_stream_options=reject_stream_options,
        sse_comments=sse_comments,
        crlf=crlf,
        model=model,
        log_path=log,
    )
    run_server(cfg, host=host, port=port)
    return 0
