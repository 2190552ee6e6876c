"""The taskflow dialect: lens law, folder ingest, VERDICT.md parsing, simulator, catalog codec."""

from __future__ import annotations

import hashlib
import random
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import exact

from eventstore import documents
from eventstore.dialects import get_dialect
from eventstore.dialects.base import DocumentObserved, DocumentPatched, Snapshot
from eventstore.dialects.taskflow import TaskflowDialect
from eventstore.dialects.taskflow import events as ev
from eventstore.dialects.taskflow.lifecycle import KEYS, PHASES, lifecycle, write_tree
from eventstore.dialects.taskflow.simulate import simulate_trees, write_simulated_task
from eventstore.dialects.taskflow.verdict import issue_slug, parse_verdict
from eventstore.errors import IngestError
from eventstore.events import decode_event, encode_event
from eventstore.ingest import Ingestor

START = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
D = TaskflowDialect()


def sim_docs(seed: int) -> list[Any]:
    return [s.doc for s in D.simulate(random.Random(seed), run_id=f"task-{seed}", start=START)]


def law(prev: Any, nxt: Any) -> list[Any]:
    events = D.observe(prev, nxt)
    assert exact(D.fold(documents.copy(prev), events), nxt)
    return events


def codes(doc: Any) -> set[str]:
    return {f.code for f in D.validate(doc)}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


SPEC = "# Add user auth\n\nUsers sign in.\n"
BUGS = "# Bugs\n\n- null-handling: crash\n"
ADV = "# Adversarial\n\n- token-expiry: accepted late\n"
FAIL_VERDICT = ("# Referee report\n\n**Verdict:** FAIL\n\n## Findings\n\n- null-handling: lookup crashes\n"
                "- **Race on refresh** two refreshes succeed\n\n## Remaining Issues\n\n- None\n\n"
                "## Tasks for Review / Tie-Breaks\n\n- auth-gateway: who checks scopes\n")


def full_task(**extra: str) -> dict[str, str]:
    files = {"SPEC.md": SPEC, "IMPLEMENTATION.md": "# Impl\n\n- src/auth.py\n", "BUG_REPORT.md": BUGS,
             "ADVERSARIAL_BUG_REPORT.md": ADV, "DOC_REVIEW.md": "# Docs\n\nok\n"}
    files.update(extra)
    return files


