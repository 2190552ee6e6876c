"""``evstore serve`` drains the hook spool while it serves.

``evstore hook claude-code`` only spools each call (:mod:`eventstore.spool`); something must move
the spool into the store.  A server that runs anyway is the natural drainer: every ``interval``
seconds :class:`SpoolDrainer` runs :func:`eventstore.capture.drain` on a thread of its own (never
on the event loop, never on the request threads), so new hook events reach the pages and the
live view (server-sent events) within about ``interval`` seconds.

    >>> drainer = SpoolDrainer(store, Path("~/.evstore/spool"), interval=1.0)  # doctest: +SKIP
    >>> task = asyncio.create_task(drainer.run())  # in the app's lifespan; drainer.close() on shutdown

One drainer at a time: :func:`eventstore.capture.drain` takes the spool's ``flock`` without
waiting, so several uvicorn workers, a second server, ``evstore watch`` or a hook's background
``hook drain`` skip a round instead of racing; into a PostgreSQL store the drainer also holds the
folder's advisory lock while it drains (:func:`eventstore.capture.drain_exclusive`, on a
connection it keeps between rounds), so servers on several machines that mount one spool folder
take turns too.  A drain killed half-way is finished by the next one without doubling anything.  A drain that fails never stops the server: the error goes to the
server's log and to ``drain-errors.log`` beside the spool (``evstore doctor``), once until it
changes, and the next round tries again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eventstore import capture, spool
from eventstore.locks import ExclusiveLock
from eventstore.store import EventStore

log = logging.getLogger("evstore.serve")


class SpoolDrainer:
    """Drains the hook spool in ``directory`` into ``store`` every ``interval`` seconds."""

    def __init__(self, store: EventStore, directory: Path, *, interval: float = 1.0) -> None:
        self.store, self.directory, self.interval = store, Path(directory), interval
        self.rounds = 0  # drains run (skipped ones included)
        self.recorded = 0  # hook calls recorded
        self.last_error: str | None = None
        self._exclusive: ExclusiveLock | None = None  # PostgreSQL: the folder's advisory lock, made on first use
        self._stop = threading.Event()
        self._wake = asyncio.Event()
        # Its own thread: a long drain (a big transcript on Stop) must not hold a request thread.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evstore-drain")

    def drain_once(self) -> capture.DrainResult | None:
        """One drain (on the calling thread); None when it failed (logged, never raised)."""
        try:
            if self._exclusive is None and self.store.backend.has_session_locks and spool.pending(self.directory):
                self._exclusive = capture.drain_exclusive(self.store, self.directory)
            result = capture.drain(self.store, self.directory, stop=self._stop.is_set, exclusive=self._exclusive)
        except Exception as exc:  # noqa: BLE001 - a drain never takes the server down; the next round retries
            self._failed(exc)
            return None
        self.rounds += 1
        self.recorded += result.hooks
        for problem in result.errors:  # capture.drain put them in drain-errors.log already
            log.warning("hook spool %s: %s", self.directory, problem)
        if self.last_error is not None and not result.skipped:
            log.warning("hook spool %s: draining again after: %s", self.directory, self.last_error)
            self.last_error = None
        return result

    def _failed(self, exc: Exception) -> None:
        message = f"drain failed: {type(exc).__name__}: {exc}"
        if message == self.last_error:  # the same failure every round: said once, not once a second
            return
        self.last_error = message
        log.error("hook spool %s: %s; the spool is kept and retried every %s s (evstore serve --no-drain "
                  "turns draining off)", self.directory, message, self.interval, exc_info=exc)
        try:
            spool.log_drain_error(self.directory, f"evstore serve: {message}")
        except OSError as log_exc:
            log.error("hook spool %s: cannot write %s: %s", self.directory, spool.DRAIN_ERRORS, log_exc)

    async def run(self) -> None:
        """Drain every ``interval`` seconds until :meth:`close`."""
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            await loop.run_in_executor(self._pool, self.drain_once)
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except TimeoutError:
                pass

    def close(self) -> None:
        """Ask the running drain to stop after its current record (what is left stays spooled)."""
        self._stop.set()
        self._wake.set()

    def shutdown(self) -> None:
        """Wait for the drain thread to finish (after :meth:`close`)."""
        self._pool.shutdown(wait=True)
        if self._exclusive is not None:
            self._exclusive.close()
            self._exclusive = None


__all__ = ["SpoolDrainer"]
