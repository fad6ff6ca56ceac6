"""Retrying a request the server asked to come back later (HTTP 429/503), and how long to wait.

Retries are off unless `--retries N` is given: a retry hides what the server did. Only the
statuses in `RETRY_STATUSES` are retried. The wait is the server's `Retry-After` (seconds or
an HTTP date) when given, else an exponential backoff; either is capped at `RETRY_AFTER_CAP_S`.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

from tokspeed.records import ErrorKind, RequestRecord, Status

RETRY_STATUSES = (429, 503)  # --retries repeats only these: the server asked the client to come back
RETRY_AFTER_CAP_S = 30.0  # the longest Retry-After honoured (and the backoff's ceiling)
RETRY_BACKOFF_S = 0.5  # without Retry-After: wait 0.5 s, 1 s, 2 s, ... between attempts


def retryable(record: RequestRecord) -> bool:
    """Whether `record` failed with a status the server uses to say "try again later"."""
    return (
        record.status is Status.ERROR
        and record.error_kind is ErrorKind.HTTP
        and record.http_status in RETRY_STATUSES
    )


def retry_delay_s(retry_after: str | None, attempt: int, now_s: float | None = None) -> float:
    """Seconds to wait before attempt `attempt + 1` (0-based `attempt` just failed).

    Formula: min(RETRY_AFTER_CAP_S, Retry-After if it parses else RETRY_BACKOFF_S × 2^attempt).
    """
    parsed = parse_retry_after(retry_after, now_s)
    wait = parsed if parsed is not None else RETRY_BACKOFF_S * (2 ** min(attempt, 30))
    return min(RETRY_AFTER_CAP_S, wait)


def parse_retry_after(value: str | None, now_s: float | None = None) -> float | None:
    """A `Retry-After` header as seconds from now (≥ 0), or None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        return _seconds_until(text, time.time() if now_s is None else now_s)
    return seconds if seconds >= 0 and seconds == seconds else None  # NaN fails the second test


def _seconds_until(http_date: str, now_s: float) -> float | None:
    try:
        when = parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_s)


def reset_for_retry(record: RequestRecord) -> None:
    """Clear what the failed attempt left, and count the retry."""
    record.status = Status.OK
    record.error_kind = None
    record.error = None
    record.http_status = None
    record.end_ns = None
    record.retries += 1
