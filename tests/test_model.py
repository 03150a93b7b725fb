"""The hooked model's contract: TransformerLens names and shapes, math, stop_at_layer."""

import math

import pytest
import torch
from transformer_lens import ActivationCache

from infoprobe.model import ConfigError, InfoFlowTransformer, ModelConfig


def make(**kw) -> InfoFlowTransformer:
    cfg = dict(d_in=3, n_ctx=6, d_model=24, heads=(2, 3), d_mlp=16, d_readout=8)
    return InfoFlowTransformer(ModelConfig(**{**cfg, **kw}), seed=1)


def x_batch(model, b=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, model.cfg.n_ctx, model.cfg.d_in, generator=g)


def reference_forward(model: InfoFlowTransformer, x: torch.Tensor) -> torch.Tensor:
    """The same math written independently: explicit loops over heads, no hooks."""
    cfg = model.cfg
    e = model.embed
    resid = torch.cat([x @ e.W_E + e.b_E, e.cls.expand(x.shape[0], 1, -1)], dim=1)
    if model.pos_embed is not None:
        resid = resid + model.pos_embed.W_pos
    for block in model.blocks:
        a = block.attn
        h_in = block.ln1(resid)
        out = torch.zeros_like(resid) + a.b_O
        for h in range(a.n_heads):
            q = h_in @ a.W_Q[h] + a.b_Q[h]
            k = h_in @ a.W_K[h] + a.b_K[h]
            v = h_in @ a.W_V[h] + a.b_V[h]
            att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(a.d_head), dim=-1)
            out = out + (att @ v) @ a.W_O[h]
        resid = resid + out if cfg.residual else out
        if block.mlp is not None:
            m = block.mlp
            ff = torch.nn.functional.gelu(block.ln2(resid) @ m.W_in + m.b_in) @ m.W_out + m.b_out
            resid = resid + ff if cfg.residual else ff
    r = model.readout
    hid = torch.nn.functional.gelu(r.ln(resid[:, -1]) @ r.W_1 + r.b_1)
    return (hid @ r.W_2 + r.b_2) * r.y_scale + r.y_mean


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"pos_encoding": "learned"},
        {"pos_encoding": "sinusoidal", "layer_norm": True},
        {"residual": False},
        {"d_mlp": 0},
        {"d_head": 5},
        {"heads": (3,), "layer_norm": True},
    ],
)
def test_forward_matches_independent_reference(kw):
    model = make(**kw)
    x = x_batch(model)
    torch.testing.assert_close(model(x), reference_forward(model, x), rtol=1e-5, atol=1e-5)


def test_gradients_match_independent_reference():
    model = make(pos_encoding="learned")
    x = x_batch(model)
    params = list(model.parameters())
    trimmed = torch.autograd.grad(model(x).square().sum(), params, allow_unused=True)
    full = torch.autograd.grad(reference_forward(model, x).square().sum(), params)
    for name, a, b in zip(dict(model.named_parameters()), trimmed, full, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_last_block_runs_for_cls_alone_unless_something_reads_it():
    """model(x) computes the last FFN on the CLS token only; a hook anywhere in the last
    block (TransformerLens, torch module, global) or the class switch gives the full
    block, with the same output."""
    model = make()
    x = x_batch(model)
    widths = []  # positions reaching the last block's FFN, per call
    mlp = model.blocks[-1].mlp
    mlp_forward = mlp.forward
    mlp.forward = lambda resid: widths.append(resid.shape[1]) or mlp_forward(resid)
    out = model(x)
    seen = []

    def look(tensor, hook):
        seen.append(tuple(tensor.shape))

    model.run_with_hooks(x, fwd_hooks=[("blocks.0.hook_resid_post", look)])
    assert widths == [1, 1] and seen == [(5, 7, 24)]  # a hook before the last block: trimmed
    full = {}
    full["hook"] = model.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_z", look)])
    assert seen[-1] == (5, 7, 3, 8)
    handle = model.blocks[-1].ln2.register_forward_hook(lambda *args: None)
    full["module hook"] = model(x)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *args: None)
    full["global hook"] = model(x)
    handle.remove()
    InfoFlowTransformer.trim_last_block = False
    try:
        full["switch"] = model(x)
    finally:
        InfoFlowTransformer.trim_last_block = True
    assert widths == [1, 1, 7, 7, 7, 7]
    for why, y in full.items():
        torch.testing.assert_close(y, out, rtol=1e-5, atol=1e-6, msg=why)
    assert model(x).shape == out.shape and widths[-1] == 1


