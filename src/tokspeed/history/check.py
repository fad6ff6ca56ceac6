"""`tokspeed history check`: is the newest run worse than the recent history of comparable runs?

For each metric and each of the newest run's points, the history is the last `window` complete
runs before it at the same comparable point (same target, model, metric spec, workload and
profile). The judgement is a prediction interval, so the history's own run-to-run spread sets
the bar, not a fixed percentage:

1. Positive figures (latencies, throughputs) are judged on the log scale: run-to-run noise in
   them is multiplicative, and a ratio is what "10% slower" means.
2. History values farther than `outlier_mads` scaled median absolute deviations from the
   history's median are left out (and named), so one bad night cannot widen the interval for
   weeks. Under normal noise the cut removes almost nothing (5 MADs ≈ 5 σ). A value within
   `min_change` of the median is never cut: a history of near-identical runs has a tiny MAD, and
   a run a loaded machine made 5% slower is no "bad night" when 50% is the change that matters
   (cutting it would also leave too few runs to judge).
3. With the n remaining values' mean m and standard deviation s, a new value y from the same
   process satisfies (y − m) / (s·√(1 + 1/n)) ~ Student t with n − 1 degrees of freedom. The
   one-sided p-value in the metric's worse direction (higher latency, lower throughput) is
   that t's tail; a regression is p < α / k, k the number of (metric, point) pairs judged
   (Bonferroni), so a run where nothing changed is flagged with probability at most α.
4. `min_change` (relative) is a floor of practical significance: a change smaller than it is
   never a regression, however steady the history.

Fewer than `min_history` comparable runs: the pair is not judged (and fails only with
`require_history`). A metric the newest run lacks fails: a gate that cannot be checked must
not pass silently (as `compare --fail-if`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tokspeed.history.entry import RunEntry, trended_points

Direction = Literal["lower", "higher", "either"]
Verdict = Literal["regression", "improvement", "ok", "insufficient history", "missing"]
MAD_SCALE = 1.4826  # a normal distribution's σ in MADs

_HIGHER = ("_per_s", "goodput_fraction", "capacity_value")
_LOWER_PREFIXES = ("ttft", "ttfa", "itl", "tpot", "e2e", "chunk_gap", "lateness", "connect")


@dataclass(frozen=True, slots=True)
class CheckSettings:
    alpha: float = 0.01  # family-wise false-alarm rate of one check
    window: int = 20  # history: at most this many latest comparable runs
    min_history: int = 5
    min_change: float = 0.0  # relative floor: 0.05 = never flag a change under 5%
    outlier_mads: float = 5.0
    require_history: bool = False


@dataclass(frozen=True, slots=True)
class Judgement:
    """One value against its history."""

    verdict: Verdict
    value: float | None
    n: int  # history values used
    center: float | None = None  # the history's centre (geometric mean on the log scale)
    spread: float | None = None  # its standard deviation (relative on the log scale: 0.03 = 3%)
    limit: float | None = None  # the prediction bound in the worse direction at the alpha used
    change: float | None = None  # value / center - 1 (log scale) or value - center
    p_value: float | None = None
    alpha: float | None = None
    log_scale: bool = False
    outliers: tuple[float, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class PointCheck:
    metric: str
    point: str  # profile label
    target: str | None
    model: str | None
    judgement: Judgement
    history_runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckReport:
    run: RunEntry
    settings: CheckSettings
    checks: list[PointCheck] = field(default_factory=list)

    @property
    def regressions(self) -> list[PointCheck]:
        return [c for c in self.checks if c.judgement.verdict == "regression"]

    @property
    def failed(self) -> list[PointCheck]:
        """What makes the check fail: regressions, missing metrics, and (when required) too little history."""
        bad: set[str] = {"regression", "missing"} | ({"insufficient history"} if self.settings.require_history else set())
        return [c for c in self.checks if c.judgement.verdict in bad]


def direction(metric: str) -> Direction:
    """Which way is worse: latencies and error rates up, throughputs and capacity down."""
    if metric.endswith(_HIGHER) or metric.startswith(("capacity", "goodput")):
        return "higher"
    if metric == "error_rate" or (metric.startswith(_LOWER_PREFIXES) and metric.endswith("_ms")):
        return "lower"
    return "either"


def judge(value: float, history: Sequence[float], better: Direction, alpha: float,
          settings: CheckSettings = CheckSettings()) -> Judgement:
    """`value` against `history` (see the module docstring); `alpha` is this comparison's own level."""
    raw = np.asarray(history, dtype=float)
    log_scale = bool(value > 0 and raw.size and np.all(raw > 0))
    y = math.log(value) if log_scale else float(value)
    xs = np.log(raw) if log_scale else raw
    floor = math.log1p(settings.min_change) if log_scale else settings.min_change  # 0 without a floor
    inside = _inside(xs, settings.outlier_mads, floor)
    kept = xs[inside]
    dropped = tuple(float(v) for v in raw[~inside])
    n = int(kept.size)
    if n < max(2, settings.min_history):
        return Judgement("insufficient history", value, n, outliers=dropped, log_scale=log_scale,
                         note=f"{n} comparable run{'s' if n != 1 else ''} before it; needs {settings.min_history}")
    mean, sd = float(kept.mean()), float(kept.std(ddof=1))
    back = math.exp if log_scale else (lambda v: v)
    change = math.exp(y - mean) - 1 if log_scale else y - mean
    worse_change = change if better != "higher" else -change
    scale = sd * math.sqrt(1 + 1 / n)
    df = n - 1
    if scale == 0:  # a history without spread: only the size of the change can speak
        p = 0.0 if y != mean else 1.0
        limit = back(mean)
    else:
        t = (y - mean) / scale
        if better == "lower":
            p = _t_sf(t, df)
        elif better == "higher":
            p = _t_sf(-t, df)
        else:
            p = 2 * _t_sf(abs(t), df)
        q = _t_quantile(1 - (alpha / 2 if better == "either" else alpha), df)
        limit = back(mean - q * scale) if better == "higher" else back(mean + q * scale)
    big_enough = (abs(change) if better == "either" else worse_change) > settings.min_change
    if p < alpha and big_enough and (better == "either" or worse_change > 0):
        verdict: Verdict = "regression"
    elif scale > 0 and better != "either" and worse_change < 0 and _tail(y, mean, scale, df, better) < alpha:
        verdict = "improvement"
    else:
        verdict = "ok"
    return Judgement(verdict, value, n, center=back(mean), spread=sd, limit=limit, change=change, p_value=p,
                     alpha=alpha, log_scale=log_scale, outliers=dropped)


