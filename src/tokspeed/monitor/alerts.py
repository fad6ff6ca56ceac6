"""The alert state machine: inactive -> pending -> firing -> resolved (back to inactive).

Prometheus semantics: a condition that starts to hold makes the alert *pending*;
once it has held for the rule's `for` duration (at an evaluation), the alert
*fires*; when it stops holding, a pending alert silently goes back to inactive
and a firing one *resolves*. Only firing and resolving are events (delivered to
stderr, alerts.jsonl and the webhook). Time is passed in (`now`, Unix seconds),
so tests drive it with a fake clock. A percentile rule whose metric has fewer than
`rule.min_samples` samples in the window (`counts`, metric -> samples) reads None ("no
data"): one outlier among a few probes cannot fire it; `short(rule)` says how many it has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from tokspeed.monitor.rules import AlertRule


class AlertState(str, Enum):
    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """An alert fired (`status` "firing") or resolved ("resolved") at `at_s`."""

    rule: AlertRule
    status: str  # "firing" | "resolved"
    value: float | None  # the observed value at the evaluation that changed the state
    at_s: float
    active_since_s: float  # when the condition started to hold (pending began)
    fired_at_s: float  # when it fired (for a resolved event: when it had fired)

    def to_json_dict(self, target: str) -> dict[str, object]:
        return {
            "alert": self.rule.alert_name,
            "expression": str(self.rule),
            "status": self.status,
            "value": self.value,
            "at_s": self.at_s,
            "active_since_s": self.active_since_s,
            "fired_at_s": self.fired_at_s,
            "target": target,
        }


@dataclass
class _Track:
    state: AlertState = AlertState.INACTIVE
    since_s: float = 0.0  # when the condition started holding
    fired_s: float = 0.0
    value: float | None = None
    short: tuple[int, int] | None = None  # (samples in the window, samples needed) while too few


class AlertTracker:
    """Holds every rule's state; `evaluate` advances them all and returns what changed."""

    def __init__(self, rules: Sequence[AlertRule]) -> None:
        self.rules = list(rules)
        self._tracks = {rule.alert_name: _Track() for rule in self.rules}

    def state(self, rule: AlertRule) -> AlertState:
        return self._tracks[rule.alert_name].state

    def value(self, rule: AlertRule) -> float | None:
        """The value seen at the last evaluation."""
        return self._tracks[rule.alert_name].value

    def short(self, rule: AlertRule) -> tuple[int, int] | None:
        """(samples, needed) when the last evaluation had too few samples to read the rule, else None."""
        return self._tracks[rule.alert_name].short

    def evaluate(self, values: Mapping[str, float | None], now: float,
                 counts: Mapping[str, int] | None = None) -> list[AlertEvent]:
        """One evaluation of every rule against `values` (name -> observed) at time `now`; `counts`
        (metric -> samples in the window) hold back percentile rules with fewer than `min_samples`."""
        events = []
        for rule in self.rules:
            observed = values.get(rule.name)
            track = self._tracks[rule.alert_name]
            have = None if counts is None or rule.metric not in counts else counts[rule.metric]
            track.short = (have, rule.min_samples) if have is not None and have < rule.min_samples else None
            if track.short is not None:
                observed = None  # too few samples: this percentile is one or two values, not a tail
            event = self._step(rule, observed, now)
            if event is not None:
                events.append(event)
        return events

    def _step(self, rule: AlertRule, observed: float | None, now: float) -> AlertEvent | None:
        track = self._tracks[rule.alert_name]
        track.value = observed
        if not rule.met(observed):
            was = track.state
            track.state = AlertState.INACTIVE
            if was is AlertState.FIRING:
                return AlertEvent(rule, "resolved", observed, now, track.since_s, track.fired_s)
            return None
        if track.state is AlertState.INACTIVE:
            track.state, track.since_s = AlertState.PENDING, now
        if track.state is AlertState.PENDING and now - track.since_s >= rule.for_s:
            track.state, track.fired_s = AlertState.FIRING, now
            return AlertEvent(rule, "firing", observed, now, track.since_s, now)
        return None

    def firing(self) -> list[AlertRule]:
        return [r for r in self.rules if self._tracks[r.alert_name].state is AlertState.FIRING]
