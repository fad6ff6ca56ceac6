"""The CLI when things go wrong: injected faults, error-rate stops, a target that dies, kill -9, secrets.

Every request must end as exactly one record, classified as the simulator's log says it
failed; the run must finish (or stop with a reason) and never lose what it already saved.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness import SimServer, load_json, records, run_cli, start_run, wait_for_records

SECRET = "sk-test-SENTINEL-DO-NOT-LEAK-77"

# what the client must call each fault (a summary's `errors` key, or an anomaly)
ERROR_KEY = {
    "http_429": "http_429", "http_500": "http_500", "http_503": "http_503", "reset": "connect",
    "disconnect": "broken", "malformed_sse": "protocol", "invalid_json": "protocol", "error_event": "stream",
}
ANOMALY = {"no_done": "missing_done", "bad_usage": "usage_below_chunks"}
ALL_FAULTS = [*ERROR_KEY, *ANOMALY, "stall", "slow_headers"]


def test_every_fault_is_recorded_once_and_classified_as_the_log_says(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    fault_args = [a for f in ALL_FAULTS for a in ("--fault", f"{f}=0.06")]
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1", "--seed", "11", "--clean-requests", "1",
                    "--stall-ms", "100", "--slow-headers-ms", "100", "--retry-after", "0", *fault_args)
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "8", "--requests", "300",
                "--max-tokens", "6", "--plain")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    recs = records(out)
    truth = [e for e in sim.entries().values()][1:]  # the first generation request was the probe
    assert len(recs) == len(truth) == 300 + 8  # measured + warm-up: one record per request sent
    faults = Counter(e["fault"] for e in truth)
    assert set(faults) == {None, *ALL_FAULTS}  # every kind of fault was exercised
    errors = Counter(ERROR_KEY[f] for f in faults.elements() if f in ERROR_KEY)
    got = Counter(("http_" + str(r["http_status"])) if r["error_kind"] == "http" else r["error_kind"]
                  for r in recs if r["status"] == "error")
    assert got == errors
    anomalies = Counter(a for r in recs for a in r["anomalies"] or ())
    assert anomalies == Counter(ANOMALY[f] for f in faults.elements() if f in ANOMALY)
    assert all(r["status"] in ("ok", "error") for r in recs)
    by_id = {r["response_id"]: r for r in recs if r["response_id"]}
    for e in truth:  # requests that broke mid-stream keep the chunks they got
        if e["fault"] in ("disconnect", "error_event"):
            assert len(by_id[e["id"]]["chunk_offsets_ns"]) == len(e["chunk_ns"]) == 2
        elif e["fault"] == "invalid_json":  # the client stops reading at the bad event; the server went on
            assert len(by_id[e["id"]]["chunk_offsets_ns"]) == 2 <= len(e["chunk_ns"])
    summary = load_json(out / "run.json")["benchmarks"][0]["summary"]
    measured = [r for r in recs if not r["warmup"]]
    assert summary["requests"]["errored"] == sum(r["status"] == "error" for r in measured)
    shown = " ".join(p.stdout.split())
    assert "without data: [DONE]" in shown  # a warning: no diagnosis rule covers it
    errors = [f for f in load_json(out / "run.json")["diagnosis"] if f["rule"] == "errors"]
    by_cause = [f for f in errors if "count" in f["evidence"] and "largest_cause_share" not in f["evidence"]]
    assert errors and sum(f["evidence"]["count"] for f in by_cause) <= len(recs)  # (the total finding sums them)
    assert "errors" in shown and "failed" in shown  # the diagnosis says it once, in the printout
    assert not any("requests failed" in w for w in load_json(out / "run.json")["warnings"])


def test_max_error_rate_stops_the_run_with_a_reason(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1", "--fault", "http_500=0.5", "--seed", "2",
                    "--clean-requests", "1")
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "4", "--requests", "2000",
                "--max-tokens", "4", "--max-error-rate", "0.2", "--plain")
    assert p.returncode == 1, p.stderr
    result = load_json(out / "run.json")
    assert result["status"] == "failed" and "--max-error-rate 0.2" in result["error"]
    assert any("stopped early" in w for w in result["warnings"])
    s = result["benchmarks"][0]["summary"]["requests"]
    assert 20 <= s["completed"] + s["errored"] < 200  # stopped soon after the 20th measured request
    assert "Run status: failed (stopped early" in " ".join(p.stdout.split())


def test_a_target_that_dies_mid_run_leaves_a_finished_run_that_says_so(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "5")
    out = tmp_path / "r"
    proc = start_run("--target", sim.url, "--out", str(out), "--concurrency", "4", "--requests", "400",
                     "--max-tokens", "20", "--warmup", "0", "--plain")
    wait_for_records(out, 20, proc)
    sim.proc.kill()  # SIGKILL: no goodbye to the open connections
    stdout, stderr = proc.communicate(timeout=90)  # GIVE_UP_S (10 s) of refusals, backing off; ~19 s in all here
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    result = load_json(out / "run.json")
    recs = records(out)
    assert {r["status"] for r in recs} <= {"ok", "error", "incomplete"}
    assert result["status"] == "failed" and "stopped answering" in result["error"]
    s = result["benchmarks"][0]["summary"]
    assert s["requests"]["completed"] >= 20 and set(s["errors"]) <= {"connect", "broken"}
    # backed off: about 10 refusals per stream in GIVE_UP_S (was thousands a second, the budget spent on them)
    assert 4 <= s["errors"].get("connect", 0) <= 100
    assert any("backed off" in w for w in result["warnings"])
    shown = " ".join(stdout.split())
    assert "stopped answering" in shown and "backed off" in shown


def test_a_target_restarted_mid_run_is_waited_for_not_spent_on(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    """Killed, back 2 s later on the same port: the run completes, a few refusals, not thousands."""
    port = free_port()
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2", "--port", str(port))
    out = tmp_path / "r"
    proc = start_run("--target", sim.url, "--out", str(out), "--concurrency", "4", "--requests", "300",
                     "--max-tokens", "10", "--warmup", "0", "--plain")
    wait_for_records(out, 20, proc)
    sim.proc.kill()
    time.sleep(2)
    start_sim("--ttft-ms", "5", "--itl-ms", "2", "--port", str(port))
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 0, stderr
    result = load_json(out / "run.json")
    assert result["status"] == "complete", result.get("error")
    s = result["benchmarks"][0]["summary"]
    # 2 s down (plus the restart, ~1-3 s here) at 50 ms doubling to 1 s: ~10 refusals a stream; the bug: ~10,000
    assert s["requests"]["completed"] >= 200 and s["errors"].get("connect", 0) <= 100
    assert any("backed off" in w for w in result["warnings"])


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_kill_9_leaves_valid_records_that_report_rebuilds(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2")
    out = tmp_path / "r"
    proc = start_run("--target", sim.url, "--out", str(out), "--concurrency", "8", "--requests", "100000",
                     "--max-tokens", "10", "--warmup", "0", "--plain", "--slo", "ttft_p99_ms<=1000")
    wait_for_records(out, 60, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    lines = (out / "requests.jsonl").read_bytes().splitlines()
    parsed = [orjson.loads(line) for line in lines[:-1]]  # all but a possibly torn last line are whole
    assert len(parsed) >= 59 and all(r["status"] == "ok" for r in parsed)
    assert load_json(out / "run.json")["status"] == "running"  # the process never got to say more
    p = run_cli("report", str(out), "--json")
    assert p.returncode == 0, p.stderr
    summary = orjson.loads(p.stdout)[0]["summary"]
    assert summary["requests"]["completed"] in (len(parsed), len(parsed) + 1)
    assert summary["ttft_ms"]["count"] == summary["requests"]["completed"] and summary["slo"]
    p = run_cli("report", str(out))
    shown = " ".join(p.stdout.split())
    assert p.returncode == 0 and "summary rebuilt from the" in shown and "Run status: interrupted" in shown


def test_kill_9_leaves_telemetry_that_report_summarises(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    from tokspeed.results import load_run

    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2", "--max-concurrency", "2")
    out = tmp_path / "r"
    proc = start_run("--target", sim.url, "--out", str(out), "--concurrency", "6", "--requests", "100000",
                     "--max-tokens", "10", "--warmup", "0", "--plain", "--telemetry-interval", "0.05")
    wait_for_records(out, 60, proc)
    time.sleep(0.3)  # a few more samples
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    result, _ = load_run(out)
    t = result.telemetry
    assert result.status == "interrupted" and t is not None and any("rebuilt from telemetry.jsonl" in n for n in t.notes)
    assert t.client is not None and t.client.cpu_seconds is not None and t.client.cpu_seconds > 0
    assert t.server is not None and t.server.engine == "tokspeed-sim" and t.server.scrapes > 0
    assert t.server.running.max is not None and t.server.running.max <= 2 and (t.server.waiting.max or 0) > 0
    shown = " ".join(run_cli("report", str(out)).stdout.split())
    assert "Telemetry (whole run" in shown or "Telemetry (" in shown


def test_retries_and_ttft_timeout_flags(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "1", "--itl-ms", "1", "--fault", "http_429=0.3", "--retry-after", "0",
                    "--clean-requests", "1", "--seed", "4")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "a"), "--concurrency", "4", "--requests", "60",
                "--max-tokens", "4", "--retries", "20", "--plain")
    assert p.returncode == 0, p.stderr
    recs = records(tmp_path / "a")
    rejected = sum(e["fault"] == "http_429" for e in sim.entries().values())
    assert all(r["status"] == "ok" for r in recs) and sum(r["retries"] for r in recs) == rejected > 0
    assert "were retried after HTTP 429/503" in " ".join(p.stdout.split())

    stalled = start_sim("--ttft-ms", "1", "--fault", "stall=1", "--fault-after-chunks", "0", "--stall-ms", "60000",
                        "--clean-requests", "1")
    t0 = time.monotonic()
    p = run_cli("run", "--target", stalled.url, "--out", str(tmp_path / "b"), "--requests", "3", "--warmup", "0",
                "--max-tokens", "4", "--ttft-timeout", "300ms", "--plain")
    # nothing completed: exit 1, and fast: long before the 60 s stall ends (~3 s here, 2.4 s of it the
    # CLI's start-up on 2 loaded cores, which a bound of 4.5 s against a 5 s stall did not leave room for)
    assert p.returncode == 1 and time.monotonic() - t0 < 30
    s = load_json(tmp_path / "b" / "run.json")["benchmarks"][0]["summary"]
    assert s["errors"] == {"ttft_timeout": 3}


def test_api_key_never_leaks_on_error_paths(start_sim: Callable[..., SimServer], tmp_path: Path) -> None:
    # the server knows a different key and echoes what it got: the probe fails with the key in the body
    wrong = start_sim("--api-key", "sk-the-right-one-123", "--leaky-errors")
    p = run_cli("run", "--target", wrong.url, "--out", str(tmp_path / "a"), "--requests", "2", "--plain",
                env={"OPENAI_API_KEY": SECRET})
    assert p.returncode == 1 and "HTTP 403" in p.stderr and "***" in p.stderr
    # the right key, but requests fail with the Authorization header echoed back
    leaky = start_sim("--api-key", SECRET, "--leaky-errors", "--fault", "http_500=0.3", "--fault",
                      "error_event=0.3", "--clean-requests", "1", "--ttft-ms", "1", "--itl-ms", "1")
    p2 = run_cli("run", "--target", leaky.url, "--out", str(tmp_path / "b"), "--requests", "20", "--plain",
                 "--max-tokens", "4", "--header", f"X-Api-Key: {SECRET}", env={"OPENAI_API_KEY": SECRET})
    assert p2.returncode == 0, p2.stderr
    errors = [r["error"] for r in records(tmp_path / "b") if r["error"]]
    assert errors and all("***" in e for e in errors)
    p3 = run_cli("report", str(tmp_path / "b"))
    outputs = [p.stdout, p.stderr, p2.stdout, p2.stderr, p3.stdout, p3.stderr]
    outputs += [f.read_text() for d in ("a", "b") for f in (tmp_path / d).iterdir()]
    assert not [o for o in outputs if SECRET in o]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
def test_a_live_server_whose_failures_end_after_its_successes_is_not_called_lost(
    start_sim: Callable[..., SimServer], tmp_path: Path, stream: bool
) -> None:
    """20% of requests stall 1 s then reset: they finish last, but the server answered after they were sent."""
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1", "--seed", "4", "--clean-requests", "1",
                    "--fault", "stall_reset=0.2", "--stall-ms", "1000")
    out = tmp_path / "r"
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "8", "--requests", "120",
                "--max-tokens", "6", "--warmup", "0", "--plain", *([] if stream else ["--no-stream"]))
    result = load_json(out / "run.json")
    assert p.returncode == 0 and result["status"] == "complete", (result.get("error"), p.stderr)
    s = result["benchmarks"][0]["summary"]
    assert s["requests"]["errored"] >= 10 and set(s["errors"]) == {"broken" if stream else "connect"}
    # the failures really were the last to finish (what the old rule mistook for a dead target)
    recs = sorted(records(out), key=lambda r: r["end_ns"])
    assert all(r["status"] == "error" for r in recs[-5:])


def test_a_server_that_does_not_end_its_body_after_done_costs_no_drain_wait(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    """[DONE], then no chunk terminator (held open, closed or reset): closed-loop throughput stays near normal."""

    def run(name: str, *faults: str) -> dict[str, Any]:
        sim = start_sim("--ttft-ms", "2", "--itl-ms", "1", "--clean-requests", "1", "--stall-ms", "5000", *faults)
        out = tmp_path / name
        p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "4", "--requests", "120",
                    "--max-tokens", "6", "--warmup", "0", "--plain", "--no-telemetry")
        assert p.returncode == 0, p.stderr
        result = load_json(out / "run.json")
        warned.extend(result["warnings"])
        return result["benchmarks"][0]["summary"]

    warned: list[str] = []
    normal = run("normal")
    assert not any("did not end their HTTP body" in w for w in warned)
    faulty = run("faulty", "--fault", "done_hang=0.34", "--fault", "done_close=0.33", "--fault", "done_reset=0.33")
    assert any("did not end their HTTP body after data: [DONE]" in w for w in warned)  # said, not only absorbed
    assert faulty["requests"]["completed"] == 120
    # the bug: a slot waited DRAIN_S (2 s) after each hung body (34% of the requests), so 4 slots completed at most
    # 4 / (0.34 x 2 s) = 5.9 req/s whatever the machine (11 measured, 165 normal). Fixed, the faulty run goes at the
    # normal run's speed (~0.6-1x); judged against the bug's ceiling, not the normal run's rate, because the two
    # runs meet different loads: beside a 3-worker test run the normal one went at 384 req/s, the faulty at 69
    from tokspeed.backends.http1 import DRAIN_S

    assert faulty["throughput"]["requests_per_s"] > 5 * 4 / (0.34 * DRAIN_S), (faulty["throughput"], normal["throughput"])
    assert faulty["lateness_ms"]["p50"] < 500


@pytest.mark.parametrize("signals", [("SIGINT", "SIGINT"), ("SIGTERM", "SIGTERM"), ("SIGHUP",)],
                         ids=["sigint-twice", "sigterm-twice", "sighup"])
def test_a_second_signal_or_a_hangup_stops_the_run_cleanly(
    start_sim: Callable[..., SimServer], tmp_path: Path, signals: tuple[str, ...]
) -> None:
    """The second signal 20 ms after the first (was: a CancelledError traceback, exit 1); SIGHUP as SIGTERM."""
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "2")
    out = tmp_path / "r"
    proc = start_run("--target", sim.url, "--out", str(out), "--concurrency", "8", "--requests", "100000",
                     "--max-tokens", "10", "--warmup", "0", "--plain")
    wait_for_records(out, 40, proc)
    for name in signals:
        proc.send_signal(getattr(signal, name))
        time.sleep(0.02)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "CancelledError" not in stderr
    result = load_json(out / "run.json")
    assert result["status"] == "interrupted" and result["benchmarks"]
    assert not list(out.glob("*.tmp"))
    recs = records(out)
    assert len(recs) >= 40 and {r["status"] for r in recs} <= {"ok", "incomplete"}


def test_a_stalled_stream_is_cut_off_after_the_duration_and_a_grace_not_the_timeout(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    """--duration 2s with streams that stall for 100 s: the run ends ~10 s (the grace) after the duration, not at
    --timeout (600 s); the stalled requests are recorded as cut off; --plain keeps printing progress meanwhile."""
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "5", "--seed", "3", "--clean-requests", "1",
                    "--fault", "stall=0.05", "--stall-ms", "100000")
    out = tmp_path / "r"
    t0 = time.monotonic()
    p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "4", "--duration", "2s",
                "--max-tokens", "6", "--warmup", "0", "--plain", "--no-telemetry", timeout=120)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert elapsed < 90  # 2 s + the 10 s grace + start-up and summary (~23 s at load 5 here); the bug: 600 s
    result = load_json(out / "run.json")
    assert result["status"] == "complete"
    cut = [r for r in records(out) if r["status"] == "incomplete"]
    assert cut and all("after --duration ended" in r["error"] for r in cut)
    assert any("cut off" in w for w in result["warnings"])
    progress = [line for line in p.stdout.splitlines() if "iteration 1:" in line]
    assert len(progress) >= 2  # a line every 10 s while the phase waits, then the phase's own line


def test_a_probe_that_gets_no_answer_says_so_within_its_timeout(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    sim = start_sim("--ttft-ms", "2", "--itl-ms", "1", "--fault", "stall=1", "--stall-ms", "100000")
    p = run_cli("run", "--target", sim.url, "--out", str(tmp_path / "r"), "--requests", "5", "--timeout", "2",
                "--plain", timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    err = " ".join(p.stderr.split())
    assert "got no answer within 2 s" in err and "is the server running?" not in err


def test_a_real_full_disk_fails_the_run_cleanly_and_report_reads_what_was_saved(
    start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    """A 256 KiB tmpfs as --out (needs root to mount; skipped otherwise): the unit test fakes the disk everywhere."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        sim = start_sim("--ttft-ms", "1", "--itl-ms", "1")
        out = disk / "r"
        # the disk fills after ~300 records (a few seconds here); 600 s because a fresh-clone CI beside a CPU hog and
        # a vLLM engine on the other worker ran it at 7.5 requests/s and ran past the default 120 s
        p = run_cli("run", "--target", sim.url, "--out", str(out), "--concurrency", "4", "--requests", "5000",
                    "--max-tokens", "10", "--warmup", "0", "--plain", timeout=600)
        assert p.returncode == 1 and "Traceback" not in p.stderr
        err = " ".join(p.stderr.split())
        assert "No space left on device" in err and "tokspeed report" in err
        assert load_json(out / "run.json")["status"] == "failed"
        assert not list(out.glob("*.tmp"))
        whole = (out / "requests.jsonl").read_bytes().count(b"\n")
        rep = run_cli("report", str(out), "--json")
        assert rep.returncode == 0, rep.stderr
        assert orjson.loads(rep.stdout)[0]["summary"]["requests"]["completed"] == whole  # the torn line named: unit test
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
