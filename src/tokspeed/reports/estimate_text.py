"""Render `tokspeed estimate`, `tokspeed efficiency` and `tokspeed cost` as rich renderables.

Pure: an Estimate, Efficiency rows or Cost rows in, renderables out.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tokspeed.estimate.bounds import weight_format
from tokspeed.estimate.cost import Cost
from tokspeed.estimate.efficiency import Efficiency
from tokspeed.estimate.speed_of_light import Estimate


def _num(value: float | None, fmt: str = ",.1f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{fmt}}{suffix}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def render_estimate(est: Estimate) -> RenderableType:
    """Header, memory sizing, one row per concurrency, then which bound applies and why."""
    m, w, mem = est.model, est.workload, est.memory
    moe = f", {m.active_params / 1e9:.2f}B active ({m.experts_per_token} of {m.num_experts} experts)" if m.is_moe else ""
    fmt = weight_format(m, w.weights)
    source = " (quantization_config)" if fmt.source == "quantization_config" else ""
    link = f", {est.gpu.interconnect} {est.gpu.interconnect_gb_s:,.0f} GB/s" if w.gpus > 1 and est.gpu.interconnect_gb_s else ""
    head = Text.assemble(
        (f"{m.name}", "bold"), f": {m.total_params / 1e9:.2f}B parameters{moe}; ",
        (f"{w.gpus} × {est.gpu.name}", "bold"),
        f" ({est.gpu.memory_gib:g} GiB, {est.gpu.bandwidth_gb_s:,.0f} GB/s{link}); weights {fmt.name}{source}, KV cache {w.kv}",
    )
    window = ""
    if m.sliding_window and mem.kv is not None:
        window = (f" at {w.sequence_tokens:,} tokens ({mem.kv.full_bytes_per_token / mem.kv_copies:,.0f} within the "
                  f"{m.sliding_window:,}-token window of {m.window_layers} of {m.num_layers} layers)")
    copies = ""
    if mem.kv_copies > 1:
        held = "every GPU holds the whole MLA latent" if m.is_mla else f"{m.num_kv_heads} KV heads over {w.gpus} GPUs"
        copies = f", × {mem.kv_copies:g} copies ({held})"
    lines: list[RenderableType] = [
        head,
        Text(
            f"memory: {mem.memory_bytes / 1e9:.1f} GB × {w.utilization:g} utilization = {mem.usable_bytes / 1e9:.1f} GB; "
            f"weights {mem.weights_bytes / 1e9:.2f} GB, reserve {mem.reserve_bytes / 1e9:.1f} GB, "
            f"KV cache {mem.kv_budget_bytes / 1e9:.1f} GB"
        ),
        Text(
            f"KV cache: {mem.kv_bytes_per_token / mem.kv_copies:,.0f} bytes/token{window}{copies} → {mem.kv_cache_tokens:,} tokens → "
            f"{est.max_concurrent_sequences:,} concurrent sequences of {w.sequence_tokens:,} tokens"
            + (f", {mem.max_sequences(w.max_model_len):,} of --max-model-len {w.max_model_len:,}" if w.max_model_len else "")
        ),
    ]
    if not mem.weights_fit:
        lines.append(Text("the weights and the reserve do not fit in the usable memory: use more GPUs or a smaller format", style="bold red"))
    elif w.max_model_len and mem.max_sequences(w.max_model_len) < 1:
        lines.append(Text("not one sequence of --max-model-len fits in the KV cache: an engine would refuse to start", style="bold red"))
    lines.extend([Text(), _points_table(est)])
    shown = est.points if len(est.points) <= 2 else [est.points[0], est.points[-1]]
    lines.extend(Text(est.why(p)) for p in shown)
    lines.append(Text(f"prefill of {w.input_tokens:,} tokens is {est.points[0].prefill.bound}-bound; "
                      "every figure is a speed of light: no engine beats it", style="dim"))
    return Group(*lines)


def _points_table(est: Estimate) -> Table:
    table = Table(title=f"speed of light, {est.workload.input_tokens:,} in / {est.workload.output_tokens:,} out tokens")
    for col in ("concurrency", "TTFT ms", "ITL ms", "E2E ms", "output tok/s", "per user tok/s", "bound", "fits"):
        table.add_column(col, justify="right")
    for p in est.points:
        table.add_row(
            str(p.concurrency), _num(p.ttft_ms, ",.2f"), _num(p.itl_ms, ",.2f"), _num(p.e2e_ms, ",.0f"),
            _num(p.decode_tokens_per_s, ",.0f"), _num(1e3 / p.itl_ms, ",.0f"), p.decode.bound,
            "yes" if p.fits else "[red]no[/red]",
        )
    return table


def render_efficiency(rows: Sequence[Efficiency], title: str) -> RenderableType:
    table = Table(title=title)
    for col in ("benchmark", "concurrency", "output tok/s", "speed of light", "of it", "decode GB/s", "MBU", "decode MFU", "prefill MFU"):
        table.add_column(col, justify="right")
    for e in rows:
        table.add_row(
            e.name, _num(e.concurrency, ",.1f"), _num(e.output_tokens_per_s, ",.0f"),
            _num(e.speed_of_light_output_tokens_per_s, ",.0f"), _pct(e.fraction_of_speed_of_light),
            _num(e.achieved_decode_gb_s, ",.0f"), _pct(e.mbu), _pct(e.decode_mfu), _pct(e.prefill_mfu),
        )
    note = Text("MBU: decode bytes moved per second ÷ peak bandwidth; MFU: FLOPs per second ÷ dense peak "
                "(prefill from median TTFT, which includes the network and queueing)", style="dim")
    parts: list[RenderableType] = [table, note]
    if any((v or 0) > 1 for e in rows for v in (e.mbu, e.decode_mfu, e.prefill_mfu, e.fraction_of_speed_of_light)):
        parts.append(Text("above 100%: this run was not served by that model on that hardware (a simulator, a "
                          "smaller model, more GPUs, speculative decoding or a prefix cache); check --model, --gpu and --gpus",
                          style="yellow"))
    return Group(*parts)


def render_costs(rows: Sequence[Cost]) -> RenderableType:
    table = Table(title="cost at the measured throughput")
    for col in ("at", "price/GPU-h", "GPUs", "per 1M output tok", "per 1M total tok", "output tok per unit", "per 1k requests"):
        table.add_column(col, justify="right")
    for c in rows:
        table.add_row(
            c.rates.label, f"{c.price_per_gpu_hour:g}", str(c.gpus), _num(c.per_1m_output_tokens, ",.3f"),
            _num(c.per_1m_total_tokens, ",.3f"), _num(c.output_tokens_per_unit, ",.0f"), _num(c.per_1k_requests, ",.4f"),
        )
    return table
