"""Reading a prompt file into PromptItems, with errors that name the file and the line.

The format is chosen by extension, and by content when the extension says nothing:

    .json          a list of entries (strings, prompt/messages objects, ShareGPT
                   conversations; see `formats`). A .json file holding one object
                   per line is read as JSONL.
    .jsonl/.ndjson one entry per line; blank lines are ignored
    .csv/.tsv      a header row with a `prompt` (or `text`, `question`) column and
                   an optional `max_tokens` column
    .txt           one prompt per non-blank line
    other          JSON if it starts with `[`, JSONL if it starts with `{`

Files are read as UTF-8 (a byte-order mark is ignored).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokspeed.errors import WorkloadError
from tokspeed.workload.formats import PROMPT_KEYS, EntryError, item_from_entry
from tokspeed.workload.items import PromptItem

FORMATS_HINT = (
    "dataset is 'builtin', 'synthetic' (with input_tokens), or a prompt file: "
    ".json (a list of strings, of {prompt|messages, max_tokens} objects, or of ShareGPT "
    "conversations), .jsonl (one such object per line), .csv/.tsv (a prompt, text or "
    "question column, optional max_tokens), or .txt (one prompt per line)"
)
_JSON_SUFFIXES = (".json",)
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_CSV_DELIMITERS = {".csv": ",", ".tsv": "\t"}


@dataclass(frozen=True)
class PromptFile:
    """What a prompt file held: its items, its format, and how many entries were skipped."""

    path: Path
    format: str  # "json", "jsonl", "csv", "tsv", "text"; "sharegpt-" prefixed for conversations
    items: tuple[PromptItem, ...]
    skipped: int  # ShareGPT conversations without a usable human turn (or reply)


def read_prompt_file(path: str | Path, *, need_reply: bool = False) -> PromptFile:
    """Read `path`; `need_reply` keeps only conversations that have a recorded reply."""
    p = Path(path).expanduser()
    text = _read_text(p)
    fmt = _detect_format(p, text)
    entries = _entries(p, fmt, text)
    items, skipped, conversations = _collect(p, entries, need_reply)
    label = f"sharegpt-{fmt}" if conversations else fmt
    return PromptFile(path=p, format=label, items=items, skipped=skipped)


def _read_text(p: Path) -> str:
    if not p.exists():
        raise WorkloadError(f"dataset file not found: {p}", hint=FORMATS_HINT)
    if not p.is_file():
        raise WorkloadError(f"dataset {p} is not a file", hint=FORMATS_HINT)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{p}: not UTF-8 text (byte {exc.start})", hint="save the file as UTF-8") from exc
    except OSError as exc:
        raise WorkloadError(f"cannot read {p}: {exc.strerror}") from exc
    if not text.strip():
        raise WorkloadError(f"{p}: the file is empty", hint=FORMATS_HINT)
    return text


def _detect_format(p: Path, text: str) -> str:
    suffix = p.suffix.lower()
    head = text.lstrip()[:1]
    if suffix in _JSONL_SUFFIXES:
        return "jsonl"
    if suffix in _CSV_DELIMITERS:
        return suffix[1:]
    if suffix == ".txt":
        return "text"
    if suffix in _JSON_SUFFIXES:
        return "jsonl" if head == "{" and _is_json_lines(text) else "json"
    if head == "[":
        return "json"
    if head == "{":
        return "jsonl"
    raise WorkloadError(f"{p}: cannot tell the file's format from its name or content", hint=FORMATS_HINT)


def _is_json_lines(text: str) -> bool:
    """A .json file starting with an object: one object per line, or one big object?"""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.msg == "Extra data"
    except (RecursionError, ValueError):  # nested too deeply, an integer too long
        return False
    return False


def _entries(p: Path, fmt: str, text: str) -> Iterator[tuple[str, Any]]:
    """(origin, raw entry) pairs in file order."""
    if fmt == "json":
        return _json_entries(p, text)
    if fmt == "jsonl":
        return _jsonl_entries(p, text)
    if fmt in ("csv", "tsv"):
        return _csv_entries(p, text, _CSV_DELIMITERS[f".{fmt}"])
    return _text_entries(text)


def _json_entries(p: Path, text: str) -> Iterator[tuple[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(
            f"{p}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", hint=FORMATS_HINT
        ) from exc
    except (RecursionError, ValueError) as exc:
        raise WorkloadError(f"{p}: unusable JSON: {_unusable(exc)}", hint=FORMATS_HINT) from exc
    if not isinstance(data, list):
        raise WorkloadError(
            f"{p}: expected a JSON list of prompts, got a {type(data).__name__}", hint=FORMATS_HINT
        )
    return ((f"item {i}", entry) for i, entry in enumerate(data, start=1))


def _jsonl_entries(p: Path, text: str) -> Iterator[tuple[str, Any]]:
    for lineno, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {lineno}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{p}: line {lineno}: not valid JSON (column {exc.colno}: {exc.msg})",
                hint="JSONL needs one complete JSON object per line",
            ) from exc
        except (RecursionError, ValueError) as exc:
            raise WorkloadError(f"{p}: line {lineno}: unusable JSON: {_unusable(exc)}", hint=FORMATS_HINT) from exc


def _csv_entries(p: Path, text: str, delimiter: str) -> Iterator[tuple[str, Any]]:
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        column = _prompt_column(p, reader.fieldnames or [])
        lengths = _find_column(reader.fieldnames or [], ("max_tokens",))
        for row_number, row in enumerate(reader, start=1):
            where = f"row {row_number} (line {reader.line_num})"
            yield (
                where,
                {"prompt": row.get(column) or "", "max_tokens": row.get(lengths) if lengths else None},
            )
    except csv.Error as exc:
        raise WorkloadError(
            f"{p}: line {reader.line_num}: {exc}", hint="very long prompts read more reliably from JSONL"
        ) from exc


def _prompt_column(p: Path, fieldnames: Sequence[str]) -> str:
    column = _find_column(fieldnames, PROMPT_KEYS)
    if column is None:
        found = ", ".join(repr(f) for f in fieldnames) or "none"
        raise WorkloadError(
            f"{p}: no prompt column in the header (columns: {found})",
            hint="name the column 'prompt', 'text' or 'question'",
        )
    return column


def _find_column(fieldnames: Sequence[str], wanted: Iterable[str]) -> str | None:
    by_name = {(f or "").strip().lower(): f for f in fieldnames}
    return next((by_name[w] for w in wanted if w in by_name), None)


def _text_entries(text: str) -> Iterator[tuple[str, Any]]:
    for lineno, line in enumerate(_lines(text), start=1):
        if line.strip():
            yield f"line {lineno}", line.strip()


def _collect(
    p: Path, entries: Iterable[tuple[str, Any]], need_reply: bool
) -> tuple[tuple[PromptItem, ...], int, bool]:
    """(items, entries skipped, whether any entry was a ShareGPT conversation)."""
    items: list[PromptItem] = []
    skipped = 0
    conversations = False
    for origin, entry in entries:
        conversations = conversations or _is_conversation(entry)
        try:
            item = item_from_entry(entry, origin, need_reply=need_reply)
        except EntryError as exc:
            raise WorkloadError(f"{p}: {origin}: {exc}", hint=FORMATS_HINT) from exc
        if item is None:
            skipped += 1
        else:
            items.append(item)
    if not items:
        raise WorkloadError(_no_items_message(p, skipped, need_reply), hint=FORMATS_HINT)
    return tuple(items), skipped, conversations


def _no_items_message(p: Path, skipped: int, need_reply: bool) -> str:
    if not skipped:
        return f"{p}: no prompts in the file"
    needs = "a human turn and a reply" if need_reply else "a human turn"
    return f"{p}: none of its {skipped} conversations has {needs}"


def _is_conversation(entry: Any) -> bool:
    return isinstance(entry, dict) and "conversations" in entry


def _unusable(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return " ".join(str(exc).split())


def _lines(text: str) -> list[str]:
    """Lines split on newlines only: U+2028 and friends may sit raw inside JSON strings."""
    return [line.removesuffix("\r") for line in text.split("\n")]
