"""The hook spool's promises, in process (fast): where a store's spool is, what a record holds, that a
record is stored only when it is complete, that hooks and drains never lose or double a record (claims,
locks, a dying hook's remains), and that an erasure takes records out of every spool file.

The drain end to end (into a store) is in tests/test_security_promises.py, tests/test_claude_capture.py
and tests/test_erasure.py; these tests pin the spool module's own contract, each promise on its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
import threading
import time
from pathlib import Path

import pytest

from eventstore import spool


def _call(i: int, event: str = "PreToolUse", **extra: object) -> bytes:
    return json.dumps({"session_id": "S", "hook_event_name": event, "tool_use_id": f"t{i}", **extra}).encode()


def _records(path: Path) -> list[spool.Record]:
    return list(spool.read(path))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- where the spool is ---------------------------------------------------------------------------


def test_the_spool_folder_is_the_one_named_by_evstore_spool_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVSTORE_SPOOL_DIR", str(tmp_path / "here"))
    assert spool.spool_path("sqlite:////elsewhere/x.db") == str(tmp_path / "here")
    assert spool.spool_dir("postgresql://h/db") == tmp_path / "here"


def test_a_sqlite_store_spools_beside_its_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVSTORE_SPOOL_DIR", "")  # empty: not set
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert spool.spool_path(f"sqlite:///{tmp_path}/a/store.db") == str(tmp_path / "a" / "spool")
    assert spool.spool_path("sqlite:///~/b/store.db") == str(tmp_path / "home" / "b" / "spool")
    assert spool.spool_path("sqlite:///rel/store.db") == str(tmp_path / "rel" / "spool")  # made absolute
    assert spool.spool_dir(f"sqlite:///{tmp_path}/a/store.db") == tmp_path / "a" / "spool"
    monkeypatch.setenv("EVSTORE_URL", f"sqlite:///{tmp_path}/env/store.db")
    assert spool.spool_path() == str(tmp_path / "env" / "spool")  # no URL: the configured store's


def test_a_server_store_spools_per_url_under_the_state_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("EVSTORE_SPOOL_DIR", raising=False)
    url = "postgresql+psycopg://u@h:5432/db"
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert spool.spool_path(url) == str(tmp_path / "state" / "evstore" / "spool" / digest)
    assert spool.spool_path(url + "2") != spool.spool_path(url)  # one folder per store
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert spool.spool_path(url) == str(tmp_path / "home" / ".local" / "state" / "evstore" / "spool" / digest)


# -- what a record holds --------------------------------------------------------------------------


def test_a_record_is_one_line_of_exactly_the_header_and_the_input(tmp_path: Path) -> None:
    spool.write(tmp_path / "s", _call(0), now=1764578000.25)
    line = (tmp_path / "s" / spool.SPOOL).read_bytes()
    [record] = _records(tmp_path / "s" / spool.SPOOL)
    nonce = record.header["nonce"]  # 128 random bits: the record's digest confirms no guess of the call
    assert type(nonce) is int and 0 <= nonce < 2 ** 128
    header = {"received_at": 1764578000.25, "pid": os.getpid(), "bytes": len(_call(0)), "nonce": nonce}
    assert line == base64.b64encode(json.dumps(header, separators=(",", ":")).encode()) + b"\t" + \
        base64.b64encode(_call(0)) + b"\n"
    assert (record.header, record.stdin, record.file_bytes) == (header, _call(0), None)
    assert record.digest == hashlib.sha256(line).hexdigest()


def test_a_record_is_stamped_with_the_time_it_was_written(tmp_path: Path) -> None:
    before = time.time()
    spool.write(tmp_path, _call(0))
    after = time.time()
    [record] = _records(tmp_path / spool.SPOOL)
    assert before <= record.header["received_at"] <= after


def test_the_spool_is_private_to_its_owner(tmp_path: Path) -> None:
    spool.write(tmp_path / "new", _call(0), now=1.0)
    assert _mode(tmp_path / "new") == 0o700 and _mode(tmp_path / "new" / spool.SPOOL) == 0o600


def test_records_keep_their_order_and_none_is_lost_or_doubled(tmp_path: Path) -> None:
    for i in range(5):
        spool.write(str(tmp_path), _call(i), now=float(i))
    assert [r.stdin for r in _records(tmp_path / spool.SPOOL)] == [_call(i) for i in range(5)]
    assert [r.header["received_at"] for r in _records(tmp_path / spool.SPOOL)] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_an_input_at_the_limit_is_kept_whole_and_one_over_it_is_truncated_saying_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    call = _call(0)
    monkeypatch.setattr(spool, "MAX_INPUT_BYTES", len(call))
    spool.write(tmp_path, call, now=1.0)
    monkeypatch.setattr(spool, "MAX_INPUT_BYTES", len(call) - 1)
    spool.write(tmp_path, call, now=1.0)
    whole, cut = _records(tmp_path / spool.SPOOL)
    assert (whole.stdin, whole.header) == (call, {"received_at": 1.0, "pid": os.getpid(), "bytes": len(call),
                                                  "nonce": whole.header["nonce"]})
    assert (cut.stdin, cut.header["bytes"], cut.header["truncated"]) == (call[:-1], len(call), True)


def test_a_header_with_text_in_it_is_json(tmp_path: Path) -> None:
    """A header naming a copied file (text) is written as JSON too, and read back exactly."""
    written = tmp_path / 'a "quoted"\tname.txt'
    written.write_bytes(b"hello")
    spool.write(tmp_path / "s", _call(0, "PostToolUse", tool_name="Write", tool_input={"file_path": str(written)}),
                now=2.5)
    [record] = _records(tmp_path / "s" / spool.SPOOL)
    assert record.header == {"received_at": 2.5, "pid": os.getpid(), "bytes": record.header["bytes"],
                             "nonce": record.header["nonce"], "file": str(written), "file_bytes": 5}
    assert record.file_bytes == b"hello"
    header = (tmp_path / "s" / spool.SPOOL).read_bytes().split(b"\t")[0]
    assert base64.b64decode(header) == json.dumps(record.header, separators=(",", ":")).encode()  # compact


@pytest.mark.parametrize("tool", ["Write", "Edit", "MultiEdit", "NotebookEdit"])
def test_a_file_writing_tool_call_carries_the_file_as_it_was(tmp_path: Path, tool: str) -> None:
    written = tmp_path / "f.txt"
    written.write_bytes(b"v1")
    spool.write(tmp_path / "s", _call(0, "PostToolUse", tool_name=tool, tool_input={"file_path": str(written)}), now=1.0)
    written.write_bytes(b"v2, later")
    [record] = _records(tmp_path / "s" / spool.SPOOL)
    assert (record.file_bytes, record.header["file"], record.header["file_bytes"]) == (b"v1", str(written), 2)


@pytest.mark.parametrize("call", [
    _call(0, "PreToolUse", tool_name="Write", tool_input={"file_path": "F"}),  # before the write: nothing yet
    _call(0, "PostToolUse", tool_name="Read", tool_input={"file_path": "F"}),  # not a tool that writes
    _call(0, "PostToolUse", tool_name="Write", tool_input={"file_path": ["F"]}),  # not a path
    _call(0, "PostToolUse", tool_name="Write", tool_input={"path": "F"}),  # no path
    _call(0, "PostToolUse", tool_name="Write", tool_input={"file_path": "missing"}),  # unreadable
    b'{"hook_event_name": "PostToolUse", "tool_name": "Write", ',  # not JSON
], ids=["pre", "read", "list", "no-path", "missing", "not-json"])
def test_no_file_is_copied_unless_a_tool_wrote_one_that_can_be_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    call: bytes) -> None:
    (tmp_path / "F").write_bytes(b"content")
    monkeypatch.chdir(tmp_path)
    spool.write(tmp_path / "s", call.replace(b'"F"', json.dumps(str(tmp_path / "F")).encode()), now=1.0)
    [record] = _records(tmp_path / "s" / spool.SPOOL)
    assert record.file_bytes is None and "file" not in record.header and "file_bytes" not in record.header
    assert (tmp_path / "s" / spool.SPOOL).read_bytes().count(b"\t") == 1


def test_a_relative_path_is_read_from_the_calls_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "f.txt").write_bytes(b"in proj")
    (tmp_path / "f.txt").write_bytes(b"in the hook's folder")
    monkeypatch.chdir(tmp_path)
    spool.write(tmp_path / "s", _call(0, "PostToolUse", tool_name="Write", cwd=str(tmp_path / "proj"),
                                      tool_input={"file_path": "f.txt"}), now=1.0)
    spool.write(tmp_path / "s", _call(1, "PostToolUse", tool_name="Write", tool_input={"file_path": "f.txt"}), now=1.0)
    spool.write(tmp_path / "s", _call(2, "PostToolUse", tool_name="Write", cwd=7, tool_input={"file_path": "f.txt"}),
                now=1.0)
    a, b, c = _records(tmp_path / "s" / spool.SPOOL)
    assert (a.file_bytes, a.header["file"]) == (b"in proj", str(tmp_path / "proj" / "f.txt"))
    assert (b.file_bytes, b.header["file"]) == (b"in the hook's folder", "f.txt")
    assert (c.file_bytes, c.header["file"]) == (b"in the hook's folder", "f.txt")


def test_a_file_at_the_size_limit_is_copied_and_a_bigger_one_is_named_not_copied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool, "MAX_FILE_BYTES", 4)
    (tmp_path / "four").write_bytes(b"1234")
    (tmp_path / "five").write_bytes(b"12345")
    for name in ("four", "five"):
        spool.write(tmp_path / "s", _call(0, "PostToolUse", tool_name="Edit",
                                          tool_input={"file_path": str(tmp_path / name)}), now=1.0)
    four, five = _records(tmp_path / "s" / spool.SPOOL)
    assert (four.file_bytes, four.header["file_bytes"]) == (b"1234", 4) and "file_skipped" not in four.header
    assert five.file_bytes is None and five.header["file_skipped"] == "larger than 4 bytes"
    assert "file" not in five.header and "file_bytes" not in five.header


# -- complete records only ------------------------------------------------------------------------


def test_a_hook_after_a_dead_one_ends_its_remains_and_starts_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / spool.SPOOL
    spool.write(tmp_path, _call(0), now=1.0)
    whole = path.read_bytes()
    path.write_bytes(whole + whole[:7])  # a hook died after seven bytes
    spool.write(tmp_path, _call(1), now=1.0)
    text = path.read_bytes()
    assert text.startswith(whole + whole[:7] + spool.DEAD_TAIL)
    assert [r.stdin for r in _records(path) if r.header != {"corrupt": True}] == [_call(0), _call(1)]
    assert [r.header for r in _records(path)][1] == {"corrupt": True}
    path.write_bytes(whole[:1])  # a hook died after one byte
    spool.write(tmp_path, _call(1), now=1.0)
    assert path.read_bytes().startswith(whole[:1] + spool.DEAD_TAIL) and _records(path)[1].stdin == _call(1)
    path.write_bytes(whole)  # after a whole record, or into an empty spool: no dead tail
    spool.write(tmp_path, _call(1), now=1.0)
    assert spool.DEAD_TAIL not in path.read_bytes()
    path.write_bytes(b"")
    spool.write(tmp_path, _call(1), now=1.0)
    assert not path.read_bytes().startswith(spool.DEAD_TAIL)
    assert [r.stdin for r in _records(path)] == [_call(1)]


def test_an_unterminated_last_line_is_not_a_record(tmp_path: Path) -> None:
    spool.write(tmp_path, _call(0), now=1.0)
    path = tmp_path / spool.SPOOL
    whole = path.read_bytes()
    path.write_bytes(whole + whole[:-1])  # all but its line end
    assert [r.stdin for r in _records(path)] == [_call(0)]


def _b64_ending_in(char: bytes) -> bytes:
    """An input whose base64 ends in ``char``, no padding (a reader stripping that byte would cut it)."""
    index = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".index(char)
    call = b"ab" + bytes([0x40 | index])
    assert base64.b64encode(call).endswith(char)
    return call


@pytest.mark.parametrize("char", [b"X", b"A"])
def test_a_record_whose_last_field_ends_in_any_character_is_read_whole(tmp_path: Path, char: bytes) -> None:
    call = _b64_ending_in(char)
    spool.write(tmp_path, call, now=1.0)
    [record] = _records(tmp_path / spool.SPOOL)
    assert record.stdin == call


@pytest.mark.parametrize("fields, whole", [
    ({"bytes": 3}, True),
    ({"bytes": 4}, False),  # fewer bytes than written: cut short
    ({"bytes": 2}, False),  # more bytes than written
    ({"bytes": 4, "truncated": True}, True),  # kept in part on purpose
    ({"bytes": 4, "truncated": 1}, False),
    ({"bytes": 4, "truncated": "yes"}, False),
    ({"bytes": 2, "truncated": True}, False),  # never more than written
    ({"bytes": "4"}, True),  # no count of bytes: nothing to compare
    ({"bytes": 3.0}, True),
    ({}, True),
])
def test_a_record_is_whole_only_with_as_many_bytes_as_its_header_says(tmp_path: Path, fields: dict, whole: bool) -> None:
    path = tmp_path / spool.SPOOL
    path.write_bytes(base64.b64encode(json.dumps(fields).encode()) + b"\t" + base64.b64encode(b"abc") + b"\n")
    [record] = _records(path)
    assert (record.header != {"corrupt": True}) is whole
    if whole:
        assert (record.header, record.stdin, record.file_bytes) == (fields, b"abc", None)


@pytest.mark.parametrize("file_field, header, whole", [
    (b"xyz", {"file_bytes": 3}, True),
    (b"xy", {"file_bytes": 3}, False),
    (b"xyzw", {"file_bytes": 3}, False),
    (None, {"file_bytes": 3}, False),
    (b"xy", {}, True),
    (b"xy", {"file_bytes": "3"}, True),
])
def test_a_copied_file_is_whole_only_with_as_many_bytes_as_its_header_says(
        tmp_path: Path, file_field: bytes | None, header: dict, whole: bool) -> None:
    path = tmp_path / spool.SPOOL
    fields = [base64.b64encode(json.dumps({"bytes": 1, **header}).encode()), base64.b64encode(b"a")]
    fields += [] if file_field is None else [base64.b64encode(file_field)]
    path.write_bytes(b"\t".join(fields) + b"\n")
    [record] = _records(path)
    assert (record.header != {"corrupt": True}) is whole
    if whole:
        assert (record.stdin, record.file_bytes) == (b"a", file_field)


def test_a_line_of_four_fields_or_one_is_not_whole(tmp_path: Path) -> None:
    path = tmp_path / spool.SPOOL
    h, a = base64.b64encode(b'{"bytes": 1}'), base64.b64encode(b"a")
    path.write_bytes(b"\t".join([h, a, a, a]) + b"\n" + h + b"\n" + b"\n")
    assert [r.header for r in _records(path)] == [{"corrupt": True}] * 3


def test_what_a_record_holds_is_all_there_for_a_scrub_to_see(tmp_path: Path) -> None:
    """contents(): a whole record's header, input and file; a damaged line's bytes and each field decoded."""
    written = tmp_path / "f"
    written.write_bytes(b"FILE")
    spool.write(tmp_path / "s", _call(0, "PostToolUse", tool_name="Write", tool_input={"file_path": str(written)}),
                now=1.0)
    spool.write(tmp_path / "s", _call(1), now=1.0)
    with_file, without = _records(tmp_path / "s" / spool.SPOOL)
    assert spool.contents(with_file) == [json.dumps(with_file.header).encode(), with_file.stdin, b"FILE"]
    assert spool.contents(without) == [json.dumps(without.header).encode(), _call(1), b""]
    damaged = base64.b64encode(b"SECRET") + b"\tabc\t" + base64.b64encode(b"OTHER") + b"\n"
    (tmp_path / "d").write_bytes(damaged)
    [record] = _records(tmp_path / "d")
    assert record.header == {"corrupt": True}
    assert spool.contents(record) == [damaged, b"SECRET", b"OTHER"]  # "abc" is not base64: left out
    # a field with a space in it (read as base64 where it is), an empty last field, one ending in "X"
    damaged = b"U0VD UkVU\t" + base64.b64encode(b"abW") + b"\t\n"
    (tmp_path / "d").write_bytes(damaged)
    [record] = _records(tmp_path / "d")
    assert spool.contents(record) == [damaged, b"SECRET", b"abW", b""]
    damaged = b"!\t" + base64.b64encode(b"abW") + b"\n"
    (tmp_path / "d").write_bytes(damaged)
    [record] = _records(tmp_path / "d")
    assert spool.contents(record) == [damaged, b"", b"abW"]


def test_a_record_holding_corrupt_true_in_its_header_is_still_whole(tmp_path: Path) -> None:
    """Only the reader's own mark (exactly True) makes a record damaged; a header field "corrupt": 1 does not."""
    path = tmp_path / "x"
    path.write_bytes(base64.b64encode(b'{"corrupt": 1}') + b"\t" + base64.b64encode(b"in") + b"\n")
    [record] = _records(path)
    assert spool.contents(record) == [b'{"corrupt": 1}', b"in", b""]


