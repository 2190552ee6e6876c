"""``evstore serve``'s group commit (projections/serve/grouping.py) as promises: every request is
answered alone, in the order it arrived; a named token is checked again in the transaction that would
write for it, so a token revoked, expired or unknown by then writes nothing; the tokens a worker
remembers are a hint for exactly those tokens, never an authorization.  In-process, so mutation runs
see them."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from typing import Any

import pytest
from conftest import migrated

from eventstore import tokens
from eventstore.errors import ConcurrencyError
from eventstore.store import AppendResult, EventStore, GroupAppend, NewEvent
from projections.serve.access import Grant, HTTPError
from projections.serve.grouping import MAX_GROUP, Committer, WriteGrants


@pytest.fixture
def url(store_url: str) -> str:
    return migrated(store_url)


@pytest.fixture
def surl(sqlite_url: str) -> str:
    return migrated(sqlite_url)


ADVICE = "; ask an admin for a new one (`evstore tokens add`)."


def item(stream: str, n: int = 1, **kw: Any) -> GroupAppend:
    return GroupAppend.of(stream, [NewEvent("t.noted", {"n": n})], **kw)


def answer(future: Future[AppendResult]) -> AppendResult | BaseException:
    try:
        return future.result(timeout=60)
    except BaseException as exc:  # noqa: BLE001 - the request's answer is the exception
        return exc


# -- WriteGrants: a hint for exactly the tokens seen valid for writing --------------------------------


def test_a_remembered_grant_is_found_only_by_exactly_its_token() -> None:
    grants = WriteGrants()
    secret = "Tok3n-" + "a" * 40
    grant = Grant("ci", "", tokens.ACCESS["append"])
    assert grants.cached(secret) is None
    grants.remember(secret, grant)
    assert grants.cached(secret) == (grant, tokens.digest(secret))
    for other in (secret[:-1], secret + "a", "x" + secret, secret.upper(), secret.lower(), secret + "\n", ""):
        assert grants.cached(other) is None, other


def test_only_a_grant_that_may_write_is_remembered() -> None:
    grants = WriteGrants()
    grants.remember("reader-secret", Grant("r", "", tokens.ACCESS["read"]))
    grants.remember("admin-secret", Grant("a", "", tokens.ACCESS["admin"]))
    grants.remember("append-secret", Grant("w", "", tokens.ACCESS["append"]))
    assert grants.cached("reader-secret") is None
    assert grants.cached("admin-secret") is not None and grants.cached("append-secret") is not None


def test_forgetting_a_token_forgets_that_one_only() -> None:
    grants = WriteGrants()
    a, b = Grant("a", "", tokens.ACCESS["append"]), Grant("b", "", tokens.ACCESS["append"])
    grants.remember("secret-a", a)
    grants.remember("secret-b", b)
    grants.forget(tokens.digest("secret-a"))
    grants.forget(tokens.digest("never-remembered"))  # no error
    assert grants.cached("secret-a") is None and grants.cached("secret-b") == (b, tokens.digest("secret-b"))


def test_a_worker_remembers_at_most_limit_tokens_and_always_the_latest() -> None:
    grants = WriteGrants()
    grant = Grant("w", "", tokens.ACCESS["append"])
    secrets_ = [f"secret-{i}" for i in range(WriteGrants.LIMIT + 1)]
    for s in secrets_[:-1]:
        grants.remember(s, grant)
    assert all(grants.cached(s) is not None for s in secrets_[:-1])  # exactly LIMIT: all kept
    grants.remember(secrets_[-1], grant)
    assert grants.cached(secrets_[-1]) is not None
    assert sum(grants.cached(s) is not None for s in secrets_) <= WriteGrants.LIMIT


# -- Committer: each request answered alone, in order; tokens checked at the commit --------------------


def test_each_request_is_answered_with_its_own_result_in_arrival_order(url: str) -> None:
    with EventStore(url) as store:
        store.append("a", [NewEvent("t.noted", {"n": 0})])
        committer = Committer(store, WriteGrants())
        try:
            futures = [
                committer.submit(item("b", 1, expected_version="no stream"), None),
                committer.submit(item("a", 2, expected_version=5), None),  # a conflict: a is at 1
                committer.submit(item("b", 3, expected_version=1), None),
            ]
            out = [answer(f) for f in futures]
        finally:
            committer.close()
        assert isinstance(out[0], AppendResult) and (out[0].stream_id, out[0].version) == ("b", 1)
        assert isinstance(out[1], ConcurrencyError)
        assert isinstance(out[2], AppendResult) and (out[2].stream_id, out[2].version) == ("b", 2)
        assert out[0].positions[0] < out[2].positions[0]
        assert [(e.stream_id, json.loads(e.data)["n"]) for e in store.read_stream("b")] == [("b", 1), ("b", 3)]
        assert store.stream_version("a") == 1


def _held(store: EventStore) -> tuple[threading.Event, threading.Event, list[int]]:
    """Make the store's next group commit wait (in its ``before`` check) until released; record each
    group's size."""
    entered, release, sizes = threading.Event(), threading.Event(), []
    real = store.append_group

    def append_group(items: Any, *, before: Any = None) -> Any:
        sizes.append(len(items))
        if len(sizes) == 1:
            entered.set()
            assert release.wait(60)
        return real(items, before=before)

    store.append_group = append_group  # type: ignore[method-assign]
    return entered, release, sizes


