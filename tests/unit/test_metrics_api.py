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
    code = (
        "import sys, tokspeed.metrics; "
        "bad = [m for m in sys.modules if m.startswith('tokspeed.') and m.split('.')[1] "
        "not in ('metrics', 'records', 'errors')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
