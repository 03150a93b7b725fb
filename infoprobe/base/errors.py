"""Errors about how a command or function was called (shown to users as one line)."""


class UserError(ValueError):
    """Bad input a user can fix; the command line prints it as one line.

    Every infoprobe exception about its input (options, arguments, files, arrays) derives
    from it; a ``ValueError`` for compatibility (``except ValueError`` still catches them).
    """


class UsageError(UserError):
    """Options or arguments that do not fit together; the message names the fix."""


class CompareInputError(UserError):
    """An input array of the comparison has the wrong dtype, shape or non-finite values."""
