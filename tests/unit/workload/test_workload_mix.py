"""Model mixes and client-side cancellation: parsing, the choices per request index, config, summaries."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from typing import Any

import pytest
from pydantic import ValidationError

from tokspeed.backends.worker_protocol import fill, spec_from_wire, spec_to_wire
from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError
from tokspeed.metrics import summarize
from tokspeed.records import RequestRecord, RequestSpec, Status, TokenSource
from tokspeed.results.groups import ModelSummaries
from tokspeed.results.run_json import Benchmark
from tokspeed.runner.factory import build_workload
from tokspeed.workload.mix import (
    CancelChooser,
    ChoiceWorkload,
    ModelChooser,
    ModelShare,
    parse_models,
    smooth_cycle,
    with_choices,
)

MS = 1_000_000


def _unit(seed: int, salt: str, index: int) -> float:
    """The documented draw, written out again: BLAKE2b-64 of "seed:salt:index" over 2^64."""
    return int(hashlib.blake2b(f"{seed}:{salt}:{index}".encode(), digest_size=8).hexdigest(), 16) / 2**64


def _within_binomial(count: int, n: int, p: float, z: float = 4.5) -> bool:
    """|count − np| ≤ z·sqrt(np(1−p)) (z = 4.5: a false alarm about once in 150,000 runs)."""
    return abs(count - n * p) <= z * math.sqrt(n * p * (1 - p))


# parsing -----------------------------------------------------------------------------------
def test_model_mix_parses_names_and_weights() -> None:
    assert parse_models("a") == (ModelShare("a", 1.0),)
    assert parse_models("a, b") == (ModelShare("a"), ModelShare("b"))
    assert parse_models("llama/3-8b=3,sql-lora=1.5") == (ModelShare("llama/3-8b", 3.0), ModelShare("sql-lora", 1.5))


@pytest.mark.parametrize("text", ["a,,b", "=3", "a=x", "a=0", "a=-1", "a=inf", "a,a", "a=1,b=nan"])
def test_model_mix_refuses_bad_text(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_models(text)


# round-robin ---------------------------------------------------------------------------------
def test_smooth_round_robin_interleaves_exact_weights() -> None:
    assert smooth_cycle([3, 1]) == [0, 0, 1, 0]
    assert smooth_cycle([1, 1]) == [0, 1]
    for weights in ([3, 1], [5, 2, 1], [1, 7], [4, 4, 2]):
        cycle = smooth_cycle(weights)
        assert Counter(cycle) == dict(enumerate(weights))  # exact per cycle
        total = sum(weights)
        for n in range(1, total + 1):  # and spread: every prefix within one request of its share
            counts = Counter(cycle[:n])
            assert all(abs(counts[k] - n * w / total) < 1 for k, w in enumerate(weights)), (weights, n)


def test_round_robin_takes_the_cycle_by_request_index() -> None:
    chooser = ModelChooser(parse_models("a=3,b=1"), "round-robin")
    assert [chooser.model(i) for i in range(8)] == ["a", "a", "b", "a"] * 2
    assert Counter(chooser.model(i) for i in range(400)) == {"a": 300, "b": 100}


def test_round_robin_needs_whole_weights() -> None:
    with pytest.raises(ConfigError, match="whole-number"):
        ModelChooser(parse_models("a=1.5,b=1"), "round-robin")
    ModelChooser(parse_models("a=1.5,b=1"), "random")  # fine for draws


# random -----------------------------------------------------------------------------------
def test_random_policy_is_the_documented_draw_and_keeps_the_weights() -> None:
    chooser = ModelChooser(parse_models("a=3,b=1"), "random", seed=7)
    n = 4000
    got = [chooser.model(i) for i in range(n)]
    assert got == ["a" if _unit(7, "model", i) < 0.75 else "b" for i in range(n)]
    count = got.count("a")
    assert _within_binomial(count, n, 0.75)
    assert not _within_binomial(count, n, 0.5)  # the bound can fail: equal weights are far outside it
    assert [ModelChooser(parse_models("a=3,b=1"), "random", seed=8).model(i) for i in range(n)] != got


# cancellation -------------------------------------------------------------------------------
def test_cancel_choice_is_seeded_and_keeps_its_share() -> None:
    chooser = CancelChooser(0.2, 150 * MS, seed=3)
    n = 4000
    chosen = [i for i in range(n) if chooser.after_ns(i) is not None]
    assert chosen == [i for i in range(n) if _unit(3, "cancel", i) < 0.2]
    assert {chooser.after_ns(i) for i in chosen} == {150 * MS}
    assert _within_binomial(len(chosen), n, 0.2) and not _within_binomial(len(chosen), n, 0.3)


class _Prompts:
    def request(self, index: int) -> RequestSpec:
        return RequestSpec(index=index, prompt=f"p{index}", max_tokens=4)

    def describe(self) -> dict[str, object]:
        return {"name": "prompts"}


def test_choice_workload_sets_model_and_abort_and_keeps_the_prompt() -> None:
    inner = _Prompts()
    assert with_choices(inner, None, None) is inner
    w = ChoiceWorkload(inner, ModelChooser(parse_models("a,b")), CancelChooser(1.0, 5 * MS))
    spec = w.request(3)
    assert (spec.prompt, spec.max_tokens, spec.model, spec.cancel_after_ns) == ("p3", 4, "b", 5 * MS)
    d = w.describe()
    assert d["models"] == {"policy": "round-robin", "weights": {"a": 1.0, "b": 1.0}, "shares": {"a": 0.5, "b": 0.5}}
    assert d["cancel"] == {"share": 1.0, "after_ms": 5.0}
    from tokspeed.reports.summary_text import choice_lines

    assert choice_lines(d) == ["Models    a 50%, b 50% (round-robin)",
                               "Cancel    100% of requests, 5 ms after sending (by the client, closing the connection)"]
    assert choice_lines(inner.describe()) == []


# config -------------------------------------------------------------------------------------
def test_a_mix_in_model_sets_models_and_the_first_name() -> None:
    cfg = RunConfig(target="http://127.0.0.1:1/v1", model="a=3,b=1", model_policy="random")
    assert cfg.model == "a" and cfg.model_mix
    assert [(m.name, m.weight) for m in cfg.models or ()] == [("a", 3.0), ("b", 1.0)]
    again = RunConfig.model_validate({k: v for k, v in cfg.redacted_dump().items() if k != "api_key_set"})
    assert again.models == cfg.models and again.model == "a"  # a config rebuilt from its dump (--workers)
    listed = RunConfig(models=[{"name": "x", "weight": 2}, {"name": "y"}])
    assert listed.model == "x" and listed.model_mix


def test_one_model_is_no_mix_and_its_workload_is_untouched() -> None:
    cfg = RunConfig(target="http://127.0.0.1:1/v1", model="llama", dataset="synthetic", input_tokens="8")
    assert cfg.models is None and not cfg.model_mix
    spec = build_workload(cfg).request(0)
    assert spec.model is None and spec.cancel_after_ns is None  # the backend's own model, as ever


@pytest.mark.parametrize("fields, message", [
    ({"cancel_share": 0.1}, "go together"),
    ({"cancel_after_s": 0.2}, "go together"),
    ({"cancel_share": 0.1, "cancel_after_s": 700}, "shorter than timeout"),
    ({"cancel_share": 0, "cancel_after_s": 1}, "greater than 0"),
    ({"model": "a,b", "api": "tgi"}, "OpenAI-compatible"),
    ({"model": "a,b", "multi_turn": 2}, "multi_turn"),
    ({"model": "a,b", "models": [{"name": "a"}]}, "not both"),
    ({"model": "c", "models": [{"name": "a"}, {"name": "b"}]}, "not among"),
])  # fmt: skip
def test_mix_and_cancel_config_refusals(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RunConfig(**fields)


def test_cancel_after_takes_a_duration() -> None:
    assert RunConfig(cancel_share=0.5, cancel_after_s="250ms").cancel_after_s == 0.25


def test_in_process_targets_refuse_mix_and_cancel() -> None:
    from tokspeed.runner.factory import build_backend

    cfg = RunConfig(cancel_share=0.5, cancel_after_s=1)  # no target: the embedded model
    with pytest.raises(ConfigError, match="needs an HTTP target"):
        build_backend(cfg, build_workload(cfg))


# records across client processes ------------------------------------------------------------------
def test_worker_wire_carries_model_and_abort_and_the_parent_keeps_its_model_tag() -> None:
    spec = RequestSpec(index=2, prompt="x", model="b", cancel_after_ns=7 * MS)
    assert spec_from_wire(spec_to_wire(spec)) == spec
    parent = RequestRecord(index=2, iteration=1, warmup=False, scheduled_ns=0, model="b")
    child = RequestRecord(index=2, iteration=1, warmup=False, scheduled_ns=0, status=Status.CANCELLED, sent_ns=5)
    fill(parent, child.to_json_dict(0))
    assert parent.model == "b" and parent.status is Status.CANCELLED and parent.sent_ns == 5


# per-model summaries -------------------------------------------------------------------------------
def _rec(index: int, model: str, ttft_ms: int, status: Status = Status.OK) -> RequestRecord:
    first = ttft_ms * MS
    return RequestRecord(
        index=index, iteration=1, warmup=False, scheduled_ns=0, sent_ns=0, first_token_ns=first, first_content_ns=first,
        end_ns=first + MS, chunk_ns=[first, first + MS], output_tokens=2, output_tokens_source=TokenSource.USAGE,
        status=status, model=model,
    )  # fmt: skip


def test_model_summaries_split_the_records_by_model() -> None:
    cfg = RunConfig(target="http://127.0.0.1:1/v1", model="a=3,b=1")
    records = [_rec(0, "a", 10), _rec(1, "a", 30), _rec(2, "b", 50), _rec(3, "a", 20, Status.CANCELLED)]
    groups = ModelSummaries(cfg)
    for r in records + [RequestRecord(index=9, iteration=0, warmup=True, scheduled_ns=0, model="a")]:
        groups.add(r)
    bench = Benchmark(name="p", profile={}, summary=summarize(records))
    groups.fill(bench)
    assert bench.models is not None and list(bench.models) == ["a", "b"]
    a, b = bench.models["a"], bench.models["b"]
    assert a.profile == {"weight": 3.0, "share": 0.75, "policy": "round-robin"}
    assert a.summary.requests.model_dump() == {"completed": 2, "errored": 0, "incomplete": 0, "total": 3, "cancelled": 1}
    assert a.summary.ttft_ms.mean == 20 and b.summary.ttft_ms.mean == 50 and b.summary.requests.total == 1


# the abort timer --------------------------------------------------------------------------------
def test_the_client_abort_is_never_early_even_when_the_loop_timer_is() -> None:
    """uvloop's timers fire up to ~1.5 ms early; the abort waits out the rest (a floor on end − sent)."""
    import asyncio
    from time import perf_counter_ns

    from tokspeed.backends.deadline import ClientCancel

    async def main() -> tuple[int, int, bool]:
        loop = asyncio.get_running_loop()
        real = loop.call_later
        loop.call_later = lambda delay, cb, *args: real(delay / 2, cb, *args)  # type: ignore[method-assign,assignment]
        sent = perf_counter_ns()
        abort = ClientCancel(5 * MS)
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            return sent, perf_counter_ns(), abort.absorb()
        finally:
            abort.disarm()
        return sent, 0, False

    sent, cancelled_at, absorbed = asyncio.run(main())
    assert absorbed and cancelled_at - sent >= 5 * MS
    assert cancelled_at - sent < 500 * MS  # and it did fire (the sleep was 1 s)
