"""Errors about how a command or function was called (shown to users as one line)."""


class UsageError(ValueError):
    """Options or arguments that do not fit together; the message names the fix."""


class CompareInputError(ValueError):
    """An input array of the comparison has the wrong dtype, shape or non-finite values."""
