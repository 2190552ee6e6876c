"""The sender of a machine (eventstore/remote.py) against a real uvicorn server (issue 36, item 2): a sender killed
after the server recorded a batch but before its cursor moved sends it again and nothing is recorded twice; a
stream name another machine already used is refused and kept, never interleaved; an unreachable server leaves
the backlog and its error for `evstore doctor`."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from conftest import migrated
from serve_fixtures import serving

from eventstore import remote, tokens
from eventstore.store import EventStore, NewEvent
from projections.serve import ServeConfig, create_app


@pytest.fixture
def server_url(tmp_path: Path) -> str:
    return migrated(f"sqlite:///{tmp_path}/server/events.db")


def _machine(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> EventStore:
    monkeypatch.setenv("EVSTORE_SPOOL_DIR", str(tmp_path / name / "spool"))
    return EventStore(migrated(f"sqlite:///{tmp_path}/{name}/events.db"))


def _events(url: str) -> list[str]:
    with EventStore(url) as store:
        return [e.event_id for e in store.iter_all() if e.stream_id != tokens.ADMIN_STREAM]


def test_a_batch_sent_again_after_a_crash_is_recorded_once(server_url: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with EventStore(server_url) as store:
        token = tokens.add_token(store, "m1", "append")
    local = _machine(tmp_path, "m1", monkeypatch)
    for i in range(3):
        local.append(f"m1/run-{i % 2}", [NewEvent("demo.note", {"i": i})])
    app = create_app(ServeConfig(url=server_url, token=None, host="127.0.0.1", workers=2))
    with serving(app) as base:
        to = remote.Remote(base, token, "m1")
        first = remote.push(local, to)
        assert (first.sent, first.batches, first.backlog, first.error) == (3, 3, 0, None)
        # killed after the server committed, before the cursor moved: the whole log goes again
        (remote.state_dir(local) / remote.CURSOR).write_text("0\n")
        again = remote.push(local, to)
        assert (again.sent, again.duplicates, again.backlog, again.error) == (0, 3, 0, None)
    ids = _events(server_url)
    assert len(ids) == len(set(ids)) == 3 and set(ids) == {e.event_id for e in local.iter_all()}
    local.close()


def test_a_stream_name_another_machine_used_is_refused_and_kept(server_url: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with EventStore(server_url) as store:
        ta, tb = tokens.add_token(store, "a", "append"), tokens.add_token(store, "b", "append")
    a = _machine(tmp_path, "a", monkeypatch)
    a.append("PROJ-1", [NewEvent("demo.note", {"by": "a"})])
    app = create_app(ServeConfig(url=server_url, token=None, host="127.0.0.1", workers=2))
    with serving(app) as base:
        assert remote.push(a, remote.Remote(base, ta, "a")).error is None
        a.close()
        b = _machine(tmp_path, "b", monkeypatch)
        b.append("PROJ-1", [NewEvent("demo.note", {"by": "b"})])
        refused = remote.push(b, remote.Remote(base, tb, "b"))
        assert refused.error is not None and "409" in refused.error and refused.backlog == 1
        st = remote.status(b)
        assert st["backlog"] == 1 and st["oldest_waiting"]["stream"] == "PROJ-1" and "409" in st["last_error"]
    with EventStore(server_url) as store:
        assert [json.loads(e.data)["by"] for e in store.read_stream("PROJ-1")] == ["a"]
    b.close()


def test_an_unreachable_server_keeps_the_backlog_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = _machine(tmp_path, "m", monkeypatch)
    local.append("s", [NewEvent("demo.note", {})])
    result = remote.push(local, remote.Remote("http://127.0.0.1:9", secrets.token_urlsafe(32), "m"), retries=1,
                         backoff=0.01)
    assert result.backlog == 1 and result.error is not None and "cannot reach" in result.error
    assert remote.status(local)["last_error"] == result.error and remote.cursor(local) == 0
    local.close()


def test_the_hooks_drain_sends_what_it_recorded(server_url: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`evstore hook claude-code` spools; the drain records into the machine's store and pushes: the server gets the
    session's hook event, with the claude dialect and its sender."""
    from click.testing import CliRunner

    from eventstore import spool
    from eventstore.cli import register

    with EventStore(server_url) as store:
        token = tokens.add_token(store, "laptop", "append")
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    local_url = migrated(f"sqlite:///{tmp_path}/m/events.db")
    monkeypatch.setenv("EVSTORE_SPOOL_DIR", str(tmp_path / "m" / "spool"))
    call = {"session_id": "sess-42", "transcript_path": "/nowhere/sess-42.jsonl", "cwd": "/nowhere",
            "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "toolu_9",
            "tool_input": {"command": "ls"}}
    spool.write(str(tmp_path / "m" / "spool"), json.dumps(call).encode())
    app = create_app(ServeConfig(url=server_url, token=None, host="127.0.0.1", workers=2))
    with serving(app) as base:
        monkeypatch.setenv("EVSTORE_REMOTE", base)
        monkeypatch.setenv("EVSTORE_REMOTE_TOKEN_FILE", str(token_file))
        monkeypatch.setenv("EVSTORE_MACHINE", "laptop-7")
        r = CliRunner().invoke(register(), ["--url", local_url, "hook", "drain"])
        assert r.exit_code == 0, r.output
    with EventStore(server_url) as store:
        head = store.stream_head("sess-42")
        assert head is not None and head.dialect == "claude"
        [event] = list(store.read_stream("sess-42"))
    assert json.loads(event.meta)["sent_by"] == {"token": "laptop", "machine": "laptop-7"}
