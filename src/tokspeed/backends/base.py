"""The Backend protocol: how the runner hands a request to something that serves it.

A backend sends one `RequestSpec`, fills the `RequestRecord` it is given
(timestamps, tokens, status) and never raises for a failed request: failures
are data. It knows nothing about arrival processes or statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tokspeed.records import RequestRecord, RequestSpec


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """What the backend learned about its target before the run."""

    kind: str  # "openai-http", "embedded", ...
    url: str | None
    model: str
    api: str
    stream: bool
    include_usage: bool
    server_version: str | None = None
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    async def start(self) -> TargetInfo:
        """Connect, discover what is needed (model, capabilities); raise TargetError if unusable."""
        ...

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        """Send one request and fill `record`. Sets `record.sent_ns`. Never raises for request failures."""
        ...

    async def close(self) -> None: ...
