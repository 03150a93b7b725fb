"""Objects installed by other distributions, through an entry-point group.

A distribution declares, in its pyproject.toml, for example::

    [project.entry-points."infoprobe.tasks"]
    two-hop = "mypkg.tasks:TwoHop"

:func:`load_entry_points` imports every entry point of a group; one that fails to import
is returned with its error instead of an object, so a registry can refuse that name alone
and keep everything else usable (tasks: :mod:`infoprobe.tasks.plugins`; probe families:
:mod:`infoprobe.probes.families`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EntryPoint", "load_entry_points"]


@dataclass(frozen=True)
class EntryPoint:
    """One entry point: its ``name``, where it comes from (``origin``, in words naming the
    entry point and its distribution), and the object it loaded (``target``) or why it
    failed to load (``error``)."""

    name: str
    origin: str
    target: Any = None
    error: str | None = None


def load_entry_points(group: str) -> list[EntryPoint]:
    """Load every entry point of ``group`` (installed distributions on ``sys.path``)."""
    import importlib
    from importlib.metadata import entry_points

    importlib.invalidate_caches()
    found = []
    for ep in entry_points(group=group):
        dist = getattr(ep, "dist", None)
        owner = "an unknown distribution" if dist is None else f"distribution {_dist_name(dist)}"
        origin = f"entry point '{ep.name} = {ep.value}' of {owner}"
        try:
            target = ep.load()
        except Exception as err:
            text = " ".join(f"{type(err).__name__}: {err}".split())
            found.append(EntryPoint(ep.name, origin, error=f"it failed to import ({text})"))
            continue
        found.append(EntryPoint(ep.name, origin, target=target))
    return found


def _dist_name(dist: Any) -> str:
    name = dist.metadata["Name"] if dist.metadata is not None else None
    return f"{name or '?'} {dist.version or ''}".strip()
