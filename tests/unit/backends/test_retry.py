"""Retry policy: which failures are retried and how long to wait (Retry-After, capped backoff)."""

from __future__ import annotations

import pytest

from tokspeed.backends.retry import (
    RETRY_AFTER_CAP_S,
    RETRY_BACKOFF_S,
    parse_retry_after,
    reset_for_retry,
    retry_delay_s,
    retryable,
)
from tokspeed.records import ErrorKind, RequestRecord, Status

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


@pytest.mark.parametrize(
    "value,expected",
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        ("1.5", 1.5),
        ("-1", None),
        ("nan", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("Tue, 14 Nov 2023 22:13:30 GMT", 10.0),
        ("Tue, 14 Nov 2023 22:13:00 GMT", 0.0),  # in the past: at once
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now_s=NOW) == expected


def test_delay_honours_retry_after_up_to_the_cap_else_backs_off() -> None:
    assert retry_delay_s("2", attempt=0) == 2.0
    assert retry_delay_s("99999", attempt=0) == RETRY_AFTER_CAP_S
    assert [retry_delay_s(None, a) for a in range(3)] == [RETRY_BACKOFF_S, 2 * RETRY_BACKOFF_S, 4 * RETRY_BACKOFF_S]
    assert retry_delay_s(None, attempt=1000) == RETRY_AFTER_CAP_S


def failed(kind: ErrorKind, status: int | None) -> RequestRecord:
    r = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0, sent_ns=5, end_ns=9)
    r.status, r.error_kind, r.http_status, r.error = Status.ERROR, kind, status, "x"
    return r


def test_only_429_and_503_are_retried() -> None:
    assert retryable(failed(ErrorKind.HTTP, 429)) and retryable(failed(ErrorKind.HTTP, 503))
    assert not retryable(failed(ErrorKind.HTTP, 500))
    assert not retryable(failed(ErrorKind.CONNECT, None))
    assert not retryable(RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0))


def test_reset_clears_the_failure_and_counts_the_retry() -> None:
    r = failed(ErrorKind.HTTP, 429)
    reset_for_retry(r)
    reset_for_retry(r)
    assert (r.status, r.error_kind, r.error, r.http_status, r.end_ns, r.retries) == (Status.OK, None, None, None, None, 2)
