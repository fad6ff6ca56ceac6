"""Open-file limits: every stream holds a socket, and a socket is a file descriptor.

`ensure_fd_limit(streams)` raises the process's soft RLIMIT_NOFILE to its hard limit when a
run's concurrency needs more descriptors than the soft limit allows (1,024 is a common
default), and raises ConfigError with the fix when even the hard limit is too low.
`raise_fd_limit()` lifts the soft limit to the hard one unconditionally (the simulator,
which must accept whatever a client opens). Where `resource` does not exist (Windows)
both do nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from tokspeed.errors import ConfigError

FD_HEADROOM = 128  # beyond one per stream: the results files, DNS, pipes, the event loop's own
Limits = tuple[int, int]


def fds_needed(streams: int) -> int:
    """Descriptors a run with `streams` concurrent requests needs: one per stream plus headroom."""
    return streams + FD_HEADROOM


def ensure_fd_limit(
    streams: int,
    get: Callable[[], Limits] | None = None,
    set_: Callable[[Limits], None] | None = None,
) -> None:
    """Make sure `streams` sockets can be open at once; raise ConfigError if the OS won't allow it."""
    io = _resource_io(get, set_)
    if io is None:
        return
    get_limits, set_limits = io
    needed = fds_needed(streams)
    soft, hard = get_limits()
    if _unlimited(soft) or soft >= needed:
        return
    if not _unlimited(hard) and hard < needed:
        raise ConfigError(
            f"{streams} concurrent streams need about {needed} open files, but this process may open only {hard}",
            hint=f"raise the limit (`ulimit -n {needed}`, or LimitNOFILE= for a service) or lower the concurrency",
        )
    target = needed if _unlimited(hard) else hard
    try:
        set_limits((target, hard))
    except (ValueError, OSError) as exc:
        raise ConfigError(
            f"{streams} concurrent streams need about {needed} open files; the limit is {soft} "
            f"and raising it failed ({exc})",
            hint=f"raise it before the run: `ulimit -n {needed}`, or lower the concurrency",
        ) from exc


def raise_fd_limit() -> int | None:
    """Lift the soft open-file limit to the hard limit (best effort); the soft limit after."""
    io = _resource_io(None, None)
    if io is None:
        return None
    get_limits, set_limits = io
    soft, hard = get_limits()
    if soft != hard and not _unlimited(hard):
        try:
            set_limits((hard, hard))
        except (ValueError, OSError):
            return soft
        return hard
    return soft


def _resource_io(
    get: Callable[[], Limits] | None, set_: Callable[[Limits], None] | None
) -> tuple[Callable[[], Limits], Callable[[Limits], None]] | None:
    if get is not None and set_ is not None:
        return get, set_
    try:
        import resource
    except ImportError:  # Windows
        return None

    def get_limits() -> Limits:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return int(soft), int(hard)

    def set_limits(limits: Limits) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)

    return get_limits, set_limits


def _unlimited(value: int) -> bool:
    try:
        import resource
    except ImportError:
        return value < 0
    return value == resource.RLIM_INFINITY or value < 0
