"""Write outputs under a temporary name and rename, so a crash never leaves a half output.

``--overwrite`` only ever replaces an output of the same kind that infoprobe wrote: every
output carries a format marker (the ``format`` field of the header of docs/conventions.md:
a JSON file's or a folder's ``summary.json`` / ``checkpoint.json`` / ``run.json`` field,
an HDF5 file's root attribute; predicted-sets files of schema 1 had ``schema`` instead),
and a path whose marker is missing or of another kind is refused, never deleted.

:func:`temp_name` is the hub's one temporary-name scheme. The leaves cannot import the hub,
so ``infoprobe.hooks`` (``hooks/hdf5.py``) and ``infoprobe.probes`` (``probes/results.py``)
keep small copies of it that make the same ``NAME.tmp-<pid>`` names, so one pattern marks
every half-written output (and :func:`remove_stale_temps` recognises all of them).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FOLDER_MANIFESTS = ("summary.json", "checkpoint.json", "run.json")
"""Files whose ``format`` field names the kind of an infoprobe output folder."""


class OutputExistsError(FileExistsError):
    """The output path exists and overwriting was not asked for (or it is not ours)."""


class OutputPathError(ValueError):
    """The output path cannot be written (under a file, in a read-only folder)."""


def _json_format(path: Path) -> str | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    found = value.get("format") if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def output_format(path: Path) -> str | None:
    """The format marker of an infoprobe output at ``path``, or None if it has none."""
    if path.is_dir():
        for name in FOLDER_MANIFESTS:
            if (path / name).is_file():
                return _json_format(path / name)
        return None
    if not path.is_file():
        return None
    from infoprobe.hooks.hdf5 import is_hdf5_file, plain_attr

    if not is_hdf5_file(path):
        return _json_format(path)
    import h5py

    try:
        with h5py.File(path, "r") as f:
            found = plain_attr(f.attrs.get("format", f.attrs.get("schema")))
    except OSError:
        return None
    return found if isinstance(found, str) else None


def check_writable(path: Path, what: str = "output") -> None:
    """Refuse, before any work, a path that could not be written at the end: its nearest
    existing ancestor must be a writable folder (missing folders are created later)."""
    ancestor = path.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(f"{what} {path}: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {path}: folder {ancestor} is not writable")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a process of another user holds that pid
    return True


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove ``NAME.tmp-<pid>`` leftovers of ``path`` whose process no longer runs (a
    killed run); returns what was removed. Another live process's temp is left alone."""
    path = Path(path)
    removed = []
    for tmp in path.parent.glob(f"{path.name}.tmp-*"):
        pid = tmp.name.rsplit(".tmp-", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            _remove(tmp)
            removed.append(tmp)
    return removed


def temp_name(path: Path) -> Path:
    """``NAME.tmp-<pid>`` beside ``path``: the name a half-written output lives under (the
    leaves' copies in hooks/hdf5.py and probes/results.py must make the same names)."""
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def refuse_existing(
    path: Path, overwrite: bool, what: str = "output", kind: str | None = None
) -> None:
    """Raise :class:`OutputExistsError` if ``path`` exists and ``overwrite`` is false, or
    if ``kind`` is given and what stands at ``path`` is not an infoprobe output whose
    format marker starts with ``kind`` (then even ``overwrite`` does not replace it)."""
    if not (path.exists() or path.is_symlink()):
        return
    if not overwrite:
        raise OutputExistsError(
            f"{what} {path} already exists; pass --overwrite (overwrite=True) to replace it"
        )
    if kind is not None:
        found = output_format(Path(path))
        if found is None or not found.startswith(kind):
            marker = "no infoprobe format marker" if found is None else f"format {found!r}"
            raise OutputExistsError(
                f"{path} is not an infoprobe {what} ({marker}, expected {kind!r}); "
                "--overwrite only replaces infoprobe's own output of the same kind: move it "
                "away or choose another output path"
            )


@contextmanager
def atomic_output(
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    directory: bool = False,
    what: str = "output",
    kind: str | None = None,
) -> Iterator[Path]:
    """Yield a temporary path to fill; on success it replaces ``path`` in one rename.

    On an exception the temporary output is removed and ``path`` is untouched. With
    ``directory=True`` the temporary path is created as an empty folder. ``kind``: the
    format marker an existing ``path`` must carry to be replaced (see the module doc).
    """
    path = Path(path)
    refuse_existing(path, overwrite, what, kind)
    check_writable(path, what)
    remove_stale_temps(path)
    tmp = temp_name(path)
    _remove(tmp)
    if directory:
        tmp.mkdir(parents=True)
    else:
        tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if path.exists():
        old = path.with_name(f"{path.name}.old-{os.getpid()}")
        path.rename(old)
        tmp.rename(path)
        _remove(old)
    else:
        tmp.rename(path)
