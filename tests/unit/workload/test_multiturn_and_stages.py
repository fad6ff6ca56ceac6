"""Edge cases of native protocols, multi-turn conversations and scheduled loads (stages, classes).

Each test pins one bug that was found and fixed (see the assertions' comments for what was wrong).
"""

from __future__ import annotations

import asyncio
import time

from tokspeed.config import config_from_sources
from tokspeed.records import RequestRecord, RequestSpec, Status
from tokspeed.runner.conversations import (
    ConversationPlan,
    run_conversations,
    shape_workload,
)
from tokspeed.runner.loops import Phase
from tokspeed.workload.conversation import ConversationWorkload, parse_think_time
from tokspeed.workload.source import load_workload


class _Answering:
    """Answers every request at once with "a<index>" (the text the spec asks to keep)."""

    def __init__(self) -> None:
        self.specs: list[RequestSpec] = []

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        record.sent_ns = time.perf_counter_ns()
        self.specs.append(spec)
        await asyncio.sleep(0.001)
        record.end_ns = time.perf_counter_ns()
        record.status = Status.OK
        record.output_text = f"a{spec.index}"


def test_ollama_chat_conversations_send_the_history_as_chat_messages() -> None:
    # was: shape_workload passed the raw --api value ("ollama-chat") to ConversationWorkload, whose
    # `api == "chat"` test then flattened the whole history into one plain prompt (one user message)
    cfg = config_from_sources(None, {"api": "ollama-chat", "multi_turn": 2})
    base = load_workload("synthetic", api="chat", input_tokens="20", output_tokens="5", seed=1)
    work = shape_workload(base, cfg)
    assert isinstance(work, ConversationWorkload)
    conv = work.start(0, key=0)
    conv.next_turn(0)
    conv.answered(" the answer")
    second = conv.next_turn(1)
    assert second.messages is not None and [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert second.as_messages()[1] == {"role": "assistant", "content": " the answer"}


def test_a_long_think_time_does_not_outlast_the_phase_duration() -> None:
    # was: a conversation slept its whole think time even when the phase's duration ended during it,
    # so a 0.3 s phase with a 20 s think time lasted 20 s (and then sent nothing)
    backend = _Answering()
    work = ConversationWorkload(
        load_workload("synthetic", api="chat", input_tokens="20", output_tokens="5", seed=1),  # type: ignore[arg-type]
        turns=3, think=parse_think_time("20s"), seed=1,
    )
    out: list[RequestRecord] = []
    phase = Phase(iteration=1, warmup=False, n=None, duration_s=0.3)
    started = time.perf_counter()
    asyncio.run(run_conversations(ConversationPlan(kind="conversations", workers=2, turns=3), phase, backend,  # type: ignore[arg-type]
                                  work, out.append, lambda r: None))
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0, f"the phase ran {elapsed:.1f} s"
    assert out and all(r.turn == 1 and r.ok for r in out)  # the second turns were never due inside the phase


def test_older_llamacpp_final_event_still_gives_a_finish_reason() -> None:
    # was: llama.cpp builds before `stop_type` (they send stopped_eos / stopped_word / stopped_limit
    # booleans in the final event) left every record's finish_reason empty
    from tokspeed.backends.native import NativeState, native_protocol

    protocol = native_protocol("llamacpp")
    assert protocol is not None
    final = {"content": "", "slot_id": 0, "stop": True, "tokens_predicted": 4, "tokens_evaluated": 9,
             "truncated": False, "stopped_eos": False, "stopped_word": False, "stopped_limit": True,
             "stopping_word": "", "timings": {"prompt_n": 9, "prompt_ms": 12.5, "predicted_n": 4, "predicted_ms": 30.0}}
    for flag, reason in (("stopped_limit", "limit"), ("stopped_eos", "eos"), ("stopped_word", "word")):
        event = {**final, "stopped_limit": False, flag: True}
        record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0)
        assert protocol.on_event(event, 1, record, NativeState(None)) is True
        assert record.finish_reason == reason
    record = RequestRecord(index=0, iteration=1, warmup=False, scheduled_ns=0)
    protocol.on_event({**final, "stop_type": "eos"}, 1, record, NativeState(None))
    assert record.finish_reason == "eos"  # a newer build's stop_type wins


