"""The one HTTP policy of both clients: TLS context, proxy refusal, redirects (backends/http_policy.py)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from tokspeed.backends.http1 import Endpoint
from tokspeed.backends.http_policy import HttpPolicy, is_loopback, proxy_for, redirect_text, redirected, refuse_proxy
from tokspeed.backends.native import NativeHTTPBackend, native_protocol
from tokspeed.backends.openai_http import OpenAIHTTPBackend
from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError, TargetRedirected
from tokspeed.records import ErrorKind, RequestRecord, Status


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key, (cert, key)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    d = tmp_path_factory.mktemp("pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "k.pem"),
                    "-out", str(d / "c.pem"), "-days", "1", "-subj", "/CN=t"], check=True, capture_output=True)
    return d / "c.pem", d / "k.pem"


# TLS ------------------------------------------------------------------------------------------

def test_the_default_context_verifies_like_the_system() -> None:
    context = HttpPolicy().ssl_context()
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname


def test_insecure_checks_neither_certificate_nor_name() -> None:
    context = HttpPolicy(insecure=True).ssl_context()
    assert context.verify_mode is ssl.CERT_NONE and not context.check_hostname


def test_ca_cert_is_trusted_instead_of_the_system(pem: tuple[Path, Path]) -> None:
    context = HttpPolicy(ca_cert=str(pem[0])).ssl_context()
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "t"),),)]
    assert context.verify_mode is ssl.CERT_REQUIRED


def test_client_certificate_with_its_key(pem: tuple[Path, Path]) -> None:
    HttpPolicy(client_cert=str(pem[0]), client_key=str(pem[1])).check()
    both = pem[0].parent / "both.pem"
    both.write_bytes(pem[0].read_bytes() + pem[1].read_bytes())
    HttpPolicy(client_cert=str(both)).check()  # one file holding both


@pytest.mark.parametrize("fields, words", [
    ({"ca_cert": "{missing}"}, "--ca-cert {missing} cannot be read"),
    ({"ca_cert": "{text}"}, "--ca-cert {text} is not a PEM file"),
    ({"client_cert": "{text}"}, "--client-cert {text} is not a PEM file"),
    ({"client_cert": "{cert}"}, "--client-cert {cert} cannot be used"),  # no key in it, none given
    ({"client_cert": "{cert}", "client_key": "{cert}"}, "cannot be used"),  # the key file holds no key
    ({"client_key": "{key}"}, "--client-key needs --client-cert"),
    ({"insecure": True, "ca_cert": "{cert}"}, "--insecure and --ca-cert contradict"),
])
def test_a_bad_tls_setting_is_one_config_error_naming_its_flag(pem: tuple[Path, Path], tmp_path: Path,
                                                               fields: dict[str, object], words: str) -> None:
    (tmp_path / "t.txt").write_text("hello\n")
    names = {"missing": str(tmp_path / "none.pem"), "text": str(tmp_path / "t.txt"), "cert": str(pem[0]),
             "key": str(pem[1])}
    given = {k: v.format(**names) if isinstance(v, str) else v for k, v in fields.items()}
    with pytest.raises(ConfigError) as err:
        HttpPolicy(**given).check()  # type: ignore[arg-type]
    assert words.format(**names) in str(err.value) and "\n" not in str(err.value)
    assert "BEGIN CERTIFICATE" not in str(err.value) and "PRIVATE KEY" not in str(err.value)  # never a file's contents


def test_the_run_config_keeps_the_paths_and_checks_the_files(pem: tuple[Path, Path], tmp_path: Path) -> None:
    cfg = RunConfig(target="https://127.0.0.1:9/v1", ca_cert=str(pem[0]), client_cert=str(pem[0]),
                    client_key=str(pem[1]))
    assert cfg.http_policy() == HttpPolicy(ca_cert=str(pem[0]), client_cert=str(pem[0]), client_key=str(pem[1]))
    saved = cfg.redacted_dump()
    assert (saved["ca_cert"], saved["client_key"], saved["insecure"]) == (str(pem[0]), str(pem[1]), False)
    with pytest.raises(ConfigError, match="--ca-cert .* cannot be read"):
        RunConfig(target="https://127.0.0.1:9/v1", ca_cert=str(tmp_path / "none.pem"))


def test_both_clients_of_a_backend_get_the_policys_context(pem: tuple[Path, Path]) -> None:
    policy = HttpPolicy(ca_cert=str(pem[0]))

    async def check(backend: OpenAIHTTPBackend | NativeHTTPBackend) -> None:
        pool = backend._open_pool(Endpoint("https://127.0.0.1:9/v1/x"))  # the load's
        assert pool._ssl is not None and len(pool._ssl.get_ca_certs()) == 1  # the given CA only
        session = backend._open_session()  # discovery's and the probe's
        try:
            assert session.trust_env is False
            assert session.connector._ssl.get_ca_certs() == pool._ssl.get_ca_certs()  # type: ignore[union-attr]
        finally:
            await backend.close()

    asyncio.run(check(OpenAIHTTPBackend("https://127.0.0.1:9/v1", policy=policy)))
    asyncio.run(check(NativeHTTPBackend("https://127.0.0.1:9", native_protocol("tgi"), policy=policy)))  # type: ignore[arg-type]


# proxies --------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.1.2.3", "[::1]", "api.localhost"])
def test_loopback_targets_always_go_direct(host: str) -> None:
    assert is_loopback(host.strip("[]"))
    env = {"HTTP_PROXY": "http://p:1", "HTTPS_PROXY": "http://p:1", "ALL_PROXY": "http://p:1"}
    assert proxy_for(f"http://{host}:8000/v1", env) is None
    refuse_proxy(f"https://{host}:8000/v1", env)


@pytest.mark.parametrize("url, env, found", [
    ("http://gpu1:8000/v1", {"HTTP_PROXY": "http://p:1"}, ("HTTP_PROXY", "http://p:1")),
    ("http://gpu1:8000/v1", {"http_proxy": "http://a:1", "HTTP_PROXY": "http://b:1"}, ("http_proxy", "http://a:1")),
    ("https://gpu1/v1", {"HTTP_PROXY": "http://p:1"}, None),  # the http variable is not for https
    ("https://gpu1/v1", {"HTTPS_PROXY": "http://p:1"}, ("HTTPS_PROXY", "http://p:1")),
    ("https://gpu1/v1", {"all_proxy": "socks5://p:1"}, ("all_proxy", "socks5://p:1")),
    ("http://gpu1:8000/v1", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "gpu1"}, None),
    ("http://gpu1.lab:8000/v1", {"HTTP_PROXY": "http://p:1", "no_proxy": ".lab"}, None),
    ("http://gpu1.lab:8000/v1", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
    ("http://gpu1:8000/v1", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "gpu2"}, ("HTTP_PROXY", "http://p:1")),
    ("http://10.0.0.5:8000/v1", {"HTTP_PROXY": " "}, None),  # blank: not set
])
def test_which_proxy_variable_applies(url: str, env: dict[str, str], found: tuple[str, str] | None) -> None:
    assert proxy_for(url, env) == found


def test_a_proxy_that_applies_is_refused_in_one_line_without_its_password() -> None:
    with pytest.raises(ConfigError) as err:
        refuse_proxy("https://gpu1:8443/v1", {"HTTPS_PROXY": "http://me:s3cret@proxy:3128"})
    assert "HTTPS_PROXY" in str(err.value) and "gpu1" in str(err.value) and "s3cret" not in str(err.value)
    assert "\n" not in str(err.value) and err.value.hint is not None and "NO_PROXY=gpu1" in err.value.hint
    assert err.value.exit_code == 2
    with pytest.raises(ConfigError, match="connects to --server-metrics directly"):
        refuse_proxy("http://gpu1:9000/metrics", {"HTTP_PROXY": "http://proxy:3128"}, what="--server-metrics")


# redirects -----------------------------------------------------------------------------------

def test_a_redirect_before_the_load_exits_2_naming_the_location_without_secrets() -> None:
    err = redirected("POST", "http://u:pw@gw/v1/chat/completions", 307, "http://u:pw2@real:8000/v1/chat/completions")
    assert isinstance(err, TargetRedirected) and err.exit_code == 2
    assert "307" in str(err) and "http://u:***@real:8000/v1/chat/completions" in str(err)
    assert "pw" not in str(err).replace("***", "")
    assert redirect_text(302, None) == "HTTP 302: a redirect to no Location (tokspeed does not follow redirects)"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("make", ["openai", "native"])
def test_a_redirect_during_the_load_is_the_requests_http_error(status: int, make: str) -> None:
    record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0, sent_ns=1)
    backend = (OpenAIHTTPBackend("http://127.0.0.1:9/v1") if make == "openai"
               else NativeHTTPBackend("http://127.0.0.1:9", native_protocol("tgi")))  # type: ignore[arg-type]
    response = backend.response(record, keep_text=True)
    response.on_head(status, {"location": "http://other:8000/v1/chat/completions", "content-length": "0"})
    response.end_ns = 5
    backend.settle(response)  # type: ignore[arg-type]
    assert record.status is Status.ERROR and record.error_kind is ErrorKind.HTTP and record.http_status == status
    assert record.error == f"HTTP {status}: a redirect to http://other:8000/v1/chat/completions (tokspeed does not follow redirects)"
