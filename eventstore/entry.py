"""The ``evstore`` console script.

``evstore [--url URL] hook claude-code`` is answered here, before click, SQLAlchemy or any
dialect is imported: a Claude Code hook runs on every tool call, so it only spools its input
(:mod:`eventstore.spool`) and returns, in about the time Python takes to start.  It never
breaks the agent: whatever happens it exits 0 and prints nothing on stdout; errors go to
``hook-errors.log`` in the spool folder (``evstore doctor`` shows them).  Every other
command goes to the click CLI (:mod:`eventstore.cli`).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: Hook events after which the new part of the transcript is worth recording at once.
DRAIN_ON = (b"Stop", b"SubagentStop", b"SessionEnd", b"PreCompact")
#: A hook never blocks the agent longer than this (seconds), even if stdin never closes
#: (``EVSTORE_HOOK_DEADLINE`` overrides it).
HOOK_DEADLINE = 10


def _fast_hook_url(argv: list[str]) -> tuple[bool, str | None, str | None]:
    """(is this ``[--url URL | --url-file FILE] hook claude-code``?, the URL given, the URL file given)."""
    url = url_file = None
    rest = argv
    if rest[:1] == ["--url"] and len(rest) >= 2:
        url, rest = rest[1], rest[2:]
    elif rest[:1] == ["--url-file"] and len(rest) >= 2:
        url_file, rest = rest[1], rest[2:]
    elif rest[:1] and rest[0].startswith("--url="):
        url, rest = rest[0][6:], rest[1:]
    elif rest[:1] and rest[0].startswith("--url-file="):
        url_file, rest = rest[0][11:], rest[1:]
    return rest == ["hook", "claude-code"], url, url_file


def _read_url_file(path: str) -> str:
    """The first non-empty line of ``path`` (as ``evstore --url-file`` reads it)."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                return line.strip()
    raise ValueError(f"--url-file {path} is empty")


def run_hook(url: str | None, stdin: bytes | None = None, *, url_file: str | None = None) -> None:
    """Spool one hook input; never raises.  ``url_file``: read the URL from it (a hook installed
    for a URL with a password names the file, never the password)."""
    directory = None
    try:
        deadline = int(os.environ.get("EVSTORE_HOOK_DEADLINE") or HOOK_DEADLINE)
    except ValueError:
        deadline = HOOK_DEADLINE
    alarm = _deadline(deadline)
    try:
        from eventstore import spool

        if url_file is not None:
            url = _read_url_file(url_file)  # unreadable: logged, nothing spooled for a store it did not name
        directory = spool.spool_path(url)
        data = sys.stdin.buffer.read() if stdin is None else stdin
        spool.write(directory, data)
        if any(b'"' + name + b'"' in data for name in DRAIN_ON):
            _start_drain(url, directory)
    except BaseException as exc:  # the agent must never see a failure
        _log_error(directory, exc)
    finally:
        try:
            alarm(0)
        except BaseException:
            pass


def _deadline(seconds: int) -> Callable[[int], object]:
    """Exit quietly after ``seconds`` whatever is blocking (stdin never closed, a stuck lock);
    returns ``alarm`` (``alarm(0)`` cancels).  ``_signal`` rather than ``signal``: the latter
    imports enum (~3 ms on every tool call) for the same two functions."""
    if TYPE_CHECKING:
        import signal as sig
    else:
        try:
            import _signal as sig
        except ImportError:  # not CPython
            import signal as sig
    if not hasattr(sig, "SIGALRM"):  # Windows: no alarm
        return lambda _: None
    try:
        sig.signal(sig.SIGALRM, lambda *_: os._exit(0))
        sig.alarm(seconds)
        return sig.alarm
    except BaseException:  # not the main thread (the click command in a test runner): no deadline
        return lambda _: None


def _start_drain(url: str | None, directory: str) -> None:
    """Record the spool (and the new part of the transcript) in the background, unless a drain
    runs already: a burst of ``Stop`` calls starts one drain, not one each.  The hook takes the
    drain lock itself and hands it to the drain it starts (an inherited descriptor), so no two
    hooks can both see the lock free and start one each; the running drain looks at the spool
    again before it lets the lock go (:func:`eventstore.capture.drain`), so a record spooled
    while it ran is not left waiting.  The URL goes to the drain in its environment, not its
    command line, where ``ps`` would show a password."""
    import subprocess

    from eventstore import spool

    lock = spool.drain_lock(directory)
    if lock is None:
        return
    try:
        env = dict(os.environ)
        if url:
            env["EVSTORE_URL"] = url
        env[spool.LOCK_FD_VAR] = str(lock)
        subprocess.Popen([sys.executable, "-m", "eventstore", "hook", "drain", "--quiet"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         pass_fds=(lock,), env=env)
    finally:
        os.close(lock)  # the drain holds the lock now (the same open file)


def _log_error(directory: object, exc: BaseException) -> None:
    try:
        import time

        where = str(directory) if directory is not None else os.path.join(os.path.expanduser("~"), ".evstore")
        os.makedirs(where, exist_ok=True)
        with open(os.path.join(where, "hook-errors.log"), "a", encoding="utf-8") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {type(exc).__name__}: {exc}\n")
    except BaseException:
        pass


def main() -> None:
    is_hook, url, url_file = _fast_hook_url(sys.argv[1:])
    if is_hook:
        run_hook(url or os.environ.get("EVSTORE_URL"), url_file=url_file)
        sys.stdout.flush()
        os._exit(0)
    from eventstore.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
