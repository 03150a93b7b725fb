"""Tasks installed by other distributions, through the entry-point group ``infoprobe.tasks``.

A distribution declares, in its pyproject.toml::

    [project.entry-points."infoprobe.tasks"]
    two-hop = "mypkg.tasks:TwoHop"

The entry point's name must be the task's ``name``. :func:`entry_point_tasks` imports
every such entry point; one that fails to import is returned with its error instead of
a class, so the registry can refuse that name alone and keep every other task usable.
"""

from dataclasses import dataclass
from typing import Any

GROUP = "infoprobe.tasks"
"""The entry-point group a distribution lists its tasks in."""


@dataclass(frozen=True)
class EntryPointTask:
    """One entry point of :data:`GROUP`: its ``name``, where it comes from (``origin``,
    in words naming the entry point and its distribution), and the object it loaded
    (``target``) or why it failed to load (``error``)."""

    name: str
    origin: str
    target: Any = None
    error: str | None = None


def entry_point_tasks() -> list[EntryPointTask]:
    """Load every entry point of :data:`GROUP` (installed distributions on ``sys.path``)."""
    import importlib
    from importlib.metadata import entry_points

    importlib.invalidate_caches()
    found = []
    for ep in entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        owner = "an unknown distribution" if dist is None else f"distribution {_dist_name(dist)}"
        origin = f"entry point '{ep.name} = {ep.value}' of {owner}"
        try:
            target = ep.load()
        except Exception as err:
            text = " ".join(f"{type(err).__name__}: {err}".split())
            found.append(EntryPointTask(ep.name, origin, error=f"it failed to import ({text})"))
            continue
        found.append(EntryPointTask(ep.name, origin, target=target))
    return found


def _dist_name(dist: Any) -> str:
    name = dist.metadata["Name"] if dist.metadata is not None else None
    return f"{name or '?'} {dist.version or ''}".strip()
