"""Where versions come from: every commit of a git history (side branches, merges, deletions),
the order of a folder's files, the time of each version and the stream a generic file takes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from eventstore.errors import IngestError
from eventstore.ingest import ORDERS, order_files


def _git(repo: Path, *args: str, when: int | None = None, check: bool = True) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ann Author", "GIT_AUTHOR_EMAIL": "ann@example.org",
           "GIT_COMMITTER_NAME": "Cy Committer", "GIT_COMMITTER_EMAIL": "cy@example.org",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"2026-01-01T00:{when:02d}:00+00:00"
    r = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=check)
    return r.stdout.strip()


@pytest.fixture
def branchy_repo(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """main: v1 -> v2 -> merge -s ours side -> v3 -> conflicting merge of side2 committed with its
    markers -> resolved -> deleted -> re-created.  side: "side" (overridden by the ours-merge);
    side2: "side2".  Returns the repository and the committed bytes by label."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    state = repo / "state.json"
    versions: dict[str, bytes] = {}

    def commit(label: str, text: str | None, when: int) -> None:
        if text is None:
            _git(repo, "rm", "-q", "state.json")
        else:
            state.write_text(text)
            _git(repo, "add", "state.json")
            versions[label] = text.encode()
        _git(repo, "commit", "-qm", label, when=when)

    commit("v1", '{"step": 1}\n', 1)
    _git(repo, "checkout", "-qb", "side")
    commit("side", '{"step": "side"}\n', 2)
    _git(repo, "checkout", "-q", "main")
    commit("v2", '{"step": 2}\n', 3)
    _git(repo, "merge", "-q", "-s", "ours", "side", "-m", "merge side, keep ours", when=4)
    _git(repo, "checkout", "-qb", "side2")
    commit("side2", '{"step": "side2"}\n', 5)
    _git(repo, "checkout", "-q", "main")
    commit("v3", '{"step": 3}\n', 6)
    _git(repo, "merge", "-q", "side2", when=7, check=False)  # conflicts: the markers get committed
    assert b"<<<<<<<" in state.read_bytes()
    versions["conflict"] = state.read_bytes()
    _git(repo, "commit", "-qam", "merge side2 (markers committed)", when=7)
    commit("resolved", '{"step": 4}\n', 8)
    commit("deleted", None, 9)
    commit("recreated", '{"step": 5, "again": true}\n', 10)
    return repo, versions


def _log(run, stream: str) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    return [json.loads(line) for line in run("log", stream, "--json").stdout.splitlines()]


def test_git_records_every_committed_version(run, branchy_repo) -> None:  # type: ignore[no-untyped-def]
    repo, v = branchy_repo
    r = run("ingest", "generic", "--git", f"{repo}:state.json", "--json")
    assert r.exit_code == 0, r.output
    # no --stream and no id in the document: the repository path names the stream
    assert {json.loads(x)["stream"] for x in r.stdout.splitlines()} == {"state.json"}
    # ten commits touch the file; the ours-merge gives back v2's bytes, which v2 recorded just before
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["version"] for x in results] == [1, 2, 3, 3, 4, 5, 6, 7, 8, 9]
    assert [i for i, x in enumerate(results) if "removed" in x] == [8] and results[8]["removed"] is True
    events = _log(run, "state.json")
    subjects = [_git(repo, "log", "-1", "--format=%s", e["meta"]["source"]["git"]["commit"]) for e in events]
    assert subjects == ["v1", "side", "v2", "side2", "v3",  # commit-time order, side branches included
                        "merge side2 (markers committed)", "resolved", "deleted", "recreated"]
    types = [e["type"] for e in events]
    assert types[5] == "document.unreadable" and types[7] == "document.removed"
    assert types[8] == "document.observed"  # the re-created file continues the stream
    expected_raw = [v["v1"], v["side"], v["v2"], v["side2"], v["v3"], v["conflict"], v["resolved"], None,
                    v["recreated"]]
    for version, raw in enumerate(expected_raw, 1):
        out = run("replay", "state.json", "--upto", str(version), "--raw")
        if raw is None:
            assert out.exit_code == 1 and "file was removed" in out.stderr
            assert json.loads(run("replay", "state.json", "--upto", str(version), "--json").stdout) is None
        else:
            assert out.stdout_bytes == raw, version
    src = events[5]["meta"]["source"]
    git = src["git"]
    assert len(git["parents"]) == 2 and git["walk"] == "full-history" and "commit time" in git["order"]
    assert git["author"] == {"name": "Ann Author", "email": "ann@example.org", "time": "2026-01-01T00:07:00+00:00"}
    assert git["committer"]["name"] == "Cy Committer" and src["time"] == "git:committer"
    assert events[5]["occurred_at"].startswith("2026-01-01T00:07:00")
    # the markers are kept byte for byte, the document stays v3 and "resolved" is diffed against v3
    assert json.loads(run("replay", "state.json", "--upto", "6", "--json").stdout) == {"step": 3}
    assert events[6]["data"]["ops"] == [{"op": "replace", "path": "/step", "value": 4}]


