"""An https target: the simulator behind TLS with a certificate from a throw-away CA.

`tokspeed run` trusts the CA through SSL_CERT_FILE (the standard OpenSSL variable) or `--ca-cert`,
so both the probe (aiohttp) and the streamed requests (tokspeed's own HTTP/1.1 client) verify the
certificate; without the CA the run must fail with a connect error, not stream in clear. `--insecure`
skips the check; a server that asks for a client certificate gets `--client-cert`/`--client-key`.
One `HttpPolicy` (backends/http_policy.py) builds the one TLS context both clients use.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from tests.integration.harness import load_json, records, run_cli

from tokspeed.sim import SimConfig, make_app

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(d: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signed for 127.0.0.1; returns (ca, cert, key)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"),
            "-days", "2", "-subj", "/CN=tokspeed test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"),
            "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
            "-CAcreateserial", "-out", str(d / "server.pem"), "-days", "2", "-extfile", str(d / "ext.cnf"))
    return d / "ca.pem", d / "server.pem", d / "server.key"


def make_client_certificate(d: Path) -> tuple[Path, Path]:
    """A client certificate signed by the CA of `make_certificates(d)`; returns (cert, key)."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "client.key"), "-out", str(d / "client.csr"),
            "-subj", "/CN=tokspeed test client")
    openssl("x509", "-req", "-in", str(d / "client.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
            "-CAcreateserial", "-out", str(d / "client.pem"), "-days", "2")
    return d / "client.pem", d / "client.key"


@pytest.fixture
def tls_sim(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The simulator on https://127.0.0.1:PORT/v1 in a thread; yields (url, CA file)."""
    ca, cert, key = make_certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    yield from serve_tls(context, ca)


@pytest.fixture
def mtls_sim(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Like `tls_sim`, but the server requires a client certificate signed by its CA."""
    ca, cert, key = make_certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(ca)
    yield from serve_tls(context, ca)


def serve_tls(context: ssl.SSLContext, ca: Path) -> Iterator[tuple[str, Path]]:
    """The simulator behind `context` in a thread until the generator is closed; yields (url, CA file)."""
    loop = asyncio.new_event_loop()
    ready: list[str] = []
    started = threading.Event()
    runner = web.AppRunner(make_app(SimConfig(ttft_ms=5, itl_ms=2)))

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.append(f"https://127.0.0.1:{port}/v1")
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield ready[0], ca
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_https_target_streams_with_a_verified_certificate(tls_sim: tuple[str, Path], tmp_path: Path) -> None:
    url, ca = tls_sim
    p = run_cli("run", "--target", url, "--out", str(tmp_path / "r"), "--concurrency", "2", "--requests", "6",
                "--max-tokens", "8", "--warmup", "0", "--plain", env={"SSL_CERT_FILE": str(ca)})
    assert p.returncode == 0, p.stderr
    recs = records(tmp_path / "r")
    assert len(recs) == 6 and all(r["status"] == "ok" and len(r["chunk_offsets_ns"]) == 8 for r in recs)
    ttft = load_json(tmp_path / "r" / "run.json")["benchmarks"][0]["summary"]["ttft_ms"]
    assert 5 <= ttft["p50"] < 50


def test_https_target_with_an_untrusted_certificate_is_refused(tls_sim: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = tls_sim
    p = run_cli("run", "--target", url, "--out", str(tmp_path / "r"), "--requests", "2", "--warmup", "0", "--plain")
    # exit 2, as any target no connection can be made to (docs/input-checks.md), with the fix as the hint
    assert p.returncode == 2 and "certificate" in p.stderr.lower(), p.stderr
    assert "SSL_CERT_FILE" in p.stderr and "is the server running" not in p.stderr


def run_args(url: str, out: Path, *extra: str) -> list[str]:
    return ["run", "--target", url, "--out", str(out), "--concurrency", "2", "--requests", "6", "--max-tokens", "8",
            "--warmup", "0", "--plain", *extra]


def assert_streamed(out: Path) -> None:
    recs = records(out)
    assert len(recs) == 6 and all(r["status"] == "ok" and len(r["chunk_offsets_ns"]) == 8 for r in recs)


@pytest.mark.parametrize("workers", ["1", "2"])  # 2: the client processes rebuild the policy from the config
def test_ca_cert_flag_trusts_the_ca_for_the_probe_and_the_load(tls_sim: tuple[str, Path], tmp_path: Path,
                                                               workers: str) -> None:
    url, ca = tls_sim
    p = run_cli(*run_args(url, tmp_path / "r", "--ca-cert", str(ca), "--workers", workers))
    assert p.returncode == 0, p.stderr
    assert_streamed(tmp_path / "r")
    config = load_json(tmp_path / "r" / "run.json")["config"]
    assert config["ca_cert"] == str(ca) and config["insecure"] is False  # the path, never the contents
    assert "BEGIN CERTIFICATE" not in (tmp_path / "r" / "run.json").read_text()


def test_insecure_flag_skips_the_check_on_both_clients(tls_sim: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = tls_sim
    p = run_cli(*run_args(url, tmp_path / "r", "--insecure"))
    assert p.returncode == 0, p.stderr
    assert_streamed(tmp_path / "r")
    assert load_json(tmp_path / "r" / "run.json")["config"]["insecure"] is True


def test_a_server_that_requires_a_client_certificate(mtls_sim: tuple[str, Path], tmp_path: Path) -> None:
    url, ca = mtls_sim
    cert, key = make_client_certificate(tmp_path)
    p = run_cli(*run_args(url, tmp_path / "ok", "--ca-cert", str(ca), "--client-cert", str(cert),
                          "--client-key", str(key)))
    assert p.returncode == 0, p.stderr
    assert_streamed(tmp_path / "ok")
    config = load_json(tmp_path / "ok" / "run.json")["config"]
    assert config["client_cert"] == str(cert) and config["client_key"] == str(key)
    assert "PRIVATE KEY" not in (tmp_path / "ok" / "run.json").read_text()
    # without it the server refuses the handshake: the run does not start, and says so without a traceback
    p = run_cli(*run_args(url, tmp_path / "no", "--ca-cert", str(ca)))
    assert p.returncode == 1 and "Traceback" not in p.stderr and p.stderr.startswith("Error: "), p.stderr
    assert "--client-cert" in p.stderr  # the hint names the fix


def test_quality_and_monitor_take_the_same_tls_flags(tls_sim: tuple[str, Path], tmp_path: Path) -> None:
    url, ca = tls_sim
    p = run_cli("quality", "--target", url, "--out", str(tmp_path / "q"), "--limit", "2", "--ca-cert", str(ca))
    assert p.returncode == 0 and "over 2 items" in p.stdout, p.stderr
    assert all(r["error"] is None for r in map(json.loads, (tmp_path / "q" / "quality.jsonl").read_text().splitlines()))
    p = run_cli("quality", "--target", url, "--out", str(tmp_path / "q2"), "--limit", "2")
    assert p.returncode == 2 and "--ca-cert" in p.stderr, p.stderr
    p = run_cli("monitor", "--target", url, "--duration", "2s", "--probe-rate", "5", "--interval", "1s",
                "--no-prometheus", "--no-gpu", "--insecure")
    assert p.returncode == 0 and " 0 failed" in p.stderr and "target up" in p.stderr, p.stderr


@pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason="needs tokspeed[locust]")
def test_a_locust_fleet_takes_the_same_tls_flags(tls_sim: tuple[str, Path], tmp_path: Path) -> None:
    """The master ships --ca-cert to its worker; the worker's blocking client trusts the CA with it."""
    url, ca = tls_sim
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    command = [sys.executable, "-m", "tokspeed", "locust"]
    master = subprocess.Popen([*command, "master", "--target", url, "--out", str(tmp_path / "fleet"), "--users", "2",
                               "--spawn-rate", "100", "--duration", "3s", "--bind", "127.0.0.1", "--port", port,
                               "--output-tokens", "8", "--ca-cert", str(ca)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    worker = subprocess.Popen([*command, "worker", "--master", "127.0.0.1", "--port", port],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        m_out, _ = master.communicate(timeout=90)
        w_out, _ = worker.communicate(timeout=30)
    finally:
        for proc in (master, worker):
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
    assert master.returncode == 0 and worker.returncode == 0, m_out + w_out
    recs = records(tmp_path / "fleet")
    assert recs and all(r["status"] in ("ok", "incomplete") for r in recs), recs[:3]
    assert sum(r["status"] == "ok" for r in recs) >= 4


@pytest.mark.parametrize("flags, words", [
    (["--ca-cert", "{missing}"], "--ca-cert"),
    (["--ca-cert", "{not_pem}"], "--ca-cert"),
    (["--client-cert", "{not_pem}"], "--client-cert"),
    (["--client-key", "{not_pem}"], "--client-key"),
    (["--insecure", "--ca-cert", "{ca}"], "--insecure"),
])
def test_bad_tls_files_are_one_line_and_exit_2(tls_sim: tuple[str, Path], tmp_path: Path, flags: list[str],
                                               words: str) -> None:
    url, ca = tls_sim
    (tmp_path / "notes.txt").write_text("not a certificate\n")
    paths = {"missing": str(tmp_path / "nowhere.pem"), "not_pem": str(tmp_path / "notes.txt"), "ca": str(ca)}
    p = run_cli(*run_args(url, tmp_path / "r", *(f.format(**paths) for f in flags)))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines[0].startswith("Error: ") and words in lines[0] and len(lines) <= 2, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "r" / "requests.jsonl").exists()
