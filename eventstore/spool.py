"""A durable hook spool: what a Claude Code hook hands over, kept until a drain records it.

A hook fires on every tool call, so its cost lands on the agent's loop.  ``evstore hook
claude-code`` therefore only appends the hook's stdin (and, for a ``Write``/``Edit`` of a file,
that file's bytes as they were at that moment) to a spool file and returns: standard library
only, no database, no SQLAlchemy, no dialects.  ``evstore hook drain`` (and ``ingest claude`` /
``watch claude``) moves the spool into the store.

Format: one record per line, ``<base64 of a JSON header>\\t<base64 of stdin>[\\t<base64 of the
file>]\\n``, written with one ``write`` on an ``O_APPEND`` descriptor under an exclusive
``flock`` and fsynced, so records from hooks firing at once never interleave and a record either
is whole or is an unterminated tail a drain ignores.

Draining claims the spool by renaming it (``spool.jsonl`` -> ``claimed-<pid>-<ns>.jsonl``): new
hooks start a new file at once and the claimed file is deleted only after its records are in the
store.  A drain killed half-way leaves the claimed file behind; the next drain records it again,
and the records' event ids (derived from their bytes) make that a no-op for what was already
recorded.

One drain at a time per spool folder (:func:`drain_lock`, an ``flock`` that others skip rather
than wait on), whoever runs it: ``hook drain``, ``ingest``, ``watch`` or ``evstore serve`` (one
per worker process); into a PostgreSQL store also one across the machines that mount the
folder (:func:`spool_id` names an advisory lock, :mod:`eventstore.locks`).  What goes wrong
while draining is appended to ``drain-errors.log`` in the folder (:func:`log_drain_error`),
which ``evstore doctor`` shows.
"""

from __future__ import annotations

import binascii
import fcntl
import os
import time

# Standard-library modules that cost milliseconds to import (pathlib, json, hashlib, typing) are
# imported only where they are needed: the writer below runs once per tool call and imports none
# of them for a hook that names no file (``python -X importtime -m eventstore hook claude-code``).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path
    from typing import Any

SPOOL = "spool.jsonl"
#: What drains could not record (one line each), beside the spool; ``evstore doctor`` shows it.
DRAIN_ERRORS = "drain-errors.log"
#: Largest file (bytes) a Write/Edit hook copies into the spool.
MAX_FILE_BYTES = 16 * 1024 * 1024
#: Largest hook input kept whole; bigger inputs are kept truncated, with their size.
MAX_INPUT_BYTES = 16 * 1024 * 1024
#: What a hook writes after the remains of a record whose hook died mid-write, before its own.
DEAD_TAIL = b"\t!\n"
_FILE_TOOLS = (b'"Write"', b'"Edit"', b'"MultiEdit"', b'"NotebookEdit"')


def spool_path(url: str | None = None) -> str:
    """:func:`spool_dir` as a string, without importing pathlib (the hook's fast path)."""
    explicit = os.environ.get("EVSTORE_SPOOL_DIR")
    if explicit:
        return explicit
    from eventstore.config import database_url, sqlite_path

    url = database_url(url)
    path = sqlite_path(url)
    if path is not None:
        return os.path.join(os.path.dirname(os.path.abspath(os.path.expanduser(path))), "spool")
    import hashlib

    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "evstore", "spool", hashlib.sha256(url.encode()).hexdigest()[:16])


def spool_dir(url: str | None = None) -> Path:
    """Where hooks spool for the store at ``url``: beside a SQLite store's file, else per URL
    under ``$XDG_STATE_HOME/evstore`` (``EVSTORE_SPOOL_DIR`` overrides both)."""
    from pathlib import Path

    return Path(spool_path(url))


def _b64(data: bytes) -> bytes:
    return binascii.b2a_base64(data, newline=False)


def _header(fields: dict[str, Any]) -> bytes:
    """``fields`` as compact JSON; numbers alone (the common header) are written without json."""
    if all(type(v) is int or type(v) is float for v in fields.values()):
        return ("{" + ",".join(f'"{k}":{v!r}' for k, v in fields.items()) + "}").encode()
    import json

    return json.dumps(fields, separators=(",", ":")).encode()


