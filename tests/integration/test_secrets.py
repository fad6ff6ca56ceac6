"""No secret reaches a file, a report or the console, whichever channel brings it (issue 22).

One simulator requires a credential (a Bearer key or a Basic user:password), echoes the request's
Authorization header in its error messages (--leaky-errors) and in its 200 answers: /version,
/v1/models and the generated text (--echo-auth). Runs provoke every channel: a URL password in
--target, in TOKSPEED_TARGET and in --server-metrics; an API key holding a backslash and a quote,
given by --api-key and by OPENAI_API_KEY; failing requests whose errors quote the key; a wrong key
that fails the start. Then every file of each results directory, the HTML report, the console
output of `run`, `report` and `diagnose` are searched for each secret. Each secret carries a marker
of plain letters that survives any escaping, so finding the marker finds every form; the Basic
credentials (base64, no marker) are searched as such.
"""

from __future__ import annotations

from base64 import b64encode
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import orjson
import pytest

from harness import SimServer, run_cli

pytestmark = pytest.mark.integration

KEY = 'sk-KEYMARKER\\q"x-0042'  # a backslash and a double quote: JSON and repr escape both
URL_PASSWORD = 'pw-URLMARKER"\\7'
METRICS_PASSWORD = "pw-METRICSMARKER-9"
WRONG_KEY = 'sk-WRONGMARKER\\"-1'
MARKERS = ("KEYMARKER", "URLMARKER", "METRICSMARKER", "WRONGMARKER")
BASIC = [b64encode(f"bob:{URL_PASSWORD}".encode()).decode(), b64encode(f"admin:{METRICS_PASSWORD}".encode()).decode()]


def leaks(text: str) -> list[str]:
    return [s for s in (*MARKERS, *BASIC) if s in text]


def with_user(url: str, user: str, password: str) -> str:
    return url.replace("http://", f"http://{user}:{quote(password, safe='')}@", 1)


def every_output(directory: Path) -> dict[str, str]:
    """Every file tokspeed wrote under `directory` (not the simulators' own logs, which hold what they echoed)."""
    return {str(p): p.read_text(errors="replace") for p in sorted(directory.rglob("*"))
            if p.is_file() and not p.name.startswith("sim-")}


SIM = ("--api-key", KEY, "--basic-auth", f"bob:{URL_PASSWORD}", "--leaky-errors", "--echo-auth",
       "--ttft-ms", "2", "--itl-ms", "1", "--output-tokens", "8", "--clean-requests", "1",  # the probe
       "--fault", "http_500=0.15", "--fault", "error_event=0.15", "--seed", "3")


def test_no_secret_of_any_channel_reaches_any_output(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    common = ["--requests", "16", "--concurrency", "4", "--plain", "--token-audit", "--warmup", "0"]

    def metrics(url: str) -> str:
        return with_user(url.removesuffix("/v1") + "/metrics", "admin", METRICS_PASSWORD)

    runs: dict[str, Callable[[str], tuple[list[str], dict[str, str]]]] = {
        "url-password": lambda url: (["--target", with_user(url, "bob", URL_PASSWORD), "--server-metrics", metrics(url)], {}),
        "env-target": lambda url: ([], {"TOKSPEED_TARGET": with_user(url, "bob", URL_PASSWORD)}),
        "api-key-flag": lambda url: (["--target", url, "--api-key", KEY], {}),
        "api-key-env": lambda url: (["--target", url], {"OPENAI_API_KEY": KEY}),
    }
    console: dict[str, str] = {}
    for name, how in runs.items():
        sim = start_sim(*SIM)  # a fresh one: its first request (the probe) gets no fault
        args, env = how(sim.url)
        out = tmp_path / name
        p = run_cli("run", *args, *common, "--out", str(out), "--html", str(tmp_path / f"{name}.html"), env=env)
        console[name] = p.stdout + p.stderr
        assert p.returncode == 0, console[name]  # the credentials worked: the load ran
        result = orjson.loads((out / "run.json").read_bytes())
        assert result["benchmarks"][0]["summary"]["requests"]["completed"] > 0
        errors = [orjson.loads(line).get("error") or "" for line in (out / "requests.jsonl").read_bytes().splitlines()]
        assert any("***" in e for e in errors), errors  # the leaky errors were provoked, and masked
        assert "***" in (result["environment"]["server"].get("version") or "")  # /version echoed the header
        assert "***" in result["target"]["server_version"]
        assert all(s["response"].startswith("***") for s in result["samples"]), result["samples"]  # the text echoed it
        for tool in ("report", "diagnose"):
            q = run_cli(tool, str(out))
            console[f"{name} {tool}"] = q.stdout + q.stderr
    sim = start_sim(*SIM)
    wrong = run_cli("run", "--target", sim.url, "--api-key", WRONG_KEY, *common, "--out", str(tmp_path / "wrong"))
    console["wrong-key"] = wrong.stdout + wrong.stderr
    assert wrong.returncode == 1 and "HTTP 403" in wrong.stderr and "***" in wrong.stderr, wrong.stderr

    first = console["url-password"].splitlines()[0]
    assert "bob:***@" in first, first
    cfg = orjson.loads((tmp_path / "url-password" / "run.json").read_bytes())["config"]
    assert cfg["target"].startswith("http://bob:***@") and cfg["server_metrics"].startswith("http://admin:***@")

    found = {where: leaks(text) for where, text in {**every_output(tmp_path), **console}.items()}
    assert not {where: what for where, what in found.items() if what}, found
    assert len([w for w in found if w.endswith(".html")]) == len(runs)
