"""Write outputs under a temporary name and rename, so a crash never leaves a half output.

``--overwrite`` only ever replaces an output of the same kind that infoprobe wrote: every
output carries a format marker (its header's ``format``, or the marker of a figure or page;
``infoprobe.base.markers`` writes and reads them), and a path whose marker is missing or of
another kind is refused, never deleted. An output that exists is refused without
``overwrite``.

Every writer of an output ``NAME`` holds an exclusive ``flock`` on ``NAME.infoprobe-lock``
beside it while it writes (:func:`output_lock`; the file holds the writer's pid and is
removed when the writer is done; the kernel drops a killed process's lock, so a stale lock
file never blocks). A second process writing the same output is refused at once with
:class:`OutputBusyError`: "another process (pid N) is writing NAME". Within one process
the lock is re-entrant.

:func:`temp_name` (``NAME.tmp-<pid>``) is the one temporary-name scheme; the leaves
(``infoprobe.hooks``, ``infoprobe.probes``) import it and the lock from this base. Names
beside ``NAME`` stay within the file system's 255-byte name limit: a name too long to take
the suffix is cut and ends in ``~`` and 12 hex digits of its SHA-256
(:func:`sibling_name`), so a legal output name always has legal temporary names.
:func:`remove_stale_temps` removes the temps of killed runs, matching that literal name.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import inspect
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from infoprobe.base.errors import UserError
from infoprobe.base.markers import output_format

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "OutputBusyError",
    "OutputExistsError",
    "OutputPathError",
    "atomic_output",
    "check_writable",
    "locked_output",
    "output_lock",
    "refuse_existing",
    "remove_stale_temps",
    "save_tensors",
    "temp_name",
]

NAME_MAX = 255
"""Longest file name in bytes (Linux, macOS)."""

SUFFIX_ROOM = len(".tmp-") + 10
"""Bytes kept for a suffix: ``.tmp-``/``.old-`` and a pid of up to 10 digits."""

LOCK_SUFFIX = ".infoprobe-lock"

_held: dict[str, int] = {}
"""Outputs whose lock this process holds: path -> the lock file's descriptor."""


class OutputBusyError(OSError):
    """Another process is writing the same output (it holds the output's lock)."""


def sibling_stem(name: str) -> str:
    """``name``, cut to leave room for a suffix of up to :data:`SUFFIX_ROOM` bytes (a cut
    name ends in ``~`` and 12 hex digits of the SHA-256 of the whole name)."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) + SUFFIX_ROOM <= NAME_MAX:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    keep = raw[: NAME_MAX - SUFFIX_ROOM - len(digest) - 1]
    return keep.decode("utf-8", "ignore") + "~" + digest


def sibling_name(path: Path, suffix: str) -> Path:
    """``NAME<suffix>`` beside ``path`` (suffix ``.tmp-<pid>``, ``.old-<pid>``, the lock's),
    within the name limit."""
    return path.with_name(sibling_stem(path.name) + suffix)


def save_tensors(
    tensors: dict[str, Any], path: Path, metadata: dict[str, str] | None = None, *, name: Path
) -> None:
    """Write ``tensors`` (torch, CPU) as safetensors to ``path``; a failure to write (a full
    disk, a quota) is an :class:`OSError` naming ``name``, the file the user asked for
    (safetensors reports it as its own error type, without the file)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path), metadata=metadata)
    except SafetensorError as err:
        raise OSError(f"{name}: could not be written ({' '.join(str(err).split())})") from None