def write(directory: str | os.PathLike[str], stdin: bytes, *, now: float | None = None) -> None:
    """Append one hook record (and, for a file-writing tool, the file's bytes) durably."""
    # ``nonce``: 128 random bits, so the record's SHA-256 (which its events' ids derive from) confirms
    # no guess of the call once the drain deleted the record and an erasure its payload.
    header: dict[str, Any] = {"received_at": time.time() if now is None else now, "pid": os.getpid(),
                              "bytes": len(stdin), "nonce": int.from_bytes(os.urandom(16), "big")}
    if len(stdin) > MAX_INPUT_BYTES:
        stdin = stdin[:MAX_INPUT_BYTES]
        header["truncated"] = True
    parts = [b"", _b64(stdin)]
    if b'"PostToolUse"' in stdin and any(t in stdin for t in _FILE_TOOLS):
        copied = _copy_written_file(stdin, header)
        if copied is not None:
            parts.append(_b64(copied))
    parts[0] = _b64(_header(header))
    record = b"\t".join(parts) + b"\n"
    directory = os.fspath(directory)
    os.makedirs(directory, mode=0o700, exist_ok=True)  # calls wait here unscrubbed: the owner only
    path = os.path.join(directory, SPOOL)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)  # read: its last byte
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
            opened = os.fstat(fd)
            if current != opened.st_ino:
                continue  # a drain claimed the file between our open and our lock: use the new one
            # A hook killed mid-write left an unterminated tail: end its line with a field no whole
            # record has (not base64), so that the tail, even one that lacks only its line end, is
            # a line drains skip, and this record a line of its own.
            if opened.st_size > 0 and os.pread(fd, 1, opened.st_size - 1) != b"\n":
                record = DEAD_TAIL + record
            view = memoryview(record)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            if opened.st_size == 0:  # a new spool file: make its directory entry durable too
                _fsync_dir(directory)
            return
        finally:
            os.close(fd)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_written_file(stdin: bytes, header: dict[str, Any]) -> bytes | None:
    """The bytes of the file a Write/Edit just wrote, as they are now (None if unreadable)."""
    import json

    try:
        payload = json.loads(stdin)
        path = payload["tool_input"]["file_path"]
        if not isinstance(path, str):
            return None
        if not os.path.isabs(path) and isinstance(payload.get("cwd"), str):
            path = os.path.join(payload["cwd"], path)
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except (ValueError, KeyError, TypeError, OSError, RecursionError):
        return None
    if len(data) > MAX_FILE_BYTES:
        header["file_skipped"] = f"larger than {MAX_FILE_BYTES} bytes"
        return None
    header["file"], header["file_bytes"] = path, len(data)
    return data


class Record:
    """One spooled hook: its header, stdin bytes and (maybe) the written file's bytes."""

    __slots__ = ("header", "stdin", "file_bytes", "digest")

    def __init__(self, header: dict[str, Any], stdin: bytes, file_bytes: bytes | None, digest: str) -> None:
        self.header, self.stdin, self.file_bytes, self.digest = header, stdin, file_bytes, digest


def claim(directory: Path) -> list[Path]:
    """Take the current spool for draining (plus claims a crashed drain left behind)."""
    from pathlib import Path

    directory = Path(directory)
    if not directory.is_dir():
        return []
    spool = directory / SPOOL
    if spool.exists():
        target = directory / f"claimed-{os.getpid()}-{time.time_ns()}.jsonl"
        fd = os.open(spool, os.O_WRONLY | os.O_APPEND)
        try:  # wait for a hook that is mid-write, then take the file away from new writers
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(spool, target)
        finally:
            os.close(fd)
        _fsync_dir(str(directory))  # the claim survives a crash: the next drain finds it
    return sorted(directory.glob("claimed-*.jsonl"), key=lambda p: p.stat().st_mtime_ns)


def read(path: Path) -> Iterator[Record]:
    """The records of a claimed spool file.  An unterminated last line (a hook killed mid-write;
    nothing it wrote was acknowledged) is skipped; a line that is not a whole record (what such a
    hook left before the next hook ended its line, damage) comes back with the header
    ``{"corrupt": True}``, and a drain stores nothing of it."""
    import hashlib

    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                return
            yield _record(line, hashlib.sha256(line).hexdigest())


def _record(line: bytes, digest: str) -> Record:
    whole = _whole(line.rstrip(b"\n").split(b"\t"))
    return Record({"corrupt": True}, line, None, digest) if whole is None else Record(*whole, digest)


