"""Register a finished run's results directory: what `run`, `sweep` and `capacity` call last.

The catalogue is a convenience beside the results directory, never a condition of the run:
`register_quietly` never raises, and gives up after `DEADLINE_S` (a PostgreSQL server that
accepts the connection and then hangs, a SQLite file another process holds locked), so the
run's exit code is what the run earned. What went wrong comes back as one line to print.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokspeed.errors import TokspeedError
from tokspeed.history.entry import RunEntry, entry_from_dir
from tokspeed.history.location import CatalogLocation

DEADLINE_S = 15.0


@dataclass(frozen=True, slots=True)
class Registration:
    """The outcome: the entry written, or the reason it was not (`warning`)."""

    entry: RunEntry | None = None
    warning: str | None = None


def register(directory: Path, location: CatalogLocation, clean: Callable[[Any], Any] | None = None) -> RunEntry:
    """Read `directory`'s run.json and write its entry (every string through `clean` first); raises on failure."""
    from tokspeed.history.store import Catalogue

    entry = entry_from_dir(directory)
    if clean is not None:
        entry = entry.redacted(clean)
    with Catalogue.open(location) as catalogue:
        catalogue.upsert(entry)
    return entry


def register_quietly(directory: Path, location: CatalogLocation, clean: Callable[[Any], Any] | None = None,
                     deadline_s: float = DEADLINE_S) -> Registration:
    """`register`, but never raising and never taking longer than `deadline_s`."""
    outcome: list[Registration] = []

    def work() -> None:
        try:
            outcome.append(Registration(entry=register(directory, location, clean)))
        except TokspeedError as exc:
            outcome.append(Registration(warning=str(exc)))
        except Exception as exc:  # the catalogue must never fail a run: say it, whatever it was
            outcome.append(Registration(warning=f"cannot register in the catalogue {location.shown}: "
                                                f"{type(exc).__name__}: {exc}"))

    thread = threading.Thread(target=work, name="tokspeed-catalogue", daemon=True)
    thread.start()
    thread.join(deadline_s)
    if not outcome:
        return Registration(warning=f"the catalogue {location.shown} did not answer within {deadline_s:g} s: "
                                    "the run is not registered")
    return outcome[0]
