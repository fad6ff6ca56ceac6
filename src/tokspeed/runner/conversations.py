"""Run one phase of multi-turn conversations, and choose the runner and plan a workload needs.

A conversation is a sequential chain: turn k+1 is built from turn k's real answer
(the backend keeps the answer's text because the spec asks it to), after the
user's think time. Conversations start either in a closed loop of `users`
(each user runs one conversation after another: `--concurrency N` users, or one
with `--synchronous`) or in an open loop at `--conversation-rate` new
conversations per second (arrival times precomputed from the seed like
`--rate`'s, optionally capped by `--max-concurrency` requests in flight).

A phase of n conversations (`--requests N` counts conversations in this mode)
gives each turn the request index `first_index + c × turns + (k − 1)`; records
carry `conversation` (c) and `turn` (k, from 1). A failed turn ends its
conversation (there is no answer to continue from). With a duration, no new
conversation and no new turn starts after it ends. The warm-up phase runs its
conversations with one turn each: it warms connections, not histories.

Turn 1's `scheduled_ns` is the conversation's arrival time (open loop) or when
its user picked it up; a later turn's is when its think time ended.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from tokspeed.backends.base import Backend
from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError
from tokspeed.load.plan import NS, LoadPlan, arrival_offsets_ns
from tokspeed.records import RequestRecord
from tokspeed.runner.executor import run_phase
from tokspeed.runner.loops import OnRecord, Phase, SpecSource, cancel_all, gather_or_cancel, send_one
from tokspeed.runner.pacing import sleep_until
from tokspeed.workload.conversation import ConversationWorkload, parse_think_time
from tokspeed.workload.prefix import Prefixes, PrefixWorkload, SharedPrefix
from tokspeed.workload.tokens import load_counter

PhaseRunner = Callable[[LoadPlan, Phase, Backend, Any, OnRecord, OnRecord], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class ConversationPlan(LoadPlan):
    """Conversations: `workers` users (closed loop) or `rate` new conversations per second (open loop)."""

    turns: int = 1

    @property
    def open_loop(self) -> bool:
        return False  # requests follow answers; only conversation starts may be scheduled

    @property
    def conversation_rate(self) -> float | None:
        return self.rate

    def describe(self) -> dict[str, Any]:
        profile: dict[str, Any] = {"kind": "conversations", "turns": self.turns}
        if self.rate is None:
            profile["users"] = self.workers or 1
        else:
            profile.update(conversation_rate=self.rate, arrival=self.arrival, max_concurrency=self.workers)
            if self.arrival == "gamma":
                profile["burstiness"] = self.burstiness
        return profile

    def label(self) -> str:
        if self.rate is None:
            users = self.workers or 1
            return f"{users} user{'s' if users != 1 else ''} × {self.turns} turns"
        cap = f", max {self.workers} in flight" if self.workers else ""
        return f"{self.rate:g} conversations/s {self.arrival} × {self.turns} turns{cap}"


def conversation_plan(cfg: RunConfig) -> ConversationPlan:
    """The plan of a multi-turn config (`cfg.multi_turn` set)."""
    turns = cfg.multi_turn or 1
    if cfg.conversation_rate is not None:
        return ConversationPlan(
            kind="conversations", workers=cfg.max_concurrency, rate=cfg.conversation_rate,
            arrival=cfg.arrival.value, burstiness=cfg.burstiness, exact_rate=cfg.exact_rate, turns=turns,
        )
    users = cfg.concurrency if cfg.profile == "concurrency" else 1
    return ConversationPlan(kind="conversations", workers=users, turns=turns)


def shape_workload(workload: Any, cfg: RunConfig) -> Any:
    """The workload with the config's shared prefixes and conversations applied (unchanged without them)."""
    prefixes = None
    if cfg.shared_prefix_groups:
        shape = SharedPrefix(cfg.shared_prefix_groups, cfg.shared_prefix_tokens, cfg.prefix_reuse)
        prefixes = Prefixes(shape, cfg.seed, load_counter(cfg.tokenizer))
    if cfg.multi_turn is None:
        return workload if prefixes is None else PrefixWorkload(workload, prefixes)
    # the prompt form of --api: ollama-chat keeps chat messages (roles), like chat
    from tokspeed.backends.native import workload_api

    return ConversationWorkload(
        workload, cfg.multi_turn, parse_think_time(cfg.think_time), workload_api(cfg.api.value), cfg.seed,
        load_counter(cfg.tokenizer), prefixes, keep_all_texts=cfg.token_audit,
    )


def phase_runner(workload: SpecSource) -> PhaseRunner:
    """What runs a phase of `workload`: conversations, or the executor's requests."""
    return run_conversations if isinstance(workload, ConversationWorkload) else run_phase


