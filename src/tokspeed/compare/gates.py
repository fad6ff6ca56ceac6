"""Regression gates: `--fail-if` expressions judged against a run (and optionally a baseline).

Grammar: `NAME OP VALUE`, NAME a `Summary.flat()` name (`ttft_p99_ms`,
`output_tokens_per_s`, `error_rate`), OP one of `>`, `>=`, `<`, `<=`:

* absolute: `error_rate>0.01` fails when the run's value is above 0.01;
* relative: a VALUE ending in `%` (`ttft_p99_ms>+10%`, `output_tokens_per_s<-5%`)
  compares against the baseline: threshold = base × (1 + VALUE/100), so the
  gate fails when the run's value is above 110% (below 95%) of the baseline's.
  A signed VALUE without `%` (`>+10`) looks relative but would be absolute: an error;
* significant: a trailing `!` (`ttft_p99_ms>+10%!`) fails only when the limit is
  breached *and* `tokspeed compare` calls that metric's difference significant
  (better or worse, not n.s., inconclusive or untested); only for compared metrics.

A gate whose value (or baseline value) is missing fails, with the reason: a
CI gate that cannot be checked must not pass silently.
"""

from __future__ import annotations

import difflib
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tokspeed.errors import ConfigError

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
_GATE_RE = re.compile(r"^\s*([a-z0-9_]+)\s*(>=|<=|>|<)\s*([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*(!?)\s*$")
EXAMPLES = ("'ttft_p99_ms>+10%' (relative to the baseline), 'ttft_p99_ms>+10%!' (relative and significant), "
            "'error_rate>0.01' (absolute)")


@dataclass(frozen=True, slots=True)
class Gate:
    """`metric OP value`; `relative` when value is a percentage of the baseline."""

    metric: str
    op: str
    value: float
    relative: bool
    text: str
    significant: bool = False  # trailing `!`: fails only on a significant difference

    def threshold(self, base: float | None) -> float | None:
        """The limit the run's value is held to (None: relative without a baseline value)."""
        if not self.relative:
            return self.value
        return None if base is None else base * (1.0 + self.value / 100.0)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class GateResult:
    """One gate judged on one benchmark of one run."""

    gate: Gate
    run: str
    benchmark: str
    observed: float | None
    baseline: float | None
    threshold: float | None
    breached: bool
    reason: str


def parse_gate(text: str, known: Iterable[str], allow_relative: bool = True, tested: Iterable[str] = ()) -> Gate:
    """Parse one `--fail-if` expression; ConfigError (exit 2) with a hint when it is wrong.

    `tested`: the metrics a comparison tests for significance (what a trailing `!` may name).
    """
    m = _GATE_RE.match(text)
    if not m:
        raise ConfigError(f"cannot parse --fail-if {text!r}", hint=f"write NAME OP VALUE, e.g. {EXAMPLES}")
    name, op, raw, percent, bang = m.groups()
    names = set(known)
    if name not in names:
        close = difflib.get_close_matches(name, sorted(names), n=3)
        suggestion = f"did you mean {', '.join(close)}?" if close else "names are as in run.json, e.g. ttft_p99_ms, output_tokens_per_s, error_rate"
        raise ConfigError(f"--fail-if {text!r}: unknown metric {name!r}", hint=suggestion)
    if raw[0] in "+-" and not percent:
        raise ConfigError(
            f"--fail-if {text!r}: a signed number without % looks relative but would be an absolute limit",
            hint=f"write '{name}{op}{raw}%' for {raw}% of the baseline, or '{name}{op}{raw.lstrip('+')}' for an absolute limit",
        )
    if (percent or bang) and not allow_relative:
        raise ConfigError(
            f"--fail-if {text!r} is relative, and a single run has no baseline",
            hint=f"use an absolute limit here (e.g. '{name}{op}500'), or `tokspeed compare BASE RUN --fail-if {text!r}`",
        )
    tested = set(tested)
    if bang and name not in tested:
        raise ConfigError(
            f"--fail-if {text!r}: '!' asks for a significant difference, and compare does not test {name}",
            hint=f"'!' works on {', '.join(sorted(tested))}; drop the '!' to gate on the value alone",
        )
    return Gate(metric=name, op=op, value=float(raw), relative=bool(percent), text=text.strip(), significant=bool(bang))


def judge(gate: Gate, observed: float | None, baseline: float | None, run: str, benchmark: str,
          verdict: str | None = None) -> GateResult:
    """Whether `observed` (and, for relative gates, `baseline`) breaches the gate.

    `verdict`: compare's verdict on this metric, for a significance gate (`!`): a breach
    counts only when it is `better` or `worse`.
    """
    limit = gate.threshold(baseline)
    if observed is None:
        return GateResult(gate, run, benchmark, observed, baseline, limit, True, f"{gate.metric} was not measured")
    if limit is None:
        return GateResult(gate, run, benchmark, observed, baseline, limit, True, f"the baseline has no {gate.metric}")
    breached = _OPS[gate.op](observed, limit)
    reason = describe(gate, observed, baseline, limit)
    if gate.significant:
        significant = verdict in ("better", "worse")
        reason += f"; compare: {verdict or 'not compared'}" + ("" if significant or not breached else " (not significant: passes)")
        breached = breached and significant
    return GateResult(gate, run, benchmark, observed, baseline, limit, breached, reason)


def describe(gate: Gate, observed: float, baseline: float | None, limit: float) -> str:
    """`61.2 vs base 50.1 (+22.2%); fails if > 55.11`."""
    if gate.relative and baseline is not None:
        change = f" ({(observed / baseline - 1) * 100:+.1f}%)" if baseline else ""
        return f"{_num(observed)} vs base {_num(baseline)}{change}; fails if {gate.op} {_num(limit)}"
    return f"{_num(observed)}; fails if {gate.op} {_num(limit)}"


def _num(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 1e6:
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    return f"{value:.3g}"
