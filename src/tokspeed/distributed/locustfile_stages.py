"""tokspeed's locustfile with concurrency stages: tokspeed.distributed.locustfile plus a LoadTestShape.

    tokspeed locust master --target http://llm:8000/v1 --stages 'warm:concurrency=4:10s,peak:concurrency=16:20s' ...
    locust -f $(python -c "import tokspeed.distributed.locustfile_stages as m; print(m.__file__)") --host http://llm:8000/v1 \\
        --headless --spawn-rate 10 --tokspeed-stages 'warm:concurrency=4:10s,peak:concurrency=16:20s'

A separate file because Locust uses any shape class its locustfile defines, and a shape
overrides --users/--run-time: the plain locustfile keeps them. Only the master runs the shape;
the workers run `tokspeed/distributed/locustfile.py` (the same user class). Each tick (Locust ticks once a
second) the shape looks up the stage holding now (`distributed.shaping.StagePlan`); when the
stage changes it first tells every worker the stage's name (`tokspeed_stage`: requests
started from then on carry that `stage`), then asks Locust for the stage's users at the
master's spawn rate. After the last stage the test stops, as at --duration's end.
"""

from __future__ import annotations

from locust import LoadTestShape

from tokspeed.distributed.locustfile import _MASTER, STAGE_MESSAGE, MasterSide, TokspeedUser

__all__ = ["TokspeedStages", "TokspeedUser"]


class TokspeedStages(LoadTestShape):
    """--tokspeed-stages / --tokspeed-ramp as Locust users per stage."""

    use_common_options = True  # it reads --spawn-rate; there are no --users/--run-time to ignore

    def __init__(self) -> None:
        super().__init__()
        self._current: int | None = None

    def tick(self) -> tuple[int, float] | None:
        runner = self.runner
        assert runner is not None, "Locust sets the runner before the first tick"
        master: MasterSide | None = getattr(runner.environment, _MASTER, None)
        if master is None or master.stages is None:
            raise SystemExit("tokspeed.distributed.locustfile_stages needs concurrency stages (--tokspeed-stages or "
                             "--tokspeed-ramp with concurrency=N); rate stages run on tokspeed.distributed.locustfile")
        k = master.stages.at(self.get_run_time())
        if k is None:
            return None
        window = master.stages.windows[k]
        if k != self._current:
            self._current = k
            runner.send_message(STAGE_MESSAGE, {"stage": window.name, "index": k})
        spawn_rate = float(getattr(runner.environment.parsed_options, "spawn_rate", None) or 1.0)
        return int(window.concurrency or 0), spawn_rate
