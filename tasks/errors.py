"""The one exception class of the tasks pillar."""


class TaskError(ValueError):
    """A task name, parameter or input array is invalid.

    Messages name the task, the field, what was expected and what was given,
    and list the valid choices where there is a finite set of them.
    """
