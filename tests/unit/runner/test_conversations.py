"""Multi-turn conversations, shared prefixes, the simulator's prefix cache and their summaries."""

from __future__ import annotations

import asyncio
import itertools
import time

import numpy as np
import pytest

from tokspeed.config import config_from_sources
from tokspeed.errors import ConfigError
from tokspeed.metrics import conversations as conv
from tokspeed.records import RequestRecord, RequestSpec, Status
from tokspeed.runner.conversations import (
    ConversationPlan,
    conversation_plan,
    shape_workload,
)
from tokspeed.sim.config import SimConfig
from tokspeed.sim.prefix_cache import PrefixCache, prompt_tokens, with_cached
from tokspeed.sim.request import parse_request
from tokspeed.sim.schedule import make_plan
from tokspeed.workload.conversation import (
    ConversationWorkload,
    ThinkTime,
    parse_think_time,
)
from tokspeed.workload.prefix import UNIQUE, Prefixes, PrefixWorkload, SharedPrefix
from tokspeed.workload.source import load_workload
from tokspeed.workload.tokens import approx_token_count


def _synthetic(api: str = "chat", n: int = 30) -> object:
    return load_workload("synthetic", api=api, input_tokens=str(n), output_tokens="12", seed=3)


# think times ---------------------------------------------------------------------------------
def test_think_time_forms() -> None:
    assert parse_think_time("2s") == ThinkTime("constant", 2.0)
    assert parse_think_time(1.5) == ThinkTime("constant", 1.5)
    assert parse_think_time("constant:250ms") == ThinkTime("constant", 0.25)
    assert parse_think_time("exponential:3s") == ThinkTime("exponential", 3.0)
    assert parse_think_time("uniform:1s,3s") == ThinkTime("uniform", 1.0, 3.0)
    assert parse_think_time(None) == ThinkTime()
    for bad in ("soon", "uniform:3s", "uniform:3s,1s", "gamma:2s", "exponential:-1"):
        with pytest.raises(ConfigError):
            parse_think_time(bad)


def test_think_time_draws_are_seeded_and_follow_their_distribution() -> None:
    assert parse_think_time("2s").draw(0, 5, 2) == 2.0
    expo = parse_think_time("exponential:2s")
    draws = np.array([expo.draw(7, c, t) for c in range(2000) for t in (2, 3)])
    assert draws.mean() == pytest.approx(2.0, rel=0.06) and draws.min() >= 0
    assert expo.draw(7, 11, 3) == expo.draw(7, 11, 3) != expo.draw(8, 11, 3)
    uni = parse_think_time("uniform:1s,3s")
    u = np.array([uni.draw(0, c, 2) for c in range(2000)])
    assert u.min() >= 1 and u.max() <= 3 and u.mean() == pytest.approx(2.0, rel=0.03)


# conversations --------------------------------------------------------------------------------
def test_each_turn_sends_the_history_with_the_real_answers() -> None:
    base = _synthetic()
    work = ConversationWorkload(base, turns=3, api="chat")  # type: ignore[arg-type]
    c = work.start(0, key=0)
    first = c.next_turn(0)
    assert first.keep_text and [m["role"] for m in first.messages or ()] == ["user"]
    assert first.input_tokens == 30 and first.max_tokens == base.request(0).max_tokens  # type: ignore[attr-defined]
    c.answered(" the cat sat")
    second = c.next_turn(1)
    roles = [m["role"] for m in second.messages or ()]
    assert roles == ["user", "assistant", "user"]
    assert (second.messages or ())[1]["content"] == " the cat sat"
    assert (second.messages or ())[2]["content"] == base.request(1).prompt_text()  # type: ignore[attr-defined]
    assert second.input_tokens == 30 + 3 + 30  # previous prompt + the answer + the new user text
    assert not c.done
    c.answered(" and the dog")
    third = c.next_turn(2)
    assert third.input_tokens == 63 + 3 + 30 and c.done
    assert first.messages is not None and len(first.messages) == 1  # earlier specs are not changed later


