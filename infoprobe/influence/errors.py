"""Errors of the flow instrument (``ValueError`` subclasses: the CLI prints one line, exits 2)."""

from __future__ import annotations

from infoprobe.base.errors import UserError


class InfluenceError(UserError):
    """Bad input to the flow instrument; the message names the file or field, expected, actual."""


class InfluenceSettingsError(InfluenceError):
    """An :class:`~infoprobe.influence.InfluenceSettings` field has an invalid value."""


class InfluenceFileError(InfluenceError):
    """A path is not a readable, complete influence file (or must not be replaced)."""


class IncompleteInfluenceError(InfluenceFileError):
    """The influence file's writer was interrupted (``n_committed`` < n)."""


class InfluenceMismatchError(InfluenceFileError):
    """An unfinished influence file was written with other settings or provenance."""


class InfluenceDiskError(InfluenceError):
    """The file system cannot hold the influence file (nothing of it changed)."""
