"""Settings of the stages after training, validated before any stage touches a file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from infoprobe.hooks import layer_sites, resolve_sites
from infoprobe.hooks.sites import check_site_spec
from infoprobe.influence import InfluenceSettings
from infoprobe.pipeline.folder import RunFolderError
from infoprobe.pipeline.probing import ProbeSettings
from infoprobe.probes.split import make_split

CONTROL_SEED = 12_345
"""Initialisation seed of the random-init control model (fixed, never tuned)."""


@dataclass(frozen=True)
class RunSettings:
    """Settings of the stages after training (the defaults are the documented ones).

    n_cache: samples cached and probed (split by sample into train/val/test by the probes).
    sites: hook sites cached (the probes read the layer residuals, the report and rollout
        the attention patterns).
    probe: probe family for the position probes (``linear``, ``mlp`` or ``query``).
    batch_size: samples per forward pass when caching.
    rollout: also compare attention rollout (Abnar & Zuidema 2020) with the observations.
    flow: measure flow (local sensitivity, and its random-init control) on the probes'
        test samples, with ``influence`` settings (docs/influence.md).
    """

    n_cache: int = 8192
    sites: str = "residual,attention"
    probe: str = "linear"
    batch_size: int = 512
    rollout: bool = True
    flow: bool = True
    influence: InfluenceSettings = field(default_factory=InfluenceSettings)
    device: str = "cpu"

    def __post_init__(self) -> None:
        """Validate every setting before any stage touches a file."""
        for name in ("n_cache", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RunFolderError(f"RunSettings.{name}: expected an integer >= 1, got {value!r}")
        check_site_spec(self.sites)  # the names are checked against the model later
        ProbeSettings(probe=self.probe, device=self.device)  # raises on an unknown probe
        make_split(self.n_cache)  # raises when the probes' split would be too small

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["influence"] = self.influence.to_dict()
        return out


def check_sites(hook_names: Sequence[str], n_blocks: int, sites: str) -> list[str]:
    """The hook names ``sites`` selects among a model's ``hook_names``, checked before any
    stage runs: UnknownSiteError for a site the model lacks, RunFolderError when the
    selection lacks what a later stage reads (the probes: the layer residuals; compare and
    the report: every block's attention pattern)."""
    chosen = resolve_sites(hook_names, sites)
    needed = {
        "probe (the layer residuals)": layer_sites(n_blocks),
        "compare (the attention patterns)": [
            f"blocks.{b}.attn.hook_pattern" for b in range(n_blocks)
        ],
    }
    for stage, names in needed.items():
        missing = [name for name in names if name not in chosen]
        if missing:
            raise RunFolderError(
                f"RunSettings.sites (--sites) {sites!r} does not cache {missing}, which stage "
                f"{stage} reads; expected sites that include them, such as "
                f"{RunSettings().sites!r} (the default)"
            )
    return chosen
