"""A fake `pynvml` (nvidia-ml-py) with the functions tokspeed calls, for tests without a GPU.

Configured by the JSON in $TOKSPEED_FAKE_NVML when imported (so a `tokspeed` subprocess with
this directory on PYTHONPATH sees it), or by `configure(dict)`:

  {"init_error": 12}                      nvmlInit fails (12 = library not found)
  {"driver": "550.54.15", "cuda": 12040,
   "gpus": [{"name": "Fake H100", "memory_total_mib": 81920, "memory_used_mib": 1024,
             "utilization_pct": 50, "power_w": 300, "sm_clock_mhz": 1980,
             "temperature_c": 45, "energy": true}]}

A GPU field set to null raises NVMLError(NOT_SUPPORTED), as NVML does for a board without
that sensor. The energy counter is power_w × seconds since nvmlInit (as mJ), on `clock`.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
MIB = 2**20

DEFAULT: dict[str, Any] = {
    "driver": "550.54.15",
    "cuda": 12040,
    "gpus": [
        {"name": "Fake H100", "memory_total_mib": 81920, "memory_used_mib": 1024, "utilization_pct": 50,
         "power_w": 300, "sm_clock_mhz": 1980, "temperature_c": 45},
    ],
}

config: dict[str, Any] = dict(DEFAULT)
calls: Counter[str] = Counter()
clock: Callable[[], float] = time.monotonic
_t0: float | None = None


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 12: "NVML Shared Library Not Found"}.get(self.value, f"NVML error {self.value}")


def configure(cfg: dict[str, Any]) -> None:
    global config, _t0
    config = cfg
    _t0 = None
    calls.clear()


def _gpu(handle: int, key: str) -> Any:
    calls[key] += 1
    if _t0 is None:
        raise NVMLError(9)  # NVML_ERROR_UNINITIALIZED
    value = config["gpus"][handle].get(key)
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


def nvmlInit() -> None:
    global _t0
    calls["init"] += 1
    if config.get("init_error"):
        raise NVMLError(int(config["init_error"]))
    _t0 = clock()


def nvmlShutdown() -> None:
    global _t0
    calls["shutdown"] += 1
    _t0 = None


def nvmlDeviceGetCount() -> int:
    return len(config.get("gpus", []))


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetName(handle: int) -> bytes:
    return str(_gpu(handle, "name")).encode()  # older bindings return bytes


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    total = _gpu(handle, "memory_total_mib") * MIB
    used = _gpu(handle, "memory_used_mib") * MIB
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=_gpu(handle, "utilization_pct"), memory=0)


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return int(_gpu(handle, "power_w") * 1000)


def nvmlDeviceGetTotalEnergyConsumption(handle: int) -> int:
    calls["energy"] += 1
    if _t0 is None:
        raise NVMLError(9)
    gpu = config["gpus"][handle]
    if gpu.get("energy", True) is False or gpu.get("power_w") is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(gpu["power_w"] * (clock() - _t0) * 1000)


def nvmlDeviceGetClockInfo(handle: int, kind: int) -> int:
    assert kind == NVML_CLOCK_SM
    return int(_gpu(handle, "sm_clock_mhz"))


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    assert sensor == NVML_TEMPERATURE_GPU
    return int(_gpu(handle, "temperature_c"))


def nvmlSystemGetDriverVersion() -> str:
    return str(config["driver"])


def nvmlSystemGetCudaDriverVersion() -> int:
    return int(config["cuda"])


if os.environ.get("TOKSPEED_FAKE_NVML"):
    configure(json.loads(os.environ["TOKSPEED_FAKE_NVML"]))
