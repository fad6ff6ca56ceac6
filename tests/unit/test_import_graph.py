"""The module graph has no cycles, function-local and TYPE_CHECKING imports included.

The layers between packages are pyproject.toml's import-linter contract (`lint-imports`, run by
.ci/run); this test holds the modules inside a package to the same rule: no module imports,
however indirectly and from wherever in its body, a module that imports it back. grimp (the
graph import-linter builds on) reads every import statement, including those inside functions.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_no_module_of_tokspeed_is_in_an_import_cycle() -> None:
    assert cycles(grimp.build_graph("tokspeed", cache_dir=None)) == []


def test_a_cycle_closed_by_a_function_local_import_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyclepkg import b\n\n    return b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from cyclepkg.c import C\n")
    (pkg / "c.py").write_text("import cyclepkg.a\n\nC = 1\n")
    (pkg / "d.py").write_text("import cyclepkg.a\n")  # imports into the cycle, is not part of it
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles(grimp.build_graph("cyclepkg", cache_dir=None)) == [["cyclepkg.a", "cyclepkg.b", "cyclepkg.c"]]
