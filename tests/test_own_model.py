"""A model infoprobe did not build: the site-map adapter, foreign checkpoints, every
instrument on it, and its bad input.

The models come from tests/foreign_models.py, a pre-LayerNorm Transformer written in
plain PyTorch independently of infoprobe's model.py, with its own module names.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from foreign_models import SITES, PreLNTransformer, handset, handset_kwargs, handset_sets
from quick_reports import blank_figures
from test_bad_input import assert_refused
from torch import nn

from infoprobe import load_checkpoint, probe_checkpoint, save_checkpoint
from infoprobe.cli import main
from infoprobe.foreign import ForeignConfig, HookedAdapter, SiteMap, SiteMapError, SiteRef
from infoprobe.hooks import capture, open_cache
from infoprobe.influence import read_influence
from infoprobe.infoflow import predict, read_sets
from infoprobe.model import ModelConfig
from infoprobe.pipeline.settings import RunSettings
from infoprobe.tasks import make_task

TASK = make_task("intrinsic-dim", T=8, D=2)
SETTINGS = RunSettings(n_cache=600, batch_size=200, rollout=False)


def trained_config(sites=SITES) -> ForeignConfig:
    kwargs = {"d_in": TASK.d, "width": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32}
    return ForeignConfig(factory="foreign_models:build", kwargs=kwargs, sites=sites,
                         heads=(2, 2), d_model=16, n_ctx=TASK.T, d_in=TASK.d)  # fmt: skip


def handset_config() -> ForeignConfig:
    return ForeignConfig(factory="foreign_models:build", kwargs=handset_kwargs(TASK.d),
                         sites=SITES, heads=(1,), d_model=2 * TASK.d + 1, n_ctx=TASK.T,
                         d_in=TASK.d)  # fmt: skip


def trained_briefly(steps: int = 150) -> PreLNTransformer:
    """The pre-LN model trained with its own loop (Adam, fresh batches) on the task."""
    torch.manual_seed(0)
    model = PreLNTransformer(**trained_config().kwargs)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x, y = (torch.as_tensor(a) for a in TASK.sample(128, rng))
        loss = ((model(x) - y) ** 2).mean() / y.var()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("foreign") / "ckpt"
    return save_checkpoint(path, trained_briefly(), TASK, config=trained_config())


@pytest.fixture(scope="module")
def handset_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("handset") / "ckpt"
    return save_checkpoint(path, handset(TASK.d), TASK, config=handset_config())


def own_states(model: PreLNTransformer, x: torch.Tensor):
    """The residual streams [L+1] and attention patterns [L] by the model's own arithmetic."""
    h = torch.cat([model.tokens(x), model.cls.expand(x.shape[0], 1, -1)], dim=1)
    states, patterns = [h], []
    for layer in model.layers:
        mix = layer.mix
        q, k, _ = mix.qkv(layer.norm1(h)).view(*h.shape[:2], 3, mix.n_heads, -1).unbind(2)
        scores = torch.einsum("bqhn,bkhn->bhqk", q, k) / math.sqrt(mix.d_head)
        patterns.append(torch.softmax(scores, dim=-1))
        h = layer(h)
        states.append(h)
    return states, patterns


# --- the adapter --------------------------------------------------------------------------


