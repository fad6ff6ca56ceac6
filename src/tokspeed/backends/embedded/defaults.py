"""The embedded target's name (`embedded[:size]`) and its CPU-sized defaults (applied by tokspeed.runner.passes).

Defaults for the embedded model (applied only to what the user did not set):
100 measured requests of 16 output tokens, one at a time, after one warm-up
request. 100 because fewer leave p99 as "the slowest request" (the
too_few_samples diagnosis would rightly say so); 16 tokens because the first
command should finish in about a minute on 2 cores (the README gives the
figure measured), and 15 gaps per request are plenty for ITL and TPOT.
"""

from __future__ import annotations

from tokspeed.backends.embedded.sizes import DEFAULT_SIZE, get_size
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

