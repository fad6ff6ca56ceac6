"""The exception hierarchy. Library code raises these; only `tokspeed.cli` prints and exits.

    TokspeedError              base; `hint` says what the user can change
    ├── ConfigError            bad flags, scenario file or values      (CLI exit 2)
    ├── WorkloadError          a dataset that cannot be read or used   (CLI exit 2)
    ├── TargetError            the target cannot be reached or used    (CLI exit 1)
    │   ├── UnreachableTarget  nothing answers at its address at start (refused, no
    │   │                      such host, TLS handshake): --target is wrong (CLI exit 2)
    │   └── TargetRedirected   discovery or the probe was answered with a redirect (3xx),
    │                          which tokspeed never follows: --target is wrong (CLI exit 2)
    ├── BackendLost            the backend can no longer send (a client worker
    │   │                      process exited mid-run): the run stops  (CLI exit 1)
    │   └── TargetGone         the target refused every connection for a while after
    │                          answering: the run stops, status failed (CLI exit 1)
    ├── ResultsError           a results directory cannot be read      (CLI exit 1)
    └── CatalogueError         the results catalogue cannot be opened,
                               read or written (tokspeed history)      (CLI exit 1)

Failed *requests* are not exceptions: they are records with status "error".
"""

from __future__ import annotations


class TokspeedError(Exception):
    """Base class; `hint` is an optional one-line suggestion for the user."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class ConfigError(TokspeedError):
    exit_code = 2


class WorkloadError(TokspeedError):
    exit_code = 2


class TargetError(TokspeedError):
    exit_code = 1


class UnreachableTarget(TargetError):
    """No connection to the target at start: nothing listens there, the host does not resolve, TLS fails."""

    exit_code = 2


class TargetRedirected(TargetError):
    """A 3xx answer before the load: tokspeed measures the server it names, so it does not follow it."""

    exit_code = 2


class BackendLost(TokspeedError):
    """Raised by `Backend.send` after filling its record: nothing more can be sent, so the run stops."""

    exit_code = 1


class TargetGone(BackendLost):
    """The target answered, then refused every connection for `GIVE_UP_S`: the run stops as failed, with its results."""


class ResultsError(TokspeedError):
    exit_code = 1


class CatalogueError(TokspeedError):
    """The results catalogue (`tokspeed history`, the hook after a run) cannot be opened, read or written."""

    exit_code = 1
