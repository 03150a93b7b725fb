"""Format markers: what kind of infoprobe output stands at a path.

``--overwrite`` only ever replaces an output of the same kind that infoprobe wrote
(:func:`infoprobe.base.atomic.refuse_existing`), so every output carries a format marker:
the ``format`` field of the header of docs/conventions.md (a JSON file's, a folder's
``summary.json`` / ``checkpoint.json`` / ``run.json`` field, an HDF5 file's root attribute;
predicted-sets files of schema 1 had ``schema`` instead). Figures and pages have no
header, so they carry the marker themselves: a PNG's ``infoprobe-format`` text chunk
(:func:`mark_png`), a PDF's ``Subject`` or an SVG's ``Description``
``infoprobe-format=KIND`` (:func:`figure_bytes`), an HTML page's
``<meta name="infoprobe-format">`` tag (:func:`mark_html`). :func:`output_format` reads
any of them.
"""

from __future__ import annotations

import io
import json
import re
import struct
import zlib
from pathlib import Path
from typing import Any

from infoprobe.base.header import is_hdf5_file, plain_attr

__all__ = [
    "FIGURE_METADATA",
    "FOLDER_MANIFESTS",
    "MARKER",
    "PNG_SIGNATURE",
    "figure_bytes",
    "mark_html",
    "mark_png",
    "output_format",
]

FOLDER_MANIFESTS = ("summary.json", "checkpoint.json", "run.json")
"""Files whose ``format`` field names the kind of an infoprobe output folder."""


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
