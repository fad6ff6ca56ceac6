"""`tokspeed history`: list the catalogued runs, show a metric's trend, import results directories, check for regressions.

Also `catalogue_run`, which `run`, `sweep` and `capacity` call last: it registers the results
directory and prints one line (a warning on stderr when the catalogue cannot be written; the
run's exit code is never touched).
"""

from __future__ import annotations

import difflib
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import orjson
import typer

from tokspeed.errors import CatalogueError, ConfigError

if TYPE_CHECKING:
    from tokspeed.config import RunConfig
    from tokspeed.history.location import CatalogLocation
    from tokspeed.history.store import Catalogue, RunFilter

HELP = """The results history: every run, sweep and capacity search registered in a catalogue.

  tokspeed history                     # the latest runs

  tokspeed history list --model llama --tag branch=main --since 7d

  tokspeed history trend ttft_p99_ms output_tokens_per_s --html trend.html

  tokspeed history import runs/        # catalogue existing results directories

  tokspeed history check ttft_p99_ms output_tokens_per_s --run runs/today   # exit 3 on a regression

The catalogue is a SQLite file in the user data dir (--catalog PATH, TOKSPEED_CATALOG), or a
PostgreSQL database for a team (postgresql://user:password@host/db). Results directories stay
the source of truth: `history import` rebuilds a deleted catalogue.
"""

EXIT_OK, EXIT_FAIL, EXIT_REGRESSION = 0, 1, 3
PANEL = "Which runs"

app = typer.Typer(help=HELP, no_args_is_help=False, invoke_without_command=True)

