"""Where a paced Locust user's first request falls, so the users' starts spread over the interval.

With `--tokspeed-rate R`, each of U users starts a request every U/R s. Locust spawns the
users within U / spawn-rate seconds, often much less than U/R; if each user started at its
spawn instant, the U requests would go out in one burst per interval instead of at a constant
rate. So user k of worker w gets the slots origin + (f + j)·U/R (j = 0, 1, ...), with
f = `first_slot_fraction(k, w)`, and starts at the first of them not in the past. The origin
is the Unix epoch on the worker's own clock, so every worker places its slots on the same grid
(as well as their wall clocks agree); the golden-ratio sequence frac(k·φ) spreads any number of
users evenly over the interval (each new user lands in the largest gap left), and a fixed
offset per worker interleaves the workers' users. The schedule stays fixed after that (lateness
is measured).
"""

from __future__ import annotations

import math

_PHI = (math.sqrt(5.0) - 1.0) / 2.0  # 0.618...: frac(k·φ) is the most even sequence without knowing how many
_WORKER_OFFSET = math.sqrt(2.0) - 1.0  # 0.414...: the workers' sequences interleave instead of coinciding


def first_slot_fraction(user: int, worker_index: int) -> float:
    """Where in the interval the `user`-th paced user (from 0) of worker `worker_index` has its slots (0..1)."""
    return (user * _PHI + worker_index * _WORKER_OFFSET) % 1.0


def first_slot_ns(now_ns: int, origin_ns: int, interval_ns: int, user: int, worker_index: int) -> int:
    """The user's first slot at or after `now_ns`: origin + (fraction + j)·interval for the smallest such j."""
    offset = origin_ns + int(first_slot_fraction(user, worker_index) * interval_ns)
    periods = -((offset - now_ns) // interval_ns)  # ceil((now − offset) / interval)
    return offset + periods * interval_ns
