"""Bad input, one table: each case exits 2 (usage/config) or 1 (target), with one `Error:` line, no traceback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import SimServer, free_port, run_cli

KEY = "sk-bad-input-key-31337"


FILES: dict[str, bytes] = {
    "bad.json": b'["one", "two",',
    "empty.json": b"",
    "blank.txt": b"\n \n\t\n",
    "fields.jsonl": b'{"question_text": "no prompt field"}\n',
    "wrongtype.json": b'[{"prompt": 42}]',
    "binary.json": os.urandom(4096) + b"\xff\xfe",
    "huge.csv": b"prompt\n" + b"x" * 300_000 + b"\n",
    "huge.jsonl": b'{"prompt": "' + b"y" * 2_000_000 + b"\n",  # a 2 MB line, never closed
    "deep.json": b"[" * 100_000,
    "lengths.json": b'[{"prompt": "hi", "max_tokens": -3}]',
    "unknown.yaml": b"concurrency: 2\nconcurency: 4\n",
    "notyaml.yaml": b"target: [\n",
    "list.yaml": b"- concurrency: 2\n",
    "badrate.yaml": b"rate: -2\n",
    "binary.yaml": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    "a_file": b"x",
}

# (id, arguments, exit code, text the Error: line must contain); {sim}, {refused}, {dir} are filled in
CASES: list[tuple[str, list[str], int, str]] = [
    ("warmup-neither-count-nor-duration", ["--warmup", "abc"], 2, "not a request count nor a duration"),
    ("dataset-bad-json", ["--dataset", "{dir}/bad.json"], 2, "not valid JSON"),
    ("dataset-empty", ["--dataset", "{dir}/empty.json"], 2, "empty"),
    ("dataset-blank-lines", ["--dataset", "{dir}/blank.txt"], 2, "empty"),
    ("dataset-wrong-fields", ["--dataset", "{dir}/fields.jsonl"], 2, "no prompt"),
    ("dataset-wrong-type", ["--dataset", "{dir}/wrongtype.json"], 2, "must be a string"),
    ("dataset-binary", ["--dataset", "{dir}/binary.json"], 2, "not UTF-8"),
    ("dataset-huge-csv-field", ["--dataset", "{dir}/huge.csv"], 2, "field larger than field limit"),
    ("dataset-huge-broken-line", ["--dataset", "{dir}/huge.jsonl"], 2, "line 1: not valid JSON"),
    ("dataset-nested-too-deep", ["--dataset", "{dir}/deep.json"], 2, "nested too deeply"),
    ("dataset-negative-length", ["--dataset", "{dir}/lengths.json"], 2, "max_tokens must be"),
    ("dataset-missing", ["--dataset", "{dir}/nope.json"], 2, "not found"),
    ("dataset-directory", ["--dataset", "{dir}"], 2, "is not a file"),
    ("scenario-unknown-key", ["--scenario", "{dir}/unknown.yaml"], 2, "concurency"),
    ("scenario-not-yaml", ["--scenario", "{dir}/notyaml.yaml"], 2, "not valid YAML"),
    ("scenario-not-mapping", ["--scenario", "{dir}/list.yaml"], 2, "must be a mapping"),
    ("scenario-negative-rate", ["--scenario", "{dir}/badrate.yaml"], 2, "rate"),
    ("scenario-binary", ["--scenario", "{dir}/binary.yaml"], 2, "not UTF-8"),
    ("rate-zero", ["--rate", "0"], 2, "rate"),
    ("rate-negative", ["--rate", "-1"], 2, "--rate"),
    ("concurrency-zero", ["--concurrency", "0"], 2, "--concurrency"),
    ("requests-negative", ["--requests", "-5"], 2, "--requests"),
    ("duration-garbage", ["--duration", "soon"], 2, "duration"),
    ("timeout-zero", ["--timeout", "0"], 2, "timeout"),
    ("max-tokens-zero", ["--max-tokens", "0"], 2, "whole number"),
    ("max-error-rate-above-one", ["--max-error-rate", "1.5"], 2, "max_error_rate"),
    ("conflict-concurrency-rate", ["--concurrency", "2", "--rate", "3"], 2, "cannot be combined"),
    ("conflict-cap-without-rate", ["--max-concurrency", "4"], 2, "only applies to --rate"),
    ("conflict-ttft-no-stream", ["--ttft-timeout", "1s", "--no-stream"], 2, "needs a streamed response"),
    ("conflict-ttft-after-timeout", ["--ttft-timeout", "10s", "--timeout", "5s"], 2, "shorter than timeout"),
    ("header-without-colon", ["--header", "Authorization"], 2, "--header"),
    ("out-not-writable", ["--out", "{dir}/a_file/run"], 2, "cannot write results"),
    ("url-no-scheme", ["--target", "127.0.0.1:8000/v1"], 2, "not an http(s) URL"),
    ("url-malformed-ipv6", ["--target", "http://[::1/v1"], 2, "not an http(s) URL"),
    ("url-bad-port", ["--target", "http://127.0.0.1:99999/v1"], 2, "not an http(s) URL"),
    ("url-refused", ["--target", "{refused}"], 2, "cannot reach"),  # nothing listens: the --target is wrong
    ("url-unresolvable", ["--target", "http://no-such-host.invalid/v1"], 2, "cannot reach"),
    ("url-port-0", ["--target", "http://127.0.0.1:0/v1"], 2, "port 0"),
    ("header-crlf", ["--target", "{sim}", "--api-key", KEY, "--header", "X-A: a\r\nX-B: b"], 2, "line break"),
    ("header-not-latin-1", ["--target", "{sim}", "--api-key", KEY, "--header", "X-A: €"], 2, "latin-1"),
    ("requests-2^63", ["--target", "{sim}", "--api-key", KEY, "--requests", str(2**63)], 2, "requests"),
    ("seed-2^63", ["--target", "{sim}", "--api-key", KEY, "--seed", str(2**63)], 2, "seed"),
    ("url-wrong-path", ["--target", "{sim_root}/wrong", "--api-key", KEY], 1, "HTTP 404"),
    ("api-key-missing", ["--target", "{sim}"], 1, "HTTP 401"),
    ("api-key-wrong", ["--target", "{sim}", "--api-key", "sk-wrong-key-000"], 1, "HTTP 403"),
    ("model-unknown", ["--target", "{sim}", "--api-key", KEY, "--model", "no-such-model"], 1, "does not exist"),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    d = tmp_path_factory.mktemp("inputs")
    for name, data in FILES.items():
        (d / name).write_bytes(data)
    sim = SimServer(d, "--api-key", KEY, "--ttft-ms", "1", "--itl-ms", "1")
    try:
        yield {"dir": str(d), "sim": sim.url, "sim_root": sim.url.removesuffix("/v1"),
               "refused": f"http://127.0.0.1:{free_port()}/v1"}
    finally:
        sim.stop()


@pytest.mark.parametrize("args,code,needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_error_line_and_the_right_exit_code(
    places: dict[str, str], tmp_path: Path, args: list[str], code: int, needle: str
) -> None:
    filled = [a.format(**places) for a in args]
    if "--target" not in filled:
        filled = ["--target", places["refused"], *filled]
    if "--out" not in filled:
        filled += ["--out", str(tmp_path / "out")]
    if "--requests" not in filled:
        filled += ["--requests", "1"]
    p = run_cli("run", *filled, "--plain", timeout=60)
    assert p.returncode == code, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, p.stderr
    assert needle in errors[0], errors[0]


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 20


def test_a_trailing_space_in_the_target_is_dropped_not_sent(places: dict[str, str], tmp_path: Path) -> None:
    """Issue 22: 'http://h/v1 ' passed discovery, then every request was 'POST /v1 /chat/completions'."""
    p = run_cli("run", "--target", places["sim"] + " ", "--api-key", KEY, "--requests", "2", "--plain",
                "--out", str(tmp_path / "out"), timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    records = (tmp_path / "out" / "requests.jsonl").read_text().splitlines()
    assert len([r for r in records if '"warmup":false' in r]) == 2 and all('"status":"ok"' in r for r in records)


def test_sim_on_a_busy_port_or_past_65535_says_so_and_exits_2(places: dict[str, str]) -> None:
    busy = places["sim_root"].rsplit(":", 1)[1]
    for port, needle in ((busy, "cannot listen on"), ("99999", "--port")):
        p = run_cli("sim", "--port", port, timeout=60)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "Traceback" not in p.stderr and needle in p.stderr, p.stderr