def _turn(i: int, conversation: int, turn: int) -> RequestRecord:
    sent = 1_000_000_000 * (i + 1)
    return RequestRecord(index=i, iteration=1, warmup=False, scheduled_ns=sent, sent_ns=sent,
                         first_token_ns=sent + 10_000_000, first_content_ns=sent + 10_000_000,
                         end_ns=sent + 20_000_000, chunk_ns=[sent + 10_000_000], input_tokens=50,
                         output_tokens=1, turn=turn, conversation=conversation)


def test_conversations_count_as_completed_only_with_every_planned_turn() -> None:
    # was: the summary judged "every turn completed" against the longest conversation seen, so a run
    # of 4-turn conversations that all stopped after turn 2 (a --duration cut, failures) reported
    # every conversation as completed
    from tokspeed.results import build_benchmark

    records = [_turn(4 * c + t - 1, c, t) for c in range(3) for t in (1, 2)]
    bench = build_benchmark("p", {"kind": "conversations", "turns": 4, "users": 2}, records, [])
    conversations = bench.summary.conversations
    assert conversations is not None and conversations.conversations == 3
    assert conversations.completed == 0
    per_iteration = bench.iterations[0].summary.conversations
    assert per_iteration is not None and per_iteration.completed == 0
    whole = [_turn(4 * c + t - 1, c, t) for c in range(2) for t in (1, 2, 3, 4)]
    done = build_benchmark("p", {"kind": "conversations", "turns": 4, "users": 2}, whole, []).summary.conversations
    assert done is not None and done.completed == 2


def test_azure_timestamps_keep_their_utc_offset() -> None:
    # was: every digit after the dot, the offset's included, was taken as the fraction, so the
    # offset was cut away and "+01:00" read as UTC
    from tokspeed.workload.trace_formats import azure_time_s

    base = azure_time_s("2023-11-16 18:15:46.6805900", "")
    assert base == azure_time_s("2023-11-16 18:15:46.6805900+00:00", "")
    assert azure_time_s("2023-11-16 18:15:46.6805900+01:00", "") == base - 3600
    assert azure_time_s("2023-11-16 18:15:46.5Z", "") == azure_time_s("2023-11-16 18:15:46.500000", "")


def test_token_audit_keeps_every_conversation_answer_in_the_records() -> None:
    # was: the conversation runner dropped every answer past the first three from the records, so
    # --multi-turn --token-audit kept (and audited) three texts instead of all of them
    cfg = config_from_sources(None, {"multi_turn": 2, "token_audit": True})
    base = load_workload("synthetic", api="chat", input_tokens="20", output_tokens="5", seed=1)
    work = shape_workload(base, cfg)
    assert isinstance(work, ConversationWorkload)
    out: list[RequestRecord] = []
    phase = Phase(iteration=1, warmup=False, n=4, duration_s=None)
    asyncio.run(run_conversations(ConversationPlan(kind="conversations", workers=2, turns=2), phase, _Answering(),  # type: ignore[arg-type]
                                  work, out.append, lambda r: None))
    assert len(out) == 8 and all(r.output_text == f"a{r.index}" for r in out)
    plain = shape_workload(base, config_from_sources(None, {"multi_turn": 2}))
    out.clear()
    asyncio.run(run_conversations(ConversationPlan(kind="conversations", workers=2, turns=2), phase, _Answering(),  # type: ignore[arg-type]
                                  plain, out.append, lambda r: None))
    assert sum(r.output_text is not None for r in out) == 3  # without the audit: the first few samples only


