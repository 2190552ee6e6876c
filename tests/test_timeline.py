"""One timeline per task: a run whose state two Claude Code sessions wrote shows its state versions
(each with its diff and the tool call that wrote it) and both sessions' turns in time order
(`evstore log --timeline`, the run page); a session page shows the conversation with the subagents'
turns nested under the call that started them."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests import claude_link_fixtures as L
from tests import claude_subagent_fixtures as SF

A = "aaaaaaaa-0000-4000-8000-00000000000a"
B = "bbbbbbbb-0000-4000-8000-00000000000b"


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")


def _line(rec: dict[str, Any]) -> bytes:
    return (json.dumps(rec) + "\n").encode()


def _session(session: str, state: Path, minute: int, prompt: str, doc: str, tool: str) -> list[bytes]:
    base = {"sessionId": session, "cwd": str(state.parent), "version": "2.1.3", "isSidechain": False}

    def at(second: int) -> str:
        return f"2026-04-01T10:{minute:02d}:{second:02d}.000Z"

    return [
        _line({**base, "type": "user", "uuid": f"{session[:4]}u", "parentUuid": None, "timestamp": at(0),
               "message": {"role": "user", "content": prompt}}),
        _line({**base, "type": "assistant", "uuid": f"{session[:4]}a", "parentUuid": f"{session[:4]}u",
               "timestamp": at(10), "requestId": f"req_{session[:4]}",
               "message": {"id": f"msg_{session[:4]}", "model": "claude-sonnet-4-5", "role": "assistant",
                           "content": [{"type": "tool_use", "id": tool, "name": "Write",
                                        "input": {"file_path": str(state), "content": doc}}],
                           "usage": {"input_tokens": 100, "output_tokens": 20}}}),
        _line({**base, "type": "user", "uuid": f"{session[:4]}r", "parentUuid": f"{session[:4]}a", "timestamp": at(11),
               "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool, "content": "ok"}]},
               "toolUseResult": {"type": "update", "filePath": str(state), "content": doc}}),
    ]


@pytest.fixture
def two_sessions(run: Any, tmp_path: Path) -> str:
    """PROJ-LINK's state: version 1 written by session A at 10:00, version 2 by session B at 10:05;
    B's prompt comes between the two versions."""
    project = tmp_path / "orch"
    project.mkdir()
    state = project / "agent-state.json"
    v1, v2 = L.text(L.state("in_progress", 1)), L.text(L.state("in_progress", 2, "handed over"))
    folder = tmp_path / "projects" / "-orch"
    folder.mkdir(parents=True)
    (folder / f"{A}.jsonl").write_bytes(b"".join(_session(A, state, 0, "Start PROJ-LINK", v1, "toolu_A")))
    (folder / f"{B}.jsonl").write_bytes(b"".join(_session(B, state, 5, "Move PROJ-LINK to phase 2", v2, "toolu_B")))
    for doc, when in ((v1, "2026-04-01T10:00:12Z"), (v2, "2026-04-01T10:05:12Z")):
        state.write_text(doc)
        t = datetime.fromisoformat(when).timestamp()
        os.utime(state, (t, t))
        assert run("ingest", "mapipe", str(state)).exit_code == 0
    assert run("ingest", "claude", str(folder)).exit_code == 0
    return L.TASK


def test_log_timeline_interleaves_both_sessions_and_the_state_versions(run: Any, two_sessions: str) -> None:
    r = run("log", two_sessions, "--timeline", "--json")
    assert r.exit_code == 0, r.output
    items = [json.loads(x) for x in r.stdout.splitlines()]
    assert [i["at"] for i in items] == sorted(i["at"] for i in items)
    seen = [(i["kind"], i.get("session")) for i in items]
    assert seen == [("prompt", A), ("tool_use", A), ("tool_result", A), ("state", A),
                    ("prompt", B), ("tool_use", B), ("tool_result", B), ("state", B)]
    states = [i for i in items if i["kind"] == "state"]
    assert [s["written_by"]["tool_use_id"] for s in states] == ["toolu_A", "toolu_B"]
    assert states[1]["diff"] == [{"op": "replace", "path": "/currentPhase", "value": 2},
                                 {"op": "add", "path": "/note", "value": "handed over"}]
    text = run("log", two_sessions, "--timeline")
    assert "Move PROJ-LINK to phase 2" in text.stdout and "replace /currentPhase 2" in text.stdout