def test_ingest_git_by_default_walks_every_branch_and_records_unreadable_versions(store, branchy_repo) -> None:  # type: ignore[no-untyped-def]
    """The library call's defaults are the command's: the full history (side branches too) and a broken
    version recorded, not refused (mutation testing: flipping either default survived every test, all of
    which went through the command, which passes both)."""
    from eventstore.dialects import get_dialect
    from eventstore.ingest import ingest_git

    repo, _ = branchy_repo
    results = ingest_git(store, get_dialect("generic"), f"{repo}:state.json")
    assert [r.version for r in results] == [1, 2, 3, 3, 4, 5, 6, 7, 8, 9]  # "side" and "side2" included
    assert results[6].unreadable is not None and "line" in results[6].unreadable  # the committed conflict markers


def test_git_first_parent_keeps_the_main_line(run, branchy_repo) -> None:  # type: ignore[no-untyped-def]
    repo, _ = branchy_repo
    r = run("ingest", "generic", "--git", f"{repo}:state.json", "--first-parent", "--stream", "fp", "--json")
    assert r.exit_code == 0, r.output
    subjects = [_git(repo, "log", "-1", "--format=%s", e["meta"]["source"]["git"]["commit"]) for e in _log(run, "fp")]
    assert subjects == ["v1", "v2", "v3", "merge side2 (markers committed)", "resolved", "deleted", "recreated"]
    assert run("ingest", "generic", "x.json", "--first-parent").exit_code == 2


def test_git_strict_refuses_the_conflict_markers(run, branchy_repo) -> None:  # type: ignore[no-untyped-def]
    repo, _ = branchy_repo
    r = run("ingest", "generic", "--git", f"{repo}:state.json", "--strict")
    sha = _git(repo, "log", "-1", "--format=%H", "--grep=markers committed")
    assert r.exit_code == 1 and "not valid JSON at line 1, column 1" in r.stderr
    assert f"{repo}:state.json@{sha[:12]}: not valid JSON" in r.stderr  # which commit's version, not only what


