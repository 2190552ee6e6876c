"""`evstore hook install` writes a command the shell runs as meant (issue 32, item 1).

Claude Code runs a command hook through the shell, so the installed line is run here with `sh -c`,
from folders whose names hold what a shell reads (spaces, quotes, `$`, `;`, `#`, non-ASCII), with a
PATH that does not hold the venv, and for a PostgreSQL URL whose password is shell syntax: the call
must land in the spool of the store that was named, and the drain must record it there.  A password
never lands in the settings file.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from conftest import EVSTORE

FOLDERS = ["with space", "it's \"quoted\"", "$HOME and ${IFS}", "a;touch PWNED;", "#not a comment",
           "élan 日本", "all of it: 'x' \"y\" $PATH; # é"]
PASSWORD = "x;touch${IFS}PWNED;$HOME#é`id`"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return env


def _install(folder: Path, env: dict[str, str], *root: str) -> subprocess.CompletedProcess[str]:
    (folder / ".claude").mkdir(parents=True, exist_ok=True)
    r = subprocess.run([EVSTORE, *root, "hook", "install", "--project"], cwd=folder, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def _installed_command(folder: Path) -> str:
    settings = json.loads((folder / ".claude" / "settings.json").read_text(encoding="utf-8"))
    (entry,) = settings["hooks"]["PreToolUse"]
    (hook,) = entry["hooks"]
    return str(hook["command"])


def _processes_with(marker: str) -> dict[int, bytes]:
    """pid -> command line of the running processes whose environment holds ``marker``."""
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as fh:
                    if marker.encode() not in fh.read():
                        continue
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    found[int(entry.name)] = fh.read()
            except OSError:
                continue
    return found


def _run_hook(command: str, folder: Path, env: dict[str, str], session: str, event: str = "PreToolUse") -> None:
    """What Claude Code does: the command through the shell, the hook's JSON on stdin, in the project."""
    bare = {**env, "PATH": "/usr/bin:/bin"}  # the venv is not on Claude Code's PATH
    body = json.dumps({"session_id": session, "hook_event_name": event, "tool_name": "Bash",
                       "tool_input": {"command": "ls"}, "cwd": str(folder)})
    r = subprocess.run(["sh", "-c", command], input=body, cwd=folder, env=bare, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), (command, r)