def make(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def load_one(path: Path) -> Any:
    snaps = list(D.load(path))
    assert len(snaps) == 1
    return snaps[0].doc


# ------------------------------------------------------------------ registry and catalog


def test_registered_and_catalog_tags() -> None:
    assert isinstance(get_dialect("taskflow"), TaskflowDialect)
    tags = [c.event_type() for c in D.catalog]
    assert len(set(tags)) == len(tags)
    assert all(re.fullmatch(r"taskflow\.[a-z_]+", t) for t in tags)


SAMPLES: list[ev.Event] = [
    ev.TaskCreated(task="a-fix-x", kind="fix", parent="a", issue="x", starts_at="bug_find",
                   copied={"SPEC.md": "ab" * 32}, mode="autopilot", mode_source="../.autopilot"),
    ev.ArtifactWritten(name="SPEC.md", size=3, sha256="00" * 32, content="# x"),
    ev.ArtifactWritten(name="blob.bin", size=1, sha256="11" * 32, content=None, content_b64="/w=="),
    ev.ArtifactChanged(name="SPEC.md", size=0, sha256="22" * 32, content="", previous_sha256="00" * 32),
    ev.ArtifactRemoved(name="DESIGN.md", previous_sha256="33" * 32),
    ev.PhaseEntered(phase="doc_review", previous="implement", skipped=["bug_find"]),
    ev.TaskStatusChanged(status="paused", previous="active"),
    ev.ModeSet(mode="manual", source=".manual"),
    ev.VerdictIssued(verdict="FAIL", parsed_by="field", line=3, sha256="44" * 32,
                     findings=[ev.VerdictItem(issue="perf", text="perf: slow")],
                     tie_breaks=[ev.VerdictItem(issue="gw", text="gw: who")]),
    ev.VerdictUnparseable(sha256="55" * 32, reason="conflicting verdicts: PASS (line 1), FAIL (line 2)"),
    ev.VerdictWithdrawn(previous="PASS"),
    ev.FollowUpTaskSpawned(kind="tiebreak", task="a-tiebreak-gw", parent="a", issue="gw",
                           starts_at="research", files=["SPEC.md", "BUG_REPORT.md"]),
    ev.AutopilotPaused(reason="human intervention required", verdict="NEEDS_REVIEW", pending=["a-review-perf"]),
    ev.AutopilotResumed(previous_verdict="FAIL"),
    ev.SubtaskCreated(task="sub-a", parent="a"),
]


def test_every_catalog_event_round_trips() -> None:
    assert {type(e) for e in SAMPLES} == set(D.catalog)
    for e in SAMPLES:
        back = decode_event(e.event_type(), type(e).schema_version, encode_event(e))
        assert back == e and type(back) is type(e)
        summary = D.summarize(e)
        assert summary and summary != type(e).__name__


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_derived_events_round_trip(seed: int) -> None:
    prev = None
    for doc in sim_docs(seed):
        for e in D.observe(prev, doc):
            assert decode_event(e.event_type(), type(e).schema_version, encode_event(e)) == e
        prev = doc


# ------------------------------------------------------------------ the lens law


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 100_000))
def test_lens_law_on_simulated_runs_without_residual(seed: int) -> None:
    docs = sim_docs(seed)
    first = law(None, docs[0])
    assert isinstance(first[0], ev.TaskCreated)
    for prev, nxt in zip(docs, docs[1:], strict=False):
        events = law(prev, nxt)
        assert events, "every simulated step changes the folder"
        # realistic transitions are fully explained by domain events
        assert not any(isinstance(e, (DocumentPatched, DocumentObserved)) for e in events)
    # a task first seen at its last state is still explained by domain events (metrics)
    late = law(None, docs[-1])
    assert not any(isinstance(e, (DocumentPatched, DocumentObserved)) for e in late)
    if docs[-1]["verdict"] is not None:
        assert any(isinstance(e, (ev.VerdictIssued, ev.VerdictUnparseable)) for e in late)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 100_000), st.data())
def test_lens_law_on_arbitrary_simulated_pairs(seed: int, data: st.DataObject) -> None:
    docs = sim_docs(seed)
    i = data.draw(st.integers(0, len(docs) - 1))
    j = data.draw(st.integers(0, len(docs) - 1))
    law(docs[i], docs[j])


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False),
                      st.text(max_size=5))
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                          max_leaves=6)


def mutate(doc: Any, data: st.DataObject) -> Any:
    return mutate_expecting(doc, data)[0]


