"""The tests' layout: unit tests mirror src/tokspeed's packages, and every test file's name is unique.

pytest imports test files by basename (rootdir-relative, no packages): two files with one name, in any
two folders, break collection.
"""

from __future__ import annotations

from collections import Counter

from locations import ROOT

TESTS = ROOT / "tests"
PACKAGES = {p.name for p in (ROOT / "src" / "tokspeed").iterdir() if (p / "__init__.py").exists()}


def test_every_test_file_name_is_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert {name for name, n in names.items() if n > 1} == set(), "rename one of each pair (e.g. add _sim to the integration test)"


def test_unit_test_folders_are_the_packages_they_test() -> None:
    folders = {p.name for p in (TESTS / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= PACKAGES, folders - PACKAGES
    assert all(any((TESTS / "unit" / f).glob("test_*.py")) for f in folders)