def usual_mode(path: str | os.PathLike) -> None:
    """Give ``path`` the mode a plain ``open()`` would (0666 less the umask): some writers
    (safetensors' among them) create their files readable by their owner alone."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def temp_name(path: Path) -> Path:
    """``NAME.tmp-<pid>`` beside ``path``: the name a half-written output lives under."""
    return sibling_name(Path(path), f".tmp-{os.getpid()}")


def lock_path(path: Path) -> Path:
    """The lock file of the output ``path``."""
    return sibling_name(Path(path), LOCK_SUFFIX)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"


def _key(path: Path) -> str:
    path = Path(path)
    return os.path.join(os.path.realpath(path.parent), path.name)


@contextmanager
def output_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold the write lock of the output ``path``; raise :class:`OutputBusyError` at once
    if another process holds it. Missing folders above ``path`` are created, and removed
    again when the lock is let go if they are still empty."""
    path = Path(path)
    key = _key(path)
    if key in _held:  # this process already writes it (an outer writer): re-entrant
        yield
        return
    check_writable(path)
    made = _make_parents(path.parent)
    lock = lock_path(path)
    try:
        fd = _acquire(lock, path)
    except BaseException:
        _remove_empty(made)
        raise
    _held[key] = fd
    try:
        yield
    finally:
        del _held[key]
        try:
            lock.unlink(missing_ok=True)  # unlink while holding it, then let go
        finally:
            os.close(fd)
            _remove_empty(made)


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; return those created, deepest first."""
    made = []
    while not folder.exists() and folder != folder.parent:
        made.append(folder)
        folder = folder.parent
    for missing in reversed(made):
        missing.mkdir(exist_ok=True)
    return made


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a lock created that are still empty (a refused writer leaves
    nothing behind)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def locked_output(argument: str) -> Callable[[F], F]:
    """Decorate a writer so that it holds :func:`output_lock` of its output, the argument
    named ``argument``, for the whole call (a second process writing it is refused at once,
    before any work)."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def locked(*args: Any, **kwargs: Any) -> Any:
            out = signature.bind(*args, **kwargs).arguments[argument]
            with output_lock(out):
                return function(*args, **kwargs)

        return locked  # type: ignore[return-value]

    return decorate


def _acquire(lock: Path, path: Path) -> int:
    while True:
        if lock.is_symlink() or (lock.exists() and not lock.is_file()):
            raise OutputBusyError(
                f"{lock} (the lock file of {path}) is not a regular file; remove it",
            )
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise OutputBusyError(
                f"another process (pid {pid}) is writing {path}; wait for it to finish or "
                "choose another output",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a file the previous holder unlinked after we opened it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)


class OutputExistsError(FileExistsError):
    """The output path exists and overwriting was not asked for (or it is not ours)."""


class OutputPathError(UserError):
    """The output path cannot be written (under a file, in a read-only folder)."""


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
    """Remove the ``NAME.tmp-<pid>`` leftovers of ``path`` that a killed run left; returns
    what was removed. Only the literal name of :func:`temp_name` counts (``NAME`` is never a
    pattern), only regular files (never a folder or a link), and only when ``<pid>`` is
    not a running process: another live process's temp is left alone."""
    path = Path(path)
    prefix = sibling_stem(path.name) + ".tmp-"
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        pid = entry.name[len(prefix) :] if entry.name.startswith(prefix) else ""
        if not (pid.isdigit() and pid == str(int(pid))):
            continue
        if not entry.is_file(follow_symlinks=False):
            continue
        if int(pid) != os.getpid() and not _alive(int(pid)):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


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
    format marker an existing ``path`` must carry to be replaced (see the module doc;
    every output of infoprobe gives it). The output's lock is held throughout: raises
    :class:`OutputBusyError` if another process is writing ``path``.
    """
    path = Path(path)
    refuse_existing(path, overwrite, what, kind)
    check_writable(path, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(path):
        refuse_existing(path, overwrite, what, kind)  # another writer may have finished
        remove_stale_temps(path)
        tmp = temp_name(path)
        if tmp.is_dir() and not tmp.is_symlink():
            raise OutputPathError(
                f"{what} {path}: {tmp} is a folder in the way of the temporary output "
                "(left by a killed run, or not infoprobe's): remove it"
            )
        _remove(tmp)
        if directory:
            tmp.mkdir()
        try:
            yield tmp
        except BaseException:
            _remove(tmp)
            raise
        if path.exists() or path.is_symlink():
            old = sibling_name(path, f".old-{os.getpid()}")
            path.rename(old)
            tmp.rename(path)
            _remove(old)
        else:
            tmp.rename(path)