def test_completions_conversations_join_the_history_and_a_prefix_opens_it() -> None:
    prefixes = Prefixes(SharedPrefix(groups=2, tokens=50, reuse=1.0), seed=1)
    work = ConversationWorkload(_synthetic("completions"), turns=2, api="completions", prefixes=prefixes)  # type: ignore[arg-type]
    c = work.start(4, key=8)
    spec = c.next_turn(8)
    assert spec.messages is None and spec.prompt is not None
    assert spec.prefix_group == prefixes.group_of(8) >= 0
    assert spec.prompt.startswith(prefixes.text(spec.prefix_group, 8)[0] + "\n")
    assert spec.input_tokens == 50 + 30 == approx_token_count(spec.prompt)
    assert work.describe()["multi_turn"] == {"turns": 2, "think_time": "constant:0s", "history": "client"}


# shared prefixes ------------------------------------------------------------------------------
def test_prefix_reuse_share_and_groups() -> None:
    prefixes = Prefixes(SharedPrefix(groups=4, tokens=64, reuse=0.8), seed=0)
    groups = np.array([prefixes.group_of(i) for i in range(4000)])
    assert (groups != UNIQUE).mean() == pytest.approx(0.8, abs=0.025)
    counts = np.bincount(groups[groups != UNIQUE], minlength=4)
    assert len(counts) == 4 and counts.min() > 0.8 * counts.mean()
    assert all(prefixes.group_of(i) == prefixes.group_of(i) for i in range(50))
    none = Prefixes(SharedPrefix(groups=4, tokens=64, reuse=0.0))
    assert {none.group_of(i) for i in range(200)} == {UNIQUE}


def test_prefix_texts_have_the_asked_length_shared_within_a_group_unique_otherwise() -> None:
    prefixes = Prefixes(SharedPrefix(groups=2, tokens=100), seed=5)
    g0, n = prefixes.text(0, 1)
    assert n == 100 == approx_token_count(g0) and prefixes.text(0, 999)[0] == g0 != prefixes.text(1, 1)[0]
    u1, u2 = prefixes.text(UNIQUE, 1)[0], prefixes.text(UNIQUE, 2)[0]
    assert u1 != u2 and u1.split()[0] != u2.split()[0]  # they differ in the first block already
    assert approx_token_count(u1) == 100


def test_prefix_workload_prepends_and_tags() -> None:
    base = _synthetic()
    w = PrefixWorkload(base, Prefixes(SharedPrefix(groups=3, tokens=40, reuse=0.5), seed=2))  # type: ignore[arg-type]
    for i in range(20):
        spec = w.request(i)
        assert spec.prefix_group == w.prefixes.group_of(i)
        assert spec.messages is not None and spec.messages[0]["role"] == "system"
        assert spec.messages[1:] == base.request(i).messages  # type: ignore[attr-defined]
        assert spec.input_tokens == 40 + 30
    comp = PrefixWorkload(_synthetic("completions"), Prefixes(SharedPrefix(groups=1, tokens=16)))  # type: ignore[arg-type]
    assert comp.request(0).prompt is not None and approx_token_count(comp.request(0).prompt or "") == 16 + 30
    assert w.describe()["shared_prefix"] == {"groups": 3, "tokens": 40, "reuse": 0.5}


def test_shared_prefix_rejects_bad_shapes() -> None:
    for kw in ({"groups": 0}, {"groups": 1, "tokens": 0}, {"groups": 1, "reuse": 1.5}):
        with pytest.raises(ConfigError):
            SharedPrefix(**kw)  # type: ignore[arg-type]


# the simulator's prefix cache -----------------------------------------------------------------
@pytest.mark.parametrize("text", ["hello world", "a bb ccccc ddddddddd", "中文 mixed中text 和", "  \n x\ty  ", ""])
def test_sim_tokens_count_like_the_approximation(text: str) -> None:
    assert len(prompt_tokens(text)) == approx_token_count(text)


