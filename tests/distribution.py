"""A stand-in installed distribution with entry points (plain module: ``from distribution
import installed_distribution``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def installed_distribution(
    folder: Path, name: str, version: str, group: str, entries: dict[str, str]
) -> Iterator[Path]:
    """``folder`` on ``sys.path`` holding ``<name>-<version>.dist-info`` whose entry points of
    ``group`` are ``entries`` (entry point name -> ``module:object``); removed after."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
