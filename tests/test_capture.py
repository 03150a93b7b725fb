"""Capture on any HookedRootModule: site presets, values, early stopping, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from infoprobe.hooks import (
    SiteCaptureError,
    UnknownSiteError,
    axis_names,
    capture,
    layer_of_site,
    layer_sites,
    open_cache,
    resolve_sites,
    write_cache,
)
from infoprobe.model import InfoFlowTransformer, ModelConfig

pytestmark = pytest.mark.usefixtures("one_thread")


class TinyBlock(nn.Module):
    """resid_pre → softmax mixing over positions (one 'head') → resid_post."""

    def __init__(self, e: int, gen: torch.Generator):
        super().__init__()
        self.W = nn.Parameter(torch.randn(e, e, generator=gen) / e**0.5)
        self.hook_resid_pre, self.hook_pattern = HookPoint(), HookPoint()
        self.hook_resid_post = HookPoint()
        self.calls = 0

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        resid = self.hook_resid_pre(resid)
        pattern = self.hook_pattern(torch.softmax(resid @ resid.transpose(1, 2), dim=-1))
        return self.hook_resid_post(resid + torch.tanh(pattern @ resid @ self.W))


class TinyHooked(HookedRootModule):
    """A custom HookedRootModule unlike ours: no CLS, no stop_at_layer, a hooked readout."""

    def __init__(self, d_in: int = 3, e: int = 8, n_blocks: int = 3, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.W_in = nn.Parameter(torch.randn(d_in, e, generator=gen))
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(TinyBlock(e, gen) for _ in range(n_blocks))
        self.hook_readout = HookPoint()
        self.hook_unused = HookPoint()
        self.dropout = nn.Dropout(0.5)
        self.setup()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        resid = self.hook_embed(self.dropout(x @ self.W_in))
        for block in self.blocks:
            resid = block(resid)
        return self.hook_readout(resid.mean(dim=(1, 2)))[:, None]


def small_model() -> InfoFlowTransformer:
    cfg = ModelConfig(d_in=3, n_ctx=5, d_model=12, heads=(2, 3), d_mlp=16, d_readout=8)
    return InfoFlowTransformer(cfg, seed=3)


def batch(b: int = 6, t: int = 5, d: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randn(b, t, d, generator=torch.Generator().manual_seed(seed))


# --- site resolution -----------------------------------------------------------------------
EXPECTED_PRESETS = {
    "residual": [
        "blocks.0.hook_resid_pre",
        "blocks.0.hook_resid_mid",
        "blocks.0.hook_resid_post",
        "blocks.1.hook_resid_mid",
        "blocks.1.hook_resid_post",
    ],
    "attention": [
        "blocks.0.attn.hook_pattern",
        "blocks.0.attn.hook_z",
        "blocks.0.hook_attn_out",
        "blocks.1.attn.hook_pattern",
        "blocks.1.attn.hook_z",
        "blocks.1.hook_attn_out",
    ],
    "layers": ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"],
}


@pytest.mark.parametrize("preset", sorted(EXPECTED_PRESETS))
def test_presets_select_exactly_the_documented_sites(preset):
    model = small_model()
    assert sorted(resolve_sites(model.hook_dict, preset)) == sorted(EXPECTED_PRESETS[preset])


def test_all_preset_is_every_hook_and_combinations_are_unions_in_model_order():
    model = small_model()
    assert resolve_sites(model.hook_dict, "all") == list(model.hook_dict)
    both = resolve_sites(model.hook_dict, "residual, attention")
    assert set(both) == set(EXPECTED_PRESETS["residual"]) | set(EXPECTED_PRESETS["attention"])
    order = list(model.hook_dict)
    assert both == sorted(both, key=order.index)


def test_explicit_names_and_regex():
    model = small_model()
    names = ["blocks.1.mlp.hook_post", "hook_embed"]
    assert resolve_sites(model.hook_dict, names) == ["hook_embed", "blocks.1.mlp.hook_post"]
    found = resolve_sites(model.hook_dict, r"re:hook_(q|k)$")
    assert found == [f"blocks.{b}.attn.hook_{w}" for b in (0, 1) for w in ("q", "k")]


@pytest.mark.parametrize(
    "spec", ["blocks.7.hook_resid_post", "resid", "re:no_such_hook", "re:([", "", " , "]
)
def test_bad_site_specs_raise_with_the_valid_names(spec):
    model = small_model()
    with pytest.raises(UnknownSiteError) as err:
        resolve_sites(model.hook_dict, spec)
    message = str(err.value)
    assert "residual" in message
    if spec.strip(" ,") and not spec.startswith("re:(["):
        assert "blocks.1.hook_resid_post" in message  # the list of valid names


def test_layer_sites_follow_the_layer_convention():
    assert layer_sites(3) == [
        "blocks.0.hook_resid_pre",
        "blocks.0.hook_resid_post",
        "blocks.1.hook_resid_post",
        "blocks.2.hook_resid_post",
    ]
    for layer, name in enumerate(layer_sites(5)):
        assert layer_of_site(name) == layer
    assert layer_of_site("blocks.1.hook_resid_pre") is None
    assert layer_of_site("blocks.0.hook_resid_mid") is None
    with pytest.raises(ValueError):
        layer_sites(0)


def test_axis_names_match_the_captured_tensors():
    model = small_model()
    names = resolve_sites(model.hook_dict, "all")
    acts = capture(model, batch(), names)
    for name, tensor in acts.items():
        axes = axis_names(name, tensor.ndim)
        assert len(axes) == tensor.ndim and axes[0] == "sample"
    assert axis_names("blocks.0.attn.hook_pattern", 4) == ("sample", "head", "query", "key")
    assert axis_names("blocks.0.attn.hook_z", 4) == ("sample", "token", "head", "d_head")
    assert axis_names("blocks.0.hook_resid_post", 3) == ("sample", "token", "d_model")
    assert axis_names("blocks.0.custom.hook_thing", 3) == ("sample", "dim_1", "dim_2")


# --- captured values ----------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["residual", "attention", "all", "layers"])
def test_capture_equals_run_with_cache_for_every_preset(preset):
    model = small_model()
    x = batch()
    names = resolve_sites(model.hook_dict, preset)
    acts = capture(model, x, names)
    with torch.inference_mode():
        _, ref = model.run_with_cache(x)
    assert set(acts) == set(names)
    for name in names:
        assert acts[name].shape == ref[name].shape
        assert torch.equal(acts[name], ref[name]), name


def test_capture_on_a_custom_hooked_root_module():
    model = TinyHooked()
    x = batch(b=4, t=7)
    names = ["hook_embed", "blocks.1.hook_pattern", "blocks.2.hook_resid_post", "hook_readout"]
    model.eval()
    with torch.inference_mode():
        _, ref = model.run_with_cache(x)
    model.train()
    acts = capture(model, x, names)
    for name in names:
        assert torch.equal(acts[name], ref[name]), name
    assert model.training, "capture must restore the caller's train mode"
    assert all(not hp.fwd_hooks for hp in model.hook_dict.values()), "hooks left behind"


def test_capture_stops_after_the_last_requested_block_without_stop_at_layer():
    model = TinyHooked(n_blocks=3)
    capture(model, batch(t=7), ["blocks.0.hook_pattern"])
    assert [b.calls for b in model.blocks] == [1, 0, 0]
    capture(model, batch(t=7), ["blocks.1.hook_resid_post", "hook_embed"])
    assert [b.calls for b in model.blocks] == [2, 1, 0]
    capture(model, batch(t=7), ["hook_readout"])  # outside the blocks: full forward
    assert [b.calls for b in model.blocks] == [3, 2, 1]


def test_capture_uses_stop_at_layer_on_our_model_and_values_match_a_full_forward():
    model = small_model()
    calls = [0, 0]
    for i, block in enumerate(model.blocks):
        block.register_forward_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    x = batch()
    early = capture(model, x, ["blocks.0.hook_resid_post", "blocks.0.attn.hook_pattern"])
    assert calls == [1, 0]
    full = capture(model, x, list(early), early_stop=False)
    assert calls == [2, 1]
    for name in early:
        assert torch.equal(early[name], full[name])


def test_capture_errors():
    model = TinyHooked()
    with pytest.raises(UnknownSiteError, match="hook_readout"):
        capture(model, batch(t=7), ["blocks.9.hook_resid_post"])
    with pytest.raises(SiteCaptureError, match="hook_unused"):
        capture(model, batch(t=7), ["hook_unused"])


class BroadcastHooked(HookedRootModule):
    """A hook whose tensor has no batch axis (a position table)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(7, 3))
        self.hook_table = HookPoint()
        self.setup()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.hook_table(self.table)


