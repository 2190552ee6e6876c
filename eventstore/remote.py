"""A machine sends what it records to a team's ``evstore serve``: the local store is the spool.

    >>> set_remote("https://evstore.example.com", Path("~/.evstore-token"))  # `evstore remote set`
    >>> push(store)  # `evstore push`: every local event not sent yet, in position order
    PushResult(sent=12, batches=3, duplicates=0, backlog=0, error=None)

Everything this machine records (``evstore hook claude-code`` through its drain, ``ingest``,
``watch``, ``append``) goes into its local store first, exactly as without a server: a hook stays
as fast and as silent as today, and nothing depends on the network.  The sender then replays the
local log to the server in position order, one batch per run of consecutive events of a stream,
through ``POST /api/streams/{stream}/events`` with each event's own ``event_id``, ``occurred_at``,
meta (with its capture-once ``source.id``) and the blobs it names.  What the server confirmed moves
a cursor (``remote-cursor`` beside the hook spool, written atomically after each batch).

Delivery is at least once and recording exactly once: a batch the server recorded but whose
answer was lost (server killed, sender killed mid-batch) is sent again and answered ``200
duplicate`` (the event ids), so the cursor moves on and nothing is recorded twice.  A refused
batch (token revoked, a conflict) is never dropped: the cursor stays before it, the error is kept
in ``remote-status.json`` (``evstore doctor``), and the next push starts from it.

Stream names across machines: each batch is sent with the version the stream had before it on this
machine as ``expected_version``, so a stream belongs to the one machine that sends it.  If another
machine already wrote a stream of that name, the server answers 409 and the batch waits with that
error (never interleaved silently).  Claude Code session ids are unique; name state-file streams
with a machine or user prefix (``ingest --stream alice/TASK``) when several machines ingest the
same task.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eventstore.errors import EvstoreError
from eventstore.store import EventStore, RecordedEvent

CURSOR = "remote-cursor"
STATUS = "remote-status.json"
LOCK = "remote.lock"
MACHINE_HEADER = "X-Evstore-Machine"
BATCH = 500  # events per request at most


@dataclass(frozen=True)
class Remote:
    url: str
    token: str
    machine: str


@dataclass(frozen=True)
class PushResult:
    sent: int  # events the server recorded now
    batches: int
    duplicates: int  # batches the server had recorded already (a retry)
    backlog: int  # local events still to send
    error: str | None  # why the push stopped (the batch is kept), or None
    skipped: bool = False  # another sender holds the lock


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "evstore" / "remote.json"


def set_remote(url: str, token_file: Path, machine: str | None = None) -> Path:
    """Point this machine at a team server (``evstore remote set``); the token stays in its file."""
    import urllib.parse

    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise EvstoreError(f'The remote "{url}" is not an http(s) URL; give e.g. https://evstore.example.com.')
    _read_token(token_file)  # readable and strong enough now, not at the first push
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url.rstrip("/"), "token_file": str(token_file.expanduser().resolve()),
                               "machine": machine}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _read_token(path: Path) -> str:
    from eventstore.errors import EvstoreError as Error

    try:
        token = path.expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise Error(f"Cannot read the remote's token file {path}: {exc} — give a file holding the token "
                    "`evstore tokens add` printed.") from exc
    if not token:
        raise Error(f"The remote's token file {path} is empty — put the token on its first line.")
    return token


def configured() -> Remote | None:
    """The team server this machine sends to (EVSTORE_REMOTE / EVSTORE_REMOTE_TOKEN_FILE, else the
    file ``evstore remote set`` wrote), or None."""
    url, token_file = os.environ.get("EVSTORE_REMOTE"), os.environ.get("EVSTORE_REMOTE_TOKEN_FILE")
    machine = os.environ.get("EVSTORE_MACHINE")
    if not url:
        try:
            saved = json.loads(config_path().read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise EvstoreError(f"Cannot read {config_path()}: {exc} — run `evstore remote set URL --token-file "
                               "FILE` again.") from exc
        url, token_file = saved.get("url"), token_file or saved.get("token_file")
        machine = machine or saved.get("machine")
    if not url:
        return None
    if not token_file:
        raise EvstoreError("EVSTORE_REMOTE is set without EVSTORE_REMOTE_TOKEN_FILE — set it to the file holding "
                           "this machine's token.")
    return Remote(url.rstrip("/"), _read_token(Path(token_file)), machine or socket.gethostname())


def state_dir(store: EventStore) -> Path:
    from eventstore import spool

    return Path(spool.spool_path(store.url))


def cursor(store: EventStore) -> int:
    try:
        return int((state_dir(store) / CURSOR).read_text(encoding="ascii").strip() or 0)
    except FileNotFoundError:
        return 0


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def status(store: EventStore) -> dict[str, Any]:
    """What ``evstore doctor`` shows: backlog, the oldest waiting event, the last error."""
    try:
        saved = json.loads((state_dir(store) / STATUS).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        saved = {}
    after = cursor(store)
    oldest = next(iter(store.read_all(after_position=after, limit=1)), None)
    return {"cursor": after, "backlog": max(0, store.max_position() - after),
            "oldest_waiting": None if oldest is None else {"position": oldest.position, "stream": oldest.stream_id,
                                                           "recorded_at": oldest.recorded_at},
            "last_error": saved.get("last_error"), "last_error_at": saved.get("last_error_at"),
            "last_push_at": saved.get("last_push_at")}


def _note(store: EventStore, error: str | None) -> None:
    path = state_dir(store) / STATUS
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        saved = {}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if error is None:
        saved.update(last_push_at=now, last_error=None, last_error_at=None)
    else:
        saved.update(last_error=error, last_error_at=now)
    _write(path, json.dumps(saved) + "\n")


def _batches(store: EventStore, after: int) -> Any:
    """Runs of consecutive local events of one stream (at most BATCH), in position order."""
    batch: list[RecordedEvent] = []
    for rec in store.iter_all(after_position=after):
        if batch and (rec.stream_id != batch[0].stream_id or len(batch) >= BATCH):
            yield batch
            batch = []
        batch.append(rec)
    if batch:
        yield batch


def _body(store: EventStore, batch: list[RecordedEvent]) -> bytes:
    events, blobs = [], {}
    for rec in batch:
        meta = json.loads(rec.meta)
        meta.pop("sent_by", None)  # the server's word, never a machine's
        item: dict[str, Any] = {"type": rec.type, "data": json.loads(rec.data), "meta": meta,
                                "event_id": rec.event_id, "schema_version": rec.schema_version}
        if rec.occurred_at is not None:
            item["occurred_at"] = rec.occurred_at
        for digest in meta.get("blobs") or ():
            if isinstance(digest, str) and digest not in blobs:
                blobs[digest] = base64.b64encode(store.read_blob(digest)).decode("ascii")
        events.append(item)
    first = batch[0].version - 1
    body: dict[str, Any] = {"events": events, "expected_version": first if first > 0 else "no-stream"}
    if blobs:
        body["blobs"] = blobs
    head = store.stream_head(batch[0].stream_id)
    if head is not None and head.dialect:
        body["dialect"] = head.dialect  # the server's pages fold the stream as this machine does
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


class _Refused(Exception):
    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def _send(remote: Remote, stream: str, body: bytes, timeout: float) -> dict[str, Any]:
    # Imported here: a command that records with no remote set never pays for urllib.request.
    import urllib.error
    import urllib.parse
    import urllib.request

    url = f"{remote.url}/api/streams/{urllib.parse.quote(stream, safe='')}/events"
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": f"Bearer {remote.token}", "Content-Type": "application/json",
        MACHINE_HEADER: remote.machine})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:  # noqa: S310 - http(s) checked in set_remote
            return dict(json.loads(answer.read()))
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", "")
        except (ValueError, OSError, AttributeError):
            message = ""
        raise _Refused(f"{remote.url} answered {exc.code} for stream {stream}: {message or exc.reason}",
                       retry=exc.code >= 500 or exc.code == 429) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Refused(f"cannot reach {remote.url}: {reason}", retry=True) from None


#: Retries of a batch the server could not take, and the first one's delay (seconds), doubled at each
#: next: 0.1, 0.2, 0.4, ... 3.2 s, 6.3 s in all.  Short at first because a restarting server listens
#: again within a fraction of a second (connections then wait in its backlog, ``evstore serve``) and
#: answers within about one: a first retry after half a second made every push across a restart wait
#: that long at least.
RETRIES = 6
BACKOFF = 0.1


def retry_delay(attempt: int, backoff: float = BACKOFF) -> float:
    """Seconds to wait before retry ``attempt + 1`` of a batch (attempt 0: the first retry)."""
    return backoff * 2.0 ** attempt


def push(store: EventStore, remote: Remote | None = None, *, retries: int = RETRIES, timeout: float = 10.0,
         backoff: float = BACKOFF) -> PushResult:
    """Send every local event after the cursor, in order; a failure that may pass (the server down or
    restarting, a 5xx) is retried ``retries`` times with exponential backoff (:func:`retry_delay`), then
    the push stops with the batch kept.  One sender per store at a time (an ``flock``; another running:
    ``skipped``)."""
    remote = remote or configured()
    if remote is None:
        raise EvstoreError("No remote is set — run `evstore remote set URL --token-file FILE` (or set "
                           "EVSTORE_REMOTE and EVSTORE_REMOTE_TOKEN_FILE).")
    folder = state_dir(store)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return PushResult(0, 0, 0, max(0, store.max_position() - cursor(store)), None, skipped=True)
        sent = batches = duplicates = 0
        error = None
        for batch in _batches(store, cursor(store)):
            body = _body(store, batch)
            for attempt in range(retries + 1):
                try:
                    answer = _send(remote, batch[0].stream_id, body, timeout)
                    break
                except _Refused as exc:
                    if not exc.retry or attempt == retries:
                        error = str(exc)
                        break
                    time.sleep(retry_delay(attempt, backoff))
            if error is not None:
                break
            batches += 1
            if answer.get("duplicate"):
                duplicates += 1
            else:
                sent += len(batch)
            _write(folder / CURSOR, f"{batch[-1].position}\n")
        _note(store, error)
        return PushResult(sent, batches, duplicates, max(0, store.max_position() - cursor(store)), error)
    finally:
        os.close(fd)


def send_if_set(store: EventStore, *, timeout: float = 5.0) -> PushResult | None:
    """After a command recorded something: one push attempt when a remote is set (None: none is);
    what fails stays in the backlog with its error (``evstore doctor``), for the next push."""
    try:
        found = configured()
    except EvstoreError as exc:
        _note(store, str(exc))
        return PushResult(0, 0, 0, max(0, store.max_position() - cursor(store)), str(exc))
    if found is None:
        return None
    return push(store, found, retries=0, timeout=timeout)


def note_line(result: PushResult | None) -> str | None:
    """A stderr line for a command's push that left a backlog, or None."""
    if result is None or (result.error is None and not result.backlog) or result.skipped:
        return None
    why = f": {result.error}" if result.error else ""
    return (f"note: {result.backlog} event(s) wait to be sent to the team server{why} (kept; `evstore push` "
            "sends them, `evstore doctor` shows the backlog)")


__all__ = ["PushResult", "Remote", "configured", "cursor", "note_line", "push", "send_if_set", "set_remote", "status"]