def mutate_expecting(doc: Any, data: st.DataObject) -> tuple[Any, tuple[str, str] | None]:
    """An out-of-spec edit of ``doc`` and the (code, path) finding validate must give for it, where
    the edit alone decides one (an unknown or missing key, a phase outside the enum or not text)."""
    doc = documents.copy(doc)
    expect: tuple[str, str] | None = None
    kind = data.draw(st.sampled_from(["unknown-key", "replace-top", "delete-top", "reorder", "artifact",
                                      "phase", "verdict-value", "follow-up", "int-float"]))
    keys = list(doc)
    if kind == "unknown-key":
        key = data.draw(st.text(min_size=1, max_size=6).filter(lambda k: k not in doc))
        doc[key] = data.draw(json_value)
        expect = ("unknown-key", documents.pointer(key))
    elif kind == "replace-top":
        doc[data.draw(st.sampled_from(keys))] = data.draw(json_value)
    elif kind == "delete-top":
        key = data.draw(st.sampled_from(keys))
        del doc[key]
        expect = ("missing-key", documents.pointer(key)) if key in KEYS else None
    elif kind == "reorder":
        order = data.draw(st.permutations(keys))
        doc = {k: doc[k] for k in order}
    elif kind == "artifact":
        doc["artifacts"][data.draw(st.sampled_from(["SPEC.md", "VERDICT.md", "notes.txt"]))] = data.draw(
            st.fixed_dictionaries({"size": st.integers(0, 9), "sha256": st.text(max_size=3),
                                   "content": st.none() | st.text(max_size=9)}) | json_value)
    elif kind == "phase":
        doc["phase"] = phase = data.draw(st.text(max_size=8) | json_leaf)
        if type(phase) is not str:
            expect = ("wrong-type", "/phase")
        elif phase not in PHASES:
            expect = ("phase-not-in-enum", "/phase")
    elif kind == "verdict-value":
        doc["verdict"] = {"value": data.draw(st.sampled_from(["PASS", "maybe", "unparsed"])), "extra": 1}
    elif kind == "follow-up":
        doc["follow_ups"].append(data.draw(json_value))
    else:
        doc["mode_source"] = 1.0 if data.draw(st.booleans()) else 1
        expect = ("wrong-type", "/mode_source")
    return doc, expect


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 100_000), st.data())
def test_lens_law_on_mutated_documents(seed: int, data: st.DataObject) -> None:
    docs = sim_docs(seed)
    i = data.draw(st.integers(0, len(docs) - 1))
    bad, expect = mutate_expecting(docs[i], data)
    law(None, bad)
    law(docs[i], bad)
    law(bad, docs[-1])
    mutable = (isinstance(bad, dict) and isinstance(bad.get("artifacts"), dict)
               and isinstance(bad.get("follow_ups"), list))  # the mutator edits these in place
    law(bad, mutate(bad, data) if mutable else bad)
    found = {(f.code, f.path) for f in D.validate(bad)}  # never raises, and names what the edit broke
    if expect is not None:
        assert expect in found, (expect, found)
    D.describe(bad)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 100_000), st.text(min_size=1, max_size=8).filter(lambda k: k not in (
    "task", "origin", "mode", "mode_source", "phase", "status", "artifacts", "verdict", "follow_ups",
    "paused", "subtasks")))
def test_unknown_keys_survive_and_are_reported(seed: int, key: str) -> None:
    docs = sim_docs(seed)
    bad = documents.copy(docs[-1])
    bad[key] = {"kept": [1, 2.0]}
    events = law(docs[-1], bad)
    assert any(isinstance(e, DocumentPatched) for e in events)
    found = [f for f in D.validate(bad) if f.code == "unknown-key"]
    assert [f.path for f in found] == [documents.pointer(key)]


def test_simulated_runs_are_valid_apart_from_planned_findings() -> None:
    allowed = {"empty-artifact", "follow-up-missing", "skipped-mandatory-phase", "verdict-unparseable"}
    seen: dict[str, set[str]] = {}
    for seed in range(60):
        for doc in sim_docs(seed):
            for f in D.validate(doc):
                assert f.code in allowed, (seed, f)
                seen.setdefault(f.code, set()).add(f.path)
    # every planned finding is really produced, at the member it is about
    assert set(seen) == allowed, seen
    assert seen["verdict-unparseable"] == {"/verdict"} and seen["follow-up-missing"] == {"/follow_ups"}
    assert all(p.startswith("/artifacts/") for p in seen["empty-artifact"] | seen["skipped-mandatory-phase"])


def test_observe_of_a_foreign_first_document_is_a_snapshot() -> None:
    events = law(None, [1, 2, 3])
    assert len(events) == 1 and isinstance(events[0], DocumentObserved)


def test_a_friday_document_is_refused_naming_where_and_the_missing_fields(store: Any) -> None:
    """A lifecycle is told by "task", "phase", "status" and "artifacts"; FRIDAY's state has only a
    status.  ``load`` builds lifecycles only, so this is what an API caller handing ingest a
    snapshot of another dialect sees."""
    friday = next(iter(get_dialect("friday").simulate(random.Random(1), run_id="run-1", start=START))).doc
    assert "status" in friday
    snap = Snapshot(doc=friday, raw=None, source={"dir": "project/tasks/add-auth"}, stream_hint="taskflow/add-auth")
    with pytest.raises(IngestError) as err:
        Ingestor(store, D).ingest(snap)
    assert str(err.value) == ('project/tasks/add-auth: not a taskflow document: required field(s) "task", "phase", '
                              '"artifacts" missing (wrong dialect?). Nothing was written.')
    assert store.stream_version("taskflow/add-auth") == 0


