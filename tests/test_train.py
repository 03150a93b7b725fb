"""Training loop: NMSE definition, schedule, determinism, learning, divergence handling."""

import copy
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import r2_score

from infoprobe.checkpoint import load_checkpoint
from infoprobe.model import ModelConfig
from infoprobe.tasks import make_task
from infoprobe.train.config import NonFiniteLossError, TrainConfig, TrainingError
from infoprobe.train.loop import lr_factor, nmse, setup_training, train
from infoprobe.train.save import train_and_save

SMALL = TrainConfig(steps=60, batch_size=64, n_val=256, n_test=256, eval_every=20, lr=2e-3)


def small_model(task, **kw):
    return ModelConfig(
        d_in=task.d,
        n_ctx=task.T,
        d_out=task.d_out,
        d_model=16,
        heads=(2, 2),
        d_mlp=32,
        d_readout=16,
        **kw,
    )


def test_nmse_is_one_minus_variance_weighted_r2():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(200, 3)) * [1.0, 5.0, 0.1]
    pred = y + rng.normal(size=y.shape)
    expected = 1 - r2_score(y, pred, multioutput="variance_weighted")
    assert nmse(torch.tensor(pred), torch.tensor(y)) == pytest.approx(expected, rel=1e-12)


def test_schedule_warms_up_linearly_then_follows_a_cosine():
    cfg = TrainConfig(steps=1100, warmup=100)
    assert lr_factor(0, cfg) == pytest.approx(0.01)
    assert lr_factor(99, cfg) == pytest.approx(1.0)
    assert lr_factor(100, cfg) == pytest.approx(1.0)
    assert lr_factor(600, cfg) == pytest.approx(0.5)
    assert lr_factor(1100, cfg) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(350, cfg) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))


def test_training_is_deterministic_and_leaves_global_rng_alone():
    task = make_task("intrinsic-dim", T=4, D=1)
    state = torch.random.get_rng_state()
    a = train(task, small_model(task), SMALL, progress=False)
    b = train(task, small_model(task), SMALL, progress=False)
    assert torch.equal(state, torch.random.get_rng_state())
    assert a.history == b.history
    for p, q in zip(a.model.state_dict().values(), b.model.state_dict().values(), strict=True):
        assert torch.equal(p, q)


def test_optimiser_steps_as_torch_adamw_does_parameter_by_parameter():
    task = make_task("intrinsic-dim", T=4, D=1)
    model, opt, _ = setup_training(task, small_model(task), SMALL)
    twin = copy.deepcopy(model)
    lr = opt.param_groups[0]["lr"]  # the schedule's first step
    loop = torch.optim.AdamW(twin.parameters(), lr=lr, weight_decay=0.01, foreach=False)
    x = torch.randn(32, task.T, task.d, generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        for m, o in ((model, opt), (twin, loop)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_training_learns_a_retrieval_task_and_keeps_the_best_model():
    task = make_task("d-retrieval", T=4, D=1, d=2)
    cfg = TrainConfig(steps=400, batch_size=128, n_val=512, n_test=512, eval_every=50, lr=3e-3)
    result = train(task, small_model(task), cfg, progress=False)
    vals = [h["val_nmse"] for h in result.history]
    assert result.val_nmse == min(vals) < 0.1
    assert vals[0] > 2 * result.val_nmse
    assert result.best_step == result.history[int(np.argmin(vals))]["step"]
    assert result.test_nmse < 0.15


def test_fixed_training_set_option_draws_the_set_once():
    task = make_task("intrinsic-dim", T=4, D=1)
    cfg = TrainConfig(steps=40, batch_size=32, n_train=64, n_val=128, n_test=128, eval_every=20)
    calls = []
    original = task.sample

    class Counting:
        def __getattr__(self, name):
            return getattr(task, name)

        def sample(self, n, rng):
            calls.append(n)
            return original(n, rng)

    train(Counting(), small_model(task), cfg, progress=False)
    assert calls == [128, 64, 128]  # val, the fixed train set, test: nothing per step


def test_early_stopping_stops_after_patience_evaluations(monkeypatch):
    task = make_task("intrinsic-dim", T=4, D=1)
    scores = iter([0.5, 0.4, 0.45, 0.46, 0.3, 0.2])  # best at eval 2, then 2 worse
    monkeypatch.setattr("infoprobe.train.loop.evaluate", lambda *a, **k: next(scores, 1.0))
    cfg = TrainConfig(steps=2000, batch_size=32, n_val=64, n_test=64, eval_every=10, patience=2)
    result = train(task, small_model(task), cfg, progress=False)
    assert result.stopped == "early stopping at step 40"
    assert [h["step"] for h in result.history] == [10, 20, 30, 40]
    assert (result.best_step, result.val_nmse) == (20, 0.4)


class NaNTargets:
    """intrinsic-dim with NaN targets on the training stream (batches of 64)."""

    def __init__(self):
        self.task = make_task("intrinsic-dim", T=4, D=1)

    def __getattr__(self, name):
        return getattr(self.task, name)

    def sample(self, n, rng):
        x, y = self.task.sample(n, rng)
        return x, (y * np.nan if n == 64 else y)


def test_non_finite_loss_stops_names_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    task = NaNTargets()
    with pytest.raises(NonFiniteLossError, match="step 0") as info:
        train_and_save(task, small_model(task.task), SMALL, tmp_path / "ck", progress=False)
    assert info.value.step == 0
    ck = load_checkpoint(tmp_path / "ck")
    assert ck.meta["metrics"]["stopped"] == "non-finite loss at step 0"
    assert all(torch.isfinite(p).all() for p in ck.model.parameters())


def test_non_finite_loss_without_keep_diverged_writes_nothing(tmp_path):
    task = NaNTargets()
    with pytest.raises(NonFiniteLossError, match="step 0"):
        train_and_save(
            task, small_model(task.task), SMALL, tmp_path / "ck", progress=False,
            keep_diverged=False,
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kw, field", [({"steps": 0}, "steps"), ({"lr": 0.0}, "lr"), ({"n_train": 8}, "n_train")]
)
def test_bad_training_config_names_the_field(kw, field):
    with pytest.raises(TrainingError, match=field):
        TrainConfig(**kw)


def test_model_that_does_not_fit_the_task_is_refused():
    task = make_task("intrinsic-dim", T=4, D=1)
    with pytest.raises(TrainingError, match="n_ctx"):
        train(task, ModelConfig(d_in=4, n_ctx=5), SMALL, progress=False)
