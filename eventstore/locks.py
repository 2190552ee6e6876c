"""One process at a time, across processes and machines sharing a PostgreSQL store.

Some work must run in one place only however many ``evstore serve`` workers, servers and
``projections run --follow`` share a database: the drain of a hook spool, the projection runner.
:class:`ExclusiveLock` is a PostgreSQL session-level advisory lock (``pg_try_advisory_lock``)
held on a connection of its own: whoever takes it does the work, the others skip (or stand by
and try again), and when the holder dies, is killed or loses its connection the server ends its
session and the lock is free for the next one at once.  Keys are hashes of the store's identity
and a name (:func:`lock_key`): stores in other schemas of the database have locks of their own,
and no key is the append lock's.

On SQLite there is no such lock (a store file lives on one machine): :meth:`ExclusiveLock.acquire`
always succeeds and callers keep their file lock (the spool's ``flock``, SQLite's own write lock).

    >>> with ExclusiveLock(store, "projection-runner", label="evstore projections run") as lock:  # doctest: +SKIP
    ...     if lock.held:
    ...         run_projections()
    ...     else:
    ...         print("running elsewhere:", lock.holder())
"""

from __future__ import annotations

import hashlib
import os
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventstore.store import EventStore


def lock_key(name: str) -> int:
    """The bigint advisory-lock key of ``name`` (the first 8 bytes of a SHA-256, signed)."""
    return int.from_bytes(hashlib.sha256(b"evstore-lock:" + name.encode()).digest()[:8], "big", signed=True)


def default_label(what: str) -> str:
    """``what`` with this process's id and machine name (what PostgreSQL shows for the holder)."""
    return f"{what} (pid {os.getpid()} on {socket.gethostname()})"


class ExclusiveLock:
    """The lock ``name`` of ``store``: :meth:`acquire` (non-blocking), :meth:`still_held`,
    :meth:`release` (the connection is kept for the next acquire), :meth:`close`."""

    def __init__(self, store: EventStore, name: str, *, label: str | None = None) -> None:
        self.store, self.name = store, name
        self.label = label or default_label(f"evstore {name}")
        self.shared = store.backend.has_session_locks  # False: there is nothing to share (SQLite)
        # Advisory locks are the database's: the store's identity keeps stores in other schemas apart.
        self.key = lock_key(f"{store.store_id()}:{name}") if self.shared else 0
        self.held = False
        self._handle: Any = None

    def _raw(self) -> Any:
        if self._handle is None:
            self._handle = self.store.connect()
        return self._handle.driver_connection

    def _drop(self) -> None:
        """Forget the connection (really closed: it was renamed, and may hold the lock if broken)."""
        handle, self._handle = self._handle, None
        self.held = False
        if handle is not None:
            try:
                handle.invalidate()
            except Exception:  # noqa: BLE001 - a dead connection may fail to close; it is gone either way
                pass

    def acquire(self) -> bool:
        """Take the lock if nobody holds it; True if this process holds it now."""
        if self.held:
            return True
        if not self.shared:
            self.held = True
            return True
        try:
            self.held = self.store.backend.try_session_lock(self._raw(), self.key, self.label)
        except BaseException:
            self._drop()
            raise
        return self.held

    def still_held(self) -> bool:
        """Whether the lock is still this process's (False once its session was ended, say by
        ``pg_terminate_backend`` or a network cut: another process may hold it now)."""
        if not self.held or not self.shared:
            return self.held
        try:
            held = self.store.backend.holds_session_lock(self._raw(), self.key)
        except Exception:  # noqa: BLE001 - a session that is gone holds nothing
            self._drop()
            return False
        if not held:
            self.held = False
        return held

    def release(self) -> None:
        """Let the lock go (a no-op if not held)."""
        if not self.held:
            return
        self.held = False
        if not self.shared:
            return
        try:
            self.store.backend.release_session_lock(self._raw(), self.key)
        except Exception:  # noqa: BLE001 - ending the session lets the lock go too
            self._drop()

    def holder(self) -> str | None:
        """Who holds the lock (PostgreSQL's view of its session), or None if nobody does or there
        is no shared lock (SQLite)."""
        if not self.shared:
            return None
        handle = self.store.connect()
        try:
            return self.store.backend.session_lock_holder(handle.driver_connection, self.key)
        finally:
            handle.close()

    def close(self) -> None:
        """Release the lock and close its connection."""
        self.release()
        self._drop()

    def __enter__(self) -> ExclusiveLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ExclusiveLock", "default_label", "lock_key"]
