"""Where built artefacts (the trained tokenizer) are cached: the user cache dir.

`$XDG_CACHE_HOME/tokspeed` when XDG_CACHE_HOME is set, else `~/.cache/tokspeed`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """tokspeed's directory under the user cache dir."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tokspeed"


def build_once(final: Path, build: Callable[[Path], None]) -> bool:
    """Make `final` (a directory) by calling `build(tmp_dir)` unless it exists; True if built now.

    The directory is built beside its final place and renamed into it, so a
    crash never leaves a half-written cache entry and two processes building
    at once both end up with one complete copy.
    """
    if final.is_dir():
        return False
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.replace(tmp, final)
        except OSError:
            if not final.is_dir():  # not a lost race: a real failure
                raise
            return False
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return True
