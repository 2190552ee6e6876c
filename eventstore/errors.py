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


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver error, SQLAlchemy's wrapper of one, or an OSError) means "no space":
    SQLite's SQLITE_FULL, PostgreSQL's disk_full (SQLSTATE 53100) or ENOSPC.

    53100 is the only disk code of PostgreSQL's class 53: the server reports a write that fails with
    ENOSPC (a table, an index, a temporary file) as 53100 (``errcode_for_file_access``).  The others
    are not about disk space and would be misreported by "free space and retry": 53000 is too many
    open files, 53200 out of memory, 53300 too many connections, 53400 a configured limit (such as
    ``temp_file_limit``)."""
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
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False

