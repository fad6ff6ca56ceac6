"""`tokspeed locust master|worker` on loopback against the simulator: a Locust master and two
worker processes give one merged results directory whose requests and timings are the simulator's
truth, and a worker killed mid-run loses nothing it had already sent. The spawn ramp is warm-up,
`--requests N` sends exactly N measured requests, concurrency stages reach the server with their
widths and label each request, and an unreachable target fails the run with its reason.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from harness import Pair, SimServer, load_json, records, run_cli
from test_accuracy import assert_causal, assert_explained, end, first_token, true_itl_ms

# find_spec, not importorskip: importing locust would monkey-patch this pytest process with gevent
pytestmark = pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason="needs tokspeed[locust]")

TTFT_MS, ITL_MS, TOKENS = 40.0, 8.0, 16
STRIDE = 1024  # tokspeed.distributed.options.INDEX_STRIDE: a record's worker is index % STRIDE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tokspeed(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.Popen([sys.executable, "-m", "tokspeed", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=10)


def start_fleet(procs: list[subprocess.Popen[str]], sim: SimServer, out: Path, duration: str, *extra: str
                ) -> tuple[subprocess.Popen[str], list[subprocess.Popen[str]]]:
    port = free_port()
    master = tokspeed("locust", "master", "--target", sim.url, "--out", str(out), "--users", "8",
                      "--spawn-rate", "100", "--duration", duration, "--expect-workers", "2", "--bind", "127.0.0.1",
                      "--port", str(port), "--output-tokens", str(TOKENS), "--input-tokens", "32", *extra)
    procs.append(master)
    workers = [tokspeed("locust", "worker", "--master", "127.0.0.1", "--port", str(port)) for _ in range(2)]
    procs.extend(workers)
    return master, workers


def pairs_by_worker(out: Path, sim: SimServer) -> list[Pair]:
    """Each measured ok record with the simulator's entry, on the clock of the worker that sent it."""
    run = load_json(out / "run.json")
    offsets = {w["index"]: w["epoch_offset_ns"] for w in run["benchmarks"][0]["profile"]["distributed"]["workers"]}
    truth = sim.entries()
    return [Pair(client=r, sim=truth[r["response_id"]], offset=offsets[r["index"] % STRIDE])
            for r in records(out) if r["status"] == "ok" and not r["warmup"]]


