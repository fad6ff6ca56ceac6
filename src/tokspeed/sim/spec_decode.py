"""Simulated speculative decoding: each request's drafts, drawn when it is planned, counted as its tokens go out.

With `--spec-decode-tokens K` (K > 0) every decode step of a response proposes K draft tokens;
position i is accepted with probability `--spec-decode-acceptance R` when positions 0..i-1 were
(a chain, as in rejection sampling: the first rejected position ends the run of accepted ones),
and the step yields accepted + 1 tokens (the bonus token). The first token comes from the
prefill, with no draft. So a response of N tokens has drafts starting at token 1, 1 + (a0 + 1),
... while the start is below N. The draws are seeded by `--seed` and the request's id.

The counters (`/metrics`, vLLM's `spec_decode_num_*` names under `tokspeed_sim:`) count a draft
when the chunk that carries its first token is written (just before, so a scrape never sees a
token that its draft has not been counted for), and the request's log line carries the same
figures (`spec_drafts`, `spec_accepted`, `spec_accepted_per_pos`): the truth to check a client
against. Expected acceptance rate = (R + R² + ... + R^K) / K.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tokspeed.sim.log import LogEntry


@dataclass(slots=True)
class Drafts:
    """One response's drafts: the tokens accepted in each and the token index where each begins."""

    k: int
    accepted: list[int]
    starts: list[int]
    counted: int = 0  # drafts already counted (their first token was written)

    def due(self, sent_tokens: int) -> list[int]:
        """The accepted counts of the drafts that begin before token `sent_tokens`, not yet counted."""
        end = self.counted
        while end < len(self.starts) and self.starts[end] < sent_tokens:
            end += 1
        out, self.counted = self.accepted[self.counted:end], end
        return out


def draw_drafts(total_tokens: int, k: int, acceptance: float, seed: int, request_id: str) -> Drafts:
    """The drafts of a response of `total_tokens` tokens (seeded: the same request id draws the same)."""
    rng = random.Random(f"{seed}:spec:{request_id}")  # noqa: S311 - a simulation, not cryptography
    accepted: list[int] = []
    starts: list[int] = []
    at = 1  # token 0 comes from the prefill
    while at < total_tokens:
        a = 0
        while a < k and rng.random() < acceptance:
            a += 1
        starts.append(at)
        accepted.append(a)
        at += a + 1
    return Drafts(k=k, accepted=accepted, starts=starts)


@dataclass
class SpecCounters:
    """The server's running totals (Prometheus counters)."""

    k: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.per_pos = [0] * self.k

    def count(self, entry: LogEntry, accepted: list[int]) -> None:
        """Count these drafts of one request, in the totals and in its log line."""
        if not accepted:
            return
        if entry.spec_accepted_per_pos is None:
            entry.spec_drafts, entry.spec_accepted, entry.spec_accepted_per_pos = 0, 0, [0] * self.k
        for a in accepted:
            for i in range(a):
                self.per_pos[i] += 1
                entry.spec_accepted_per_pos[i] += 1
        n, total = len(accepted), sum(accepted)
        self.drafts += n
        self.draft_tokens += n * self.k
        self.accepted += total
        entry.spec_drafts = (entry.spec_drafts or 0) + n
        entry.spec_accepted = (entry.spec_accepted or 0) + total

    def lines(self, labels: str) -> list[str]:
        """The counters as Prometheus text, vLLM's names under the simulator's prefix."""
        out: list[str] = []
        for name, help_text, value in (
            ("spec_decode_num_drafts", "Number of spec decoding drafts.", self.drafts),
            ("spec_decode_num_draft_tokens", "Number of draft tokens.", self.draft_tokens),
            ("spec_decode_num_accepted_tokens", "Number of accepted tokens.", self.accepted),
        ):
            full = f"tokspeed_sim:{name}"
            out += [f"# HELP {full} {help_text}", f"# TYPE {full} counter", f"{full}_total{{{labels}}} {value}"]
        full = "tokspeed_sim:spec_decode_num_accepted_tokens_per_pos"
        out += [f"# HELP {full} Accepted tokens per draft position.", f"# TYPE {full} counter"]
        out += [f'{full}_total{{{labels},position="{i}"}} {n}' for i, n in enumerate(self.per_pos)]
        return out
