"""A client worker process whose backend is fake (no network), for the worker pool's unit tests.

    python tests/unit/runner/fake_worker.py        (spoken to over stdin/stdout, like tokspeed.cli.client_worker)

`settings` steer it: `delay_s` per request, `fail_start` to refuse to start, `exit_on` a
request index at which the process dies at once (a crashed worker), `print` a line to print
to stdout before starting (which must not corrupt the pipe).
"""

from __future__ import annotations

import asyncio
import os
from time import perf_counter_ns

from tokspeed.backends.base import TargetInfo
from tokspeed.backends.worker_child import main
from tokspeed.backends.worker_protocol import WorkerInit
from tokspeed.errors import TargetError
from tokspeed.records import RequestRecord, RequestSpec, Status, TokenSource


class FakeBackend:
    def __init__(self, init: WorkerInit) -> None:
        self.init = init
        self.settings = init.settings

    async def start(self) -> TargetInfo:
        if self.settings.get("print"):
            print(self.settings["print"], flush=True)
        if self.settings.get("fail_start"):
            raise TargetError("the target said no", hint="fix the target")
        return TargetInfo(kind="fake", url=None, model=self.init.model, api="chat", stream=True,
                          include_usage=self.init.include_usage)

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None:
        record.sent_ns = perf_counter_ns()
        if spec.index == self.settings.get("exit_on"):
            os._exit(3)
        try:
            await asyncio.sleep(self.settings.get("delay_s", 0.01))
        except asyncio.CancelledError:
            record.status, record.error, record.end_ns = Status.INCOMPLETE, "cancelled before completion", perf_counter_ns()
            raise
        first = record.sent_ns + 1000
        record.first_token_ns = record.first_content_ns = first
        record.chunk_ns = [first, first, first + 500]  # two chunks read at the same instant
        record.chunk_tokens = [1, 1, 2]
        record.end_ns = first + 600
        record.max_tokens = spec.max_tokens
        record.output_tokens, record.output_tokens_source = 4, TokenSource.USAGE
        record.response_id = f"w{self.init.worker}-{spec.index}"
        record.finish_reason = "length"

    async def close(self) -> None:
        pass


if __name__ == "__main__":
    raise SystemExit(main(FakeBackend))
