"""What a run's config becomes for its target: passes over a prompt file, the offline mode, the embedded defaults.

How many requests an iteration makes over a prompt file, and the offline throughput mode.

A prompt file is a set of representative requests, so an iteration over one is one pass:
unless `--requests` or `--duration` says otherwise, `tokspeed run --dataset FILE
--iterations N` sends every prompt of the file once per iteration, in the file's order, whatever
the target (the built-in and synthetic sets have no natural size and keep the default count).

The offline throughput mode (`--offline`; what a vllm: target runs when no load profile is given,
decided by the CLI, which knows the target kinds)
is what a script calling `llm.generate(prompts)` once per iteration measures: one warm-up request,
then each iteration submits all its requests at once (concurrency = requests per iteration).
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from tokspeed.backends.embedded.defaults import (
    EMBEDDED_OUTPUT_TOKENS,
    EMBEDDED_REQUESTS,
    RANDOM_WEIGHTS_NOTE,
    embedded_size,
    is_embedded_target,
    normalise_embedded_target,
)
from tokspeed.backends.embedded.hardware import choose_dtype, choose_threads
from tokspeed.backends.embedded.sizes import get_size
from tokspeed.config import DEFAULT_REQUESTS, RunConfig
from tokspeed.errors import ConfigError

OFFLINE_WARMUP = 1
PROFILE_FIELDS = frozenset({"profile", "concurrency", "rate"})
_LIMIT_FIELDS = frozenset({"requests", "duration_s"})


def dataset_passes(cfg: RunConfig, workload: dict[str, Any], given: Set[str], *, offline: bool) -> RunConfig:
    """`cfg` with one pass over a prompt file per iteration and, when `offline`, all of it at once.

    `workload` is `Workload.describe()` (its `kind` and `items`); `given` is what the user set (flags
    or scenario file), so defaults applied since (the embedded model's request count) give way.
    """
    update: dict[str, Any] = {}
    one_pass = workload.get("kind") == "file" and workload.get("items") and cfg.scheduled is None and not cfg.multi_turn
    if one_pass and not _LIMIT_FIELDS & given:
        update["requests"] = int(workload["items"])
    if offline:
        if cfg.scheduled is not None or cfg.multi_turn or cfg.conversation_rate is not None:
            raise ConfigError("--offline submits each iteration's requests at once: it cannot be combined with a "
                              "trace, stages, ramps, classes or conversations", hint="drop --offline")
        per_iteration = update.get("requests") or (cfg.requests if "requests" in given and cfg.requests else None)
        per_iteration = per_iteration or workload.get("items") or DEFAULT_REQUESTS
        if not _LIMIT_FIELDS & given:
            update["requests"] = per_iteration
        if not {"warmup", "warmup_s"} & given:
            update["warmup"] = OFFLINE_WARMUP
        update["profile"], update["concurrency"] = "concurrency", per_iteration
    return cfg.model_copy(update=update) if update else cfg


def check_offline(cfg: RunConfig, given: Set[str]) -> None:
    """`--offline` sets the load itself: refuse a load profile given beside it."""
    if cfg.offline and PROFILE_FIELDS & given:
        raise ConfigError("--offline sets the load itself (every request of an iteration at once)",
                          hint="drop --offline, or drop --synchronous/--concurrency/--rate")


def describe_offline(cfg: RunConfig, vllm: bool) -> str:
    """The console's line about the load, before the run."""
    warm = f"after {cfg.warmup_requests} warm-up request{'s' if cfg.warmup_requests != 1 else ''}"
    engine = "vLLM's offline engine" if vllm else "the target"
    return (f"offline throughput on {engine}: all {cfg.requests or cfg.concurrency} requests of each iteration "
            f"submitted at once, {warm}")


def embedded_defaults(cfg: RunConfig) -> RunConfig:
    """The config with the embedded target made explicit and CPU-sized defaults for what was not set.

    Unchanged when the target is a server. `--requests`/`--duration`,
    `--max-tokens` and the load profile the user gave are kept as given.
    """
    if not is_embedded_target(cfg.target):
        return cfg
    given = cfg.model_fields_set
    update: dict[str, object] = {"target": normalise_embedded_target(cfg.target)}
    if not {"requests", "duration_s"} & given:
        update["requests"] = EMBEDDED_REQUESTS
    if "output_tokens" not in given:
        update["output_tokens"] = EMBEDDED_OUTPUT_TOKENS
    return cfg.model_copy(update=update)


def describe_embedded(cfg: RunConfig) -> str:
    """What will be measured, before the model is built (dtype and threads chosen the same way), and what
    its output means: two lines."""
    from tokspeed.backends.embedded.backend import describe

    size = get_size(embedded_size(cfg.target))
    return describe(size.name, choose_dtype(), choose_threads(), size.parameter_count()) + "\n" + RANDOM_WEIGHTS_NOTE