async def run_conversations(
    plan: LoadPlan,
    phase: Phase,
    backend: Backend,
    workload: ConversationWorkload,
    on_record: OnRecord,
    on_start: OnRecord,
) -> None:
    """Run the phase's conversations to completion (see the module docstring)."""
    run = _Conversations(phase, backend, workload, on_record, on_start, plan)
    if phase.warmup:  # one-turn conversations, as many at once as the load will have (no schedule to keep)
        await run.closed_loop(max(1, min(plan.workers or phase.n or 1, phase.n or 1)))
    elif isinstance(plan, ConversationPlan) and plan.conversation_rate is not None:
        await run.open_loop(plan)
    else:
        await run.closed_loop(plan.workers or 1)


class _Conversations:
    """One phase's conversations: how each is run, and the limits they share."""

    def __init__(
        self, phase: Phase, backend: Backend, workload: ConversationWorkload, on_record: OnRecord,
        on_start: OnRecord, plan: LoadPlan,
    ) -> None:
        self.phase, self.backend, self.workload = phase, backend, workload
        self.on_record, self.on_start = on_record, on_start
        self.turns = 1 if phase.warmup else workload.turns
        self.deadline = None if phase.duration_s is None else perf_counter_ns() + int(phase.duration_s * NS)
        capped = isinstance(plan, ConversationPlan) and plan.rate is not None and plan.workers
        self.slots = asyncio.Semaphore(plan.workers) if capped and plan.workers else None
        self._answers: dict[int, str] = {}  # request index -> its answer, until its conversation takes it

    def past_deadline(self) -> bool:
        return self.deadline is not None and perf_counter_ns() >= self.deadline

    async def converse(self, number: int, start_ns: int) -> None:
        """Conversation `number`'s turns, one after another, each after its think time."""
        conv = self.workload.start(number, self.phase.first_index + number * self.workload.turns)
        scheduled = start_ns
        for turn in range(1, self.turns + 1):
            if turn > 1:
                scheduled = perf_counter_ns() + int(self.workload.think_s(number, turn) * NS)
                if self.deadline is not None and scheduled >= self.deadline:  # not due inside the phase
                    await sleep_until(self.deadline)  # a closed-loop user still starts nothing new before it
                    return
                await sleep_until(scheduled)
                if self.past_deadline():
                    return
            index = self.phase.first_index + number * self.workload.turns + turn - 1
            spec = conv.next_turn(index)
            record = RequestRecord(
                index=index, iteration=self.phase.iteration, warmup=self.phase.warmup, scheduled_ns=scheduled,
                conversation=number, turn=turn,
            )
            await send_one(self.backend, spec, record, self._keep, self.on_start, self.slots)
            answer = self._answers.pop(index, None)
            if not record.ok:
                return
            if answer is None:
                raise ConfigError(
                    "--multi-turn needs each answer's text for the next turn, and this backend did not return it",
                    hint="use an OpenAI-compatible target (--api chat or completions) or an in-process engine",
                )
            conv.answered(answer)

    def _keep(self, record: RequestRecord) -> None:
        """The record's answer joins its conversation; only the first few keep their text on disk."""
        if record.output_text is not None:
            self._answers[record.index] = record.output_text
        if record.index - self.phase.first_index >= _TEXT_KEPT and not self.workload.keep_all_texts:
            record.output_text = None
        self.on_record(record)

    async def closed_loop(self, users: int) -> None:
        numbers: Iterator[int] = iter(range(self.phase.n)) if self.phase.n is not None else itertools.count()

        async def user() -> None:
            for number in numbers:
                if self.past_deadline():
                    return
                await self.converse(number, perf_counter_ns())

        await gather_or_cancel([asyncio.ensure_future(user()) for _ in range(users)])

    async def open_loop(self, plan: ConversationPlan) -> None:
        assert plan.rate is not None
        offsets = arrival_offsets_ns(
            plan.rate, plan.arrival, plan.burstiness, self.phase.n,
            self.phase.duration_s, self.phase.seed, exact_rate=plan.exact_rate,
        )
        tasks: list[asyncio.Future[None]] = []
        start = perf_counter_ns()
        try:
            for number, offset in enumerate(offsets.tolist()):
                due = start + offset
                await sleep_until(due)
                if any(t.done() and not t.cancelled() and t.exception() is not None for t in tasks):
                    break  # a lost backend: stop starting conversations
                tasks.append(asyncio.ensure_future(self.converse(number, due)))
        except asyncio.CancelledError:
            await cancel_all(tasks)
            raise
        await gather_or_cancel(tasks)


_TEXT_KEPT = 3  # like the backends' samples: the first few requests keep their answer text in the record