@pytest.mark.parametrize(
    "names_filter",
    [
        ["blocks.0.hook_resid_post", "blocks.1.attn.hook_pattern"],
        "blocks.1.hook_mlp_out",
        lambda name: name.endswith("hook_z"),
    ],
)
def test_run_with_cache_returns_exactly_the_requested_names(names_filter):
    model = make()
    _, cache = model.run_with_cache(x_batch(model), names_filter=names_filter)
    wanted = {
        n
        for n in model.hook_dict
        if (
            n in names_filter
            if isinstance(names_filter, list)
            else n == names_filter
            if isinstance(names_filter, str)
            else names_filter(n)
        )
    }
    assert set(cache) == wanted and wanted


def test_shapes_follow_transformer_lens_with_different_heads_per_layer():
    model = make()  # heads (2, 3), E = 24 -> n = 12 and 8
    b, T, E = 5, 6, 24
    _, cache = model.run_with_cache(x_batch(model, b))
    for layer, h in enumerate((2, 3)):
        n = E // h
        assert cache[f"blocks.{layer}.attn.hook_pattern"].shape == (b, h, T + 1, T + 1)
        assert cache[f"blocks.{layer}.attn.hook_attn_scores"].shape == (b, h, T + 1, T + 1)
        for name in ("q", "k", "v", "z"):
            assert cache[f"blocks.{layer}.attn.hook_{name}"].shape == (b, T + 1, h, n)
        for name in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out"):
            assert cache[f"blocks.{layer}.hook_{name}"].shape == (b, T + 1, E)
        assert cache[f"blocks.{layer}.mlp.hook_post"].shape == (b, T + 1, 16)
    pattern = cache["blocks.1.attn.hook_pattern"]
    torch.testing.assert_close(pattern.sum(-1), torch.ones(b, 3, T + 1))


def test_activation_cache_shorthand_and_stop_at_layer_agree():
    model = make()
    x = x_batch(model)
    _, raw = model.run_with_cache(x, return_cache_object=False)
    assert type(raw) is dict
    _, cache = model.run_with_cache(x)
    assert isinstance(cache, ActivationCache)
    assert torch.equal(cache["resid_post", 0], raw["blocks.0.hook_resid_post"])
    assert torch.equal(cache["resid_post", -1], raw["blocks.1.hook_resid_post"])
    assert torch.equal(cache["pattern", 1], raw["blocks.1.attn.hook_pattern"])
    torch.testing.assert_close(model(x, stop_at_layer=1), raw["blocks.1.hook_resid_pre"])
    torch.testing.assert_close(model(x, stop_at_layer=0), raw["blocks.0.hook_resid_pre"])
    # The residual stream is the sum of its parts (residual on, no LayerNorm).
    torch.testing.assert_close(
        raw["blocks.0.hook_resid_mid"],
        raw["blocks.0.hook_resid_pre"] + raw["blocks.0.hook_attn_out"],
    )


def test_cls_is_the_last_position_and_embeds_without_input():
    model = make()
    _, raw = model.run_with_cache(x_batch(model), names_filter="hook_embed")
    emb = raw["hook_embed"]
    assert emb.shape[1] == model.cfg.n_ctx + 1
    assert torch.equal(emb[:, -1], model.embed.cls.expand(emb.shape[0], -1))


def test_editing_the_pattern_through_a_hook_changes_the_output():
    model = make()
    x = x_batch(model)
    base = model(x)
    assert torch.equal(
        model.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda p, hook: p)]), base
    )

    def attend_to_key_0(pattern, hook):
        one_hot = torch.zeros_like(pattern)
        one_hot[..., 0] = 1.0
        return one_hot

    _, edited = model.run_with_cache(
        x, names_filter=["blocks.0.attn.hook_v", "blocks.0.attn.hook_z"]
    )
    model.add_hook("blocks.0.attn.hook_pattern", attend_to_key_0)
    try:
        _, cache = model.run_with_cache(
            x, names_filter=["blocks.0.attn.hook_v", "blocks.0.attn.hook_z"]
        )
        out = model(x)
    finally:
        model.reset_hooks()
    assert not torch.allclose(out, base)
    # z at every query is now v at key 0.
    v0 = cache["blocks.0.attn.hook_v"][:, :1]
    torch.testing.assert_close(
        cache["blocks.0.attn.hook_z"], v0.expand_as(edited["blocks.0.attn.hook_z"])
    )


