"""Token counts: responses of the wrong length (output_length) and counts that disagree (token_count).

* output_length (point rule), warning:
  - ≥ `early_stop_share` of completed responses with a max_tokens ended before it
    with a finish_reason other than "length" (the model's EOS or a stop string):
    output lengths vary, so throughput and TPOT are not comparable between runs;
  - any usage-counted response longer than max_tokens: the server ignores max_tokens.
* token_count (point rule):
  - warning: responses whose usage.completion_tokens was below their count of
    token-bearing chunks (anomaly `usage_below_chunks`; usage was ignored for them);
  - warning: output tokens counted as one per chunk (no usage, no tokenizer): an
    undercount when chunks carry several tokens (responses whose usage was given but
    wrong are the first finding's, not this one's; "drop --no-usage" only when it was given);
  - warning: one point counted output tokens in more than one way, the responses
    with a wrong usage left out (the first finding says how they were counted);
  - info: input tokens approximated from characters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from tokspeed.diagnosis.context import PointData, pct, share
from tokspeed.diagnosis.thresholds import Thresholds
from tokspeed.results.findings import Finding

FIXED_LENGTH = (
    "for fixed output lengths pass --extra-body '{\"ignore_eos\": true}' (vLLM, SGLang, TensorRT-LLM, "
    "llama.cpp) or '{\"min_tokens\": N}' (vLLM); otherwise compare runs by tokens per second, not requests"
)
EXACT_COUNT = "pass --tokenizer PATH (the model's tokenizer.json or directory) for exact counts"


# output_length ----------------------------------------------------------------------
def output_length(p: PointData, t: Thresholds) -> list[Finding]:
    found = [_early_stops(p, t), _too_long(p)]
    return [f for f in found if f is not None]


def _early_stops(p: PointData, t: Thresholds) -> Finding | None:
    d = p.digest  # asked: measured ok responses with a max_tokens and an output count; short: stopped_early
    part = share(d.short, d.asked)
    if not d.short or part < t.early_stop_share:
        return None
    reasons = d.short_reasons
    mean_out = d.short_output_sum / d.short
    mean_max = d.short_max_sum / d.short
    return Finding(
        rule="output_length",
        severity="warning",
        title=f"{d.short} of {d.asked} responses ({pct(part)}) stopped before max_tokens "
        f"(finish_reason {', '.join(f'{k} {v}' for k, v in reasons.most_common())}): "
        f"{mean_out:.0f} tokens on average of {mean_max:.0f} asked",
        evidence={"short": d.short, "responses": d.asked, "share": part, "mean_output_tokens": mean_out,
                  "mean_max_tokens": mean_max, "finish_reason_stop": reasons.get("stop", 0),
                  "ignore_eos_sent": int(_ignore_eos(p.config)), "threshold_share": t.early_stop_share},
        advice=_early_advice(p.config),
        benchmark=p.index,
    )


def _ignore_eos(config: Mapping[str, Any]) -> bool:
    body = config.get("extra_body") or {}
    return bool(body.get("ignore_eos")) or bool(body.get("min_tokens"))


def _early_advice(config: Mapping[str, Any]) -> str:
    if _ignore_eos(config):
        return ("ignore_eos / min_tokens were sent but the server still stopped early: it does not support them "
                "(hosted APIs, some servers); compare runs by tokens per second, not requests")
    return FIXED_LENGTH


def _too_long(p: PointData) -> Finding | None:
    d = p.digest  # the usage-counted responses longer than max_tokens; worst: the largest excess, first seen
    if not d.too_long:
        return None
    return Finding(
        rule="output_length",
        severity="warning",
        title=f"{d.too_long} of {d.asked} responses were longer than max_tokens "
        f"(up to {d.worst_output} for {d.worst_max}): the server ignores max_tokens",
        evidence={"longer": d.too_long, "responses": d.asked, "worst_output_tokens": d.worst_output,
                  "worst_max_tokens": d.worst_max},
        advice="check the server's max_tokens handling (some take max_completion_tokens or n_predict); "
        "compare runs by tokens per second, not requests",
        benchmark=p.index,
    )


# token_count ----------------------------------------------------------------------
def token_count(p: PointData, t: Thresholds) -> list[Finding]:
    found = [_usage_below_chunks(p), _chunk_counted(p), _mixed_sources(p), _approx_input(p)]
    return [f for f in found if f is not None]


def _usage_below_chunks(p: PointData) -> Finding | None:
    d = p.digest
    if not d.usage_below:
        return None
    return Finding(
        rule="token_count",
        severity="warning",
        title=f"{d.usage_below} of {d.ok} responses reported usage.completion_tokens below their number of token "
        "chunks: the server's usage is wrong, and was ignored for them",
        evidence={"responses": d.usage_below, "completed": d.ok,
                  "counted_instead_by": _described(_sources(d.usage_below_sources))},
        advice=f"{EXACT_COUNT}; report the wrong usage to the server's maintainers",
        benchmark=p.index,
    )


def _chunk_counted(p: PointData) -> Finding | None:
    d = p.digest
    if not d.chunk_counted:
        return None
    return Finding(
        rule="token_count",
        severity="warning",
        title=f"{d.chunk_counted} of {d.ok} responses had no usage: output tokens were counted as one per chunk, "
        "an undercount wherever a chunk carried several tokens",
        evidence={"chunk_counted": d.chunk_counted, "completed": d.ok},
        advice=(f"let the server report usage (drop --no-usage) or {EXACT_COUNT}" if _no_usage(p.config) else
                f"the server sent no usage although tokspeed asked for it (stream_options.include_usage): "
                f"{EXACT_COUNT}"),
        benchmark=p.index,
    )


def _no_usage(config: Mapping[str, Any]) -> bool:
    """--no-usage was given (the resolved config's include_usage is False)."""
    return config.get("include_usage") is False


def _mixed_sources(p: PointData) -> Finding | None:
    d = p.digest
    sources = _sources(d.sources - d.usage_below_sources)  # a wrong usage's fallback is _usage_below_chunks's fact
    if len(sources) < 2:
        return None
    described = _described(sources)
    return Finding(
        rule="token_count",
        severity="warning",
        title=f"output tokens were counted in {len(sources)} ways within one load point ({described}): "
        "token throughput mixes exact and estimated counts",
        evidence={f"source_{k}": v for k, v in sources.items()},
        advice=EXACT_COUNT,
        benchmark=p.index,
    )


def _approx_input(p: PointData) -> Finding | None:
    d = p.digest
    if not d.approx_input:
        return None
    return Finding(
        rule="token_count",
        severity="info",
        title=f"input tokens of {d.approx_input} of {d.ok} responses were approximated from characters "
        "(the server reported no prompt usage): input and total token throughput are estimates",
        evidence={"approximated": d.approx_input, "completed": d.ok},
        advice=EXACT_COUNT,
        benchmark=p.index,
    )


def _sources(counts: Counter[str]) -> dict[str, int]:
    """Output-token sources, most used first (ties: first seen first)."""
    return dict(counts.most_common())


def _described(sources: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sources.items()) or "none"
