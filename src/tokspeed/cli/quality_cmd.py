"""`tokspeed quality`: send the quality probe to one or more targets; score, compare, write quality.json."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from tokspeed.cli import tls_flags as tf

HELP = """Check that a deployment still answers correctly: a bilingual (Chinese/English) probe
of arithmetic and unit conversions, MMLU/C-Eval-style multiple choice, instruction following
(format, length, language) and exact recall, every answer checked mechanically. Deterministic:
temperature 0 and a fixed seed.

Each target gets accuracy per category with a 95% Wilson interval. With two or more targets,
each is compared with the first on the same items: the difference per category with its
interval and McNemar's exact test, and how often their outputs agree. Speed in the
comparison sentence comes from the probe requests themselves (completion tokens per second
of request latency); for a real speed figure use `tokspeed run --quality`.

  tokspeed quality --target fp16=http://10.0.0.1:8000/v1 --target awq=http://10.0.0.2:8000/v1 --out runs/q

  tokspeed quality --target http://127.0.0.1:8000/v1 --probes my_probes.jsonl --category arithmetic

  tokspeed quality --target http://127.0.0.1:8000/v1 --lm-eval results/model/results_2025.json

Writes DIR/quality.json and DIR/quality.jsonl (one line per item and target, appended as
each finishes). --probes takes a JSONL file in the item format of docs/quality.md;
--lm-eval attaches an lm-evaluation-harness results file to the target in the same
position (or, with no --target, stores it alone).
"""


def quality(
    target: Annotated[list[str] | None, typer.Option("--target", "-t", help="Server base URL ending in /v1, optionally named: NAME=URL. Repeat to compare; the first is the baseline. [default: none]")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Results directory. [default: runs/quality-<date-time>]")] = None,
    probes: Annotated[str, typer.Option("--probes", help="builtin, or a JSONL probe file (format: docs/quality.md).")] = "builtin",
    category: Annotated[list[str] | None, typer.Option("--category", help="Only these categories (repeatable): arithmetic, knowledge, instruction, recall, or your file's. [default: every category]")] = None,
    lang: Annotated[list[str] | None, typer.Option("--lang", help="Only items in these languages (repeatable): zh, en. [default: both]")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most N items (after --category/--lang). [default: every item]", min=1)] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model name for every target. [default: first of GET /v1/models]")] = None,
    api: Annotated[str, typer.Option("--api", help="chat (/v1/chat/completions) or completions (/v1/completions).")] = "chat",
    api_key: Annotated[str | None, typer.Option("--api-key", help="Bearer token. Never written to results. [default: none]", envvar="OPENAI_API_KEY", show_envvar=True)] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", help="Probe requests in flight per target.", min=1)] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Sent as the request's seed (servers that honour it sample deterministically).")] = 0,
    timeout: Annotated[float, typer.Option("--timeout", help="Per-request timeout, seconds.", min=1)] = 120.0,
    ca_cert: tf.CaCert = None,
    insecure: tf.Insecure = False,
    client_cert: tf.ClientCert = None,
    client_key: tf.ClientKey = None,
    lm_eval: Annotated[list[Path] | None, typer.Option("--lm-eval", help="An lm-evaluation-harness results JSON to attach (repeatable; paired with --target by position). [default: none]")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a probe already in --out.")] = False,
) -> int:
    from tokspeed.errors import ConfigError
    from tokspeed.quality.client import ProbeSettings, ProbeTarget
    from tokspeed.quality.lm_eval import load_lm_eval
    from tokspeed.quality.probes import load_probes
    from tokspeed.quality.session import (
        QUALITY_FILE,
        label_targets,
        prepare_dir,
        run_probe_sync,
        write_json,
    )
    from tokspeed.quality.text import render

    if api not in ("chat", "completions"):
        raise ConfigError(f"--api {api!r}: use chat or completions")
    if not target and not lm_eval:
        raise ConfigError("nothing to do: give --target URL (repeatable) or --lm-eval FILE",
                          hint="tokspeed quality --target http://127.0.0.1:8000/v1")
    lm_results = [load_lm_eval(p) for p in lm_eval or ()]
    out_dir = out or Path("runs") / datetime.now().strftime("quality-%Y%m%d-%H%M%S")
    prepare_dir(out_dir, overwrite)
    policy = tf.policy(ca_cert=ca_cert, insecure=insecure, client_cert=client_cert, client_key=client_key)
    settings = ProbeSettings(concurrency=concurrency, timeout_s=timeout, seed=seed, policy=policy)
    if not target:
        from tokspeed.quality.schema import QUALITY_SCHEMA, QualityResult

        result = QualityResult(schema=QUALITY_SCHEMA, lm_eval=lm_results)
        write_json(out_dir / QUALITY_FILE, result)
    else:
        probe_set = load_probes(probes).select(category or (), lang or (), limit)
        targets = [
            ProbeTarget(label=label, url=_check_url(url), model=model, api=api, api_key=api_key)
            for label, url in label_targets(target)
        ]
        result = run_probe_sync(targets, probe_set, settings, out_dir, lm_results)
    typer.echo(render(result))
    typer.echo(f"Results: {out_dir / QUALITY_FILE}, {out_dir / 'quality.jsonl'}")
    return 0


def _check_url(url: str) -> str:
    from urllib.parse import urlsplit

    from tokspeed.errors import ConfigError

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--target {url!r} is not an http(s) URL", hint="use e.g. --target http://127.0.0.1:8000/v1")
    path = parts.path.rstrip("/") or "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


def check_run_target(cfg: Any, targets: int = 1) -> None:
    """`run --quality` needs one OpenAI-compatible HTTP target speaking chat or completions."""
    from tokspeed.errors import ConfigError

    if targets > 1:
        raise ConfigError("--quality probes one target", hint="to compare targets: tokspeed quality --target A --target B")

    target = cfg.target or ""
    if not target.startswith(("http://", "https://")):
        raise ConfigError("--quality needs an HTTP --target (an OpenAI-compatible server)",
                          hint="tokspeed run --target http://127.0.0.1:8000/v1 --quality")
    if str(getattr(cfg.api, "value", cfg.api)) not in ("chat", "completions"):
        raise ConfigError(f"--quality needs --api chat or completions, not {cfg.api}")


def probe_after_run(console: Any, cfg: Any, outcome: Any, *, quiet: bool = False) -> None:
    """Probe the run's target, add the result as run.json's `quality` block, print one line."""
    from tokspeed.quality.client import ProbeSettings, ProbeTarget
    from tokspeed.quality.probes import load_probes
    from tokspeed.quality.session import ITEMS_FILE, attach_to_run, run_probe_sync
    from tokspeed.quality.text import one_line

    directory = outcome.directory
    (directory / ITEMS_FILE).unlink(missing_ok=True)
    served = outcome.result.target or {}
    target = ProbeTarget(
        label=served.get("model") or cfg.target,
        url=cfg.target,
        model=cfg.model or served.get("model"),
        api=str(getattr(cfg.api, "value", cfg.api)),
        api_key=cfg.api_key.get_secret_value() if cfg.api_key is not None else None,
        headers=dict(cfg.headers),
    )
    settings = ProbeSettings(timeout_s=cfg.timeout_s, seed=cfg.seed, policy=cfg.http_policy())
    result = run_probe_sync([target], load_probes(), settings, directory, write_quality_json=False)
    attach_to_run(directory, result)
    if not quiet:
        console.out.print(one_line(result.targets[0]), highlight=False)
