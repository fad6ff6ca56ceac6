"""The catalogue itself: open it (migrating), register a run's entry, read runs and points back.

One `Catalogue` wraps one SQLAlchemy engine on SQLite or PostgreSQL; every write is one
transaction, so a reader never sees half a run. Registering a run replaces any row with its id
or its directory (re-registering, `--overwrite`, a moved directory imported again), so the
catalogue mirrors the results directories rather than accumulating twins.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tokspeed.errors import CatalogueError
from tokspeed.history.entry import HEADLINE, PointEntry, RunEntry
from tokspeed.history.location import CatalogLocation

POSTGRES_HINT = "pip install 'tokspeed[postgres]' (psycopg, the PostgreSQL driver)"
CONNECT_TIMEOUT_S = 5  # a catalogue that does not answer within this long is skipped, never waited for


@dataclass(frozen=True)
class RunFilter:
    """Which runs to read: substrings of target and model, every tag given, a date range, statuses."""

    target: str | None = None
    model: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    since: str | None = None  # ISO date-time, inclusive
    until: str | None = None  # ISO date-time, exclusive
    statuses: tuple[str, ...] = ()
    command: str | None = None
    limit: int | None = None  # the newest N (listed oldest first)


class Catalogue:
    """A catalogue opened at `location`; use as a context manager or call `close()`."""

    def __init__(self, location: CatalogLocation, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.location = location
        self._engine = _engine(location, timeout_s)

    @classmethod
    def open(cls, location: CatalogLocation, timeout_s: float = CONNECT_TIMEOUT_S) -> Catalogue:
        """Open (creating a SQLite file's directory) and bring the schema up to date."""
        from sqlalchemy.exc import SQLAlchemyError

        from tokspeed.history.schema import migrate

        catalogue = cls(location, timeout_s)
        try:
            migrate(catalogue._engine.begin)
        except SQLAlchemyError as exc:
            catalogue.close()
            raise _error("cannot open", location, exc) from exc
        except CatalogueError:
            catalogue.close()
            raise
        return catalogue

    def __enter__(self) -> Catalogue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._engine.dispose()

    @contextmanager
    def _tx(self, what: str) -> Iterator[Any]:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self._engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise _error(what, self.location, exc) from exc

    def upsert(self, entry: RunEntry) -> None:
        """Register `entry`, replacing the rows of the same run or the same directory, in one transaction."""
        from sqlalchemy import delete, or_, select

        from tokspeed.history.schema import POINTS, RUNS, TAGS

        with self._tx("cannot write to") as conn:
            old = set(conn.execute(select(RUNS.c.id).where(or_(RUNS.c.id == entry.id, RUNS.c.directory == entry.directory))).scalars())
            if old:
                for table in (POINTS, TAGS):
                    conn.execute(delete(table).where(table.c.run_id.in_(old)))
                conn.execute(delete(RUNS).where(RUNS.c.id.in_(old)))
            conn.execute(RUNS.insert().values(**_run_row(entry)))
            if entry.tags:
                conn.execute(TAGS.insert(), [{"run_id": entry.id, "key": k, "value": v} for k, v in sorted(entry.tags.items())])
            if entry.points:
                conn.execute(POINTS.insert(), [_point_row(entry.id, p) for p in entry.points])

    def forget(self, run_ids: Sequence[str]) -> int:
        """Remove runs (not their directories); how many were removed."""
        from sqlalchemy import delete

        from tokspeed.history.schema import POINTS, RUNS, TAGS

        with self._tx("cannot write to") as conn:
            for table in (POINTS, TAGS):
                conn.execute(delete(table).where(table.c.run_id.in_(list(run_ids))))
            return int(conn.execute(delete(RUNS).where(RUNS.c.id.in_(list(run_ids)))).rowcount or 0)

    def runs(self, where: RunFilter = RunFilter(), with_points: bool = False) -> list[RunEntry]:
        """The runs `where` selects, oldest first (with `limit`: the newest that many)."""
        from sqlalchemy import and_, select

        from tokspeed.history.schema import RUNS, TAGS

        query = select(RUNS)
        if where.target:
            query = query.where(RUNS.c.target.contains(where.target, autoescape=True))
        if where.model:
            query = query.where(RUNS.c.model.contains(where.model, autoescape=True))
        if where.since:
            query = query.where(RUNS.c.started_at >= where.since)
        if where.until:
            query = query.where(RUNS.c.started_at < where.until)
        if where.statuses:
            query = query.where(RUNS.c.status.in_(list(where.statuses)))
        if where.command:
            query = query.where(RUNS.c.command == where.command)
        for key, value in where.tags.items():
            tagged = select(TAGS.c.run_id).where(and_(TAGS.c.key == key, TAGS.c.value == value))
            query = query.where(RUNS.c.id.in_(tagged))
        query = query.order_by(RUNS.c.started_at.desc(), RUNS.c.id.desc())
        if where.limit:
            query = query.limit(where.limit)
        with self._tx("cannot read") as conn:
            rows = [_row(r) for r in conn.execute(query)]
            ids = [r["id"] for r in rows]
            tags = _by_run(conn, TAGS, ids)
            points = _by_run(conn, _points_table(), ids) if with_points else {}
        entries = [_entry(r, tags.get(r["id"], []), points.get(r["id"], [])) for r in rows]
        return entries[::-1]

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of every table, sorted (what a rebuilt catalogue must equal)."""
        from sqlalchemy import select

        from tokspeed.history.schema import POINTS, RUNS, TAGS

        out: dict[str, list[dict[str, Any]]] = {}
        with self._tx("cannot read") as conn:
            for table in (RUNS, TAGS, POINTS):
                rows = [_row(r) for r in conn.execute(select(table))]
                out[str(table.name)] = sorted(rows, key=lambda r: orjson.dumps(r, option=orjson.OPT_SORT_KEYS))
        return out

    def schema_version(self) -> int:
        from tokspeed.history.schema import current_version

        with self._tx("cannot read") as conn:
            return current_version(conn)


def _points_table() -> Any:
    from tokspeed.history.schema import POINTS

    return POINTS


def _by_run(conn: Any, table: Any, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    from sqlalchemy import select

    out: dict[str, list[dict[str, Any]]] = {}
    for start in range(0, len(ids), 500):  # bounded IN lists
        chunk = ids[start:start + 500]
        for r in conn.execute(select(table).where(table.c.run_id.in_(chunk))):
            out.setdefault(r.run_id, []).append(_row(r))
    return out


def _run_row(e: RunEntry) -> dict[str, Any]:
    row = e.model_dump(exclude={"tags", "headline", "points"})
    row.update({name: e.headline.get(name) for name in HEADLINE})
    return row


def _point_row(run_id: str, p: PointEntry) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": run_id, "idx": p.index, "name": p.name, "profile": p.profile, "comparable": p.comparable,
        "workload": p.workload, "target": p.target, "model": p.model,
        "profile_json": orjson.dumps(p.profile_json, option=orjson.OPT_SORT_KEYS).decode(),
        "metrics_json": orjson.dumps(p.metrics, option=orjson.OPT_SORT_KEYS).decode(),
    }
    row.update({name: p.metrics.get(name) for name in HEADLINE})
    return row


def _entry(row: dict[str, Any], tags: list[dict[str, Any]], points: list[dict[str, Any]]) -> RunEntry:
    headline = {name: row.pop(name) for name in HEADLINE}
    return RunEntry(
        **row,
        tags={t["key"]: t["value"] for t in sorted(tags, key=lambda t: t["key"])},
        headline=headline if any(v is not None for v in headline.values()) else {},
        points=[
            PointEntry(
                index=p["idx"], name=p["name"], profile=p["profile"], comparable=p["comparable"], workload=p["workload"], target=p["target"],
                model=p["model"], profile_json=orjson.loads(p["profile_json"]), metrics=orjson.loads(p["metrics_json"]),
            )
            for p in sorted(points, key=lambda p: (p["idx"] < 0, p["idx"]))
        ],
    )


def _engine(location: CatalogLocation, timeout_s: float) -> Any:
    try:
        from sqlalchemy import create_engine, event
    except ImportError as exc:
        raise CatalogueError("the results catalogue needs SQLAlchemy, which is not installed",
                             hint="reinstall tokspeed: pip install tokspeed") from exc
    if location.is_sqlite:
        path = Path(location.url.removeprefix("sqlite:///"))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CatalogueError(f"cannot create the catalogue's directory {path.parent}: {exc.strerror}",
                                 hint="set --catalog PATH or TOKSPEED_CATALOG to a writable place, or --no-catalog") from exc
        engine = create_engine(location.url, connect_args={"timeout": timeout_s})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:  # wait for a writer, at most timeout_s
            cursor = dbapi_conn.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            cursor.close()

        return engine
    if location.url.startswith("postgresql"):
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise CatalogueError("a PostgreSQL catalogue needs psycopg, which is not installed", hint=POSTGRES_HINT) from exc
        return create_engine(location.url, connect_args={"connect_timeout": max(1, int(timeout_s))}, pool_pre_ping=True)
    try:
        return create_engine(location.url)
    except Exception as exc:  # an unknown dialect or a missing driver: SQLAlchemy's own message
        raise CatalogueError(f"cannot use the catalogue {location.shown}: {exc}") from exc


def _error(what: str, location: CatalogLocation, exc: Exception) -> CatalogueError:
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    text = detail[0] if detail else type(exc).__name__
    from tokspeed.backends.credentials import redact_url

    return CatalogueError(f"{what} the catalogue {location.shown}: {redact_url(text)}",
                          hint="check --catalog / TOKSPEED_CATALOG, or pass --no-catalog")


def _row(row: Any) -> dict[str, Any]:
    """A result row as a plain dict (SQLAlchemy's keys are str subclasses that JSON encoders refuse)."""
    return {str(k): v for k, v in row._mapping.items()}