# ------------------------------------------------------------------ folders on disk


def test_single_task_folder(tmp_path: Path) -> None:
    folder = make(tmp_path / "tasks" / "add-user-auth",
                  {"SPEC.md": SPEC, "DESIGN.md": "# Design\n\nA module.\n", "IMPLEMENTATION.md": "# Impl\n"})
    (folder / ".DS_Store").write_bytes(b"\0")
    snaps = list(D.load(folder))
    assert len(snaps) == 1
    snap = snaps[0]
    doc = snap.doc
    assert snap.stream_hint == "taskflow/add-user-auth" == D.stream_id(doc)
    assert snap.raw is None and snap.source == {"dir": str(folder)}
    assert snap.occurred_at is not None and snap.occurred_at.tzinfo is not None
    assert list(doc) == ["task", "origin", "mode", "mode_source", "phase", "status", "artifacts", "verdict",
                         "follow_ups", "paused", "subtasks"]
    assert doc["task"] == "add-user-auth" and doc["origin"] is None
    assert (doc["mode"], doc["mode_source"]) == ("manual", "default")
    assert doc["phase"] == "bug_find" and doc["status"] == "active"
    assert list(doc["artifacts"]) == ["SPEC.md", "DESIGN.md", "IMPLEMENTATION.md"]
    assert doc["artifacts"]["SPEC.md"] == {"size": len(SPEC.encode()), "sha256": sha(SPEC), "content": SPEC}
    info = D.describe(doc)
    assert (info.task_id, info.title, info.status, info.phase) == ("add-user-auth", "Add user auth", "active", "bug_find")
    assert codes(doc) == set()
    # a file path (what a watcher reports) reads its folder
    assert exact(load_one(folder / "SPEC.md"), doc)


def test_empty_folder_is_a_new_task_in_research(tmp_path: Path) -> None:
    doc = load_one(make(tmp_path / "tasks" / "new-thing", {}))
    assert (doc["phase"], doc["status"], doc["artifacts"]) == ("research", "active", {})


def test_empty_file_does_not_complete_its_phase(tmp_path: Path) -> None:
    folder = make(tmp_path / "t", {"SPEC.md": SPEC, "IMPLEMENTATION.md": ""})
    doc = load_one(folder)
    assert doc["artifacts"]["IMPLEMENTATION.md"]["size"] == 0
    assert doc["phase"] == "implement"  # in progress, not bug_find
    assert "empty-artifact" in codes(doc)
    (folder / "IMPLEMENTATION.md").write_text("  \n\n")  # whitespace only is still empty
    assert load_one(folder)["phase"] == "implement"
    (folder / "SPEC.md").write_text("")
    assert load_one(folder)["phase"] == "research"  # an empty file cannot jump ahead
    (folder / "IMPLEMENTATION.md").unlink()
    assert load_one(folder)["phase"] == "research"
    make(folder, {"SPEC.md": SPEC, "DESIGN.md": ""})
    assert load_one(folder)["phase"] == "design"  # an optional phase, visibly started


def test_skipped_mandatory_phase_is_a_finding(tmp_path: Path) -> None:
    folder = make(tmp_path / "t", {"SPEC.md": SPEC, "IMPLEMENTATION.md": "# Impl\n", "DOC_REVIEW.md": "# Docs\n"})
    doc = load_one(folder)
    assert doc["phase"] == "referee"
    skipped = [f for f in D.validate(doc) if f.code == "skipped-mandatory-phase"]
    assert [f.path for f in skipped] == ["/artifacts/BUG_REPORT.md", "/artifacts/ADVERSARIAL_BUG_REPORT.md"]
    assert all(f.severity == "error" for f in skipped)
    # the transition that skipped them says so
    before = load_one(make(tmp_path / "u", {"SPEC.md": SPEC, "IMPLEMENTATION.md": "# Impl\n"}))
    before["task"] = "t"
    entered = [e for e in law(before, doc) if isinstance(e, ev.PhaseEntered)]
    assert entered == [ev.PhaseEntered(phase="referee", previous="bug_find",
                                       skipped=["bug_find", "adversarial_bug_find"])]