def test_prefix_cache_hits_whole_leading_blocks_and_never_the_whole_prompt() -> None:
    cache = PrefixCache(capacity_tokens=10_000, block_tokens=16)
    a = [f"a{i}" for i in range(40)]
    assert cache.lookup_and_insert(a) == 0
    assert cache.lookup_and_insert(a) == 32  # 2 whole blocks (the 8 left over are not a block)
    b = [f"b{i}" for i in range(32)]
    cache.lookup_and_insert(b)
    assert cache.lookup_and_insert(b) == 16  # a 32-token prompt: its last token is always computed
    grown = a + ["x"] * 30
    assert cache.lookup_and_insert(grown) == 32
    assert cache.lookup_and_insert(grown) == 64
    other_start = ["z"] + a[1:]
    assert cache.lookup_and_insert(other_start) == 0  # blocks chain: a changed first block misses all


def test_prefix_cache_evicts_least_recently_used_blocks() -> None:
    cache = PrefixCache(capacity_tokens=64, block_tokens=16)  # 4 blocks
    a, b = [f"a{i}" for i in range(33)], [f"b{i}" for i in range(33)]
    cache.lookup_and_insert(a)
    cache.lookup_and_insert(b)
    assert len(cache) == 4 and cache.lookup_and_insert(a) == 32  # a is now the most recent
    c = [f"c{i}" for i in range(33)]
    cache.lookup_and_insert(c)  # evicts b's blocks
    assert cache.lookup_and_insert(b) == 0 and len(cache) == 4


def test_cached_tokens_skip_prefill_and_show_in_usage() -> None:
    cfg = SimConfig(ttft_ms=10, per_prompt_token_us=100)
    req = parse_request("chat", b'{"messages": [{"role": "user", "content": "hi the you"}], "max_tokens": 3}')
    assert req.prompt_text == "hi the you" and req.prompt_tokens == 3
    full = make_plan(cfg, req).timing.prefill_ns
    assert full - make_plan(cfg, req, cached_tokens=2).timing.prefill_ns == 2 * 100_000
    assert with_cached({"prompt_tokens": 3}, 2)["prompt_tokens_details"] == {"cached_tokens": 2}
    assert "prompt_tokens_details" not in with_cached({"prompt_tokens": 3}, None)
    ids = parse_request("completions", b'{"prompt": [1, 2, 3]}')
    assert ids.prompt_text is None and ids.prompt_tokens == 3


# summaries ------------------------------------------------------------------------------------
def _rec(i: int, *, turn: int | None = None, conversation: int | None = None, ttft_ms: float = 10.0,
         cached: int | None = None, group: int | None = None, status: Status = Status.OK) -> RequestRecord:
    sent = 1_000_000_000 * (i + 1)
    first = sent + int(ttft_ms * 1e6)
    return RequestRecord(
        index=i, iteration=1, warmup=False, scheduled_ns=sent, sent_ns=sent, first_token_ns=first,
        first_content_ns=first, end_ns=first + 5_000_000, chunk_ns=[first], input_tokens=100, output_tokens=1,
        status=status, turn=turn, conversation=conversation, cached_tokens=cached, prefix_group=group,
    )


def test_by_turn_and_conversation_totals() -> None:
    recs = [_rec(0, turn=1, conversation=0, ttft_ms=30), _rec(1, turn=2, conversation=0, ttft_ms=10, cached=64),
            _rec(2, turn=1, conversation=1, ttft_ms=20), _rec(3, turn=2, conversation=1, status=Status.ERROR)]
    ok = [r for r in recs if r.ok]
    turns = conv.by_turn(ok)
    assert turns is not None and [t.turn for t in turns] == [1, 2]
    assert turns[0].requests == 2 and turns[0].ttft_ms.mean == pytest.approx(25)
    assert turns[1].cached_tokens.mean == 64 and turns[0].cached_tokens.count == 0
    totals = conv.conversations(recs, None)
    assert totals is not None and totals.conversations == 2 and totals.completed == 1
    assert totals.turns.min == 1 and totals.turns.max == 2
    assert totals.duration_s.max == pytest.approx(1 + 0.010 + 0.005)  # first sent to last end
    assert conv.by_turn([_rec(0)]) is None and conv.conversations([_rec(0)], None) is None


