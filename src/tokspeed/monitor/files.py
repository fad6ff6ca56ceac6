"""Size-capped JSON-lines files: append one object per line, rotate to `NAME.1` past a byte cap.

A monitor runs for days, so its files must not grow without bound: once the
current file passes `max_bytes`, it is renamed to `NAME.1` (replacing an older
one) and a new file starts. At most 2 × max_bytes stay on disk per file. Each
line is flushed as it is written (nothing finished is lost on a crash).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

import orjson


class CappedJsonl:
    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.rotations = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[bytes] = path.open("ab")
        self._size = self._fh.tell()

    def write(self, obj: dict[str, Any]) -> None:
        line = orjson.dumps(obj) + b"\n"
        if self._size and self._size + len(line) > self.max_bytes:
            self._rotate()
        self._fh.write(line)
        self._fh.flush()
        self._size += len(line)

    def _rotate(self) -> None:
        self._fh.close()
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._fh = self.path.open("ab")
        self._size = 0
        self.rotations += 1

    def close(self) -> None:
        self._fh.close()
