"""A real Triton Inference Server (nvidia-pytriton's bundled binary) serving a small decoupled Python model.

Run by tests/integration/test_triton_server.py with a Python that has `nvidia-pytriton` installed:

    python triton_model.py HTTP_PORT EMIT_LOG [DECODE_S]

The model, `tiny`, takes Triton's generate-extension inputs (`text_input`, `max_tokens`; the JSON's
other keys, such as `stream`, arrive as request parameters) and answers in the decoupled mode that
`generate_stream` needs: after PREFILL_S one response per token (`text_output`, " w<i>"), DECODE_S
(4 ms, or the third argument) apart; for `generate` (the `stream` parameter false) one response with the whole text. It serves one
request at a time (one model instance, no batching), so the order it logs is the order they were sent.

For every request it appends one JSON line to EMIT_LOG: its `time.monotonic_ns()` when the request
reached the model and when each response left it. That is the clock tokspeed's records use on Linux
(`perf_counter_ns` and `monotonic_ns` both read CLOCK_MONOTONIC), so a test can hold each token's
arrival against its emission. gRPC is on HTTP_PORT + 1, Triton's Prometheus metrics on HTTP_PORT + 2.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

PREFILL_S = 0.010
DECODE_S = 0.004


def _emitter(log: Path, decode_s: float) -> Any:
    def infer(requests: list[Any]) -> Iterator[list[dict[str, np.ndarray]]]:
        for request in requests:
            received = time.monotonic_ns()
            n = int(np.asarray(request["max_tokens"]).reshape(-1)[0])
            stream = bool((request.parameters or {}).get("stream", True))
            words = [f" w{i}" for i in range(n)]
            emitted: list[int] = []
            time.sleep(PREFILL_S)
            if stream:
                for i, word in enumerate(words):
                    if i:
                        time.sleep(decode_s)
                    emitted.append(time.monotonic_ns())
                    yield [{"text_output": np.array([word.encode()], dtype=np.object_)}]
            else:
                time.sleep(decode_s * (n - 1))
                emitted.append(time.monotonic_ns())
                yield [{"text_output": np.array(["".join(words).encode()], dtype=np.object_)}]
            with log.open("a") as f:
                f.write(json.dumps({"received_ns": received, "emitted_ns": emitted, "tokens": n, "stream": stream}) + "\n")

    return infer


def main(port: int, log: Path, decode_s: float) -> None:
    config = TritonConfig(http_address="127.0.0.1", http_port=port, grpc_address="127.0.0.1", grpc_port=port + 1,
                          metrics_address="127.0.0.1", metrics_port=port + 2, allow_gpu_metrics=False, log_verbose=0)
    with Triton(config=config) as triton:
        triton.bind(
            model_name="tiny",
            infer_func=_emitter(log, decode_s),
            inputs=[Tensor(name="text_input", dtype=bytes, shape=(1,)), Tensor(name="max_tokens", dtype=np.int32, shape=(1,))],
            outputs=[Tensor(name="text_output", dtype=bytes, shape=(1,))],
            config=ModelConfig(batching=False, decoupled=True),
        )
        print("tiny is served", flush=True)
        triton.serve()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else DECODE_S)
