"""Settings: database URL, durability, input limits, where derived files live.  Environment first, then defaults."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # pathlib costs milliseconds to import: the hook's fast path reads this module
    from collections.abc import Mapping
    from pathlib import Path

    from sqlalchemy.engine import URL

DEFAULT_URL = "sqlite:///./.evstore/events.db"

#: The largest stream version (and count, page, limit) a command or query parameter takes: versions are
#: 32-bit integers on PostgreSQL, and beyond 64 bits SQLite's driver overflows.  Larger is a usage error.
MAX_INT = 2**31 - 1

#: Largest accepted ``data`` or ``meta`` of one event, in bytes of canonical JSON.
MAX_EVENT_BYTES = int(os.environ.get("EVSTORE_MAX_EVENT_BYTES", str(4 * 1024 * 1024)))
#: Deepest accepted nesting of arrays/objects in ``data`` or a snapshot document.
MAX_DEPTH = int(os.environ.get("EVSTORE_MAX_DEPTH", "64"))
#: Claude transcripts: a JSON string (tool output, base64 image) of this many bytes or more is
#: stored once as a content-addressed blob, the line keeping a reference (0: never).  4 KiB,
#: measured (``benchmarks/bench_ingest.py --claude --blob-threshold N``, 50 MB generated folder):
#: the store held 64.0 MB with no blobs, 25.5 MB at 1 KiB, 27.6 MB at 4 KiB, 39.8 MB at 16 KiB,
#: 58.3 MB at 64 KiB, with ingest CPU the same within noise.  Below a 4 KiB SQLite page a string
#: stays inside its event's page anyway and a blob's key, index entry and lookup (~100 bytes) are
#: no longer small beside it; from there on, outputs that recur (file reads, command outputs,
#: images, an output written twice in a line) are stored once, and every read of the event and
#: every analytics pass skip them.  ``evstore ingest claude --blob-threshold``.
BLOB_THRESHOLD = int(os.environ.get("EVSTORE_BLOB_THRESHOLD", str(4 * 1024)))
#: Largest accepted snapshot file for ingest.
MAX_SNAPSHOT_BYTES = int(os.environ.get("EVSTORE_MAX_SNAPSHOT_BYTES", str(64 * 1024 * 1024)))
#: Longest Claude transcript line recorded (default: the snapshot limit).  A longer line is never held
#: whole: it is read through in chunks, hashed, and recorded as a ``claude.unreadable_line`` naming its
#: length and SHA-256 instead of its bytes.  A line within the limit costs about five times its size
#: while it is decoded, scrubbed and stored, so this bounds an ingest's peak memory too.
MAX_LINE_BYTES = int(os.environ.get("EVSTORE_MAX_LINE_BYTES", str(MAX_SNAPSHOT_BYTES)))


def database_url(url: str | None = None) -> str:
    """``url`` if given, else ``$EVSTORE_URL``, else the embedded SQLite default."""
    return url or os.environ.get("EVSTORE_URL") or DEFAULT_URL


def password_keys(query: Mapping[str, object]) -> list[str]:
    """The keys of a URL's query that carry a password (``?password=...``, ``?sslpassword=...``: the
    PostgreSQL drivers take them as connection options, so they are as secret as ``user:PASSWORD@``)."""
    return [key for key in query if "password" in key.lower()]


def url_has_password(url: str) -> bool:
    """Whether a database URL holds a password: ``scheme://user:PASSWORD@host/...`` or in its query."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy reads: look for the userinfo's colon
        head = url.partition("://")[2].partition("/")[0]
        return ("@" in head and ":" in head.rpartition("@")[0]) or "password" in url.partition("?")[2].lower()
    return parsed.password is not None or bool(password_keys(parsed.query))


def shown_url(url: URL) -> str:
    """``url`` for a message: its password, in the userinfo or the query, as ``***``."""
    hidden = url.update_query_dict({key: "***" for key in password_keys(url.query)})
    return hidden.render_as_string(hide_password=True).replace("%2A%2A%2A", "***")


def sqlite_path(url: str) -> str | None:
    """The database file of a ``sqlite:///PATH`` URL as written (None for other URLs and ``:memory:``)."""
    if url.startswith("sqlite") and ":///" in url:
        path = url.split(":///", 1)[1].split("?", 1)[0]
        if path and path != ":memory:":
            return path
    return None


def sqlite_file(url: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URL (None for other URLs and ``:memory:``)."""
    from pathlib import Path

    path = sqlite_path(url)
    return None if path is None else Path(path).expanduser()


def analytics_directory(url: str, store_id: str) -> Path:
    """Where a store's analytics files live unless a directory is named (never shared by two stores).

    A SQLite store's sit beside its file in a folder named after it (``one.db`` ->
    ``one.db.analytics``), so two files in one directory keep apart and the folder travels with
    the file; any other store's (PostgreSQL, in-memory SQLite) in the user's cache directory
    (``$XDG_CACHE_HOME/evstore/analytics/<store id>`` on Linux), keyed by the store's identity.
    The manifest inside names the store id and the event it was built up to, so even a shared
    or stale directory is rebuilt rather than read (``projections/analytics/files.py``).
    """
    path = sqlite_file(url)
    if path is not None:
        path = path.resolve()
        return path.with_name(f"{path.name}.analytics")
    from platformdirs import user_cache_path

    return user_cache_path("evstore", appauthor=False) / "analytics" / store_id