# -- claims: a drain takes the spool, hooks go on ------------------------------------------------


def test_a_claim_takes_the_spool_whole_and_hooks_start_a_new_one(tmp_path: Path) -> None:
    for i in range(3):
        spool.write(tmp_path, _call(i), now=1.0)
    before = (tmp_path / spool.SPOOL).read_bytes()
    [claimed] = spool.claim(tmp_path)
    assert re.fullmatch(rf"claimed-{os.getpid()}-\d+\.jsonl", claimed.name) and claimed.parent == tmp_path
    assert claimed.read_bytes() == before and not (tmp_path / spool.SPOOL).exists()
    spool.write(tmp_path, _call(3), now=1.0)
    assert [r.stdin for r in _records(tmp_path / spool.SPOOL)] == [_call(3)]
    assert [r.stdin for r in _records(claimed)] == [_call(i) for i in range(3)]


def test_a_claim_returns_the_claims_a_crashed_drain_left_oldest_first(tmp_path: Path) -> None:
    assert spool.claim(tmp_path / "none") == []
    assert spool.claim(tmp_path) == []
    for n, name in enumerate(["claimed-9-3.jsonl", "claimed-1-1.jsonl", "claimed-5-2.jsonl"]):
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, ns=(10**18 + n, 10**18 + n))
    (tmp_path / "other.jsonl").write_bytes(b"")
    assert [p.name for p in spool.claim(str(tmp_path))] == ["claimed-9-3.jsonl", "claimed-1-1.jsonl",
                                                            "claimed-5-2.jsonl"]
    spool.write(tmp_path, _call(0), now=1.0)
    claims = spool.claim(tmp_path)
    assert [p.name for p in claims[:3]] == ["claimed-9-3.jsonl", "claimed-1-1.jsonl", "claimed-5-2.jsonl"]
    assert len(claims) == 4 and [r.stdin for r in _records(claims[3])] == [_call(0)]


