"""The CLI's exit codes, and a run's outcome mapped to one."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `tokspeed --help` imports this module and none of the runner
    from tokspeed.config import RunConfig
    from tokspeed.runner.run import RunOutcome

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_SLO, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def exit_code_for(outcome: RunOutcome, cfg: RunConfig) -> int:
    """130 interrupted; 1 when the run failed (--max-error-rate, target lost) or no request
    completed; 3 when an SLO was breached; else 0."""
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    if outcome.result.status == "failed":
        return EXIT_FAIL
    if outcome.result.capacity is not None:  # a search: success is finding a load that meets the SLOs
        return EXIT_OK if outcome.result.capacity.value is not None else EXIT_SLO
    if len(outcome.result.benchmarks) > 1:  # a sweep explores: only an empty one fails
        done = sum(b.summary.requests.completed for b in outcome.result.benchmarks)
        return EXIT_OK if done else EXIT_FAIL
    summary = outcome.result.benchmarks[0].summary if outcome.result.benchmarks else None
    if summary is None or summary.requests.completed == 0:
        return EXIT_FAIL
    if any(not v.met for v in summary.slo or ()):
        return EXIT_SLO
    return EXIT_OK
