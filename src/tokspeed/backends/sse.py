"""An incremental Server-Sent Events decoder: bytes in, event data payloads out.

Follows the WHATWG rules that matter for LLM servers: lines end in LF, CRLF or
CR (a CR at the end of one network read may be the first half of a CRLF);
`:` lines are comments (keep-alives) and are dropped; several `data:` lines
of one event are joined with LF; a blank line ends an event; other fields
(`event:`, `id:`, `retry:`) are ignored except that the event type is kept. An event of type
`error` is not returned as data: its payload is kept in `error` (the first one) and decoding
stops there, so a client can fail the request instead of reading on past the server's failure.
A line naming no SSE field at all (the spec says: ignore it) is remembered in
`malformed`, so a client can tell that data was lost rather than guess; a line of only
spaces or tabs is ignored without that mark (it can hold no data). One UTF-8 byte order mark
before a line is dropped, once per stream, as the standard's decoder drops it at the start: it is
looked for only where a line would otherwise be malformed, so the per-read path pays nothing.
Events may be split across reads and one read may hold many events.

This sits on the per-token path, so it works on bytes and allocates little.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_DATA = b"data"
_EVENT = b"event"
_IGNORED_FIELDS = (b"id", b"retry")
_BOM = b"\xef\xbb\xbf"
MALFORMED_KEEP = 80  # bytes of the first malformed line kept for the error message


@dataclass(slots=True)
class SSEDecoder:
    """Feed raw bytes; get back the `data` payload of every completed event.

    `feed` returns a list of payloads (bytes). `last_event_type` holds the
    `event:` field of the most recent dispatched event (b"" when none).
    `malformed` holds the start of the first line that was neither a comment
    nor a `data`/`event`/`id`/`retry` field (None when there was none).
    """

    _tail: bytes = b""
    _after_cr: bool = False  # the previous read ended in CR: a leading LF belongs to it
    _data: list[bytes] = field(default_factory=list)
    _event: bytes = b""
    last_event_type: bytes = b""
    malformed: bytes | None = None
    error: bytes | None = None  # the data of the first `event: error` event (decoding stops there)
    _bom_dropped: bool = False  # the stream's one byte order mark was taken off a line

    def feed(self, chunk: bytes) -> list[bytes]:
        if not (self._tail or self._data or self._after_cr or self._event) and chunk.endswith(b"\n\n") and b"\r" not in chunk:
            if chunk.startswith(b"data: "):
                # n events of one `data: ` line each, and no other line: split in C
                n = chunk.count(b"\n\ndata: ") + 1
                if chunk.count(b"\n") == 2 * n:
                    self.last_event_type = b""
                    return [chunk[6:-2]] if n == 1 else [e[6:] for e in chunk[:-2].split(b"\n\n")]
            return self._whole_events(chunk)
        if self._after_cr:
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._tail + chunk if self._tail else chunk
        if b"\r" in buf:
            self._after_cr = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        out: list[bytes] = []
        for line in lines:
            self._line(line, out)
            if self.error is not None:
                break
        return out

    def _whole_events(self, chunk: bytes) -> list[bytes]:
        """Fast path: the read holds only complete LF-terminated events (what servers send)."""
        out: list[bytes] = []
        for block in chunk.split(b"\n\n"):
            if block.startswith(b"data: ") and b"\n" not in block:
                out.append(block[6:])
                self.last_event_type = b""
            elif block:
                for line in block.split(b"\n"):
                    self._line(line, out)
                self._line(b"", out)
                if self.error is not None:
                    break
        return out

    def close(self) -> list[bytes]:
        """End of stream: dispatch what is pending even without a final blank line."""
        out = self.feed(b"\n\n") if (self._tail or self._data) else []
        return out

    def _line(self, line: bytes, out: list[bytes]) -> None:
        if not line:
            if self._data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                self._data = []
                self.last_event_type = self._event
                if self._event == b"error":
                    if self.error is None:
                        self.error = data
                else:
                    out.append(data)
            self._event = b""
            return
        if line[0] == 58:  # b":" comment / keep-alive
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == _DATA:
            self._data.append(value)
        elif name == _EVENT:
            self._event = value
        elif line.startswith(_BOM) and not self._bom_dropped:
            self._bom_dropped = True
            self._line(line[3:], out)
        elif name not in _IGNORED_FIELDS and self.malformed is None and line.strip(b" \t"):
            self.malformed = line[:MALFORMED_KEEP]
