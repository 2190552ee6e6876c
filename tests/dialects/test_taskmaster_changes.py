"""task-master's planning edits and tag switches as typed events: priority changes, dependencies
added and removed, task and subtask fields updated (key order kept), and ``.taskmaster/state.json``'s
current tag switched.  Each is derived from a before/after pair, folds back exactly, and replays
from a real ingest to ``json.loads`` of the file and to its bytes (tab-indented, ``\\/``-escaped,
non-ASCII)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET
from oracles import assert_exact

from eventstore import documents
from eventstore.dialects import get_dialect
from eventstore.dialects.base import DocumentPatched
from eventstore.dialects.taskmaster import events as ev
from eventstore.errors import IngestError
from eventstore.events import decode_event, encode_event

D = get_dialect("taskmaster")


def task(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": i, "title": f"Tâche {i} / étape", "description": "Écrire l'API /v1", "status": "pending",
            "priority": "medium", "dependencies": [], "details": "", "testStrategy": "tests",
            "subtasks": [{"id": 1, "title": "s", "status": "pending", "details": ""}], **extra}


def tagged(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"master": {"tasks": list(tasks), "metadata": {"created": "2026-01-01T00:00:00Z"}}}


def lens(prev: Any, nxt: Any) -> list[Any]:
    """The events observed for ``prev -> nxt``; they fold ``prev`` into ``nxt`` exactly, stored too."""
    events = D.observe(prev, nxt)
    assert_exact(D.fold(documents.copy(prev), events), nxt)
    stored = [decode_event(e.event_type(), e.schema_version, encode_event(e)) for e in events]
    assert stored == events
    assert_exact(D.fold(documents.copy(prev), stored), nxt)
    return events


def typed_only(prev: Any, nxt: Any) -> list[Any]:
    events = lens(prev, nxt)
    assert not any(isinstance(e, DocumentPatched) for e in events), events
    return events


# ------------------------------------------------------------------ tasks.json


@pytest.mark.parametrize("legacy", [True, False])
def test_a_priority_change(legacy: bool) -> None:
    before = {"tasks": [task(1), task(2)]} if legacy else tagged(task(1), task(2))
    after = documents.copy(before)
    tasks = after["tasks"] if legacy else after["master"]["tasks"]
    tasks[1]["priority"] = "high"
    tag = None if legacy else "master"
    assert typed_only(before, after) == [ev.PriorityChanged(tag=tag, id=2, from_priority="medium", to_priority="high")]
    where = "" if legacy else " [master]"
    assert D.summary(typed_only(before, after)[0]) == f"task 2{where}: priority medium -> high"


def test_dependencies_added_where_task_master_sorts_them_and_removed() -> None:
    before = {"tasks": [task(1), task(2), task(3), task(4, dependencies=[1, 3])]}
    after = documents.copy(before)
    after["tasks"][3]["dependencies"] = [1, 2, 3, "2.1"]  # add-dependency: pushed, then sorted
    assert typed_only(before, after) == [ev.DependenciesAdded(tag=None, id=4, dependencies=[2, "2.1"], indexes=[1, 3])]
    again = documents.copy(after)
    again["tasks"][3]["dependencies"] = [2, 3, 5]
    assert typed_only(after, again) == [ev.DependenciesRemoved(tag=None, id=4, dependencies=[1, "2.1"]),
                                        ev.DependenciesAdded(tag=None, id=4, dependencies=[5], indexes=[2])]
    assert D.summary(typed_only(after, again)[0]) == "task 4: no longer depends on 1, '2.1'"


def test_dependencies_reordered_or_out_of_spec_are_a_field_update() -> None:
    before = {"tasks": [task(4, dependencies=[1, 3])]}
    reordered = {"tasks": [task(4, dependencies=[3, 1])]}
    assert typed_only(before, reordered) == [ev.TaskUpdated(tag=None, id=4, fields={"dependencies": [3, 1]})]
    odd = {"tasks": [task(4, dependencies=[1, 1.0, {"id": 3}])]}  # 1 and 1.0 differ; an object is no id
    assert typed_only(before, odd) == [ev.TaskUpdated(tag=None, id=4, fields={"dependencies": [1, 1.0, {"id": 3}]})]
    assert typed_only(odd, before) == [ev.TaskUpdated(tag=None, id=4, fields={"dependencies": [1, 3]})]


def test_fields_updated_keep_the_key_order_and_removed_fields_go() -> None:
    before = tagged(task(1), task(2))
    after = documents.copy(before)
    t = after["master"]["tasks"][0]
    t["details"] = "Réécrit: see https://example.org/a/b\u2028"
    t["title"] = "Nouveau titre"
    del t["testStrategy"]
    t["updatedAt"] = "2026-01-02T00:00:00Z"  # a new field goes last, as JavaScript puts it
    t["complexity"] = 5
    events = typed_only(before, after)
    assert events == [ev.TaskUpdated(tag="master", id=1, fields={
        "title": "Nouveau titre", "details": "Réécrit: see https://example.org/a/b\u2028",
        "updatedAt": "2026-01-02T00:00:00Z", "complexity": 5}, removed=["testStrategy"])]
    assert list(D.fold(documents.copy(before), events)["master"]["tasks"][0]) == list(t)
    assert D.summary(events[0]) == "task 1 [master] updated: title, details, updatedAt, complexity, -testStrategy"


def test_a_status_or_priority_appearing_is_a_field_update_and_a_reordered_task_a_patch() -> None:
    bare = {"tasks": [{"id": 1, "title": "a"}]}
    full = {"tasks": [{"id": 1, "title": "a", "status": "pending", "priority": "low"}]}
    assert typed_only(bare, full) == [ev.TaskUpdated(tag=None, id=1, fields={"status": "pending", "priority": "low"})]
    assert typed_only(full, bare) == [ev.TaskUpdated(tag=None, id=1, fields={}, removed=["status", "priority"])]
    moved = {"tasks": [{"title": "a", "id": 1, "status": "pending", "priority": "low"}]}  # same values, other order
    events = lens(full, moved)
    assert [type(e) for e in events] == [DocumentPatched]
    new_first = {"tasks": [{"id": 1, "new": True, "title": "a", "status": "pending", "priority": "low"}]}
    events = lens(full, new_first)  # the field update, then the patch that moves the new key up
    assert events[0] == ev.TaskUpdated(tag=None, id=1, fields={"new": True}) and isinstance(events[-1], DocumentPatched)


def test_subtask_fields_updated_and_everything_at_once() -> None:
    before = {"tasks": [task(1), task(2), task(3, dependencies=[1])], "metadata": {"projectName": "p"}}
    after = documents.copy(before)
    t1, t3 = after["tasks"][0], after["tasks"][2]
    t1["subtasks"][0]["details"] += "\n<info added on 2026-01-02T10:00:00Z>\nnote\n</info added on 2026-01-02T10:00:00Z>"
    t1["subtasks"][0]["status"] = "done"
    t1["status"], t1["priority"] = "in-progress", "high"
    t3["dependencies"] = [1, 2]
    t3["description"] = "Revu"
    events = typed_only(before, after)
    assert events == [
        ev.StatusChanged(tag=None, id=1, from_status="pending", to_status="in-progress"),
        ev.PriorityChanged(tag=None, id=1, from_priority="medium", to_priority="high"),
        ev.SubtaskStatusChanged(tag=None, task_id=1, subtask_id=1, from_status="pending", to_status="done"),
        ev.SubtaskUpdated(tag=None, task_id=1, subtask_id=1, fields={"details": t1["subtasks"][0]["details"]}),
        ev.DependenciesAdded(tag=None, id=3, dependencies=[2], indexes=[1]),
        ev.TaskUpdated(tag=None, id=3, fields={"description": "Revu"})]
    assert D.summary(events[3]) == "subtask 1.1 updated: details"


def test_a_folder_of_tasks_json_versions_replays_exactly(run: Any, tmp_path: Path) -> None:
    """Each new event through a real ingest: every version replays to json.loads of its file and to
    its bytes, tab-indented, ``\\/``-escaped or not, non-ASCII escaped or not."""
    v1 = tagged(task(1), task(2), task(3, dependencies=[1]))
    v2 = documents.copy(v1)
    v2["master"]["tasks"][1]["priority"] = "high"
    v3 = documents.copy(v2)
    v3["master"]["tasks"][2]["dependencies"] = [1, 2]
    v4 = documents.copy(v3)
    v4["master"]["tasks"][2]["dependencies"] = [2]
    v4["master"]["tasks"][0]["title"] = "Écran / connexion"
    v4["master"]["tasks"][0]["subtasks"][0]["details"] = "détails /x"
    renders: list[Callable[[Any], bytes]] = [
        lambda d: json.dumps(d, indent="\t").replace("/", "\\/").encode(),
        lambda d: json.dumps(d, indent=2, ensure_ascii=False).encode() + b"\n",
        lambda d: json.dumps(d, indent="\t", ensure_ascii=False).replace("/", "\\/").encode(),
        lambda d: json.dumps(d, indent=2).encode()]
    raws = [render(doc) for render, doc in zip(renders, [v1, v2, v3, v4], strict=True)]
    folder = tmp_path / "tasks"
    folder.mkdir()
    for i, raw in enumerate(raws, 1):
        (folder / f"{i}-tasks.json").write_bytes(raw)
    r = run("ingest", "taskmaster", str(folder), "--stream", "tm-2", "--json")
    assert r.exit_code == 0, r.output
    versions = [json.loads(line)["version"] for line in r.stdout.splitlines()]
    types = [json.loads(line)["type"] for line in run("log", "tm-2", "--json").stdout.splitlines()]
    for t in ("priority_changed", "dependencies_added", "dependencies_removed", "task_updated", "subtask_updated"):
        assert f"taskmaster.{t}" in types, types
    log = run("log", "tm-2").stdout
    assert "task 2 [master]: priority medium -> high" in log and "task 3 [master]: now depends on 2" in log, log
    for version, raw in zip(versions, raws, strict=True):
        assert_exact(json.loads(run("replay", "tm-2", "--upto", str(version), "--json").stdout), json.loads(raw))
        assert run("replay", "tm-2", "--upto", str(version), "--raw").stdout_bytes == raw, version


# ------------------------------------------------------------------ state.json


def state(tag: str, at: str, **extra: Any) -> dict[str, Any]:
    return {"currentTag": tag, "lastSwitched": at, "branchTagMapping": {}, "migrationNoticeShown": True, **extra}


def test_a_tag_switch_and_what_is_not_one() -> None:
    before = state("master", "2026-01-01T00:00:00.000Z")
    after = state("feature-é", "2026-01-02T09:30:00.000Z")
    events = typed_only(before, after)
    assert events == [ev.TagSwitched(from_tag="master", to_tag="feature-é", switched_at="2026-01-02T09:30:00.000Z")]
    assert D.summary(events[0]) == "current tag 'master' -> 'feature-é' at 2026-01-02T09:30:00.000Z"
    # the tag alone (an edit by hand): no time; the mapping alone: a patch, no switch
    by_hand = state("other", "2026-01-01T00:00:00.000Z")
    assert typed_only(before, by_hand) == [ev.TagSwitched(from_tag="master", to_tag="other", switched_at=UNSET)]
    mapped = state("master", "2026-01-01T00:00:00.000Z", branchTagMapping={"feature/login": "feature-login"})
    assert [type(e) for e in lens(before, mapped)] == [DocumentPatched]


def test_a_first_switch_from_a_state_json_naming_no_tag() -> None:
    """task-master 0.4x may write ``{"migrationNoticeShown": true}`` alone; switchCurrentTag then adds
    currentTag and lastSwitched, and branchTagMapping after them (the patch's part)."""
    before = {"migrationNoticeShown": True}
    after = {"migrationNoticeShown": True, "currentTag": "feature", "lastSwitched": "2026-01-02T00:00:00Z",
             "branchTagMapping": {}}
    events = lens(before, after)
    assert events[0] == ev.TagSwitched(from_tag=None, to_tag="feature", switched_at="2026-01-02T00:00:00Z")
    assert [type(e) for e in events] == [ev.TagSwitched, DocumentPatched]


@pytest.mark.parametrize("doc", [{"migrationNoticeShown": True}, state("master", "2026-01-01T00:00:00Z"),
                                 {"currentTag": "x", "discoverySession": {"stage": 1}}])
def test_state_json_documents_are_accepted(doc: Any) -> None:
    assert D.identity_problem(doc, "state.json") is None
    assert D.validate(doc) == []


@pytest.mark.parametrize("doc", [{"currentTag": 5}, {"migrationNoticeShown": "yes"}, {"lastSwitched": None},
                                 {"currentTag": "x", "master": {"tasks": []}}])
def test_look_alikes_of_state_json_are_refused(doc: Any) -> None:
    with pytest.raises(IngestError, match="state.json"):
        D.check_identity(doc, "x.json")


def test_state_json_findings() -> None:
    doc = {"currentTag": "master", "branchTagMapping": [], "migrationNoticeShown": 1}
    assert {(f.path, f.code) for f in D.validate(doc)} == {("/branchTagMapping", "wrong-type"),
                                                         ("/migrationNoticeShown", "wrong-type")}


def _git(repo: Path, *args: str, when: int | None = None) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.org", "GIT_COMMITTER_NAME": "A",
           "GIT_COMMITTER_EMAIL": "a@example.org", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"2026-01-01T00:{when:02d}:00+00:00"
    subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, check=True)


