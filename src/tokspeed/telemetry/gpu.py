"""GPU readings through NVML (the `pynvml` module of nvidia-ml-py), injectable for tests.

`open_nvml(nvml)` initialises NVML and lists the GPUs; it returns None and a note, never
raises, when the module is missing, there is no driver or no GPU. `NvmlGpus.read()` takes
one reading of every GPU (blocking C calls: the sampler runs it in a thread). A field a GPU
does not support (NVML_ERROR_NOT_SUPPORTED, e.g. power on some boards) is noted once and
not asked again; it stays null in the samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MIB = 2**20
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND (an older driver)
GPU_FIELDS = ("utilization_pct", "memory_used_mib", "power_w", "energy_mj", "sm_clock_mhz", "temperature_c")
_LABELS = {
    "utilization_pct": "utilisation",
    "memory_used_mib": "memory used",
    "power_w": "power",
    "energy_mj": "energy counter",
    "sm_clock_mhz": "SM clock",
    "temperature_c": "temperature",
}


def load_nvml() -> Any | None:
    """The installed pynvml module, or None."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str | None
    memory_total_mib: float | None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _readers(nvml: Any) -> dict[str, Callable[[Any], float | int]]:
    return {
        "utilization_pct": lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
        "memory_used_mib": lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used / MIB,
        "power_w": lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000,
        "energy_mj": lambda h: int(nvml.nvmlDeviceGetTotalEnergyConsumption(h)),
        "sm_clock_mhz": lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        "temperature_c": lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
    }


@dataclass
class NvmlGpus:
    """An initialised NVML session: the GPUs it sees, read one sample at a time."""

    nvml: Any
    handles: list[Any]
    infos: list[GpuInfo]
    notes: list[str] = field(default_factory=list)
    _off: set[tuple[int, str]] = field(default_factory=set)  # (gpu, field) not supported
    _noted: set[tuple[int, str]] = field(default_factory=set)

    def read(self) -> list[dict[str, Any]]:
        """One reading of every GPU: {"gpu": index, field: value or None, ...}."""
        readers = _readers(self.nvml)
        return [
            {"gpu": info.index, **{name: self._field(info.index, handle, name, readers[name]) for name in GPU_FIELDS}}
            for info, handle in zip(self.infos, self.handles)
        ]

    def energy_mj(self) -> dict[int, int | None]:
        """Each GPU's total-energy counter now (mJ since the driver loaded), for exact window deltas."""
        read = _readers(self.nvml)["energy_mj"]
        out: dict[int, int | None] = {}
        for info, handle in zip(self.infos, self.handles):
            value = self._field(info.index, handle, "energy_mj", read)
            out[info.index] = None if value is None else int(value)
        return out

    def _field(self, index: int, handle: Any, name: str, read: Callable[[Any], float | int]) -> float | int | None:
        if (index, name) in self._off:
            return None
        try:
            return read(handle)
        except Exception as exc:  # noqa: BLE001 - NVMLError above all; a binding without the function; never the run
            code = _error_code(exc)
            unsupported = code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND) or isinstance(exc, AttributeError)
            if unsupported:
                self._off.add((index, name))
            if (index, name) not in self._noted:
                self._noted.add((index, name))
                why = "not supported" if unsupported else f"could not be read ({exc})"
                self.notes.append(f"GPU {index}: {_LABELS[name]} {why} by NVML; left out")
            return None

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - shutting down a session that broke: nothing left to do
            pass


def open_nvml(nvml: Any | None) -> tuple[NvmlGpus | None, str | None]:
    """Initialise NVML and list the GPUs; (None, why) when there is nothing to sample."""
    if nvml is None:
        return None, "no GPU telemetry: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable GPU here
        return None, f"no GPU telemetry: NVML unavailable ({exc or type(exc).__name__}; no NVIDIA driver?)"
    try:
        count = int(nvml.nvmlDeviceGetCount())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    except Exception as exc:  # noqa: BLE001
        _shutdown(nvml)
        return None, f"no GPU telemetry: NVML could not list the GPUs ({exc})"
    if not handles:
        _shutdown(nvml)
        return None, "no GPU telemetry: NVML sees no GPU"
    return NvmlGpus(nvml, handles, [_info(nvml, i, h) for i, h in enumerate(handles)]), None


def _info(nvml: Any, index: int, handle: Any) -> GpuInfo:
    try:
        name: str | None = _text(nvml.nvmlDeviceGetName(handle))
    except Exception:  # noqa: BLE001
        name = None
    try:
        total: float | None = nvml.nvmlDeviceGetMemoryInfo(handle).total / MIB
    except Exception:  # noqa: BLE001
        total = None
    return GpuInfo(index=index, name=name, memory_total_mib=total)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001, S110
        pass


def driver_facts(nvml: Any) -> dict[str, str | None]:
    """Driver and CUDA (driver API) versions of an initialised NVML, e.g. {"driver": "550.54", "cuda": "12.4"}."""
    facts: dict[str, str | None] = {"driver": None, "cuda": None}
    try:
        facts["driver"] = _text(nvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001, S110
        pass
    try:
        v = int(nvml.nvmlSystemGetCudaDriverVersion())
        facts["cuda"] = f"{v // 1000}.{v % 1000 // 10}"
    except Exception:  # noqa: BLE001, S110
        pass
    return facts
