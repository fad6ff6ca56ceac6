"""Point rules over hand-made records: each must fire on its case, and stay silent on the near miss."""

from __future__ import annotations

from diagnosis_builders import failed, many, point, rec
from tokspeed.diagnosis.causes import advice_for, normalise
from tokspeed.diagnosis.errors import errors
from tokspeed.diagnosis.stability import cold_start
from tokspeed.diagnosis.thresholds import DEFAULT, Thresholds
from tokspeed.diagnosis.tokens import output_length, token_count
from tokspeed.diagnosis.ttft import ttft_prefill
from tokspeed.records import Anomaly, ErrorKind, TokenSource


# errors ------------------------------------------------------------------------------
def test_errors_are_grouped_by_cause_largest_first() -> None:
    records = many(90)
    records += [failed(100 + i, ErrorKind.HTTP, f"HTTP 503: overloaded, queue {i}", 503) for i in range(6)]
    records += [failed(200 + i, ErrorKind.TIMEOUT, "no complete response within 30 s") for i in range(3)]
    records += [failed(300, ErrorKind.STREAM, "CUDA out of memory. Tried to allocate 2.00 GiB")]
    found = errors(point(records), DEFAULT)
    assert [(f.evidence["error_kind"], f.evidence["count"]) for f in found] == [("http", 6), ("timeout", 3), ("stream", 1)]
    http, timeout, oom = found
    assert http.severity == "critical" and http.evidence["share"] == 0.06  # 6 of 100 finished ≥ 5%
    assert timeout.severity == "warning"  # 3% < 5%
    assert "503" in http.title and "--retries" in http.advice and "tokspeed capacity" in http.advice
    assert "--timeout" in timeout.advice
    for needle in ("--max-num-seqs", "--max-model-len", "fp8", "AWQ"):  # the seed's OOM advice
        assert needle in oom.advice


def test_no_errors_no_finding() -> None:
    assert errors(point(many(10)), DEFAULT) == []


def test_warmup_errors_do_not_count() -> None:
    bad = failed(1, ErrorKind.CONNECT, "refused")
    bad.warmup, bad.iteration = True, 0
    assert errors(point([*many(10), bad]), DEFAULT) == []


def test_retried_requests_are_reported_even_when_all_succeeded() -> None:
    records = many(10)
    records[3].retries, records[5].retries = 2, 1
    (f,) = errors(point(records), DEFAULT)
    assert f.evidence == {"retried": 2, "retries": 3, "requests": 10} and "429" in f.advice


def test_messages_differing_only_in_numbers_are_one_cause() -> None:
    assert normalise("request 123 failed after 4.5 s (0xdeadbeef)") == normalise("request 9 failed after 10.0 s (0x1)")
    records = [failed(i, ErrorKind.HTTP, f"HTTP 500: worker {i} died", 500) for i in range(4)]
    assert len(errors(point(records), DEFAULT)) == 1


def test_causes_beyond_the_limit_are_summed() -> None:
    records = [failed(i, ErrorKind.HTTP, f"HTTP {400 + i}: x", 400 + i) for i in range(4)]
    found = errors(point(records), Thresholds(max_error_groups=2))
    assert len(found) == 3 and found[-1].evidence["count"] == 2 and "2 other causes" in found[-1].title


def test_advice_by_message_status_and_kind() -> None:
    assert "context window" in advice_for("http", 400, "This model's maximum context length is 4096 tokens")
    assert "--max-num-seqs" in advice_for("http", 500, "torch.OutOfMemoryError: CUDA out of memory")
    assert "GET /v1/models" in advice_for("http", 404, "The model `x` does not exist.")
    assert "429" in advice_for("http", 429, "rate limited")
    assert "--api-key" in advice_for("http", 401, "unauthorized")
    assert "log" in advice_for("http", 502, "bad gateway")
    assert "rejected" in advice_for("http", 422, "bad field")
    assert "down" in advice_for("connect", None, "ClientConnectorError: refused")
    assert "crashed" in advice_for("broken", None, "ServerDisconnectedError")
    assert "--ttft-timeout" in advice_for("ttft_timeout", None, "no first token within 5 s")


