"""Units in what people type: durations like `30s`, `5m`, `1.5h`, `250ms`.

Below every layer that reads a duration (config, load stages and traces, monitor rules), so
none of them has to import another for it.
"""

from __future__ import annotations

import re

from tokspeed.errors import ConfigError

_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str | float) -> float:
    """`30s`, `5m`, `1.5h`, `250ms` or a bare number of seconds -> seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        raise ConfigError(f"cannot parse duration {text!r}", hint="use e.g. 30s, 5m, 1h or 250ms")
    m = _DURATION_RE.match(text)
    if not m:
        raise ConfigError(f"cannot parse duration {text!r}", hint="use e.g. 30s, 5m, 1h or 250ms")
    return float(m.group(1)) * _UNIT_S[m.group(2)]