def _tail(y: float, mean: float, scale: float, df: int, better: Direction) -> float:
    """The p-value of a change in the better direction (for calling an improvement)."""
    t = (y - mean) / scale
    return _t_sf(-t if better == "lower" else t, df)


def _t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom (scipy.special: stats.t.sf without its overhead)."""
    from scipy.special import stdtr

    return float(stdtr(df, -t))


def _t_quantile(q: float, df: int) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def _inside(xs: np.ndarray, mads: float, floor: float = 0.0) -> np.ndarray:
    """Which values lie within `mads` scaled MADs of the median, or within `floor` of it (all of them when
    the MAD is 0)."""
    if xs.size < 3 or not math.isfinite(mads):
        return np.ones(xs.size, dtype=bool)
    med = float(np.median(xs))
    mad = float(np.median(np.abs(xs - med))) * MAD_SCALE
    if mad == 0:
        return np.ones(xs.size, dtype=bool)
    return np.asarray(np.abs(xs - med) <= max(mads * mad, floor))


def check(runs: Sequence[RunEntry], newest: RunEntry, metrics: Sequence[str],
          settings: CheckSettings = CheckSettings()) -> CheckReport:
    """Judge `newest` (with its points) against the comparable runs among `runs` started before it."""
    earlier = sorted(
        (r for r in runs if r.id != newest.id and r.status == "complete" and (r.started_at, r.id) < (newest.started_at, newest.id)),
        key=lambda r: (r.started_at, r.id),
    )
    pending: list[tuple[str, str, str | None, str | None, float | None, list[tuple[str, float]]]] = []
    for metric in metrics:
        points = [p for p in trended_points(newest) if metric in p.metrics]
        if not points:
            pending.append((metric, "-", newest.target, newest.model, None, []))
            continue
        for p in points:
            history = [(r.id, q.metrics[metric]) for r in earlier for q in trended_points(r)
                       if q.comparable == p.comparable and q.target == p.target and q.model == p.model and metric in q.metrics]
            pending.append((metric, p.profile, p.target, p.model, p.metrics[metric], history[-settings.window:]))
    judged = sum(1 for *_, value, hist in pending if value is not None and len(hist) >= settings.min_history)
    alpha_each = settings.alpha / max(1, judged)
    checks = []
    for metric, profile, target, model, value, hist in pending:
        if value is None:
            j = Judgement("missing", None, 0, note=f"the run has no {metric}")
        else:
            j = judge(value, [v for _, v in hist], direction(metric), alpha_each, settings)
        checks.append(PointCheck(metric, profile, target, model, j, tuple(i for i, _ in hist)))
    return CheckReport(newest, settings, checks)