def _hold(path: Path) -> int:
    """Lock ``path`` as a hook or a drain would (the tests that use it watch a thread's descriptors)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to see the thread's descriptor")
    fd = os.open(path, os.O_RDWR)
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _opened_twice(path: Path, thread: threading.Thread) -> None:
    """Wait until a second descriptor of this process is open on ``path`` (the thread reached its lock),
    or the thread has ended (then the test's own assertions say what went wrong)."""
    deadline = time.monotonic() + 30
    while thread.is_alive() and time.monotonic() < deadline:
        fds = os.listdir("/proc/self/fd")
        if sum(1 for fd in fds if os.path.realpath(f"/proc/self/fd/{fd}") == str(path)) >= 2:
            return
        time.sleep(0.01)


def test_a_claim_waits_for_a_hook_mid_write(tmp_path: Path) -> None:
    spool.write(tmp_path, _call(0), now=1.0)
    fd = _hold(tmp_path / spool.SPOOL)  # a hook holds the spool, writing
    done: list[list[Path]] = []
    t = threading.Thread(daemon=True, target=lambda: done.append(spool.claim(tmp_path)))
    t.start()
    _opened_twice(tmp_path / spool.SPOOL, t)
    t.join(0.2)
    try:
        assert (tmp_path / spool.SPOOL).exists() and not done, "the claim did not wait for the hook"
        os.write(fd, b"")
    finally:
        os.close(fd)
    t.join()
    assert len(done[0]) == 1 and not (tmp_path / spool.SPOOL).exists()


def test_a_hook_that_opened_the_spool_just_before_a_claim_writes_to_the_new_one(tmp_path: Path) -> None:
    """A drain renamed the spool between the hook's open and its lock: the record goes to the new file,
    not into the claimed one the drain may have read and deleted already."""
    spool.write(tmp_path, _call(0), now=1.0)
    fd = _hold(tmp_path / spool.SPOOL)
    t = threading.Thread(daemon=True, target=lambda: spool.write(tmp_path, _call(1), now=1.0))
    t.start()
    _opened_twice(tmp_path / spool.SPOOL, t)  # the hook has opened the file and waits for the lock
    os.rename(tmp_path / spool.SPOOL, tmp_path / "claimed-1-1.jsonl")
    os.close(fd)
    t.join()
    assert [r.stdin for r in _records(tmp_path / "claimed-1-1.jsonl")] == [_call(0)]
    assert [r.stdin for r in _records(tmp_path / spool.SPOOL)] == [_call(1)]


# -- one drain at a time --------------------------------------------------------------------------


def test_one_drain_at_a_time_and_the_lock_is_free_once_released(tmp_path: Path) -> None:
    first = spool.drain_lock(tmp_path / "new")
    assert isinstance(first, int) and spool.drain_lock(tmp_path / "new") is None
    assert _mode(tmp_path / "new") == 0o700 and _mode(tmp_path / "new" / "drain.lock") == 0o600
    os.close(first)
    again = spool.drain_lock(str(tmp_path / "new"))
    assert again is not None
    os.close(again)


def test_a_drain_started_by_a_hook_takes_over_its_lock_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = spool.drain_lock(tmp_path)
    assert held is not None
    try:
        monkeypatch.setenv(spool.LOCK_FD_VAR, str(held))
        assert spool.drain_lock(tmp_path) == held  # the same descriptor: the lock the hook took
        assert spool.LOCK_FD_VAR not in os.environ
        assert spool.drain_lock(tmp_path) is None  # taken once: a second drain in the process waits its turn
    finally:
        os.close(held)


@pytest.mark.parametrize("value", ["not a number", "999999", "other file"])
def test_a_lock_descriptor_that_is_not_this_folders_lock_is_not_taken_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    other = os.open(tmp_path / "other", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        monkeypatch.setenv(spool.LOCK_FD_VAR, str(other) if value == "other file" else value)
        fd = spool.drain_lock(tmp_path / "s")
        assert fd is not None and fd != other and spool.LOCK_FD_VAR not in os.environ
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "s" / "drain.lock"))
        assert spool.drain_lock(tmp_path / "s") is None
        os.close(fd)
    finally:
        os.close(other)


