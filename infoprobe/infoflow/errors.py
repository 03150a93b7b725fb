"""Exceptions of the InfoFlow engine (all ValueErrors a caller may catch)."""

from infoprobe.base.errors import UserError


class InfoFlowError(UserError):
    """Base class: bad input to the engine (architecture, program, inputs, files)."""


class ArchitectureError(InfoFlowError):
    """The architecture is invalid (e.g. heads list length differs from the layer count)."""


class ProgramError(InfoFlowError):
    """A program does not fit its architecture (e.g. more heads than a layer has)."""


class ScoreAccessError(InfoFlowError):
    """A score function reads an input outside the query's or key's information set."""


class SetsFileError(InfoFlowError):
    """A predicted-sets HDF5 file is missing a field or has the wrong shape."""