def test_a_repository_records_tasks_json_and_state_json_as_two_streams(run: Any, tmp_path: Path) -> None:
    """As the dialect's docstring says: one ``ingest --git`` per file, each a stream named by its path;
    the state.json stream holds the tag switches, and both give every committed version back."""
    repo = tmp_path / "project"
    (repo / ".taskmaster" / "tasks").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    tasks_file, state_file = repo / ".taskmaster/tasks/tasks.json", repo / ".taskmaster/state.json"
    feature = {"tasks": [task(1)], "metadata": {"created": "2026-01-01T00:02:00Z", "description": "feature/x"}}
    steps: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (tagged(task(1)), state("master", "2026-01-01T00:01:00.000Z")),
        ({**tagged(task(1)), "feature-x": feature}, state("feature-x", "2026-01-01T00:02:00.000Z")),
        ({**tagged(task(1)), "feature-x": feature},
         state("feature-x", "2026-01-01T00:02:00.000Z", branchTagMapping={"feature/x": "feature-x"})),
        (tagged(task(1)), state("master", "2026-01-01T00:04:00.000Z", branchTagMapping={"feature/x": "feature-x"})),
    ]
    raws: dict[str, list[bytes]] = {".taskmaster/tasks/tasks.json": [], ".taskmaster/state.json": []}
    for i, (tasks_doc, state_doc) in enumerate(steps, 1):
        tasks_raw = json.dumps(tasks_doc, indent="\t").replace("/", "\\/").encode()  # task-master writes tabs
        state_raw = json.dumps(state_doc, indent=2).replace("/", "\\/").encode()
        if not raws[".taskmaster/tasks/tasks.json"] or raws[".taskmaster/tasks/tasks.json"][-1] != tasks_raw:
            tasks_file.write_bytes(tasks_raw)
            raws[".taskmaster/tasks/tasks.json"].append(tasks_raw)
        state_file.write_bytes(state_raw)
        raws[".taskmaster/state.json"].append(state_raw)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"step {i}", when=i)
    for path in raws:
        r = run("ingest", "taskmaster", "--git", f"{repo}:{path}", "--json")
        assert r.exit_code == 0, r.output
        assert {json.loads(line)["stream"] for line in r.stdout.splitlines()} == {path}
    log = [json.loads(line) for line in run("log", ".taskmaster/state.json", "--json").stdout.splitlines()]
    switches = [(e["data"]["from_tag"], e["data"]["to_tag"], e["data"]["switched_at"])
                for e in log if e["type"] == "taskmaster.tag_switched"]
    assert switches == [("master", "feature-x", "2026-01-01T00:02:00.000Z"),
                        ("feature-x", "master", "2026-01-01T00:04:00.000Z")]
    assert "current tag 'master' -> 'feature-x' at 2026-01-01T00:02:00.000Z" in run("log", ".taskmaster/state.json").stdout
    tasks_types = {json.loads(line)["type"] for line in run("log", ".taskmaster/tasks/tasks.json", "--json").stdout.splitlines()}
    assert {"taskmaster.tag_created", "taskmaster.tag_removed"} <= tasks_types
    for path, versions in raws.items():
        assert len(versions) == len(run("log", path, "--json").stdout.splitlines())
        for version, raw in enumerate(versions, 1):
            got = json.loads(run("replay", path, "--upto", str(version), "--json").stdout)
            assert_exact(got, json.loads(raw), path, version)
            assert run("replay", path, "--upto", str(version), "--raw").stdout_bytes == raw, (path, version)
