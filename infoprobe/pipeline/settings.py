"""Settings of the stages after training, validated before any stage touches a file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from infoprobe.base.fdr import FDR_Q as NULL_Q
from infoprobe.hooks import layer_sites, resolve_sites
from infoprobe.hooks.sites import check_site_spec
from infoprobe.influence import InfluenceSettings
from infoprobe.pipeline.cache_settings import CACHE_BATCH_OPTION, CacheSettings, check_setting
from infoprobe.pipeline.errors import RunFolderError
from infoprobe.pipeline.probe_settings import PROBES, ProbeSettings
from infoprobe.probes.errors import ProbeInputError
from infoprobe.probes.families import family

CONTROL_SEED = 12_345
"""Initialisation seed of the random-init control model (fixed, never tuned)."""


@dataclass(frozen=True)
class RunSettings:
    """Settings of the stages after training (the defaults are the documented ones), each
    validated on construction, before any stage touches a file.

    Args:
        n_cache: samples cached and probed (split by sample into train/val/test by the probes)
        sites: hook sites cached (the probes read the layer residuals, the report and
            rollout the attention patterns; see infoprobe cache --help)
        probe: probe family for the position probes: linear (ridge), mlp, query (one
            MLP per state, conditioned on the position: per-sample errors) or critic (is
            the sample's own x(s) in the state, wherever it came from: per-sample
            V-information and p-values)
        linear_beside: with another family than linear, also fit the linear probe
            (probes-linear.h5) and compare it beside, named "decodability (linear probe)"
        batch_size: samples per forward pass when caching
        rollout: compare attention rollout (Abnar & Zuidema 2020) beside InfoFlow
        flow: measure flow (local sensitivity, and its random-init control) on the
            probes' test samples, with ``influence`` settings (docs/influence.md)
        influence: the flow stages' :class:`InfluenceSettings`
        device: torch device of the analysis stages
        null_q: false-discovery rate of the null rule beside the fixed thresholds
            (Benjamini–Hochberg over the grid; docs/report.md), 0 < q < 1
    """

    n_cache: int = field(default=8192, metadata={"cli": {"metavar": "N"}})
    sites: str = CacheSettings.sites
    probe: str = field(default=ProbeSettings.probe, metadata={"cli": {"choices": PROBES}})
    linear_beside: bool = True
    batch_size: int = field(default=CacheSettings.batch_size, metadata=CACHE_BATCH_OPTION)
    rollout: bool = True
    flow: bool = True
    influence: InfluenceSettings = field(default_factory=InfluenceSettings)
    device: str = CacheSettings.device
    null_q: float = NULL_Q

    def __post_init__(self) -> None:
        """Validate every setting before any stage touches a file."""
        check_setting(self, RunFolderError, "n_cache", "batch_size", kind="count")
        check_site_spec(self.sites)  # the names are checked against the model later
        if self.probe not in PROBES:
            raise ProbeInputError(
                f"RunSettings.probe: expected one of {PROBES}, got {self.probe!r}"
            )
        check_setting(self, RunFolderError, "device", kind="device")
        if not isinstance(self.influence, InfluenceSettings):
            raise RunFolderError(
                f"RunSettings.influence: expected InfluenceSettings, got {self.influence!r}"
            )
        if (
            isinstance(self.null_q, bool)
            or not isinstance(self.null_q, int | float)
            or not (0.0 < self.null_q < 1.0)
        ):
            raise RunFolderError(
                f"RunSettings.null_q (--null-q): expected a number in (0, 1), got {self.null_q!r}"
            )
        self.probes.split(self.n_cache)  # raises when the probes' split would be too small

    @cached_property
    def probes(self) -> ProbeSettings:
        """The probe stage's settings: this family and device, ProbeSettings' defaults."""
        return ProbeSettings(probe=self.probe, device=self.device)

    @cached_property
    def beside(self) -> tuple[ProbeSettings, ...]:
        """The probe stages beside the main one: the linear probe when ``linear_beside``
        and the main family is another."""
        if not self.linear_beside or not family(self.probe).trained:
            return ()
        return (ProbeSettings(probe="linear", device=self.device),)

    def cache_options(self) -> dict[str, Any]:
        """The cache stages' options (of :func:`~infoprobe.pipeline.caching.cache_checkpoint`)."""
        return {
            "n": self.n_cache,
            "sites": self.sites,
            "batch_size": self.batch_size,
            "device": self.device,
        }

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["influence"] = self.influence.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSettings:
        """The settings :meth:`to_dict` wrote (validated again, as on construction)."""
        if not isinstance(d, dict) or not isinstance(d.get("influence"), dict):
            raise RunFolderError(f"run settings: expected an object with 'influence', got {d!r}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise RunFolderError(f"run settings: unknown field(s) {unknown}")
        return cls(**{**d, "influence": InfluenceSettings.from_dict(d["influence"])})


def check_sites(hook_names: Sequence[str], n_blocks: int, sites: str) -> list[str]:
    """The hook names ``sites`` selects among a model's ``hook_names``, checked before any
    stage runs: UnknownSiteError for a site the model lacks, RunFolderError when the
    selection lacks what a later stage reads (the probes: the layer residuals; compare and
    the report: every block's attention pattern, where the model exposes them)."""
    chosen = resolve_sites(hook_names, sites)
    patterns = [f"blocks.{b}.attn.hook_pattern" for b in range(n_blocks)]
    needed = {"probe (the layer residuals)": layer_sites(n_blocks)}
    if any(name in hook_names for name in patterns):  # a model that exposes them
        needed["compare (the attention patterns)"] = patterns
    for stage, names in needed.items():
        missing = [name for name in names if name not in chosen]
        if missing:
            raise RunFolderError(
                f"RunSettings.sites (--sites) {sites!r} does not cache {missing}, which stage "
                f"{stage} reads; expected sites that include them, such as "
                f"{RunSettings().sites!r} (the default)"
            )
    return chosen
