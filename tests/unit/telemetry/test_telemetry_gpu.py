"""NVML sampling against a fake pynvml: values, unsupported fields, missing driver or module."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

from locations import FAKES
from tokspeed.telemetry.environment import gpu_facts
from tokspeed.telemetry.gpu import open_nvml

FAKE = FAKES / "pynvml.py"
GPU = {"name": "Fake H100", "memory_total_mib": 81920, "memory_used_mib": 2048, "utilization_pct": 87,
       "power_w": 350.5, "sm_clock_mhz": 1755, "temperature_c": 61}


def fake_nvml(cfg: dict[str, Any]) -> ModuleType:
    """A fresh copy of tests/fakes/pynvml.py, configured."""
    spec = importlib.util.spec_from_file_location(f"fake_pynvml_{id(cfg)}", FAKE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.configure(cfg)
    return module


def test_reads_every_field_as_the_fake_gives_it() -> None:
    nvml = fake_nvml({"driver": "550.1", "cuda": 12040, "gpus": [GPU]})
    now = [100.0]
    nvml.clock = lambda: now[0]
    gpus, note = open_nvml(nvml)
    assert note is None and gpus is not None
    assert gpus.infos[0].name == "Fake H100" and gpus.infos[0].memory_total_mib == 81920
    now[0] = 102.0  # two seconds at 350.5 W
    (reading,) = gpus.read()
    assert reading == {"gpu": 0, "utilization_pct": 87, "memory_used_mib": 2048, "power_w": 350.5,
                       "energy_mj": 701_000, "sm_clock_mhz": 1755, "temperature_c": 61}
    assert gpus.energy_mj() == {0: 701_000}
    assert gpus.notes == []
    gpus.close()
    assert nvml.calls["shutdown"] == 1


def test_a_field_one_gpu_does_not_support_is_noted_once_and_not_asked_again() -> None:
    nvml = fake_nvml({"driver": "x", "cuda": 12000, "gpus": [GPU, {**GPU, "name": "Old board", "power_w": None}]})
    gpus, _ = open_nvml(nvml)
    assert gpus is not None
    first = gpus.read()
    second = gpus.read()
    assert [r["power_w"] for r in first] == [350.5, None]
    assert [r["energy_mj"] for r in second][1] is None  # energy needs power on this fake board
    assert first[0]["power_w"] == second[0]["power_w"] == 350.5
    assert gpus.notes == [
        "GPU 1: power not supported by NVML; left out",
        "GPU 1: energy counter not supported by NVML; left out",
    ]
    calls_after_two_reads = nvml.calls["power_w"]
    gpus.read()
    assert nvml.calls["power_w"] == calls_after_two_reads + 1  # only GPU 0 is asked again


def test_other_nvml_errors_leave_the_field_out_and_keep_asking() -> None:
    nvml = fake_nvml({"driver": "x", "cuda": 12000, "gpus": [GPU]})
    gpus, _ = open_nvml(nvml)
    assert gpus is not None
    nvml.nvmlShutdown()  # every call now fails with NVML_ERROR_UNINITIALIZED (9)
    (reading,) = gpus.read()
    assert all(reading[k] is None for k in reading if k != "gpu")
    assert len(gpus.notes) == 6 and "could not be read" in gpus.notes[0]
    nvml.nvmlInit()
    (reading,) = gpus.read()
    assert reading["utilization_pct"] == 87  # transient errors do not switch a field off
    assert len(gpus.notes) == 6


def test_no_driver_no_gpu_or_no_module_is_a_note_not_an_error() -> None:
    gpus, note = open_nvml(fake_nvml({"init_error": 12}))
    assert gpus is None and note is not None and "NVML Shared Library Not Found" in note
    gpus, note = open_nvml(fake_nvml({"gpus": []}))
    assert gpus is None and note == "no GPU telemetry: NVML sees no GPU"
    gpus, note = open_nvml(None)
    assert gpus is None and note is not None and "nvidia-ml-py is not installed" in note


def test_environment_names_gpus_driver_and_cuda_or_says_why_not() -> None:
    nvml = fake_nvml({"driver": "550.54.15", "cuda": 12040, "gpus": [GPU, GPU]})
    facts, reason = gpu_facts(nvml)
    assert reason is None
    assert facts == {
        "driver": "550.54.15",
        "cuda": "12.4",
        "devices": [{"index": i, "name": "Fake H100", "memory_total_mib": 81920.0} for i in (0, 1)],
    }
    assert nvml.calls["shutdown"] == 1
    facts, reason = gpu_facts(fake_nvml({"init_error": 12}))
    assert facts is None and reason is not None and reason.startswith("NVML unavailable")