def test_master_and_two_workers_merge_records_that_match_the_simulator(
    start_sim: Callable[..., SimServer], tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "fleet"
    master, workers = start_fleet(procs, sim, out, "4s")
    stdout, _ = master.communicate(timeout=60)
    assert master.returncode == 0, stdout
    for w in workers:
        w.communicate(timeout=20)
        assert w.returncode == 0

    run, recs, truth = load_json(out / "run.json"), records(out), sim.entries()
    assert run["status"] == "complete"
    # every request the server saw is in the merged file once, and nothing else is
    assert len(recs) == len(truth) and len(recs) >= 80
    ids = [r["response_id"] for r in recs if r["response_id"]]
    assert len(set(ids)) == len(ids) and set(ids) <= set(truth)
    ok = [r for r in recs if r["status"] == "ok"]
    assert {r["status"] for r in recs} <= {"ok", "incomplete"}  # in flight at the end: incomplete, kept
    # what the client read to the end, the server finished; what the server finished, the client read,
    # unless it was still in the socket when the run stopped (one per user at most, more likely loaded)
    served = {i for i, v in truth.items() if v["status"] == "ok"}
    ok_ids, cut = {r["response_id"] for r in ok}, {r["response_id"] for r in recs if r["status"] == "incomplete"}
    assert ok_ids <= served <= ok_ids | cut and len(served - ok_ids) <= 8
    assert len({r["index"] for r in recs}) == len(recs)
    assert all(r["output_tokens"] == TOKENS and r["output_tokens_source"] == "usage" and
               len(r["chunk_offsets_ns"]) == TOKENS for r in ok)

    # both workers contributed and said goodbye; the profile says how Locust's load was read
    bench = run["benchmarks"][0]
    assert bench["profile"]["kind"] == "concurrency" and bench["profile"]["concurrency"] == 8
    workers_info = bench["profile"]["distributed"]["workers"]
    assert sorted(w["index"] for w in workers_info) == [0, 1]
    assert all(w["ended"] == "stopped" and w["records"] > 20 and w["cpu_percent"] is not None for w in workers_info)
    assert sum(w["records"] for w in workers_info) == len(recs)
    assert {r["index"] % STRIDE for r in recs} == {0, 1}

    # the timings are the simulator's truth (same tolerances as one process, test_accuracy.py)
    s = bench["summary"]
    ps = pairs_by_worker(out, sim)
    measured = [r for r in ok if not r["warmup"]]  # 8 users at 100/s: the first 0.08 s are warm-up
    assert s["requests"]["completed"] == len(ps) == len(measured) and len(measured) < len(ok)
    assert_causal(ps)
    assert s["ttft_ms"]["min"] >= TTFT_MS  # the simulator is never early
    assert_explained("TTFT", s["ttft_ms"]["mean"], ps, first_token, lambda p: p.sim["first_token_ns"])
    assert s["itl_ms"]["mean"] == pytest.approx(true_itl_ms(ps), abs=1.0)
    assert s["itl_ms"]["count"] == len(measured) * (TOKENS - 1)
    assert_explained("E2E", s["e2e_ms"]["mean"], ps, end, lambda p: p.sim["end_ns"], back="last")

    # Locust's own statistics carried the LLM metrics by name
    assert all(name in stdout for name in ("TTFT", "TPOT", "E2E"))

    report = run_cli("report", str(out))
    assert report.returncode == 0, report.stdout + report.stderr
    assert "TTFT" in report.stdout


def test_a_worker_killed_mid_run_keeps_its_sent_records(
    start_sim: Callable[..., SimServer], tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "fleet"
    master, workers = start_fleet(procs, sim, out, "6s")
    path = out / "requests.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until both workers' batches have reached the master
        got = {r["index"] % STRIDE for r in records(out)} if path.exists() else set()
        if got == {0, 1} and len(records(out)) >= 30:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the workers' records never reached the master")
    killed = workers[0]
    killed.send_signal(signal.SIGKILL)  # `tokspeed locust worker` execs Locust: this is the worker itself
    killed.wait(10)
    stdout, _ = master.communicate(timeout=60)
    assert master.returncode == 0, stdout

    run, recs = load_json(out / "run.json"), records(out)
    assert run["status"] == "complete"
    info = {w["pid"]: w for w in run["benchmarks"][0]["profile"]["distributed"]["workers"]}
    lost, alive = info[killed.pid], info[workers[1].pid]
    assert lost["ended"] == "lost" and alive["ended"] == "stopped"
    # what the killed worker sent before dying is all there, and counted
    mine = [r for r in recs if r["index"] % STRIDE == lost["index"]]
    assert len(mine) == lost["records"] > 0
    truth = sim.entries()
    assert all(truth[r["response_id"]]["status"] == "ok" for r in mine if r["status"] == "ok")
    # the survivor carried on to the end
    assert alive["records"] > lost["records"]
    assert any("stopped sending before the end" in w for w in run["warnings"])
    assert run["benchmarks"][0]["summary"]["requests"]["completed"] == sum(
        r["status"] == "ok" and not r["warmup"] for r in recs)
    assert run_cli("report", str(out)).returncode == 0


def both_sending(recs: list[dict]) -> list[dict]:
    """The measured records scheduled while both workers were sending (the run's stop reaches them apart)."""
    measured = [r for r in recs if not r["warmup"]]
    firsts = [min(r["scheduled_ns"] for r in measured if worker_of(r) == w) for w in (0, 1)]
    lasts = [max(r["scheduled_ns"] for r in measured if worker_of(r) == w) for w in (0, 1)]
    return [r for r in measured if max(firsts) <= r["scheduled_ns"] <= min(lasts)]


def server_received(recs: list[dict], sim: SimServer) -> np.ndarray:
    """When the simulator received each of these requests (its clock, ns), in the records' order."""
    truth = sim.entries()
    return np.asarray([truth[r["response_id"]]["received_ns"] for r in recs], dtype=np.int64)


def cv(gaps: np.ndarray) -> float:
    return float(gaps.std() / gaps.mean())


def test_a_constant_rate_reaches_the_server_evenly_spaced(
    start_sim: Callable[..., SimServer], tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "fleet"
    master, _ = start_fleet(procs, sim, out, "4s", "--rate", "32")  # 8 users on 2 workers: one arrival every 31.25 ms
    stdout, _ = master.communicate(timeout=60)
    assert master.returncode == 0, stdout
    bench = load_json(out / "run.json")["benchmarks"][0]
    assert bench["profile"]["kind"] == "rate" and bench["profile"]["rate"] == 32.0
    assert bench["profile"]["arrival"] == "constant" and bench["profile"]["max_concurrency"] == 8
    assert bench["summary"]["throughput"]["requests_per_s"] == pytest.approx(32.0, rel=0.12)  # not the ~45/s of 8 users
    recs = [r for r in records(out) if r["status"] == "ok"]
    for w in (0, 1):  # the workers' shares interleave: each worker's requests are due exactly 2/R = 62.5 ms apart
        sched = np.sort([r["scheduled_ns"] for r in recs if worker_of(r) == w])
        assert len(sched) >= 50 and np.allclose(np.diff(sched) / 1e6, 62.5, atol=0.001)
    # the server saw a constant rate: gaps of 31.25 ms give or take this loaded machine's jitter (CV 0.04-0.07
    # measured at load 9 on 2 cores; the users' own staggered phases of before gave CV 0.80)
    steady = both_sending(recs)
    gaps = np.diff(np.sort(server_received(steady, sim))) / 1e6
    assert len(gaps) >= 90
    assert cv(gaps) < 0.15, (cv(gaps), np.percentile(gaps, [0, 1, 50, 99, 100]))
    assert float(np.median(gaps)) == pytest.approx(31.25, abs=1.5)
    assert 1000 / float(gaps.mean()) == pytest.approx(32.0, rel=0.03)
    # on time: p90 under 10 ms late, beyond the p90 lateness of the simulator's own timers in this run
    sim_late_ms = np.concatenate([p.sim_late_ns for p in pairs_by_worker(out, sim)]) / 1e6
    assert np.percentile([(r["sent_ns"] - r["scheduled_ns"]) / 1e6 for r in recs], 90) < 10 + max(
        0.0, float(np.percentile(sim_late_ms, 90)))


def poisson_truth(rate: float, duration_s: float, seed: int) -> np.ndarray:
    """The schedule `tokspeed run --rate R --arrival poisson --duration D` draws (load.plan, computed here
    anew): round(R·D) arrivals, exponential gaps from numpy's default_rng(seed), rescaled to mean 1/R, in s."""
    n = round(rate * duration_s)
    gaps = np.random.default_rng(seed).exponential(1 / rate, n - 1)
    gaps *= ((n - 1) / rate) / gaps.sum()
    return np.concatenate(([0.0], np.cumsum(gaps)))


def test_poisson_arrivals_reach_the_server_as_the_seeded_schedule(
    start_sim: Callable[..., SimServer], tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "fleet"
    master, _ = start_fleet(procs, sim, out, "5s", "--rate", "30", "--arrival", "poisson", "--seed", "7")
    stdout, _ = master.communicate(timeout=60)
    assert master.returncode == 0, stdout
    bench = load_json(out / "run.json")["benchmarks"][0]
    assert bench["profile"]["arrival"] == "poisson" and bench["profile"]["rate"] == 30.0
    sent = sorted(records(out), key=lambda r: r["scheduled_ns"])
    recs = [r for r in sent if r["status"] == "ok"]
    # what was sent is the seeded schedule itself, both workers' shares together, from some arrival k on
    # (the ones before the first user asked are skipped; the last ones were cut by the run's end)
    truth = poisson_truth(30.0, 5.0, 7)
    sched = (np.asarray([r["scheduled_ns"] for r in sent]) - sent[0]["scheduled_ns"]) / 1e9
    assert any(np.allclose(truth[k:k + len(sched)] - truth[k], sched, atol=1e-6)
               for k in range(20) if k + len(sched) <= len(truth)), "the sent schedule is not the seeded draw"
    # the server saw those arrivals: each gap as scheduled give or take the machine's jitter, so the
    # gaps are exponential (CV 1; over ~130 gaps its standard error is ~0.09) at the asked rate
    steady = both_sending(recs)
    server = np.diff(np.sort(server_received(steady, sim))) / 1e6
    scheduled = np.diff(np.sort([r["scheduled_ns"] for r in steady])) / 1e6
    assert len(server) >= 100
    # (each gap is off by the difference of two sends' lags: median 0.6-0.7 ms, p90 6-11 ms seen at load 7-9)
    off = np.abs(server - scheduled)
    assert float(np.median(off)) < 3.0 and float(np.mean(off < 15.0)) > 0.8, np.percentile(off, [50, 90, 100])
    assert abs(server.sum() - scheduled.sum()) < 10.0  # the same span, to 10 ms: the same realised rate
    assert cv(server) == pytest.approx(1.0, abs=3.5 / np.sqrt(len(server)))
    assert cv(scheduled) == pytest.approx(cv(server), abs=0.1)
    assert 1000 * len(server) / server.sum() == pytest.approx(30.0, rel=3.5 / np.sqrt(len(server)))


def test_rate_stages_reach_the_server_at_each_stages_rate(
    start_sim: Callable[..., SimServer], tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "fleet"
    master, _ = start_fleet(procs, sim, out, "1m", "--stages", "low:rate=10:2s,high:rate=30:2s")
    stdout, _ = master.communicate(timeout=60)
    assert master.returncode == 0, stdout
    run = load_json(out / "run.json")
    assert run["status"] == "complete"
    bench = run["benchmarks"][0]
    assert bench["profile"]["kind"] == "stages" and bench["profile"]["open_loop"] is True
    assert [(s["name"], s["rate"]) for s in bench["profile"]["stages"]] == [("low", 10.0), ("high", 30.0)]
    assert bench["profile"]["max_concurrency"] == 8 and bench["profile"]["requests"] == 80
    recs = records(out)
    assert not any(r["warmup"] for r in recs)  # stages: no warm-up unless asked for
    assert all(r["status"] == "ok" for r in recs) and len(recs) >= 78  # the run outlasts the schedule by a second
    for name, rate, want in (("low", 10.0, 20), ("high", 30.0, 60)):
        mine = [r for r in recs if r["stage"] == name]
        assert want - 2 <= len(mine) <= want  # (a worker's first arrival may come before its first user)
        gaps = np.diff(np.sort(server_received(mine, sim))) / 1e6
        assert float(np.median(gaps)) == pytest.approx(1000 / rate, rel=0.05) and cv(gaps) < 0.15
        assert bench["stages"][name]["summary"]["requests"]["completed"] == len(mine)
    # back to back: the server's first high-stage request came one low gap (100 ms) after its last low one
    received = {name: server_received([r for r in recs if r["stage"] == name], sim) for name in ("low", "high")}
    assert (received["high"].min() - received["low"].max()) / 1e6 == pytest.approx(100.0, abs=10.0)
    assert run_cli("report", str(out)).returncode == 0


def test_the_master_listens_on_loopback_unless_told_otherwise(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    import psutil

    def listening(*bind: str) -> set[str]:
        port = free_port()
        master = tokspeed("locust", "master", "--target", "http://127.0.0.1:9/v1", "--out", str(tmp_path / str(port)),
                          "--port", str(port), "--duration", "90s", *bind)
        procs.append(master)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and master.poll() is None:  # it execs Locust: the socket is this pid's
            found = {c.laddr.ip for c in psutil.Process(master.pid).net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
            if found:
                master.kill()
                return found
            time.sleep(0.1)
        master.kill()
        pytest.fail(f"no master listened on {port}: {master.communicate()[0]}")

    assert listening() == {"127.0.0.1"}
    assert listening("--bind", "0.0.0.0") == {"0.0.0.0"}


def worker_of(record: dict) -> int:
    return int(record["index"]) % STRIDE


def max_overlap(spans: list[tuple[int, int]]) -> int:
    """The most of these [start, end) spans in progress at once."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def test_the_spawn_ramp_is_warmup_and_requests_stops_at_exactly_n(
    start_sim: Callable[..., SimServer], tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "fleet"
    # 8 users at 8/s: the default warm-up is the 1 s ramp; 61 measured requests: shares 31 + 30
    t0 = time.monotonic()
    master, workers = start_fleet(procs, sim, out, "90s", "--spawn-rate", "8", "--requests", "61")
    stdout, _ = master.communicate(timeout=120)
    assert master.returncode == 0, stdout
    # stopped at N (~3 s of load), long before --duration: the rest is starting 3 Python processes,
    # ~10 s on 2 loaded cores
    assert time.monotonic() - t0 < 45
    for w in workers:
        w.communicate(timeout=20)

    run, recs, truth = load_json(out / "run.json"), records(out), sim.entries()
    assert run["status"] == "complete"
    measured = [r for r in recs if not r["warmup"]]
    warm = [r for r in recs if r["warmup"]]
    assert len(measured) == 61 and all(r["status"] == "ok" for r in measured)  # exactly N, none cut off
    assert sorted(sum(worker_of(r) == w for r in measured) for w in (0, 1)) == [30, 31]
    assert len(recs) == len(truth)  # nothing sent beyond the shares and the warm-up
    assert len(warm) >= 5 and all(r["iteration"] == 0 and r["stage"] is None for r in warm)
    for w in (0, 1):  # on each worker's clock: warm-up is exactly the requests started in its first second
        mine_warm = [r["scheduled_ns"] for r in warm if worker_of(r) == w]
        mine = [r["scheduled_ns"] for r in measured if worker_of(r) == w]
        assert max(mine_warm) < min(mine)
        assert 0.8e9 < min(mine) - min(mine_warm) < 1.3e9  # the first user starts a few ms after the worker
    bench = run["benchmarks"][0]
    assert bench["profile"]["warmup_s"] == 1.0 and bench["profile"]["requests"] == 61
    s = bench["summary"]
    assert s["requests"]["completed"] == 61 and s["ttft_ms"]["count"] == 61  # warm-up left out
    assert_explained("TTFT", s["ttft_ms"]["mean"], pairs_by_worker(out, sim), first_token,
                     lambda p: p.sim["first_token_ns"])
    first_sent = min(r["sent_ns"] for r in measured)
    assert s["window_s"] == pytest.approx((max(r["end_ns"] for r in measured) - first_sent) / 1e9,
                                          abs=0.01)


def test_concurrency_stages_change_the_users_and_label_each_request(
    start_sim: Callable[..., SimServer], tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    sim = start_sim("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
    out = tmp_path / "fleet"
    master, _ = start_fleet(procs, sim, out, "1m", "--stages", "low:concurrency=2:2s,high:concurrency=6:2s")
    stdout, _ = master.communicate(timeout=60)
    assert master.returncode == 0, stdout
    run, recs, truth = load_json(out / "run.json"), records(out), sim.entries()
    assert run["status"] == "complete"
    bench = run["benchmarks"][0]
    assert bench["profile"]["kind"] == "stages" and bench["profile"]["concurrency"] == 6
    assert [(s["name"], s["concurrency"]) for s in bench["profile"]["stages"]] == [("low", 2), ("high", 6)]
    assert not any(r["warmup"] for r in recs)  # stages: no warm-up unless asked for
    assert {r["stage"] for r in recs} == {"low", "high"}
    ok = [r for r in recs if r["status"] == "ok"]
    spans = {name: [(truth[r["response_id"]]["received_ns"], truth[r["response_id"]]["end_ns"])
                    for r in ok if r["stage"] == name] for name in ("low", "high")}
    # the server saw each stage's width: never more of its requests at once, and all of it
    assert max_overlap(spans["low"]) == 2 and max_overlap(spans["high"]) == 6
    stages = bench["stages"]
    for name in ("low", "high"):
        assert stages[name]["summary"]["requests"]["completed"] == len(spans[name])
    low, high = (stages[n]["summary"]["throughput"]["requests_per_s"] for n in ("low", "high"))
    assert 2.3 < high / low < 3.7  # three times the users, three times the rate (the simulator is not the limit)
    # a stage change does not stall the streams in flight: the low stage's requests, which span it, saw the
    # simulator's own gaps (Locust's worker used to block ~0.1 s on every spawn message, see _cache_default_args)
    extra_ms = [(np.diff(r["chunk_offsets_ns"]).max() - np.diff(truth[r["response_id"]]["chunk_ns"]).max()) / 1e6
                for r in ok if r["stage"] == "low"]
    # (beyond the p99 chunk delivery lag of the whole run: a loaded machine stalls any process now and then)
    lags = np.concatenate([p.client_chunks - p.sim_chunks for p in pairs_by_worker(out, sim)]) / 1e6
    assert max(extra_ms) < 40 + float(np.percentile(lags, 99)), sorted(extra_ms)[-5:]
    # the stages ran back to back for their 4 s (Locust ticks once a second: a stage starts up to 1 s late)
    sent = sorted(r["sent_ns"] for r in recs)
    assert 3.0e9 < sent[-1] - sent[0] < 5.5e9
    assert run_cli("report", str(out)).returncode == 0


def test_an_unreachable_target_fails_the_run_with_its_reason_and_no_traceback(
    tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    port, dead = free_port(), free_port()  # nothing listens on `dead`
    out = tmp_path / "fleet"
    master = tokspeed("locust", "master", "--target", f"http://127.0.0.1:{dead}/v1", "--out", str(out), "--users", "2",
                      "--duration", "90s", "--expect-workers", "1", "--bind", "127.0.0.1", "--port", str(port))
    procs.append(master)
    worker = tokspeed("locust", "worker", "--master", "127.0.0.1", "--port", str(port))
    procs.append(worker)
    t0 = time.monotonic()
    w_out, _ = worker.communicate(timeout=60)
    m_out, _ = master.communicate(timeout=60)
    assert time.monotonic() - t0 < 45  # the master did not wait out --duration (start-up: ~10 s loaded)
    assert "Traceback" not in w_out and "Traceback" not in m_out, w_out + m_out
    errors = [line for line in w_out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"cannot reach http://127.0.0.1:{dead}/v1/models" in errors[0], w_out
    assert worker.returncode == 1 and master.returncode == 1, (w_out, m_out)
    run = load_json(out / "run.json")
    assert run["status"] == "failed" and run["benchmarks"] == []
    assert run["error"].startswith("worker 0 (") and f"cannot reach http://127.0.0.1:{dead}/v1/models" in run["error"]
