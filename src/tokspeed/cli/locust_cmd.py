"""`tokspeed locust master|worker`: distributed load on Locust, run as a `locust` subprocess.

The command only builds Locust's command line and execs it: Locust (and gevent's
monkey-patching) runs in a fresh interpreter, never alongside tokspeed's asyncio code.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tokspeed.cli import tls_flags as tf
from tokspeed.distributed.options import LocustOptions
from tokspeed.errors import ConfigError

HELP = """Distributed load on Locust's master/worker mode (needs the extra: pip install 'tokspeed\\[locust]').

  # on each load host
  tokspeed locust worker --master 10.0.0.5
  # on the master (it listens on 127.0.0.1 unless --bind says otherwise)
  tokspeed locust master --target http://llm:8000/v1 --users 2000 --spawn-rate 100 \\
      --duration 10m --expect-workers 8 --bind 10.0.0.5 --out runs/fleet

Each Locust user is one tokspeed stream (concurrency = users). --rate R makes it an open loop:
R requests/s over the whole fleet, constant or --arrival poisson, on one schedule split over the
workers, the users only capping the requests in flight; rate stages (--stages
'warm:rate=5:30s,peak:rate=10:30s', --ramp rate=1..20:60s) change the rate per stage.
--stages 'warm:concurrency=4:10s,peak:concurrency=16:20s' (or --ramp concurrency=1..16:40s:steps=4)
changes the users per stage instead. Each stage is summarised on its own.
Requests started during the spawn ramp (users/spawn-rate s) are warm-up, not measured, unless
--warmup-s says otherwise; --requests N stops after N measured requests. The master writes a normal results directory
(run.json + requests.jsonl): tokspeed report/compare/diagnose work on it unchanged. Locust's own
statistics show TTFT, TPOT and E2E. Workers read the API key from their own OPENAI_API_KEY.
Or with plain Locust: locust -f $(python -c "import tokspeed.distributed.locustfile as m; print(m.__file__)")
"""

app = typer.Typer(help=HELP, no_args_is_help=True)
LOCUSTFILE = Path(__file__).resolve().parent.parent / "distributed" / "locustfile.py"
STAGED_LOCUSTFILE = LOCUSTFILE.with_name("locustfile_stages.py")  # the same user plus a LoadTestShape
DEFAULT_PORT = 5557
RATE_STAGES_TAIL_S = 1  # rate stages: the run lasts this long beyond the schedule, for the last requests to end
DEFAULT_BIND = "127.0.0.1"  # loopback: workers on other hosts need an explicit --bind


def _require_locust() -> None:
    if importlib.util.find_spec("locust") is None:
        raise ConfigError("Locust is not installed", hint="pip install 'tokspeed[locust]'")


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse a results directory that holds a run before Locust starts (the master checks again)."""
    from tokspeed.results import REQUESTS_FILE, RUN_FILE

    existing = [name for name in (RUN_FILE, REQUESTS_FILE) if (out / name).exists()]
    if existing and not overwrite:
        raise ConfigError(f"{out} already holds a run ({', '.join(existing)})",
                          hint="choose a new --out directory, or pass --overwrite to replace it")


def _run(args: list[str], locustfile: Path = LOCUSTFILE) -> NoReturn:
    """Become `python -m locust -f tokspeed/distributed/locustfile.py ARGS` (exec: signals and exit code are Locust's own)."""
    _require_locust()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "locust", "-f", str(locustfile), *args])


def _load_args(users: int, duration: str, stages: str | None, ramp: str | None, rate: float, arrival: str
               ) -> list[str]:
    """Locust's users and run time, or nothing when concurrency stages set them (checked here, before
    Locust starts). Rate stages keep the users (the cap on requests in flight) and run for their total."""
    from tokspeed.distributed.arrivals import SCHEDULE_LEAD_S, check_arrival, rate_stage_items

    check_arrival(arrival)
    if not (stages or ramp):
        return ["--users", str(users), "--run-time", duration]
    from tokspeed.distributed.shaping import LOCUST_STAGE_HINT, locust_stages

    if rate > 0:
        raise ConfigError("--rate cannot be combined with --stages/--ramp", hint=LOCUST_STAGE_HINT)
    rated = rate_stage_items(stages, ramp)  # a bad spec fails here, as a usage error
    if rated is not None:  # the stages start SCHEDULE_LEAD_S in; a second more lets their last requests end
        total_s = sum(s.duration_s for s in rated[0]) + SCHEDULE_LEAD_S
        return ["--users", str(users), "--run-time", f"{math.ceil(total_s) + RATE_STAGES_TAIL_S}s"]
    locust_stages(stages, ramp)
    return []


