"""One error tree.  Messages name the object and the next action."""

from __future__ import annotations


class EvstoreError(Exception):
    """Base of every error evstore raises on purpose (CLI: ``Error: ...``, exit 1)."""

    #: Raised by :meth:`EventStore.append_many`: the 0-based index of the item it is about
    #: (callers that read items from a file name the line with it).
    item: int | None = None


class ConcurrencyError(EvstoreError):
    """A stream was not at the expected version."""

    def __init__(self, stream_id: str, expected: object, actual: int) -> None:
        self.stream_id, self.expected, self.actual = stream_id, expected, actual
        super().__init__(
            f'Stream "{stream_id}" is at version {actual}, expected {expected}; re-read and retry.'
        )


class StreamNotFound(EvstoreError):
    pass


class SchemaOutOfDate(EvstoreError):
    pass


class UnknownEventType(EvstoreError):
    pass


class InvalidEvent(EvstoreError):
    """User input (event data, meta, a snapshot) is not acceptable; the message says where."""


class JSONSyntaxError(InvalidEvent):
    """Input is not valid JSON (or not UTF-8); ``line`` and ``column`` (1-based) say where."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.line, self.column = line, column


class DuplicateEventId(EvstoreError):
    """The same event_id was appended before with different content."""


class IntegrityViolation(EvstoreError):
    """Stored history does not verify (hash chain, seal)."""


class IngestError(EvstoreError):
    """A snapshot could not be ingested; nothing was written."""


class SourceConflict(IngestError):
    """A capture's earlier versions differ from what its stream recorded of the same source
    (history rewritten, a version changed in the middle); nothing was written."""


class LensError(EvstoreError):
    """A dialect's lens broke its law: its events do not rebuild the snapshot they were derived from."""


class DatabaseError(EvstoreError):
    """The database driver failed a statement of the recorder (the driver's error is the cause)."""


class StorageFull(EvstoreError):
    """The database (or the disk under it) has no space left; the write was rolled back."""


#: An I/O error on a disk with less than this much free space is reported as a full disk.
NEARLY_FULL_BYTES = 1024 * 1024


def free_bytes(path: object) -> int | None:
    """Bytes free to an unprivileged writer on the filesystem holding ``path`` (a file that may
    not exist: its nearest existing folder is asked), None if that cannot be told."""
    import os

    where = os.path.abspath(os.fspath(path))  # type: ignore[call-overload]
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    try:
        st = os.statvfs(where)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return None
    return st.f_bavail * st.f_frsize


def is_disk_full(exc: BaseException, path: object = None) -> bool:
    """Whether ``exc`` (a driver error, SQLAlchemy's wrapper of one, or an OSError) means "no space":
    SQLite's SQLITE_FULL, PostgreSQL's disk_full (SQLSTATE 53100) or ENOSPC.

    53100 is the only disk code of PostgreSQL's class 53: the server reports a write that fails with
    ENOSPC (a table, an index, a temporary file) as 53100 (``errcode_for_file_access``).  The others
    are not about disk space and would be misreported by "free space and retry": 53000 is too many
    open files, 53200 out of memory, 53300 too many connections, 53400 a configured limit (such as
    ``temp_file_limit``).

    SQLite on a disk with no byte left often fails before it gets to SQLITE_FULL: creating the
    WAL index or writing the WAL gives SQLITE_IOERR ("disk I/O error").  Given ``path`` (the
    store's file), an I/O error counts as "no space" when the disk under it has less than
    :data:`NEARLY_FULL_BYTES` free."""
    import errno

    seen: BaseException | None = exc
    for _ in range(4):  # the error, what SQLAlchemy wrapped (.orig), what it was raised from
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        code = getattr(seen, "sqlite_errorcode", None)
        if (isinstance(code, int) and code & 0xFF == 13) or getattr(seen, "sqlstate", None) == "53100":
            return True
        if isinstance(code, int) and code & 0xFF == 10 and path is not None:  # SQLITE_IOERR
            free = free_bytes(path)
            return free is not None and free < NEARLY_FULL_BYTES
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False

class StoreDamaged(DatabaseError):
    """The database file is not a readable SQLite database any more (header overwritten, truncated,
    a damaged page)."""


#: SQLite's primary result codes that mean the file itself is damaged: SQLITE_CORRUPT, SQLITE_NOTADB.
_DAMAGED_CODES = (11, 26)


def is_damaged(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver error, SQLAlchemy's wrapper of one) says the SQLite file is damaged:
    SQLITE_CORRUPT ("database disk image is malformed") or SQLITE_NOTADB ("file is not a database")."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, StoreDamaged):
            return True
        code = getattr(seen, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in _DAMAGED_CODES:
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


def _reason(exc: BaseException) -> str:
    """The driver's own first line (not SQLAlchemy's wrapper with the statement)."""
    return (str(getattr(exc, "orig", None) or exc).strip() or type(exc).__name__).splitlines()[0]


def damaged_message(path: object, reason: str) -> str:
    """What to say when the store file at ``path`` is damaged, and what to do."""
    return (f"the store file is damaged ({path}: {reason}). Restore it from a backup, or move it aside and run "
            f"`evstore init` for a new store (`sqlite3 {path} .recover` may save what is still readable).")


def full_message(path: object, reason: str) -> str:
    """What to say when the disk under the store is full."""
    where = f"the disk holding {path}" if path is not None else "the database server's disk"
    return f"disk full: no space left on {where} ({reason}); free space and retry."


def database_failure(exc: BaseException, path: object = None) -> EvstoreError | None:
    """``exc`` as evstore's own error when it is a damaged file (:class:`StoreDamaged`) or a full
    disk (:class:`StorageFull`), else None.  ``path``: the store's file, to name in the message."""
    if is_disk_full(exc, path):
        return StorageFull(full_message(path, _reason(exc)))
    if is_damaged(exc):
        return StoreDamaged(damaged_message(path, _reason(exc)))
    return None


class ProofError(IntegrityViolation):
    """A Merkle proof, checkpoint, signed note or cosignature does not verify, or is malformed; the
    message says which part and why."""


class WitnessError(EvstoreError):
    """A tlog witness refused a checkpoint (or could not be reached): ``status`` is its HTTP status
    (None: no answer), ``latest_size`` the size it last cosigned when it answered 409."""

    def __init__(self, message: str, *, url: str, status: int | None = None, body: str = "",
                 latest_size: int | None = None) -> None:
        super().__init__(message)
        self.url, self.status, self.body, self.latest_size = url, status, body, latest_size


class ContentErased(EvstoreError):
    """The payload of an event was purged (retention policy) or erased (a request): its header,
    digests and chain hash remain, its content does not (eventstore/erasure.py)."""


class HoldInForce(EvstoreError):
    """A legal hold covers what a purge or an erasure would remove."""
