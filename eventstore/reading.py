"""Reading source files without reading the disk: bounded reads and walks that stay in the named tree.

    >>> files, folders = entries(Path("tasks/PROJ-1"), root=Path("tasks"))
    >>> data = read_bounded(files[0])  # IngestError before reading a file over the limit

What ingest promises for a folder it is given (docs/capture.md, "Bounds"):

- every file is ``stat``-ed before it is opened: a file over the limit
  (:data:`eventstore.config.MAX_SNAPSHOT_BYTES`) is refused without reading a byte of it, a FIFO,
  socket or device is never opened (an open could block, a read never end);
- a symlink to a directory is never followed (no loops, nothing around the tree), and a symlink to
  a file is followed only when it resolves inside the named tree;
- a read takes at most ``limit + 1`` bytes, so a file that grows between the ``stat`` and the read
  is still refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from eventstore import config
from eventstore.errors import IngestError


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_size(path: Path, size: int, limit: int | None = None, what: str = "file") -> None:
    """Refuse ``size`` bytes over ``limit`` (default: the snapshot limit), naming ``path``."""
    limit = config.MAX_SNAPSHOT_BYTES if limit is None else limit
    if size > limit:
        raise IngestError(f"{path}: {what} of {size} bytes exceeds the snapshot limit of {limit} bytes "
                          "(EVSTORE_MAX_SNAPSHOT_BYTES); it was not read. Nothing was written.")


def read_bounded(path: Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path``; :class:`IngestError` before reading one over ``limit``."""
    limit = config.MAX_SNAPSHOT_BYTES if limit is None else limit
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise IngestError(f"{path}: not a regular file (a pipe, socket or device is never read).")
        check_size(path, st.st_size, limit)
        with open(path, "rb") as f:
            # read(n) allocates n bytes up front: ask for what the stat said (+1 to see growth),
            # and only for a file that grew since, up to the limit.
            data = f.read(st.st_size + 1)
            if len(data) > st.st_size:
                data += f.read(max(limit + 1 - len(data), 0))
    except OSError as exc:
        raise IngestError(f"{path}: cannot read ({_why(exc)}).") from exc
    check_size(path, len(data), limit)  # it grew since the stat
    return data


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` (symlinks resolved) lies in ``root`` (resolved)."""
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))
    except OSError:
        return False


def entries(folder: Path, *, root: Path | None = None) -> tuple[list[Path], list[Path]]:
    """(regular files, folders) directly in ``folder``, each sorted by name, ``stat`` only.

    A symlinked folder is left out (never followed); a symlinked file only when it resolves to a
    regular file inside ``root`` (default: ``folder``)."""
    root = folder if root is None else root
    files, folders = [], []
    try:
        with os.scandir(folder) as it:
            listed = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise IngestError(f"{folder}: cannot list ({_why(exc)}).") from exc
    for e in listed:
        try:
            if e.is_symlink():
                if e.is_file() and inside(Path(e.path), root):
                    files.append(Path(e.path))
            elif e.is_dir(follow_symlinks=False):
                folders.append(Path(e.path))
            elif e.is_file(follow_symlinks=False):
                files.append(Path(e.path))
        except OSError:  # vanished or unreadable between the listing and the stat: not there
            continue
    return files, folders


def walk_files(root: Path, suffix: str = "") -> list[Path]:
    """Regular files under ``root`` ending in ``suffix``, depth first, never through a symlinked folder."""
    out: list[Path] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        files, folders = entries(folder, root=root)
        out.extend(f for f in files if f.name.endswith(suffix))
        stack.extend(reversed(folders))
    return out


__all__ = ["check_size", "entries", "inside", "read_bounded", "walk_files"]
