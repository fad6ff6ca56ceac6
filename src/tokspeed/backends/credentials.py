"""The credentials a target URL carries (`http://user:pass@host/v1`), turned into one header.

tokspeed talks to a target through two clients: aiohttp (discovery, the probe, the server's
/version and /metrics) and the lean HTTP/1.1 pool (`backends/http1.py`, the load). Both take a
URL *without* user-info and a header dict: `with_url_auth` strips the user-info and adds the
`Authorization: Basic …` header it stands for, so the same credentials reach every request,
whichever client sends it. The user-info is percent-decoded first (`p%40ss` is the password
`p@ss`), as browsers and curl do.

A URL with credentials beside an `Authorization` header of its own (`--api-key`,
`--header 'Authorization: …'`) would need two values for one header: refused (`ConfigError`).
"""

from __future__ import annotations

import re
from base64 import b64encode
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from tokspeed.errors import ConfigError

MASK = "***"  # what a secret becomes in files and messages
SECRET_HEADERS = ("authorization", "api-key", "x-api-key", "proxy-authorization", "cookie")  # header names whose values are secrets
_USERINFO = re.compile(r"(?<=//)[^/?#@\s]*@")  # the fallback for a URL urlsplit cannot parse

AUTHORIZATION = "Authorization"


def basic_credential(url: str) -> str | None:
    """The base64 `user:password` of `url`'s user-info (what `Authorization: Basic` carries); None without one."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return None
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return b64encode(pair.encode("utf-8")).decode("ascii")


def strip_userinfo(url: str) -> str:
    """`url` without `user:password@` (the rest unchanged)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def with_url_auth(url: str, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """(`url` without user-info, `headers` plus the `Authorization: Basic` header that user-info stands for).

    Raises ConfigError when `headers` already carry an Authorization header and the URL has credentials.
    """
    out = dict(headers)
    credential = basic_credential(url)
    if credential is None:
        return url, out
    if any(name.lower() == "authorization" for name in out):
        raise ConfigError(
            "the target URL carries credentials (user:password@) and an Authorization header is also set "
            "(--api-key, OPENAI_API_KEY or --header): a request can send only one",
            hint="drop the user:password@ from the URL, or the API key / Authorization header",
        )
    out[AUTHORIZATION] = f"Basic {credential}"
    return strip_userinfo(url), out


def url_auth_replacing(url: str, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """Like `with_url_auth`, but a URL's own credentials replace an Authorization header in `headers`.

    For a URL given apart from the target (`--server-metrics http://admin:PASS@…`): its credentials
    are meant for it, the target's are the default.
    """
    if basic_credential(url) is None:
        return url, dict(headers)
    return with_url_auth(url, {k: v for k, v in headers.items() if k.lower() != "authorization"})


def redact_url(url: str) -> str:
    """`url` with any password in its user-info replaced by `***` (for files and messages).

    User-info without a password is masked whole; a URL that cannot be parsed loses its user-info.
    """
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc:
            return url
        user, password = parts.username, parts.password
    except ValueError:
        return _USERINFO.sub(f"{MASK}@", url)
    host = parts.netloc.rpartition("@")[2]
    shown = f"{user or ''}:{MASK}@" if password is not None else f"{MASK}@"
    return parts._replace(netloc=shown + host).geturl()
