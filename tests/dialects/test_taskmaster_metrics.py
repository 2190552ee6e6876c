"""task-master metrics on a hand-built history: every expected figure is worked out by hand from the
timeline below and written out, never computed by the product's own functions.

Project "alpha" (legacy tasks.json, projectName alpha), tag master (the legacy list counts as master):

    03-02 09:00  T1 pending (subtasks 1, 2 pending), T2 pending, T3 pending
          09:30  T1 in-progress                       -> T1 cycle starts
          10:00  T1.1 done
          11:00  T1 blocked                           -> blocked 2 h (7200 s)
          13:00  T1 in-progress
          14:00  T1.2 done, T1 done                   -> T1 cycle 4.5 h (16200 s); completed on 03-02
    03-03 09:00  T1 in-progress (reopened), T2 in-progress
          10:00  T1 done, T2 done                     -> T2 cycle 1 h (3600 s); 2 completed on 03-03
          11:00  T3 in-progress with a new subtask 1 (pending), T4 added (pending)
          12:00  T3 blocked                           -> blocked until the last event: 20 h (72000 s)
    03-04 08:00  T2 removed

Planning edits in alpha, at the same times (so no figure above moves): 09:30 T2 gets a priority
(high: a field update, it had none), 10:00 T2 priority high -> low and T1.1 gets details (a subtask
update), 11:00 T3 depends on 1, 13:00 T3 no longer does, 14:00 T2 retitled (a field update).

Project "taskmaster/beta" (tagged, no project name: the stream id is the project):

    03-02 10:00  master: T1 pending
          12:00  master: T1 in-progress; tag feature created with T1 in-progress
          18:00  master: T1 review; feature: T1 done   -> feature T1 cycle 6 h (21600 s)
    03-03 09:00  master: T1 done; tag feature removed -> master T1 cycle 21 h (75600 s)

Its state.json, a stream of its own ("beta/.taskmaster/state.json", the project it counts under):
03-02 10:00 on master, 12:00 switched to feature, 03-03 09:00 back to master: 2 tag switches.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import migrated

from eventstore.dialects import get_dialect
from eventstore.dialects.base import Snapshot
from eventstore.ingest import Ingestor
from eventstore.store import EventStore
from projections import analytics
from projections.metrics import Report, Scope, cross_run_report, run_report

D = get_dialect("taskmaster")


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def task(i: int, status: str = "pending", subs: list[str] | None = None) -> dict[str, Any]:
    return {"id": i, "title": f"Task {i}", "status": status, "dependencies": [],
            "subtasks": [{"id": k + 1, "title": f"step {k + 1}", "status": s} for k, s in enumerate(subs or [])]}


def alpha() -> list[tuple[datetime, dict[str, Any]]]:
    doc: dict[str, Any] = {"tasks": [task(1, subs=["pending", "pending"]), task(2), task(3)],
                           "metadata": {"projectName": "alpha"}}
    out = [(at(2, 9), copy.deepcopy(doc))]
    t = doc["tasks"]

    def step(when: datetime) -> None:
        out.append((when, copy.deepcopy(doc)))

    t[0]["status"] = "in-progress"
    t[1]["priority"] = "high"
    step(at(2, 9, 30))
    t[0]["subtasks"][0]["status"] = "done"
    t[0]["subtasks"][0]["details"] = "note"
    t[1]["priority"] = "low"
    step(at(2, 10))
    t[0]["status"] = "blocked"
    t[2]["dependencies"] = [1]
    step(at(2, 11))
    t[0]["status"] = "in-progress"
    t[2]["dependencies"] = []
    step(at(2, 13))
    t[0]["subtasks"][1]["status"] = "done"
    t[0]["status"] = "done"
    t[1]["title"] = "Task 2, revised"
    step(at(2, 14))
    t[0]["status"] = "in-progress"
    t[1]["status"] = "in-progress"
    step(at(3, 9))
    t[0]["status"] = "done"
    t[1]["status"] = "done"
    step(at(3, 10))
    t[2]["status"] = "in-progress"
    t[2]["subtasks"] = [{"id": 1, "title": "step 1", "status": "pending"}]
    t.append(task(4))
    step(at(3, 11))
    t[2]["status"] = "blocked"
    step(at(3, 12))
    del t[1]
    step(at(4, 8))
    return out


def beta() -> list[tuple[datetime, dict[str, Any]]]:
    meta = {"created": "2026-03-02T10:00:00Z", "description": "Tasks for master context"}
    doc: dict[str, Any] = {"master": {"tasks": [task(1)], "metadata": meta}}
    out = [(at(2, 10), copy.deepcopy(doc))]
    doc["master"]["tasks"][0]["status"] = "in-progress"
    doc["feature"] = {"tasks": [task(1, "in-progress")], "metadata": {"description": "Tasks for feature"}}
    out.append((at(2, 12), copy.deepcopy(doc)))
    doc["master"]["tasks"][0]["status"] = "review"
    doc["feature"]["tasks"][0]["status"] = "done"
    out.append((at(2, 18), copy.deepcopy(doc)))
    doc["master"]["tasks"][0]["status"] = "done"
    del doc["feature"]
    out.append((at(3, 9), copy.deepcopy(doc)))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EventStore, Path]]:
    d = tmp_path_factory.mktemp("taskmaster-metrics")
    url = f"sqlite:///{d}/events.db"
    migrated(url)
    s = EventStore(url)
    state = [(at(2, 10), {"currentTag": "master", "lastSwitched": "2026-03-02T10:00:00Z", "branchTagMapping": {}}),
             (at(2, 12), {"currentTag": "feature", "lastSwitched": "2026-03-02T12:00:00Z", "branchTagMapping": {}}),
             (at(3, 9), {"currentTag": "master", "lastSwitched": "2026-03-03T09:00:00Z", "branchTagMapping": {}})]
    for history, hint in ((alpha(), None), (beta(), "taskmaster/beta"), (state, "beta/.taskmaster/state.json")):
        ing = Ingestor(s, D)
        for when, doc in history:
            ing.ingest(Snapshot(doc=doc, occurred_at=when, stream_hint=hint))
    yield s, d / "analytics"
    s.close()


@pytest.fixture(scope="module")
def report(store: tuple[EventStore, Path]) -> Report:
    with analytics.reading(store[0], store[1]) as con:
        return cross_run_report(con, Scope(dialect="taskmaster"))


def test_the_history_is_recorded_with_typed_events(store: tuple[EventStore, Path]) -> None:
    types = {e.type for e in store[0].iter_all()}
    assert {"taskmaster.status_changed", "taskmaster.subtask_status_changed", "taskmaster.subtask_added",
            "taskmaster.task_added", "taskmaster.task_removed", "taskmaster.tag_created",
            "taskmaster.tag_removed", "taskmaster.priority_changed", "taskmaster.dependencies_added",
            "taskmaster.dependencies_removed", "taskmaster.task_updated", "taskmaster.subtask_updated",
            "taskmaster.tag_switched"} <= types


def test_tasks_per_project_and_tag(report: Report) -> None:
    rows = {(r["project"], r["tag"]): r for r in report.section("taskmaster_tasks").rows}
    assert set(rows) == {("alpha", "master"), ("taskmaster/beta", "master"), ("taskmaster/beta", "feature")}
    a = rows[("alpha", "master")]
    assert (a["tasks"], a["pending"], a["in_progress"], a["review"], a["blocked"], a["done"],
            a["deferred_or_cancelled"]) == (3, 1, 0, 0, 1, 1, 0)  # T1 done, T3 blocked, T4 pending; T2 removed
    assert (a["cycles"], a["cycle_p50_s"], a["cycle_p90_s"], a["cycle_max_s"]) == (2, 9900.0, 14940.0, 16200.0)
    assert (a["reopenings"], a["blocked_s"]) == (1, 79200.0)  # 7200 s (T1) + 72000 s (T3)
    assert (a["subtasks"], a["subtasks_done"], a["subtask_completion"]) == (3, 2, 0.6667)
    bm, bf = rows[("taskmaster/beta", "master")], rows[("taskmaster/beta", "feature")]
    assert (bm["tasks"], bm["done"], bm["cycles"], bm["cycle_p50_s"], bm["reopenings"]) == (1, 1, 1, 75600.0, 0)
    assert (bf["tasks"], bf["done"], bf["cycles"], bf["cycle_p50_s"]) == (0, 0, 1, 21600.0)  # the tag was removed
    assert bm["subtask_completion"] is None
    s = report.section("taskmaster_tasks").summary
    assert (s["projects"], s["tasks"], s["done"], s["cycles"], s["cycle_p50_s"], s["reopenings"],
            s["blocked_s"], s["subtask_completion"]) == (2, 4, 2, 4, 18900.0, 1, 79200.0, 0.6667)


def test_throughput_per_day(report: Report) -> None:
    rows = [(r["project"], r["tag"], r["day"], r["completed"], r["reopened"])
            for r in report.section("taskmaster_throughput").rows]
    assert rows == [("alpha", "master", "2026-03-02", 1, 0), ("alpha", "master", "2026-03-03", 2, 1),
                    ("taskmaster/beta", "feature", "2026-03-02", 1, 0),
                    ("taskmaster/beta", "master", "2026-03-03", 1, 0)]
    assert report.section("taskmaster_throughput").summary == {"completed": 5, "days_with_completions": 2}


def test_tasks_by_status_at_the_end_of_each_day(report: Report) -> None:
    rows = [(r["project"], r["tag"], r["day"], r["status"], r["tasks"])
            for r in report.section("taskmaster_status_over_time").rows]
    assert rows == [
        ("alpha", "master", "2026-03-02", "done", 1), ("alpha", "master", "2026-03-02", "pending", 2),
        ("alpha", "master", "2026-03-03", "blocked", 1), ("alpha", "master", "2026-03-03", "done", 2),
        ("alpha", "master", "2026-03-03", "pending", 1),
        ("alpha", "master", "2026-03-04", "blocked", 1), ("alpha", "master", "2026-03-04", "done", 1),
        ("alpha", "master", "2026-03-04", "pending", 1),
        ("taskmaster/beta", "feature", "2026-03-02", "done", 1),
        ("taskmaster/beta", "master", "2026-03-02", "review", 1),
        ("taskmaster/beta", "master", "2026-03-03", "done", 1)]


def test_one_runs_report_lists_its_tasks(store: tuple[EventStore, Path]) -> None:
    with analytics.reading(store[0], store[1]) as con:
        rep = run_report(con, "taskmaster/alpha")
    rows = [(r["task_id"], r["status"], r["cycle_s"], r["reopenings"], r["blocked_s"], r["subtasks"],
             r["subtasks_done"]) for r in rep.section("taskmaster_task_stats").rows]
    assert rows == [("1", "done", 16200.0, 1, 7200.0, 2, 2), ("2", None, 3600.0, 0, 0.0, 0, 0),
                    ("3", "blocked", None, 0, 72000.0, 1, 0), ("4", "pending", None, 0, 0.0, 0, 0)]
    assert [r["tag"] for r in rep.section("taskmaster_tasks").rows] == ["master"]  # this run only


def test_planning_changes_per_project(report: Report) -> None:
    rows = [(r["project"], r["priority_changes"], r["dependencies_added"], r["dependencies_removed"],
             r["task_updates"], r["subtask_updates"], r["tag_switches"]) for r in report.section("taskmaster_changes").rows]
    assert rows == [("alpha", 1, 1, 1, 2, 1, 0), ("beta/.taskmaster/state.json", 0, 0, 0, 0, 0, 2)]
    assert report.section("taskmaster_changes").summary == {"priority_changes": 1, "dependency_edits": 2,
                                                            "task_updates": 2, "tag_switches": 2}


def test_planning_change_facts_name_their_task_and_field(store: tuple[EventStore, Path]) -> None:
    """The fact rows behind the section, one per change, from the edits the module docstring lists
    (mutation testing: a task or subtask id read from the wrong key survived the counts)."""
    with analytics.reading(store[0], store[1]) as con:
        rows = con.execute("SELECT kind, tag, task_id, subtask_id, field, from_value, to_value "
                           "FROM taskmaster_changes WHERE stream_id = 'taskmaster/alpha' ORDER BY position").fetchall()
    assert rows == [("field_updated", None, "2", None, "priority", None, None),
                    ("subtask_field_updated", None, "1", "1", "details", None, None),  # 10:00, task 1 first
                    ("priority", None, "2", None, "priority", "high", "low"),
                    ("dependency_added", None, "3", None, "dependencies", None, "1"),
                    ("dependency_removed", None, "3", None, "dependencies", "1", None),
                    ("field_updated", None, "2", None, "title", None, None)]


def test_subtask_facts_follow_the_timeline(store: tuple[EventStore, Path]) -> None:
    """The subtask rows behind the task stats, from the module docstring's timeline: T1's two subtasks
    listed pending at the first version, each done later, T3's new subtask added (mutation testing: the
    listed subtasks' rows lost, or their status, survived the section's counts)."""
    with analytics.reading(store[0], store[1]) as con:
        rows = con.execute("SELECT tag, task_id, subtask_id, kind, from_status, status, occurred_at "
                           "FROM taskmaster_subtasks WHERE stream_id = 'taskmaster/alpha' "
                           "ORDER BY position, subtask_id").fetchall()
    assert rows == [(None, "1", "1", "listed", None, "pending", at(2, 9)),
                    (None, "1", "2", "listed", None, "pending", at(2, 9)),
                    (None, "1", "1", "status", "pending", "done", at(2, 10)),
                    (None, "1", "2", "status", "pending", "done", at(2, 14)),
                    (None, "3", "1", "added", None, "pending", at(3, 11))]


def test_a_change_in_a_tagged_list_names_its_tag(tmp_path: Path) -> None:
    """A planning change inside a tag's list is counted under that tag (the hand-built history's
    changes are all in the legacy, untagged list; mutation testing: dropping the tag survived)."""
    first = {"feature": {"tasks": [task(1)], "metadata": {"description": "Tasks for feature"}}}
    second = copy.deepcopy(first)
    second["feature"]["tasks"][0]["priority"] = "high"
    with EventStore(migrated(f"sqlite:///{tmp_path}/events.db")) as s:
        ing = Ingestor(s, D)
        for when, doc in ((at(2, 9), first), (at(2, 10), second)):
            ing.ingest(Snapshot(doc=doc, occurred_at=when, stream_hint="taskmaster/gamma"))
        with analytics.reading(s, tmp_path / "analytics") as con:
            rows = con.execute("SELECT kind, tag, task_id, field, occurred_at FROM taskmaster_changes").fetchall()
    assert rows == [("field_updated", "feature", "1", "priority", at(2, 10))]
