"""Per-request choices layered over a workload: which model each request asks for, and which the client cancels.

    parse_models("a=3,b=1") -> (ModelShare("a", 3.0), ModelShare("b", 1.0))   weights (default 1 each)
    ModelChooser(shares, "round-robin" | "random", seed).model(i)            the model of request i
    CancelChooser(share, after_ns, seed).after_ns(i)                        None, or when the client aborts request i
    with_choices(workload, chooser, cancel)                                 the workload unchanged when both are None

Every choice is a pure function of (seed, request index), so a run is reproducible and
independent of timing, and a test can recompute which requests were meant for what:

* round-robin: the smooth weighted round-robin cycle (nginx's): over a cycle of Σw requests
  model k gets exactly w_k, spread evenly (a=3,b=1 → a a b a); request i takes cycle[i mod Σw].
  Weights must then be whole numbers.
* random: u_i = `unit(seed, "model", i)` (uniform in [0, 1)), and request i takes the first model
  whose cumulative share Σ_{j≤k} w_j/Σw exceeds u_i. Model k's count over n requests is
  Binomial(n, w_k/Σw).
* cancellation: request i is cancelled when `unit(seed, "cancel", i)` < share, so the cancelled
  count is Binomial(n, share); the client aborts it `after_ns` after it was sent.

`unit` is the first 8 bytes of BLAKE2b(f"{seed}:{salt}:{i}") over 2^64: no state, any i (warm-up
indices included), the same in every client process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate

from tokspeed.errors import ConfigError
from tokspeed.records import RequestSpec
from tokspeed.workload.images import SpecWorkload

POLICIES = ("round-robin", "random")
MAX_CYCLE = 100_000  # round-robin: at most this many requests in one cycle (Σ weights)


@dataclass(frozen=True, slots=True)
class ModelShare:
    """One model of a mix and its weight (its share is weight / Σ weights)."""

    name: str
    weight: float = 1.0


def parse_models(text: str) -> tuple[ModelShare, ...]:
    """`a`, `a,b` or `a=3,b=1`: names with optional weights; ConfigError when malformed."""
    shares = []
    for part in text.split(","):
        name, sep, weight = part.strip().partition("=")
        name = name.strip()
        if not name:
            raise ConfigError(f"--model {text!r}: an empty model name", hint="e.g. --model llama-a=3,llama-b=1")
        try:
            w = float(weight) if sep else 1.0
        except ValueError:
            raise ConfigError(f"--model {text!r}: weight {weight!r} of {name!r} is not a number",
                              hint="e.g. --model llama-a=3,llama-b=1") from None
        if not (w > 0 and math.isfinite(w)):
            raise ConfigError(f"--model {text!r}: the weight of {name!r} must be positive")
        shares.append(ModelShare(name, w))
    names = [s.name for s in shares]
    if len(set(names)) != len(names):
        raise ConfigError(f"--model {text!r}: each model may be named once")
    return tuple(shares)


def unit(seed: int, salt: str, index: int) -> float:
    """A uniform draw in [0, 1) that depends only on (seed, salt, index)."""
    digest = hashlib.blake2b(f"{seed}:{salt}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def smooth_cycle(weights: list[int]) -> list[int]:
    """Smooth weighted round-robin over one cycle of Σ weights picks: the index of each pick."""
    current = [0] * len(weights)
    total = sum(weights)
    picks = []
    for _ in range(total):
        current = [c + w for c, w in zip(current, weights)]
        k = max(range(len(weights)), key=lambda j: current[j])  # ties: the first
        current[k] -= total
        picks.append(k)
    return picks


class ModelChooser:
    """Which model request i asks for (see the module docstring for both policies)."""

    def __init__(self, shares: tuple[ModelShare, ...], policy: str = "round-robin", seed: int = 0) -> None:
        if policy not in POLICIES:
            raise ConfigError(f"model policy {policy!r} is not one of {', '.join(POLICIES)}")
        self.shares, self.policy, self.seed = shares, policy, seed
        self._names = [s.name for s in shares]
        total = sum(s.weight for s in shares)
        self._bounds = [c / total for c in accumulate(s.weight for s in shares)]
        self._cycle: list[int] = []
        if policy == "round-robin":
            weights = [s.weight for s in shares]
            if any(w != int(w) for w in weights) or sum(weights) > MAX_CYCLE:
                raise ConfigError(f"round-robin needs whole-number weights summing to at most {MAX_CYCLE}",
                                  hint="use whole weights (--model a=3,b=1), or --model-policy random")
            self._cycle = smooth_cycle([int(w) for w in weights])

    def model(self, index: int) -> str:
        if self._cycle:
            return self._names[self._cycle[index % len(self._cycle)]]
        k = bisect_right(self._bounds, unit(self.seed, "model", index))
        return self._names[min(k, len(self._names) - 1)]

    def describe(self) -> dict[str, object]:
        total = sum(s.weight for s in self.shares)
        return {"policy": self.policy, "weights": {s.name: s.weight for s in self.shares},
                "shares": {s.name: s.weight / total for s in self.shares}}


class CancelChooser:
    """Which requests the client aborts, and when: `share` of them, `after_ns` after each was sent."""

    def __init__(self, share: float, after_ns: int, seed: int = 0) -> None:
        self.share, self._after_ns, self.seed = share, after_ns, seed

    def after_ns(self, index: int) -> int | None:
        return self._after_ns if unit(self.seed, "cancel", index) < self.share else None

    def describe(self) -> dict[str, object]:
        return {"share": self.share, "after_ms": self._after_ns / 1e6}


class ChoiceWorkload:
    """`inner`'s requests, each with its model (a mix) and its client-side abort (cancellation) set."""

    def __init__(self, inner: SpecWorkload, models: ModelChooser | None, cancel: CancelChooser | None) -> None:
        self._inner, self._models, self._cancel = inner, models, cancel

    def request(self, index: int) -> RequestSpec:
        spec = self._inner.request(index)
        return dataclasses.replace(
            spec,
            model=self._models.model(index) if self._models is not None else spec.model,
            cancel_after_ns=self._cancel.after_ns(index) if self._cancel is not None else spec.cancel_after_ns,
        )

    def describe(self) -> dict[str, object]:
        described = dict(self._inner.describe())
        if self._models is not None:
            described["models"] = self._models.describe()
        if self._cancel is not None:
            described["cancel"] = self._cancel.describe()
        return described


def with_choices(workload: SpecWorkload, models: ModelChooser | None, cancel: CancelChooser | None) -> SpecWorkload:
    """`workload` itself when there is nothing to choose; else one whose requests carry the choices."""
    if models is None and cancel is None:
        return workload
    return ChoiceWorkload(workload, models, cancel)
