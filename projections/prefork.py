"""How ``evstore serve`` runs its processes: one, or a parent and N workers forked from it.

The listening socket is bound, and listening, before anything heavy is imported (:func:`listen`): a
client that connects while the server starts or restarts waits in the socket's backlog and is answered
as soon as a worker is up, instead of being refused and backing off.

With ``--workers N`` (:func:`serve`) the parent imports the application's modules once, then forks the
N workers; each builds its own application (its engine and connections are opened after the fork:
nothing of the database, and no thread, exists in the parent when it forks) and runs uvicorn on the
inherited socket; the kernel hands each new connection to one of them.  The parent forks a new worker
for one that dies, stops them all on SIGINT or SIGTERM (uvicorn's graceful stop, then SIGKILL after
:data:`GRACE` seconds), and a worker whose parent died, however it died, stops too: it watches a pipe
only the parent holds open.  This is gunicorn's ``--preload`` model.  uvicorn's own ``workers=N`` spawns
a fresh interpreter per worker (multiprocessing's *spawn*), each importing Starlette, SQLAlchemy,
psycopg and evstore again: on two cores a restarted server answered only a second after it started,
where forked workers answer a few tens of milliseconds after the parent's imports.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from eventstore.errors import EvstoreError

#: Seconds a stopping worker has to finish what it serves (uvicorn's graceful shutdown) before the
#: parent kills it.
GRACE = 2
#: A worker's exit status when it could not start (its application or the database): the parent stops
#: rather than fork it again and again (uvicorn's code for the same).
STARTUP_FAILURE = 3
#: A worker that dies sooner than this after its fork is forked again only after this long.
RESPAWN_DELAY = 1.0


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def kill_with_parent() -> None:
    """Have the kernel SIGKILL this (forked or pool) process when its parent dies, however it dies (Linux's
    ``PR_SET_PDEATHSIG``; the standard library has no binding, so ``prctl`` is called through ctypes);
    elsewhere nothing: the caller watches its parent some other way too."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass


