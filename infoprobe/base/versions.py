"""The versions every output records in its provenance, read from the installed
distributions' metadata (transformer-lens 4.x has no ``__version__``)."""

from __future__ import annotations

import platform
from importlib import metadata

from infoprobe import __version__


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution`` (from its metadata: transformer-lens 4.x
    has no ``__version__``), or ``"unknown"``."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def package_versions() -> dict[str, str]:
    """Versions recorded in every output's provenance."""
    import torch

    return {
        "infoprobe": __version__,
        "torch": torch.__version__,
        "transformer_lens": installed_version("transformer-lens"),
        "python": platform.python_version(),
    }
