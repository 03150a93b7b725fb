"""scikit-learn estimators around the batched probe engines: ``RidgeProbe`` and ``MLPProbe``.

Both follow the sklearn contract (the constructor only stores parameters;
``fit`` validates and learns attributes ending in ``_``; ``predict``;
``score`` = R², averaged uniformly over outputs as every sklearn regressor;
``get_params``/``set_params``) and pass
``sklearn.utils.estimator_checks.check_estimator``, so they work in pipelines,
grid searches and cross-validation. They do not re-implement anything: a
``RidgeProbe`` is one call of :func:`infoprobe.probes.ridge_fit.fit_ridge` and an
``MLPProbe`` is :func:`infoprobe.probes.mlp.fit_mlp_probes` with one cell and
one target (C = S = 1). For many probes at once, call the engines directly.

``X [n, E]``; ``y [n]`` or ``[n, k]`` (multi-output); predictions have the
shape of ``y``.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from infoprobe.probes.batched_training import TrainingBudget
from infoprobe.probes.errors import ProbeInputError, SplitTooSmallError
from infoprobe.probes.mlp import MLPProbeFit, fit_mlp_probes
from infoprobe.probes.ridge import DEFAULT_ALPHAS
from infoprobe.probes.ridge_fit import RidgeFit, fit_ridge

__all__ = ["MLPProbe", "RidgeProbe"]

FLOAT_DTYPES = (np.float64, np.float32)


class ProbeRegressor(MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Shared sklearn plumbing: validation of ``fit``/``predict`` input and output shape.

    Subclasses implement ``_fit_2d(X [n, E], Y [n, k])`` and
    ``_predict_2d(X [n, E]) -> [n, k]``.
    """

    def fit(self, X: np.ndarray, y: np.ndarray) -> ProbeRegressor:
        """Fit on ``X [n, E]`` and ``y [n]`` or ``[n, k]``; returns ``self``."""
        X, y = validate_data(
            self, X, y, multi_output=True, y_numeric=True, dtype=list(FLOAT_DTYPES)
        )
        if X.shape[0] < 2:
            raise SplitTooSmallError(
                f"{type(self).__name__}.fit: expected at least 2 samples, got n_samples=1"
            )
        self.n_outputs_ = 1 if y.ndim == 1 else y.shape[1]
        self.y_ndim_ = y.ndim
        self._fit_2d(X, y.reshape(X.shape[0], -1))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions ``[n]`` (``y`` was 1-D) or ``[n, k]``, float64, for ``X [n, E]``."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=list(FLOAT_DTYPES))
        pred = np.asarray(self._predict_2d(X), dtype=np.float64)
        return pred[:, 0] if self.y_ndim_ == 1 else pred

    def _fit_2d(self, X: np.ndarray, Y: np.ndarray) -> None:
        raise NotImplementedError

    def _predict_2d(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class RidgeProbe(ProbeRegressor):
    """Linear ridge probe (sklearn's ``Ridge`` convention: penalty ``alpha·‖W‖²`` on
    centred data, unpenalised intercept), fitted by :func:`~infoprobe.probes.ridge_fit.fit_ridge`.

    Parameters:
        alpha: λ when ``alphas`` is None (default 1.0).
        alphas: a λ grid (tuple of positive floats) to choose from by exact
            leave-one-out error pooled over outputs (like ``RidgeCV``), or
            None to use ``alpha``. ``"default"`` uses the engine's grid
            (17 values, 1e-3 … 1e5).

    Attributes:
        coef_: ``[E]`` (1-D y) or ``[k, E]``.
        intercept_: float (1-D y) or ``[k]``.
        alpha_: the λ used.
        n_features_in_, n_outputs_: input width E and number of outputs k.
        ridge_fit_: the engine's :class:`~infoprobe.probes.ridge_fit.RidgeFit`.
    """

    def __init__(self, alpha: float = 1.0, alphas: tuple[float, ...] | str | None = None):
        self.alpha = alpha
        self.alphas = alphas

    def _fit_2d(self, X: np.ndarray, Y: np.ndarray) -> None:
        if self.alphas is None:
            grid: tuple[float, ...] = (float(self.alpha),)
        elif isinstance(self.alphas, str) and self.alphas == "default":
            grid = DEFAULT_ALPHAS
        else:
            grid = tuple(float(a) for a in np.atleast_1d(self.alphas))
        # writable arrays: torch warns on read-only buffers (e.g. memory-mapped inputs)
        fit: RidgeFit = fit_ridge(
            np.require(X, requirements="W"), np.require(Y, requirements="W"), grid
        )
        self.ridge_fit_ = fit
        self.alpha_ = fit.alpha
        self.coef_ = fit.coef[0] if self.y_ndim_ == 1 else fit.coef
        self.intercept_ = float(fit.intercept[0]) if self.y_ndim_ == 1 else fit.intercept

    def _predict_2d(self, X: np.ndarray) -> np.ndarray:
        return self.ridge_fit_.predict(X)


class MLPProbe(ProbeRegressor):
    """MLP probe ``E -> hidden -> GELU -> k``, trained by
    :func:`~infoprobe.probes.mlp.fit_mlp_probes` (one cell, one target).

    A random ``validation_fraction`` of the samples (at least 1) is held out
    for early stopping; the rest trains. Inputs and targets are standardised
    with training statistics.

    Parameters:
        hidden: hidden width (default 64).
        epochs: maximum epochs (default 100).
        batch_size: minibatch size (default 256).
        lr: learning rate (default 1e-3).
        weight_decay: L2 (Adam) or decoupled (AdamW) weight decay (default 0).
        optimizer: ``"adam"`` (default) or ``"adamw"``.
        patience: epochs without validation improvement before stopping (10).
        validation_fraction: share of samples held out for early stopping (0.1).
        random_state: int or None; fixes the split, initial weights and
            minibatch order.
        device: torch device to train on (default ``"cpu"``).

    Attributes:
        coefs_: ``[W1 [E, hidden], W2 [hidden, k]]`` acting on standardised data.
        intercepts_: ``[b1 [hidden], b2 [k]]``.
        x_mean_, x_scale_: ``[E]`` input standardisation; y_mean_, y_scale_: ``[k]``.
        best_epoch_: 0-based epoch whose weights were kept; n_iter_: epochs run.
        best_validation_loss_: standardised validation MSE at ``best_epoch_``.
        n_features_in_, n_outputs_: E and k.
        probe_fit_: the engine's :class:`~infoprobe.probes.mlp.MLPProbeFit`.
    """

    def __init__(
        self,
        hidden: int = 64,
        epochs: int = 100,
        batch_size: int = 256,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        optimizer: str = "adam",
        patience: int = 10,
        validation_fraction: float = 0.1,
        random_state: int | None = 0,
        device: str = "cpu",
    ):
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.optimizer = optimizer
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.device = device

    def _fit_2d(self, X: np.ndarray, Y: np.ndarray) -> None:
        n = X.shape[0]
        if not 0 < self.validation_fraction < 1:
            raise ProbeInputError(
                f"MLPProbe: validation_fraction must lie in (0, 1), "
                f"got {self.validation_fraction!r}"
            )
        rng = check_random_state(self.random_state)
        order = rng.permutation(n)
        n_val = min(n - 1, max(1, round(self.validation_fraction * n)))
        seed = int(rng.randint(np.iinfo(np.int32).max))
        fit: MLPProbeFit = fit_mlp_probes(
            X[:, None, :],
            Y[:, None, :],
            np.sort(order[n_val:]),
            np.sort(order[:n_val]),
            np.empty(0, dtype=np.int64),
            hidden=self.hidden,
            budget=TrainingBudget(
                epochs=self.epochs,
                batch_size=self.batch_size,
                lr=self.lr,
                weight_decay=self.weight_decay,
                optimizer=self.optimizer,
                patience=self.patience,
                seed=seed,
            ),
            device=self.device,
            progress=False,
        )
        params = {name: value[0, 0] for name, value in fit.params.items()}
        self.probe_fit_ = fit
        self.coefs_ = [params["w_in"].T, params["w_out"].T]
        self.intercepts_ = [params["b_in"], params["b_out"]]
        self.x_mean_, self.x_scale_ = fit.engine.x_stats.mean[0], fit.engine.x_stats.scale[0]
        self.y_mean_, self.y_scale_ = fit.engine.y_stats.mean[0], fit.engine.y_stats.scale[0]
        self.best_epoch_ = int(fit.best_epoch[0, 0])
        self.best_validation_loss_ = float(fit.best_val_loss[0, 0])
        self.n_iter_ = int(max(fit.engine.epochs_run))

    def _predict_2d(self, X: np.ndarray) -> np.ndarray:
        return self.probe_fit_.predict(X[:, None, :], dtype=torch.float64)[:, 0, 0, :]