def test_adapter_hook_points_hold_the_models_own_states():
    model = trained_briefly(steps=5)
    adapter = HookedAdapter(model, trained_config().sites)
    x = torch.as_tensor(TASK.sample(16, np.random.default_rng(1))[0])
    names = ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    pattern_names = [f"blocks.{b}.attn.hook_pattern" for b in range(2)]
    got = capture(adapter, x, names + pattern_names)
    states, patterns = own_states(model, x)
    for name, want in zip(names + pattern_names, states + patterns, strict=True):
        torch.testing.assert_close(got[name], want.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(adapter(x), model(x))


def test_a_hook_can_replace_a_state_as_on_any_hooked_model():
    """Zeroing block 0's output through the hook point equals running block 1 on zeros."""
    model = trained_briefly(steps=5)
    adapter = HookedAdapter(model, trained_config().sites)
    x = torch.as_tensor(TASK.sample(4, np.random.default_rng(2))[0])
    with adapter.hooks([("blocks.0.hook_resid_post", lambda h, hook: torch.zeros_like(h))]):
        patched = adapter(x)
    zeros = torch.zeros(4, TASK.T + 1, 16)
    want = model.readout(model.final(model.layers[1](zeros)[:, -1]))
    torch.testing.assert_close(patched, want)
    doubled = [("blocks.0.hook_resid_pre", lambda h, hook: 2 * h)]  # a pre-hook (:input)
    with adapter.hooks(doubled):
        got = adapter(x)
    h = 2 * torch.cat([model.tokens(x), model.cls.expand(4, 1, -1)], dim=1)
    torch.testing.assert_close(
        got, model.readout(model.final(model.layers[1](model.layers[0](h))[:, -1]))
    )


class TorchMHA(nn.Module):
    """torch's own nn.MultiheadAttention, which returns (output, weights)."""

    def __init__(self, d: int, width: int = 8, heads: int = 2):
        super().__init__()
        self.embed = nn.Linear(d, width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        h = torch.cat([self.embed(x), torch.zeros(x.shape[0], 1, self.embed.out_features)], 1)
        out, self.weights = self.attn(h, h, h, need_weights=True, average_attn_weights=False)
        return self.head((h + out)[:, -1])


def test_an_output_element_is_a_site():
    """``attn[1]`` reads the per-head weights torch itself returns."""
    model = TorchMHA(TASK.d)
    sites = SiteMap(embed="embed", blocks=["attn[0]"], pattern=["attn[1]"])
    adapter = HookedAdapter(model, sites)
    x = torch.as_tensor(TASK.sample(3, np.random.default_rng(3))[0])
    got = capture(adapter, x, ["blocks.0.attn.hook_pattern", "blocks.0.hook_resid_post"])
    model(x)  # capture stopped the forward after the last site; run it whole
    torch.testing.assert_close(got["blocks.0.attn.hook_pattern"], model.weights.detach())
    assert got["blocks.0.hook_resid_post"].shape == (3, TASK.T + 1, 8)


def test_a_function_may_pick_the_tensor_from_a_modules_output(tmp_path):
    model = TorchMHA(TASK.d)
    weights = SiteRef("attn", read=lambda out: out[1])
    adapter = HookedAdapter(model, SiteMap(embed="embed", blocks=["attn[0]"], pattern=[weights]))
    x = torch.as_tensor(TASK.sample(3, np.random.default_rng(3))[0])
    got = capture(adapter, x, ["blocks.0.attn.hook_pattern"])["blocks.0.attn.hook_pattern"]
    model(x)
    torch.testing.assert_close(got, model.weights.detach())
    replace = [("blocks.0.attn.hook_pattern", lambda p, hook: p * 0)]
    with (
        pytest.raises(SiteMapError, match="can read it but not replace it"),
        adapter.hooks(replace),
    ):
        adapter(x)
    with pytest.raises(SiteMapError, match="cannot store"):
        adapter.sites.to_dict()


@pytest.mark.parametrize(
    "sites, words",
    [
        (SiteMap(embed="nowhere", blocks="layers.{l}", n_layers=2), ["'nowhere'", "no module"]),
        (SiteMap(embed="layers.0:input", blocks="layers.{l}", n_layers=3), ["'layers.2'"]),
    ],
)
def test_a_site_map_naming_no_module_is_refused_by_name(sites, words):
    with pytest.raises(SiteMapError) as info:
        HookedAdapter(PreLNTransformer(TASK.d), sites)
    assert all(w in str(info.value) for w in words), info.value


@pytest.mark.parametrize(
    "value, words",
    [("layers.{l}[x]", ["'layers.0[x]'", "module path"]), ("layers", ["'{l}'"]), (7, ["7"])],
)
def test_malformed_site_references_are_refused(value, words):
    with pytest.raises(SiteMapError) as info:
        SiteMap(embed="embed", blocks=value, n_layers=2)
    assert all(w in str(info.value) for w in words), info.value


# --- the checkpoint and every instrument ------------------------------------------------------


def test_checkpoint_round_trip_rebuilds_the_model_from_its_factory(trained_checkpoint):
    ck = load_checkpoint(trained_checkpoint, trust_code=True)
    assert isinstance(ck.model, HookedAdapter) and ck.model_config == trained_config()
    meta = json.loads((trained_checkpoint / "checkpoint.json").read_text())
    assert meta["model_config"]["factory"] == "foreign_models:build"
    x = torch.as_tensor(TASK.sample(8, np.random.default_rng(4))[0])
    reference = PreLNTransformer(**trained_config().kwargs)
    reference.load_state_dict(ck.model.wrapped.state_dict())
    torch.testing.assert_close(ck.model(x), reference(x))


def test_every_instrument_runs_on_the_foreign_model(trained_checkpoint, tmp_path):
    out = tmp_path / "run"
    with blank_figures():
        summary = probe_checkpoint(
            trained_checkpoint, out, SETTINGS, progress=False, trust_code=True
        )
    model = load_checkpoint(trained_checkpoint, trust_code=True).model.wrapped
    with open_cache(out / "acts.h5") as cache:
        x = cache.x[:]
        states, patterns = own_states(model, torch.as_tensor(x))
        for b, want in enumerate(patterns):
            got = cache.acts(f"blocks.{b}.attn.hook_pattern")[:]
            np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-4, atol=1e-6)
        got = cache.acts("blocks.1.hook_resid_post")[:]
        np.testing.assert_allclose(got, states[2].detach().numpy(), rtol=1e-4, atol=1e-5)
    # InfoFlow's sets for heads (2, 2), E = 16: the same as for infoprobe's own model
    native = predict(TASK, ModelConfig(d_in=TASK.d, n_ctx=TASK.T, d_model=16, heads=(2, 2)))
    assert read_sets(out / "pred.h5").arch["heads"] == [2, 2]
    assert (summary.verdict, summary.exponent) == (native.verdict, str(native.exponent))
    flow = read_influence(out / "flow.h5")
    control = read_influence(out / "flow-random-init.h5")
    assert flow.scores.shape == control.scores.shape == (3, len(flow.sample_index), 9, 8)
    comparison = json.loads((out / "comparison.json").read_text())
    heads = comparison["heads"]["heads"]
    assert sorted((h["block"], h["head"]) for h in heads) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert (out / "report" / "report.html").is_file()


def test_handset_foreign_model_flow_sets_are_its_true_sets_from_the_cli(
    handset_checkpoint, tmp_path
):
    out = tmp_path / "run"
    argv = ["probe-checkpoint", str(handset_checkpoint), "--out", str(out),
            "--n-cache", "600", "--no-rollout", "--quiet", "--trust-code"]  # fmt: skip
    with blank_figures():
        assert main(argv) == 0
    flow = read_influence(out / "flow.h5")
    with open_cache(out / "acts.h5") as cache:
        x = cache.x[:][flow.sample_index]
    true, tie = handset_sets(x)
    observed = np.moveaxis(flow.sets(), 0, 1)[..., : TASK.T]  # [n, L+1, T+1, T]
    assert tie.mean() < 0.2
    for layer in (0, 1):
        o, t = observed[:, layer][~tie], true[:, layer][~tie]
        assert (o == t).all(), (layer, (o & ~t).sum(), (t & ~o).sum())


def test_cache_and_influence_commands_take_a_foreign_checkpoint(handset_checkpoint, tmp_path):
    acts, flow = tmp_path / "acts.h5", tmp_path / "flow.h5"
    ckpt = str(handset_checkpoint)
    assert main(["cache", ckpt, "--out", str(acts), "--n", "64", "--quiet", "--trust-code"]) == 0
    assert (
        main(
            ["influence", ckpt, "--cache", str(acts), "--out", str(flow), "--quiet", "--trust-code"]
        )
        == 0
    )
    with open_cache(acts) as cache:
        x = cache.x[:]
        got = cache.acts("blocks.0.hook_resid_post")[:]
    states, _ = own_states(handset(TASK.d), torch.as_tensor(x))
    np.testing.assert_allclose(got, states[1].detach().numpy(), rtol=1e-5, atol=1e-5)
    true, tie = handset_sets(x[read_influence(flow).sample_index])
    observed = np.moveaxis(read_influence(flow).sets(), 0, 1)[..., : TASK.T]
    assert (observed[:, 1][~tie] == true[:, 1][~tie]).all()


def test_a_random_init_control_equal_to_the_trained_model_is_refused(
    trained_checkpoint, monkeypatch, capsys, tmp_path
):
    """A factory that builds the model with its weights set (``hand_set``): its
    "random-init" control would be the trained model itself, so cache and influence refuse
    it in one line and write nothing; a factory that initialises afresh gives a control."""
    config = replace(handset_config(), factory="foreign_models:hand_set", kwargs={"d": TASK.d})
    ckpt = str(save_checkpoint(tmp_path / "ckpt", handset(TASK.d), TASK, config=config))
    acts = tmp_path / "acts.h5"
    assert main(["cache", ckpt, "--out", str(acts), "--n", "64", "--quiet", "--trust-code"]) == 0
    words = ["random-init control (seed 1)", "every weight equals the trained model's"]
    cache_argv = [ckpt, "--out", str(tmp_path / "ri.h5"), "--n", "64", "--random-init", "1",
                  "--quiet", "--trust-code"]  # fmt: skip
    assert_refused(monkeypatch, capsys, tmp_path, "cache", cache_argv, words)
    flow_argv = [ckpt, "--cache", str(acts), "--out", str(tmp_path / "f.h5"), "--random-init",
                 "1", "--quiet", "--trust-code"]  # fmt: skip
    assert_refused(monkeypatch, capsys, tmp_path, "influence", flow_argv, words)
    trained = str(trained_checkpoint)
    out = tmp_path / "trained-ri.h5"
    argv = ["cache", trained, "--out", str(out), "--n", "64", "--random-init", "1", "--quiet",
            "--trust-code"]  # fmt: skip
    assert main(argv) == 0 and out.is_file()


def test_a_factory_module_beside_the_checkpoint_is_found(handset_checkpoint, tmp_path, capsys):
    """``beside:build`` is on no path but lies next to checkpoint.json (as a user ships it)."""
    source = (Path(__file__).parent / "foreign_models.py").read_text()
    ckpt = edited(handset_checkpoint, tmp_path, factory="beside_models:build")
    (ckpt / "foreign_models.py").unlink()  # the folder ships its own module alone
    (ckpt / "beside_models.py").write_text(source)
    acts = tmp_path / "acts.h5"
    assert (
        main(["cache", str(ckpt), "--out", str(acts), "--n", "64", "--quiet", "--trust-code"]) == 0
    )
    assert "beside_models" in sys.modules and str(ckpt) not in sys.path
    with open_cache(acts) as cache:
        x, got = cache.x[:], cache.acts("blocks.0.hook_resid_post")[:]
    states, _ = own_states(handset(TASK.d), torch.as_tensor(x))
    np.testing.assert_allclose(got, states[1].detach().numpy(), rtol=1e-5, atol=1e-5)
    # the code that builds the model is hashed beside the weights, into the cache too
    digest = hashlib.sha256((ckpt / "beside_models.py").read_bytes()).hexdigest()
    expected = hashlib.sha256(f"beside_models.py\0{digest}\0".encode()).hexdigest()
    assert load_checkpoint(ckpt, trust_code=True).model_code_sha256 == expected
    with open_cache(acts) as cache:
        assert cache.provenance["model_code_sha256"] == expected
    assert main(["cache", "info", str(acts)]) == 0  # the hash printed as it is, unquoted
    assert f"model_code_sha256: {expected}\n" in capsys.readouterr().out


def test_a_model_that_hides_its_attention_still_gets_every_other_instrument(tmp_path):
    hidden = {k: v for k, v in SITES.items() if k != "pattern"}
    ckpt = save_checkpoint(tmp_path / "ckpt", trained_briefly(steps=20), TASK,
                           config=trained_config(hidden))  # fmt: skip
    out = tmp_path / "run"
    with blank_figures():
        probe_checkpoint(
            ckpt, out, RunSettings(n_cache=600, batch_size=200), progress=False, trust_code=True
        )
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["heads"] is None
    assert set(comparison["comparisons"]) == {"flow", "flow (random-init)", "decodability"}
    page = (out / "report" / "report.html").read_text()
    assert "does not expose its attention weights" in page


def test_a_hooked_root_module_with_transformer_lens_names_works_as_it_is(tmp_path):
    cfg = ModelConfig(d_in=TASK.d, n_ctx=TASK.T, d_model=8, heads=(2,), d_mlp=0)
    foreign = ForeignConfig(factory="foreign_models:native", kwargs=cfg.to_dict(), heads=(2,),
                            d_model=8, n_ctx=TASK.T, d_in=TASK.d)  # fmt: skip
    from infoprobe.model import InfoFlowTransformer

    model = InfoFlowTransformer(cfg, seed=3)
    ck = load_checkpoint(
        save_checkpoint(tmp_path / "ck", model, TASK, config=foreign), trust_code=True
    )
    assert type(ck.model) is InfoFlowTransformer
    x = torch.as_tensor(TASK.sample(4, np.random.default_rng(5))[0])
    torch.testing.assert_close(ck.model(x), model(x))


# --- bad input: one line, exit 2, nothing written -------------------------------------------


def edited(checkpoint, tmp_path, **fields):
    """A copy of ``checkpoint`` (its code beside it too) with ``model_config`` fields
    replaced (weights unchanged)."""
    dest = tmp_path / "edited"
    dest.mkdir()
    meta = json.loads((checkpoint / "checkpoint.json").read_text())
    meta["model_config"].update(fields)
    (dest / "checkpoint.json").write_text(json.dumps(meta))
    (dest / "model.safetensors").write_bytes((checkpoint / "model.safetensors").read_bytes())
    for code in checkpoint.glob("*.py"):
        (dest / code.name).write_bytes(code.read_bytes())
    return dest


BAD = [
    ({"factory": "no_such_module:build"}, ["'no_such_module'", "cannot import"]),
    ({"factory": "foreign_models:nothing"}, ["no function 'nothing'"]),
    ({"factory": "build"}, ["'module:function'"]),
    ({"factory": "foreign_models:broken"}, ["RuntimeError", "broken on purpose"]),
    ({"sites": {**SITES, "blocks": "layers.{l}.gone"}}, ["'layers.0.gone'", "no module"]),
    ({"sites": {**SITES, "blocks": "layers.{l}.mix.qkv"}}, ["[2, 9, 27]", "d_model=9"]),
    ({"sites": {**SITES, "pattern": "layers.{l}.norm1"}}, ["'layers.0.norm1'", "shape"]),
    ({"sites": {**SITES, "pattern": "layers.{l}.mix.softmax:input"}}, ["not an attention pattern"]),
    ({"d_out": 2}, ["'d_out' is 2"]),
    ({"factory": 7}, ["'module:function'", "7"]),
    ({"sites": "layers"}, ["field 'sites'", "'layers'"]),
    ({"heads": [2]}, ["heads of block 0", "[2, 2, 9, 9]"]),
]


@pytest.mark.parametrize("fields, words", BAD)
def test_a_broken_foreign_checkpoint_is_one_line_and_writes_nothing(
    monkeypatch, capsys, tmp_path, handset_checkpoint, fields, words
):
    ckpt = edited(handset_checkpoint, tmp_path, **fields)
    argv = [str(ckpt), "--out", str(tmp_path / "run"), "--n-cache", "600", "--trust-code"]
    assert_refused(monkeypatch, capsys, tmp_path, "probe-checkpoint", argv, words)


def test_a_hand_written_json_without_the_hash_is_told_the_hash(
    monkeypatch, capsys, tmp_path, handset_checkpoint
):
    ckpt = edited(handset_checkpoint, tmp_path)
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    sha = meta.pop("weights_sha256")
    (ckpt / "checkpoint.json").write_text(json.dumps(meta))
    argv = [str(ckpt), "--out", str(tmp_path / "acts.h5"), "--n", "64", "--trust-code"]
    assert_refused(monkeypatch, capsys, tmp_path, "cache", argv, ["weights_sha256", sha])


def test_saving_a_plain_module_without_its_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="config=ForeignConfig"):
        save_checkpoint(tmp_path / "ck", handset(TASK.d), TASK)
    assert not (tmp_path / "ck").exists()