# output_length --------------------------------------------------------------------------
def test_early_stops_fire_with_the_ignore_eos_advice() -> None:
    records = many(8) + [rec(10 + i, tokens=5, max_tokens=16, finish="stop") for i in range(2)]
    (f,) = output_length(point(records), DEFAULT)
    assert f.rule == "output_length" and f.evidence["short"] == 2 and f.evidence["share"] == 0.2
    assert "ignore_eos" in f.advice and "min_tokens" in f.advice
    assert "finish_reason stop 2" in f.title


def test_early_stops_below_the_share_are_silent() -> None:
    records = many(19) + [rec(30, tokens=5, max_tokens=16, finish="stop")]  # 5% < 10%
    assert output_length(point(records), DEFAULT) == []


def test_short_responses_that_hit_length_are_not_early_stops() -> None:
    records = [rec(i, tokens=5, max_tokens=16, finish="length") for i in range(10)]
    assert output_length(point(records), DEFAULT) == []


def test_ignore_eos_already_sent_changes_the_advice() -> None:
    records = [rec(i, tokens=5, max_tokens=16, finish="stop") for i in range(10)]
    (f,) = output_length(point(records, config={"extra_body": {"ignore_eos": True}}), DEFAULT)
    assert "does not support them" in f.advice and f.evidence["ignore_eos_sent"] == 1


def test_responses_longer_than_max_tokens() -> None:
    (f,) = output_length(point([*many(5), rec(9, tokens=40, max_tokens=16)]), DEFAULT)
    assert "ignores max_tokens" in f.title and f.evidence["worst_output_tokens"] == 40


def test_longer_by_tokenizer_count_is_not_blamed_on_the_server() -> None:
    assert output_length(point([rec(9, tokens=40, max_tokens=16, source=TokenSource.TOKENIZER)]), DEFAULT) == []


# token_count --------------------------------------------------------------------------------
def test_usage_below_chunks_fires() -> None:
    bad = rec(3, source=TokenSource.CHUNKS, anomalies=[Anomaly.USAGE_BELOW_CHUNKS.value])
    found = token_count(point([*many(3), bad]), DEFAULT)
    (below,) = found  # issue 24: one bad usage value was also "no usage… drop --no-usage" and "counted 2 ways"
    assert "below their number of token chunks" in below.title and below.evidence["counted_instead_by"] == "chunks 1"
    assert all(f.severity == "warning" and "--tokenizer" in f.advice for f in found)


def test_responses_without_usage_are_counted_by_chunks_and_the_advice_fits_the_flags() -> None:
    chunked = rec(3, source=TokenSource.CHUNKS)
    none_sent, mixed = token_count(point([*many(3), chunked]), DEFAULT)
    assert "one per chunk" in none_sent.title and none_sent.evidence["chunk_counted"] == 1
    assert "--no-usage" not in none_sent.advice and "include_usage" in none_sent.advice  # the flag was never given
    assert "2 ways" in mixed.title and mixed.evidence == {"source_usage": 3, "source_chunks": 1}
    flagged, _ = token_count(point([*many(3), chunked], config={"include_usage": False}), DEFAULT)
    assert "drop --no-usage" in flagged.advice


def test_all_usage_counted_is_silent() -> None:
    assert token_count(point(many(5)), DEFAULT) == []


def test_approximate_input_tokens_is_info() -> None:
    (f,) = token_count(point(many(4, input_source=TokenSource.APPROX)), DEFAULT)
    assert f.severity == "info" and f.evidence["approximated"] == 4 and "--tokenizer" in f.advice


# cold_start -----------------------------------------------------------------------------------
def test_slow_first_request_without_warmup() -> None:
    records = [rec(0, ttft_ms=200), *(rec(i, ttft_ms=10) for i in range(1, 10))]
    (f,) = cold_start(point(records), DEFAULT)
    assert f.severity == "warning" and f.evidence["first_request_ms"] == 200 and "no warm-up" in f.title
    assert "--warmup" in f.advice