def test_without_positions_the_output_is_invariant_to_token_order():
    x_perm = torch.randperm(6, generator=torch.Generator().manual_seed(3))
    plain, learned = make(), make(pos_encoding="learned")
    x = x_batch(plain)
    torch.testing.assert_close(plain(x[:, x_perm]), plain(x), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(learned(x[:, x_perm]), learned(x), atol=1e-4)


def test_same_seed_same_weights_and_local_generator_only():
    state = torch.random.get_rng_state()
    a, b = make(), make()
    assert torch.equal(state, torch.random.get_rng_state())
    assert all(
        torch.equal(p, q)
        for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_init_gain_scales_every_weight_matrix_and_nothing_else():
    base, scaled = make(), make(init_gain=0.5)
    for (name, p), q in zip(base.named_parameters(), scaled.parameters(), strict=True):
        is_matrix = name.rsplit(".", 1)[-1].startswith("W_")
        expected = 0.5 * p if is_matrix else p  # biases stay 0, CLS keeps its N(0, 1)
        torch.testing.assert_close(q, expected, rtol=1e-6, atol=0, msg=name)
    fan_in = base.cfg.d_model
    assert scaled.blocks[0].mlp.W_in.std().item() == pytest.approx(0.5 / fan_in**0.5, rel=0.1)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"d_model": 30, "heads": (4, 4)}, "not divisible"),
        ({"heads": ()}, "heads"),
        ({"pos_encoding": "rotary"}, "pos_encoding"),
        ({"d_mlp": -1}, "d_mlp"),
        ({"init_gain": 0.0}, "init_gain"),
    ],
)
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        ModelConfig(d_in=2, n_ctx=4, **kw)


def test_config_round_trip_and_wrong_input_shape():
    cfg = ModelConfig(d_in=2, n_ctx=4, heads=(1, 2, 3), d_model=12, pos_encoding="learned")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="unknown field"):
        ModelConfig.from_dict({**cfg.to_dict(), "n_heads": 3})
    with pytest.raises(ValueError, match=r"\[batch, T=4, d=2\]"):
        InfoFlowTransformer(cfg)(torch.zeros(1, 5, 2))


# --- TransformerLens's ActivationCache utilities on a real run --------------------------


def test_run_with_cache_returns_an_activation_cache_like_transformer_lens_models():
    model = make()
    x = x_batch(model)
    _, cache = model.run_with_cache(x)
    assert isinstance(cache, ActivationCache)
    assert torch.equal(cache["resid_post", 0], cache["blocks.0.hook_resid_post"])
    _, single = model.run_with_cache(x[:1], remove_batch_dim=True)
    assert single["resid_post", -1].shape == (7, 24) and not single.has_batch_dim


@pytest.mark.parametrize("kw", [{}, {"d_mlp": 0}, {"pos_encoding": "learned"}])
def test_decompose_resid_sums_to_the_final_residual_stream(kw):
    model = make(**kw)
    _, cache = model.run_with_cache(x_batch(model))
    parts, labels = cache.decompose_resid(return_labels=True)
    expected = ["embed"] + (["pos_embed"] if model.pos_embed is not None else [])
    for layer in range(2):
        expected += [f"{layer}_attn_out"] + ([] if model.cfg.attn_only else [f"{layer}_mlp_out"])
    assert labels == expected and model.cfg.attn_only == (model.cfg.d_mlp == 0)
    torch.testing.assert_close(parts.sum(0), cache["resid_post", -1], rtol=1e-5, atol=1e-5)


def test_accumulated_resid_is_every_layer_of_the_conventions():
    model = make()
    _, cache = model.run_with_cache(x_batch(model))
    stack, labels = cache.accumulated_resid(return_labels=True)
    assert labels == ["0_pre", "1_pre", "final_post"] and stack.shape == (3, 5, 7, 24)
    for layer, name in enumerate(
        ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    ):
        assert torch.equal(stack[layer], cache[name])


def test_stack_head_results_splits_attn_out_by_head():
    model = make(heads=(2, 2))
    assert model.cfg.n_heads == 2
    _, cache = model.run_with_cache(x_batch(model))
    heads, labels = cache.stack_head_results(return_labels=True)
    assert labels == ["L0H0", "L0H1", "L1H0", "L1H1"] and heads.shape == (4, 5, 7, 24)
    for layer in range(2):
        torch.testing.assert_close(
            heads[2 * layer : 2 * layer + 2].sum(0) + model.blocks[layer].attn.b_O,
            cache["attn_out", layer],
            rtol=1e-5,
            atol=1e-5,
        )


def test_n_heads_with_different_heads_per_layer_names_them():
    model = make()  # heads (2, 3)
    with pytest.raises(ConfigError, match=r"heads differ per layer.*\[2, 3\]"):
        _ = model.cfg.n_heads
    _, cache = model.run_with_cache(x_batch(model))
    with pytest.raises(ConfigError, match="heads differ per layer"):
        cache.stack_head_results()


@pytest.mark.parametrize("layer", [-5, -3, 2, 7])
def test_out_of_range_layer_says_which_layers_exist(layer):
    model = make()
    _, cache = model.run_with_cache(x_batch(model))
    with pytest.raises(ValueError, match=r"blocks 0\.\.1") as info:
        cache["resid_post", layer]
    assert str(layer) in str(info.value)
    assert torch.equal(cache["resid_post", -2], cache["resid_post", 0])
