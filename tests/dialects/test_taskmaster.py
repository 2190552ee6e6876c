"""The taskmaster dialect's own edge cases (the contract suite covers the rest): both formats, the
typed events it derives, what it refuses, its findings, and an ingest of tab-indented files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from oracles import assert_exact

from eventstore import documents
from eventstore.dialects import get_dialect
from eventstore.dialects.base import DocumentPatched
from eventstore.dialects.taskmaster import events as ev
from eventstore.errors import IngestError

D = get_dialect("taskmaster")


def task(i: int, status: str = "pending", subs: list[str] | None = None) -> dict[str, Any]:
    return {"id": i, "title": f"Tâche {i} / étape", "status": status, "dependencies": [],
            "subtasks": [{"id": k + 1, "title": "s", "status": s} for k, s in enumerate(subs or [])]}


def tagged(**tags: list[dict[str, Any]]) -> dict[str, Any]:
    return {tag: {"tasks": tasks, "metadata": {"created": "2026-01-01T00:00:00Z"}} for tag, tasks in tags.items()}


def lens(prev: Any, nxt: Any) -> list[Any]:
    events = D.observe(prev, nxt)
    assert_exact(D.fold(documents.copy(prev), events), nxt)
    return events


def test_status_changes_in_both_formats_are_typed_events() -> None:
    legacy = {"tasks": [task(1), task(2, subs=["pending", "pending"])], "metadata": {"projectName": "p"}}
    nxt = documents.copy(legacy)
    nxt["tasks"][0]["status"] = "in-progress"
    nxt["tasks"][1]["subtasks"][1]["status"] = "done"
    assert lens(legacy, nxt) == [
        ev.StatusChanged(tag=None, id=1, from_status="pending", to_status="in-progress"),
        ev.SubtaskStatusChanged(tag=None, task_id=2, subtask_id=2, from_status="pending", to_status="done")]
    before = tagged(master=[task(1, "done")], feature=[task(1)])
    after = documents.copy(before)
    after["master"]["tasks"][0]["status"] = "in-progress"  # reopened
    assert lens(before, after) == [ev.StatusChanged(tag="master", id=1, from_status="done", to_status="in-progress")]


def test_tasks_added_removed_and_moved_between_tags() -> None:
    before = tagged(master=[task(1), task(2), task(3)], feature=[])
    after = tagged(master=[task(1), task(4), task(3)], feature=[task(2)])
    events = lens(before, after)
    assert ev.TaskRemoved(tag="master", id=2, title="Tâche 2 / étape") in events
    assert ev.TaskAdded(tag="master", index=1, task=task(4)) in events
    assert ev.TaskAdded(tag="feature", index=0, task=task(2)) in events
    assert not any(isinstance(e, DocumentPatched) for e in events)


def test_a_reorder_or_a_duplicate_id_stays_exact_through_the_patch() -> None:
    before = {"tasks": [task(1), task(2), task(3)]}
    assert any(isinstance(e, DocumentPatched) for e in lens(before, {"tasks": [task(3), task(1), task(2)]}))
    dup = {"tasks": [task(1), task(1, "done")]}
    lens(before, dup)
    lens(dup, {"tasks": [task(1, "done"), task(1)]})
    lens({"tasks": [task(1)]}, {"tasks": [{"id": 1.0, "title": "x", "status": "done"}]})  # 1 -> 1.0 is a change


@pytest.mark.parametrize("doc", [
    {}, {"master": {"tasks": []}, "extra": 1}, {"schemaVersion": "2.0.0", "taskId": "T"}, [1], {"tasks": {}},
])
def test_documents_that_are_no_tasks_json_are_refused(doc: Any) -> None:
    with pytest.raises(IngestError, match="taskmaster"):
        D.check_identity(doc, "x.json")


def test_findings() -> None:
    doc = {"tasks": [{"id": 1, "title": "a", "status": "todo", "dependencies": [9]},
                     {"id": 1, "status": "done", "subtasks": [{"id": 1, "status": "??"}]}]}
    got = {(f.path, f.code) for f in D.validate(doc)}
    assert got == {("/tasks/0/status", "status-not-in-enum"), ("/tasks/0/dependencies/0", "unknown-dependency"),
                   ("/tasks/0/id", "duplicate-id"), ("/tasks/1/id", "duplicate-id"),
                   ("/tasks/1", "missing-field"), ("/tasks/1/subtasks/0/status", "status-not-in-enum")}
    assert D.validate(tagged(master=[task(1), task(2, "done", ["done"])])) == []


def test_ingest_and_log_of_tab_indented_versions(run: Any, tmp_path: Path) -> None:
    """Versions as task-master writes them (tab-indented here, with \\/ and non-ASCII) are ingested
    under the file's name, logged by their summary lines and given back byte for byte."""
    folder = tmp_path / "history"
    folder.mkdir()
    docs = [tagged(master=[task(1), task(2)]), tagged(master=[task(1, "in-progress"), task(2)]),
            tagged(master=[task(1, "done"), task(2), task(3)])]
    raws = [json.dumps(d, indent="\t").replace("/", "\\/").encode() for d in docs]
    for i, raw in enumerate(raws):
        (folder / f"{i + 1}-tasks.json").write_bytes(raw)
    r = run("ingest", "taskmaster", str(folder), "--stream", "tm-1")
    assert r.exit_code == 0, r.output
    log = run("log", "tm-1").output
    assert "task 1 [master]: pending -> in-progress" in log and "task 3 added [master]" in log, log
    versions = [int(line.rsplit(" @ ", 1)[1].split()[0]) for line in r.stdout.splitlines() if " @ " in line]
    assert len(versions) == 3 and versions[-1] > 3  # the last file: a status change and a task added
    for version, raw in zip(versions, raws, strict=True):
        out = run("replay", "tm-1", "--upto", str(version), "--raw")
        assert out.stdout_bytes == raw, version


def test_simulated_projects_use_every_typed_event_and_both_formats() -> None:
    import random
    from datetime import UTC, datetime

    seen: set[type] = set()
    formats = set()
    for seed in range(12):
        prev = None
        for snap in D.simulate(random.Random(seed), run_id=f"r{seed}", start=datetime(2026, 1, 1, tzinfo=UTC)):
            seen |= {type(e) for e in D.observe(prev, snap.doc)}
            formats.add("tasks" in snap.doc)
            prev = snap.doc
    # TagSwitched is state.json's, a file the simulator does not write (tested below on its own)
    assert set(ev.CATALOG) - {ev.TagSwitched} <= seen and formats == {True, False}
