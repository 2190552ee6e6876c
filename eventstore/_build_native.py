"""Builds evstore's optional C accelerator of the Merkle tree's hashing (eventstore/_tree_native.c) when
the wheel is built, if it can; else the wheel is pure Python and evstore hashes in Python (the same
hashes, slower appends: docs/proofs.md).  Hatchling runs this as its custom build hook; nothing else
in the build changes.

It compiles with the interpreter's own compiler and flags (sysconfig's ``LDSHARED`` and ``CCSHARED``;
``$CC`` replaces the compiler) and links OpenSSL's libcrypto (its headers: Debian's ``libssl-dev``).
Any failure (no compiler, no headers, another platform) is a warning, never a failed install.
``EVSTORE_PURE_TREE=1`` builds no extension.  An editable install (``pip install -e``) compiles it
beside the source, where the checkout imports it; after editing the C file, run this file
(``python eventstore/_build_native.py``) or the editable install again.

Why a hook and not setuptools' ``Extension(optional=True)``: the rest of the build (package data, the
migrations copied into the wheel) stays hatchling's, unchanged; the hook is the one C file's build.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent  # the checkout (this file is eventstore/_build_native.py)
SOURCE = ROOT / "eventstore" / "_tree_native.c"
MODULE = "_tree_native"


def filename() -> str:
    return MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def compile_native(out: Path, env: dict[str, str] | None = None) -> str | None:
    """Compile the extension to ``out``; None if it was built, else why not (a line for a warning)."""
    env = dict(os.environ if env is None else env)
    if env.get("EVSTORE_PURE_TREE", "") not in ("", "0"):
        return "EVSTORE_PURE_TREE is set"
    ldshared = shlex.split(sysconfig.get_config_var("LDSHARED") or "")
    if not ldshared:
        return "this Python gives no shared-library link command (sysconfig LDSHARED)"
    if env.get("CC"):
        ldshared[0:1] = shlex.split(env["CC"])
    if shutil.which(ldshared[0], path=env.get("PATH")) is None:
        return f"no C compiler ({ldshared[0]} not found)"
    includes = {sysconfig.get_paths()["include"], sysconfig.get_paths()["platinclude"]}
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    # The source's digest goes into the module (SOURCE_SHA256): a test tells a stale in-place build.
    cmd = [*ldshared, *shlex.split(sysconfig.get_config_var("CCSHARED") or ""), "-O2",
           f'-DEVSTORE_SOURCE_SHA256="{digest}"', *(f"-I{d}" for d in sorted(includes)), str(SOURCE),
           "-o", str(out), "-lcrypto"]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{shlex.join(cmd)}: {exc}"
    if r.returncode != 0:
        err = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return f"{shlex.join(cmd)} failed: {err}"
    return None


def build_in_place() -> str | None:
    """Compile beside the source (an editable install, a checkout); None if built, else why not."""
    return compile_native(SOURCE.parent / filename())


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, or imported by a test, without hatchling
    BuildHookInterface = object  # type: ignore[assignment,misc]


class NativeTreeHook(BuildHookInterface):  # type: ignore[type-arg]
    """Hatchling's custom build hook: the extension into the wheel (or beside the source for an
    editable install), and a platform wheel then; a pure wheel if it cannot be built."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        if version == "editable":
            why = build_in_place()
        else:
            self._tmp = tempfile.mkdtemp(prefix="evstore-native-")
            out = Path(self._tmp) / filename()
            why = compile_native(out)
            if why is None:
                build_data["force_include"][str(out)] = f"eventstore/{filename()}"
        if why is not None:
            print(f"evstore: the Merkle tree's C hashing is not built ({why}); "
                  "evstore will hash in Python (same hashes, slower appends).", file=sys.stderr)
            return
        if version != "editable":
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    why = build_in_place()
    print(f"not built: {why}" if why else f"built {SOURCE.parent / filename()}")
    sys.exit(1 if why else 0)
