"""`tokspeed conformance`: check tokspeed's measurements against scripted streams with known answers."""

from __future__ import annotations

from typing import Annotated

import typer

HELP = """Check that tokspeed measures every metric exactly, against a scripted-stream server.

A raw HTTP server on 127.0.0.1 plays each scenario's bytes at scripted times
(role-only first chunks, empty deltas, keep-alive comments, reasoning deltas,
multi-token chunks, usage trailers with and without per-chunk usage, errors
mid-stream, events split across reads and coalesced, a dropped connection, an
HTTP error, a non-streamed response). tokspeed's own HTTP backend sends one
request per scenario and every metric (TTFT, TTFA, ITL values, TPOT, E2E, output
tokens and their source, status, anomalies) is compared with the value worked
out by hand: latencies within [0, +T] ms of it, gaps within ±T (T =
--tolerance-ms), counts exactly. Prints a PASS/FAIL table; exit 1 on any FAIL.

  tokspeed conformance

--serve PORT keeps the scripted server up instead, each scenario at
http://127.0.0.1:PORT/s/NAME/v1, so other benchmark tools can be checked against
the same expected values (docs/conformance.md lists them):

  tokspeed conformance --serve 8123 &
  tokspeed run --target http://127.0.0.1:8123/s/role_first/v1 -n 1
"""


def conformance(
    serve: Annotated[int | None, typer.Option("--serve", help="Only serve the scenarios on this port (0 picks one) until Ctrl-C, for other tools. [default: off: run the checks and exit]", min=0)] = None,
    scenario: Annotated[list[str] | None, typer.Option("--scenario", "-s", help="Run only this scenario (repeatable). [default: all]")] = None,
    tolerance_ms: Annotated[float, typer.Option("--tolerance-ms", help="Timing tolerance T, ms: latencies may be up to T late, gaps ±T.", min=0.1)] = 15.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print every check (expected, measured, tolerance, ok) as JSON instead of the table.")] = False,
) -> int:
    import asyncio

    from tokspeed.conformance import SCENARIOS, by_name, run_all
    from tokspeed.conformance.doc import results_table
    from tokspeed.errors import ConfigError

    if serve is not None:
        from tokspeed.conformance.server import serve_forever

        try:
            asyncio.run(serve_forever(serve))
        except KeyboardInterrupt:
            pass
        return 0
    try:
        chosen = tuple(by_name(n) for n in scenario) if scenario else SCENARIOS
    except KeyError as exc:
        raise ConfigError(f"no conformance scenario {exc}", hint="names: " + ", ".join(s.name for s in SCENARIOS)) from None
    results = asyncio.run(run_all(chosen, tolerance_ms))
    failed = sum(not r.passed for r in results)
    if json_out:
        import dataclasses

        import orjson

        data = [dataclasses.asdict(r) | {"passed": r.passed} for r in results]
        typer.echo(orjson.dumps({"tolerance_ms": tolerance_ms, "scenarios": data}, option=orjson.OPT_INDENT_2).decode())
        return 1 if failed else 0
    for line in results_table(results):
        typer.echo(line)
    typer.echo(f"{len(results) - failed} of {len(results)} scenarios passed (tolerance {tolerance_ms:g} ms)")
    return 1 if failed else 0
