"""Exceptions of the probes pillar: every one is a ``ValueError`` a caller may catch.

Messages name the object (file or array), the field, the expected and the actual value.
"""

from __future__ import annotations

from infoprobe.base.errors import UserError


class ProbeError(UserError):
    """Base class of every error raised by ``infoprobe.probes``."""


class ProbeInputError(ProbeError):
    """An array passed to a probe has the wrong shape, dtype or content."""


class NonFiniteActivationError(ProbeInputError):
    """Activations or targets contain NaN or Inf (the message names the first bad index)."""


class SplitTooSmallError(ProbeError):
    """Too few samples for the train / validation / test split."""


class MissingSiteError(ProbeError):
    """A requested hook site is not in the activation cache (the message lists those present)."""


class ControlMismatchError(ProbeError):
    """A control cache differs from the probed cache in architecture or data spec."""


class ResultsFileError(ProbeError):
    """A probe results file is missing, not a results file, or of a newer schema."""