def test_a_lock_descriptor_another_open_file_holds_is_not_taken_over(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    held = spool.drain_lock(tmp_path)
    assert held is not None
    mine = os.open(tmp_path / "drain.lock", os.O_WRONLY)  # this folder's lock file, but not the open file holding it
    try:
        monkeypatch.setenv(spool.LOCK_FD_VAR, str(mine))
        assert spool.drain_lock(tmp_path) is None
    finally:
        os.close(mine)
        os.close(held)


def test_a_folder_has_one_identity_made_once(tmp_path: Path) -> None:
    first = spool.spool_id(tmp_path / "new")
    assert re.fullmatch(r"[0-9a-f]{32}", first) and _mode(tmp_path / "new") == 0o700
    assert spool.spool_id(str(tmp_path / "new")) == first
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == [spool.SPOOL_ID]  # no temporary left
    assert (tmp_path / "new" / spool.SPOOL_ID).read_text() == first + "\n"
    (tmp_path / "mounted").mkdir()
    (tmp_path / "mounted" / spool.SPOOL_ID).write_text("  abc123\n")  # made by another machine
    assert spool.spool_id(tmp_path / "mounted") == "abc123"
    assert spool.spool_id(tmp_path / "other") != first
    (tmp_path / "existing").mkdir()
    assert re.fullmatch(r"[0-9a-f]{32}", spool.spool_id(tmp_path / "existing"))  # a folder made before: fine


def test_what_is_waiting_and_what_is_pending(tmp_path: Path) -> None:
    assert not spool.pending(tmp_path / "none") and not spool.waiting(tmp_path / "none")
    assert not spool.pending(tmp_path) and not spool.waiting(tmp_path)
    (tmp_path / spool.SPOOL).write_bytes(b"")
    (tmp_path / "drain.lock").write_bytes(b"")
    assert not spool.pending(tmp_path) and not spool.waiting(tmp_path)  # an empty spool holds nothing
    (tmp_path / spool.SPOOL).write_bytes(b"Q")  # a dead hook's one byte: a drain claims (and clears) it
    assert spool.pending(tmp_path) and spool.waiting(tmp_path)
    spool.write(tmp_path, _call(0), now=1.0)
    assert spool.pending(tmp_path) and spool.waiting(tmp_path)
    spool.claim(tmp_path)
    assert spool.pending(tmp_path) and not spool.waiting(tmp_path)  # claimed, not yet recorded


def test_the_last_drain_and_the_drain_errors_are_noted_in_utc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kathmandu")  # +05:45: a local time is never mistaken for UTC
    time.tzset()
    (tmp_path / "gone").mkdir()
    monkeypatch.chdir(tmp_path / "gone")
    (tmp_path / "gone").rmdir()  # the drain's working folder is gone: the note is written beside the spool
    try:
        _notes_in_utc(tmp_path)
    finally:
        monkeypatch.undo()
        time.tzset()


def _notes_in_utc(tmp_path: Path) -> None:
    assert spool.last_drained(tmp_path) is None
    (tmp_path / spool.DRAIN_OK).write_text("\n")
    assert spool.last_drained(tmp_path) is None
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    spool.mark_drained(tmp_path)
    after = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
    stamp = spool.last_drained(str(tmp_path))
    assert stamp is not None and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp) and before <= stamp <= after
    assert sorted(p.name for p in tmp_path.iterdir()) == [spool.DRAIN_OK]
    spool.log_drain_error(tmp_path / "new", "the store\nis gone\t now")
    spool.log_drain_error(tmp_path / "new", "again")
    assert _mode(tmp_path / "new") == 0o700
    lines = (tmp_path / "new" / spool.DRAIN_ERRORS).read_text().splitlines()
    pid = os.getpid()
    assert [re.sub(r"^\S+ ", "", x) for x in lines] == [f"pid {pid}: the store is gone now", f"pid {pid}: again"]
    for x in lines:
        s = x.split(" ")[0]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", s) and before <= s <= after


