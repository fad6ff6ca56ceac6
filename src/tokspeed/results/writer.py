"""Write a results directory while a run goes: requests.jsonl appended and flushed, run.json replaced atomically.

`ResultsWriter` creates the directory before the run (a bad path fails at
once), appends each finished request to `requests.jsonl` and flushes it, and
rewrites `run.json` atomically at the start and the end of a run, so a crash
or Ctrl-C leaves every finished request on disk and a run.json that says how
far it got.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import orjson

from tokspeed.errors import ConfigError, ResultsError
from tokspeed.records import RequestRecord
from tokspeed.results.run_json import REQUESTS_FILE, RUN_FILE, RunResult


class ResultsWriter:
    """Owns one results directory for the duration of a run."""

    def __init__(self, directory: Path, epoch_offset_ns: int, overwrite: bool = False,
                 redact: Callable[[Any], Any] | None = None) -> None:
        self.directory = directory
        self._redact = redact  # applied to run.json's tree before each write (Redactor.tree)
        self.epoch_offset_ns = epoch_offset_ns
        existing = [directory / f for f in (RUN_FILE, REQUESTS_FILE) if (directory / f).exists()]
        if existing and not overwrite:
            raise ConfigError(
                f"{directory} already holds a run ({', '.join(p.name for p in existing)})",
                hint="choose a new --out directory, or pass --overwrite to replace it",
            )
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for path in existing:
                path.unlink()
            self._requests: IO[bytes] = open(directory / REQUESTS_FILE, "xb")
            self._broken: ResultsError | None = None  # the failed append that stopped the appends
            self.appended = 0  # records written whole
        except OSError as exc:
            raise ConfigError(
                f"cannot write results to {directory}: {exc.strerror}",
                hint="choose another --out directory",
            ) from exc

    def append(self, record: RequestRecord) -> None:
        """Write one finished request and flush it to the OS at once (one write: a kill leaves whole lines).

        After a failed write (a full disk) nothing more is appended: a second partial line would
        land after the first, so the file keeps the whole records before the failure and at most
        one torn line (which `report` names by its number).
        """
        if self._broken is not None:
            raise self._broken
        try:
            self._requests.write(orjson.dumps(record.to_json_dict(self.epoch_offset_ns)) + b"\n")
            self._requests.flush()
        except OSError as exc:
            self._broken = ResultsError(
                f"cannot append to {self.directory / REQUESTS_FILE}: {exc.strerror}",
                hint=_space_hint(exc, self.directory),
            )
            raise self._broken from exc
        self.appended += 1

    def write_run(self, result: RunResult) -> None:
        """Replace run.json atomically (write a temp file, then rename).

        When that fails (a full disk), the temp file is removed and run.json's status is
        patched in place (bytes already on disk, so no space is needed): a reader then sees
        how the run ended, not "running". Raises ResultsError saying what could not be written.
        """
        tmp = self.directory / (RUN_FILE + ".tmp")
        data = result.to_json_bytes(self._redact)
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.directory / RUN_FILE)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            patched = _patch_status(self.directory / RUN_FILE, result.status)
            raise ResultsError(
                f"cannot write {self.directory / RUN_FILE}: {exc.strerror}"
                + (f" (its status says {result.status!r}; its summary is not saved)" if patched else ""),
                hint=_space_hint(exc, self.directory),
            ) from exc

    @property
    def requests_path(self) -> Path:
        return self.directory / REQUESTS_FILE

    def position(self) -> int:
        """Bytes in requests.jsonl so far: where the next record will start (every append is flushed)."""
        return self._requests.tell()

    def close(self) -> None:
        try:
            self._requests.close()
        except OSError:  # a buffered line that could not be flushed: the failure was already raised
            pass


def _space_hint(exc: OSError, directory: Path) -> str | None:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"free space where {directory} is (or pass another --out): the requests that finished before are in "
                f"{REQUESTS_FILE}; tokspeed report {directory} summarises them")
    return None


_RUNNING = re.compile(rb'"status":(\s*)"running"')


def _patch_status(run_file: Path, status: str) -> bool:
    """Overwrite `"status": "running"` in run.json in place with `status` (same length, padded): True if done."""
    if status == "running" or len(status) > len("running"):
        return False
    try:
        with open(run_file, "r+b") as f:
            m = _RUNNING.search(f.read())
            if m is None:
                return False
            new = b'"status":%s"%s"' % (m.group(1), status.encode())
            f.seek(m.start())
            f.write(new.ljust(m.end() - m.start()))
        return True
    except OSError:
        return False
