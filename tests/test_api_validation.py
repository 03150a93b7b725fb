"""The Python API refuses bad arguments with ValueError or TypeError naming the argument,
what was expected and what was given, before any work (and never misbehaves silently)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infoprobe import cli
from infoprobe.base.errors import UsageError
from infoprobe.checkpoint import load_checkpoint, save_checkpoint
from infoprobe.compare.sources import load_sources
from infoprobe.hooks import CacheError, UnknownSiteError, open_cache
from infoprobe.influence import InfluenceError, flow_sets
from infoprobe.infoflow import InfoFlowError, predict
from infoprobe.model import InfoFlowTransformer, ModelConfig, ModelInputError
from infoprobe.pipeline.caching import cache_checkpoint
from infoprobe.pipeline.probing import ProbeSettings
from infoprobe.pipeline.settings import RunSettings
from infoprobe.probes.errors import ProbeInputError
from infoprobe.tasks import make_task
from infoprobe.train.config import TrainConfig
from infoprobe.train.loop import train

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = make_task("intrinsic-dim", T=6, D=2, seed=0)
CFG = ModelConfig(d_in=TASK.d, n_ctx=TASK.T, d_model=12, heads=(2, 2), d_mlp=16,
                  d_readout=8, d_out=TASK.d_out)  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    save_checkpoint(root / "ckpt", InfoFlowTransformer(CFG, seed=1), TASK)
    cache_checkpoint(root / "ckpt", root / "acts.h5", n=40, sites="layers", batch_size=20,
                     progress=False)  # fmt: skip
    return root


def test_model_config_from_dict_names_its_argument():
    with pytest.raises(TypeError, match=r"from_dict: d: expected a dict .* got NoneType"):
        ModelConfig.from_dict(None)


@pytest.mark.parametrize(
    "args, name, expected",
    [((None, CFG, TrainConfig(steps=1)), "task", "Task"),
     ((TASK, None, TrainConfig(steps=1)), "model_cfg", "ModelConfig"),
     ((TASK, CFG, None), "cfg", "TrainConfig")],
)  # fmt: skip
def test_train_names_the_argument_of_the_wrong_type(args, name, expected):
    with pytest.raises(TypeError, match=rf"^{name}: expected a {expected}, got NoneType"):
        train(*args, progress=False)


def test_predict_names_its_task_argument():
    with pytest.raises(TypeError, match=r"predict: task: expected a Task .* got NoneType"):
        predict(None, (2, 2))


def test_load_checkpoint_names_a_bad_device(saved):
    with pytest.raises(UsageError, match=r"load_checkpoint: device: .* got 'bogus'"):
        load_checkpoint(saved / "ckpt", device="bogus")


def test_the_model_names_a_bad_input_dtype_type_and_shape():
    model = InfoFlowTransformer(CFG).eval()
    with pytest.raises(ModelInputError, match=r"dtype torch\.int64, expected .*float32"):
        model(torch.zeros(2, TASK.T, TASK.d, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"x: expected a torch\.Tensor .* got ndarray"):
        model(np.zeros((2, TASK.T, TASK.d), dtype=np.float32))
    with pytest.raises(ModelInputError, match=r"shape \[batch, T=6, d=4\], got \[2, 5, 4\]"):
        model(torch.zeros(2, 5, TASK.d))


def test_a_bad_model_input_is_a_one_line_user_error_on_the_command_line(monkeypatch, capsys):
    """The shape refusal is one of infoprobe's input errors, which the CLI prints as one
    line (exit 2), not a bug with a traceback."""
    from test_bad_input import run_raising

    model = InfoFlowTransformer(CFG).eval()

    def shape_error():
        try:
            model(torch.zeros(2, 5, TASK.d))
        except ModelInputError as err:
            return err
        raise AssertionError("the model accepted a wrong shape")

    assert cli.is_user_error(shape_error())
    assert run_raising(monkeypatch, shape_error) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "got [2, 5, 4]" in err


def test_iter_blocks_refuses_a_block_size_below_one(saved):
    with open_cache(saved / "acts.h5") as cache:
        for bad in (-5, 0):
            with pytest.raises(CacheError, match=rf"block_size: expected None or .* got {bad}"):
                list(cache.iter_blocks(block_size=bad))
        name = cache.hook_names[0]  # one name given as a string is that one site
        (block,) = cache.iter_blocks(name, block_size=40, include_inputs=False)
        assert list(block) == [name] and block[name].shape[0] == 40


def test_to_activation_cache_refuses_a_missing_model(saved):
    with (
        open_cache(saved / "acts.h5") as cache,
        pytest.raises(TypeError, match=r"to_activation_cache: model: .* got NoneType"),
    ):
        cache.to_activation_cache(None)


def test_load_sources_refuses_an_unknown_score():
    with pytest.raises(UsageError, match=r"load_sources: score: expected one of .* 'bogus'"):
        load_sources("pred.h5", "probes.h5", score="bogus")


@pytest.mark.parametrize("shape", [(3, 7, 6), (7, 6), (3, 2, 7, 7), (1, 3, 2, 7, 6)])
def test_flow_sets_refuses_anything_but_per_sample_scores(shape):
    with pytest.raises(InfluenceError, match=r"flow_sets: scores: expected .* \[L\+1, n, T\+1"):
        flow_sets(np.zeros(shape, dtype=np.float32))


def test_predicted_sets_refuse_non_finite_inputs():
    prediction = predict(TASK, (2, 2))
    x = np.zeros((3, TASK.T, TASK.d), dtype=np.float32)
    x[2, 1, 0] = np.nan
    with pytest.raises(InfoFlowError, match=r"sets: x: expected finite .* 1 NaN .* sample 2"):
        prediction.sets(x)
    x[2, 1, 0] = np.inf
    with pytest.raises(InfoFlowError, match="infinite"):
        prediction.sets(x)


@pytest.mark.parametrize("sites", ["bogus", "re:(", "residual,bogus", ""])
def test_run_settings_refuse_sites_no_model_has(sites):
    with pytest.raises(UnknownSiteError, match=r"hook site|no hook sites"):
        RunSettings(sites=sites)


def test_run_settings_keep_sites_a_model_may_have():
    for sites in ("residual,attention", "layers", "re:hook_resid", "blocks.7.hook_resid_post"):
        assert RunSettings(sites=sites).sites == sites


@pytest.mark.parametrize(
    "fractions", [(0.5, 0.5, 0.5), (0.7, 0.3), (1.2, -0.1, -0.1), (np.nan, 0.5, 0.5), "abc"]
)
def test_probe_settings_refuse_split_fractions_that_are_not_a_split(fractions):
    with pytest.raises(ProbeInputError, match=r"fractions: .*summing to 1"):
        ProbeSettings(fractions=fractions)


@pytest.mark.parametrize("ranks", [(), (0,), (1.5,), (True,)])
def test_probe_settings_refuse_ranks_that_are_not_ranks(ranks):
    with pytest.raises(ProbeInputError, match=r"ranks: expected one or more integer .* >= 1"):
        ProbeSettings(targets="roles", ranks=ranks)
