"""Backends: the things that serve a request (OpenAI-compatible HTTP, in-process engines)."""

from tokspeed.backends.base import Backend, TargetInfo

__all__ = ["Backend", "TargetInfo"]