def test_manual_fail_spawns_linked_follow_ups(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    parent = make(tasks / "add-user-auth", full_task(**{"VERDICT.md": FAIL_VERDICT}))
    doc = load_one(parent)
    v = doc["verdict"]
    assert (v["value"], v["parsed_by"], v["line"], v["reason"]) == ("FAIL", "field", 3, None)
    assert v["sha256"] == sha(FAIL_VERDICT) == doc["artifacts"]["VERDICT.md"]["sha256"]
    assert [i["issue"] for i in v["findings"]] == ["null-handling", "race-on-refresh"]
    assert v["remaining_issues"] == [] and [i["issue"] for i in v["tie_breaks"]] == ["auth-gateway"]
    assert (doc["phase"], doc["status"], doc["paused"]) == ("review", "failed", None)
    missing = [f for f in D.validate(doc) if f.code == "follow-up-missing"]
    assert len(missing) == 3  # the orchestrator must still create them
    # the orchestrator creates the folders: empty IMPLEMENTATION.md + copies
    copies = {n: (parent / n).read_text() for n in ("SPEC.md", "BUG_REPORT.md", "ADVERSARIAL_BUG_REPORT.md")}
    for name in ("add-user-auth-fix-null-handling", "add-user-auth-fix-race-on-refresh",
                 "add-user-auth-tiebreak-auth-gateway"):
        make(tasks / name, {**copies, "IMPLEMENTATION.md": ""})
    make(tasks / "unrelated-task", {"SPEC.md": "# Other\n"})
    after = load_one(parent)
    assert [(f["kind"], f["task"], f["issue"], f["starts_at"]) for f in after["follow_ups"]] == [
        ("fix", "add-user-auth-fix-null-handling", "null-handling", "bug_find"),
        ("fix", "add-user-auth-fix-race-on-refresh", "race-on-refresh", "bug_find"),
        ("tiebreak", "add-user-auth-tiebreak-auth-gateway", "auth-gateway", "research"),
    ]
    assert after["follow_ups"][0]["files"] == ["SPEC.md", "BUG_REPORT.md", "ADVERSARIAL_BUG_REPORT.md"]
    assert "follow-up-missing" not in codes(after)
    spawned = [e for e in law(doc, after) if isinstance(e, ev.FollowUpTaskSpawned)]
    assert [(e.kind, e.parent) for e in spawned] == [("fix", "add-user-auth")] * 2 + [("tiebreak", "add-user-auth")]

    # the follow-up itself: linked, starts at Bug Find, inherited copies complete nothing
    fix = tasks / "add-user-auth-fix-null-handling"
    child = load_one(fix)
    assert child["origin"] == {"kind": "fix", "parent": "add-user-auth", "issue": "null-handling",
                               "starts_at": "bug_find", "copied": {n: sha(t) for n, t in copies.items()}}
    assert child["phase"] == "bug_find" and codes(child) <= {"empty-artifact"}
    first = law(None, child)
    assert first[0] == ev.TaskCreated(task="add-user-auth-fix-null-handling", kind="fix", parent="add-user-auth",
                                      issue="null-handling", starts_at="bug_find",
                                      copied={n: sha(t) for n, t in copies.items()})
    (fix / "IMPLEMENTATION.md").write_text("# Fix\n\nGuard against None.\n")
    assert load_one(fix)["phase"] == "bug_find"
    (fix / "BUG_REPORT.md").write_text("# Bugs\n\nnone left\n")
    assert load_one(fix)["phase"] == "adversarial_bug_find"
    tie = load_one(tasks / "add-user-auth-tiebreak-auth-gateway")
    assert tie["phase"] == "research" and tie["origin"]["kind"] == "tiebreak"

    # the whole tasks/ directory: one snapshot per folder
    snaps = list(D.load(tasks))
    assert [s.stream_hint for s in snaps] == [f"taskflow/{n}" for n in sorted(p.name for p in tasks.iterdir())]
    by = {s.doc["task"]: s.doc for s in snaps}
    assert exact(by["add-user-auth"], after)
    assert by["unrelated-task"]["origin"] is None and by["unrelated-task"]["follow_ups"] == []


def test_autopilot_pauses_instead_of_spawning(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / ".autopilot").write_text("")
    folder = make(tasks / "add-user-auth", full_task(**{"VERDICT.md": FAIL_VERDICT}))
    doc = load_one(folder)
    assert (doc["mode"], doc["mode_source"]) == ("autopilot", "../.autopilot")
    assert doc["status"] == "paused" and doc["follow_ups"] == []
    assert doc["paused"] == {"reason": "human intervention required", "verdict": "FAIL",
                             "pending": ["add-user-auth-fix-null-handling", "add-user-auth-fix-race-on-refresh",
                                         "add-user-auth-tiebreak-auth-gateway"]}
    assert codes(doc) == set()  # no follow-up is expected in autopilot
    before = documents.copy(doc)
    before.update(artifacts={k: v for k, v in doc["artifacts"].items() if k != "VERDICT.md"},
                  verdict=None, paused=None, status="active", phase="referee")
    events = law(before, doc)
    assert [type(e) for e in events] == [ev.ArtifactWritten, ev.VerdictIssued, ev.PhaseEntered,
                                         ev.TaskStatusChanged, ev.AutopilotPaused]
    # a .manual marker in the task folder overrides the project's autopilot
    (folder / ".manual").write_text("")
    manual = load_one(folder)
    assert (manual["mode"], manual["mode_source"], manual["paused"]) == ("manual", ".manual", None)
    assert [type(e) for e in law(doc, manual)] == [ev.ModeSet, ev.TaskStatusChanged, ev.AutopilotResumed]
    # PASS with tie-breaks pauses autopilot too; plain PASS completes
    (folder / ".manual").unlink()
    (folder / "VERDICT.md").write_text("# Verdict: PASS\n\n## Tie-Breaks\n\n- auth-gateway: scopes\n")
    assert load_one(folder)["status"] == "paused"
    (folder / "VERDICT.md").write_text("# Verdict: PASS\n")
    done = load_one(folder)
    assert (done["phase"], done["status"], done["paused"]) == ("complete", "complete", None)


def test_unparseable_verdict_is_never_a_pass(tmp_path: Path) -> None:
    text = "# Referee notes\n\nThis mostly passes, I think.\n\n## Findings\n\n- perf: slow\n"
    folder = make(tmp_path / "t", full_task(**{"VERDICT.md": text}))
    (folder / ".autopilot").write_text("")
    doc = load_one(folder)
    v = doc["verdict"]
    assert (v["value"], v["parsed_by"], v["line"]) == ("unparsed", None, None)
    assert v["sha256"] == sha(text) and "no line states" in v["reason"]
    assert (doc["phase"], doc["status"], doc["paused"], doc["follow_ups"]) == ("review", "unparsed", None, [])
    found = [f for f in D.validate(doc) if f.code == "verdict-unparseable"]
    assert found and found[0].path == "/verdict" and found[0].severity == "error"
    events = law(None, doc)
    assert any(isinstance(e, ev.VerdictUnparseable) for e in events)
    assert not any(isinstance(e, ev.VerdictIssued) for e in events)
    # emptied VERDICT.md withdraws the verdict; the referee phase is open again
    (folder / "VERDICT.md").write_text("")
    emptied = load_one(folder)
    assert emptied["verdict"] is None and emptied["phase"] == "referee"
    assert any(isinstance(e, ev.VerdictWithdrawn) for e in law(doc, emptied))


def test_tasks_dir_with_subtasks_and_project_root(tmp_path: Path) -> None:
    tasks = tmp_path / "proj" / "tasks"
    make(tasks / "big", {"SPEC.md": SPEC, "DECOMPOSITION.md": "# Parts\n\n- part-a\n- part-b\n"})
    make(tasks / "big" / "part-a", {"SPEC.md": "# Part A\n"})
    make(tasks / "big" / "part-b", {})
    make(tasks / "small", {"SPEC.md": "# Small\n"})
    for path in (tasks, tmp_path / "proj"):
        docs = {s.doc["task"]: s.doc for s in D.load(path)}
        assert list(docs) == ["big", "part-a", "part-b", "small"]
        assert docs["big"]["phase"] == "subtask_research" and docs["big"]["subtasks"] == ["part-a", "part-b"]
        assert docs["part-a"]["origin"]["kind"] == "subtask" and docs["part-a"]["phase"] == "implement"
        assert docs["part-b"]["phase"] == "research"
    assert [s.doc["task"] for s in D.load(tasks / "big")] == ["big", "part-a", "part-b"]
    with pytest.raises(IngestError):
        list(D.load(tmp_path / "missing"))


def test_loaded_folders_equal_the_simulated_lifecycle(tmp_path: Path) -> None:
    """Every simulated step, written to disk and loaded back, is the simulator's document."""
    seen_kinds: set[str] = set()
    for seed in range(12):
        steps = simulate_trees(random.Random(seed), run_id=f"task-{seed}", start=START)
        docs = sim_docs(seed)
        assert len(steps) == len(docs)
        tasks = tmp_path / f"s{seed}" / "tasks"
        for (_, tree), doc in zip(steps, docs, strict=False):
            write_tree(tasks, tree)
            loaded = {s.doc["task"]: s.doc for s in D.load(tasks)}
            assert exact(loaded[f"task-{seed}"], doc)
            assert exact(load_one_named(tasks / f"task-{seed}", f"task-{seed}"), doc)
            for name, other in loaded.items():
                assert exact(other, lifecycle(tree, name))
                if other["origin"] is not None:
                    seen_kinds.add(other["origin"]["kind"])
                    assert other["phase"] == other["origin"]["starts_at"]
    assert "fix" in seen_kinds or "review" in seen_kinds


def load_one_named(folder: Path, name: str) -> Any:
    return next(s.doc for s in D.load(folder) if s.doc["task"] == name)


def test_write_simulated_task_helper(tmp_path: Path) -> None:
    name = write_simulated_task(tmp_path / "tasks", random.Random(7), run_id="Add Auth", start=START)
    assert name == "add-auth" and (tmp_path / "tasks" / name / "SPEC.md").is_file()
    last = list(D.simulate(random.Random(7), run_id="Add Auth", start=START))[-1]
    assert exact(load_one_named(tmp_path / "tasks", name), last.doc)
    write_simulated_task(tmp_path / "tasks", random.Random(7), run_id="Add Auth", start=START, step=0)
    assert exact(load_one(tmp_path / "tasks" / name),
                          next(iter(D.simulate(random.Random(7), run_id="Add Auth", start=START))).doc)


# ------------------------------------------------------------------ the simulator


def test_simulator_is_deterministic() -> None:
    a = list(D.simulate(random.Random(42), run_id="r", start=START))
    b = list(D.simulate(random.Random(42), run_id="r", start=START))
    assert [(s.doc, s.occurred_at, s.stream_hint, s.source) for s in a] == \
           [(s.doc, s.occurred_at, s.stream_hint, s.source) for s in b]
    assert all(x.occurred_at < y.occurred_at for x, y in zip(a, a[1:], strict=False))  # type: ignore[operator]
    c = list(D.simulate(random.Random(43), run_id="r", start=START))
    assert [s.doc for s in a] != [s.doc for s in c]


def test_simulator_covers_the_lifecycle() -> None:
    finals, rules, empties, pauses, kinds, modes = set(), set(), 0, 0, set(), set()
    skipped = 0
    for seed in range(200):
        docs = sim_docs(seed)
        assert docs[0]["artifacts"] == {} and docs[0]["phase"] == "research"
        final = docs[-1]
        v = final["verdict"]
        finals.add(v["value"] if v else None)
        if v and v["parsed_by"]:
            rules.add(v["parsed_by"])
        empties += any(a["size"] == 0 for d in docs for a in d["artifacts"].values())
        pauses += any(d["paused"] for d in docs)
        kinds |= {f["kind"] for f in final["follow_ups"]}
        modes |= {d["mode"] for d in docs}
        skipped += "skipped-mandatory-phase" in codes(final)
        if final["mode"] == "autopilot":
            assert final["follow_ups"] == []
    assert finals == {"PASS", "FAIL", "NEEDS_REVIEW", "unparsed"}
    assert rules == {"heading", "field", "heading-next-line", "bare-line"}
    assert kinds == {"fix", "review", "tiebreak"} and modes == {"manual", "autopilot"}
    assert empties > 20 and pauses > 5 and skipped > 3


# ------------------------------------------------------------------ VERDICT.md


@pytest.mark.parametrize("text, value, rule, line", [
    ("# Verdict: PASS\n", "PASS", "heading", 1),
    ("## Final verdict — needs review\n", "NEEDS_REVIEW", "heading", 1),
    ("# Report\n\n**Verdict:** FAIL\n", "FAIL", "field", 3),
    ("- verdict: Passed - minor notes only\n", "PASS", "field", 1),
    ("# Report\n\n## Verdict\n\nNEEDS-REVIEW\n", "NEEDS_REVIEW", "heading-next-line", 5),
    ("# Decision\n\n**FAIL**\n", "FAIL", "bare-line", 3),
    ("```\nVerdict: FAIL\n```\nVerdict: PASS\n", "PASS", "field", 4),
    ("# Verdict: PASS\n\nVerdict: FAIL\n", "PASS", "heading", 1),  # the higher-priority rule decides
])
def test_verdict_rules(text: str, value: str, rule: str, line: int) -> None:
    p = parse_verdict(text)
    assert (p.value, p.parsed_by, p.line, p.reason) == (value, rule, line, None)


@pytest.mark.parametrize("text, reason", [
    ("", "no line states"),
    ("The tests pass and nothing fails.\n", "no line states"),
    ("Verdict: probably passes\n", "no line states"),
    ("Verdict: PASS\n\nVerdict: FAIL\n", "conflicting verdicts: PASS (line 1), FAIL (line 3)"),
    ("Verdict: PASS/FAIL\n", "line 1 names more than one verdict"),
    ("pass\n", "no line states"),  # a bare verdict must be upper case
])
def test_unparseable_verdicts(text: str, reason: str) -> None:
    p = parse_verdict(text)
    assert p.value is None and p.parsed_by is None and p.reason is not None and reason in p.reason


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_text_without_a_verdict_word_never_parses(text: str) -> None:
    if re.search(r"pass|fail|needs", text, re.IGNORECASE):
        text = re.sub(r"pass|fail|needs", "x", text, flags=re.IGNORECASE)
    assert parse_verdict(text).value is None


def test_sections_and_slugs() -> None:
    p = parse_verdict(FAIL_VERDICT + "\n## Findings\n\n1. perf: slow\n2. perf: slower\n")
    assert [i.issue for i in p.findings] == ["null-handling", "race-on-refresh", "perf", "perf-2"]
    assert p.findings[1].text == "**Race on refresh** two refreshes succeed"
    assert issue_slug("The cache is never invalidated after a write") == "the-cache-is-never"
    assert issue_slug("`auth/gateway`: x") == "auth-gateway"
    assert issue_slug("!!!") == "item"


def test_validate_survives_follow_ups_that_are_not_a_list() -> None:
    """Found by the mutated-document property: a manual-mode task whose follow_ups is a number."""
    doc = next(d for d in sim_docs(0) if isinstance(d, dict) and d.get("mode") == "manual")
    bad = documents.copy(doc)
    bad["follow_ups"] = 1.0
    found = {(f.code, f.path, f.severity) for f in D.validate(bad)}
    assert ("wrong-type", "/follow_ups", "error") in found


def test_follow_up_appearing_in_a_document_without_task_keeps_the_lens_law() -> None:
    """Found by Hypothesis: in a run whose ``task`` key is missing, a follow-up that appears
    raised KeyError in derive; the follow-up has no parent to name, so it is recorded as a patch."""
    prev = documents.copy(sim_docs(0)[-1])
    del prev["task"]
    assert isinstance(prev["follow_ups"], list)
    nxt = documents.copy(prev)
    nxt["follow_ups"] = [*nxt["follow_ups"], {}]
    law(prev, nxt)
