"""Settings: database URL, durability, input limits.  Environment first, then defaults."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_URL = "sqlite:///./.evstore/events.db"

#: Largest accepted ``data`` or ``meta`` of one event, in bytes of canonical JSON.
MAX_EVENT_BYTES = int(os.environ.get("EVSTORE_MAX_EVENT_BYTES", str(4 * 1024 * 1024)))
#: Deepest accepted nesting of arrays/objects in ``data`` or a snapshot document.
MAX_DEPTH = int(os.environ.get("EVSTORE_MAX_DEPTH", "64"))
#: Largest accepted snapshot file for ingest.
MAX_SNAPSHOT_BYTES = int(os.environ.get("EVSTORE_MAX_SNAPSHOT_BYTES", str(64 * 1024 * 1024)))


def database_url(url: str | None = None) -> str:
    """``url`` if given, else ``$EVSTORE_URL``, else the embedded SQLite default."""
    return url or os.environ.get("EVSTORE_URL") or DEFAULT_URL


def sqlite_file(url: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URL (None for other URLs and ``:memory:``)."""
    if url.startswith("sqlite") and ":///" in url:
        path = url.split(":///", 1)[1].split("?", 1)[0]
        if path and path != ":memory:":
            return Path(path).expanduser()
    return None


def store_directory(url: str) -> Path:
    """The directory that holds a SQLite store's file (analytics go beside it)."""
    path = sqlite_file(url)
    if path is not None:
        return path.resolve().parent
    return Path(os.environ.get("EVSTORE_HOME", ".evstore")).resolve()

