"""A transcript line over the line limit (``EVSTORE_MAX_LINE_BYTES``) is never held whole: it is read
through in chunks and hashed, and recorded as a ``claude.unreadable_line`` naming its length and
SHA-256, with an ``unreadable-line-over-limit`` finding; the lines after it are recorded, the resume
offset moves past it, and ``replay --raw`` says the transcript cannot be given back byte for byte.
Before, one 150 MB line cost about 790 MB RSS."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import random
import subprocess
import sys
from operator import getitem
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import migrated

from eventstore import capture, config
from eventstore.cli import register
from eventstore.dialects.claude.dialect import split_lines

MiB = 1024 * 1024


def cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(register(), ["--url", url, *args])


def record(uuid: str, content: str, kind: str = "user") -> bytes:
    return json.dumps({"type": kind, "uuid": uuid, "sessionId": "s",
                       "message": {"role": kind, "content": content}}).encode() + b"\n"


def events(url: str, stream: str = "s") -> list[dict[str, Any]]:
    return [json.loads(x) for x in cli(url, "log", stream, "--json").stdout.splitlines()]


def test_iter_lines_splits_lines_as_split_lines_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in chunks (here of 1 to 7 bytes), the lines are those of the whole file: CR, LF and CRLF
    ends, a CRLF across two chunks, an unterminated tail kept only when final or complete JSON;
    a line over ``max_line`` comes as its length and SHA-256, the prefix digest carried through it."""
    rng = random.Random(32)
    for _ in range(400):
        data = bytes(rng.choice(b'ab{}1"\r\n') for _ in range(rng.randrange(0, 40)))
        monkeypatch.setattr(capture, "_LINE_CHUNK", rng.randrange(1, 8))
        for final in (False, True):
            want = split_lines(data, final=final)[0]
            assert list(capture.iter_lines(io.BytesIO(data), final=final)) == want, (data, final)
            limit = rng.randrange(0, len(data) + 1)
            cut = split_lines(data[:limit], final=True)[0]
            assert list(capture.iter_lines(io.BytesIO(data), final=True, limit=limit)) == cut, (data, limit)
            cut_long = [x if isinstance(x, bytes) else x.size
                        for x in capture.iter_lines(io.BytesIO(data), final=True, limit=limit, max_line=4)]
            assert cut_long == [x if len(x) <= 4 else len(x) for x in cut], (data, limit)
            pieces = data.splitlines(keepends=True)
            if not final and len(want) == len(pieces) and want and len(want[-1]) > 4 and not want[-1].endswith(b"\n"):
                want.pop()  # an unterminated tail over the limit cannot be parsed to see if it is whole: it waits
            digest = [hashlib.sha256()]
            got: list[Any] = []
            for line in capture.iter_lines(io.BytesIO(data), final=final, max_line=4,
                                           prefix=functools.partial(getitem, digest, 0)):
                if isinstance(line, capture.LongLine):
                    got.append((line.size, line.sha256))
                    digest[0] = line.prefix
                else:
                    got.append(line)
                    digest[0].update(line)
            assert got == [x if len(x) <= 4 else (len(x), hashlib.sha256(x).hexdigest()) for x in want], data
            assert digest[0].hexdigest() == hashlib.sha256(b"".join(want)).hexdigest()


