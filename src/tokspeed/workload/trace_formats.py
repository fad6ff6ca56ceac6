"""Read timestamped request traces: tokspeed JSONL and the public Mooncake, BurstGPT and Azure formats.

Every reader returns `TraceRow`s, sorted by time, with times in seconds from the
trace's first request (the first row is at 0):

* tokspeed (JSONL): `{"timestamp_s": 0.5, "input_tokens": 512, "output_tokens": 128}`;
  `timestamp_ms` may stand for `timestamp_s`; optional `prompt` (sent as is) and
  `hash_ids`.
* mooncake (JSONL): `{"timestamp": 3052, "input_length": 7234, "output_length": 794,
  "hash_ids": [0, 28, ...]}`, timestamp in milliseconds since the first request.
* burstgpt (CSV): `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`
  (newer files add `Session ID`, `Elapsed time`), `Timestamp` in seconds. Rows with
  `Response tokens` 0 are the trace's failed requests: they are skipped and counted.
* azure (CSV): `TIMESTAMP,ContextTokens,GeneratedTokens`, `TIMESTAMP` a date-time
  such as `2023-11-16 18:15:46.6805900` (7 fractional digits are cut to 6).

`auto` picks the format from the file: a CSV header naming `ContextTokens` is
azure, one naming `Request tokens` is burstgpt; a JSONL line with `input_length` is
mooncake, else tokspeed. Lengths below 1 are raised to 1 (a request cannot ask for
0 tokens); such rows are counted in `TraceFile.clamped`.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from tokspeed.errors import WorkloadError

FORMATS = ("auto", "tokspeed", "mooncake", "burstgpt", "azure")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: when (seconds from the first), how long its prompt and reply are."""

    time_s: float
    input_tokens: int
    output_tokens: int
    prompt: str | None = None
    hash_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TraceFile:
    """A trace as read: its rows (sorted by time, the first at 0) and what was left out."""

    path: str
    format: str
    rows: tuple[TraceRow, ...]
    skipped: int = 0  # rows left out (BurstGPT failures)
    clamped: int = 0  # rows whose length was raised to 1


