"""The catalogue on a real PostgreSQL server (started here, a database per test): the same rows as SQLite,
migrations once under concurrent opens, the CLI's `--catalog postgresql://…`, and no password in any output.
Skips, saying why, where no PostgreSQL server can be started (.ci/run installs Debian's package)."""

from __future__ import annotations

import itertools
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness import SimServer, run_cli
from postgres import PostgresServer, PostgresUnavailable, start_postgres

SAMPLE = Path(__file__).parents[1] / "data" / "run-v1"
_names = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    try:
        pg = start_postgres()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server: {exc}")
    yield pg
    pg.stop()


@pytest.fixture
def database(server: PostgresServer) -> str:
    """A fresh database's URL."""
    import psycopg

    name = f"t{next(_names)}"
    with psycopg.connect(host="127.0.0.1", port=server.port, user=server.user, password=server.password,
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + "/" + name


def copy_run(tmp: Path, name: str, **top: Any) -> Path:
    out = tmp / name
    out.mkdir(parents=True)
    data = orjson.loads((SAMPLE / "run.json").read_bytes())
    data.update(top)
    (out / "run.json").write_bytes(orjson.dumps(data))
    shutil.copy(SAMPLE / "requests.jsonl", out / "requests.jsonl")
    return out


def test_postgres_holds_the_same_rows_as_sqlite(database: str, tmp_path: Path) -> None:
    from tokspeed.history.entry import entry_from_dir
    from tokspeed.history.location import location_of
    from tokspeed.history.store import Catalogue, RunFilter

    entries = [entry_from_dir(copy_run(tmp_path, f"r{i}", epoch_offset_ns=i + 1, started_at=f"2026-01-0{i + 1}T00:00:00+00:00"))
               for i in range(3)]
    dumps = []
    for url in (database, str(tmp_path / "c.sqlite")):
        with Catalogue.open(location_of(url)) as c:
            for e in entries:
                c.upsert(e)
            c.upsert(entries[0])  # registering again replaces
            assert c.runs(with_points=True) == entries
            assert [r.id for r in c.runs(RunFilter(since="2026-01-02T00:00:00+00:00"))] == [e.id for e in entries[1:]]
            assert c.schema_version() == 1
            dumps.append(c.dump())
    assert dumps[0] == dumps[1]


def test_concurrent_first_opens_migrate_once_on_postgres(database: str) -> None:
    from tokspeed.history.location import location_of
    from tokspeed.history.store import Catalogue

    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            Catalogue.open(location_of(database)).close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Catalogue.open(location_of(database)) as c:
        assert c.schema_version() == 1


def test_the_cli_registers_in_postgres_and_import_rebuilds_it(
    database: str, server: PostgresServer, start_sim: Callable[..., SimServer], tmp_path: Path
) -> None:
    from tokspeed.history.location import location_of
    from tokspeed.history.store import Catalogue

    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    env = {"TOKSPEED_CATALOG": database}
    for name in ("a", "b"):
        p = run_cli("run", "--target", sim.url, "-n", "4", "--max-tokens", "4", "--plain", "--tag", "team=perf",
                    "--out", str(tmp_path / "runs" / name), env=env)
        assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
        assert server.password not in p.stdout + p.stderr
        assert "Catalogued in postgresql://tokspeed:***@" in p.stdout
    with Catalogue.open(location_of(database)) as c:
        before = c.dump()
        c.forget([r["id"] for r in before["runs"]])
        assert c.runs() == []
    p = run_cli("history", "import", str(tmp_path / "runs"), env=env)
    assert p.returncode == 0 and "Imported 2 runs" in p.stdout and server.password not in p.stdout
    with Catalogue.open(location_of(database)) as c:
        assert c.dump() == before
    p = run_cli("history", "list", "--tag", "team=perf", env=env)
    assert p.returncode == 0 and p.stdout.count("tokspeed-sim") == 2 and server.password not in p.stdout


def test_a_wrong_password_is_a_warning_without_the_password(server: PostgresServer, start_sim: Callable[..., SimServer],
                                                            tmp_path: Path) -> None:
    sim = start_sim("--ttft-ms", "5", "--itl-ms", "1")
    wrong = server.url.replace(server.password, "not-the-pw-123")
    p = run_cli("run", "--target", sim.url, "-n", "2", "--max-tokens", "4", "--plain", "--out", str(tmp_path / "a"),
                "--catalog", wrong)
    assert p.returncode == 0 and "Warning: results history" in p.stderr
    assert "not-the-pw-123" not in p.stdout + p.stderr