def contents(record: Record) -> list[bytes]:
    """Everything a record holds, decoded: its header, stdin and file bytes; of a record that is
    not whole, each of its tab-separated fields read as base64 where it is (and as it is)."""
    if record.header.get("corrupt") is not True:
        import json

        return [json.dumps(record.header).encode(), record.stdin, record.file_bytes or b""]
    out = [record.stdin]
    for field in record.stdin.rstrip(b"\n").split(b"\t"):
        try:
            out.append(binascii.a2b_base64(field))
        except (ValueError, binascii.Error):
            pass
    return out


def remove(directory: str | os.PathLike[str], drop: Callable[[Record], bool]) -> tuple[int, bool]:
    """Take every record ``drop`` selects out of the folder's spool files — the one hooks append to
    and the claimed ones a drain left behind — by rewriting each file without them (a new file
    renamed over the old one, under the locks hooks and drains take), so an erasure leaves none of
    what it erased in the spool.  An unterminated tail (a hook killed mid-write) is tested as a
    record that is not whole.  Returns (records removed, whether the claimed files were reached:
    False when another drain holds the folder, which then records and deletes them itself)."""
    from pathlib import Path

    folder = Path(directory)
    if not folder.is_dir():
        return 0, True
    lock = drain_lock(folder)
    try:
        paths = [folder / SPOOL]
        if lock is not None:
            paths += sorted(folder.glob("claimed-*.jsonl"))
        return sum(_rewrite(p, drop) for p in paths), lock is not None
    finally:
        if lock is not None:
            os.close(lock)


def _rewrite(path: Path, drop: Callable[[Record], bool]) -> int:
    import hashlib

    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # hooks append under it; they reopen the path after a rename
        try:
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                return 0  # claimed (renamed) between our open and our lock: the drain takes it
        except FileNotFoundError:
            return 0
        with open(path, "rb") as fh:
            lines = fh.readlines()
        kept = [line for line in lines if not drop(_record(line, hashlib.sha256(line).hexdigest()))]
        removed = len(lines) - len(kept)
        if removed:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(b"".join(kept))
                while view:
                    view = view[os.write(out, view):]
                os.fsync(out)
            finally:
                os.close(out)
            os.replace(tmp, path)
            _fsync_dir(str(path.parent))
        return removed
    finally:
        os.close(fd)


def _whole(fields: list[bytes]) -> tuple[dict[str, Any], bytes, bytes | None] | None:
    """``(header, stdin, file bytes)`` of a record's fields if they are a whole record: strict
    base64, a JSON object for a header, and as many bytes as the header says were written."""
    import json

    if len(fields) not in (2, 3):
        return None
    try:
        header = json.loads(binascii.a2b_base64(fields[0], strict_mode=True))
        stdin = binascii.a2b_base64(fields[1], strict_mode=True)
        file_bytes = binascii.a2b_base64(fields[2], strict_mode=True) if len(fields) > 2 else None
    except (ValueError, binascii.Error):
        return None
    if not isinstance(header, dict):
        return None
    size = header.get("bytes")
    if type(size) is int and (len(stdin) > size or (len(stdin) < size and header.get("truncated") is not True)):
        return None
    file_size = header.get("file_bytes")
    if type(file_size) is int and (file_bytes is None or len(file_bytes) != file_size):
        return None
    return header, stdin, file_bytes


#: The environment variable by which a hook hands the drain it starts the drain lock it took (a descriptor number).
LOCK_FD_VAR = "EVSTORE_DRAIN_LOCK_FD"