def read_trace(path: str | Path, fmt: str = "auto") -> TraceFile:
    """Read `path` in format `fmt` (one of FORMATS)."""
    fmt = fmt.strip().lower()
    if fmt not in FORMATS:
        raise WorkloadError(f"unknown trace format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise WorkloadError(f"cannot read trace {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"trace {path} is not UTF-8 text (byte {exc.start})") from exc
    if fmt == "auto":
        fmt = detect_format(text, str(path))
    raw, skipped = _READERS[fmt](text, str(path))
    if not raw:
        raise WorkloadError(f"trace {path} holds no requests", hint=f"check the file is in the {fmt} format")
    return _normalised(str(path), fmt, raw, skipped)


def detect_format(text: str, where: str) -> str:
    """The format of a trace's text (see the module docstring)."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first.startswith("{"):
        try:
            d = orjson.loads(first)
        except orjson.JSONDecodeError as exc:
            raise WorkloadError(f"{where}: line 1 is not JSON: {exc}") from exc
        return "mooncake" if isinstance(d, dict) and "input_length" in d else "tokspeed"
    header = {h.strip() for h in first.split(",")}
    if "ContextTokens" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    raise WorkloadError(
        f"cannot tell the format of trace {where}",
        hint="give --trace-format tokspeed|mooncake|burstgpt|azure",
    )


# A row as a reader returns it: (time_s, input_tokens, output_tokens, prompt, hash_ids), times not yet rebased.
Raw = tuple[float, int, int, "str | None", "tuple[int, ...] | None"]


def _normalised(path: str, fmt: str, raw: list[Raw], skipped: int) -> TraceFile:
    raw.sort(key=lambda r: r[0])  # stable: equal times keep the file's order
    t0 = raw[0][0]
    clamped = sum(1 for r in raw if r[1] < 1 or r[2] < 1)
    out = tuple(TraceRow(t - t0, max(i, 1), max(o, 1), p, h) for t, i, o, p, h in raw)
    return TraceFile(path, fmt, out, skipped, clamped)


def _json_lines(text: str, where: str) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise WorkloadError(f"{where}: line {n} is not JSON: {exc}") from exc
        if not isinstance(d, dict):
            raise WorkloadError(f"{where}: line {n} is not a JSON object")
        out.append((n, d))
    return out


def _number(d: dict[str, Any], key: str, where: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            return float(str(v).strip())
        except ValueError:
            raise WorkloadError(f"{where}: {key} must be a number, got {v!r}") from None
    return float(v)


def _hashes(d: dict[str, Any]) -> tuple[int, ...] | None:
    h = d.get("hash_ids")
    return tuple(int(x) for x in h) if isinstance(h, list) else None


def _read_mooncake(text: str, where: str) -> tuple[list[Raw], int]:
    rows: list[Raw] = []
    for n, d in _json_lines(text, where):
        at = f"{where} line {n}"
        rows.append((
            _number(d, "timestamp", at) / 1000.0,
            int(_number(d, "input_length", at)),
            int(_number(d, "output_length", at)),
            None,
            _hashes(d),
        ))
    return rows, 0


def _read_tokspeed(text: str, where: str) -> tuple[list[Raw], int]:
    rows: list[Raw] = []
    for n, d in _json_lines(text, where):
        at = f"{where} line {n}"
        if "timestamp_s" in d:
            t = _number(d, "timestamp_s", at)
        elif "timestamp_ms" in d:
            t = _number(d, "timestamp_ms", at) / 1000.0
        else:
            raise WorkloadError(f"{at}: no timestamp_s (or timestamp_ms)")
        prompt = d.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise WorkloadError(f"{at}: prompt must be a string")
        rows.append((t, int(_number(d, "input_tokens", at)), int(_number(d, "output_tokens", at)), prompt, _hashes(d)))
    return rows, 0


def _csv_columns(text: str, where: str, needed: tuple[str, ...]) -> tuple[list[int], list[list[str]]]:
    """(index of each needed column, the data rows): one pass of the csv module, no dict per row."""
    reader = csv.reader(io.StringIO(text))
    names = [n.strip() for n in next(reader, [])]
    missing = [c for c in needed if c not in names]
    if missing:
        raise WorkloadError(f"{where}: no column {missing[0]!r} (columns: {', '.join(names)})")
    return [names.index(c) for c in needed], [row for row in reader if row]


def _bad_cell(data: list[list[str]], columns: list[int], names: tuple[str, ...], where: str) -> WorkloadError:
    """The error for the first cell that is not a number (found again, only once something failed)."""
    for n, row in enumerate(data, 2):
        for i, name in zip(columns, names):
            value = row[i] if i < len(row) else ""
            try:
                float(value)
            except ValueError:
                return WorkloadError(f"{where} row {n}: {name} must be a number, got {value!r}")
    return WorkloadError(f"{where}: a row is not valid")


def _read_burstgpt(text: str, where: str) -> tuple[list[Raw], int]:
    (t, inp, out), data = _csv_columns(text, where, BURSTGPT_COLUMNS)
    rows: list[Raw] = []
    try:
        for row in data:
            rows.append((float(row[t]), int(float(row[inp])), int(float(row[out])), None, None))
    except (ValueError, IndexError):
        raise _bad_cell(data, [t, inp, out], BURSTGPT_COLUMNS, where) from None
    ok = [r for r in rows if r[2] > 0]  # Response tokens 0: the trace's failed requests
    return ok, len(rows) - len(ok)


def _read_azure(text: str, where: str) -> tuple[list[Raw], int]:
    (t, inp, out), data = _csv_columns(text, where, AZURE_COLUMNS)
    rows: list[Raw] = []
    for n, row in enumerate(data, 2):
        try:
            rows.append((azure_time_s(row[t], ""), int(float(row[inp])), int(float(row[out])), None, None))
        except (ValueError, IndexError, WorkloadError):
            raise _azure_error(row, n, (t, inp, out), where) from None
    return rows, 0


def _azure_error(row: list[str], n: int, columns: tuple[int, int, int], where: str) -> WorkloadError:
    at = f"{where} row {n}"
    if len(row) <= max(columns):
        return WorkloadError(f"{at}: too few columns")
    try:
        azure_time_s(row[columns[0]], at)
    except WorkloadError as exc:
        return exc
    for i, name in zip(columns[1:], AZURE_COLUMNS[1:]):
        try:
            float(row[i])
        except ValueError:
            return WorkloadError(f"{at}: {name} must be a number, got {row[i]!r}")
    return WorkloadError(f"{at}: not a valid row")


def azure_time_s(text: str, where: str) -> float:
    """`2023-11-16 18:15:46.6805900` -> POSIX seconds (naive times read as UTC; only differences matter)."""
    s = text.strip()
    head, dot, frac = s.partition(".")
    if dot:
        digits = frac[: len(frac) - len(frac.lstrip("0123456789"))]  # the fraction; an offset may follow
        s = f"{head}.{digits[:6]}{frac[len(digits):]}"
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        raise WorkloadError(f"{where}: TIMESTAMP {text!r} is not a date-time") from None
    if t.tzinfo is None:
        from datetime import timezone

        t = t.replace(tzinfo=timezone.utc)
    return t.timestamp()


_READERS = {
    "tokspeed": _read_tokspeed,
    "mooncake": _read_mooncake,
    "burstgpt": _read_burstgpt,
    "azure": _read_azure,
}
