"""The catalogue: where it is, what a run adds (redacted), upserts that mirror the directories, filters,
versioned migrations, and a hook that never raises. SQLite here; tests/integration/test_history_postgres.py
runs the same store against a real PostgreSQL server."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import orjson
import pytest

from locations import RUN_V1
from tokspeed.backends.redact import Redactor
from tokspeed.errors import CatalogueError
from tokspeed.history.entry import CAPACITY_POINT, RunEntry, entry_from_dir, profile_label, trended_points
from tokspeed.history.location import data_dir, location_of, resolve
from tokspeed.history.register import register_quietly
from tokspeed.history.store import Catalogue, RunFilter


def copy_run(tmp: Path, name: str, **changes: object) -> Path:
    """The sample run, copied to tmp/name with top-level run.json fields (or config.KEY) changed."""
    out = tmp / name
    out.mkdir(parents=True)
    data = orjson.loads((RUN_V1 / "run.json").read_bytes())
    for key, value in changes.items():
        if key.startswith("config_"):
            data["config"][key.removeprefix("config_")] = value
        elif key == "url":
            data["target"]["url"] = value
            data["config"]["target"] = value
        else:
            data[key] = value
    (out / "run.json").write_bytes(orjson.dumps(data))
    shutil.copy(RUN_V1 / "requests.jsonl", out / "requests.jsonl")
    return out


# where


def test_the_default_is_the_xdg_data_dir_and_the_flag_beats_the_env(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    assert resolve(env=env, platform="linux").url == f"sqlite:///{tmp_path}/xdg/tokspeed/catalog.sqlite"
    assert resolve(env={"HOME": str(tmp_path)}, platform="linux").shown == f"{tmp_path}/.local/share/tokspeed/catalog.sqlite"
    env["TOKSPEED_CATALOG"] = str(tmp_path / "env.sqlite")
    assert resolve(env=env).shown == str(tmp_path / "env.sqlite")
    assert resolve(str(tmp_path / "flag.sqlite"), env=env).shown == str(tmp_path / "flag.sqlite")
    assert resolve(env={**env, "TOKSPEED_CATALOG": "off"}) is None
    assert resolve(str(tmp_path / "flag.sqlite"), disabled=True, env=env) is None


def test_platform_data_dirs(tmp_path: Path) -> None:
    assert data_dir({"HOME": "/Users/a"}, "darwin") == Path("/Users/a/Library/Application Support/tokspeed")
    assert data_dir({"HOME": "/h", "LOCALAPPDATA": "C:/Users/a/AppData/Local"}, "win32") == Path("C:/Users/a/AppData/Local/tokspeed")


def test_a_postgres_url_uses_psycopg_and_is_shown_without_its_password() -> None:
    loc = location_of("postgresql://bench:s3cret-pw@db.internal:5432/perf")
    assert loc.url == "postgresql+psycopg://bench:s3cret-pw@db.internal:5432/perf"
    assert "s3cret" not in loc.shown and loc.shown == "postgresql://bench:***@db.internal:5432/perf"


# what a run adds


def test_an_entry_is_read_from_run_json_alone(tmp_path: Path) -> None:
    d = copy_run(tmp_path, "a", config_tags={"branch": "main"}, config_deployment_commit="0123abcd")
    e = entry_from_dir(d)
    assert (e.status, e.command, e.model, e.server_version) == ("complete", "run", "tokspeed-sim", "tokspeed-sim 0.1.0")
    assert e.tags == {"branch": "main"} and e.deployment_commit == "0123abcd" and e.point_count == 1
    assert e.headline["ttft_p50_ms"] == e.points[0].metrics["ttft_p50_ms"] > 0
    assert e.points[0].profile == profile_label(e.points[0].profile_json)


def test_the_id_follows_the_run_not_the_directory(tmp_path: Path) -> None:
    a, b = copy_run(tmp_path, "a"), copy_run(tmp_path, "moved/b")
    assert entry_from_dir(a).id == entry_from_dir(b).id
    c = copy_run(tmp_path, "c", epoch_offset_ns=12345)
    assert entry_from_dir(c).id != entry_from_dir(a).id


def test_comparable_keys_separate_workloads(tmp_path: Path) -> None:
    same = entry_from_dir(copy_run(tmp_path, "a")).points[0].comparable
    assert entry_from_dir(copy_run(tmp_path, "b", epoch_offset_ns=1)).points[0].comparable == same
    assert entry_from_dir(copy_run(tmp_path, "c", config_output_tokens="64")).points[0].comparable != same
    assert entry_from_dir(copy_run(tmp_path, "d", metric_spec="tokspeed.metrics/1")).points[0].comparable != same


def test_secrets_never_reach_the_entry(tmp_path: Path) -> None:
    d = copy_run(tmp_path, "a", url="http://bench:hunter2-pass@10.0.0.1:8000/v1",
                 config_tags={"note": "key sk-live-abcdef123456"})
    redactor = Redactor(["hunter2-pass", "sk-live-abcdef123456"])
    e = entry_from_dir(d).redacted(redactor.tree)
    text = e.model_dump_json()
    assert "hunter2" not in text and "sk-live" not in text
    assert e.target == "http://bench:***@10.0.0.1:8000/v1" and e.points[0].target == e.target
    # without the redactor the URL's password is still masked
    assert "hunter2" not in entry_from_dir(d).model_dump_json()


def test_a_capacity_search_adds_its_own_point(tmp_path: Path) -> None:
    capacity = {"by": "rate", "requests_per_s": 7.5, "value": 8.0, "low": 8.0, "high": 9.0, "uncertainty": 0.5,
                "precision": 0.05, "slos": ["ttft_p99_ms<=500"], "probes": [{"value": 8.0, "passed": True, "benchmark": 0}]}
    e = entry_from_dir(copy_run(tmp_path, "a", capacity=capacity))
    assert e.command == "capacity" and e.capacity_requests_per_s == 7.5
    point = e.points[-1]
    assert point.index == CAPACITY_POINT and point.metrics["capacity_requests_per_s"] == 7.5
    assert point.profile == "capacity by rate"
    assert e.headline["ttft_p50_ms"] == e.points[0].metrics["ttft_p50_ms"]  # the best passing probe's figures
    assert trended_points(e) == [point]  # probes' rates differ run to run: trends follow the search's result


def test_a_trend_is_one_series_per_comparable_point(tmp_path: Path) -> None:
    from tokspeed.history.trend import series

    runs = [entry_from_dir(copy_run(tmp_path, f"r{i}", epoch_offset_ns=i + 1, started_at=f"2026-01-0{i + 1}T00:00:00+00:00",
                                    config_output_tokens="64" if i == 3 else "256")) for i in range(4)]
    long, short = series(runs, "ttft_p50_ms")
    assert [p.run_id for p in long.points] == [r.id for r in runs[:3]]
    assert [p.run_id for p in short.points] == [runs[3].id]
    assert "max_tokens 256" in long.label and "max_tokens 64" in short.label
    assert series(runs, "capacity_requests_per_s") == []


# the store


@pytest.fixture
def catalogue(tmp_path: Path) -> Catalogue:
    with Catalogue.open(location_of(str(tmp_path / "cat" / "c.sqlite"))) as c:
        yield c  # type: ignore[misc]


def test_an_entry_round_trips(catalogue: Catalogue, tmp_path: Path) -> None:
    e = entry_from_dir(copy_run(tmp_path, "a", config_tags={"k": "v", "a": "b"}))
    catalogue.upsert(e)
    (back,) = catalogue.runs(with_points=True)
    assert back == e
    assert catalogue.runs()[0].points == []


def test_registering_again_replaces_the_run_and_a_directory_holds_one_run(catalogue: Catalogue, tmp_path: Path) -> None:
    d = copy_run(tmp_path, "a")
    catalogue.upsert(entry_from_dir(d))
    catalogue.upsert(entry_from_dir(d))
    moved = tmp_path / "moved"
    shutil.copytree(d, moved)
    catalogue.upsert(entry_from_dir(moved))  # the same run, found elsewhere: its row follows it
    assert [r.directory for r in catalogue.runs()] == [str(moved)]
    data = orjson.loads((moved / "run.json").read_bytes())
    data["epoch_offset_ns"] += 1  # another run written over it (--overwrite)
    (moved / "run.json").write_bytes(orjson.dumps(data))
    catalogue.upsert(entry_from_dir(moved))
    assert len(catalogue.runs()) == 1 and len(catalogue.dump()["points"]) == 1


def test_filters(catalogue: Catalogue, tmp_path: Path) -> None:
    specs = [
        ("a", "2026-01-01T10:00:00+00:00", "http://one:8000/v1", {"branch": "main"}, "complete"),
        ("b", "2026-01-02T10:00:00+00:00", "http://one:8000/v1", {"branch": "dev"}, "interrupted"),
        ("c", "2026-01-03T10:00:00+00:00", "http://two:8000/v1", {"branch": "main", "gpu": "h100"}, "complete"),
    ]
    for i, (name, started, url, tags, status) in enumerate(specs):
        catalogue.upsert(entry_from_dir(copy_run(tmp_path, name, started_at=started, url=url, config_tags=tags,
                                                 status=status, epoch_offset_ns=i + 1)))

    def names(**kw: object) -> list[str]:
        return [Path(r.directory).name for r in catalogue.runs(RunFilter(**kw))]  # type: ignore[arg-type]

    assert names() == ["a", "b", "c"]
    assert names(target="one:") == ["a", "b"]
    assert names(tags={"branch": "main"}) == ["a", "c"] and names(tags={"branch": "main", "gpu": "h100"}) == ["c"]
    assert names(since="2026-01-02T00:00:00+00:00") == ["b", "c"] and names(until="2026-01-02T00:00:00+00:00") == ["a"]
    assert names(statuses=("complete",)) == ["a", "c"]
    assert names(limit=2) == ["b", "c"]
    assert names(model="no-such-model") == []
    assert names(target="%") == []  # LIKE wildcards are text


def test_migrations_are_recorded_once_and_a_newer_catalogue_is_refused(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, text

    path = tmp_path / "c.sqlite"
    loc = location_of(str(path))
    Catalogue.open(loc).close()
    Catalogue.open(loc).close()
    engine = create_engine(loc.url)
    with engine.begin() as conn:
        assert conn.execute(text("select version from tokspeed_catalog_version")).scalars().all() == [1]
        conn.execute(text("insert into tokspeed_catalog_version values (99, 'from the future', 'x')"))
    engine.dispose()
    with pytest.raises(CatalogueError, match="schema version 99"):
        Catalogue.open(loc)


def test_a_later_migration_is_applied_once_on_open(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, inspect, text

    from tokspeed.history import schema

    loc = location_of(str(tmp_path / "c.sqlite"))
    Catalogue.open(loc).close()
    calls: list[int] = []

    def add_column(conn: object) -> None:
        calls.append(1)
        conn.execute(text("alter table runs add column region text"))  # type: ignore[attr-defined]

    migrations = (*schema.MIGRATIONS, schema.Migration(2, "runs.region", add_column))
    engine = create_engine(loc.url)
    assert schema.migrate(engine.begin, migrations) == [2]
    assert schema.migrate(engine.begin, migrations) == []
    assert calls == [1] and "region" in {c["name"] for c in inspect(engine).get_columns("runs")}
    engine.dispose()


def test_concurrent_first_opens_migrate_once(tmp_path: Path) -> None:
    loc = location_of(str(tmp_path / "c.sqlite"))
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            Catalogue.open(loc).close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Catalogue.open(loc) as c:
        assert c.schema_version() == 1


# the hook


def test_an_unwritable_catalogue_is_a_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    outcome = register_quietly(copy_run(tmp_path, "a"), location_of(str(blocker / "c.sqlite")))
    assert outcome.entry is None and outcome.warning and "catalogue" in outcome.warning


def test_a_catalogue_that_hangs_is_given_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from tokspeed.history import register as reg

    monkeypatch.setattr(reg, "register", lambda *a, **k: time.sleep(5))
    started = time.monotonic()
    outcome = register_quietly(copy_run(tmp_path, "a"), location_of(str(tmp_path / "c.sqlite")), deadline_s=0.3)
    assert time.monotonic() - started < 2 and "did not answer" in (outcome.warning or "")


def test_a_directory_without_a_run_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    outcome = register_quietly(tmp_path / "empty", location_of(str(tmp_path / "c.sqlite")))
    assert outcome.warning and "neither" in outcome.warning


def test_register_writes_the_redacted_entry(tmp_path: Path) -> None:
    d = copy_run(tmp_path, "a", url="http://u:pw-topsecret@h:1/v1")
    loc = location_of(str(tmp_path / "c.sqlite"))
    outcome = register_quietly(d, loc, Redactor(["pw-topsecret"]).tree)
    assert isinstance(outcome.entry, RunEntry)
    with Catalogue.open(loc) as c:
        assert "topsecret" not in orjson.dumps(c.dump()).decode()
    assert (tmp_path / "c.sqlite").read_bytes().find(b"topsecret") == -1
