"""pytest imports test files by basename (rootdir-relative, no packages): two files with one name break collection."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_unit_and_integration_test_files_have_distinct_names() -> None:
    unit = {p.name for p in (TESTS / "unit").glob("test_*.py")}
    integration = {p.name for p in (TESTS / "integration").glob("test_*.py")}
    assert unit & integration == set(), "rename one of each pair (e.g. add _sim to the integration test)"
