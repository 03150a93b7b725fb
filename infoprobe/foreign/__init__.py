"""Models built outside infoprobe: the site-map adapter, the factory config, the checks.

    from infoprobe import save_checkpoint
    from infoprobe.foreign import ForeignConfig, SiteMap
    sites = SiteMap(embed="layers.0:input", blocks="layers.{l}",
                    pattern="layers.{l}.attn.softmax", n_layers=2)
    cfg = ForeignConfig(factory="mymodels:build", kwargs={...}, sites=sites,
                        heads=(2, 2), d_model=32, n_ctx=16, d_in=3)
    save_checkpoint("runs/mine", model, task, config=cfg)

Then ``infoprobe probe-checkpoint runs/mine --out runs/mine-probe`` (docs/own-model.md).
The names below are loaded lazily from their modules.
"""

from infoprobe.base.lazy import lazy_exports

_EXPORTS = {
    "ForeignConfig": "infoprobe.foreign.config",
    "ForeignModelError": "infoprobe.foreign.errors",
    "HookedAdapter": "infoprobe.foreign.adapter",
    "SiteMap": "infoprobe.foreign.sites",
    "SiteMapError": "infoprobe.foreign.errors",
    "SiteRef": "infoprobe.foreign.sites",
    "adapt": "infoprobe.foreign.adapter",
    "check_foreign_model": "infoprobe.foreign.check",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
