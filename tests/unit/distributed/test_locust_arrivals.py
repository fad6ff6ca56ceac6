"""The run-wide arrival schedule of a paced Locust run and each worker's share of it (distributed.arrivals),
and what `tokspeed locust master` hands Locust: the bind address, rate stages' users and run time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tokspeed.distributed.arrivals import Schedule, WorkerArrivals, rate_stage_items, schedule_for
from tokspeed.distributed.options import LocustOptions

NS = 1_000_000_000


def test_a_constant_rate_is_one_arrival_every_1_over_r() -> None:
    s = Schedule.draw(32.0, "constant", seed=0, duration_s=4.0)
    assert len(s.offsets_ns) == 128
    assert np.array_equal(s.offsets_ns, np.round(np.arange(128) * NS / 32).astype(np.int64))
    assert s.stage_of(5) is None


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_the_workers_shares_interleave_into_the_whole_schedule(workers: int) -> None:
    s = Schedule.draw(30.0, "constant", seed=0, duration_s=10.0)
    shares = [s.share(w, workers) for w in range(workers)]
    assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(len(s.offsets_ns)))  # each arrival once
    for share in shares:  # each worker's own arrivals are W/R apart: the gaps of the union are 1/R
        assert np.allclose(np.diff(s.offsets_ns[share]) / NS, workers / 30.0, atol=1e-9)


def test_poisson_arrivals_offer_the_rate_with_exponential_gaps_and_the_same_draw_on_every_worker() -> None:
    rate, duration = 50.0, 200.0
    s = Schedule.draw(rate, "poisson", seed=3, duration_s=duration)
    gaps = np.diff(s.offsets_ns) / NS
    n = len(gaps)
    assert len(s.offsets_ns) == 10_000 and gaps.mean() == pytest.approx(1 / rate, rel=1e-6)  # exactly R offered
    # exponential: CV 1 (its standard error over n gaps is about 1/√n), P(gap > mean) = 1/e
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=4 / np.sqrt(n))
    assert float(np.mean(gaps > 1 / rate)) == pytest.approx(np.exp(-1), abs=4 * 0.48 / np.sqrt(n))
    assert np.array_equal(s.offsets_ns, Schedule.draw(rate, "poisson", seed=3, duration_s=duration).offsets_ns)
    assert not np.array_equal(s.offsets_ns, Schedule.draw(rate, "poisson", seed=4, duration_s=duration).offsets_ns)


def test_rate_stages_hold_their_rates_back_to_back_and_label_each_arrival() -> None:
    s = Schedule.draw(0.0, "constant", seed=0, duration_s=0.0, stages="low:rate=5:2s,high:rate=10:2s")
    t = s.offsets_ns / NS
    stages = [s.stage_of(n) for n in range(len(t))]
    assert stages.count("low") == 10 and stages.count("high") == 20  # 5/s and 10/s for 2 s each
    assert all(st == ("low" if x < 2.0 else "high") for st, x in zip(stages, t))
    assert s.timeline is not None and [w.name for w in s.timeline.windows] == ["low", "high"]
    ramp = Schedule.draw(0.0, "constant", seed=0, duration_s=0.0, ramp="rate=2..6:4s:steps=2")
    assert [ramp.stage_of(n) for n in range(len(ramp.offsets_ns))].count("step 2/2") == 12


def test_only_rate_stages_are_a_schedule() -> None:
    assert rate_stage_items("a:concurrency=2:1s", None) is None and rate_stage_items(None, None) is None
    assert schedule_for(LocustOptions()) is None and schedule_for(LocustOptions(stages="a:concurrency=2:1s")) is None
    assert schedule_for(LocustOptions(rate=2.0, duration_s=3.0)) is not None
    assert schedule_for(LocustOptions(stages="a:rate=2:1s")) is not None


def worker(start_ns: int = 10 * NS, warmup_s: float = 0.0, worker_index: int = 0, workers: int = 1) -> WorkerArrivals:
    s = Schedule.draw(10.0, "constant", seed=0, duration_s=2.0)  # 20 arrivals, 0.1 s apart
    return WorkerArrivals(s, worker_index, workers, start_ns, start_ns + round(warmup_s * NS))


def test_a_worker_skips_what_was_due_before_its_first_user_asked() -> None:
    w = worker()
    first = w.claim(10 * NS + 250_000_000)  # the first user came 0.25 s in: arrivals 0-2 were nobody's
    assert first is not None and (first.n, first.due_ns) == (3, 10 * NS + 300_000_000)


def test_a_late_measured_arrival_is_sent_late_not_skipped() -> None:
    w = worker()
    assert w.claim(10 * NS).n == 0  # type: ignore[union-attr]
    late = w.claim(10 * NS + 500_000_000)  # every user was busy for 0.5 s: arrival 1 is still sent, 0.4 s late
    assert late is not None and late.n == 1 and late.due_ns == 10 * NS + 100_000_000


def test_a_warmup_arrival_already_past_is_skipped() -> None:
    w = worker(warmup_s=1.0)
    assert w.claim(10 * NS).n == 0  # type: ignore[union-attr]
    assert w.claim(10 * NS + 550_000_000).n == 6  # type: ignore[union-attr]  # 1-5: past, warm-up
    late = w.claim(10 * NS + 1_450_000_000)  # 7-9: past, warm-up, skipped; 10 (due at 1.0 s) is measured:
    assert late is not None and late.n == 10 and late.due_ns == 11 * NS  # sent late, its lateness measured


def test_a_worker_claims_only_its_share_until_the_schedule_ends() -> None:
    w = worker(worker_index=1, workers=2)
    got = []
    while (slot := w.claim(10 * NS)) is not None:
        got.append(slot.n)
    assert got == list(range(1, 20, 2)) and w.left == 0 and w.claim(20 * NS) is None


class Exec:
    """Stands in for `locust_cmd._run` (which execs Locust in place of this process): keeps the arguments."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.locustfile: Path | None = None

    def __call__(self, args: list[str], locustfile: Path | None = None) -> None:
        self.args, self.locustfile = args, locustfile

    def value(self, flag: str) -> str:
        return self.args[self.args.index(flag) + 1]


