"""The telemetry block of the console report: GPUs, energy, server queue, client CPU (pure)."""

from __future__ import annotations

from tokspeed.reports.format import fmt
from tokspeed.telemetry.schema import (
    ClientSummary,
    GPUSummary,
    SeriesStats,
    ServerProfile,
    ServerSummary,
    SpecDecodeSummary,
    TelemetrySummary,
)


def telemetry_lines(t: TelemetrySummary | None, scope: str = "measured window") -> list[str]:
    """A few lines (GPU util, J/token, server running/waiting, client CPU, notes); none without telemetry."""
    if t is None:
        return []
    window = f"{fmt(t.window_s, 1)} s, " if t.window_s is not None else ""
    lines = [f"Telemetry ({scope}: {window}a sample every {t.interval_s:g} s)"]
    lines += [_gpu(g) for g in t.gpus]
    if t.energy_per_output_token_j is not None:
        total = t.energy_j if t.energy_j is not None else sum(g.energy_j or 0 for g in t.gpus)
        per_j = f" · {fmt(t.output_tokens_per_j, 2)} output tokens per J" if t.output_tokens_per_j is not None else ""
        lines.append(f"  Energy  {fmt(t.energy_per_output_token_j, 3)} J per output token{per_j} "
                     f"({fmt(total, 0)} J over {len(t.gpus)} GPU{'s' if len(t.gpus) != 1 else ''})")
    if t.server is not None:
        lines.append(_server(t.server))
        if t.server.spec_decode is not None:
            lines.append(_spec_decode(t.server.spec_decode))
    if t.client is not None:
        lines.append(_client(t.client))
    if t.window_s is not None and t.window_s < 2 * t.interval_s:
        lines.append("  note: the window lasted under two sampling intervals: few or no samples (lower --telemetry-interval)")
    lines += [f"  note: {n}" for n in t.notes]
    return lines


def _mean_max(s: SeriesStats, unit: str, digits: int = 0) -> str:
    if not s.samples:
        return "—"
    return f"mean {fmt(s.mean, digits)}{unit} · max {fmt(s.max, digits)}{unit}"


def _gpu(g: GPUSummary) -> str:
    parts = [f"util {_mean_max(g.utilization_pct, '%')}"]
    if g.memory_used_mib.samples:
        total = f" of {fmt((g.memory_total_mib or 0) / 1024, 1)}" if g.memory_total_mib else ""
        parts.append(f"memory max {fmt((g.memory_used_mib.max or 0) / 1024, 1)}{total} GiB")
    if g.power_w.samples:
        parts.append(f"power {_mean_max(g.power_w, ' W')}")
    if g.temperature_c.samples:
        parts.append(f"{fmt(g.temperature_c.max, 0)} °C max")
    if g.sm_clock_mhz.samples:
        parts.append(f"SM clock mean {fmt(g.sm_clock_mhz.mean, 0)} MHz")
    return f"  GPU {g.index} {g.name or ''}: " + " · ".join(parts)


def _server(s: ServerSummary) -> str:
    parts = [f"running {_mean_max(s.running, '', 1)}", f"waiting {_mean_max(s.waiting, '', 1)}"]
    if s.kv_cache_usage_pct.samples:
        parts.append(f"KV cache {_mean_max(s.kv_cache_usage_pct, '%')}")
    if s.prefix_cache_hit_rate is not None:
        parts.append(f"prefix cache hits {fmt(s.prefix_cache_hit_rate * 100, 1)}%")
    if s.preemptions is not None:
        parts.append(f"{fmt(s.preemptions, 0)} preemptions")
    errors = f", {s.errors} failed" if s.errors else ""
    return f"  Server ({s.engine or 'unknown'}, {s.scrapes} scrapes{errors}): " + " · ".join(parts)


def _spec_decode(s: SpecDecodeSummary) -> str:
    parts = []
    if s.acceptance_rate is not None:
        parts.append(f"acceptance {fmt(s.acceptance_rate * 100, 1)}%")
    if s.mean_acceptance_length is not None:
        parts.append(f"mean accepted length {fmt(s.mean_acceptance_length, 2)}")
    if s.per_position_acceptance_rate:
        parts.append("per position " + ", ".join(fmt(r, 2) for r in s.per_position_acceptance_rate))
    parts.append(f"{fmt(s.drafts, 0)} drafts")
    return "  Speculative decoding  " + " · ".join(parts)


def _client(c: ClientSummary) -> str:
    parts = [f"CPU {_mean_max(c.process_cpu_pct, '%')} of one core"]
    if c.cpu_ms_per_request is not None:
        parts.append(f"{fmt(c.cpu_ms_per_request, 3)} ms CPU per request")
    if c.loop_lag_ms.samples:
        parts.append(f"event-loop lag p99 {fmt(c.loop_lag_ms.p99, 1)} ms")
    if c.host_cpu_pct.samples:
        cores = f" of {c.cpu_count} cores" if c.cpu_count else ""
        parts.append(f"host CPU mean {fmt(c.host_cpu_pct.mean, 0)}%{cores}")
    if c.rss_mib.samples:
        parts.append(f"RSS max {fmt(c.rss_mib.max, 0)} MiB")
    return "  Client  " + " · ".join(parts)


def server_profile_line(record: ServerProfile | None) -> list[str]:
    """--profile: one line saying where the server wrote its trace, or why there is none; none without --profile."""
    if record is None:
        return []
    if record.status != "profiled":
        return [f"Server profile: {record.status}" + (f" ({record.message})" if record.message else "")]
    where = (f"the server wrote its trace under {record.trace_dir} (on its machine)" if record.trace_dir
             else "the server did not say where it wrote its trace (vLLM: its torch_profiler_dir; SGLang: "
                  "SGLANG_TORCH_PROFILER_DIR, default /tmp)")
    said = f"; it said: {record.message}" if record.message else ""
    return [f"Server profile {record.started_at} → {record.stopped_at}: {where}{said}"]
