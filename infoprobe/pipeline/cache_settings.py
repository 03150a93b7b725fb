"""What a cache holds and how it is computed (:class:`CacheSettings`), and the checks
every stage's settings share: plain data, so the command line reads them without loading
torch (:mod:`infoprobe.pipeline.caching` computes the cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from infoprobe.base.devices import valid_device
from infoprobe.hooks.errors import CacheError
from infoprobe.hooks.schema import STORAGE_DTYPES
from infoprobe.hooks.sites import check_site_spec
from infoprobe.model_config import MAX_SEED

DATA_SEED_OFFSET = 10_000
"""Default data seed = training seed + this (never equal to the training seed)."""
SAMPLER = "task.sample(size_b, numpy.random.default_rng([data_seed, b]))"
CACHE_BATCH_OPTION = {"cli": {"flags": ("--cache-batch",), "dest": "cache_batch", "metavar": "B"}}
"""The command-line spelling of a cache's forward-pass batch, on every command."""


@dataclass(frozen=True)
class CacheSettings:
    """What a cache holds and how it is computed (``infoprobe cache``; a run's cache stage
    takes ``sites``, ``batch_size`` and ``device`` from its RunSettings, whose defaults are
    these). The values are checked by :func:`~infoprobe.hooks.plan_cache` before any file
    is opened.

    Args:
        n: number of samples N
        sites: hook sites: presets (residual, attention, layers, all), hook names or
            re:REGEX, comma-separated
        batch_size: samples per forward pass and per commit
        dtype: activation storage dtype (inputs and targets stay float32)
        data_seed: seed of the samples
        random_init_seed: cache a random-init control: same architecture and samples,
            weights freshly initialised from SEED (``None``: the trained weights)
        device: torch device of the forward passes
    """

    n: int = field(default=20_000, metadata={"cli": {"metavar": "N"}})
    sites: str = "residual,attention"
    batch_size: int = field(
        default=512,
        metadata={"cli": {**CACHE_BATCH_OPTION["cli"], "aliases": ("--batch",)}},
    )
    dtype: Literal["float32", "float16"] = "float32"
    data_seed: int | None = field(
        default=None,
        metadata={"cli": {"default_text": f"the training seed + {DATA_SEED_OFFSET}"}},
    )
    random_init_seed: int | None = field(
        default=None, metadata={"cli": {"flags": ("--random-init",), "metavar": "SEED"}}
    )
    device: str = "cpu"

    def __post_init__(self) -> None:
        """Validate every setting before any file is opened."""
        check_setting(self, CacheError, "n", "batch_size", kind="count")
        check_setting(self, CacheError, "data_seed", "random_init_seed", kind="seed")
        check_setting(self, CacheError, "device", kind="device")
        if self.dtype not in STORAGE_DTYPES:
            raise CacheError(
                f"CacheSettings.dtype: expected one of {STORAGE_DTYPES}, got {self.dtype!r}"
            )
        check_site_spec(self.sites)  # the names are checked against the model later

    def job_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`checkpoint_cache_job`."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def check_setting(settings: Any, error: type[Exception], *names: str, kind: str) -> None:
    """Raise ``error`` naming ``settings``' field when one of ``names`` is not a ``kind``:
    ``count`` (an integer >= 1), ``seed`` (None or an integer in 0..2**63-1) or ``device``
    (a torch device name)."""
    for name in names:
        value = getattr(settings, name)
        if kind == "device":
            if valid_device(value):
                continue
            expected = "a torch device such as 'cpu', 'cuda' or 'cuda:0'"
        else:
            integer = isinstance(value, int) and not isinstance(value, bool)
            if kind == "count":
                ok, expected = integer and value >= 1, "an integer >= 1"
            else:
                ok = value is None or (integer and 0 <= value <= MAX_SEED)
                expected = "None or an integer in 0..2**63-1"
            if ok:
                continue
        raise error(f"{type(settings).__name__}.{name}: expected {expected}, got {value!r}")
