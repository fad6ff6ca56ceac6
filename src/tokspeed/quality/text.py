"""Plain-text rendering of a quality result: a per-category table per target, comparison lines."""

from __future__ import annotations

from tokspeed.quality.schema import Comparison, QualityResult, Score, TargetQuality


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def score_cell(s: Score) -> str:
    return f"{pct(s.accuracy)} [{s.ci_low * 100:.0f}–{s.ci_high * 100:.0f}]"


def render_target(t: TargetQuality) -> list[str]:
    model = f" ({t.model})" if t.model else ""
    lines = [f"{t.label}{model}: {score_cell(t.overall)} over {t.overall.n} items"
             + (f", {t.overall.errors} failed requests" if t.overall.errors else "")]
    rows = [*t.categories, *t.langs]
    width = max((len(s.name) for s in rows), default=8)
    lines += [f"  {s.name:<{width}}  {s.correct:>3}/{s.n:<3}  {score_cell(s)}" for s in rows]
    if t.output_tokens_per_s:
        lines.append(f"  probe speed: {t.output_tokens_per_s:.1f} tokens/s per request, "
                     f"mean latency {t.mean_latency_ms or 0:.0f} ms")
    for score in t.lm_eval.scores[:12] if t.lm_eval else ():
        err = f" ± {score.stderr:.3f}" if score.stderr is not None else ""
        lines.append(f"  lm-eval {score.task} {score.metric}: {score.value:.4f}{err}")
    return lines


def render_comparison(c: Comparison) -> list[str]:
    lines = [c.sentence]
    width = max((len(d.name) for d in [c.overall, *c.categories]), default=8)
    for d in [c.overall, *c.categories]:
        mark = " *" if d.significant else ""
        lines.append(
            f"  {d.name:<{width}}  {pct(d.baseline_accuracy):>6} → {pct(d.accuracy):>6}  "
            f"{d.difference * 100:+.1f} pts [{d.ci_low * 100:+.1f}, {d.ci_high * 100:+.1f}]  "
            f"McNemar p={d.p_value:.3g}{mark}"
        )
    lines.append(f"  agreement: {pct(c.agreement.exact)} identical, {pct(c.agreement.normalised)} after normalising "
                 f"({c.agreement.n} items)")
    if c.speed_source:
        lines.append(f"  speed from {c.speed_source}")
    return lines


def render(result: QualityResult) -> str:
    settings = result.settings
    head = f"Quality probe: {result.probe_items} items from {result.probe_source}"
    lines = [f"{head} (temperature {settings.get('temperature')}, seed {settings.get('seed')})"]
    for t in result.targets:
        lines += render_target(t)
    for c in result.comparisons:
        lines += render_comparison(c)
    if result.comparisons:
        lines.append("  (* significant at 5%; intervals are 95%)")
    for lm in result.lm_eval:
        lines.append(f"lm-eval {lm.source}: " + ", ".join(f"{s.task} {s.metric} {s.value:.4f}" for s in lm.scores[:8]))
    return "\n".join(lines)


def one_line(t: TargetQuality) -> str:
    """The line `tokspeed run --quality` prints under the speed results."""
    cats = " · ".join(f"{s.name} {pct(s.accuracy)}" for s in t.categories)
    return f"Quality (probe, {t.overall.n} items): {score_cell(t.overall)} — {cats}"
