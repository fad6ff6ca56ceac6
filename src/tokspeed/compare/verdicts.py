"""From the evidence on one metric to a verdict, and the verdict to hyperfine-style words.

A difference is declared when the adjusted p (Benjamini–Hochberg over the
benchmark's metrics) is below alpha *and* the 95% interval of the ratio (when
there is one) excludes 1; a declared difference whose ratio is within
`min_effect` of 1 is negligible; between single runs a latency difference within
the run-to-run noise floor is inconclusive (repeat with --iterations); without a
p-value nothing is claimed.
The sentence reads like hyperfine's: `pr: TTFT p50 1.42 ± 0.05× lower than main
(p < 0.001)`, with the factor always ≥ 1 and its interval carried through.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokspeed.compare.comparison import CompareSettings, Metric, Test, Verdict


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the data say about other vs base for one metric."""

    ci: tuple[float, float] | None  # 95% interval of other / base
    p_value: float | None
    test: Test
    note: str | None = None  # why there is no test, when there is none
    p_adjusted: float | None = None  # over the benchmark's metrics; the verdict's p when set
    noise_floor: float | None = None  # single runs: a change whose factor (`orient`) is below 1 + it is inconclusive
    noise_floor_ms: float | None = None  # single runs: |other − base| below it is inconclusive
    noise_basis: str | None = None  # the floors in words


@dataclass(frozen=True, slots=True)
class Finding:
    """One metric's two values and the evidence about their difference."""

    metric: Metric
    base: float | None
    other: float | None
    evidence: Evidence

    @property
    def delta(self) -> float | None:
        return None if self.base is None or self.other is None else self.other - self.base

    @property
    def ratio(self) -> float | None:
        return self.other / self.base if self.other is not None and self.base else None


def verdict(f: Finding, cfg: CompareSettings) -> Verdict:
    e = f.evidence
    delta, ci = f.delta, e.ci
    p = e.p_adjusted if e.p_adjusted is not None else e.p_value
    if delta is None or p is None:
        return "untested"
    excludes_one = ci is None or not (ci[0] <= 1.0 <= ci[1])
    if p >= cfg.alpha or not excludes_one or delta == 0:
        return "no significant difference"
    if f.ratio is not None and abs(f.ratio - 1.0) < cfg.min_effect:
        return "negligible"
    if e.noise_floor is not None and f.ratio is not None and f.ratio > 0 and orient(f.ratio, None)[0] - 1.0 < e.noise_floor:
        return "inconclusive"
    if e.noise_floor_ms is not None and abs(delta) < e.noise_floor_ms:
        return "inconclusive"
    return "better" if (delta < 0) == (f.metric.better == "lower") else "worse"


def word(m: Metric, v: Verdict) -> str:
    """The verdict as a user says it: faster / slower (fewer / more errors), else the verdict."""
    if v == "better":
        return "fewer errors" if m.name == "error_rate" else "faster"
    if v == "worse":
        return "more errors" if m.name == "error_rate" else "slower"
    if v == "inconclusive":
        return "inconclusive — repeat with --iterations"
    return v


def sentence(f: Finding, v: Verdict, other: str, base: str, cfg: CompareSettings) -> str:
    """hyperfine-style: `pr: TTFT p50 1.42 ± 0.05× lower than main (p < 0.001)`."""
    m, e, ratio = f.metric, f.evidence, f.ratio
    if f.delta is None:
        return f"{other}: {m.label} not compared ({e.note})"
    if ratio is None:  # a zero baseline (error rate): say it in absolute terms
        change = f"{other}: {m.label} {_value(m, f.other)} vs {_value(m, f.base)} in {base}"
        if v == "untested":
            return f"{change} ({e.note})"
        shown = format_p(e.p_adjusted if e.p_adjusted is not None else e.p_value, adjusted=e.p_adjusted is not None)
        return f"{change}: no significant difference ({shown})" if v == "no significant difference" else f"{change} ({shown})"
    factor, direction, band = orient(ratio, e.ci)
    digits = 3 if band is not None and band < 0.005 else 2
    size = f"{factor:.{digits}f}" + (f" ± {band:.{digits}f}" if band is not None else "") + "×"
    if v == "untested":
        return f"{other}: {m.label} {size} {direction} than {base} ({e.note})"
    shown_p = format_p(e.p_adjusted if e.p_adjusted is not None else e.p_value, adjusted=e.p_adjusted is not None)
    if v == "no significant difference":
        interval = f", 95% CI {e.ci[0]:.3f}–{e.ci[1]:.3f}" if e.ci else ""
        return f"{other}: {m.label} no significant difference from {base} ({ratio:.3f}×{interval}, {shown_p})"
    claim = f"{other}: {m.label} {size} {direction} than {base} ({shown_p})"
    if v == "inconclusive":
        basis = f" ({e.noise_basis})" if e.noise_basis else ""
        return (f"{claim}, within the run-to-run noise of single runs{basis}: "
                f"inconclusive — repeat both with --iterations 3 or more")
    return f"{claim}, below the {cfg.min_effect:.0%} that counts: negligible" if v == "negligible" else claim


def orient(ratio: float, ci: tuple[float, float] | None) -> tuple[float, str, float | None]:
    """The ratio as a factor ≥ 1 with its direction and the half-width of its 95% interval."""
    if ratio >= 1.0 or ratio <= 0.0:
        band = (ci[1] - ci[0]) / 2.0 if ci else None
        return ratio, "higher", band
    if ci is None or ci[0] <= 0:
        return 1.0 / ratio, "lower", None
    return 1.0 / ratio, "lower", (1.0 / ci[0] - 1.0 / ci[1]) / 2.0


def format_p(p: float | None, adjusted: bool = False) -> str:
    """`p = 0.012`; `adj. p = …` for a p adjusted for multiple comparisons."""
    name = "adj. p" if adjusted else "p"
    if p is None:
        return f"{name} n/a"
    if p < 0.001:
        return f"{name} < 0.001"
    return f"{name} = {p:.3f}" if p < 0.1 else f"{name} = {p:.2f}"


def _value(m: Metric, value: float | None) -> str:
    if value is None:
        return "—"
    if m.name == "error_rate":
        return f"{value:.2%}"
    return f"{value:,.4g} {m.unit}".strip()
