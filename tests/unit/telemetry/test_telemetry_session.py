"""The samplers as the runner uses them: start, window, summarise, stop; telemetry.jsonl on disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
from test_telemetry_gpu import GPU, fake_nvml

from tokspeed.telemetry.client import process_cpu_seconds
from tokspeed.telemetry.log import TelemetryLog
from tokspeed.telemetry.schema import TELEMETRY_FILE
from tokspeed.telemetry.session import Telemetry, TelemetryOptions
from tokspeed.telemetry.summary import Work


def lines(directory: Path) -> list[dict[str, object]]:
    return [orjson.loads(x) for x in (directory / TELEMETRY_FILE).read_bytes().splitlines()]


def burn(cpu_seconds: float) -> None:
    """Spin until this process has used `cpu_seconds` more CPU (however busy the machine is)."""
    end = process_cpu_seconds() + cpu_seconds
    while process_cpu_seconds() < end:
        pass


async def test_a_window_gets_exact_cpu_time_loop_lag_and_gpu_samples(tmp_path: Path) -> None:
    nvml = fake_nvml({"driver": "1", "cuda": 12000, "gpus": [GPU, {**GPU, "power_w": None}]})
    t = Telemetry(TelemetryOptions(interval_s=0.02, nvml=nvml), tmp_path, epoch_offset_ns=0)
    await t.start()
    begin = t.window("begin", 0)
    await asyncio.sleep(0.1)
    burn(0.3)  # blocks the event loop: the client sampler wakes ≥ 300 ms late
    await asyncio.sleep(0.1)
    end = t.window("end", 0)
    s = t.summarise(begin, end, Work(output_tokens=100, requests=4))
    run = await t.stop()

    assert s.client is not None and s.client.cpu_seconds is not None
    assert 0.3 <= s.client.cpu_seconds < 0.6
    assert s.client.cpu_ms_per_request == s.client.cpu_seconds * 1000 / 4
    assert s.client.loop_lag_ms.max is not None and s.client.loop_lag_ms.max > 250
    g0, g1 = s.gpus
    assert g0.utilization_pct.mean == 87 and g0.power_w.mean == 350.5 and g0.utilization_pct.samples >= 5
    assert g1.power_w.samples == 0 and g1.energy_j is None
    assert s.energy_per_output_token_j is None  # GPU 1 gives no energy
    assert "GPU 1: power not supported by NVML; left out" in s.notes
    assert run.window_s is not None and run.window_s >= s.window_s  # type: ignore[operator]

    kinds = [x["kind"] for x in lines(tmp_path)]
    assert kinds[0] == "start" and kinds[-1] == "stop"
    assert {"gpu", "client", "window"} <= set(kinds) and "server" not in kinds
    assert nvml.calls["shutdown"] == 1


async def test_run_energy_per_token_adds_up_the_windows(tmp_path: Path) -> None:
    nvml = fake_nvml({"driver": "1", "cuda": 12000, "gpus": [GPU]})
    t = Telemetry(TelemetryOptions(interval_s=0.05, nvml=nvml), tmp_path, epoch_offset_ns=0)
    await t.start()
    windows = []
    for i, tokens in enumerate((100, 300)):
        begin = t.window("begin", i)
        await asyncio.sleep(0.1)
        windows.append(t.summarise(begin, t.window("end", i), Work(output_tokens=tokens, requests=1)))
    run = await t.stop()
    energy = sum(w.gpus[0].energy_j or 0 for w in windows)
    assert energy > 0
    assert run.energy_per_output_token_j == energy / 400
    assert run.energy_j == energy and run.output_tokens_per_j == 400 / energy  # the windows', not the idle time between


async def test_missing_sources_are_notes_and_nothing_is_sampled_from_them(tmp_path: Path) -> None:
    options = TelemetryOptions(interval_s=0.02, nvml=None, server_metrics="http://127.0.0.1:9/metrics", target="http://127.0.0.1:9/v1")
    t = Telemetry(options, tmp_path, epoch_offset_ns=0)
    await t.start()
    await asyncio.sleep(0.06)
    run = await t.stop()
    assert run.gpus == [] and run.server is None and run.client is not None
    assert run.notes == [
        "no GPU telemetry: nvidia-ml-py is not installed (pip install nvidia-ml-py)",
        "no server metrics: http://127.0.0.1:9/metrics did not answer with Prometheus text (cannot connect)",
    ]
    assert {x["kind"] for x in lines(tmp_path)} == {"start", "client", "stop"}


async def test_server_metrics_off_tries_nothing(tmp_path: Path) -> None:
    options = TelemetryOptions(interval_s=0.02, nvml=None, server_metrics="off", target="http://127.0.0.1:9/v1")
    t = Telemetry(options, tmp_path, epoch_offset_ns=0)
    await t.start()
    run = await t.stop()
    assert run.server is None and not any("server" in n for n in run.notes)


class FullDiskFile:
    """A file on a full disk: every write, flush and close fails (close flushes what is buffered)."""

    def write(self, data: bytes) -> int:
        return len(data)  # buffered

    def flush(self) -> None:
        raise OSError(28, "No space left on device")

    def close(self) -> None:
        raise OSError(28, "No space left on device")

    def tell(self) -> int:
        return 0


def test_a_full_disk_costs_the_telemetry_file_never_an_exception(tmp_path: Path) -> None:
    log = TelemetryLog(tmp_path / "t.jsonl")
    log._file.close()  # type: ignore[union-attr]
    log._file = FullDiskFile()  # type: ignore[assignment]
    log.append({"kind": "server", "t_ns": 1})  # its close raised out of append before
    assert log.error is not None and "No space left on device" in log.error
    log.append({"kind": "server", "t_ns": 2})
    log.close()


async def test_an_edge_scrape_that_fails_never_reaches_the_run(tmp_path: Path) -> None:
    t = Telemetry(TelemetryOptions(interval_s=1.0, nvml=None, server_metrics="off"), tmp_path, epoch_offset_ns=0)
    await t.start()
    t._endpoint, t._http = object(), object()  # type: ignore[assignment]  # a scrape of these raises

    await t.scrape_edge()
    t._endpoint = t._http = None
    await t.stop()
