"""Errors of the activation-cache pillar; all subclass :class:`CacheError` (a ValueError)."""

from __future__ import annotations

from infoprobe.base.errors import UserError


class CacheError(UserError):
    """Base class: something about an activation cache, its sites or its inputs is wrong."""


class UnknownSiteError(CacheError):
    """A requested hook site is not in ``model.hook_dict`` (the message lists valid names)."""


class SiteCaptureError(CacheError):
    """A requested hook site did not fire, or fired with a tensor that has no batch axis."""


class BatchFunctionError(CacheError):
    """``batch_fn`` returned arrays of the wrong type, shape or dtype."""


class NotACacheError(CacheError):
    """The file is not an infoprobe activation cache (foreign HDF5, or not HDF5 at all)."""


class NewerSchemaError(CacheError):
    """The cache was written with a newer schema than this infoprobe can read."""


class TruncatedCacheError(CacheError):
    """The file is damaged: unreadable HDF5, or datasets shorter than the recorded N."""


class IncompleteCacheError(CacheError):
    """``n_committed`` < N: the writer was interrupted; re-run the same command to resume."""


class ProvenanceMismatchError(CacheError):
    """An existing cache was made from a different checkpoint, data spec, sites or dtype."""


class InsufficientDiskError(CacheError):
    """The output's file system has less free space than the cache needs."""


class Float16OverflowError(CacheError):
    """An activation exceeds the float16 range (|x| > 65504); store as float32 instead."""
