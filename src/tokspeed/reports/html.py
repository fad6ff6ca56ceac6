"""Render a run, or a comparison, as one self-contained HTML file that works offline.

plotly.js is inlined from the plotly package (`plotly.offline.get_plotlyjs()`),
the figures are JSON in the page, and jinja2 fills the templates in
`reports/templates/`. Both libraries are core dependencies, imported only here,
only when a report is rendered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tokspeed.compare.comparison import Comparison
from tokspeed.errors import ConfigError
from tokspeed.records import RequestRecord
from tokspeed.results import RunResult

if TYPE_CHECKING:
    from tokspeed.compare.evidence import RunData

INSTALL_HINT = "plotly and jinja2 are dependencies of tokspeed: reinstall it with pip install -e ."


def require_html() -> None:
    """Fail early, with the install hint, when plotly or jinja2 is missing."""
    try:
        import jinja2  # noqa: F401
        import plotly.offline  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"the HTML report needs {exc.name or 'plotly and jinja2'}, which is not installed", hint=INSTALL_HINT) from exc


def run_html(result: RunResult, records: Sequence[RequestRecord], source: str,
             telemetry: Sequence[dict[str, Any]] = ()) -> str:
    """The report of one saved run (`source` says where it was read from; `telemetry`: its telemetry.jsonl lines)."""
    from tokspeed.reports.html_context import run_context

    return _render("run.html.j2", run_context(result, records, source, telemetry))


def comparison_html(comparison: Comparison, runs: Sequence[RunData]) -> str:
    """The comparison page; `runs` are the base then the others, as compared."""
    from tokspeed.reports.html_context import comparison_context

    return _render("compare.html.j2", comparison_context(comparison, runs))


def render_page(template: str, context: dict[str, Any]) -> str:
    """Any page of `reports/templates/` (extending base.html.j2) with `context` (history's trend page)."""
    return _render(template, context)


def _render(template: str, context: dict[str, Any]) -> str:
    require_html()
    import jinja2
    from plotly.offline import get_plotlyjs

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tokspeed.reports", "templates"),
        autoescape=jinja2.select_autoescape(("html", "j2")),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template(template).render(plotly_js=get_plotlyjs(), **context)
