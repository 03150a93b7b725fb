"""Write outputs under a temporary name and rename, so a crash never leaves a half output.

``--overwrite`` only ever replaces an output of the same kind that infoprobe wrote: every
output carries a format marker (the ``format`` field of the header of docs/conventions.md:
a JSON file's or a folder's ``summary.json`` / ``checkpoint.json`` / ``run.json`` field,
an HDF5 file's root attribute; predicted-sets files of schema 1 had ``schema`` instead;
a PNG figure's ``infoprobe-format`` text chunk and an HTML page's
``<meta name="infoprobe-format">`` tag, see :func:`mark_png` and :func:`mark_html`), and
a path whose marker is missing or of another kind is refused, never deleted. An output
that exists is refused without ``overwrite``.

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
import io
import json
import os
import re
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "OutputBusyError",
    "OutputExistsError",
    "OutputPathError",
    "atomic_output",
    "check_writable",
    "figure_bytes",
    "locked_output",
    "mark_html",
    "mark_png",
    "output_format",
    "output_lock",
    "refuse_existing",
    "remove_stale_temps",
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


MARKER = "infoprobe-format"
"""Key of the format marker of a PNG (text chunk) or HTML page (meta tag)."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_HTML_MARKER = re.compile(rb'<meta name="infoprobe-format" content="([^"<>]*)">')


def mark_png(png: bytes, kind: str) -> bytes:
    """``png`` with a ``tEXt`` chunk ``infoprobe-format`` = ``kind`` right after its header
    chunk (``IHDR``), the format marker :func:`output_format` reads."""
    if not png.startswith(PNG_SIGNATURE):
        raise ValueError(f"mark_png: expected PNG bytes, got {png[:8]!r}")
    (length,) = struct.unpack(">I", png[8:12])
    end = 8 + 12 + length  # signature, then IHDR: length, type, data, CRC
    body = b"tEXt" + MARKER.encode() + b"\0" + kind.encode("latin-1")
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
    return png[:end] + chunk + png[end:]


def _png_format(path: Path) -> str | None:
    data = path.read_bytes()
    at = len(PNG_SIGNATURE)
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"IDAT":
            return None  # the marker sits before the image data
        if kind == b"tEXt" and body.startswith(MARKER.encode() + b"\0"):
            return body[len(MARKER) + 1 :].decode("latin-1")
        at += 12 + length
    return None


def mark_html(page: str, kind: str) -> str:
    """``page`` with ``<meta name="infoprobe-format" content="KIND">`` right after its
    ``<head>`` tag (at its start if it has none), the marker :func:`output_format` reads."""
    if not re.fullmatch(r"[\w.-]+", kind):
        raise ValueError(f"mark_html: kind must be letters, digits, '.', '-', got {kind!r}")
    tag = f'<meta name="{MARKER}" content="{kind}">'
    head = re.search(r"<head(\s[^>]*)?>", page, re.IGNORECASE)
    at = head.end() if head else 0
    return page[:at] + tag + page[at:]


FIGURE_METADATA = {"pdf": "Subject", "svg": "Description"}
"""Figure formats other than PNG that carry the marker, and the metadata field holding
``infoprobe-format=KIND``; a figure of any other format carries none, so an existing one
is never replaced."""
_TEXT_MARKER = re.compile(rb"infoprobe-format=([\w.-]+)")


def figure_bytes(fig: Any, fmt: str, kind: str, dpi: int = 110) -> bytes:
    """A matplotlib figure saved in format ``fmt`` (``png``, ``pdf``, ...) carrying the
    format marker ``kind``: a PNG's text chunk (:func:`mark_png`), a PDF's ``Subject`` or
    an SVG's ``Description`` ``infoprobe-format=KIND``."""
    field_name = FIGURE_METADATA.get(fmt)
    metadata = {field_name: f"{MARKER}={kind}"} if field_name else None
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=dpi, metadata=metadata)
    data = buffer.getvalue()
    return mark_png(data, kind) if fmt == "png" else data


def _text_format(path: Path) -> str | None:
    """The ``infoprobe-format=KIND`` marker within the first or last 64 KiB of a file."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(1 << 16)
        f.seek(max(0, size - (1 << 16)))
        tail = f.read()
    found = _TEXT_MARKER.search(head) or _TEXT_MARKER.search(tail)
    return found.group(1).decode() if found else None


def _html_format(head: bytes) -> str | None:
    found = _HTML_MARKER.search(head)
    return found.group(1).decode() if found else None


def output_format(path: Path) -> str | None:
    """The format marker of an infoprobe output at ``path``, or None if it has none."""
    path = Path(path)
    if path.is_dir():
        for name in FOLDER_MANIFESTS:
            if (path / name).is_file():
                return _json_format(path / name)
        return None
    if not path.is_file():
        return None
    from infoprobe.hooks.hdf5 import is_hdf5_file, plain_attr

    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if head.startswith(PNG_SIGNATURE):
        return _png_format(path)
    if head.lstrip()[:1] == b"<":  # HTML, or SVG
        return _html_format(head) or _text_format(path)
    if not is_hdf5_file(path):
        return _json_format(path) or _text_format(path)
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
