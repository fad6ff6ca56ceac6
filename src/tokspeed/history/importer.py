"""`tokspeed history import DIR…`: find every results directory (a run.json) under DIRs and catalogue it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tokspeed.errors import ResultsError
from tokspeed.history.entry import RunEntry, entry_from_dir
from tokspeed.history.store import Catalogue
from tokspeed.results import RUN_FILE


@dataclass
class ImportReport:
    imported: list[RunEntry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "DIR: why"


def find_run_dirs(roots: Iterable[Path]) -> Iterator[Path]:
    """Each directory under `roots` (themselves included) that holds a run.json, sorted, without following links."""
    seen: set[Path] = set()
    for root in roots:
        if (root / RUN_FILE).is_file():
            found = [root]
        else:
            found = []
        for current, dirs, files in os.walk(root):
            dirs.sort()
            if RUN_FILE in files and Path(current) != root:
                found.append(Path(current))
        for d in sorted(found):
            key = d.resolve()
            if key not in seen:
                seen.add(key)
                yield d


def import_dirs(catalogue: Catalogue, roots: Iterable[Path]) -> ImportReport:
    """Catalogue every results directory under `roots`; unreadable ones are skipped with the reason."""
    report = ImportReport()
    for directory in find_run_dirs(roots):
        try:
            entry = entry_from_dir(directory)
        except (ResultsError, ValueError) as exc:  # ValueError: a run.json of the right schema name but invalid
            report.skipped.append(f"{directory}: {exc}")
            continue
        catalogue.upsert(entry)
        report.imported.append(entry)
    return report