def test_a_site_without_batch_axis_is_refused():
    with pytest.raises(SiteCaptureError, match="batch axis"):
        capture(BroadcastHooked(), batch(b=4, t=7), ["hook_table"])


# --- the whole pipeline on a custom module -------------------------------------------------
def test_write_and_read_a_cache_of_a_custom_hooked_root_module(tmp_path):
    model = TinyHooked(n_blocks=2)

    def batch_fn(index: int, size: int):
        rng = np.random.default_rng([11, index])
        x = rng.standard_normal((size, 7, 3)).astype(np.float32)
        return x, x[:, 0, :1].copy()

    path = tmp_path / "tiny.h5"
    sites = "re:hook_resid_post$,blocks.1.hook_pattern,hook_readout"
    write_cache(
        path,
        model,
        batch_fn,
        n=10,
        batch_size=4,
        sites=sites,
        progress=False,
        provenance={"checkpoint_sha256": None, "model_config": {}, "data_spec": {}},
    )
    with open_cache(path) as cache:
        assert set(cache.hook_names) == {
            "blocks.0.hook_resid_post",
            "blocks.1.hook_resid_post",
            "blocks.1.hook_pattern",
            "hook_readout",
        }
        model.eval()
        with torch.inference_mode():
            _, ref = model.run_with_cache(torch.from_numpy(cache.x[:]))
        for name in cache.hook_names:
            np.testing.assert_array_equal(cache.acts(name)[:], ref[name].numpy())
        assert cache.axes("hook_readout") == ("sample",)


def test_capture_removes_only_its_own_hooks():
    model = TinyHooked()
    x = batch(b=4, t=7)
    seen: list[str] = []
    model.hook_dict["hook_embed"].add_hook(lambda t, hook: seen.append("permanent"),
                                           is_permanent=True)  # fmt: skip
    with model.hooks([("blocks.0.hook_pattern", lambda t, hook: seen.append("outer"))]):
        capture(model, x, ["hook_embed", "blocks.0.hook_pattern"], early_stop=False)
        assert seen == ["permanent", "outer"]  # both ran during the capture
        model(x)  # and both are still there after it
        assert seen == ["permanent", "outer"] * 2
    model(x)  # the outer block removed its own hook; the permanent one stays
    assert seen == ["permanent", "outer"] * 2 + ["permanent"]
    assert model.context_level == 0