def may_fork(url: str | None = None) -> bool:
    """Whether this process may fork a child to do part of its work: ``fork`` exists, no other thread runs
    here (a fork copies their locks as they are), and the store at ``url``, if given, can be opened by
    another process (not an in-memory SQLite database)."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    if url is not None and url.startswith("sqlite"):
        from eventstore import config

        return config.sqlite_file(url) is not None
    return True


def run_in_child(fd: int, work: Callable[[], Any]) -> None:
    """In a forked child, never returning: die with the parent (:func:`kill_with_parent`), run ``work`` and write
    to ``fd`` ``("ok", its result)`` or ``("error", what went wrong)`` pickled (an EvstoreError's message; another
    error's type and message), then ``os._exit``: nothing of the parent's is closed or flushed."""
    import pickle

    try:
        kill_with_parent()
        payload = pickle.dumps(("ok", work()))
    except BaseException as exc:  # noqa: BLE001 - told to the parent, which says it
        payload = pickle.dumps(("error", str(exc) if isinstance(exc, EvstoreError) else f"{type(exc).__name__}: {exc}"))
    try:
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(0)


def child_outcome(pid: int, fd: int) -> tuple[tuple[str, Any] | None, int, float]:
    """In the parent: what the child ``pid`` of :func:`run_in_child` wrote to ``fd`` (None: nothing, it died
    first), its exit code and its CPU seconds, once it has ended."""
    import pickle

    try:
        with os.fdopen(fd, "rb") as pipe:
            data = pipe.read()
    finally:
        _, status, usage = os.wait4(pid, 0)
    return (pickle.loads(data) if data else None), os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def listen(host: str, port: int, *, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` and listening (``port`` 0: one the system picks), as
    uvicorn binds its own (IPv6 for an address with a colon, ``SO_REUSEADDR``, its backlog)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise EvstoreError(f"Cannot listen on {host} port {port}: {exc.strerror or exc}; choose another --port "
                           "or --host.") from None
    sock.set_inheritable(True)
    return sock


def bound_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def serve(sock: socket.socket, build: Callable[[], Any], *, workers: int, options: dict[str, Any]) -> None:
    """Serve the ASGI application ``build()`` on ``sock`` with uvicorn (``options``: its Config's), in
    this process when ``workers`` is 1, else in ``workers`` forked processes this one supervises until
    SIGINT or SIGTERM."""
    if workers <= 1:
        app = build()
        try:
            started = _run_uvicorn(sock, app, options)
        except KeyboardInterrupt:  # uvicorn raises the Ctrl-C it stopped on again once stopped (uvicorn.run too)
            return
        if not started:  # its lifespan failed (logged): uvicorn.run's exit status
            raise SystemExit(STARTUP_FAILURE)
        return
    Supervisor(sock, build, workers=workers, options=options).run()


def _run_uvicorn(sock: socket.socket, app: Any, options: dict[str, Any]) -> bool:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, **options))
    server.run(sockets=[sock])
    return bool(server.started)


class Supervisor:
    """The parent of ``serve --workers N``: forks the workers, forks a new one for each that dies,
    stops them all on SIGINT/SIGTERM."""

    def __init__(self, sock: socket.socket, build: Callable[[], Any], *, workers: int,
                 options: dict[str, Any]) -> None:
        self.sock, self.build, self.workers, self.options = sock, build, workers, options
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (slot, forked at)
        self.replaced: set[int] = set()  # the slots whose first worker has died
        self.due: dict[int, float] = {}  # slot -> when to fork its next worker
        self.stopping = False
        self.failed: str | None = None

    def run(self) -> None:
        lifeline_r, self._lifeline_w = os.pipe()  # the workers read EOF when the parent is gone
        self._lifeline_r = lifeline_r
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        handled = (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        previous_fd = signal.set_wakeup_fd(self._wake_w)
        try:
            gc.collect()
            # The modules' objects stay shared with the workers: the collector of a worker leaves what was
            # frozen before its fork alone, so it does not copy those pages by writing into them.
            gc.freeze()
            for slot in range(self.workers):
                self._fork(slot)
            while not self.stopping:
                self._wait(1.0)
                self._reap()
                self._fork_due()
        finally:
            self.stopping = True
            self._stop()
            signal.set_wakeup_fd(previous_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for fd in (self._lifeline_w, lifeline_r, self._wake_r, self._wake_w):
                os.close(fd)
            gc.unfreeze()
        if self.failed is not None:
            raise EvstoreError(self.failed)

    # -- the parent --------------------------------------------------------------

    def _on_signal(self, sig: int, frame: object) -> None:
        if sig != signal.SIGCHLD:
            self.stopping = True  # the wake-up fd ends the wait; the loop stops the workers

    def _wait(self, timeout: float) -> None:
        if self.due:
            timeout = max(0.0, min(timeout, min(self.due.values()) - time.monotonic()))
        select.select([self._wake_r], [], [], timeout)
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _fork(self, slot: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the caller's stack
            code = 1
            try:
                code = self._worker()
            except KeyboardInterrupt:
                code = 0
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        self.children[pid] = (slot, time.monotonic())

    def _reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            slot, forked = self.children.pop(pid)
            if self.stopping:
                continue
            code = os.waitstatus_to_exitcode(status)
            if code == STARTUP_FAILURE and slot not in self.replaced:
                # The server cannot start (its database, its configuration): stop rather than fork in a loop.
                # A replacement that cannot start (the database away for a while) is tried again below.
                self.failed = f"A worker of `evstore serve` could not start (exit status {code}); see above."
                self.stopping = True
                continue
            self.replaced.add(slot)
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            print(f"evstore serve: worker {pid} ended ({how}); starting another", file=sys.stderr, flush=True)
            soon = forked + RESPAWN_DELAY > time.monotonic()  # dying at once again and again: not in a tight loop
            self.due[slot] = time.monotonic() + (RESPAWN_DELAY if soon else 0.0)

    def _fork_due(self) -> None:
        now = time.monotonic()
        for slot, when in list(self.due.items()):
            if when <= now and not self.stopping:
                del self.due[slot]
                self._fork(slot)

    def _stop(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + GRACE + 1.0
        while self.children and time.monotonic() < deadline:
            self._reap()
            if self.children:
                time.sleep(0.02)
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.children.clear()

    # -- a worker ----------------------------------------------------------------

    def _worker(self) -> int:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (self._lifeline_w, self._wake_r, self._wake_w):
            os.close(fd)
        threading.Thread(target=_watch_parent, args=(self._lifeline_r,), daemon=True,
                         name="evstore-parent-watch").start()
        try:
            app = self.build()  # this worker's engine and connections: opened here, after the fork
        except Exception as exc:
            print(f"Error: {exc}", file=sys.stderr, flush=True)
            return STARTUP_FAILURE
        return 0 if _run_uvicorn(self.sock, app, self.options) else STARTUP_FAILURE


def _watch_parent(fd: int) -> None:
    """Stop this worker when its parent is gone: the pipe's write end, held by the parent alone, closes
    however the parent ends (SIGKILL too).  uvicorn's graceful stop first; killed if that hangs."""
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE + 1.0)
    os._exit(1)


__all__ = ["GRACE", "STARTUP_FAILURE", "Supervisor", "bound_port", "listen", "serve"]
