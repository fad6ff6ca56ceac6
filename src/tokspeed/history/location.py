"""Where the catalogue is: `--catalog`, else TOKSPEED_CATALOG, else a SQLite file in the user data dir.

The user data dir follows the platform's convention, as platformdirs does: `$XDG_DATA_HOME/tokspeed`
(else `~/.local/share/tokspeed`) on Linux and the BSDs, `~/Library/Application Support/tokspeed` on
macOS, `%LOCALAPPDATA%\\tokspeed` on Windows. A value is a file path (SQLite), a `sqlite:///PATH` URL
or a `postgresql://user:password@host/db` URL (a team's shared catalogue, through SQLAlchemy and
psycopg); `off` (or `--no-catalog`) registers nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tokspeed.backends.credentials import redact_url

ENV = "TOKSPEED_CATALOG"
OFF = frozenset({"off", "none", "no", "0", "false"})
FILE_NAME = "catalog.sqlite"
_POSTGRES_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")


@dataclass(frozen=True, slots=True)
class CatalogLocation:
    """A catalogue's SQLAlchemy URL and how to show it (password masked)."""

    url: str
    shown: str

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite:")


def data_dir(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """tokspeed's directory under the user data dir (platformdirs' user_data_dir logic)."""
    environ = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    home = Path(environ.get("HOME") or Path.home())
    if platform == "darwin":
        return home / "Library" / "Application Support" / "tokspeed"
    if platform.startswith("win"):
        base = environ.get("LOCALAPPDATA") or str(home / "AppData" / "Local")
        return Path(base) / "tokspeed"
    return Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share") / "tokspeed"


def resolve(flag: str | None = None, disabled: bool = False, env: Mapping[str, str] | None = None,
            platform: str | None = None) -> CatalogLocation | None:
    """The catalogue to use (None: off). The flag wins over the environment, which wins over the default."""
    environ = os.environ if env is None else env
    if disabled:
        return None
    value = flag if flag is not None else environ.get(ENV)
    if value is not None and value.strip().lower() in OFF:
        return None
    if not value or not value.strip():
        return _sqlite(data_dir(environ, platform) / FILE_NAME)
    return location_of(value.strip())


def location_of(value: str) -> CatalogLocation:
    """A path or URL -> its location (relative paths made absolute: the catalogue outlives the cwd)."""
    if value.startswith(_POSTGRES_SCHEMES):
        rest = value.split("://", 1)[1]
        url = "postgresql+psycopg://" + rest
        return CatalogLocation(url=url, shown=redact_url(value))
    if value.startswith("sqlite:///"):
        return _sqlite(Path(value.removeprefix("sqlite:///")))
    if "://" in value:
        return CatalogLocation(url=value, shown=redact_url(value))  # another SQLAlchemy dialect: its own checks
    return _sqlite(Path(value).expanduser())


def _sqlite(path: Path) -> CatalogLocation:
    path = path.absolute()
    return CatalogLocation(url=f"sqlite:///{path}", shown=str(path))
