"""The run folder's error: a settings value, or a folder's outputs, that a run cannot take."""

from infoprobe.base.errors import UserError


class RunFolderError(UserError):
    """A run folder holds outputs made with other settings, or a run setting is invalid."""
