"""A throwaway PostgreSQL server for the test suite, started from the PostgreSQL binaries on this machine.

``tests/conftest.py`` uses it when ``EVSTORE_TEST_POSTGRES_URL`` is not set: ``initdb`` into a fresh
temporary directory, ``postgres`` on a free port of 127.0.0.1 (trust authentication, fsync off: the
data is thrown away), a database ``test``, and everything removed when the session ends.

Why not pytest-postgresql: it runs ``initdb`` and ``postgres`` as the calling user, and both refuse to
run as root, which is what CI runs as.  Here, under root, the server runs as the ``postgres`` system
user (or ``nobody``) through ``subprocess``'s ``user=``/``group=``, and on Linux it is told to quit
when the test process dies (``PR_SET_PDEATHSIG``), so a killed pytest leaves no server behind.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: Where Debian/Ubuntu (``apt-get install postgresql``) and RHEL (``postgresql-server``) put the server.
SEARCHED = ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin")
#: Names the directory of ``initdb`` and ``postgres`` when they are somewhere else (Homebrew, a build of your own).
BINDIR_SETTING = "EVSTORE_TEST_POSTGRES_BINDIR"


class Unavailable(Exception):
    """No throwaway server could be started; the message says why."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``: ``$EVSTORE_TEST_POSTGRES_BINDIR`` if set (and only it),
    else the one on PATH, else the newest version installed where distributions put it."""
    if BINDIR_SETTING in os.environ:
        candidates = [Path(os.environ[BINDIR_SETTING])]
    else:
        found = shutil.which("initdb")
        candidates = [Path(found).parent] if found else []
        for pattern in SEARCHED:
            candidates += sorted(map(Path, glob.glob(pattern)), key=_version, reverse=True)
    for d in candidates:
        if (d / "initdb").is_file() and (d / "postgres").is_file():
            return d
    return None


def _version(bindir: Path) -> tuple[int, ...]:  # /usr/lib/postgresql/15/bin, /usr/pgsql-15/bin
    return tuple(int(n) for n in re.findall(r"\d+", bindir.parent.name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _death_signal() -> Callable[[], None] | None:
    """On Linux, a preexec_fn that has the child get SIGQUIT (postgres: immediate shutdown) when its parent dies."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child between fork and exec only calls it
    PR_SET_PDEATHSIG = 1

    def set_it() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGQUIT))

    return set_it


class Server:
    """A running throwaway server; :attr:`url` is an admin URL for the database ``test``."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.proc: subprocess.Popen[bytes] | None = None
        self.root = Path(tempfile.mkdtemp(prefix="evstore-pg-"))
        self.url = ""
        self.run_as: dict[str, object] = {}
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            user = _system_user()
            self.run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
            os.chown(self.root, user.pw_uid, user.pw_gid)
        os.chmod(self.root, 0o700)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        self.env.update(LC_ALL="C", LANG="C")

    def _run(self, *args: str) -> None:
        r = subprocess.run([str(self.bindir / args[0]), *args[1:]], capture_output=True, text=True, env=self.env,
                           cwd=self.root, **self.run_as)
        if r.returncode != 0:
            raise Unavailable(f"{args[0]} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}")

    def start(self, timeout: float = 60.0) -> Server:
        data = self.root / "data"
        self._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C",
                  "--no-sync")
        for _attempt in range(3):  # another process may take the free port before postgres binds it
            port = _free_port()
            preexec = _death_signal()
            with open(self.root / "postgres.log", "ab") as log:  # the child keeps its own copy of the descriptor
                self.proc = subprocess.Popen(
                    [str(self.bindir / "postgres"), "-D", str(data), "-p", str(port),
                     "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.root}",
                     "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, cwd=self.root,
                    preexec_fn=preexec, **self.run_as)
            if self._wait_ready(port, timeout):
                self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"
                return self
        raise Unavailable(f"postgres did not start: {self._log_tail()}")

    def _wait_ready(self, port: int, timeout: float) -> bool:
        import psycopg

        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True,
                                     connect_timeout=2) as conn:
                    conn.execute("CREATE DATABASE test")
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        self.stop(keep_files=True)
        raise Unavailable(f"postgres did not accept connections within {timeout:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "postgres.log").read_text(errors="replace").strip()[-500:]
        return "(no log)"

    def stop(self, keep_files: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown: disconnect clients, stop cleanly
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)


def _system_user() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise Unavailable("running as root and neither a 'postgres' nor a 'nobody' user exists to run the server as")


def start() -> Server:
    """Start a throwaway server, or raise :class:`Unavailable` saying why not."""
    bindir = find_bindir()
    if bindir is None:
        where = (f"${BINDIR_SETTING} ({os.environ[BINDIR_SETTING]})" if BINDIR_SETTING in os.environ
                 else "on PATH, in " + " or in ".join(SEARCHED))
        raise Unavailable(f"no PostgreSQL server binaries (initdb and postgres) were found {where}")
    server = Server(bindir)
    try:
        return server.start()
    except (OSError, subprocess.SubprocessError) as exc:
        server.stop()
        raise Unavailable(f"the server in {bindir} could not be started ({exc})") from exc
    except BaseException:
        server.stop()
        raise