def test_the_requests_queued_during_a_commit_go_together_at_most_max_group_at_a_time(surl: str) -> None:
    with EventStore(surl) as store:
        entered, release, sizes = _held(store)
        committer = Committer(store, WriteGrants())
        try:
            first = committer.submit(item("s", 0), None)
            assert entered.wait(60)
            queued = [committer.submit(item("s", n), None) for n in range(1, 2 * MAX_GROUP + 4)]
            release.set()
            out = [answer(f) for f in [first, *queued]]
        finally:
            committer.close()
        assert sizes == [1, MAX_GROUP, MAX_GROUP, 3]
        assert [r.version for r in out] == list(range(1, 2 * MAX_GROUP + 5))  # type: ignore[union-attr]
        assert [json.loads(e.data)["n"] for e in store.read_stream("s")] == list(range(2 * MAX_GROUP + 4))


def test_a_request_whose_client_is_gone_before_its_group_commits_writes_nothing(surl: str) -> None:
    with EventStore(surl) as store:
        entered, release, _ = _held(store)
        committer = Committer(store, WriteGrants())
        try:
            first = committer.submit(item("s", 0), None)
            assert entered.wait(60)
            gone, kept = committer.submit(item("gone"), None), committer.submit(item("s", 1), None)
            assert gone.cancel()
            release.set()
            assert isinstance(answer(kept), AppendResult) and isinstance(answer(first), AppendResult)
        finally:
            committer.close()
        assert store.stream_info("gone") is None and store.stream_version("s") == 2


def test_close_answers_every_queued_request_then_stops(surl: str) -> None:
    with EventStore(surl) as store:
        entered, release, _ = _held(store)
        committer = Committer(store, WriteGrants())
        first = committer.submit(item("s", 0), None)
        assert entered.wait(60)
        queued = [committer.submit(item("s", n), None) for n in range(1, 5)]
        closing = threading.Thread(target=committer.close)
        closing.start()
        release.set()
        closing.join(60)
        assert not closing.is_alive() and not committer._thread.is_alive()
        assert all(f.done() and isinstance(f.result(), AppendResult) for f in [first, *queued])
        assert store.stream_version("s") == 5


def test_a_failed_transaction_answers_each_of_its_requests_and_later_ones_are_still_served(surl: str) -> None:
    with EventStore(surl) as store:
        real, broken = store.append_group, RuntimeError("the database went away")
        calls: list[int] = []

        def append_group(items: Any, *, before: Any = None) -> Any:
            calls.append(len(items))
            if len(calls) == 1:
                raise broken
            return real(items, before=before)

        store.append_group = append_group  # type: ignore[method-assign]
        committer = Committer(store, WriteGrants())
        try:
            assert answer(committer.submit(item("s", 0), None)) is broken
            later = answer(committer.submit(item("s", 1), None))
        finally:
            committer.close()
        assert isinstance(later, AppendResult) and later.version == 1
        assert [json.loads(e.data)["n"] for e in store.read_stream("s")] == [1]