def _drain(url: str, env: dict[str, str]) -> dict:
    r = subprocess.run([EVSTORE, "--url", url, "hook", "drain", "--json"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _no_pwned(*folders: Path) -> None:
    for folder in folders:
        assert not list(folder.rglob("PWNED")), f"the installed hook ran a command from a name under {folder}"


@pytest.mark.parametrize("name", FOLDERS)
def test_the_installed_command_runs_under_sh_from_any_folder(name: str, tmp_path: Path) -> None:
    folder = tmp_path / name
    folder.mkdir()
    url = f"sqlite:///{folder}/store/events.db"
    env = _env(tmp_path)
    _install(folder, env, "--url", url)
    command = _installed_command(folder)
    assert command.startswith(("/", "'/")), command  # the absolute evstore that ran install
    _run_hook(command, folder, env, "s-1")
    _no_pwned(tmp_path, Path.cwd())
    assert (folder / "store" / "spool" / "spool.jsonl").exists(), "the call was spooled for another store"
    assert _drain(url, env)["hooks"] == 1


def test_a_hook_installed_without_url_records_into_the_project_store(tmp_path: Path) -> None:
    folder = tmp_path / "proj $HOME; #x"
    folder.mkdir()
    env = _env(tmp_path)
    _install(folder, env)
    _run_hook(_installed_command(folder), folder, env, "s-2")
    assert (folder / ".evstore" / "spool" / "spool.jsonl").exists()
    _no_pwned(tmp_path)


def test_a_password_never_lands_in_the_settings(pg_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "proj with space"
    folder.mkdir()
    env = _env(tmp_path)
    assert "://postgres@" in pg_url, pg_url  # the test server trusts local connections: any password works
    url = pg_url.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)
    subprocess.run([EVSTORE, "--url", pg_url, "init"], env=env, check=True, capture_output=True, timeout=120)
    r = _install(folder, env, "--url", url)
    text = (folder / ".claude" / "settings.json").read_text(encoding="utf-8")
    assert PASSWORD not in text and "PWNED" not in text
    assert "--url-file" in text and "holds a password" in r.stderr and PASSWORD not in r.stderr + r.stdout
    command = _installed_command(folder)
    url_file = Path(command.split("--url-file ")[1].split(" ")[0].strip("'"))
    assert stat.S_IMODE(url_file.stat().st_mode) == 0o600 and url_file.read_text().strip() == url
    _run_hook(command, folder, env, "s-3")
    _no_pwned(tmp_path, Path.cwd())
    assert _drain(url, env)["hooks"] == 1  # the drain of the URL named reads the call from its spool
    # A Stop starts a drain in the background: its command line (what `ps` shows) holds no password.
    marker = f"pw-{os.getpid()}-{time.time_ns()}"
    _run_hook(command, folder, {**env, "EVSTORE_TEST_MARK": marker}, "s-3", event="Stop")
    seen: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while True:
        now = _processes_with(marker)
        seen.update(now)
        if seen and not now or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    assert seen, "the Stop started no drain"
    assert not any(PASSWORD.encode() in cmdline or b"PWNED" in cmdline for cmdline in seen.values()), seen
    assert _drain(url, env)["hooks"] == 0  # that drain recorded the Stop


def test_url_file_is_read_by_every_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store/events.db"
    holder = tmp_path / "url"
    holder.write_text(f"\n{url}\n")
    env = _env(tmp_path)
    r = subprocess.run([EVSTORE, "--url-file", str(holder), "init"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "store" / "events.db").exists()
    r = subprocess.run([EVSTORE, "--url-file", str(tmp_path / "none"), "runs"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith(f"Error: --url-file {tmp_path / 'none'}: cannot read it")
    r = subprocess.run([EVSTORE, "--url", url, "--url-file", str(holder), "runs"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "not both" in r.stderr


def test_a_dry_run_writes_no_url_file_and_the_spool_is_the_owners(pg_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    env = _env(tmp_path)
    url = pg_url.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)
    r = subprocess.run([EVSTORE, "--url", url, "hook", "install", "--project", "--dry-run"], cwd=folder, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--url-file" in r.stdout and PASSWORD not in r.stdout
    assert not (tmp_path / "config" / "evstore" / "urls").exists()  # a dry run changes nothing
    sqlite = f"sqlite:///{folder}/store/events.db"
    _install(folder, env, "--url", sqlite)
    _run_hook(_installed_command(folder), folder, env, "s-4")
    assert stat.S_IMODE((folder / "store" / "spool").stat().st_mode) == 0o700  # calls wait here unscrubbed


def test_a_password_in_the_urls_query_never_lands_in_the_settings_or_a_message(pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL's drivers take ``?password=`` (and ``?sslpassword=``) as connection options: such a URL is
    as secret as one with ``user:PASSWORD@`` and is referenced through --url-file the same way."""
    folder = tmp_path / "proj"
    folder.mkdir()
    env = _env(tmp_path)
    secret = "q-hunter2-query"
    url = pg_url + ("&" if "?" in pg_url else "?") + f"password={secret}"
    r = subprocess.run([EVSTORE, "--url", url, "init"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert secret not in r.stdout + r.stderr and "password=***" in r.stdout
    r = _install(folder, env, "--url", url)
    text = (folder / ".claude" / "settings.json").read_text(encoding="utf-8")
    assert secret not in text and "--url-file" in text and secret not in r.stdout + r.stderr
    _run_hook(_installed_command(folder), folder, env, "s-5")
    assert _drain(url, env)["hooks"] == 1