def test_prefix_cache_breakdown() -> None:
    recs = [_rec(0, ttft_ms=60, cached=0, group=0), _rec(1, ttft_ms=10, cached=500, group=0),
            _rec(2, ttft_ms=12, cached=500, group=1), _rec(3, ttft_ms=62, cached=0, group=UNIQUE)]
    pc = conv.prefix_cache(recs)
    assert pc is not None and pc.ttft_saved_ms == pytest.approx(61 - 11)
    assert pc.shared is not None and pc.shared.requests == 3 and pc.unique is not None and pc.unique.requests == 1
    assert pc.cached is not None and pc.cached.requests == 2 and pc.hit_rate == pytest.approx(1000 / 400)
    assert conv.prefix_cache([_rec(0)]) is None


# config, plan, records ------------------------------------------------------------------------
def test_config_rules_for_conversations() -> None:
    cfg = config_from_sources(None, {"multi_turn": 3, "think_time": 2, "concurrency": 4})
    assert cfg.think_time == "2" and conversation_plan(cfg) == ConversationPlan(kind="conversations", workers=4, turns=3)
    for bad in ({"multi_turn": 2, "rate": 3}, {"conversation_rate": 1}, {"think_time": "1s"},
                {"multi_turn": 2, "conversation_rate": 1, "concurrency": 2}, {"multi_turn": 2, "think_time": "x"},
                {"multi_turn": 2, "max_concurrency": 3}):
        with pytest.raises(ConfigError):
            config_from_sources(None, bad)
    open_loop = config_from_sources(None, {"multi_turn": 2, "conversation_rate": 2.0, "max_concurrency": 5})
    plan = conversation_plan(open_loop)
    assert plan.describe()["conversation_rate"] == 2.0 and not plan.open_loop and open_loop.streams == 5
    assert "conversations/s" in plan.label()


def test_shape_workload_wraps_only_when_asked() -> None:
    base = _synthetic()
    assert shape_workload(base, config_from_sources(None, {})) is base
    assert isinstance(shape_workload(base, config_from_sources(None, {"shared_prefix_groups": 2})), PrefixWorkload)
    shaped = shape_workload(base, config_from_sources(None, {"multi_turn": 2, "shared_prefix_groups": 2, "think_time": "uniform:1s,2s"}))
    assert isinstance(shaped, ConversationWorkload) and shaped.prefixes is not None
    assert shaped.think == ThinkTime("uniform", 1.0, 2.0)


def test_new_record_fields_round_trip() -> None:
    r = _rec(0, turn=2, conversation=5, cached=32, group=UNIQUE)
    back = RequestRecord.from_json_dict(r.to_json_dict(123), 123)
    assert (back.turn, back.conversation, back.cached_tokens, back.prefix_group) == (2, 5, 32, UNIQUE)
    old = r.to_json_dict(0)
    for key in ("turn", "conversation", "cached_tokens", "prefix_group"):
        del old[key]
    assert RequestRecord.from_json_dict(old).turn is None  # files written before these fields still load
    assert RequestSpec(index=0).keep_text is False and RequestSpec(index=0).prefix_group is None


def test_openai_backend_reads_cached_tokens() -> None:
    from tokspeed.backends.openai_http import _cached_tokens, _on_event, _StreamState

    state = _StreamState(False)
    record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0)
    usage = b'{"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 8}}}'
    assert _on_event(usage, 1, record, state) is False
    assert _cached_tokens(state.usage_cached) == 8
    assert _cached_tokens({"cached_tokens": -1}) is None and _cached_tokens(None) is None and _cached_tokens([1]) is None