def drain_lock(directory: str | os.PathLike[str]) -> int | None:
    """An exclusive, non-blocking lock for one drain at a time (None: another drain runs).
    The first call in a process started with :data:`LOCK_FD_VAR` takes over the lock the hook
    that started it holds on this folder."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, "drain.lock")
    inherited = _inherited_lock(path)
    if inherited is not None:
        return inherited
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _inherited_lock(path: str) -> int | None:
    """The lock descriptor :data:`LOCK_FD_VAR` names, if it is open on ``path`` (taken once)."""
    value = os.environ.pop(LOCK_FD_VAR, None)
    if value is None:
        return None
    try:
        fd = int(value)
        mine, there = os.fstat(fd), os.stat(path)
    except (ValueError, OSError):
        return None
    if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
        return None
    try:  # the same open file holds the lock already: this succeeds at once
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return None
    return fd


#: Beside the spool: a random name for the folder, the same for every machine that mounts it.
SPOOL_ID = "spool-id"


def spool_id(directory: str | os.PathLike[str]) -> str:
    """The folder's identity (made on first use): what names its drain's lock in a PostgreSQL store
    (:mod:`eventstore.locks`), so that the drains of one folder, wherever it is mounted, run one
    at a time, and those of different folders (one per machine) do not wait for each other."""
    path = os.path.join(directory, SPOOL_ID)
    try:
        with open(path, encoding="ascii") as fh:
            value = fh.read().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    import secrets

    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(secrets.token_hex(16) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)  # the first to link wins; the others read its id
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    with open(path, encoding="ascii") as fh:
        return fh.read().strip()


def pending(directory: str | os.PathLike[str]) -> bool:
    """Whether the folder holds anything to drain: spooled records, or claims a drain left."""
    if waiting(directory):
        return True
    try:
        return any(name.startswith("claimed-") for name in os.listdir(directory))
    except OSError:
        return False


def waiting(directory: str | os.PathLike[str]) -> bool:
    """Whether the folder holds spooled records no drain has claimed yet."""
    try:
        return os.stat(os.path.join(directory, SPOOL)).st_size > 0
    except OSError:
        return False


#: Beside the spool: the UTC time of the last drain that ended without an error stopping it.
DRAIN_OK = "drain-ok"


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def mark_drained(directory: str | os.PathLike[str]) -> None:
    """Note that a drain of the folder ran to its end (``evstore doctor`` compares it with the last error)."""
    tmp = os.path.join(directory, f"{DRAIN_OK}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(_stamp() + "\n")
    os.replace(tmp, os.path.join(directory, DRAIN_OK))


def last_drained(directory: str | os.PathLike[str]) -> str | None:
    """The UTC time (ISO 8601) of the last drain that ran to its end, if any."""
    try:
        with open(os.path.join(directory, DRAIN_OK), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


#: Beside the spool: what a hook could not do (eventstore.entry), one line each; ``evstore doctor`` shows it.
HOOK_ERRORS = "hook-errors.log"


def log_drain_error(directory: str | os.PathLike[str], message: str, *, streams: Iterable[str] = (),
                    event: str | None = None) -> None:
    """Append one line to the folder's ``drain-errors.log`` (UTC time, pid, ``message``, and the
    ``[stream S]`` each record concerned would have been recorded in and its ``[event ID]``, so an
    erasure of the stream or the event finds its lines: :func:`scrub_logs`)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    line = " ".join(message.split())  # one line per error, whatever the message holds
    tags = "".join(f" [stream {' '.join(s.split())}]" for s in sorted(streams))
    tags += f" [event {event}]" if event else ""
    stamp = _stamp()
    path = os.path.join(directory, DRAIN_ERRORS)
    data = f"{stamp} pid {os.getpid()}: {line}{tags}\n".encode()
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # scrub_logs rewrites the file under it
            try:
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    continue  # rewritten between our open and our lock: append to the new file
            except FileNotFoundError:
                continue
            os.write(fd, data)
            return
        finally:
            os.close(fd)


def scrub_logs(directory: str | os.PathLike[str], drop: Callable[[str], bool]) -> int:
    """Take every line ``drop`` selects out of the folder's ``drain-errors.log`` and
    ``hook-errors.log`` (an error may quote what it could not record), each rewritten to a new file
    renamed over the old one under the lock appends take.  Returns how many lines went."""
    removed = 0
    for name in (DRAIN_ERRORS, HOOK_ERRORS):
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with open(path, "rb") as fh:
                lines = fh.readlines()
            kept = [x for x in lines if not drop(x.decode("utf-8", "replace"))]
            if len(kept) == len(lines):
                continue
            removed += len(lines) - len(kept)
            tmp = f"{path}.{os.getpid()}.tmp"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(out, b"".join(kept))
                os.fsync(out)
            finally:
                os.close(out)
            os.replace(tmp, path)
            _fsync_dir(os.fspath(directory))
        finally:
            os.close(fd)
    return removed
