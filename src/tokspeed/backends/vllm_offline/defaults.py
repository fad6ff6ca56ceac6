"""The default load for vllm: targets: the seed's offline throughput run.

The seed's script warms up with one prompt, then for each iteration hands every
prompt of its file to `llm.generate` at once and prints total time, tokens
generated, tokens/s and mean latency. Unless a load profile is given
(--synchronous, --concurrency, --rate), a vllm: target runs the same way:
each iteration is one pass over the dataset (all its prompts; 100 synthetic
ones), all submitted at once (concurrency = requests per iteration), after
one warm-up request. tokspeed's per-iteration lines and the summary across
--iterations are the seed's printout; the per-request TTFT/ITL come on top.
"""

from __future__ import annotations

from typing import Any

from tokspeed.config import DEFAULT_REQUESTS, RunConfig

OFFLINE_WARMUP = 1
_PROFILE_FIELDS = frozenset({"profile", "concurrency", "rate"})


def offline_defaults(cfg: RunConfig, workload: dict[str, Any]) -> RunConfig:
    """`cfg` with the offline throughput defaults for what the user did not set.

    `workload` is `Workload.describe()`: its `items` (prompts in the dataset,
    None for synthetic prompts) sets the requests per iteration.
    """
    given = cfg.model_fields_set
    update: dict[str, Any] = {}
    if "warmup" not in given:
        update["warmup"] = OFFLINE_WARMUP
    if not _PROFILE_FIELDS & given:
        items = workload.get("items")
        per_iteration = cfg.requests if "requests" in given and cfg.requests else (items or DEFAULT_REQUESTS)
        if not {"requests", "duration_s"} & given:
            update["requests"] = per_iteration
        update["profile"], update["concurrency"] = "concurrency", per_iteration
    return cfg.model_copy(update=update) if update else cfg


def describe_offline(cfg: RunConfig) -> str:
    """The console's line about the load, before the run."""
    if cfg.profile == "concurrency" and cfg.requests is not None and cfg.concurrency == cfg.requests:
        warm = f"after {cfg.warmup_requests} warm-up request{'s' if cfg.warmup_requests != 1 else ''}"
        return (f"vLLM's offline throughput, as a llm.generate(prompts) script measures it: all {cfg.requests} requests of each "
                f"iteration submitted at once, {warm}")
    return "vLLM's offline engine under the load profile given"
