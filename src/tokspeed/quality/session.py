"""One probe session: every target in turn, items appended to quality.jsonl as they finish,
then scores, comparisons against the first target, and the result written to quality.json.

`attach_to_run` adds a result as the `quality` block of an existing run.json (atomically).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

import orjson

from tokspeed.backends.credentials import redact_url
from tokspeed.errors import ConfigError, ResultsError, TargetError
from tokspeed.quality.client import (
    ProbeSettings,
    ProbeTarget,
    run_probe,
    target_redactor,
)
from tokspeed.quality.probes import ProbeSet
from tokspeed.quality.schema import (
    QUALITY_SCHEMA,
    ItemResult,
    LmEvalResult,
    QualityResult,
)
from tokspeed.quality.score import compare, target_quality

QUALITY_FILE = "quality.json"
ITEMS_FILE = "quality.jsonl"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class ItemSink:
    """Appends each item result to quality.jsonl and flushes it (a crash keeps what finished)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] = open(path, "ab")  # noqa: SIM115 - open for the session, closed by close()

    def __call__(self, result: ItemResult) -> None:
        self._file.write(orjson.dumps(result.model_dump(mode="json")) + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def prepare_dir(out: Path, overwrite: bool) -> None:
    """Create the output directory; refuse to mix with an earlier probe unless overwrite."""
    existing = [out / f for f in (QUALITY_FILE, ITEMS_FILE) if (out / f).exists()]
    if existing and not overwrite:
        raise ConfigError(f"{out} already holds a quality probe", hint="choose a new --out, or pass --overwrite")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for path in existing:
            path.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot write to {out}: {exc.strerror}", hint="choose another --out directory") from exc


async def probe_targets(
    targets: Sequence[ProbeTarget],
    probes: ProbeSet,
    settings: ProbeSettings,
    out: Path,
    lm_eval: Sequence[LmEvalResult] = (),
    write_quality_json: bool = True,
) -> QualityResult:
    """Probe each target (one after another, so they never share the machine), score and compare."""
    result = QualityResult(
        schema=QUALITY_SCHEMA,
        started_at=_now(),
        probe_source=probes.source,
        probe_items=len(probes.items),
        settings={"temperature": settings.temperature, "seed": settings.seed,
                  "concurrency": settings.concurrency, "api": targets[0].api if targets else None},
    )
    sink = ItemSink(out / ITEMS_FILE)
    per_target: list[list[ItemResult]] = []
    try:
        for i, target in enumerate(targets):
            target = _safe_label(target)
            items, model, wall = await run_probe(target, probes.items, settings, sink)
            if items and all(r.error is not None for r in items):
                raise TargetError(f"every probe request to {redact_url(target.url)} failed: {items[0].error}",
                                  hint="check the target URL, --model and --api-key")
            tq = target_quality(target.label, redact_url(target.url), model, items, wall)
            if i < len(lm_eval):
                tq.lm_eval = lm_eval[i]
            result.targets.append(tq)
            per_target.append(items)
    finally:
        sink.close()
    result.lm_eval = list(lm_eval[len(targets):])
    for tq, items in zip(result.targets[1:], per_target[1:]):
        result.comparisons.append(compare(result.targets[0], per_target[0], tq, items))
    result.finished_at = _now()
    if write_quality_json:
        write_json(out / QUALITY_FILE, result)
    return result


def _safe_label(target: ProbeTarget) -> ProbeTarget:
    """The target with its label cleared of its secrets (a label made from a URL may hold its password)."""
    label = target_redactor(target)(target.label)
    return target if label == target.label else replace(target, label=label)


def run_probe_sync(
    targets: Sequence[ProbeTarget], probes: ProbeSet, settings: ProbeSettings, out: Path,
    lm_eval: Sequence[LmEvalResult] = (), write_quality_json: bool = True,
) -> QualityResult:
    """`probe_targets` on a fresh event loop (Ctrl-C stops it; finished items stay in quality.jsonl)."""
    return asyncio.run(probe_targets(targets, probes, settings, out, lm_eval, write_quality_json))


def write_json(path: Path, result: QualityResult) -> None:
    """Write a quality result atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(result.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)


def attach_to_run(run_dir: Path, result: QualityResult) -> None:
    """Add `result` as run.json's `quality` block, leaving every other field as it was."""
    path = run_dir / "run.json"
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ResultsError(f"cannot read {path} to attach the quality probe: {exc}") from exc
    data["quality"] = result.model_dump(mode="json", by_alias=True)
    tmp = path.with_name("run.json.quality.tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)


def label_targets(specs: Sequence[str]) -> list[tuple[str, str]]:
    """(label, url) for each --target: 'NAME=URL' names it, else host:port (made unique)."""
    from urllib.parse import urlsplit

    out: list[tuple[str, str]] = []
    for spec in specs:
        name, sep, rest = spec.partition("=")
        if sep and "/" not in name and ":" not in name and name:
            label, url = name, rest
        else:
            url = spec
            parts = urlsplit(url)
            label = parts.netloc.rpartition("@")[2] or redact_url(url)  # never the user-info (a password)
        out.append((label, url))
    labels = [label for label, _ in out]
    return [(f"{label}#{i + 1}" if labels.count(label) > 1 else label, url) for i, (label, url) in enumerate(out)]