def test_concurrency_stages_config_survives_its_own_dump() -> None:
    # was: the resolved config of concurrency stages (profile concurrency, concurrency = widest stage)
    # failed its own validation when rebuilt from its dump, which is what every --workers client
    # process does: `--stages 'concurrency=…' --workers 2` died at start
    from tokspeed.config import RunConfig
    from tokspeed.errors import ConfigError

    for given in ({"stages": "concurrency=2:5s,concurrency=4:5s"}, {"ramp": "concurrency=1..4:8s"},
                  {"stages": "rate=2:5s,rate=4:5s"}):
        cfg = config_from_sources(None, given)
        again = RunConfig.model_validate(cfg.model_dump(mode="json"))
        assert (again.profile, again.concurrency, again.rate) == (cfg.profile, cfg.concurrency, cfg.rate)
    for bad in ({"stages": "concurrency=2:5s", "concurrency": 8}, {"stages": "rate=2:5s", "concurrency": 2}):
        try:
            config_from_sources(None, bad)
        except (ConfigError, ValueError):
            continue
        raise AssertionError(f"{bad} was accepted")


def test_client_workers_keep_the_parents_stage_and_class_labels() -> None:
    # was: a --workers client process sent back its own copy of the record, whose stage and
    # workload_class were empty, and the parent copied them over its labels: concurrency stages
    # (labelled before sending) then summarised 0 requests per stage
    from tokspeed.backends.worker_protocol import fill, record_message

    parent = RequestRecord(index=3, iteration=1, warmup=False, scheduled_ns=10, stage="step 2/4",
                           workload_class="chat")
    child = RequestRecord(index=3, iteration=1, warmup=False, scheduled_ns=0, sent_ns=11, end_ns=20,
                          output_tokens=5)
    fill(parent, record_message(1, child)["rec"])
    assert (parent.stage, parent.workload_class) == ("step 2/4", "chat")
    assert (parent.sent_ns, parent.end_ns, parent.output_tokens) == (11, 20, 5)


def test_load_line_of_concurrency_stages_and_conversations() -> None:
    # was: the printout's Load line fell back to "100 requests" for concurrency stages (they run
    # for their stages' duration) and called conversations requests
    from types import SimpleNamespace

    from tokspeed.reports.summary_text import _describe_load

    def line(cfg: dict[str, object], profile: dict[str, object]) -> str:
        bench = SimpleNamespace(name="p", profile=profile)
        return _describe_load(SimpleNamespace(config=cfg, capacity=None, sweep=None, benchmarks=[bench]))  # type: ignore[arg-type]

    staged = {"kind": "stages", "open_loop": False, "concurrency": 4, "duration_s": 2.0, "stages": []}
    assert line({"requests": None, "iterations": 1}, staged) == "p · 2 s of stages"
    talk = {"kind": "conversations", "turns": 3, "users": 2}
    assert line({"requests": 5, "iterations": 1}, talk) == "p · 5 conversations"
    assert line({"requests": None, "iterations": 1}, talk) == "p · 100 conversations"
    assert line({"requests": 7, "iterations": 1}, {"kind": "concurrency", "concurrency": 2}) == "p · 7 requests"


def test_images_with_conversations_are_refused_not_dropped() -> None:
    # was: --images with --multi-turn built every turn from the user text alone, so no image was
    # ever sent while the run said it carried images
    import pytest

    from tokspeed.errors import ConfigError

    with pytest.raises((ConfigError, ValueError), match="images"):
        config_from_sources(None, {"multi_turn": 2, "images": 1})
    assert config_from_sources(None, {"images": 1}).images == 1


def test_shared_prefix_has_the_asked_length_under_a_real_tokenizer(tmp_path: object) -> None:
    # was: under --tokenizer a prefix was `tokens` random words, counted but never trimmed, so a
    # "1024-token" shared prefix held however many tokens those words made
    import pytest

    tokenizers = pytest.importorskip("tokenizers")
    from pathlib import Path

    from tokspeed.workload.prefix import UNIQUE, Prefixes, SharedPrefix
    from tokspeed.workload.synthetic import WORDS
    from tokspeed.workload.tokens import load_counter

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(WORDS[i:] + WORDS[:i]) for i in range(0, len(WORDS), 7)], trainer)
    path = Path(str(tmp_path)) / "tokenizer.json"
    tok.save(str(path))
    counter = load_counter(str(path))
    prefixes = Prefixes(SharedPrefix(groups=2, tokens=200), seed=3, counter=counter)
    for group, key in ((0, 1), (1, 2), (UNIQUE, 5)):
        text, n = prefixes.text(group, key)
        assert n == 200 and len(tok.encode(text, add_special_tokens=False).ids) == 200
