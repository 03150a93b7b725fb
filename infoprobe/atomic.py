"""Write outputs under a temporary name and rename, so a crash never leaves a half output."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class OutputExistsError(FileExistsError):
    """The output path exists and overwriting was not asked for."""


def temp_name(path: Path) -> Path:
    """``NAME.tmp-<pid>`` beside ``path``: the name a half-written output lives under."""
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def refuse_existing(path: Path, overwrite: bool, what: str = "output") -> None:
    """Raise :class:`OutputExistsError` if ``path`` exists and ``overwrite`` is false."""
    if path.exists() and not overwrite:
        raise OutputExistsError(
            f"{what} {path} already exists; pass --overwrite (overwrite=True) to replace it"
        )


@contextmanager
def atomic_output(
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    directory: bool = False,
    what: str = "output",
) -> Iterator[Path]:
    """Yield a temporary path to fill; on success it replaces ``path`` in one rename.

    On an exception the temporary output is removed and ``path`` is untouched. With
    ``directory=True`` the temporary path is created as an empty folder.
    """
    path = Path(path)
    refuse_existing(path, overwrite, what)
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