def test_a_hugging_face_bert_gets_its_hook_points_from_the_site_map():
    """examples/hf_bert.py's site map on transformers' BertModel: the patterns are the ones
    BertModel itself returns with output_attentions, the last state its last_hidden_state."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    try:
        from hf_bert import SITES, build
    finally:
        sys.path.pop(0)
    model = build(d=TASK.d, T=TASK.T).eval()
    adapter = HookedAdapter(model, SITES)
    x = torch.as_tensor(TASK.sample(4, np.random.default_rng(6))[0])
    names = [f"blocks.{b}.attn.hook_pattern" for b in range(2)] + ["blocks.1.hook_resid_post"]
    got = capture(adapter, x, names)
    h = torch.cat([model.tokens(x), model.cls.expand(4, 1, -1)], dim=1)
    with torch.no_grad():
        own = model.bert(inputs_embeds=h, output_attentions=True)
    for b in range(2):
        torch.testing.assert_close(got[f"blocks.{b}.attn.hook_pattern"], own.attentions[b])
    torch.testing.assert_close(got["blocks.1.hook_resid_post"], own.last_hidden_state)


def test_save_checkpoint_copies_the_factory_module_so_it_loads_anywhere(tmp_path):
    """The checkpoint carries the module that builds its model: loaded in a fresh process
    whose sys.path lacks tests/, it rebuilds the same model from the copy."""
    path = save_checkpoint(tmp_path / "ck", handset(TASK.d), TASK, config=handset_config())
    source = Path(__file__).parent / "foreign_models.py"
    assert (path / "foreign_models.py").read_bytes() == source.read_bytes()
    code = (
        "import sys; from infoprobe import load_checkpoint; "
        "from infoprobe.foreign.config import weights_module; "
        "assert 'foreign_models' not in sys.modules; "
        f"model = weights_module(load_checkpoint({str(path)!r}, trust_code=True).model); "
        "print(type(model).__module__, sum(float(p.abs().sum()) for p in model.parameters()))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-1500:]
    module, total = proc.stdout.split()
    expected = sum(float(p.abs().sum()) for p in handset(TASK.d).parameters())
    assert module == "foreign_models" and float(total) == pytest.approx(expected, rel=1e-6)
