"""The one exception class of the tasks pillar."""

from infoprobe.base.errors import UserError


class TaskError(UserError):
    """A task name, parameter or input array is invalid.

    Messages name the task, the field, what was expected and what was given,
    and list the valid choices where there is a finite set of them.
    """