# the conversation runner, with a fake backend ----------------------------------------------------
class _AnsweringBackend:
    """Answers each request with "a<index>" after `delay_s`; `texts=False` returns no text; fails `fail`."""

    def __init__(self, delay_s: float = 0.005, texts: bool = True, fail: frozenset[int] = frozenset()) -> None:
        self.delay_s, self.texts, self.fail = delay_s, texts, fail
        self.specs: list[RequestSpec] = []
        self.in_flight = self.max_in_flight = 0

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        record.sent_ns = time.perf_counter_ns()
        self.specs.append(spec)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(self.delay_s)
        self.in_flight -= 1
        record.end_ns = time.perf_counter_ns()
        if spec.index in self.fail:
            record.status = Status.ERROR
        elif self.texts and spec.keep_text:
            record.output_text = f"a{spec.index}"


def _run_conversations(backend: _AnsweringBackend, plan: object, phase: object, turns: int = 3, think: str = "0") -> list[RequestRecord]:
    from tokspeed.runner.conversations import run_conversations

    work = ConversationWorkload(_synthetic(), turns=turns, think=parse_think_time(think), seed=1)  # type: ignore[arg-type]
    out: list[RequestRecord] = []
    asyncio.run(run_conversations(plan, phase, backend, work, out.append, lambda r: None))  # type: ignore[arg-type]
    return out


def test_runner_feeds_each_answer_into_the_next_turn_and_tags_records() -> None:
    from tokspeed.runner.loops import Phase

    backend = _AnsweringBackend()
    out = _run_conversations(backend, ConversationPlan(kind="conversations", workers=2, turns=3),
                             Phase(iteration=1, warmup=False, n=4, duration_s=None), think="20ms")
    assert len(out) == 12 and backend.max_in_flight == 2  # two users, one turn in flight each
    assert sorted((r.conversation, r.turn) for r in out) == [(c, t) for c in range(4) for t in (1, 2, 3)]
    by_index = {s.index: s for s in backend.specs}
    for r in out:
        assert r.index == r.conversation * 3 + r.turn - 1  # type: ignore[operator]
        msgs = by_index[r.index].messages or ()
        assert len(msgs) == 2 * (r.turn or 0) - 1
        assert [m["content"] for m in msgs[1::2]] == [f"a{r.index - k}" for k in range((r.turn or 1) - 1, 0, -1)]
    assert [r.output_text is not None for r in sorted(out, key=lambda r: r.index)][:4] == [True, True, True, False]
    for c in range(4):
        turns = sorted((r for r in out if r.conversation == c), key=lambda r: r.turn or 0)
        for prev, cur in itertools.pairwise(turns):
            assert cur.scheduled_ns - (prev.end_ns or 0) >= 20_000_000  # the think time


def test_runner_ends_a_conversation_at_a_failed_turn_and_refuses_a_backend_without_texts() -> None:
    from tokspeed.runner.loops import Phase

    phase = Phase(iteration=1, warmup=False, n=2, duration_s=None)
    out = _run_conversations(_AnsweringBackend(fail=frozenset({1})), ConversationPlan(kind="conversations", workers=1, turns=3), phase)
    assert sorted((r.conversation, r.turn, r.ok) for r in out) == [
        (0, 1, True), (0, 2, False), (1, 1, True), (1, 2, True), (1, 3, True)]
    with pytest.raises(ConfigError, match="answer"):
        _run_conversations(_AnsweringBackend(texts=False), ConversationPlan(kind="conversations", workers=1, turns=3), phase)


def test_runner_open_loop_starts_conversations_on_schedule_and_warms_up_with_one_turn() -> None:
    from tokspeed.runner.loops import Phase

    plan = ConversationPlan(kind="conversations", rate=50.0, arrival="constant", turns=2)
    out = _run_conversations(_AnsweringBackend(delay_s=0.03), plan, Phase(iteration=1, warmup=False, n=3, duration_s=None), turns=2)
    firsts = sorted(r.scheduled_ns for r in out if r.turn == 1)
    assert [b - a for a, b in itertools.pairwise(firsts)] == [20_000_000, 20_000_000]  # not held back by answers
    assert len(out) == 6
    warm = _run_conversations(_AnsweringBackend(), plan, Phase(iteration=0, warmup=True, n=3, duration_s=None, first_index=1000), turns=2)
    assert sorted(r.index for r in warm) == [1000, 1002, 1004] and all(r.turn == 1 and r.warmup for r in warm)
