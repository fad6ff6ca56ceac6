"""Say when the measurement itself is suspect, and which flag fixes it.

Each check is a small function returning a warning or None; `measurement_warnings`
runs them all over a finished benchmark, leaving out what a fired diagnosis rule already
says (the finding carries the evidence; see `COVERED_BY`). The checks read the point's
records through their bounded one-pass digest (`tokspeed.diagnosis.digest`), which the
runner builds once per point and shares with the diagnosis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tokspeed.config import RunConfig
from tokspeed.diagnosis.digest import PointDigest, digest_point
from tokspeed.load.capacity import keep_up_slack
from tokspeed.metrics.sustained import window_arrivals
from tokspeed.records import Anomaly, RequestRecord
from tokspeed.results import Benchmark

LATENESS_WARN_MS = 10.0
P99_MIN_SAMPLES = 100

Check = Callable[[Benchmark, RunConfig, PointDigest], "str | None"]


def _errors(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    req = b.summary.requests
    if not req.errored:
        return None
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(b.summary.errors.items()))
    return f"{req.errored} of {req.completed + req.errored} requests failed ({kinds}); see the error field in requests.jsonl"


def _too_few(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    n = b.summary.requests.completed
    if 0 < n < P99_MIN_SAMPLES:
        return f"only {n} completed requests: p99 and p99.9 are rough; use --requests {P99_MIN_SAMPLES} or more"
    return None


def _late(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    """Schedule lag with no --max-concurrency: the client's own delay (client_bound says it with its evidence)."""
    p99 = b.summary.lateness_ms.p99
    if cfg.profile != "rate" or cfg.max_concurrency or p99 is None or p99 <= LATENESS_WARN_MS:
        return None
    return (f"requests started late (lateness p99 {p99:.1f} ms): the client could not keep up with the schedule "
            "(its CPU is the bottleneck); the offered rate was lower than asked")


def _late_capped(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    """Schedule lag under --max-concurrency: requests waited for a slot (no diagnosis rule says this)."""
    p99 = b.summary.lateness_ms.p99
    if cfg.profile != "rate" or not cfg.max_concurrency or p99 is None or p99 <= LATENESS_WARN_MS:
        return None
    return (f"requests started late (lateness p99 {p99:.1f} ms): requests waited for a free --max-concurrency "
            "slot; the offered rate was lower than asked")


def _ignored_max_tokens(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    short = d.too_long  # measured ok, with a max_tokens, usage-counted and longer than it
    if short:
        return f"{short} responses were longer than max_tokens: the server ignores max_tokens"
    return None


def _early_stops(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    ok, short = d.asked, d.short  # measured ok with a max_tokens and an output count; of them, diagnosis.tokens.stopped_early
    if ok and short > ok // 2:
        return (
            f"{short} of {ok} responses stopped before max_tokens (EOS or stop words): output lengths vary; "
            "for fixed lengths pass --extra-body '{\"ignore_eos\": true}' (vLLM, SGLang) or min_tokens"
        )
    return None


def _chunk_counted(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    chunks = d.chunk_counted  # no usage at all; a wrong usage is _usage_below's
    if chunks:
        return (
            f"{chunks} responses had no usage: output tokens counted as one per chunk (may undercount); "
            "pass --tokenizer PATH for exact counts"
        )
    return None


def _usage_below(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    n = d.anomalies.get(Anomaly.USAGE_BELOW_CHUNKS.value, 0)
    return f"{n} {_USAGE_BELOW_TEXT}" if n else None


def _retried(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    if not d.retried:
        return None
    return (
        f"{d.retried} requests were retried after HTTP 429/503 ({d.retries} retries): the server was "
        "shedding load; their send lateness includes the waits (times are the final attempt's)"
    )


_ANOMALY_TEXT = {
    Anomaly.MISSING_DONE.value: "streams ended without data: [DONE] (after their finish_reason; counted as ok)",
    Anomaly.MISSING_FINISH_REASON.value: (
        "streams ended with data: [DONE] but no finish_reason (counted as ok; the server may have cut them "
        "short: compare output tokens with max_tokens)"
    ),
    Anomaly.NOT_STREAMED.value: (
        "responses came back as one JSON body although streaming was asked (counted as ok, with no TTFT or ITL: "
        "those figures cover only the streamed responses; check --extra-body for \"stream\" and the server's "
        "streaming support)"
    ),
}
_USAGE_BELOW_TEXT = (
    "responses reported usage.completion_tokens below their token-bearing chunk count: "
    "usage ignored for them, output tokens counted another way"
)


def _anomalies(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    counts = {a: n for a, n in d.anomalies.items() if a != Anomaly.USAGE_BELOW_CHUNKS.value}  # that: _usage_below
    if not counts:
        return None
    return "; ".join(f"{n} {_ANOMALY_TEXT.get(a, a)}" for a, n in sorted(counts.items()))


def _unstable(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    a = b.across_iterations
    if a is None or a.verdict != "unstable":
        return None
    return a.message


def _not_steady(b: Benchmark, cfg: RunConfig, d: PointDigest) -> str | None:
    """An open-loop point whose server completed less than arrived in its steady window: its queue grew."""
    t = b.summary.throughput
    if b.summary.schedule is None or t.sustained_requests_per_s is None or not t.window_arrivals_per_s:
        return None
    if t.sustained_requests_per_s >= (1 - keep_up_slack(window_arrivals(t))) * t.window_arrivals_per_s:
        return None
    return (f"the server did not keep up: it completed {t.sustained_requests_per_s:.3g} of "
            f"{t.window_arrivals_per_s:.3g} req/s arriving, so its queue grew through the point and no steady "
            "state was reached; its latencies grow with the point's length (`tokspeed capacity` finds the rate it sustains)")


CHECKS: tuple[Check, ...] = (
    _errors, _too_few, _late, _late_capped, _ignored_max_tokens, _early_stops, _chunk_counted, _usage_below, _retried,
    _anomalies, _unstable, _not_steady,
)


# the diagnosis rule that says the same as a check, with its evidence (tokspeed.diagnosis)
COVERED_BY: dict[Check, str] = {
    _errors: "errors",
    _retried: "errors",
    _too_few: "too_few_samples",
    _early_stops: "output_length",
    _ignored_max_tokens: "output_length",
    _chunk_counted: "token_count",
    _usage_below: "token_count",
    _late: "client_bound",
    _unstable: "unstable",
    _not_steady: "server_bound",
}


def measurement_warnings(
    b: Benchmark, cfg: RunConfig, records: Iterable[RequestRecord] | PointDigest
) -> list[tuple[str | None, str]]:
    """Every check's warning, each with the diagnosis rule that covers its topic (None: no rule does).

    `records`: the point's records (any iterable, read once) or their `digest_point` already built.

    The runner leaves out a warning when its rule fired for the same point: the finding says it
    with its evidence.
    """
    digest = records if isinstance(records, PointDigest) else digest_point(records)
    return [(COVERED_BY.get(check), w) for check in CHECKS if (w := check(b, cfg, digest))]
