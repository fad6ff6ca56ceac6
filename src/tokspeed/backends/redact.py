"""Keeping secrets out of messages and files: every text a backend keeps or raises passes a `Redactor`.

Servers echo what they were sent (an `Authorization` header in a 401 body, a URL with
credentials in a proxy error, a key in a 200 body's /version or generated text), so the API
key, secret header values, a URL's password (and the `Basic` credential made of it) are
replaced with `***` wherever they appear. Each secret is also matched in the forms escaping
gives it on the way into a message: JSON string escaping (`\\"`, `\\\\`, `\\uXXXX`), Python's
`repr` (of a str or of UTF-8 bytes) and percent-encoding, each applied up to twice (a JSON body
quoted in a repr). Redact *before* truncating a message: a cut can leave half a key that no
longer matches.

A URL is shown with its password masked: `http://user:***@host/v1`; user-info without a
password (a token as the user name) is masked whole: `http://***@host/v1`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import orjson

from tokspeed.backends.credentials import MASK, SECRET_HEADERS

MIN_SECRET_CHARS = 4  # shorter values would mask ordinary words; no real credential is this short


def _json(s: str) -> str:
    return orjson.dumps(s).decode("utf-8")[1:-1]


def _json_ascii(s: str) -> str:
    return json.dumps(s)[1:-1]


def _repr(s: str) -> str:
    return repr(s)[1:-1]


def _repr_quote_escaped(s: str) -> str:  # repr inside a str that holds both quote kinds: ' escaped
    return repr(s + "\"'")[1:-4]


def _repr_bytes(s: str) -> str:
    return repr(s.encode("utf-8", "surrogatepass"))[2:-1]


def _percent(s: str) -> str:
    return quote(s, safe="")


_ESCAPES: tuple[Callable[[str], str], ...] = (_json, _json_ascii, _repr, _repr_quote_escaped, _repr_bytes, _percent)


def escaped_forms(secret: str) -> set[str]:
    """`secret` and every form one or two rounds of JSON, repr or percent escaping turn it into."""
    first = {secret} | {escape(secret) for escape in _ESCAPES}
    return first | {escape(form) for form in first for escape in _ESCAPES}


class Redactor:
    """Replaces each known secret, in any of its escaped forms, with `***` (longest first, so no fragment survives)."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str]) -> None:
        kept: set[str] = set()
        for s in secrets:
            if s and len(s) >= MIN_SECRET_CHARS:
                kept |= escaped_forms(s)
        self._secrets = tuple(sorted(kept, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def tree(self, value: Any) -> Any:
        """`value` (JSON-like: dicts, lists, strings) with every string, keys included, redacted."""
        if not self._secrets:
            return value
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self(k) if isinstance(k, str) else k: self.tree(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.tree(v) for v in value]
        return value

    @classmethod
    def for_target(cls, url: str, api_key: str | None, headers: Mapping[str, str]) -> Redactor:
        """The secrets of one target: its API key, secret headers and the URL's password."""
        return cls(secret_values(url, api_key, headers))


def secret_values(url: str, api_key: str | None, headers: Mapping[str, str]) -> list[str]:
    """Every string that must not be shown: whole values and their credential parts."""
    from tokspeed.backends.credentials import basic_credential

    values = [api_key] if api_key else []
    for name, value in headers.items():
        if name.lower() in SECRET_HEADERS:
            values.append(value)
            scheme, _, credential = value.partition(" ")
            if credential and scheme.isalpha():  # "Bearer sk-..." / "Basic dXNlcjpw..."
                values.append(credential.strip())
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
        basic = basic_credential(url)
    except ValueError:
        return values
    if password:
        values += [password, unquote(password)]
    elif username:  # a token given as the user name
        values += [username, unquote(username)]
    if basic:
        values.append(basic)
    return values
