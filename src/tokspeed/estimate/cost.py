"""What a measured throughput costs, from a price per GPU-hour.

    cost per hour            = price per GPU-hour × GPUs
    cost per 1M output tok   = cost per hour ÷ (output tokens/s × 3600) × 1e6
    cost per 1M total tok    = cost per hour ÷ ((input + output) tokens/s × 3600) × 1e6
    output tokens per unit   = output tokens/s × 3600 ÷ cost per hour
    cost per 1,000 requests  = cost per hour ÷ (requests/s × 3600) × 1000

The currency is whatever the price is in. A rate of zero or None gives None, never 0 or infinity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokspeed.results import RunResult


@dataclass(frozen=True, slots=True)
class Rates:
    """One load point's measured rates (or the capacity's)."""

    label: str
    requests_per_s: float | None
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None


@dataclass(frozen=True, slots=True)
class Cost:
    rates: Rates
    price_per_gpu_hour: float
    gpus: int

    @property
    def cost_per_hour(self) -> float:
        return self.price_per_gpu_hour * self.gpus

    def _per(self, rate: float | None, units: float) -> float | None:
        return self.cost_per_hour / (rate * 3600) * units if rate else None

    @property
    def per_1m_output_tokens(self) -> float | None:
        return self._per(self.rates.output_tokens_per_s, 1e6)

    @property
    def per_1m_total_tokens(self) -> float | None:
        return self._per(self.rates.total_tokens_per_s, 1e6)

    @property
    def per_1k_requests(self) -> float | None:
        return self._per(self.rates.requests_per_s, 1e3)

    @property
    def output_tokens_per_unit(self) -> float | None:
        tps = self.rates.output_tokens_per_s
        return tps * 3600 / self.cost_per_hour if tps and self.cost_per_hour else None

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.rates.label,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "gpus": self.gpus,
            "cost_per_hour": self.cost_per_hour,
            "requests_per_s": self.rates.requests_per_s,
            "output_tokens_per_s": self.rates.output_tokens_per_s,
            "total_tokens_per_s": self.rates.total_tokens_per_s,
            "cost_per_1m_output_tokens": self.per_1m_output_tokens,
            "cost_per_1m_total_tokens": self.per_1m_total_tokens,
            "output_tokens_per_currency_unit": self.output_tokens_per_unit,
            "cost_per_1k_requests": self.per_1k_requests,
        }


def measured_rates(result: RunResult) -> list[Rates]:
    """Each load point's measured throughput and, when the run searched capacity and found one, the
    capacity's requests/s with the tokens per request of the highest passing probe."""
    rates = [
        Rates(b.name, b.summary.throughput.requests_per_s, b.summary.throughput.output_tokens_per_s,
              b.summary.throughput.total_tokens_per_s)
        for b in result.benchmarks
    ]
    cap = result.capacity
    if cap is None or not cap.requests_per_s:
        return rates
    passing = [p for p in cap.probes if p.passed and p.value == cap.value and p.benchmark < len(result.benchmarks)]
    if not passing:
        return rates
    t = result.benchmarks[passing[-1].benchmark].summary.throughput
    if not t.requests_per_s:
        return rates
    scale = cap.requests_per_s / t.requests_per_s
    label = f"capacity ({cap.requests_per_s:.3g} req/s under SLOs)"
    out = t.output_tokens_per_s * scale if t.output_tokens_per_s is not None else None
    total = t.total_tokens_per_s * scale if t.total_tokens_per_s is not None else None
    return [*rates, Rates(label, cap.requests_per_s, out, total)]


def costs(rates: list[Rates], prices: list[float], gpus: int) -> list[Cost]:
    """Every load point at every price, point by point."""
    return [Cost(r, p, gpus) for r in rates for p in prices]
