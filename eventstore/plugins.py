"""Entry points, read without :mod:`importlib.metadata`: what plugins register.

Two groups are read: ``evstore.dialects`` (a dialect: ``name = "module:Class"``, see
:mod:`eventstore.dialects`) and ``evstore.commands`` (a top-level ``evstore`` command a dialect
contributes: ``name = "module:click_command"``, read by :mod:`eventstore.cli`).  This module
imports nothing but the standard library's basics, so ``evstore --help`` may list plugin
commands without loading a dialect.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Registration:
    """One entry point: its name, ``module:attr``, the distribution and file declaring it, its group."""

    name: str
    value: str
    distribution: str
    file: str
    group: str = "evstore.dialects"

    def where(self) -> str:
        return (f'entry point "{self.name} = {self.value}" of distribution "{self.distribution}" ({self.file}, '
                f"group {self.group})")

    def load(self) -> object:
        return load(self.value)


def load(value: str) -> object:
    """The object ``module:attr`` (``attr`` may be dotted; extras in ``[...]`` are ignored) names."""
    module, _, attr = value.split("[", 1)[0].partition(":")
    obj: object = importlib.import_module(module.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj


def entry_points(group: str) -> list[Registration]:
    """The entry points in ``group`` of the distributions on ``sys.path``.

    Read here from each ``*.dist-info``/``*.egg-info`` folder's ``entry_points.txt`` (the
    packaging spec's format: INI sections, ``name = module:attr``), the first distribution of a
    name on ``sys.path`` winning, as :func:`importlib.metadata.entry_points` does.  The stdlib call
    is not used because importing :mod:`importlib.metadata` (email, zipfile, csv) and its scan cost
    about 100 ms of every command's start-up on this machine against under 2 ms for this loop;
    distributions inside zip files on ``sys.path`` are not seen."""
    out: list[Registration] = []
    seen: set[str] = set()
    header = f"[{group}]"
    for entry in sys.path:
        try:
            folders = sorted(os.scandir(entry or "."), key=lambda e: e.name)
        except OSError:  # missing, not a folder, a zip file
            continue
        for folder in folders:
            stem, dot, ext = folder.name.rpartition(".")
            if not dot or ext not in ("dist-info", "egg-info"):
                continue
            dist = re.sub(r"[-_.]+", "_", stem.partition("-")[0]).lower()
            if dist in seen:
                continue
            seen.add(dist)
            path = os.path.join(folder.path, "entry_points.txt")
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            if header not in text:
                continue
            section = None
            for line in text.splitlines():
                line = line.strip()
                if not line or line[0] in "#;":
                    continue
                if line.startswith("["):
                    section = line
                elif section == header and "=" in line:
                    name, _, value = line.partition("=")
                    out.append(Registration(name.strip(), value.strip(), stem.partition("-")[0], path, group))
    return out