# -- erasure: remove() -----------------------------------------------------------------------------


def _sessions(path: Path) -> list[str]:
    return [json.loads(r.stdin)["tool_use_id"] for r in _records(path)]


def test_remove_takes_the_selected_records_out_of_every_spool_file(tmp_path: Path) -> None:
    for i in range(4):
        spool.write(tmp_path, _call(i), now=1.0)
    [claimed] = spool.claim(tmp_path)
    for i in range(4, 7):
        spool.write(tmp_path, _call(i), now=1.0)
    removed, reached = spool.remove(str(tmp_path), lambda r: json.loads(r.stdin)["tool_use_id"] in {"t1", "t2", "t5"})
    assert (removed, reached) == (3, True)
    assert _sessions(claimed) == ["t0", "t3"] and _sessions(tmp_path / spool.SPOOL) == ["t4", "t6"]
    assert _mode(claimed) == 0o600 and _mode(tmp_path / spool.SPOOL) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([claimed.name, "drain.lock", spool.SPOOL])
    lock = spool.drain_lock(tmp_path)  # remove() let go of the drain lock
    assert lock is not None
    os.close(lock)
    spool.write(tmp_path, _call(7), now=1.0)  # hooks append to the rewritten spool
    assert _sessions(tmp_path / spool.SPOOL) == ["t4", "t6", "t7"]
    digest = _records(tmp_path / spool.SPOOL)[1].digest  # an event id names its record by the line's digest
    assert spool.remove(tmp_path, lambda r: r.digest == digest) == (1, True)
    assert _sessions(tmp_path / spool.SPOOL) == ["t4", "t7"]


