"""FRIDAY, taskflow and envelope through the CLI: ingest, replay, log, bad input."""

from __future__ import annotations

import json
import random
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from oracles import assert_exact

from eventstore.dialects.envelope.simulate import script, write_transcripts
from eventstore.dialects.taskflow.lifecycle import write_tree
from eventstore.dialects.taskflow.simulate import simulate_trees, write_simulated_task

START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)



def test_taskflow_folder_ingest_replay_restore(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tasks = tmp_path / "tasks"
    name = write_simulated_task(tasks, random.Random(4), run_id="login-bug", start=START)
    r = run("ingest", "taskflow", str(tasks), "--json")
    assert r.exit_code == 0, r.output
    stream = json.loads(r.output.splitlines()[0])["stream"]
    doc = json.loads(run("replay", stream, "--json").output)
    assert doc["task"] == name and doc["artifacts"]
    out = tmp_path / "restored"
    assert run("replay", stream, "--restore", str(out)).exit_code == 0
    for artifact in doc["artifacts"]:
        assert (out / name / artifact).read_bytes() == (tasks / name / artifact).read_bytes()
    log = run("log", stream).output
    assert "taskflow." in log


def test_taskflow_progress_one_step_at_a_time(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tasks = tmp_path / "tasks"
    versions = []
    for _, tree in simulate_trees(random.Random(9), run_id="cache-layer", start=START):
        if tasks.exists():
            shutil.rmtree(tasks)
        write_tree(tasks, tree)
        r = run("ingest", "taskflow", str(tasks), "--json")
        assert r.exit_code == 0, r.output
        versions.append(json.loads(r.output.splitlines()[0])["version"])
    assert versions == sorted(versions) and versions[-1] > 3
    types = {json.loads(x)["type"] for x in run("log", "taskflow/cache-layer", "--json").output.splitlines()}
    assert "taskflow.phase_entered" in types and "taskflow.artifact_written" in types


def test_envelope_transcripts(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    turns = write_transcripts(random.Random(5), tmp_path / "turns", run_id="run-5", start=START)
    r = run("ingest", "envelope", *map(str, turns), "--json")
    assert r.exit_code == 0, r.output
    streams = {json.loads(x)["stream"] for x in r.output.splitlines()}
    [stream] = streams
    doc = json.loads(run("replay", stream, "--json").output)
    # the oracle: the last envelope the simulator's script emitted without a rendering defect
    last = [t.envelope for t in script(random.Random(5), start=START) if t.defect is None][-1]
    assert_exact(doc, last)
    log = run("log", stream).output
    assert "envelope.envelope_emitted" in log


def test_envelope_corpus_files(run, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    f = corpus / "agentic-workflow" / "envelopes" / "execute-phase.READY_FOR_REVIEW.json"
    r = run("ingest", "envelope", str(f), "--stream", "corpus-unit", "--json")
    assert r.exit_code == 0, r.output
    assert_exact(json.loads(run("replay", "corpus-unit", "--json").output), json.loads(f.read_text()))


@pytest.mark.parametrize(
    ("dialect", "content", "message"),
    [
        ("friday", "{ not json", "not valid JSON at line 1, column 3"),
        ("mapipe", '{"status": "complete", "last_updated": "2026-01-01"}',
         'not a mapipe document: required field(s) "schemaVersion", "taskId" missing (wrong dialect?)'),
        ("friday", '{"taskId": "X", "schemaVersion": "2.2.0", "status": "running"}',
         'not a friday document: required field(s) "next_action" missing (wrong dialect?)'),
        ("envelope", '{"taskId": "X"}', 'not an envelope document: required field(s) "state" missing'),
        ("friday", "[]", "friday state documents are JSON objects, got array"),
    ],
)
def test_bad_input_is_refused_and_nothing_written(run, tmp_path: Path, dialect: str, content: str,
                                                  message: str) -> None:  # type: ignore[no-untyped-def]
    """--strict refuses a history with a bad version whole; without it the bad version is recorded
    as document.unreadable (its bytes and the same message) and the document stays the good one;
    an input with nothing readable is refused either way (wrong dialect, not a history)."""
    good_doc = {"taskId": "T", "schemaVersion": "2.2.0", "status": "fresh", "next_action": "wait", "state": "OK"}
    good = tmp_path / "a-good.json"
    good.write_text(json.dumps(good_doc))
    bad = tmp_path / "b-bad.json"
    bad.write_text(content)
    r = run("ingest", dialect, str(good), str(bad), "--stream", "S", "--strict")
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("Error: ") and message in r.stderr, r.stderr
    assert "b-bad.json" in r.stderr
    assert run("log", "S").exit_code == 1  # nothing of the command was written
    r = run("ingest", dialect, str(bad), "--stream", "S")
    assert r.exit_code == 1 and message in r.stderr and "No readable version" in r.stderr, r.stderr
    assert run("log", "S").exit_code == 1

    r = run("ingest", dialect, str(good), str(bad), "--stream", "S", "--json")
    assert r.exit_code == 0, r.output
    first, second = (json.loads(line) for line in r.output.splitlines())
    assert second["version"] == first["version"] + 1 and message in second["unreadable"]
    [rec] = [json.loads(line) for line in run("log", "S", "--json", "--after", str(first["version"])).output.splitlines()]
    assert rec["type"] == "document.unreadable" and message in rec["data"]["error"]
    assert rec["meta"]["findings"][0]["code"].startswith("unreadable-")
    assert run("replay", "S", "--raw").stdout_bytes == bad.read_bytes()
    shown = run("replay", "S", "--json")
    assert json.loads(shown.stdout) == good_doc
    assert f"version {second['version']}: unreadable" in shown.stderr