def test_git_missing_is_an_error_not_a_traceback(run, branchy_repo, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    repo, _ = branchy_repo
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    r = run("ingest", "generic", "--git", f"{repo}:state.json")
    assert r.exit_code == 1 and r.stderr == "Error: git is not installed.\n"


def test_git_spec_errors_and_a_colon_in_the_repository_path(branchy_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A spec without ``:``, a folder that is no repository (git's own words, and the command), a
    repository whose path holds a colon (the file is after the last one), and the whole history by
    default (mutation testing: each survived)."""
    from eventstore.ingest import IngestError, git_snapshots

    with pytest.raises(IngestError) as info:
        list(git_snapshots("state.json"))
    assert str(info.value) == '--git expects REPO_DIR:FILE, got "state.json".'
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(IngestError) as info:
        list(git_snapshots(f"{plain}:state.json"))
    message = str(info.value)
    assert message.startswith("git log --full-history --date-order --reverse --format=")
    # git's words go on as "of the parent directories): .git", or, where the temporary folder is a mount of
    # its own (tmpfs), "parent up to mount point /tmp" and a line on the filesystem boundary
    assert f" -- state.json failed in {plain}: fatal: not a git repository (or any " in message
    gone = f"{tmp_path}/gone-\udcff"  # a folder that is not there, named with a byte that is not UTF-8
    with pytest.raises(IngestError) as info:
        list(git_snapshots(f"{gone}:state.json"))
    assert f"failed in {gone}: fatal: cannot change to '{tmp_path}/gone-\ufffd'" in str(info.value)
    repo, versions = branchy_repo
    odd = tmp_path / "a:b"
    odd.mkdir()
    repo.rename(odd / "repo")
    snaps = list(git_snapshots(f"{odd / 'repo'}:state.json"))
    assert [s.source["git"]["walk"] for s in snaps] == ["full-history"] * len(snaps)
    assert [s.raw for s in snaps if s.raw is not None and s.raw in (versions["side"], versions["side2"])] == \
        [versions["side"], versions["side2"]]  # the side branches are in the default walk


def test_git_sources_name_everything_and_a_folder_before_the_file_is_nothing(tmp_path: Path) -> None:
    """Each version's source names the file, the resolved repository, the commit, its parents, author
    and committer (bytes that are not UTF-8, as git writes them for a Latin-1 log setting, replaced, not
    fatal) and the walk; a folder of the file's
    name before the file ever existed is no removal of anything (mutation testing: each key and the
    replacement survived)."""
    from eventstore.ingest import GIT_ORDER, git_snapshots

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "state.json").mkdir()
    (repo / "state.json" / "inner").write_text("a folder first")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "folder", when=1)
    _git(repo, "rm", "-rq", "state.json")
    (repo / "state.json").write_text('{"step": 1}\n')
    _git(repo, "add", "-A")
    _git(repo, "config", "i18n.logOutputEncoding", "latin1")  # a user's setting: git log writes Latin-1
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "file"], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "René L", "GIT_AUTHOR_EMAIL": "a@example.org",
                        "GIT_COMMITTER_NAME": "Cy", "GIT_COMMITTER_EMAIL": "c@example.org",
                        "GIT_AUTHOR_DATE": "2026-01-01T00:02:00+00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:02:00+00:00",
                        "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})
    first, file = _git(repo, "rev-list", "--reverse", "HEAD").split()
    [snap] = list(git_snapshots(f"{repo}:state.json", first_parent=True))
    assert snap.raw == b'{"step": 1}\n' and not snap.removed
    assert snap.source == {"file": "state.json", "id": f"git:{file}:state.json", "git": {
        "repo": str(repo.resolve()), "commit": file, "parents": [first],
        "author": {"name": "Ren\ufffd L", "email": "a@example.org", "time": "2026-01-01T00:02:00+00:00"},
        "committer": {"name": "Cy", "email": "c@example.org", "time": "2026-01-01T00:02:00+00:00"},
        "walk": "first-parent", "order": GIT_ORDER}}


def test_git_a_long_history_of_versions_and_removals_reads_each_once(tmp_path: Path) -> None:
    """42 versions, each removed again: one ``git cat-file --batch`` answer is read object by object
    (a version's bytes and the line after them, a missing file's line alone), each version and each
    removal once, in order."""
    from eventstore.ingest import git_snapshots

    repo = tmp_path / "repo"
    _git(tmp_path, "init", "-q", "-b", "main", "repo")
    stream, n = [], 42
    for i in range(2 * n):  # git fast-import: the whole history in one process
        body = f'{{"version": {i // 2}}}\n'.encode()
        change = f"M 100644 inline state.json\ndata {len(body)}\n".encode() + body if i % 2 == 0 else b"D state.json\n"
        stream.append(f"commit refs/heads/main\nmark :{i + 1}\ncommitter C <c@example.org> {1_700_000_000 + i} +0000\n"
                      f"data 1\n{i % 10}\n".encode() + (f"from :{i}\n".encode() if i else b"") + change + b"\n")
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=b"".join(stream), check=True)
    snaps = list(git_snapshots(f"{repo}:state.json"))
    assert [(s.raw, s.removed) for s in snaps] == \
        [x for v in range(n) for x in ((f'{{"version": {v}}}\n'.encode(), False), (None, True))]


def test_folder_order_by_default_and_an_unknown_order() -> None:
    """Name order unless told; an order that does not exist is named with the ones that do."""
    with pytest.raises(IngestError) as info:
        order_files([], "size")
    assert str(info.value) == f'--order must be one of {", ".join(ORDERS)}, got "size".' and len(ORDERS) == 2
    assert "name, mtime" in str(info.value)


def test_natural_order_and_ambiguity(tmp_path: Path) -> None:
    d = tmp_path / "h"
    d.mkdir()
    for name in ("10-c.json", "2-b.json", "1-a.json"):
        (d / name).write_text("{}")
    files, notes = order_files(list(d.iterdir()), "name")
    assert [f.name for f in files] == ["1-a.json", "2-b.json", "10-c.json"]
    assert notes == [f"{d}: 3 files in natural name order (2-x before 10-x)"]
    for i, name in enumerate(("1-a.json", "2-b.json", "10-c.json")):  # mtime order reverses them
        os.utime(d / name, (1_700_000_000 - i, 1_700_000_000 - i))
    assert order_files(list(d.iterdir())) == (files, notes)  # name order unless told
    files, notes = order_files(list(d.iterdir()), "mtime")
    assert [f.name for f in files] == ["10-c.json", "2-b.json", "1-a.json"] and len(notes) == 1
    e = tmp_path / "plain"
    e.mkdir()
    for name in ("state.json", "backup.json"):
        (e / name).write_text("{}")
        os.utime(e / name, (1_700_000_000, 1_700_000_000))
    _, notes = order_files(list(e.iterdir()), "name")
    assert notes[1] == (f"warning: {e}: the order is ambiguous: 2 file name(s) carry no number and files share a "
                        "modification time, so name order may not be the order they were written")
    _, notes = order_files(list(e.iterdir()), "mtime")
    assert notes[1] == f"warning: {e}: the order is ambiguous: files share a modification time (taken in name order)"
    os.utime(e / "backup.json", (1_600_000_000, 1_600_000_000))  # names without numbers, times that differ
    _, notes = order_files(list(e.iterdir()), "name")
    assert notes == [f"{e}: 2 files in natural name order (2-x before 10-x)",
                     f"warning: {e}: 2 file name(s) carry no number; pass --order mtime if modification time is "
                     "the history order"]
    assert order_files(list(e.iterdir()), "mtime")[1] == [f"{e}: 2 files in modification-time order"]


def test_folder_ingest_order_and_times(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "history"
    d.mkdir()
    for i in (1, 2, 10):
        (d / f"{i}-state.json").write_text(json.dumps({"status": "running", "next_action": "wait", "n": i,
                                                        "last_updated": f"2026-02-{i:02d}T00:00:00Z"}))
        os.utime(d / f"{i}-state.json", (1_700_000_000 + i, 1_700_000_000 + i))
    r = run("ingest", "friday", str(d), "--stream", "F", "--json")
    assert r.exit_code == 0 and "natural name order (2-x before 10-x)" in r.stderr
    events = _log(run, "F")
    ns = [json.loads(run("replay", "F", "--upto", str(e["version"]), "--json").stdout)["n"] for e in events
          if "source" in e["meta"]]
    assert ns == [1, 2, 10]
    last = [e for e in events if "source" in e["meta"]]
    # friday knows its document's time: occurred_at comes from last_updated, and meta says so
    assert [e["occurred_at"][:10] for e in last] == ["2026-02-01", "2026-02-02", "2026-02-10"]
    assert {e["meta"]["source"]["time"] for e in last} == {"document:last_updated"}
    # generic knows no document time: the file's mtime, and its name is the stream
    r = run("ingest", "generic", str(d / "10-state.json"), "--json")
    assert json.loads(r.stdout)["stream"] == "10-state.json"
    [g] = _log(run, "10-state.json")
    assert g["meta"]["source"]["time"] == "mtime" and g["occurred_at"].startswith("2023-11-14T22:13:30")
    # --order mtime over a folder
    os.utime(d / "1-state.json", (1_800_000_000, 1_800_000_000))
    r = run("ingest", "generic", str(d), "--order", "mtime", "--json")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [Path(x["file"]).name for x in lines] == ["2-state.json", "10-state.json", "1-state.json"]
    assert {x["stream"] for x in lines} == {"history"}  # a folder of versions: the folder's name


def test_taskflow_refuses_a_folder_of_unrelated_json(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "exports"
    d.mkdir()
    for i in range(4):
        (d / f"{i}.json").write_text(json.dumps({"n": i}))
    for target in (d, d / "0.json", tmp_path):  # the folder, a file in it, the folder above it
        r = run("ingest", "taskflow", str(target))
        assert r.exit_code == 1, (target, r.output)
        assert "not a task folder" in r.stderr and "0.json, 1.json, 2.json and 1 more" in r.stderr
        assert "SPEC.md" in r.stderr and "Nothing was written" in r.stderr
    assert "taskflow/exports" not in run("runs").stdout
    (d / "SPEC.md").write_text("# A real task after all\n")  # a task folder may hold other files too
    r = run("ingest", "taskflow", str(d), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout.splitlines()[0])["stream"] == "taskflow/exports"


def test_git_a_folder_where_the_file_was_is_a_removal(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The path turning into a folder is the file's removal, and the versions after it still parse
    (git cat-file prints a tree's content too)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    state = repo / "state.json"
    state.write_text('{"n": 1}')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "file", when=1)
    state.unlink()
    state.mkdir()
    (state / "inner.json").write_text('{"inner": true}')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "folder", when=2)
    (state / "inner.json").unlink()
    state.rmdir()
    state.write_text('{"n": 2}')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "file again", when=3)
    r = run("ingest", "generic", "--git", f"{repo}:state.json", "--json")
    assert r.exit_code == 0, r.output
    assert [e["type"] for e in _log(run, "state.json")] == ["document.observed", "document.removed",
                                                            "document.observed"]
    assert run("replay", "state.json", "--raw").stdout_bytes == b'{"n": 2}'


def test_a_broken_write_of_a_file_joins_the_stream_its_name_gave(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """generic names a stream by the file; a later unreadable version of that file has no document
    to name one, so it joins that stream (mutation testing: dropping the fallback survived)."""
    f = tmp_path / "state.json"
    f.write_text('{"a": 1}\n')
    assert run("ingest", "generic", str(f)).exit_code == 0
    f.write_text('{"a":\n')
    r = run("ingest", "generic", str(f))
    assert r.exit_code == 0, r.output
    assert [e["type"] for e in _log(run, "state.json")] == ["document.observed", "document.unreadable"]


def test_mtime_is_read_in_utc_whatever_the_local_zone(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A file's mtime is an instant: the machine's time zone must not move it (mutation testing:
    a naive local time survived on a machine set to UTC)."""
    import time

    f = tmp_path / "state.json"
    f.write_text('{"a": 1}\n')
    os.utime(f, (1_700_000_000, 1_700_000_000))
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert run("ingest", "generic", str(f)).exit_code == 0
    finally:
        monkeypatch.undo()
        time.tzset()
    [e] = _log(run, "state.json")
    assert e["occurred_at"].startswith("2023-11-14T22:13:20") and e["meta"]["source"]["time"] == "mtime"


def test_git_a_file_no_commit_touches_and_commits_that_touch_other_files(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for i, (name, text) in enumerate([("README", "a"), ("state.json", '{"n": 1}'), ("README", "b"),
                                      ("state.json", '{"n": 2}')], 1):
        (repo / name).write_text(text)
        _git(repo, "add", name)
        _git(repo, "commit", "-qm", f"c{i}", when=i)
    r = run("ingest", "generic", "--git", f"{repo}:missing.json")
    assert r.exit_code == 1 and r.stderr == f"Error: {repo}: no commits touch missing.json.\n"
    r = run("ingest", "generic", "--git", f"{repo}:state.json", "--json")
    assert r.exit_code == 0, r.output
    events = _log(run, "state.json")
    subjects = [_git(repo, "log", "-1", "--format=%s", e["meta"]["source"]["git"]["commit"]) for e in events]
    assert subjects == ["c2", "c4"] and [e["type"] for e in events] == ["document.observed", "document.patched"]


def test_a_folder_of_versions_skips_subfolders_and_hidden_files(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "history"
    (d / "sub").mkdir(parents=True)
    for name, text in (("1-state.json", '{"n": 1}'), ("2-state.json", '{"n": 2}'), (".2-state.json.swp", "junk"),
                       ("sub/3-state.json", '{"n": 3}')):
        (d / name).write_text(text)
    r = run("ingest", "generic", str(d), "--json")
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["file"] for x in r.stdout.splitlines()] == [str(d / "1-state.json"), str(d / "2-state.json")]


def test_git_versions_come_after_their_parents_even_with_skewed_clocks(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Commit time orders the walk, but a parent is never recorded after its child: a commit made on a
    machine whose clock was behind (B, older than its parent A) still follows A (mutation testing:
    git's default order, without --date-order, put A after B)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    state = repo / "state.json"

    def commit(label: str, when: int) -> None:
        state.write_text(json.dumps({"v": label}) + "\n")
        _git(repo, "add", "state.json")
        _git(repo, "commit", "-qm", label, when=when)

    commit("A", 9)
    _git(repo, "checkout", "-qb", "side")
    commit("S", 5)
    _git(repo, "checkout", "-q", "main")
    commit("B", 1)  # a child of A, stamped earlier than A
    _git(repo, "merge", "-q", "side", "-m", "M", when=10, check=False)
    state.write_text(json.dumps({"v": "M"}) + "\n")
    _git(repo, "add", "state.json")
    _git(repo, "commit", "-qm", "M", when=10)
    r = run("ingest", "generic", "--git", f"{repo}:state.json", "--stream", "skew")
    assert r.exit_code == 0, r.output
    subjects = [_git(repo, "log", "-1", "--format=%s", e["meta"]["source"]["git"]["commit"]) for e in _log(run, "skew")]
    assert subjects.index("A") < subjects.index("B") and subjects.index("A") < subjects.index("S")
    assert subjects[-1] == "M" and sorted(subjects) == ["A", "B", "M", "S"]


def test_the_stream_a_generic_file_takes_and_the_api_defaults(store_url: str, tmp_path: Path) -> None:
    """With no stream named anywhere, a generic version goes to its file's name, to its folder's name
    when several files of one folder are given (or the folder itself), and to each file's name when they
    come from several folders; ``ingest()`` reads folders in name order and records an unreadable version
    unless told to be strict; a path that is not there is named (mutation testing: each survived)."""
    from eventstore.dialects import get_dialect
    from eventstore.ingest import ingest, load_paths
    from eventstore.store import EventStore

    generic = get_dialect("generic")
    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        folder.mkdir()
        (folder / "10-b.json").write_text('{"n": 10}')
        (folder / "2-a.json").write_text('{"n": 2}')

    def streams(paths: list[Path]) -> list[str | None]:
        return [s.source_stream for s in load_paths(generic, paths)]

    assert streams([one / "2-a.json"]) == ["2-a.json"]
    assert streams([one / "2-a.json", one / "10-b.json"]) == ["one", "one"]
    assert streams([one / "2-a.json", two / "10-b.json"]) == ["2-a.json", "10-b.json"]
    assert streams([one]) == ["one", "one"]
    with pytest.raises(IngestError) as info:
        load_paths(generic, [tmp_path / "gone.json"])
    assert str(info.value) == f"{tmp_path / 'gone.json'}: no such file or directory."
    (two / "30-c.json").write_text('{"n": ')  # a version that is no JSON
    with EventStore(store_url) as store:
        results = ingest(store, generic, [two])
        assert [(r.file, r.version, r.unreadable is not None) for r in results] == [
            (str(two / "2-a.json"), 1, False), (str(two / "10-b.json"), 2, False), (str(two / "30-c.json"), 3, True)]


def test_times_are_stamped_on_every_version_that_has_none(tmp_path: Path) -> None:
    """A version that brings its own time is left as it is, and the versions after it are still
    stamped (mutation testing: stopping at the first timed version survived)."""
    from datetime import UTC, datetime

    from eventstore.dialects import get_dialect
    from eventstore.dialects.base import Snapshot
    from eventstore.ingest import stamp_times

    f = tmp_path / "s.json"
    f.write_text("{}")
    os.utime(f, (1_700_000_000, 1_700_000_000))
    given = datetime(2026, 1, 1, tzinfo=UTC)
    snaps = [Snapshot(doc={}, occurred_at=given, source={"file": str(f)}), Snapshot(doc={}, source={"file": str(f)})]
    stamp_times(get_dialect("generic"), snaps)
    assert [(s.occurred_at, s.source.get("time")) for s in snaps] == [
        (given, None), (datetime.fromtimestamp(1_700_000_000, UTC), "mtime")]
