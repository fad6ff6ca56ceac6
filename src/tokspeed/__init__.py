"""tokspeed: measure how fast an LLM deployment really is."""

from __future__ import annotations

from tokspeed.version import __version__

__all__ = ["__version__"]