@app.command("master", help="Run the Locust master: spread the users over the workers, merge their records into --out.")
def master(
    target: Annotated[str, typer.Option("--target", help="OpenAI-compatible base URL, e.g. http://llm:8000/v1 [default: required]")],
    out: Annotated[Path, typer.Option("--out", help="results directory (run.json + requests.jsonl) [default: required]")],
    users: Annotated[int, typer.Option("--users", "-u", min=1, help="Locust users = concurrent streams")] = 8,
    spawn_rate: Annotated[float, typer.Option("--spawn-rate", "-r", min=0.001, help="users started per second")] = 10.0,
    duration: Annotated[str, typer.Option("--duration", "-t", help="run time in Locust's format: 90s, 10m, 1h30m")] = "1m",
    expect_workers: Annotated[int, typer.Option("--expect-workers", min=1, help="start when this many workers joined")] = 1,
    rate: Annotated[float, typer.Option("--rate", min=0.0, help="requests/s over all workers, an open loop: --users caps the requests in flight (0: closed loop)")] = 0.0,
    arrival: Annotated[str, typer.Option("--arrival", help="arrivals of --rate and rate stages: constant (gaps 1/R) or poisson (exponential gaps, seeded by --seed, rescaled to offer exactly R)")] = LocustOptions.arrival,
    api: Annotated[str, typer.Option("--api", help="chat or completions")] = "chat",
    model: Annotated[str | None, typer.Option("--model", help="model name [default: the first one GET /v1/models lists]")] = None,
    dataset: Annotated[str, typer.Option("--dataset", help="builtin, synthetic, or a prompt file (on every worker)")] = "synthetic",
    input_tokens: Annotated[str | None, typer.Option("--input-tokens", help="synthetic prompt length in tokens: N, uniform:a,b, normal:m,sd [default: 128]")] = None,
    output_tokens: Annotated[str, typer.Option("--output-tokens", help="max_tokens per request: N or a distribution")] = LocustOptions.output_tokens,
    seed: Annotated[int, typer.Option("--seed", help="seed of the prompts and of Poisson arrivals")] = 0,
    timeout: Annotated[float, typer.Option("--timeout", min=0.001, help="per-request timeout, seconds")] = LocustOptions.timeout_s,
    bind: Annotated[str, typer.Option("--bind", help="address the master listens on for workers (and --web's UI): loopback unless given, e.g. --bind 10.0.0.5 or --bind '*' (every interface) for workers on other hosts")] = DEFAULT_BIND,
    port: Annotated[int, typer.Option("--port", help="port the master listens on for workers")] = DEFAULT_PORT,
    stop_timeout: Annotated[float, typer.Option("--stop-timeout", min=0.0, help="seconds users may finish their request at the end (0: in-flight requests end as incomplete)")] = 0.0,
    web: Annotated[bool, typer.Option("--web", help="keep Locust's web UI on (it quits 5 s after the run)")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace an existing results directory")] = False,
    warmup_s: Annotated[float | None, typer.Option("--warmup-s", min=0.0, help="requests started in the first S seconds are warm-up, not measured [default: the spawn ramp, users / spawn-rate; 0 with --stages]")] = None,
    requests: Annotated[int, typer.Option("--requests", min=0, help="stop after N measured requests over all workers (each sends its share; --duration still caps the run; 0: no limit)")] = 0,
    stages: Annotated[str | None, typer.Option("--stages", help="stages instead of --duration, each summarised on its own: rate stages 'warm:rate=5:30s,peak:rate=10:30s' (--users caps the requests in flight, --arrival applies) or concurrency stages 'warm:concurrency=4:10s,peak:concurrency=16:20s' (instead of --users too) [default: off]")] = None,
    ramp: Annotated[str | None, typer.Option("--ramp", help="a ramp instead of --duration: rate=1..20:60s (linear, 5 windows), rate=1..20:60s:steps=5, or a stepped concurrency ramp concurrency=1..16:40s:steps=4 [default: off]")] = None,
    ca_cert: tf.CaCert = None,
    insecure: tf.Insecure = False,
    client_cert: tf.ClientCert = None,
    client_key: tf.ClientKey = None,
) -> None:
    _require_locust()
    from tokspeed.backends.http_policy import refuse_proxy

    tf.policy(ca_cert=ca_cert, insecure=insecure, client_cert=client_cert, client_key=client_key)  # a bad file: exit 2 now
    refuse_proxy(target)  # the workers' client connects directly
    _check_out(out, overwrite)
    load = _load_args(users, duration, stages, ramp, rate, arrival)
    options = LocustOptions(out=str(out), overwrite=overwrite, api=api, model=model, dataset=dataset,
                            input_tokens=input_tokens, output_tokens=output_tokens, seed=seed, rate=rate,
                            arrival=arrival.strip().lower(),
                            timeout_s=timeout, users=0 if load == [] else users, warmup_s=warmup_s,
                            requests=requests, stages=stages, ramp=ramp, ca_cert=ca_cert, insecure=insecure,
                            client_cert=client_cert, client_key=client_key)
    mode = ["--autostart", "--autoquit", "5", "--web-host", "" if bind == "*" else bind] if web \
        else ["--headless", "--only-summary"]
    args = ["--master", *mode, "--host", target, *load, "--spawn-rate", f"{spawn_rate:g}",
            "--expect-workers", str(expect_workers), "--master-bind-host", bind,
            "--master-bind-port", str(port), "--stop-timeout", f"{stop_timeout:g}", "--exit-code-on-error", "0",
            *options.locust_args()]
    _run(args, LOCUSTFILE if load else STAGED_LOCUSTFILE)


@app.command("worker", help="Run a Locust worker that generates load for the master at --master.")
def worker(
    master_host: Annotated[str, typer.Option("--master", help="the master's address")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="the master's port")] = DEFAULT_PORT,
) -> None:
    _run(["--worker", "--master-host", master_host, "--master-port", str(port)])
