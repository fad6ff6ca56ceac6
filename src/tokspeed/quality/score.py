"""From item results to scores: per target (by category, by language) and between two targets."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tokspeed.quality.checkers import agreement_key
from tokspeed.quality.schema import (
    ALPHA,
    Agreement,
    Comparison,
    Difference,
    ItemResult,
    Score,
    TargetQuality,
)
from tokspeed.quality.stats import mcnemar_exact, paired_difference_ci, wilson


def score(name: str, results: Sequence[ItemResult]) -> Score:
    """Accuracy and its Wilson interval over `results`."""
    n = len(results)
    k = sum(r.correct for r in results)
    low, high = wilson(k, n)
    return Score(
        name=name,
        n=n,
        correct=k,
        accuracy=k / n if n else 0.0,
        ci_low=low,
        ci_high=high,
        errors=sum(r.error is not None for r in results),
    )


def grouped(results: Sequence[ItemResult], key: Callable[[ItemResult], str]) -> list[Score]:
    """One score per group, in first-seen order."""
    groups: dict[str, list[ItemResult]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return [score(name, rs) for name, rs in groups.items()]


def target_quality(label: str, url: str, model: str | None, results: Sequence[ItemResult], duration_s: float) -> TargetQuality:
    """A target's overall, per-category and per-language scores, and its probe speed."""
    timed = [r for r in results if r.error is None and r.latency_ms and r.completion_tokens is not None]
    tokens = sum(r.completion_tokens or 0 for r in timed)
    latency_s = sum(r.latency_ms or 0.0 for r in timed) / 1000
    return TargetQuality(
        label=label,
        url=url,
        model=model,
        overall=score("overall", results),
        categories=grouped(results, lambda r: r.category),
        langs=grouped(results, lambda r: r.lang),
        duration_s=duration_s,
        output_tokens=tokens,
        output_tokens_per_s=tokens / latency_s if latency_s > 0 and tokens else None,
        mean_latency_ms=latency_s * 1000 / len(timed) if timed else None,
    )


def difference(name: str, pairs: Sequence[tuple[ItemResult, ItemResult]]) -> Difference:
    """Candidate − baseline accuracy over paired items, its interval and McNemar's exact p."""
    n = len(pairs)
    b = sum(a.correct and not c.correct for a, c in pairs)
    c_only = sum(c.correct and not a.correct for a, c in pairs)
    diff, low, high = paired_difference_ci(b, c_only, n)
    p = mcnemar_exact(b, c_only)
    return Difference(
        name=name,
        n=n,
        baseline_accuracy=sum(a.correct for a, _ in pairs) / n if n else 0.0,
        accuracy=sum(c.correct for _, c in pairs) / n if n else 0.0,
        difference=diff,
        ci_low=low,
        ci_high=high,
        only_baseline=b,
        only_candidate=c_only,
        p_value=p,
        significant=p < ALPHA,
    )


def compare(
    baseline: TargetQuality,
    base_results: Sequence[ItemResult],
    candidate: TargetQuality,
    cand_results: Sequence[ItemResult],
    speed: tuple[float, str] | None = None,
) -> Comparison:
    """Paired comparison on the items both targets answered; `speed` = (ratio, source) when known."""
    by_id = {r.id: r for r in cand_results}
    pairs = [(a, by_id[a.id]) for a in base_results if a.id in by_id]
    cats: dict[str, list[tuple[ItemResult, ItemResult]]] = {}
    for pair in pairs:
        cats.setdefault(pair[0].category, []).append(pair)
    if speed is None:
        speed = probe_speed_ratio(baseline, candidate)
    comp = Comparison(
        baseline=baseline.label,
        candidate=candidate.label,
        overall=difference("overall", pairs),
        categories=[difference(name, ps) for name, ps in cats.items()],
        agreement=agreement(pairs),
        speed_ratio=speed[0] if speed else None,
        speed_source=speed[1] if speed else None,
    )
    comp.sentence = sentence(comp)
    return comp


def probe_speed_ratio(baseline: TargetQuality, candidate: TargetQuality) -> tuple[float, str] | None:
    """Candidate / baseline per-request output token rate over the probe requests, when both have one."""
    a, b = baseline.output_tokens_per_s, candidate.output_tokens_per_s
    if not a or not b:
        return None
    return b / a, "probe requests (completion tokens / request latency)"


def agreement(pairs: Sequence[tuple[ItemResult, ItemResult]]) -> Agreement:
    """Exact and normalised match rates of the two targets' responses."""
    answered = [(a, c) for a, c in pairs if a.error is None and c.error is None]
    n = len(answered)
    exact = sum(a.response == c.response for a, c in answered)
    norm = sum(agreement_key(a.response) == agreement_key(c.response) for a, c in answered)
    return Agreement(n=n, exact=exact / n if n else 0.0, normalised=norm / n if n else 0.0)


def _points(d: Difference) -> str:
    pts = abs(d.difference) * 100
    verb = "gained" if d.difference > 0 else "lost"
    sig = f"significant, p={d.p_value:.3g}" if d.significant else f"not significant, p={d.p_value:.2g}"
    where = "overall" if d.name == "overall" else f"on {d.name}"
    return f"{verb} {pts:.1f} points {where} ({sig})"


def sentence(comp: Comparison) -> str:
    """'B is 1.90× faster than A and lost 1.5 points on arithmetic (not significant, p=0.62)'."""
    parts: list[str] = []
    if comp.speed_ratio:
        r = comp.speed_ratio
        parts.append(f"{r:.2f}× faster than" if r >= 1 else f"{1 / r:.2f}× slower than")
    head = f"{comp.candidate} is {parts[0]} {comp.baseline}" if parts else f"{comp.candidate} vs {comp.baseline}:"
    changed = [d for d in comp.categories if d.difference != 0]
    worst = sorted(changed, key=lambda d: (not d.significant, -abs(d.difference)))[:2]
    clauses = [_points(comp.overall) if comp.overall.difference else "same overall accuracy"]
    clauses += [_points(d) for d in worst]
    joiner = " and " if parts else " "
    return head + joiner + "; ".join(clauses)