def test_a_line_over_the_limit_is_recorded_as_a_finding(store_url: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated(store_url)
    monkeypatch.setattr(config, "MAX_LINE_BYTES", 64 * 1024)
    path = tmp_path / "s.jsonl"
    big = record("u2", "x" * 200_000)[:-1] + b"\r\n"  # over the limit, with a CRLF end
    head = record("u1", "before") + big
    path.write_bytes(head + record("u3", "after", "assistant"))
    r = cli(url, "ingest", "claude", str(path))
    assert r.exit_code == 0, r.output
    sha = hashlib.sha256(big).hexdigest()
    said = (f"line 2 at byte {len(record('u1', 'before'))}: line of {len(big)} bytes exceeds the line limit "
            f"of 65536 bytes (EVSTORE_MAX_LINE_BYTES); not stored, SHA-256 {sha}")
    assert f"warning: {path}: {said}" in r.stderr, r.stderr
    got = events(url)
    assert [(e["type"], e["data"].get("lineno")) for e in got] == [
        ("claude.user_message", 1), ("claude.unreadable_line", 2), ("claude.assistant_message", 3)]
    skipped = got[1]["data"]
    assert (skipped["size"], skipped["sha256"], skipped["line"], skipped["line_b64"], skipped["parts"]) == (
        len(big), sha, None, None, 0)
    assert skipped["error"].startswith(f"line of {len(big)} bytes exceeds the line limit of 65536 bytes")
    assert [(f["code"], f["severity"]) for f in got[1]["meta"]["findings"]] == [("unreadable-line-over-limit", "error")]
    assert json.loads(got[2]["data"]["line"])["uuid"] == "u3"
    # Captured once: a second ingest records nothing; the next line is read from past the long one.
    again = cli(url, "ingest", "claude", "--json", str(path))
    assert json.loads(again.stdout)["events"] == 0 and len(events(url)) == 3, again.output
    # A long line still being written (no newline yet) waits, as any unterminated line does; once
    # ended it is recorded, and so is the line after it.
    tail = record("u4", "y" * 100_000)[:-1]
    with open(path, "ab") as f:
        f.write(tail)
    r = cli(url, "ingest", "claude", "--json", str(path))
    assert json.loads(r.stdout)["events"] == 0, r.output
    with open(path, "ab") as f:
        f.write(b"\n" + record("u5", "last"))
    r = cli(url, "ingest", "claude", "--json", str(path))
    assert (json.loads(r.stdout)["lines"], json.loads(r.stdout)["rewritten"]) == (2, False), r.output
    got = events(url)
    assert [e["data"].get("size") for e in got] == [None, len(big), None, len(tail) + 1, None]
    assert got[3]["data"]["sha256"] == hashlib.sha256(tail + b"\n").hexdigest()
    assert json.loads(cli(url, "ingest", "claude", "--json", str(path)).stdout)["events"] == 0
    # The document counts it; replay --raw refuses to give back bytes it does not have.
    assert json.loads(cli(url, "replay", "s", "--json").stdout)["unreadable"] == 2
    raw = cli(url, "replay", "s", "--raw")
    assert raw.exit_code == 1 and raw.stdout_bytes == b"", raw.output
    assert (f"line 2 of this transcript ({len(big)} bytes at byte {len(record('u1', 'before'))}, SHA-256 {sha}) "
            "was over the line limit when it was captured and was not stored, so the transcript cannot be given "
            "back byte for byte") in raw.stderr
    assert cli(url, "verify").exit_code == 0
    # The lines before it are still given back byte for byte.
    assert cli(url, "replay", "s", "--raw", "--upto", "1").stdout_bytes == record("u1", "before")


def test_a_subagent_file_whose_first_line_is_over_the_limit(sqlite_url: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2.0.x subagent file names its session in its first line: one over the limit is not read for it."""
    url = migrated(sqlite_url)
    monkeypatch.setattr(config, "MAX_LINE_BYTES", 1024)
    path = tmp_path / "agent-a1.jsonl"
    path.write_bytes(record("u1", "z" * 5000) + record("u2", "ok"))
    r = cli(url, "ingest", "claude", "--json", str(path))
    assert r.exit_code == 0 and json.loads(r.stdout)["stream"] == "agent-a1", r.output
    assert [e["type"] for e in events(url, "agent-a1")] == ["claude.unreadable_line", "claude.user_message"]


# The process's own peak: VmHWM, which starts afresh at exec (ru_maxrss keeps a forked parent's).
RUN = ("import atexit, sys\n"
       "def hwm():\n"
       "    with open('/proc/self/status') as f:\n"
       "        print('peak', *[x.split()[1] for x in f if x.startswith('VmHWM:')], file=sys.stderr)\n"
       "atexit.register(hwm)\n"
       "from eventstore.cli import main\nsys.argv[0] = 'evstore'\nmain()")


@pytest.mark.timeout(120)
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak from /proc/self/status (Linux)")
def test_peak_memory_does_not_grow_with_a_long_line(tmp_path: Path) -> None:
    """A whole process, a 50 MiB line over a 1 MiB limit: 59 MiB peak RSS measured (38 MiB of it the
    interpreter with evstore's CLI imported); held whole (a limit above it), the same line peaked at 308 MiB."""
    path = tmp_path / "s.jsonl"
    with open(path, "wb") as f:
        f.write(record("u1", "before"))
        f.write(b'{"type":"user","uuid":"u2","message":{"content":"')
        for _ in range(50):
            f.write(b"x" * MiB)
        f.write(b'"}}\n')
        f.write(record("u3", "after"))
    env = {**os.environ, "EVSTORE_MAX_LINE_BYTES": str(MiB)}
    p = subprocess.run([sys.executable, "-c", RUN, "--url", f"sqlite:///{tmp_path}/events.db", "ingest", "claude",
                        "--json", str(path)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["lines"] == 3
    rss_kib = [int(x.split()[1]) for x in p.stderr.splitlines() if x.startswith("peak ")][-1]
    assert rss_kib < 100 * 1024, rss_kib  # the line held once would be over 100 MiB; held whole, 308 MiB
