"""The first slots of paced Locust users spread evenly over the interval (distributed.pacing)."""

from __future__ import annotations

import numpy as np

from tokspeed.distributed.pacing import first_slot_fraction, first_slot_ns


def gaps(fractions: list[float]) -> np.ndarray:
    f = np.sort(fractions)
    return np.diff(np.append(f, f[0] + 1.0))


def test_a_workers_users_fill_the_interval_without_bursts() -> None:
    for users in (2, 4, 8, 16, 64):
        g = gaps([first_slot_fraction(k, 0) for k in range(users)])
        assert g.max() < 2.7 / users and g.min() > 0.3 / users  # never more than ~2.6× the even gap


def test_two_workers_interleave() -> None:
    g = gaps([first_slot_fraction(k, w) for w in (0, 1) for k in range(4)])
    assert g.max() < 0.25 and g.min() > 0.02  # 8 starts per interval, none on top of another
    assert g.std() / g.mean() < 0.7


def test_deterministic_and_in_range() -> None:
    values = [first_slot_fraction(k, w) for w in range(4) for k in range(100)]
    assert values == [first_slot_fraction(k, w) for w in range(4) for k in range(100)]
    assert all(0.0 <= v < 1.0 for v in values)


def test_first_slot_is_on_the_users_grid_and_never_in_the_past() -> None:
    interval = 250_000_000
    origin = -1_700_000_000_123_456_789  # the Unix epoch on a worker's monotonic clock
    for now in (0, 1, 123_456_789, 10**15 + 7):
        for user in range(6):
            slot = first_slot_ns(now, origin, interval, user, 1)
            assert now <= slot < now + interval
            assert (slot - origin) % interval == int(first_slot_fraction(user, 1) * interval)


def test_users_spawned_at_different_times_keep_their_even_spread() -> None:
    interval, origin = 250_000_000, 0
    slots = [first_slot_ns(20_000_000 * k + 5, origin, interval, k, 0) % interval for k in range(4)]
    want = sorted(int(first_slot_fraction(k, 0) * interval) for k in range(4))
    assert sorted(slots) == want  # the spawn times do not shift the users' places in the interval
