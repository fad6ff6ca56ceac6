"""The public surface of tokspeed.metrics: a sorted, importable __all__ and no heavy imports."""

from __future__ import annotations

import subprocess
import sys

import tokspeed.metrics as metrics


def test_all_is_sorted_and_importable() -> None:
    assert metrics.__all__ == sorted(metrics.__all__)
    for name in metrics.__all__:
        assert hasattr(metrics, name), name


def test_metrics_depend_only_on_records() -> None:
    """Every import of tokspeed.metrics, function-local ones included, stays in metrics, stats, records and errors,
    but for two leaves: the engines' metric names (telemetry.engines, which imports nothing) and the
    token counter (workload.tokens, which imports only records and errors)."""
    import grimp

    graph = grimp.build_graph("tokspeed", cache_dir=None)
    reached = set().union(*(graph.find_upstream_modules(m) for m in graph.find_descendants("tokspeed.metrics")))
    outside = {m for m in reached if m.split(".")[1] not in ("metrics", "stats", "records", "errors")}
    assert outside == {"tokspeed.telemetry.engines", "tokspeed.workload.tokens"}


def test_importing_metrics_loads_nothing_else_of_tokspeed() -> None:
    code = (
        "import sys, tokspeed.metrics; "
        "bad = [m for m in sys.modules if m.startswith('tokspeed.') and m.split('.')[1] "
        "not in ('metrics', 'stats', 'records', 'errors', 'version')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
