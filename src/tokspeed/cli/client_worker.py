"""One client worker process of `tokspeed run --workers N`; tokspeed starts it, not a user.

    python -m tokspeed.cli.client_worker     (stdin/stdout: the frames of backends/worker_protocol.py)

It rebuilds the run's HTTP backend from the settings the parent sends over the
pipe (with the model the parent discovered) and serves requests with it until
its stdin closes: see `backends/worker_child.py`.
"""

from __future__ import annotations

from tokspeed.backends.base import Backend
from tokspeed.backends.worker_child import main as serve_pipes
from tokspeed.backends.worker_protocol import WorkerInit
from tokspeed.config import RunConfig
from tokspeed.runner.factory import http_backend


def make_backend(init: WorkerInit) -> Backend:
    """The parent's HTTP backend, with the discovered model and this worker's share of the connections."""
    cfg = RunConfig.model_validate({**init.settings, "model": init.model, "include_usage": init.include_usage})
    return http_backend(cfg, init.pool_size)


def main() -> int:
    return serve_pipes(make_backend)


if __name__ == "__main__":
    raise SystemExit(main())