CatalogOpt = Annotated[Optional[str], typer.Option("--catalog", envvar="TOKSPEED_CATALOG", show_envvar=True, metavar="PATH|URL", help="The catalogue: a SQLite file or a postgresql:// URL. [default: catalog.sqlite in the user data dir: $XDG_DATA_HOME/tokspeed or ~/.local/share/tokspeed]")]
TargetOpt = Annotated[Optional[str], typer.Option("--target", "-t", rich_help_panel=PANEL, help="Only runs whose target contains this text. [default: any]")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", rich_help_panel=PANEL, help="Only runs whose model contains this text. [default: any]")]
TagOpt = Annotated[Optional[list[str]], typer.Option("--tag", rich_help_panel=PANEL, metavar="KEY=VALUE", help="Only runs with this tag (repeatable: all must match). [default: any]")]
SinceOpt = Annotated[Optional[str], typer.Option("--since", rich_help_panel=PANEL, help="Only runs started at or after this: a date (2026-01-31), a date-time, or an age (12h, 7d, 2w). [default: any]")]
UntilOpt = Annotated[Optional[str], typer.Option("--until", rich_help_panel=PANEL, help="Only runs started before this (same forms as --since). [default: any]")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


@app.callback()
def history(ctx: typer.Context) -> None:
    """With no command: the latest runs (as `history list`)."""
    if ctx.invoked_subcommand is None:
        raise typer.Exit(list_runs())


def list_runs(
    catalog: CatalogOpt = None, target: TargetOpt = None, model: ModelOpt = None, tag: TagOpt = None,
    since: SinceOpt = None, until: UntilOpt = None,
    status: Annotated[Optional[list[str]], typer.Option("--status", rich_help_panel=PANEL, help="Only runs with this status: complete, interrupted, failed, running (repeatable). [default: any]")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Show the latest N runs.")] = 50,
    json_out: JsonOpt = False,
) -> int:
    """List the catalogued runs, oldest first, filtered by target, model, tag, date and status."""
    from tokspeed.reports.history_text import runs_table

    where = run_filter(target, model, tag, since, until, statuses=tuple(status or ()), limit=limit)
    with open_catalogue(catalog) as catalogue:
        runs = catalogue.runs(where)
    if json_out:
        _print_json([r.model_dump(exclude={"points"}) for r in runs])
    else:
        _console().print(runs_table(runs, catalogue.location.shown))
    return EXIT_OK


def trend(
    metrics: Annotated[list[str], typer.Argument(help="Metric names as in run.json, e.g. ttft_p99_ms output_tokens_per_s.", show_default=False)],
    catalog: CatalogOpt = None, target: TargetOpt = None, model: ModelOpt = None, tag: TagOpt = None,
    since: SinceOpt = None, until: UntilOpt = None,
    html: Annotated[Optional[Path], typer.Option("--html", metavar="FILE", help="Also write an HTML page with one chart per metric (works offline). [default: none]")] = None,
    last: Annotated[int, typer.Option("--last", min=1, help="Rows shown per series in the console (the charts show every run).")] = 20,
    json_out: JsonOpt = False,
) -> int:
    """A metric's trend across the catalogued runs, one series per comparable point (target, model, workload, profile)."""
    from tokspeed.history.trend import series
    from tokspeed.reports.history_text import trend_view

    names = checked_metrics(metrics)
    output = _prepare_html(html)
    where = run_filter(target, model, tag, since, until, statuses=("complete",))
    with open_catalogue(catalog) as catalogue:
        runs = catalogue.runs(where, with_points=True)
    by_metric = {m: series(runs, m) for m in names}
    if json_out:
        _print_json({m: [_series_json(s) for s in ss] for m, ss in by_metric.items()})
    else:
        console = _console()
        for m, ss in by_metric.items():
            console.print(trend_view(ss, m, last))
    if output is not None:
        from tokspeed.reports.history_page import trend_html

        output.write(trend_html(by_metric, catalogue.location.shown))
        if not json_out:
            _console().print(f"HTML: {output.path}")
    return EXIT_OK


def import_dirs(
    directories: Annotated[list[Path], typer.Argument(help="Results directories, or folders searched recursively for run.json.", show_default=False)],
    catalog: CatalogOpt = None,
) -> int:
    """Catalogue existing results directories (each folder holding a run.json, found recursively); re-importing updates."""
    from tokspeed.history.importer import import_dirs as do_import

    missing = [d for d in directories if not d.is_dir()]
    if missing:
        raise ConfigError(f"{missing[0]} is not a directory", hint="pass results directories or folders that hold them")
    with open_catalogue(catalog) as catalogue:
        report = do_import(catalogue, directories)
    console = _console()
    for line in report.skipped:
        print(f"skipped {line}", file=sys.stderr)
    console.print(f"Imported {len(report.imported)} run{'s' if len(report.imported) != 1 else ''} into {catalogue.location.shown}"
                  + (f"; {len(report.skipped)} skipped" if report.skipped else ""))
    return EXIT_OK if report.imported or not report.skipped else EXIT_FAIL


def check(
    metrics: Annotated[list[str], typer.Argument(help="Metric names to judge, e.g. ttft_p99_ms itl_p50_ms output_tokens_per_s.", show_default=False)],
    run: Annotated[Optional[Path], typer.Option("--run", metavar="DIR", help="The results directory to judge. [default: the newest catalogued run the filters select]")] = None,
    catalog: CatalogOpt = None, target: TargetOpt = None, model: ModelOpt = None, tag: TagOpt = None,
    since: SinceOpt = None, until: UntilOpt = None,
    alpha: Annotated[float, typer.Option("--alpha", min=1e-9, max=0.5, help="False-alarm rate of the whole check: the chance it fails when nothing changed (split over the metrics and points judged).")] = 0.01,
    window: Annotated[int, typer.Option("--window", min=2, help="History: at most this many latest comparable complete runs.")] = 20,
    min_history: Annotated[int, typer.Option("--min-history", min=2, help="Judge only with at least this many comparable runs before it.")] = 5,
    min_change: Annotated[str, typer.Option("--min-change", help="Never call a change smaller than this a regression (5% or 0.05), however steady the history.")] = "0%",
    require_history: Annotated[bool, typer.Option("--require-history", help="Fail (exit 3) when a metric cannot be judged for too little history, instead of passing it.")] = False,
    json_out: JsonOpt = False,
) -> int:
    """Judge the newest run against the recent history of comparable runs; exit 3 on a regression.

    Comparable: same target, model, metric definitions, workload and load profile. The bar is
    the history's own spread (a Student-t prediction interval on the log scale, outliers left out),
    so a noisy service needs a bigger change to fail than a steady one. Exit codes: 0 no regression
    (or too little history, unless --require-history), 3 a regression or a metric the run lacks,
    1 no run or the catalogue cannot be read, 2 bad usage.
    """
    from tokspeed.history.check import CheckSettings
    from tokspeed.history.check import check as judge_run
    from tokspeed.history.entry import entry_from_dir
    from tokspeed.reports.history_text import check_view

    names = checked_metrics(metrics)
    settings = CheckSettings(alpha=alpha, window=window, min_history=min_history, min_change=_fraction(min_change),
                             require_history=require_history)
    where = run_filter(target, model, tag, since, until)
    with open_catalogue(catalog) as catalogue:
        runs = catalogue.runs(where, with_points=True)
    if run is not None:
        newest = entry_from_dir(run)
    else:
        if not runs:
            raise CatalogueError(f"no catalogued run in {catalogue.location.shown} matches",
                                 hint="run a benchmark first, or tokspeed history import DIR")
        newest = runs[-1]
    if newest.status != "complete":
        raise CatalogueError(f"the run to judge ({newest.directory}) is {newest.status}, not complete",
                             hint="judge a finished run: --run DIR")
    report = judge_run(runs, newest, names, settings)
    if json_out:
        _print_json(_report_json(report))
    else:
        _console().print(check_view(report))
    return EXIT_REGRESSION if report.failed else EXIT_OK


app.command("list", help=list_runs.__doc__)(list_runs)
app.command("trend", help=trend.__doc__)(trend)
app.command("import", help=import_dirs.__doc__)(import_dirs)
app.command("check", help=check.__doc__)(check)


def tag_values(items: list[str]) -> dict[str, str]:
    """`--tag k=v` (repeatable) -> {k: v}; a key given twice keeps its last value."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--tag {item!r} is not KEY=VALUE", hint="e.g. --tag release=1.4 --tag branch=main")
        out[key.strip()] = value.strip()
    return out


def catalogue_run(console: Any, directory: Path, cfg: RunConfig, location: CatalogLocation, quiet: bool = False) -> None:
    """Register a finished run (the hook of run, sweep and capacity): one line, never an exception."""
    from tokspeed.history.register import register_quietly
    from tokspeed.runner.run import config_redactor

    outcome = register_quietly(directory, location, config_redactor(cfg).tree)
    if outcome.warning is not None:
        print(f"Warning: results history: {outcome.warning} (the run itself is unaffected; "
              "tokspeed history import DIR registers it later)", file=sys.stderr, flush=True)
    elif not quiet:
        console.out.print(f"Catalogued in {location.shown} (tokspeed history)", highlight=False)


def open_catalogue(flag: str | None) -> Catalogue:
    from tokspeed.history.location import resolve
    from tokspeed.history.store import Catalogue

    location = resolve(flag)
    if location is None:
        raise ConfigError("the results catalogue is off (--catalog off or TOKSPEED_CATALOG=off)",
                          hint="give --catalog PATH|URL")
    return Catalogue.open(location)


def run_filter(target: str | None, model: str | None, tags: list[str] | None, since: str | None, until: str | None,
               statuses: tuple[str, ...] = (), limit: int | None = None) -> RunFilter:
    from tokspeed.history.store import RunFilter

    return RunFilter(target=target, model=model, tags=tag_values(tags) if tags else {},
                     since=moment(since, "--since") if since else None, until=moment(until, "--until") if until else None,
                     statuses=statuses, limit=limit)


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|h|d|w)\s*$")
_AGE_UNITS = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def moment(text: str, flag: str, now: datetime | None = None) -> str:
    """`2026-01-31`, `2026-01-31T08:00`, `7d` (ago) -> an ISO date-time in UTC, as run.json's started_at."""
    m = _AGE.match(text)
    if m:
        at = (now or datetime.now(timezone.utc)) - timedelta(seconds=float(m.group(1)) * _AGE_UNITS[m.group(2)])
    else:
        try:
            at = datetime.fromisoformat(text.strip())
        except ValueError as exc:
            raise ConfigError(f"{flag} {text!r} is neither a date nor an age",
                              hint=f"e.g. {flag} 2026-01-31, {flag} 2026-01-31T08:00 or {flag} 7d") from exc
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)
    return at.astimezone(timezone.utc).isoformat(timespec="seconds")


def known_metrics() -> set[str]:
    from tokspeed.metrics.schema import Summary

    return set(Summary().flat()) | {"capacity_requests_per_s", "capacity_value"}


def checked_metrics(names: list[str]) -> list[str]:
    known = known_metrics()
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            raise ConfigError(f"unknown metric {name!r}",
                              hint=("did you mean " + ", ".join(close) + "?") if close else
                              "use run.json's flat names: ttft_p99_ms, itl_p50_ms, output_tokens_per_s, error_rate, ...")
    return list(dict.fromkeys(names))


def _fraction(text: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError as exc:
        raise ConfigError(f"--min-change {text!r} is not a percentage", hint="e.g. --min-change 5%") from exc
    if not 0 <= value < 10:
        raise ConfigError(f"--min-change must be between 0% and 1000%, not {text}",
                          hint="a bare number is a fraction: --min-change 0.5 or 50% is a 50% change")
    return value


def _prepare_html(path: Path | None) -> Any:
    if path is None:
        return None
    from tokspeed.cli.outputs import prepare_outputs
    from tokspeed.reports.html import require_html

    require_html()
    return prepare_outputs({"--html": str(path)}, stdout_ok=False)["--html"]


def _series_json(s: Any) -> dict[str, Any]:
    return {"target": s.target, "model": s.model, "profile": s.profile, "comparable": s.comparable,
            "points": [{"run": p.run_id, "started_at": p.started_at, "value": p.value, "commit": p.deployment_commit,
                        "tags": dict(p.tags)} for p in s.points]}


def _report_json(report: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {
        "schema": "tokspeed.history-check/1",
        "run": {"id": report.run.id, "directory": report.run.directory, "started_at": report.run.started_at,
                "target": report.run.target, "model": report.run.model},
        "settings": asdict(report.settings),
        "failed": bool(report.failed),
        "checks": [{"metric": c.metric, "point": c.point, "target": c.target, "model": c.model,
                    "history_runs": list(c.history_runs), **asdict(c.judgement)} for c in report.checks],
    }


def _print_json(data: Any) -> None:
    print(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode())


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)
