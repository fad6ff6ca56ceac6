"""`tokspeed cost DIR` and `tokspeed efficiency DIR`: what a saved run costs, and how close it came to the hardware."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from tokspeed.cli.estimate_cmd import (
    BwOpt,
    GpuOpt,
    GpusOpt,
    InterconnectOpt,
    KVFormat,
    KVOpt,
    MemOpt,
    ModelOpt,
    TflopsOpt,
    WeightFormat,
    WeightsOpt,
    load_hardware,
)
from tokspeed.errors import ConfigError

COST_HELP = """What a saved run's throughput costs, from a price per GPU-hour.

Cost per 1M output tokens and per 1M total tokens, output tokens per currency
unit and cost per 1,000 requests, for each load point and, when the run searched
capacity, at the highest rate that met the SLOs. Repeat --price-per-hour to
compare instance types side by side.

  tokspeed cost runs/a --price-per-hour 2.50

  tokspeed cost runs/a --price-per-hour 2.50 --price-per-hour 4.10 --gpus 2 --json
"""

EFFICIENCY_HELP = """How close a saved run came to the hardware: MBU and MFU.

Model bandwidth utilisation (decode bytes moved per second ÷ peak bandwidth),
decode and prefill model FLOPs utilisation, and the measured output tokens/s as
a share of the speed of light at the run's concurrency.

  tokspeed efficiency runs/a --model llama-3-8b --gpu h100-sxm

  tokspeed efficiency runs/a --model ./Qwen2-7B/config.json --gpu rtx4090 --weights int4 --json
"""

Dir = Annotated[Path, typer.Argument(help="A results directory written by `tokspeed run --out`.")]


def _print(renderable: object) -> None:
    from rich.console import Console

    Console(highlight=False, width=None if sys.stdout.isatty() else 160).print(renderable)


def cost(
    directory: Dir,
    price_per_hour: Annotated[list[float], typer.Option("--price-per-hour", metavar="PRICE", help="Price of one GPU for one hour, in any currency (repeatable: one row per load point and price). [default: required]")],
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs the run used: the price is paid for each.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print the costs as JSON (schema tokspeed.cost/1).")] = False,
) -> int:
    from tokspeed.estimate.cost import costs, measured_rates
    from tokspeed.reports.estimate_text import render_costs
    from tokspeed.results import load_run

    if any(p <= 0 for p in price_per_hour):
        raise ConfigError("--price-per-hour must be positive", hint="e.g. --price-per-hour 2.50")
    result, _ = load_run(directory, with_records=False)
    rows = costs(measured_rates(result), list(price_per_hour), gpus)
    if json_out:
        data = {"schema": "tokspeed.cost/1", "costs": [c.to_json() for c in rows]}
        print(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        _print(render_costs(rows))
    return 0


def efficiency(
    directory: Dir,
    model: ModelOpt,
    gpu: GpuOpt,
    gpus: GpusOpt = 1,
    weights: WeightsOpt = WeightFormat.auto,
    kv: KVOpt = KVFormat.fp16,
    gpu_memory_gb: MemOpt = None,
    bandwidth_gb_s: BwOpt = None,
    tflops: TflopsOpt = None,
    interconnect_gb_s: InterconnectOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the efficiency as JSON (schema tokspeed.efficiency/1).")] = False,
) -> int:
    from tokspeed.estimate.bounds import weight_format
    from tokspeed.estimate.efficiency import efficiency as point_efficiency
    from tokspeed.estimate.model import load_model
    from tokspeed.reports.estimate_text import render_efficiency
    from tokspeed.results import load_run

    spec = load_model(model)
    hw = load_hardware(gpu, gpu_memory_gb, bandwidth_gb_s, tflops, interconnect_gb_s)
    fmt = weight_format(spec, weights.value)
    result, _ = load_run(directory, with_records=False)
    rows = [
        point_efficiency(b.name, b.profile, b.summary, spec, hw, weights=weights.value, kv=kv.value, gpus=gpus)
        for b in result.benchmarks
    ]
    if json_out:
        data = {"schema": "tokspeed.efficiency/1", "model": spec.name, "gpu": hw.name, "gpus": gpus,
                "weights": fmt.name, "weights_source": fmt.source, "kv": kv.value, "points": [r.to_json() for r in rows]}
        print(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        _print(render_efficiency(rows, f"{spec.name} on {gpus} × {hw.name}, weights {fmt.name}"))
    return 0
