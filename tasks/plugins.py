"""Tasks installed by other distributions, through the entry-point group ``infoprobe.tasks``.

A distribution declares, in its pyproject.toml::

    [project.entry-points."infoprobe.tasks"]
    two-hop = "mypkg.tasks:TwoHop"

The entry point's name must be the task's ``name``. :func:`entry_point_tasks` imports
every such entry point; one that fails to import is returned with its error instead of
a class, so the registry can refuse that name alone and keep every other task usable.
"""

from infoprobe.base.plugins import EntryPoint, load_entry_points

GROUP = "infoprobe.tasks"
"""The entry-point group a distribution lists its tasks in."""

EntryPointTask = EntryPoint
"""One entry point of :data:`GROUP` (:class:`~infoprobe.base.plugins.EntryPoint`)."""


def entry_point_tasks() -> list[EntryPoint]:
    """Load every entry point of :data:`GROUP` (installed distributions on ``sys.path``)."""
    return load_entry_points(GROUP)
