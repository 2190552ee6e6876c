"""Group commit for ``POST /api/streams/{id}/events``: the appends that arrive while one commits go
to the store together, in one transaction (:meth:`eventstore.store.EventStore.append_group`).

    >>> committer = Committer(store)
    >>> result = await asyncio.wrap_future(committer.submit(item, token_digest))  # AppendResult, or raises

On PostgreSQL every append of every worker takes the one append lock and waits for its commit's
fsync: appended one request at a time, a worker spends most of a request in round trips made while
others wait for that lock.  One thread per worker takes whatever requests are queued (up to
:data:`MAX_GROUP`) and appends them in one transaction: one lock, one commit, the Merkle tree's nodes
and the runs index once, the group's streams and recorded ids read together and its events written
in one statement (:meth:`~eventstore.store.EventStore.append_group`: about a dozen statements a group,
whatever its size).  Each request still succeeds or fails alone (a conflict or a duplicate id answers
that request only), in arrival order.

Tokens: a request whose named token this worker has seen valid before is not looked up before its
body is read (:meth:`WriteGrants.cached`); instead, every named token of a group is read again inside
the group's transaction, once the append lock is held, and a request whose token is revoked or
expired by then is refused (403) with nothing written.  A revocation therefore holds for every
append that commits after it, on every worker, as it did when each request read its token first.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from eventstore import tokens
from eventstore.store import AppendResult, EventStore, GroupAppend
from projections.serve.access import Grant, HTTPError

#: Requests appended in one transaction at most (when the database fails the one-pass way, each holds a
#: savepoint: PostgreSQL keeps up to 64 subtransactions of a transaction in shared memory, beyond which
#: readers slow down).
MAX_GROUP = 48


class WriteGrants:
    """The named tokens this worker has found valid, by digest: a hint that lets an append read its
    body before its token is checked; never an authorization (the group's transaction decides)."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._known: dict[bytes, Grant] = {}
        self._lock = threading.Lock()

    def cached(self, secret: str) -> tuple[Grant, bytes] | None:
        key = tokens.digest(secret)
        with self._lock:
            grant = self._known.get(key)
        return None if grant is None else (grant, key)

    def remember(self, secret: str, grant: Grant) -> None:
        if "write" not in grant.scopes:
            return
        with self._lock:
            if len(self._known) >= self.LIMIT:
                self._known.clear()
            self._known[tokens.digest(secret)] = grant

    def forget(self, key: bytes) -> None:
        with self._lock:
            self._known.pop(key, None)


@dataclass
class _Pending:
    item: GroupAppend
    token: bytes | None  # the digest of the named token to check in the transaction (None: the server's own)
    future: Future[AppendResult]


class Committer:
    """One thread appending the queued requests in groups (see the module's docstring)."""

    def __init__(self, store: EventStore, grants: WriteGrants) -> None:
        self.store, self.grants = store, grants
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="evstore-commit", daemon=True)
        self._thread.start()

    def submit(self, item: GroupAppend, token: bytes | None) -> Future[AppendResult]:
        future: Future[AppendResult] = Future()
        self._queue.put(_Pending(item, token, future))
        return future

    def close(self) -> None:
        """Finish what is queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < MAX_GROUP:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                group.append(more)
            group = [p for p in group if p.future.set_running_or_notify_cancel()]  # a client gone: skipped
            if group:
                self._commit(group)

    def _commit(self, group: list[_Pending]) -> None:
        def refused(cur: Any) -> dict[int, Exception]:
            keys = [p.token for p in group if p.token is not None]
            if not keys:
                return {}
            found = tokens.tokens_in_transaction(self.store, cur, keys)
            out: dict[int, Exception] = {}
            for index, p in enumerate(group):
                if p.token is None:
                    continue
                token = found.get(p.token)
                problem = "the token is not valid for this server" if token is None else token.problem()
                if problem is None and "write" not in tokens.ACCESS[token.scope]:  # type: ignore[union-attr]
                    problem = f"the {token.name} may not write"  # type: ignore[union-attr]
                if problem is not None:
                    self.grants.forget(p.token)
                    out[index] = HTTPError(403, f"{problem}; ask an admin for a new one (`evstore tokens add`).")
            return out

        try:
            results = self.store.append_group([p.item for p in group], before=refused)
        except BaseException as exc:  # noqa: BLE001 - the transaction as a whole failed: every request of it
            for p in group:  # (the thread goes on: a request queued later must still be answered)
                p.future.set_exception(exc)
            return
        for p, result in zip(group, results, strict=True):
            if isinstance(result, Exception):
                p.future.set_exception(result)
            else:
                p.future.set_result(result)


__all__ = ["MAX_GROUP", "Committer", "WriteGrants"]
