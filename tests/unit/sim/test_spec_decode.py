"""Speculative decoding: vLLM's spec_decode counters read per window, and the simulator's drafts."""

from __future__ import annotations

import pytest

from tokspeed.sim.gate import FifoGate
from tokspeed.sim.log import LogEntry
from tokspeed.sim.metrics import SimMetrics
from tokspeed.sim.spec_decode import draw_drafts
from tokspeed.telemetry import server as srv
from tokspeed.telemetry.engines import detect_engine
from tokspeed.telemetry.summary import Mark, Setup, summarise

# the samples vLLM 0.10's /metrics serves with a speculative config of 3 tokens (names from
# vllm/v1/spec_decode/metrics.py; prometheus_client adds _total), two engines of a DP server
VLLM_SPEC = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} {d0}
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} {d1}
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} {t0}
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} {t1}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} {a0}
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} {a1}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} {p2}
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 0
"""


def scrape(d: tuple[int, int], p: tuple[int, int, int]) -> dict[str, object]:
    text = VLLM_SPEC
    accepted = (p[0] + p[1] + p[2], p[0])  # engine 1 accepts only at position 0
    for key, value in {"d0": d[0], "d1": d[1], "t0": 3 * d[0], "t1": 3 * d[1], "a0": accepted[0], "a1": accepted[1],
                       "p0": p[0], "p1": p[1], "p2": p[2]}.items():
        text = text.replace("{" + key + "}", str(value))
    engine = detect_engine(srv.sample_values(text))
    assert engine is not None and engine.engine == "vllm"
    return srv.reading(engine, srv.sample_values(text, engine.names, engine.maxed, engine.by_position))


def test_vllm_counters_give_acceptance_rate_and_mean_length_over_the_window() -> None:
    lines = [{"kind": "server", "t_ns": 1, **scrape((100, 50), (80, 40, 10))},
             {"kind": "server", "t_ns": 2, **scrape((300, 150), (250, 150, 60))}]
    engine = detect_engine(["vllm:num_requests_running"])
    s = summarise(lines, Mark(t_ns=0, cpu_s=0), Mark(t_ns=3, cpu_s=0), Setup(0.25, server_url="u", engine=engine)).server
    assert s is not None and s.spec_decode is not None
    sd = s.spec_decode
    # deltas: drafts 200 + 100 = 300; draft tokens 900; accepted (460 - 130) + (250 - 80) = 500
    assert (sd.drafts, sd.draft_tokens, sd.accepted_tokens) == (300, 900, 500)
    assert sd.acceptance_rate == 500 / 900
    assert sd.mean_acceptance_length == 1 + 500 / 300
    # per position: (Δ engine 0 + Δ engine 1) / drafts, positions summed over engines, not over each other
    assert sd.per_position_acceptance_rate == [(170 + 170) / 300, 110 / 300, 50 / 300]


def test_no_spec_counters_or_no_drafts_leave_it_out() -> None:
    engine = detect_engine(["vllm:num_requests_running"])
    setup = Setup(0.25, server_url="u", engine=engine)
    plain = [{"kind": "server", "t_ns": t, "ok": True, "values": {"vllm:num_requests_running": 1.0}} for t in (1, 2)]
    s = summarise(plain, Mark(t_ns=0, cpu_s=0), Mark(t_ns=3, cpu_s=0), setup).server
    assert s is not None and s.spec_decode is None
    idle = [{"kind": "server", "t_ns": t, **scrape((100, 50), (80, 40, 10))} for t in (1, 2)]
    s = summarise(idle, Mark(t_ns=0, cpu_s=0), Mark(t_ns=3, cpu_s=0), setup).server
    assert s is not None and s.spec_decode is None  # no draft in the window: no rate of 0/0


def test_sim_drafts_tile_the_response_and_count_before_their_tokens_go_out() -> None:
    d = draw_drafts(40, 3, 0.6, seed=1, request_id="chatcmpl-sim-7")
    assert d.starts[0] == 1 and all(0 <= a <= 3 for a in d.accepted)
    assert [b - a for a, b in zip(d.starts, d.starts[1:])] == [a + 1 for a in d.accepted[:-1]]  # a + 1 tokens per step
    assert d.starts[-1] < 40 <= d.starts[-1] + d.accepted[-1] + 1
    assert draw_drafts(40, 3, 0.6, seed=1, request_id="chatcmpl-sim-7") == d  # seeded
    assert draw_drafts(1, 3, 0.6, 1, "x").accepted == []  # the prefill's token: no draft
    assert draw_drafts(5, 2, 1.0, 1, "x").accepted == [2, 2]  # always accepted: steps of 3 tokens from token 1
    assert draw_drafts(5, 2, 0.0, 1, "x").accepted == [0, 0, 0, 0]

    metrics = SimMetrics(FifoGate(None), "m", 1000, spec_decode_tokens=3)
    entry = LogEntry(id="chatcmpl-sim-7", api="chat", epoch_offset_ns=0, received_ns=0)
    assert metrics.spec is not None
    metrics.spec.count(entry, d.due(2))  # tokens 0 and 1 about to go: the draft starting at token 1
    assert entry.spec_drafts == 1 and entry.spec_accepted == d.accepted[0]
    metrics.spec.count(entry, d.due(40))
    values = srv.sample_values(metrics.render(), detect_engine(["tokspeed_sim:x"]).names,  # type: ignore[union-attr]
                               by_position=frozenset({"tokspeed_sim:spec_decode_num_accepted_tokens_per_pos_total"}))
    n, acc = len(d.accepted), sum(d.accepted)
    assert (entry.spec_drafts, entry.spec_accepted) == (n, acc)
    assert values["tokspeed_sim:spec_decode_num_drafts_total"] == n
    assert values["tokspeed_sim:spec_decode_num_draft_tokens_total"] == 3 * n
    assert values["tokspeed_sim:spec_decode_num_accepted_tokens_total"] == acc
    per_pos = [values[f"tokspeed_sim:spec_decode_num_accepted_tokens_per_pos_total[{i}]"] for i in range(3)]
    assert per_pos == [sum(a > i for a in d.accepted) for i in range(3)] == entry.spec_accepted_per_pos
    assert d.due(40) == []  # each draft counted once


@pytest.mark.parametrize("rate", [0.3, 0.8])
def test_sim_acceptance_follows_the_chain_probability(rate: float) -> None:
    accepted = [a for i in range(400) for a in draw_drafts(60, 4, rate, 0, f"r{i}").accepted]
    expected = sum(rate ** i for i in range(1, 5)) / 4
    assert sum(accepted) / (4 * len(accepted)) == pytest.approx(expected, abs=0.02)
