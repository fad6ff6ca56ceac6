"""An incremental newline-delimited JSON splitter (Ollama's stream): bytes in, one payload per line out.

Lines may be split across reads and one read may hold many lines; blank lines are skipped.
`malformed` is always None (kept so it reads like `SSEDecoder`).
"""

from __future__ import annotations


class NDJSONDecoder:
    __slots__ = ("_tail", "malformed")

    def __init__(self) -> None:
        self._tail = b""
        self.malformed: bytes | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._tail + chunk if self._tail else chunk
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        return [line for line in lines if line.strip()]

    def close(self) -> list[bytes]:
        """End of stream: the last line, even without its newline."""
        rest, self._tail = self._tail.strip(), b""
        return [rest] if rest else []
