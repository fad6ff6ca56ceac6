"""The catalogue's tables and their versioned migrations (SQLAlchemy Core, SQLite and PostgreSQL alike).

    runs        one row per results directory: id, directory, status, command, started/finished,
                target (redacted), model, server version, deployment commit, tool version,
                metric spec, capacity, and the headline figures as columns
    run_tags    (run_id, key, value): `--tag k=v`, one row each
    points      one row per load point: index, name, profile, comparable key, target, model,
                the profile and every figure as JSON, and the headline figures as columns
    tokspeed_catalog_version   the migrations applied: (version, description, applied_at)

Why not Alembic: the schema is three tables owned by a library, migrated automatically by
whichever command opens the catalogue first (a run's hook, `history import`), on SQLite or
PostgreSQL, with no alembic.ini, script directory or env.py to ship and no Mako to install.
A migration is a numbered function applied once in its own transaction and recorded in the
version table; a catalogue newer than this tokspeed is refused rather than written.
Each migration builds the tables it creates from its own definitions, so a later change to
the current tables can never change what an old migration did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from tokspeed.errors import CatalogueError
from tokspeed.history.entry import HEADLINE

VERSION_TABLE = "tokspeed_catalog_version"


def _headline_columns() -> list[Column]:  # type: ignore[type-arg]
    return [Column(name, Float, nullable=True) for name in HEADLINE]


def define_v1(metadata: MetaData) -> tuple[Table, Table, Table]:
    """The tables as migration 1 creates them."""
    runs = Table(
        "runs", metadata,
        Column("id", String(16), primary_key=True),
        Column("directory", Text, nullable=False),
        Column("status", String(16), nullable=False),
        Column("command", String(16), nullable=False),
        Column("started_at", String(40), nullable=False),
        Column("finished_at", String(40)),
        Column("target", Text),
        Column("model", Text),
        Column("server_version", Text),
        Column("deployment_commit", Text),
        Column("tool_version", String(40)),
        Column("metric_spec", String(40)),
        Column("capacity_requests_per_s", Float),
        Column("point_count", Integer, nullable=False),
        *_headline_columns(),
        Index("ix_runs_started_at", "started_at"),
        Index("ix_runs_target_model", "target", "model"),
        Index("ix_runs_directory", "directory"),
    )
    tags = Table(
        "run_tags", metadata,
        Column("run_id", String(16), primary_key=True),
        Column("key", String(200), primary_key=True),
        Column("value", Text, nullable=False),
        Index("ix_run_tags_key_value", "key", "value"),
    )
    points = Table(
        "points", metadata,
        Column("run_id", String(16), primary_key=True),
        Column("idx", Integer, primary_key=True, autoincrement=False),
        Column("name", Text, nullable=False),
        Column("profile", Text, nullable=False),
        Column("comparable", String(16), nullable=False),
        Column("workload", Text, nullable=False),
        Column("target", Text),
        Column("model", Text),
        Column("profile_json", Text, nullable=False),
        Column("metrics_json", Text, nullable=False),
        *_headline_columns(),
        Index("ix_points_comparable", "comparable"),
    )
    return runs, tags, points


def define_version(metadata: MetaData) -> Table:
    return Table(
        VERSION_TABLE, metadata,
        Column("version", Integer, primary_key=True, autoincrement=False),
        Column("description", Text, nullable=False),
        Column("applied_at", String(40), nullable=False),
    )


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection], None]


def _v1(conn: Connection) -> None:
    metadata = MetaData()
    define_v1(metadata)
    metadata.create_all(conn)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "runs, run_tags and points", _v1),
)
LATEST = MIGRATIONS[-1].version

# the current tables, as the store reads and writes them
METADATA = MetaData()
RUNS, TAGS, POINTS = define_v1(METADATA)
VERSION = define_version(METADATA)


def current_version(conn: Connection) -> int:
    """The highest migration applied (0: a new, empty catalogue)."""
    if not conn.dialect.has_table(conn, VERSION_TABLE):
        return 0
    found = conn.execute(select(VERSION.c.version).order_by(VERSION.c.version.desc()).limit(1)).scalar()
    return int(found or 0)


MIGRATION_LOCK = 28_028_028  # PostgreSQL advisory lock key: one migrating process at a time


def _serialised(conn: Connection) -> Connection:
    """Hold the migration lock for this transaction (PostgreSQL; SQLite's own write lock serialises it)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    return conn


def migrate(connect: Callable[[], AbstractContextManager[Connection]], migrations: Sequence[Migration] = MIGRATIONS) -> list[int]:
    """Apply the migrations a catalogue lacks, each in its own transaction; the versions applied now.

    `connect` opens a connection in a transaction (`engine.begin`). Processes opening a new
    catalogue at once: on PostgreSQL an advisory lock lets one migrate while the others wait,
    then see its version; on SQLite the loser's DDL or version insert fails, rolls back, and it
    looks again (up to three times).
    """
    applied: list[int] = []
    latest = migrations[-1].version if migrations else 0
    for attempt in range(3):
        try:
            with connect() as conn:
                define_version(MetaData()).create(_serialised(conn), checkfirst=True)
            with connect() as conn:
                have = current_version(conn)
            if have > latest:
                raise CatalogueError(
                    f"the catalogue is at schema version {have}; this tokspeed knows up to {latest}",
                    hint="upgrade tokspeed (a newer one wrote this catalogue), or point --catalog elsewhere",
                )
            for m in migrations:
                if m.version <= have:
                    continue
                with connect() as conn:
                    if current_version(_serialised(conn)) >= m.version:
                        continue
                    m.apply(conn)
                    conn.execute(VERSION.insert().values(version=m.version, description=m.description,
                                                         applied_at=datetime.now(timezone.utc).isoformat(timespec="seconds")))
                applied.append(m.version)
            return applied
        except (IntegrityError, OperationalError, ProgrammingError):
            if attempt == 2:  # not a race with another process after all
                raise
            time.sleep(0.05 * (attempt + 1))
    return applied