def test_remove_leaves_the_claimed_files_to_a_drain_that_holds_the_folder(tmp_path: Path) -> None:
    spool.write(tmp_path, _call(0), now=1.0)
    [claimed] = spool.claim(tmp_path)
    spool.write(tmp_path, _call(1), now=1.0)
    lock = spool.drain_lock(tmp_path)
    try:
        assert spool.remove(tmp_path, lambda r: True) == (1, False)
    finally:
        os.close(lock)  # type: ignore[arg-type]
    assert _sessions(claimed) == ["t0"] and _records(tmp_path / spool.SPOOL) == []


def test_remove_without_a_match_rewrites_nothing(tmp_path: Path) -> None:
    assert spool.remove(tmp_path / "none", lambda r: True) == (0, True)
    assert spool.remove(tmp_path, lambda r: True) == (0, True)  # no spool file yet
    spool.write(tmp_path, _call(0), now=1.0)
    inode = (tmp_path / spool.SPOOL).stat().st_ino
    assert spool.remove(tmp_path, lambda r: False) == (0, True)
    assert (tmp_path / spool.SPOOL).stat().st_ino == inode


def test_remove_tests_a_dead_hooks_remains_as_a_record_that_is_not_whole(tmp_path: Path) -> None:
    spool.write(tmp_path, _call(0), now=1.0)
    path = tmp_path / spool.SPOOL
    path.write_bytes(path.read_bytes() + b"SECRET-remains")
    seen: list[dict] = []
    assert spool.remove(tmp_path, lambda r: seen.append(r.header) or r.header == {"corrupt": True}) == (1, True)
    assert seen[1] == {"corrupt": True} and b"SECRET" not in path.read_bytes()
    assert _sessions(path) == ["t0"]


