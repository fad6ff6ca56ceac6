"""Export destinations (`--html FILE`, `--markdown FILE|-`, ...), checked before any heavy work.

As in hyperfine, each path is validated up front, so a typo fails at once
instead of after a long benchmark; `-` means standard output, and only one
export may use it. The check leaves no file behind (a new path is created and
removed again), and files are written atomically (a temp file, then rename),
so a command that fails never leaves an empty or partial export.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tokspeed.errors import ConfigError

STDOUT = "-"


@dataclass(frozen=True, slots=True)
class Output:
    """Where one export goes: a file, or stdout when `path` is None."""

    flag: str
    path: Path | None

    @property
    def to_stdout(self) -> bool:
        return self.path is None

    def write(self, text: str) -> None:
        if self.path is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ConfigError(f"cannot write {self.flag} {self.path}: {exc.strerror}") from exc


def prepare_outputs(requested: dict[str, str | None], stdout_ok: bool = True) -> dict[str, Output]:
    """Validate and create each requested destination (flag -> value); skip unset ones."""
    chosen = {flag: value for flag, value in requested.items() if value is not None}
    to_stdout = [flag for flag, value in chosen.items() if value == STDOUT]
    if to_stdout and not stdout_ok:
        raise ConfigError(f"{to_stdout[0]} - is not possible here", hint=f"give {to_stdout[0]} a file name")
    if len(to_stdout) > 1:
        raise ConfigError(
            f"{' and '.join(to_stdout)} cannot all write to stdout (-)",
            hint="send all but one of them to files",
        )
    return {flag: _prepare(flag, value) for flag, value in chosen.items()}


def _prepare(flag: str, value: str) -> Output:
    if value == STDOUT:
        return Output(flag, None)
    path = Path(value)
    if path.is_dir():
        raise ConfigError(f"{flag} {value} is a directory", hint=f"give a file name, e.g. {flag} {path / _default_name(flag)}")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):  # writable? (appending nothing leaves an old file as it was)
            pass
        if not existed:  # a probe: the file appears only when its content is written
            path.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot write {flag} {value}: {exc.strerror}", hint="choose a writable path") from exc
    return Output(flag, path)


def _default_name(flag: str) -> str:
    return {"--html": "report.html", "--markdown": "report.md", "--json": "report.json"}.get(flag, "report.csv")