@pytest.fixture
def locust_exec(monkeypatch: pytest.MonkeyPatch) -> Exec:
    from importlib.util import find_spec

    from tokspeed.cli import locust_cmd

    if find_spec("locust") is None:
        pytest.skip("needs tokspeed[locust]")
    fake = Exec()
    monkeypatch.setattr(locust_cmd, "_run", fake)
    return fake


def master(tmp_path: Path, *extra: str) -> int:
    from tokspeed.cli import main

    return main(["locust", "master", "--target", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "r"), *extra])


def test_the_master_listens_on_loopback_unless_told_otherwise(tmp_path: Path, locust_exec: Exec) -> None:
    assert master(tmp_path) == 0
    assert locust_exec.value("--master-bind-host") == "127.0.0.1" and "--web-host" not in locust_exec.args
    assert master(tmp_path, "--bind", "10.1.2.3", "--web") == 0
    assert locust_exec.value("--master-bind-host") == "10.1.2.3" and locust_exec.value("--web-host") == "10.1.2.3"
    assert master(tmp_path, "--bind", "*", "--web") == 0  # every interface, the web UI too (Locust's "")
    assert locust_exec.value("--master-bind-host") == "*" and locust_exec.value("--web-host") == ""


def test_rate_stages_keep_the_users_and_run_for_their_total(tmp_path: Path, locust_exec: Exec) -> None:
    from tokspeed.cli.locust_cmd import LOCUSTFILE

    assert master(tmp_path, "--users", "12", "--stages", "a:rate=5:2.5s,b:rate=10:2s", "--arrival", "poisson") == 0
    assert locust_exec.value("--users") == "12" and locust_exec.value("--run-time") == "6s"  # 4.5 s + lead, and 1 s for the last to end
    assert locust_exec.value("--tokspeed-arrival") == "poisson" and locust_exec.locustfile == LOCUSTFILE  # no shape
    assert locust_exec.value("--tokspeed-stages") == "a:rate=5:2.5s,b:rate=10:2s"
