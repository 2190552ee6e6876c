"""Subagents linked to their parent session and Task tool use, in both layouts, on both backends:
2.x files of their own (by the agentId the Task's result carries), 1.0.x sidechains inline (by
prompt text and time); links are new events, the transcript still comes back byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventstore.store import EventStore
from tests.claude_subagent_fixtures import (
    V1_SESSION,
    V2_AGENT_A,
    V2_AGENT_B,
    V2_AGENT_RUNNING,
    V2_SESSION,
    v1_lines,
    write_v1,
    write_v2,
)


@pytest.fixture(autouse=True)
def _scrub_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVSTORE_SCRUB_KEY", "test-key")


def links(store: EventStore, stream: str) -> list[dict]:
    return [e.payload for e in store.read_stream(stream) if e.type == "claude.subagent_linked"]


def query(run, sql: str) -> list[dict]:
    r = run("query", "--json", sql)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_v2_subagent_files_link_to_their_session_and_task(run, store_url: str, tmp_path: Path) -> None:
    files = write_v2(tmp_path / "projects")
    r = run("ingest", "claude", str(tmp_path / "projects"), "--json")
    assert r.exit_code == 0, r.output
    streams = [json.loads(x)["stream"] for x in r.stdout.splitlines()]
    assert streams[0] == V2_SESSION and sorted(streams[1:]) == sorted(
        f"{V2_SESSION}/agent-{a}" for a in (V2_AGENT_A, V2_AGENT_B, V2_AGENT_RUNNING))
    with EventStore(store_url) as store:
        got = links(store, V2_SESSION)
        assert [(g["agent"], g["tool_use_id"], g["by"], g["stream"], g["lineno"], g["task_lineno"],
                 g["subagent_type"]) for g in got] == [
            (V2_AGENT_A, "toolu_task_a", "agent_id", f"{V2_SESSION}/agent-{V2_AGENT_A}", 4, 2, "reviewer"),
            (V2_AGENT_B, "toolu_task_b", "agent_id", f"{V2_SESSION}/agent-{V2_AGENT_B}", 5, 3, "general-purpose")]
        # each link follows the line that proves it
        types = [e.type for e in store.read_stream(V2_SESSION)]
        assert types[3:7] == ["claude.tool_result", "claude.subagent_linked", "claude.tool_result",
                              "claude.subagent_linked"]
        meta = [e.metadata for e in store.read_stream(f"{V2_SESSION}/agent-{V2_AGENT_A}")][-1]
        assert meta["transcript"]["parent_session"] == V2_SESSION
    for key, path in files.items():  # links take nothing from the bytes
        stream = V2_SESSION if key == "main" else f"{V2_SESSION}/agent-{key}"
        assert run("replay", stream, "--raw").stdout_bytes == path.read_bytes()
    log = run("log", V2_SESSION).output
    assert f"subagent {V2_SESSION}/agent-{V2_AGENT_A} [reviewer] started by Task toolu_task_a (line 2)" in log
    assert run("ingest", "claude", str(tmp_path / "projects"), "--json").exit_code == 0  # unchanged: no new link
    with EventStore(store_url) as store:
        assert len(links(store, V2_SESSION)) == 2

    subs = query(run, "SELECT session_id, stream_id, agent, layout, task_tool_use_id, task_tool_name, linked_by, "
                      "duration_s FROM subagents ORDER BY agent")
    assert [(s["agent"], s["layout"], s["task_tool_use_id"], s["task_tool_name"], s["linked_by"], s["duration_s"])
            for s in subs] == [
        (V2_AGENT_A, "file", "toolu_task_a", "Task", "agent_id", 300),
        (V2_AGENT_B, "file", "toolu_task_b", "Agent", "agent_id", 420),
        (V2_AGENT_RUNNING, "file", None, None, None, 60)]
    assert {s["session_id"] for s in subs} == {V2_SESSION}
    sessions = {s["stream_id"]: s for s in query(
        run, "SELECT stream_id, parent_session, task_tool_use_id, subagents, subagent_s FROM sessions")}
    assert sessions[V2_SESSION]["subagents"] == 3 and sessions[V2_SESSION]["subagent_s"] == 300 + 420 + 60
    assert sessions[V2_SESSION]["parent_session"] is None
    a = sessions[f"{V2_SESSION}/agent-{V2_AGENT_A}"]
    assert (a["parent_session"], a["task_tool_use_id"]) == (V2_SESSION, "toolu_task_a")
    assert sessions[f"{V2_SESSION}/agent-{V2_AGENT_RUNNING}"]["task_tool_use_id"] is None
    # each line of a subagent's file carries its agentId, and its facts say so (mutation testing: survived)
    agents = query(run, "SELECT stream_id, list(DISTINCT agent_id) AS agents FROM claude_events "
                        "WHERE kind <> 'subagent_linked' GROUP BY stream_id ORDER BY stream_id")
    assert {a["stream_id"]: a["agents"] for a in agents} == {
        V2_SESSION: [None], **{f"{V2_SESSION}/agent-{x}": [x] for x in (V2_AGENT_A, V2_AGENT_B, V2_AGENT_RUNNING)}}


def test_v2_0_sibling_agent_file_names_its_session(run, store_url: str, tmp_path: Path) -> None:
    """2.0.x wrote ``agent-<id>.jsonl`` beside the sessions; its lines name the parent session."""
    from tests.claude_subagent_fixtures import v2_agent_lines

    project = tmp_path / "p"
    project.mkdir()
    sibling = project / f"agent-{V2_AGENT_A}.jsonl"
    sibling.write_bytes(b"".join(v2_agent_lines(V2_AGENT_A, 1, 6, "Review the diff in src/")))
    r = run("ingest", "claude", str(sibling), "--json")
    assert json.loads(r.stdout)["stream"] == f"{V2_SESSION}/agent-{V2_AGENT_A}"


def test_v1_inline_sidechains_link_by_prompt_and_time(run, store_url: str, tmp_path: Path) -> None:
    path = write_v1(tmp_path / "projects")
    assert run("ingest", "claude", str(path)).exit_code == 0
    with EventStore(store_url) as store:
        got = [(g["agent"], g["tool_use_id"], g["by"], g["stream"], g["lineno"], g["task_lineno"])
               for g in links(store, V1_SESSION)]
        # s1 (09:01:05) takes the nearest earlier Task with its prompt (t2, 09:01:02); s2 the one left (t1)
        assert got == [("s1", "toolu_t2", "prompt", None, 4, 3), ("s2", "toolu_t1", "prompt", None, 5, 2),
                       ("s3", "toolu_t3", "prompt", None, 7, 6)]
        side = {e.payload.get("uuid"): e.payload.get("sidechain") for e in store.read_stream(V1_SESSION)}
        assert (side["s1b"], side["s2a"], side["s3a"], side["s4a"], side["m5"]) == ("s1", "s2", "s3", "s4", None)
    assert run("replay", V1_SESSION, "--raw").stdout_bytes == path.read_bytes()
    assert "inline subagent (sidechain s1) [general-purpose] started by Task toolu_t2 (line 3)" in run(
        "log", V1_SESSION).output
    subs = query(run, "SELECT agent, layout, task_tool_use_id, linked_by, started_at, duration_s FROM subagents "
                      "ORDER BY agent")
    assert [(s["agent"], s["layout"], s["task_tool_use_id"], s["linked_by"], s["duration_s"]) for s in subs] == [
        ("s1", "inline", "toolu_t2", "prompt", 180), ("s2", "inline", "toolu_t1", "prompt", 120),
        ("s3", "inline", "toolu_t3", "prompt", 300), ("s4", "inline", None, None, 30)]
    session = query(run, f"SELECT subagents, subagent_s FROM sessions WHERE stream_id = '{V1_SESSION}'")[0]
    assert (session["subagents"], session["subagent_s"]) == (4, 180 + 120 + 300 + 30)
    report = json.loads(run("metrics", "--format", "json").stdout)
    summary = next(s for s in report["sections"] if s["name"] == "claude_sessions")["summary"]
    assert (summary["subagents"], summary["subagent_s"]) == (4, 630)


@pytest.mark.parametrize("cut", [3, 4, 6, 8])
def test_v1_links_found_across_incremental_ingests(run, store_url: str, tmp_path: Path, cut: int) -> None:
    """A grown file: the Tasks (and sidechain starts) recorded by an earlier ingest still link, once."""
    path = tmp_path / f"{V1_SESSION}.jsonl"
    lines = v1_lines()
    path.write_bytes(b"".join(lines[:cut]))
    assert run("ingest", "claude", str(path)).exit_code == 0
    path.write_bytes(b"".join(lines))
    assert run("ingest", "claude", str(path)).exit_code == 0
    with EventStore(store_url) as store:
        assert [(g["agent"], g["tool_use_id"]) for g in links(store, V1_SESSION)] == [
            ("s1", "toolu_t2"), ("s2", "toolu_t1"), ("s3", "toolu_t3")]
        side = {e.payload.get("uuid"): e.payload.get("sidechain") for e in store.read_stream(V1_SESSION)}
        assert (side["s1b"], side["s2a"], side["s3a"]) == ("s1", "s2", "s3")
    assert run("replay", V1_SESSION, "--raw").stdout_bytes == path.read_bytes()


def test_subagents_are_joined_to_their_links_by_equalities(run, store_url: str, tmp_path: Path) -> None:
    """The ``subagents`` view finds each subagent's links by equalities, a hash join: on an OR of the two layouts'
    conditions DuckDB joined every subagent with every link in a nested loop (0.88 s against 0.09 at 10^6 Claude
    events, and a report reads the view five times).  Both layouts' rows are the tests' above."""
    write_v2(tmp_path / "projects")
    write_v1(tmp_path / "projects")
    assert run("ingest", "claude", str(tmp_path / "projects")).exit_code == 0
    from projections.analytics.views import reading

    with EventStore(store_url) as store, reading(store, tmp_path / "analytics") as con:
        plan = "\n".join(str(r[-1]) for r in con.execute("EXPLAIN SELECT * FROM subagents").fetchall())
        plan = plan.upper().replace(" ", "_")  # "Hash Join", "Blockwise NL Join", "Nested Loop Join"
        layouts = con.execute("SELECT layout, count(*), count(task_tool_use_id) FROM subagents GROUP BY ALL "
                              "ORDER BY ALL").fetchall()
    assert "HASH_JOIN" in plan and "NL_JOIN" not in plan and "NESTED_LOOP" not in plan, plan
    assert layouts == [("file", 3, 2), ("inline", 4, 3)]