def test_slow_warmup_kept_out_is_info() -> None:
    records = [rec(0, ttft_ms=300, warmup=True), *(rec(i, ttft_ms=10) for i in range(1, 10))]
    (f,) = cold_start(point(records), DEFAULT)
    assert f.severity == "info" and f.evidence["first_warmup_ms"] == 300


def test_slow_first_iteration() -> None:
    records = [rec(i, ttft_ms=40, iteration=1) for i in range(5)]
    records += [rec(10 + i, ttft_ms=10, iteration=it) for it in (2, 3) for i in range(5)]
    found = cold_start(point(records), DEFAULT)
    assert [f.evidence.get("first_iteration_latency_ms") for f in found] == [40]


def test_even_latencies_and_tiny_differences_are_silent() -> None:
    assert cold_start(point(many(10)), DEFAULT) == []
    tiny = [rec(0, ttft_ms=3), *(rec(i, ttft_ms=1) for i in range(1, 10))]  # 3× but only 2 ms
    assert cold_start(point(tiny), DEFAULT) == []
    assert cold_start(point([rec(0, ttft_ms=200), rec(1), rec(2)]), DEFAULT) == []  # too few to judge


# ttft_prefill (within a point) --------------------------------------------------------------------
def test_ttft_growing_with_prompt_length_fires() -> None:
    records = [rec(i, input_tokens=200 * (i + 1), ttft_ms=2 + 0.05 * 200 * (i + 1)) for i in range(12)]
    (f,) = ttft_prefill(point(records), DEFAULT)
    assert f.rule == "ttft_prefill" and abs(float(f.evidence["slope_ms_per_1k_tokens"] or 0) - 50) < 0.01
    assert "prefix caching" in f.advice


def test_flat_ttft_or_equal_prompts_are_silent() -> None:
    flat = [rec(i, input_tokens=200 * (i + 1), ttft_ms=30) for i in range(12)]
    assert ttft_prefill(point(flat), DEFAULT) == []
    same = [rec(i, input_tokens=500, ttft_ms=30 + i) for i in range(12)]
    assert ttft_prefill(point(same), DEFAULT) == []


def test_reconnects_fire_when_kept_alive_connections_were_closed_and_not_for_a_few() -> None:
    from tokspeed.diagnosis.connections import reconnects
    from tokspeed.metrics import summarize

    records = many(40)
    for r in records[::4]:  # 10 of 40 paid a 1.5 ms connect
        r.connect_duration_ns = 1_500_000
    (f,) = reconnects(point(records), DEFAULT)
    assert f.rule == "reconnects" and f.evidence["connects"] == 10 and f.evidence["connect_mean_ms"] == 1.5
    assert "keep-alive" in f.advice
    assert summarize(records).connect_ms.count == 10 and summarize(records).connect_ms.mean == 1.5
    few = many(40)
    few[0].connect_duration_ns = few[1].connect_duration_ns = 2_000_000  # 2 of 40: under both thresholds
    assert reconnects(point(few), DEFAULT) == [] and reconnects(point(many(40)), DEFAULT) == []
    warm = many(40, warmup=True)
    for r in warm:
        r.connect_duration_ns = 1_000_000  # warm-up connects are expected: not measured
    assert reconnects(point(warm), DEFAULT) == []


def test_reconnects_after_client_cancellations_are_the_client_s_not_the_server_s() -> None:
    """--cancel-share: each cancelled request closes its connection, so one later request reconnects."""
    from tokspeed.diagnosis.connections import reconnects
    from tokspeed.records import Status

    records = many(40)
    for r in records[::4]:  # 10 of 40 cancelled by the client ...
        r.status, r.error = Status.CANCELLED, "cancelled by the client"
    for r in records[1::4]:  # ... and 10 opened a new connection: every one explained
        r.connect_duration_ns = 1_500_000
    assert reconnects(point(records), DEFAULT) == []
    for r in records[2::4]:  # 10 more than the cancellations explain: the server's doing
        r.connect_duration_ns = 1_500_000
    (f,) = reconnects(point(records), DEFAULT)
    assert f.evidence["connects"] == 20 and f.evidence["cancelled"] == 10
    assert "10 more than the 10 the client cancelled" in f.title


