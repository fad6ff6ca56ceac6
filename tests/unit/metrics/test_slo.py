"""SLO parsing, kinds and the per-request thresholds they imply."""

from __future__ import annotations

import numpy as np
import pytest

from tokspeed.errors import ConfigError
from tokspeed.metrics.slo import SLO, parse_slo


@pytest.mark.parametrize(
    ("text", "name", "kind"),
    [
        ("ttft_p99_ms<=500", "ttft_p99_ms", "percentile"),
        ("tpot_ms<=50", "tpot_ms", "per_request"),
        ("decode_p50_tokens_per_s>=20", "decode_p50_tokens_per_s", "percentile"),
        ("e2e_max_ms<2000", "e2e_max_ms", "percentile"),
        ("error_rate<=0.01", "error_rate", "run"),
        ("output_tokens_per_s>=1000", "output_tokens_per_s", "run"),
    ],
)
def test_parse_names_and_kinds(text: str, name: str, kind: str) -> None:
    slo = parse_slo(text)
    assert slo.name == name
    assert slo.kind == kind


def test_unknown_name_is_a_config_error() -> None:
    for bad in ("ttft_p100_ms<=1", "ttft_p0_ms<=1", "ttft_median_ms<=1", "latency_p99_ms<=1"):
        with pytest.raises(ConfigError):
            parse_slo(bad)
    assert parse_slo("ttft_p42_ms<=1").quantile == 42.0  # any percentile is a stat


def test_percentile_slo_implies_its_per_request_threshold() -> None:
    form = parse_slo("ttft_p99_ms<=500").per_request_form()
    assert form == SLO(metric="ttft", stat=None, unit="ms", op="<=", value=500.0)
    assert str(form) == "ttft_ms<=500"


def test_per_request_slo_is_its_own_form() -> None:
    slo = parse_slo("itl_ms<=80")
    assert slo.per_request_form() is slo


@pytest.mark.parametrize("text", ["ttft_stdev_ms<=10", "error_rate<=0.01", "requests_per_s>=5"])
def test_no_implied_threshold(text: str) -> None:
    assert parse_slo(text).per_request_form() is None


def test_compare_is_elementwise() -> None:
    slo = parse_slo("tpot_ms<=50")
    assert slo.compare(np.array([10.0, 50.0, 60.0]), slo.value).tolist() == [True, True, False]
    assert slo.holds(50.0) and not slo.holds(None)
