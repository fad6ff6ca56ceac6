"""Keeping secrets out of messages: every error text a backend keeps or raises passes a `Redactor`.

Servers echo what they were sent (an `Authorization` header in a 401 body, a URL with
credentials in a proxy error), so the API key, secret header values and a URL's password
are replaced with `***` wherever they appear. Redact *before* truncating a message: a cut
can leave half a key that no longer matches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import unquote, urlsplit

from tokspeed.config import SECRET_HEADERS

MASK = "***"
MIN_SECRET_CHARS = 4  # shorter values would mask ordinary words; no real credential is this short


class Redactor:
    """Replaces each known secret in a text with `***` (longest first, so no fragment survives)."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str]) -> None:
        kept = {s for s in secrets if len(s) >= MIN_SECRET_CHARS}
        self._secrets = tuple(sorted(kept, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    @classmethod
    def for_target(cls, url: str, api_key: str | None, headers: Mapping[str, str]) -> Redactor:
        """The secrets of one target: its API key, secret headers and the URL's password."""
        return cls(secret_values(url, api_key, headers))


def secret_values(url: str, api_key: str | None, headers: Mapping[str, str]) -> list[str]:
    """Every string that must not be shown: whole values and their credential parts."""
    values = [api_key] if api_key else []
    for name, value in headers.items():
        if name.lower() in SECRET_HEADERS:
            values.append(value)
            scheme, _, credential = value.partition(" ")
            if credential and scheme.isalpha():  # "Bearer sk-..." / "Basic dXNlcjpw..."
                values.append(credential.strip())
    password = urlsplit(url).password
    if password:
        values += [password, unquote(password)]
    return values


def redact_url(url: str) -> str:
    """`url` with any password in its user-info replaced by `***` (for files and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}").geturl()