def test_remove_skips_a_spool_a_drain_claimed_while_it_waited(tmp_path: Path) -> None:
    """The drain that renamed the file records (and deletes) it; remove() must not write the old name back."""
    spool.write(tmp_path, _call(0), now=1.0)
    fd = _hold(tmp_path / spool.SPOOL)
    result: list[tuple[int, bool]] = []
    t = threading.Thread(daemon=True, target=lambda: result.append(spool.remove(tmp_path, lambda r: True)))
    t.start()
    _opened_twice(tmp_path / spool.SPOOL, t)
    os.rename(tmp_path / spool.SPOOL, tmp_path / "claimed-1-1.jsonl")
    spool.write(tmp_path, _call(1), now=1.0)  # and a hook started a new spool
    os.close(fd)
    t.join()
    assert result == [(0, True)]
    assert _sessions(tmp_path / "claimed-1-1.jsonl") == ["t0"]


def test_a_drain_error_is_logged_in_utf_8_whatever_the_locale(tmp_path: Path) -> None:
    import locale

    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # a drain started from cron: an ASCII locale
    try:
        spool.log_drain_error(tmp_path, "the store at /srv/données is gone")
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
    assert (tmp_path / spool.DRAIN_ERRORS).read_bytes().endswith("/srv/données is gone\n".encode())


def test_an_existing_folder_identity_is_read_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / spool.SPOOL_ID).write_text("abc123\n")
    (tmp_path / f"{spool.SPOOL_ID}.{os.getpid()}.tmp").mkdir()  # where a new identity would be written first
    assert spool.spool_id(tmp_path) == "abc123"


# -- the error logs: lines an erasure can find, and take out ---------------------------------------


def _logged(path: Path) -> list[str]:
    """The lines of an error log without their time and pid."""
    return [re.sub(r"^\S+ pid \d+: ", "", x) for x in path.read_text().splitlines()]