def test_many_small_causes_make_the_point_critical_together() -> None:
    """Issue 24: 19% failing over 9 causes, each ≤ 3%, gave only warnings and `--fail-on critical` passed."""
    records = many(81)
    for c in range(9):
        n = 3 if c < 1 else 2  # 3 + 8 × 2 = 19 failures, each cause ≤ 3% of 100
        records += [failed(100 + 10 * c + k, ErrorKind.HTTP, f"HTTP {500 + c}: cause {chr(65 + c)}", 500 + c)
                    for k in range(n)]
    found = errors(point(records), DEFAULT)
    total = found[0]
    assert total.severity == "critical" and total.evidence["count"] == 19 and total.evidence["causes"] == 9
    assert total.evidence["share"] == 0.19 and "9 causes" in total.title
    assert all(f.severity == "warning" for f in found[1:6])  # each cause alone stays under 5%


def test_one_cause_or_a_low_total_adds_no_total() -> None:
    one = [*many(90), *(failed(100 + i, ErrorKind.HTTP, "HTTP 500: x", 500) for i in range(10))]
    assert [f.evidence.get("causes") for f in errors(point(one), DEFAULT)] == [None]
    low = [*many(97), failed(100, ErrorKind.HTTP, "HTTP 500: x", 500), failed(101, ErrorKind.TIMEOUT, "slow")]
    assert all(f.severity == "warning" and "causes" not in f.evidence for f in errors(point(low), DEFAULT))


def test_a_long_first_prompt_on_a_prefill_bound_server_is_not_a_cold_start() -> None:
    """Issue 24: a 362-token first prompt was called a 2.8× cold start against a median of short prompts."""
    lengths = [362, *(40 + 30 * (i % 8) for i in range(1, 20))]  # the others 70-250 tokens
    ttft = [2.0 + 0.1 * n for n in lengths]  # 0.1 ms per prompt token, no cold start at all
    records = [rec(i, input_tokens=n, ttft_ms=v) for i, (n, v) in enumerate(zip(lengths, ttft, strict=True))]
    assert ttft[0] / sorted(ttft[1:])[9] > 1.5  # what the median alone called a cold start
    assert cold_start(point(records), DEFAULT) == []
    warm = [rec(100, input_tokens=706, ttft_ms=2.0 + 70.6, warmup=True, start_ms=-1000.0), *records[1:]]
    assert cold_start(point(warm), DEFAULT) == []  # the embedded run's 706-token warm-up, likewise


def test_a_real_cold_start_is_still_found_against_the_prefill_line() -> None:
    lengths = [362, *(40 + 30 * (i % 8) for i in range(1, 20))]
    records = [rec(0, input_tokens=362, ttft_ms=3 * (2.0 + 36.2))]  # 3× what its prompt costs
    records += [rec(i, input_tokens=n, ttft_ms=2.0 + 0.1 * n) for i, n in enumerate(lengths[1:], start=1)]
    (f,) = cold_start(point(records), DEFAULT)
    assert f.evidence["expected_from"] == "prefill line" and abs(float(f.evidence["expected_ms"] or 0) - 38.2) < 1e-6
    assert abs(float(f.evidence["factor"] or 0) - 3.0) < 1e-6 and "362-token prompt" in f.title


def test_the_line_without_one_point_is_the_same_from_moments_as_from_the_points() -> None:
    from tokspeed.diagnosis.digest import LineFitter

    xs = [100.0 + 37 * i for i in range(30)]
    ys = [5 + 0.2 * x + (i % 3) for i, x in enumerate(xs)]
    exact, moments = LineFitter(), LineFitter(limit=5)
    for x, y in zip(xs, ys, strict=True):
        exact.add(x, y)
        moments.add(x, y)
    assert moments.kept == 0
    a, b = exact.fit_without(xs[7], ys[7]), moments.fit_without(xs[7], ys[7])
    assert a.points == b.points == 29
    for field in ("slope_ms_per_1k_tokens", "intercept_ms", "r2"):
        assert abs(getattr(a, field) - getattr(b, field)) < 1e-6
