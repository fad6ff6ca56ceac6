"""`tokspeed report DIR --as TOOL`: compatibility views on the sample run."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from harness import run_cli

RUN_V1 = Path(__file__).parents[1] / "data" / "run-v1"


def test_report_as_vllm_prints_the_peer_names_beside_tokspeeds() -> None:
    p = run_cli("report", str(RUN_V1), "--as", "vllm")
    assert p.returncode == 0, p.stderr
    for label in ("TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2EL (ms)", "Request throughput", "tokspeed", "approximated"):
        assert label in p.stdout


@pytest.mark.parametrize("tool", ["vllm", "aiperf", "guidellm"])
def test_report_as_json(tool: str) -> None:
    p = run_cli("report", str(RUN_V1), "--as", tool, "--json")
    assert p.returncode == 0, p.stderr
    data = orjson.loads(p.stdout)
    assert data["schema"] == "tokspeed.compat/1" and data["tool"] == tool
    point = data["benchmarks"][0]
    assert point["requests"] > 0 and point["metrics"]
    ttft = next(m for m in point["metrics"] if m["tokspeed_metric"] == "ttft_ms")
    # TTFT starts at the same recorded token for every tool on this run (no role-only chunk is kept)
    assert ttft["stats"]["mean"] == pytest.approx(ttft["tokspeed"]["mean"], rel=1e-6)


def test_report_as_unknown_tool_is_a_usage_error() -> None:
    p = run_cli("report", str(RUN_V1), "--as", "llmperf")
    assert p.returncode == 2
    assert "vllm" in p.stderr and "aiperf" in p.stderr and "guidellm" in p.stderr
