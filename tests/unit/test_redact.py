"""Secrets never survive an error message: key, secret headers, URL passwords."""

from __future__ import annotations

from tokspeed.backends.redact import Redactor, redact_url, secret_values

KEY = "sk-live-0123456789abcdef"


def test_api_key_and_bearer_header_are_masked() -> None:
    redact = Redactor.for_target("http://h/v1", KEY, {"Authorization": f"Bearer {KEY}"})
    assert redact(f"invalid key Bearer {KEY} (got {KEY})") == "invalid key *** (got ***)"


def test_secret_headers_and_their_credentials_are_masked_but_others_are_not() -> None:
    values = secret_values("http://h/v1", None, {"X-Api-Key": "hdr-secret-1", "Cookie": "s=abc123", "X-Trace": "visible"})
    assert "hdr-secret-1" in values and "s=abc123" in values and "visible" not in values
    redact = Redactor(values)
    assert redact("hdr-secret-1 s=abc123 visible") == "*** *** visible"


def test_url_password_is_masked() -> None:
    url = "http://alice:p%40ssw0rd@host:8000/v1"
    redact = Redactor.for_target(url, None, {})
    assert redact("cannot reach http://alice:p%40ssw0rd@host:8000/v1 p@ssw0rd") == "cannot reach http://alice:***@host:8000/v1 ***"
    assert redact_url(url) == "http://alice:***@host:8000/v1"
    assert redact_url("http://host/v1") == "http://host/v1"


def test_tiny_values_are_not_treated_as_secrets() -> None:
    assert Redactor(["ab", ""])("ab cd") == "ab cd"


def test_longest_secret_first_leaves_no_fragment() -> None:
    redact = Redactor(["abcd", "abcdefgh"])
    assert redact("abcdefgh") == "***"