def test_a_drain_error_names_each_stream_and_the_event_it_concerned(tmp_path: Path) -> None:
    spool.log_drain_error(tmp_path, "lens failed", streams=["sess b\n2", "sess-a"], event="E-1")
    spool.log_drain_error(tmp_path, "not read", streams=["s"])
    spool.log_drain_error(tmp_path, "no record")
    assert _logged(tmp_path / spool.DRAIN_ERRORS) == [
        "lens failed [stream sess b 2] [stream sess-a] [event E-1]", "not read [stream s]", "no record"]
    assert _mode(tmp_path / spool.DRAIN_ERRORS) == 0o600  # an error may quote what it could not record


def test_a_hook_record_holds_128_random_bits(tmp_path: Path) -> None:
    """The same call at the same instant is two different lines: a record's digest confirms no guess of it."""
    for _ in range(24):
        spool.write(tmp_path, _call(0), now=1.0)
    nonces = [r.header["nonce"] for r in _records(tmp_path / spool.SPOOL)]
    assert len(set(nonces)) == 24 and all(0 <= n < 2 ** 128 for n in nonces)
    assert max(nonces) >= 2 ** 120  # all 24 below it: 1 chance in 2^192 with 128 random bits


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_an_error_logged_while_the_log_is_rewritten_is_kept(tmp_path: Path, how: str) -> None:
    """A line appended while an erasure rewrites the log (it holds the log's lock) lands in the log as
    it is afterwards, not in the file the rewrite replaced or removed."""
    spool.log_drain_error(tmp_path, "old line")
    log = tmp_path / spool.DRAIN_ERRORS
    fd = _hold(log)  # the rewrite in progress
    t = threading.Thread(daemon=True, target=spool.log_drain_error, args=(tmp_path, "while rewritten"))
    t.start()
    _opened_twice(log, t)
    if how == "replaced":
        (tmp_path / "new").write_text("kept line\n")
        os.replace(tmp_path / "new", log)
    else:
        log.unlink()
    os.close(fd)
    t.join(30)
    assert _logged(log) == (["kept line"] if how == "replaced" else []) + ["while rewritten"]


def test_scrub_logs_takes_the_selected_lines_out_of_both_error_logs(tmp_path: Path) -> None:
    assert spool.scrub_logs(tmp_path, lambda line: True) == 0  # no log yet: nothing to do
    spool.log_drain_error(tmp_path, "one SECRET", streams=["s"])
    spool.log_drain_error(tmp_path, "two")
    spool.log_drain_error(tmp_path, "three SECRET")
    hook_log = tmp_path / spool.HOOK_ERRORS
    hook_log.write_bytes(b"h1 SECRET\nh2 \xff SECRET\nh3\n")
    seen: list[str] = []

    def drop(line: str) -> bool:
        seen.append(line)
        return "SECRET" in line

    assert spool.scrub_logs(tmp_path, drop) == 4
    assert _logged(tmp_path / spool.DRAIN_ERRORS) == ["two"]
    assert hook_log.read_bytes() == b"h3\n"
    assert "h2 \ufffd SECRET\n" in seen  # each line whole, bytes that are not UTF-8 replaced
    for log in (tmp_path / spool.DRAIN_ERRORS, hook_log):
        assert _mode(log) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([spool.DRAIN_ERRORS, spool.HOOK_ERRORS])
    before = [(p.stat().st_ino, p.read_bytes()) for p in (tmp_path / spool.DRAIN_ERRORS, hook_log)]
    assert spool.scrub_logs(tmp_path, lambda line: "nothing" in line) == 0
    assert [(p.stat().st_ino, p.read_bytes()) for p in (tmp_path / spool.DRAIN_ERRORS, hook_log)] == before
    hook_log.write_bytes(b"h3\nh4 SECRET\n")  # nothing to take from the drain log, a line from the hook log
    assert spool.scrub_logs(tmp_path, drop) == 1 and hook_log.read_bytes() == b"h3\n"
    (tmp_path / spool.DRAIN_ERRORS).unlink()  # no drain log at all
    hook_log.write_bytes(b"h5\nh6 SECRET\nh7\n")
    assert spool.scrub_logs(tmp_path, drop) == 1 and hook_log.read_bytes() == b"h5\nh7\n"


def test_scrub_logs_waits_for_a_line_being_appended(tmp_path: Path) -> None:
    """An erasure's rewrite takes the lock appends take: a line written under it is kept (or taken out)."""
    spool.log_drain_error(tmp_path, "one SECRET")
    log = tmp_path / spool.DRAIN_ERRORS
    fd = _hold(log)  # a hook appending
    done: list[int] = []
    t = threading.Thread(daemon=True, target=lambda: done.append(spool.scrub_logs(tmp_path, lambda x: "SECRET" in x)))
    t.start()
    _opened_twice(log, t)
    os.lseek(fd, 0, os.SEEK_END)
    os.write(fd, b"late line\nlate SECRET\n")
    os.close(fd)
    t.join(30)
    assert done == [2] and log.read_text() == "late line\n"
