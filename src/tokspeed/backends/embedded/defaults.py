"""The embedded target in a run: parsing `embedded[:size]`, CPU-sized defaults, the console line.

Defaults for the embedded model (applied only to what the user did not set):
100 measured requests of 16 output tokens, one at a time, after one warm-up
request. 100 because fewer leave p99 as "the slowest request" (the
too_few_samples diagnosis would rightly say so); 16 tokens because the first
command should finish in about a minute on 2 cores (the README gives the
figure measured), and 15 gaps per request are plenty for ITL and TPOT.
"""

from __future__ import annotations

from tokspeed.backends.embedded.hardware import choose_dtype, choose_threads
from tokspeed.backends.embedded.sizes import DEFAULT_SIZE, get_size
from tokspeed.config import RunConfig
from tokspeed.errors import ConfigError

RANDOM_WEIGHTS_NOTE = "Its weights are random, so the text it generates is noise: only its speed means something."
EMBEDDED_REQUESTS = 100
EMBEDDED_OUTPUT_TOKENS = "16"
_PREFIX = "embedded"


def is_embedded_target(target: str | None) -> bool:
    """True for no target at all, `embedded` and `embedded:SIZE`."""
    return target is None or target == _PREFIX or target.startswith(_PREFIX + ":")


def embedded_size(target: str | None) -> str:
    """The size named by an embedded target (`small` when none is named); ConfigError if unknown."""
    if not is_embedded_target(target):
        raise ConfigError(f"{target!r} is not an embedded target", hint="use embedded, embedded:tiny or embedded:small")
    name = DEFAULT_SIZE if target in (None, _PREFIX) else str(target)[len(_PREFIX) + 1 :]
    return get_size(name).name


def normalise_embedded_target(target: str | None) -> str:
    """`embedded:SIZE` for any embedded target."""
    return f"{_PREFIX}:{embedded_size(target)}"


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


def describe_plan(cfg: RunConfig) -> str:
    """What will be measured, before the model is built (dtype and threads chosen the same way), and what
    its output means: two lines."""
    from tokspeed.backends.embedded.backend import describe

    size = get_size(embedded_size(cfg.target))
    return describe(size.name, choose_dtype(), choose_threads(), size.parameter_count()) + "\n" + RANDOM_WEIGHTS_NOTE
