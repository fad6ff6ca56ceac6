"""The conformance suite: scripted SSE responses with the exact metric values a correct client measures.

`scenarios` holds the scripts and expected values as data, `server` plays them on
loopback (`tokspeed conformance --serve PORT` for other tools), `checker` runs
tokspeed's own HTTP backend against each and compares every metric, and `doc`
renders the scenario table of docs/conformance.md.
"""

from tokspeed.conformance.checker import (
    Check,
    ScenarioResult,
    compare,
    measured_values,
    result_for,
    run_all,
)
from tokspeed.conformance.scenarios import SCENARIOS, Expected, Scenario, Write, by_name
from tokspeed.conformance.server import Play, ScriptedServer

__all__ = [
    "SCENARIOS",
    "Check",
    "Expected",
    "Play",
    "Scenario",
    "ScenarioResult",
    "ScriptedServer",
    "Write",
    "by_name",
    "compare",
    "measured_values",
    "result_for",
    "run_all",
]
