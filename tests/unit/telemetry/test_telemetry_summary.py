"""Window summaries from telemetry lines: exact stats, energy from marks, J/token, client CPU."""

from __future__ import annotations

import pytest

from tokspeed.reports.telemetry_text import telemetry_lines
from tokspeed.telemetry.gpu import GpuInfo
from tokspeed.telemetry.schema import SeriesStats
from tokspeed.telemetry.stats import counter_delta, series_stats
from tokspeed.telemetry.summary import Mark, Setup, Work, energy_per_token, summarise, tokens_per_energy, total_energy

GPUS = [GpuInfo(0, "A", 81920.0), GpuInfo(1, "B", 81920.0)]


def gpu_line(t: int, gpu: int, util: float, power: float | None, energy: int | None) -> dict[str, object]:
    return {"kind": "gpu", "t_ns": t, "gpu": gpu, "utilization_pct": util, "memory_used_mib": 1000.0 + gpu,
            "power_w": power, "energy_mj": energy, "sm_clock_mhz": 1500, "temperature_c": 50 + t}


def test_series_stats_formulas() -> None:
    s = series_stats([1, None, 3, 2, 4])
    assert (s.mean, s.max, s.min, s.samples) == (2.5, 4.0, 1.0, 4)
    assert s.p99 == pytest.approx(3.97)  # 3 + 0.99 × 3 × (4 − 3): linear between the closest ranks
    assert series_stats([None, None]) == SeriesStats()
    assert counter_delta([5, None, 9]) == 4 and counter_delta([5]) is None and counter_delta([9, 5]) is None


def test_gpu_stats_come_from_the_window_and_energy_from_the_marks() -> None:
    lines = [gpu_line(t, g, 10.0 * t + g, 300.0 if g == 0 else 100.0, 1_000 * t) for t in range(6) for g in (0, 1)]
    begin = Mark(t_ns=1, cpu_s=10.0, energy_mj={0: 50_000, 1: 20_000})
    end = Mark(t_ns=4, cpu_s=10.25, energy_mj={0: 53_000, 1: 21_500})
    s = summarise(lines, begin, end, Setup(interval_s=0.25, gpus=GPUS), Work(output_tokens=450, requests=50))
    g0, g1 = s.gpus
    u = g0.utilization_pct
    assert (u.mean, u.max, u.min, u.samples) == (25.0, 40.0, 10.0, 4) and u.p99 == pytest.approx(39.7)
    assert g1.utilization_pct.mean == 26.0 and g1.power_w.mean == 100.0
    assert (g0.energy_j, g1.energy_j) == (3.0, 1.5)
    assert s.energy_per_output_token_j == pytest.approx(4.5 / 450)
    assert s.energy_j == 4.5 and s.output_tokens_per_j == 100.0  # 450 tokens / (3.0 + 1.5) J
    assert s.window_s == 3e-9
    assert s.client is not None and s.client.cpu_seconds == 0.25 and s.client.cpu_ms_per_request == 5.0


def test_energy_falls_back_to_the_samples_and_is_unknown_when_a_gpu_has_none() -> None:
    lines = [gpu_line(t, 0, 50, 300.0, 2_000 * t) for t in range(1, 4)] + [gpu_line(t, 1, 50, None, None) for t in range(1, 4)]
    s = summarise(lines, Mark(t_ns=1, cpu_s=0), Mark(t_ns=3, cpu_s=0), Setup(0.25, gpus=GPUS), Work(output_tokens=10))
    assert s.gpus[0].energy_j == 4.0 and s.gpus[1].energy_j is None
    assert s.gpus[1].power_w.samples == 0
    assert s.energy_per_output_token_j is None  # a GPU's energy unknown: no J/token rather than a low one
    assert s.energy_j is None and s.output_tokens_per_j is None  # nor a total that leaves a GPU out


def test_no_gpu_leaves_energy_absent_not_zero() -> None:
    s = summarise([], Mark(t_ns=1, cpu_s=0), Mark(t_ns=3, cpu_s=0), Setup(0.25), Work(output_tokens=10))
    assert (s.energy_j, s.energy_per_output_token_j, s.output_tokens_per_j) == (None, None, None)
    assert "energy_j" not in {k for k, v in s.model_dump().items() if v is not None}


def test_tokens_per_joule_is_the_inverse_and_needs_energy_and_tokens() -> None:
    assert tokens_per_energy(4.0, 10) == 2.5 and total_energy([3.0, 1.0]) == 4.0
    assert tokens_per_energy(0.0, 10) is None and tokens_per_energy(None, 10) is None and tokens_per_energy(4.0, 0) is None
    assert total_energy([]) is None and total_energy([3.0, None]) is None


def test_energy_per_token_needs_tokens() -> None:
    assert energy_per_token([10.0, 5.0], 3) == 5.0
    assert energy_per_token([10.0], 0) is None and energy_per_token([], 10) is None


def test_client_samples_summarised_and_notes_kept() -> None:
    lines = [{"kind": "client", "t_ns": t, "process_cpu_pct": 20.0 * t, "host_cpu_pct": 50.0, "rss_mib": 100.0 + t,
              "loop_lag_ms": 0.5 * t, "cpu_s": 0} for t in range(1, 5)]
    setup = Setup(interval_s=0.5, cpu_count=8, notes=["no GPU telemetry: NVML unavailable"])
    s = summarise(lines, Mark(t_ns=1, cpu_s=1.0), Mark(t_ns=4, cpu_s=3.0), setup, Work(requests=0))
    assert s.client is not None
    assert s.client.process_cpu_pct.mean == 50.0 and s.client.rss_mib.max == 104.0 and s.client.loop_lag_ms.max == 2.0
    assert s.client.cpu_seconds == 2.0 and s.client.cpu_ms_per_request is None and s.client.cpu_count == 8
    assert s.gpus == [] and s.server is None and s.notes == ["no GPU telemetry: NVML unavailable"]


def test_console_block_names_util_energy_queue_and_client_cpu() -> None:
    lines = [gpu_line(t, 0, 80.0, 300.0, 1000 * t) for t in range(1, 4)]
    lines += [{"kind": "client", "t_ns": 2, "process_cpu_pct": 40.0, "host_cpu_pct": 10.0, "rss_mib": 90.0, "loop_lag_ms": 1.0}]
    s = summarise(lines, Mark(t_ns=1, cpu_s=0, energy_mj={0: 0}), Mark(t_ns=3, cpu_s=0.5, energy_mj={0: 600_000}),
                  Setup(0.25, gpus=GPUS[:1], notes=["GPU 0: temperature not supported by NVML; left out"]),
                  Work(output_tokens=1200, requests=100))
    text = "\n".join(telemetry_lines(s))
    assert "GPU 0 A: util mean 80% · max 80%" in text
    assert "Energy  0.500 J per output token · 2.00 output tokens per J (600 J over 1 GPU)" in text
    assert "5.000 ms CPU per request" in text
    assert "note: GPU 0: temperature not supported" in text
    assert telemetry_lines(None) == []
    assert any("few or no samples" in line for line in telemetry_lines(s))  # 2 ns of samples
    long = s.model_copy(update={"window_s": 10.0})
    assert not any("few or no samples" in line for line in telemetry_lines(long))