def test_run_page_shows_what_happened_in_time_order(run: Any, store_url: str, two_sessions: str, tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from projections.serve.app import ServeConfig, create_app

    with TestClient(create_app(ServeConfig(url=store_url, analytics_dir=str(tmp_path / "a"))),
                    base_url="http://127.0.0.1") as c:
        page = c.get(f"/runs/{two_sessions}").text
        assert 'id="story"' in page
        story = page[page.index('id="story"'):page.index("</section>", page.index('id="story"'))]
        assert story.index("Start PROJ-LINK") < story.index("state version 1") < story.index("Move PROJ-LINK") \
            < story.index("state version 2")
        assert f'data-stream="{A}"' in story and f'data-stream="{B}"' in story
        assert "/currentPhase" in story  # the diff of version 2
        # the usage section sums both sessions
        assert 'id="usage"' in page and "2 sessions" in page


def test_session_page_nests_subagents_under_their_call(run: Any, store_url: str, tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from projections.serve.app import ServeConfig, create_app

    SF.write_v2(tmp_path / "v2")
    SF.write_v1(tmp_path / "v1")
    assert run("ingest", "claude", str(tmp_path / "v2"), str(tmp_path / "v1")).exit_code == 0
    from eventstore.store import EventStore
    from projections.timeline import conversation

    with EventStore(store_url) as store:
        sessions = [s.stream_id for s in store.list_streams() if "/" not in s.stream_id]
        for sid in sessions:
            turns = conversation(store, sid)
            calls = [t for t in turns if t.kind == "tool_use" and t.text.split()[0] in ("Task", "Agent")]
            assert calls and all(t.children for t in calls), sid  # every subagent under its call
            assert all(c.depth == 1 for t in calls for c in t.children)
            assert not any(t.depth for t in turns)  # none left at the top
    with TestClient(create_app(ServeConfig(url=store_url, analytics_dir=str(tmp_path / "a"))),
                    base_url="http://127.0.0.1") as c:
        page = c.get(f"/runs/{sessions[0]}").text
        assert 'id="conversation"' in page and 'class="tl-children"' in page


def test_the_demo_has_sessions_that_wrote_state_files(tmp_path: Path) -> None:
    """`evstore demo`: Claude Code sessions wrote some runs' state files; the same seed, the same sessions."""
    from click.testing import CliRunner

    from eventstore.cli import register
    from eventstore.store import EventStore
    from projections.timeline import task_timeline

    contents = []
    for name in ("a", "b"):
        url = f"sqlite:///{tmp_path}/{name}/events.db"
        r = CliRunner().invoke(register(), ["demo", "--url", url, "--runs", "4", "--seed", "2", "--sessions", "1",
                                            "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["sessions"] == 2
        with EventStore(url) as store:
            contents.append([(e.stream_id, e.type, e.data) for e in store.iter_all()])
            run = next(s.stream_id for s in store.list_streams() if s.stream_id.startswith("demo-"))
            items = task_timeline(store, run)
    assert contents[0] == contents[1]
    kinds = {i.kind for i in items}
    assert {"prompt", "tool_use", "tool_result", "state"} <= kinds
    states = [i for i in items if i.kind == "state"]
    assert states and all(s.written_by and s.written_by["tool_name"] == "Write" for s in states)
    assert len({s.written_by["session_id"] for s in states if s.written_by}) == 2
    assert any(i.depth == 1 for i in items)  # the second session's subagent


def test_git_commits_are_on_the_timeline(run: Any, tmp_path: Path) -> None:
    """`ingest --git`: each version's commit is on the timeline, before the version it made."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str, when: str = "2026-04-02T10:00:00+00:00") -> str:
        env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when, "GIT_AUTHOR_NAME": "Ada",
               "GIT_AUTHOR_EMAIL": "ada@example.org", "GIT_COMMITTER_NAME": "Ada",
               "GIT_COMMITTER_EMAIL": "ada@example.org"}
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                              env=env).stdout

    git("init", "-q")
    for i, when in enumerate(("2026-04-02T10:00:00+00:00", "2026-04-02T11:00:00+00:00"), 1):
        (repo / "state.json").write_text(json.dumps({"taskId": "G-1", "step": i}))
        git("add", "state.json", when=when)
        git("commit", "-q", "-m", f"step {i}", when=when)
    shas = git("rev-list", "--reverse", "HEAD").split()
    assert run("ingest", "generic", "--git", f"{repo}:state.json", "--stream", "G-1").exit_code == 0
    r = run("log", "G-1", "--timeline", "--json")
    assert r.exit_code == 0, r.output
    items = [json.loads(x) for x in r.stdout.splitlines()]
    commits = [i for i in items if i["kind"] == "commit"]
    assert [c["text"] for c in commits] == [f"commit {s[:12]} by Ada" for s in shas]
    assert [c["at"][:19] for c in commits] == ["2026-04-02T10:00:00", "2026-04-02T11:00:00"]
    kinds = [i["kind"] for i in items]
    assert kinds.index("commit") < kinds.index("state")
