"""One HTTP policy for both of tokspeed's clients: TLS, proxies and redirects.

tokspeed talks to a target through two clients: aiohttp (discovery, the probe, the server's
/version and /metrics, the monitor, the quality probe) and the lean HTTP/1.1 pool
(`backends/http1.py`, the load). `HttpPolicy` is what they share, so a target that one of
them can reach the other can too:

- TLS: one `ssl.SSLContext` (`ssl_context()`) for both. By default the system's trust store
  (OpenSSL's, so `SSL_CERT_FILE` / `SSL_CERT_DIR` apply); `--ca-cert FILE` trusts the CAs in
  FILE instead (as curl does); `--insecure` checks neither the certificate nor the
  host name; `--client-cert FILE [--client-key FILE]` answers a server that asks for one.
  A file that cannot be read or is not PEM is a `ConfigError` naming the flag (exit 2).
- Proxies: the load's client connects to the target directly and cannot use a proxy, so a
  proxy variable (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, either case) that would apply to a
  non-loopback target, and that `NO_PROXY` does not exempt, is refused (`refuse_proxy`,
  a `ConfigError`): measuring one path while the user expects another would be wrong either
  way. Loopback targets always go direct, and no aiohttp session reads the environment
  (`trust_env=False`).
- Redirects: never followed (a benchmark measures the server it names). Every aiohttp
  request passes `allow_redirects=False`; a 3xx before the load is a `TargetRedirected`
  (exit 2, naming the Location), during the load that request's `http` error
  (`redirect_text`).

URL credentials (`user:password@`) are the other shared part, in `backends/credentials.py`.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tokspeed.backends.credentials import redact_url
from tokspeed.errors import ConfigError, TargetRedirected

if TYPE_CHECKING:
    import aiohttp

NO_REDIRECTS: dict[str, Any] = {"allow_redirects": False}  # the keyword every aiohttp request of tokspeed's passes


@dataclass(frozen=True)
class HttpPolicy:
    """TLS settings shared by every client of a target (paths only: a key's contents are never held here)."""

    ca_cert: str | None = None  # PEM file of the CAs to trust (instead of the system's)
    insecure: bool = False  # verify neither the certificate nor the host name
    client_cert: str | None = None  # PEM client certificate (and its key, unless client_key)
    client_key: str | None = None  # PEM key of client_cert

    def problem(self) -> str | None:
        """Why these settings contradict each other, or None."""
        if self.insecure and self.ca_cert:
            return "--insecure and --ca-cert contradict each other: --insecure checks no certificate"
        if self.client_key and not self.client_cert:
            return "--client-key needs --client-cert (the certificate the key belongs to)"
        return None

    def ssl_context(self) -> ssl.SSLContext:
        """The one TLS context of both clients; ConfigError (one line, naming the flag) for a bad file."""
        problem = self.problem()
        if problem:
            raise ConfigError(problem)
        context = ssl.create_default_context(cafile=_readable("--ca-cert", self.ca_cert))
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert:
            cert = _readable("--client-cert", self.client_cert)
            key = _readable("--client-key", self.client_key)
            try:
                context.load_cert_chain(cert, key)  # type: ignore[arg-type]  # checked above
            except ssl.SSLError as exc:
                raise ConfigError(f"{_which_file(exc, self)} cannot be used: {_ssl_reason(exc)}",
                                  hint="give a PEM certificate and its PEM private key (unencrypted)") from None
        return context

    def check(self) -> None:
        """Build the context once, so a bad file fails before anything is sent (ConfigError)."""
        self.ssl_context()

    def session(self, **kwargs: Any) -> aiohttp.ClientSession:
        """An aiohttp session under this policy: its TLS context, no proxy from the environment."""
        import aiohttp

        connector = aiohttp.TCPConnector(ssl=self.ssl_context(), limit=kwargs.pop("limit", 100))
        return aiohttp.ClientSession(connector=connector, trust_env=False, **kwargs)


def _readable(flag: str, path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError as exc:
        raise ConfigError(f"{flag} {path} cannot be read: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in head:
        raise ConfigError(f"{flag} {path} is not a PEM file (no -----BEGIN line)",
                          hint="convert it with openssl, e.g. `openssl x509 -inform der -in FILE -out FILE.pem`")
    return path


def _ssl_reason(exc: ssl.SSLError) -> str:
    return str(exc.reason or exc).replace("_", " ").lower()


def _which_file(exc: ssl.SSLError, policy: HttpPolicy) -> str:
    """The flag an SSLError of load_cert_chain is about: the key's own problems name --client-key."""
    about_key = "KEY" in str(exc.reason or "") or "PEM_LIB" in str(exc.reason or "")
    if policy.client_key and about_key:
        return f"--client-key {policy.client_key}"
    return f"--client-cert {policy.client_cert}"


def is_loopback(host: str) -> bool:
    """`host` is this machine: localhost (or a name under .localhost), 127.0.0.0/8, ::1."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def proxy_for(url: str, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(variable, value) of the proxy that the environment would route `url` through, or None.

    The scheme's own variable first, then ALL_PROXY, lower case before upper (as curl and
    urllib read them); NO_PROXY (or no_proxy) exempts a host by name, suffix or `*`; a
    loopback host is never proxied.
    """
    from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed

    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host or is_loopback(host):
        return None
    no_proxy = environ.get("no_proxy") or environ.get("NO_PROXY") or ""
    if no_proxy and proxy_bypass_environment(f"{host}:{parts.port}" if parts.port else host, {"no": no_proxy}):
        return None
    for base in (f"{parts.scheme}_proxy", "all_proxy"):
        for name in (base, base.upper()):
            value = environ.get(name, "").strip()
            if value:
                return name, value
    return None


def refuse_proxy(url: str, environ: Mapping[str, str] | None = None, what: str = "the target") -> None:
    """ConfigError when a proxy variable applies to `url` (`what` it is): tokspeed would not use it, and says so."""
    found = proxy_for(url, os.environ if environ is None else environ)
    if found is None:
        return
    name, value = found
    host = urlsplit(url).hostname or ""
    raise ConfigError(
        f"{name}={redact_url(value)} applies to {host}, but tokspeed connects to {what} directly "
        "(its HTTP clients do not use proxies)",
        hint=f"to measure the server without the proxy, add it to NO_PROXY (NO_PROXY={host}); or unset {name}",
    )


def redirect_text(status: int, location: str | None) -> str:
    """What a 3xx answer says, for a record's error and a start-up refusal (the Location redacted)."""
    where = redact_url(location) if location else "no Location"
    return f"HTTP {status}: a redirect to {where} (tokspeed does not follow redirects)"


def redirected(method: str, url: str, status: int, location: str | None) -> TargetRedirected:
    """The start-up error for a 3xx answer to discovery or the probe (exit 2)."""
    return TargetRedirected(
        f"{method} {redact_url(url)} answered {redirect_text(status, location)}",
        hint="give --target the URL the server answers at itself (a benchmark measures the server it names)",
    )


def is_redirect(status: int) -> bool:
    return 300 <= status < 400
