"""Is the `embedded` extra installed? Checked without importing torch."""

from __future__ import annotations

import importlib.util

from tokspeed.errors import ConfigError

EXTRA_HINT = "pip install 'tokspeed[embedded]'  (or pass --target URL to benchmark a server)"
_MODULES = ("torch", "transformers", "tokenizers")


def missing_modules() -> list[str]:
    """The embedded extra's modules that cannot be found."""
    return [m for m in _MODULES if not _findable(m)]


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return False


def require_extra() -> None:
    """ConfigError (exit 2) with an install hint when torch/transformers/tokenizers are missing."""
    missing = missing_modules()
    if missing:
        raise ConfigError(
            f"the embedded default model needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed",
            hint=EXTRA_HINT,
        )