def test_a_named_token_is_checked_in_the_transaction_that_would_write_for_it(url: str) -> None:
    """The server's own token (no digest) is not looked up; a named token writes only if, inside the
    group's transaction, it is a stored token that is neither revoked nor expired and may write.  Each
    refusal is a 403 naming why, writes nothing, is forgotten by the worker, and leaves the group's
    other requests to commit."""
    with EventStore(url) as store:
        ok, revoked, reader = (
            tokens.add_token(store, n, s) for n, s in (("ok", "append"), ("gone", "append"), ("reader", "read"))
        )
        expired = tokens.add_token(store, "old", "admin", expires="2020-01-01T00:00:00.000000Z")
        tokens.revoke_token(store, "gone")
        grants = WriteGrants()
        for s in (ok, revoked, reader, expired, "unknown-secret"):
            grants._known[tokens.digest(s)] = Grant("?", "", frozenset({"write"}))  # as if seen valid before
        committer = Committer(store, grants)
        try:
            asked = [
                ("own", None),
                ("ok", ok),
                ("gone", revoked),
                ("reader", reader),
                ("old", expired),
                ("unknown", "unknown-secret"),
            ]
            futures = [
                committer.submit(item(f"s-{name}"), None if s is None else tokens.digest(s)) for name, s in asked
            ]
            out = dict(zip([n for n, _ in asked], [answer(f) for f in futures], strict=True))
        finally:
            committer.close()
        assert isinstance(out["own"], AppendResult) and isinstance(out["ok"], AppendResult)
        expected = {
            "gone": 'the token "gone" was revoked at ',
            "reader": "the reader may not write",
            "old": 'the token "old" expired at 2020-01-01T00:00:00Z',
            "unknown": "the token is not valid for this server",
        }
        for name, start in expected.items():
            err = out[name]
            assert isinstance(err, HTTPError) and err.status == 403, (name, err)
            assert str(err).startswith(start) and str(err).endswith(ADVICE), (name, str(err))
            assert store.stream_info(f"s-{name}") is None
        assert store.stream_version("s-own") == store.stream_version("s-ok") == 1
        assert grants.cached(ok) is not None
        for s in (revoked, reader, expired, "unknown-secret"):
            assert grants.cached(s) is None


@pytest.mark.parametrize("own", [True, False])
def test_a_group_of_only_the_servers_own_token_or_only_named_tokens_commits(surl: str, own: bool) -> None:
    with EventStore(surl) as store:
        secret = tokens.add_token(store, "ok", "append")
        committer = Committer(store, WriteGrants())
        try:
            r = answer(committer.submit(item("s"), None if own else tokens.digest(secret)))
        finally:
            committer.close()
        assert isinstance(r, AppendResult) and store.stream_version("s") == 1


def test_the_commit_thread_is_named_and_never_keeps_a_worker_from_exiting(surl: str) -> None:
    """A worker that stops without closing its committer (killed before its shutdown ran) still exits;
    while it runs, a stack dump names the thread ``evstore-commit``."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import projections

    code = (
        "import sys, threading\n"
        "from eventstore.store import EventStore\n"
        "from projections.serve.grouping import Committer, WriteGrants\n"
        "store = EventStore(sys.argv[1])\n"
        "committer = Committer(store, WriteGrants())\n"
        "print(sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(projections.__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code, surl], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['evstore-commit']"


@pytest.mark.parametrize("remembered", [False, True])
def test_a_token_revoked_while_its_request_is_read_writes_nothing(url: str, remembered: bool) -> None:
    """A revocation holds for every append that commits after it: a named token revoked after its
    request was authorized (here: while the body is read), whether or not the worker had seen it
    before, is refused when its group commits, and nothing is written."""
    from starlette.testclient import TestClient

    from projections.serve import ServeConfig, create_app

    with EventStore(url) as store:
        secret = tokens.add_token(store, "ci", "append")
    app = create_app(ServeConfig(url=url, token="S" * 43, read_token=None, host="127.0.0.1", workers=2))
    note = {"events": [{"type": "demo.note", "data": {"n": 1}}]}
    headers = {"Authorization": f"Bearer {secret}", "X-Evstore-Machine": "m1"}
    with TestClient(app, base_url="http://127.0.0.1") as http:
        server = app.state.server
        if remembered:
            assert http.post("/api/streams/before/events", json=note, headers=headers).status_code == 201
        read_body = server.read_body

        async def revoked_meanwhile(request: Any) -> bytes:
            with EventStore(url) as other:
                tokens.revoke_token(other, "ci")
            body: bytes = await read_body(request)
            return body

        server.read_body = revoked_meanwhile
        r = http.post("/api/streams/s/events", json=note, headers=headers)
        assert r.status_code == 403 and 'the token "ci" was revoked' in r.json()["error"], r.text
    with EventStore(url) as store:
        assert store.stream_info("s") is None
