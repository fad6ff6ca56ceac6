"""Bad values of `tokspeed run` (issue 22): each gets one `Error:` line and exit 2, before any connection.

In-process through `tokspeed.cli.main`; the target is a refused loopback port, never reached because
every case fails validation first. The cases that need a server or a socket are in
tests/integration/test_bad_input.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokspeed.cli import main

BIG = str(2**63)  # past a 64-bit integer: orjson cannot write it, numpy cannot seed with it
TARGET = "http://127.0.0.1:9/v1"

# (id, arguments, text the Error: line must contain)
CASES: list[tuple[str, list[str], str]] = [
    ("requests-2^63", ["--requests", BIG], "requests"),
    ("max-tokens-2^63", ["--max-tokens", BIG], "larger than 2,000,000 tokens"),
    ("seed-2^63", ["--seed", BIG], "seed"),
    ("seed-negative", ["--seed", "-1"], "seed"),
    ("warmup-2^63", ["--warmup", BIG], "warmup"),
    ("iterations-2^63", ["--iterations", BIG], "iterations"),
    ("input-tokens-10^8", ["--input-tokens", "100000000"], "larger than 2,000,000 tokens"),
    ("input-tokens-normal-10^8", ["--input-tokens", "normal:100000000,5"], "MEAN is larger"),
    ("header-not-latin-1", ["--header", "X-Note: café €"], "latin-1"),
    ("header-name-not-token", ["--header", "X Note: a"], "not an HTTP token"),
    ("header-crlf", ["--header", "X-A: a\r\nX-Injected: b"], "line break"),
    ("header-content-length", ["--header", "Content-Length: 5"], "set by tokspeed itself"),
    ("header-transfer-encoding", ["--header", "Transfer-Encoding: chunked"], "set by tokspeed itself"),
    ("header-host", ["--header", "Host: elsewhere"], "set by tokspeed itself"),
    ("api-key-not-latin-1", ["--api-key", "sk-€uro-1234"], "latin-1"),
    ("api-key-newline", ["--api-key", "sk-abc\n1234"], "line break"),
    ("url-query", ["--target", TARGET + "?api-version=1"], "query"),
    ("url-fragment", ["--target", TARGET + "#x"], "fragment"),
    ("url-newline", ["--target", "http://127.0.0.1:9/v\n1"], "whitespace or a control character"),
    ("url-inner-space", ["--target", "http://127.0.0.1:9/v 1"], "whitespace or a control character"),
    ("url-port-0", ["--target", "http://127.0.0.1:0/v1"], "port 0"),
    ("url-port-99999", ["--target", "http://127.0.0.1:99999/v1"], "not an http(s) URL"),
    ("temperature-negative", ["--temperature", "-3"], "temperature"),
    ("temperature-nan", ["--temperature", "nan"], "temperature"),
    ("top-p-above-one", ["--top-p", "2"], "top_p"),
    ("top-p-zero", ["--top-p", "0"], "top_p"),
    ("burstiness-without-gamma", ["--rate", "2", "--burstiness", "0.5"], "--arrival gamma"),
    ("server-metrics-newline", ["--server-metrics", "http://h:9/met\nrics"], "whitespace or a control character"),
]


@pytest.mark.parametrize("args,needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_value_gives_one_error_line_and_exit_2(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("TOKSPEED_TARGET", raising=False)
    full = args if "--target" in args else ["--target", TARGET, *args]
    rc = main(["run", *full, "--out", str(tmp_path / "out"), "--plain"])
    err = capsys.readouterr().err
    assert rc == 2, err
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and needle in errors[0], err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_password_in_a_refused_url_is_not_echoed() -> None:
    from tokspeed.cli.run_cmd import _normalise_target
    from tokspeed.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        _normalise_target("http://bob:hunter22@127.0.0.1:9/v1?x=1")
    assert "hunter22" not in str(exc.value) and "bob:***@" in str(exc.value)


@pytest.mark.parametrize("given", ["http://127.0.0.1:9/v1 ", " http://127.0.0.1:9/v1\n", "http://127.0.0.1:9/v1/\t"])
def test_surrounding_whitespace_of_a_target_is_dropped(given: str) -> None:
    """Accepted (documented): a pasted trailing space used to reach the request line as 'POST /v1 /chat/completions'."""
    from tokspeed.cli.run_cmd import _normalise_target
    from tokspeed.config import RunConfig

    assert _normalise_target(given) == "http://127.0.0.1:9/v1"
    assert RunConfig(target=given.rstrip("/\t")).target == "http://127.0.0.1:9/v1"  # a scenario's target too


def test_burstiness_of_one_and_gamma_arrivals_are_accepted() -> None:
    from tokspeed.config import RunConfig

    assert RunConfig(profile="rate", rate=2, burstiness=1.0).burstiness == 1.0  # = Poisson: harmless
    assert RunConfig(profile="rate", rate=2, arrival="gamma", burstiness=0.5).burstiness == 0.5


def test_the_table_covers_every_bad_value_of_the_issue() -> None:
    assert len(CASES) >= 25
