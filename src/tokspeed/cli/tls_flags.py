"""The TLS flags of every command that talks to a target (run, sweep, capacity, monitor, quality), declared once.

Each flag is an annotated type for a command's signature; `tls_fields(...)` turns their values
into the RunConfig fields (`ca_cert`, `insecure`, `client_cert`, `client_key`) and `policy(...)`
into the `HttpPolicy` both of tokspeed's HTTP clients use (backends/http_policy.py). Only the
paths are kept (run.json's config), never a file's contents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

if TYPE_CHECKING:
    from tokspeed.backends.http_policy import HttpPolicy

TLS = "TLS (https targets)"


def _opt(*names: str, help: str, **kw: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=TLS, **kw)


CaCert = Annotated[Optional[str], _opt("--ca-cert", help="PEM file of the CA(s) that signed the server's certificate, trusted instead of the system's, for the load, the probe and /metrics alike. [default: the system's trust store; SSL_CERT_FILE applies]", metavar="FILE", envvar="TOKSPEED_CA_CERT", show_envvar=True)]
Insecure = Annotated[bool, _opt("--insecure", help="Do not check the server's certificate or host name (a self-signed test server). The traffic is still encrypted, but anyone on the path can read it.")]
ClientCert = Annotated[Optional[str], _opt("--client-cert", help="PEM client certificate, for a server that asks for one (mutual TLS); may hold the key too. [default: none]", metavar="FILE")]
ClientKey = Annotated[Optional[str], _opt("--client-key", help="PEM private key of --client-cert, when not in the same file (unencrypted). [default: none]", metavar="FILE")]


def tls_fields(*, ca_cert: str | None, insecure: bool, client_cert: str | None, client_key: str | None) -> dict[str, Any]:
    """The RunConfig fields the flags set (None: not given, the scenario's or the default then)."""
    return {"ca_cert": ca_cert, "insecure": True if insecure else None, "client_cert": client_cert,
            "client_key": client_key}


def policy(*, ca_cert: str | None, insecure: bool, client_cert: str | None, client_key: str | None) -> HttpPolicy:
    """The HTTP policy of the flags, its files checked now (ConfigError, exit 2, for a bad one)."""
    from tokspeed.backends.http_policy import HttpPolicy

    made = HttpPolicy(ca_cert=ca_cert, insecure=insecure, client_cert=client_cert, client_key=client_key)
    if made != HttpPolicy():
        made.check()
    return made
