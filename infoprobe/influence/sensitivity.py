"""Flow scores by intervention on the input, batched: every position and draw in one forward.

For layer l, sample i, token t (0..T, CLS = T) and data position s (0..T-1):

- local sensitivity, finite differences (``estimator="fd"``): nudge x(s) alone by
  δ_k = ε·σ·u_k, u_k ~ N(0, I_d), and score
  g = mean_k ‖h_{t,l}(x + δ_k e_s) − h_{t,l}(x)‖² / (ε² σ² v(l, t));
- local sensitivity, exact (``estimator="jacobian"``): g = σ² ‖∂h_{t,l}/∂x(s)‖_F² / v(l, t),
  the Jacobian's columns pushed forward by forward-mode AD (dual tensors through the
  model's hook points), one tangent per basis direction of x(s);
- resample ablation (``method="resample"``): replace x(s) by x_j(s) of R other samples j and
  score g = mean_r ‖h_{t,l}(x with x(s) ← x_j(s)) − h_{t,l}(x)‖² / (2 v(l, t)).

σ is the input scale (RMS of x minus its per-position, per-coordinate mean over the
samples) and v(l, t) = Σ_e Var_i h_{t,l,e} the total variance of the state over the n
samples (population variance, 1/n), from a first plain pass. Cells with v = 0 score 0.

A block of b samples becomes b·(1 + T·K) sequences (b·T·d for the Jacobian) run through
the L+1 layer hook sites with ``infoprobe.hooks.capture`` (early stop after the last
layer), in forwards of at most ``max_sequences`` sequences. Block b draws its directions
or partners from ``numpy.random.default_rng([seed, b])``, so a resumed run is identical.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import einops
import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from tqdm.auto import tqdm
from transformer_lens import HookedRootModule

from infoprobe.hooks.capture import capture, eval_mode, model_device, stop_layer
from infoprobe.hooks.sites import count_blocks, layer_sites
from infoprobe.influence.errors import InfluenceError
from infoprobe.influence.sets import DEFAULT_FLOW_FRACTION, flow_sets, membership_share
from infoprobe.influence.settings import InfluenceSettings


@dataclass(frozen=True)
class FlowPlan:
    """What is fixed before any score is computed (and recorded in the file).

    ``state_variance`` is float64 [L+1, T+1] (layer, token); ``hook_names`` the L+1 layer
    sites; ``settings`` are resolved (block size filled in).
    """

    settings: InfluenceSettings
    hook_names: tuple[str, ...]
    n: int
    T: int
    d: int
    input_scale: float
    state_variance: np.ndarray = field(repr=False)

    @property
    def n_layer_axis(self) -> int:
        """L+1, the length of the layer axis."""
        return len(self.hook_names)

    @property
    def block_size(self) -> int:
        return self.settings.samples_per_block

    @property
    def n_sample_blocks(self) -> int:
        return -(-self.n // self.block_size)

    def block_range(self, block: int) -> tuple[int, int]:
        """Samples [start, stop) of block ``block``."""
        start = block * self.block_size
        return start, min(start + self.block_size, self.n)

    @property
    def score_shape(self) -> tuple[int, int, int, int]:
        """[L+1, n, T+1, T]."""
        return (self.n_layer_axis, self.n, self.T + 1, self.T)


@dataclass(frozen=True)
class InfluenceResult:
    """Flow scores in memory.

    Attributes:
        scores: g, float32 [L+1, n, T+1, T] (layer, sample, token, position).
        state_variance: v, float64 [L+1, T+1] (layer, token).
        input_scale: σ.
        settings: the resolved settings.
        hook_names: the L+1 layer sites, indexed by layer.
    """

    scores: np.ndarray
    state_variance: np.ndarray
    input_scale: float
    settings: InfluenceSettings
    hook_names: tuple[str, ...]

    @property
    def n_layer_axis(self) -> int:
        """L+1, the length of the layer axis."""
        return self.scores.shape[0]

    @property
    def n(self) -> int:
        return self.scores.shape[1]

    @property
    def T(self) -> int:
        return self.scores.shape[3]

    @property
    def aggregate(self) -> np.ndarray:
        """Mean over samples, float64 [L+1, T+1, T] (not the aggregate score: near ties
        dominate it; see :meth:`membership_share`)."""
        return self.scores.mean(axis=1, dtype=np.float64)

    def membership_share(self, fraction: float = DEFAULT_FLOW_FRACTION) -> np.ndarray:
        """The aggregate flow score, float64 [L+1, T+1, T] in [0, 1]: the share of samples
        in which s is in the flow set of (t, l) (:func:`membership_share`)."""
        return membership_share(self.scores, fraction)

    def sets(self, fraction: float = DEFAULT_FLOW_FRACTION) -> np.ndarray:
        """Per-sample flow sets, bool [L+1, n, T+1, T+1] (see :func:`flow_sets`)."""
        return flow_sets(self.scores, fraction)


# --- checks ---------------------------------------------------------------------------


def check_inputs(x: np.ndarray | torch.Tensor, what: str = "x") -> np.ndarray:
    """x as float32 [n, T, d], finite; raises :class:`InfluenceError` naming the sample."""
    arr = np.ascontiguousarray(
        x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float32
    )
    if arr.ndim != 3 or min(arr.shape) < 1:
        raise InfluenceError(f"{what} must have shape [n, T, d] (all >= 1), got {list(arr.shape)}")
    bad = ~np.isfinite(arr)
    if bad.any():
        i, s, k = np.argwhere(bad)[0]
        raise InfluenceError(
            f"{what}: input of sample {i}, position {s}, coordinate {k} is {arr[i, s, k]} "
            "(expected a finite number)"
        )
    return arr


def layer_names(model: HookedRootModule) -> list[str]:
    """The L+1 layer sites of ``model``; :class:`InfluenceError` if it lacks any of them."""
    hook_dict = getattr(model, "hook_dict", None)
    if not isinstance(hook_dict, dict):
        raise InfluenceError(
            f"model {type(model).__name__} is not a TransformerLens HookedRootModule "
            "(no hook_dict); expected the layer sites blocks.0.hook_resid_pre and "
            "blocks.{k}.hook_resid_post"
        )
    n_blocks = count_blocks(hook_dict)
    names = layer_sites(max(n_blocks, 1))
    missing = [name for name in names if name not in hook_dict]
    if n_blocks < 1 or missing:
        raise InfluenceError(
            f"model {type(model).__name__} lacks the layer hook site(s) {missing or names}; "
            f"expected {names} (layer 0 = blocks.0.hook_resid_pre, layer k = "
            f"blocks.{{k-1}}.hook_resid_post), it has {sorted(hook_dict)[:12]}"
        )
    return names


def input_scale(x: np.ndarray) -> float:
    """σ: RMS over samples, positions and coordinates of x minus its mean over the samples.

    The mean is per (position, coordinate); σ² is the average per-coordinate variance
    (population variance, 1/n).
    """
    x64 = np.asarray(x, dtype=np.float64)
    sigma = float(np.sqrt(np.mean((x64 - x64.mean(axis=0)) ** 2)))
    if not sigma > 0:
        raise InfluenceError(
            f"the {x64.shape[0]} input samples are all equal (input scale σ = {sigma}); "
            "flow needs inputs that vary"
        )
    return sigma


def _check_states(name: str, layer: int, h: torch.Tensor, first: int) -> None:
    bad = ~torch.isfinite(h)
    if bool(bad.any()):
        i, t = (int(v) for v in torch.nonzero(bad.any(dim=-1))[0])
        raise InfluenceError(
            f"state h(t, l) is not finite at layer {layer} ({name}), sample {first + i}, "
            f"token {t} (value {float(h[i, t][bad[i, t]][0])}); expected finite activations"
        )


def state_variance(
    model: HookedRootModule,
    x: np.ndarray,
    names: list[str],
    *,
    max_sequences: int,
    progress: bool = False,
) -> np.ndarray:
    """v(l, t) = Σ_e Var_i h_{t,l,e}: float64 [L+1, T+1], one plain forward of all samples.

    Float64 sums of the states minus sample 0's state (so a constant state gives exactly 0);
    raises :class:`InfluenceError` naming the layer, sample and token of a non-finite state.
    """
    n = x.shape[0]
    s1: list[torch.Tensor | None] = [None] * len(names)
    s2: list[torch.Tensor | None] = [None] * len(names)
    ref: list[torch.Tensor | None] = [None] * len(names)
    with tqdm(total=n, unit="sample", desc="state variance", disable=not progress) as bar:
        for start in range(0, n, max_sequences):
            acts = capture(model, x[start : start + max_sequences], names)
            for layer, name in enumerate(names):
                h = acts[name]
                if h.ndim != 3 or h.shape[1] != x.shape[1] + 1:
                    raise InfluenceError(
                        f"layer site {name} gives states of shape {list(h.shape)}, expected "
                        f"[batch, T+1={x.shape[1] + 1}, d_model] (data tokens and CLS)"
                    )
                _check_states(name, layer, h, start)
                h = h.double()
                if ref[layer] is None:
                    ref[layer] = h[0].clone()
                    s1[layer] = torch.zeros_like(h[0])
                    s2[layer] = torch.zeros_like(h[0])
                centred = h - ref[layer]
                s1[layer] += centred.sum(dim=0)
                s2[layer] += centred.pow(2).sum(dim=0)
            bar.update(min(max_sequences, n - start))
    var = [(b / n - (a / n) ** 2).clamp_min(0).sum(dim=-1) for a, b in zip(s1, s2, strict=True)]
    return torch.stack(var).cpu().numpy()


def plan_influence(
    model: HookedRootModule,
    x: np.ndarray | torch.Tensor,
    settings: InfluenceSettings | None = None,
    *,
    progress: bool = False,
) -> FlowPlan:
    """Validate the inputs and run the first pass (σ and v); nothing is scored yet.

    Args:
        model: a ``HookedRootModule`` whose forward takes x [b, T, d] and that has the
            layer sites (``blocks.0.hook_resid_pre``, ``blocks.{k}.hook_resid_post``).
        x: float [n, T, d] inputs.
        settings: :class:`InfluenceSettings` (defaults if None).

    Raises:
        InfluenceError: missing layer sites, non-finite inputs or states, constant inputs,
            resample ablation with fewer than two samples.
    """
    settings = (settings or InfluenceSettings()).resolved()
    x = check_inputs(x)
    names = layer_names(model)
    n, T, d = x.shape
    if settings.method == "resample" and n < 2:
        raise InfluenceError(f"resample ablation needs at least 2 samples, got n={n}")
    sigma = input_scale(x)
    var = state_variance(model, x, names, max_sequences=settings.max_sequences, progress=progress)
    return FlowPlan(settings, tuple(names), n, T, d, sigma, var)


# --- the batched pass ----------------------------------------------------------------------


def capture_tangents(
    model: HookedRootModule, primal: torch.Tensor, tangent: torch.Tensor, names: list[str]
) -> dict[str, torch.Tensor]:
    """Forward-mode AD: J·tangent at each hook site, {name: [b, ...]} (the primal's batch).

    Runs ``model(dual)`` under ``torch.no_grad`` (forward AD is unaffected) and reads the
    tangent of each site's dual tensor in a hook; stops after the last site's block when
    the model accepts ``stop_at_layer``. A site independent of the input gets zeros.
    """
    stored: dict[str, torch.Tensor] = {}
    primals: dict[str, torch.Tensor] = {}

    def save(value: torch.Tensor, hook) -> None:
        unpacked = fwAD.unpack_dual(value)
        primals[hook.name] = unpacked.primal.detach()
        if unpacked.tangent is not None:
            stored[hook.name] = unpacked.tangent.detach()

    layer = stop_layer(model, names)
    kwargs = {} if layer is None else {"stop_at_layer": layer}
    with (
        eval_mode(model),
        torch.no_grad(),
        fwAD.dual_level(),
        model.hooks([(n, save) for n in names]),
    ):
        try:
            model(fwAD.make_dual(primal.clone(), tangent.clone()), **kwargs)
        except NotImplementedError as err:  # an operation without a forward derivative
            raise InfluenceError(
                f"model {type(model).__name__}: forward-mode derivatives are not available "
                f"({' '.join(str(err).split())}); use the finite-difference estimator "
                "(--estimator fd) or resample ablation (--method resample)"
            ) from None
    return {n: stored.get(n, torch.zeros_like(primals[n])) for n in names}


def _substituted(x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """x [c, T, d] with position s replaced by values[:, s, m]: [c, T(s), m, T, d]."""
    T = x.shape[1]
    own = torch.eye(T, dtype=torch.bool, device=x.device)[None, :, None, :, None]
    return torch.where(own, values[:, :, :, None, :], x[:, None, None])


def _moved(model, names, x: torch.Tensor, values: torch.Tensor) -> list[torch.Tensor]:
    """mean_m ‖h(x with x(s) ← values[:, s, m]) − h(x)‖², per layer float64 [c, T+1, T(s)]."""
    c, T, draws = x.shape[0], x.shape[1], values.shape[2]
    pert = einops.rearrange(_substituted(x, values), "c s m t d -> c (s m) t d")
    seqs = einops.rearrange(torch.cat([x[:, None], pert], dim=1), "c m t d -> (c m) t d")
    acts = capture(model, seqs, names)
    out = []
    for name in names:
        h = einops.rearrange(acts[name], "(c m) p e -> c m p e", c=c)
        sq = (h[:, 1:] - h[:, :1]).double().pow(2).sum(dim=-1)  # [c, T*draws, T+1]
        out.append(einops.reduce(sq, "c (s m) p -> c p s", "mean", s=T, m=draws))
    return out


def _jacobian_norms(model, names, x: torch.Tensor) -> list[torch.Tensor]:
    """‖∂h_t/∂x(s)‖_F², per layer float64 [c, T+1, T(s)], from T·d tangents per sample."""
    c, T, d = x.shape
    primal = einops.repeat(x, "c t d -> (c m) t d", m=T * d)
    basis = torch.eye(T * d, dtype=x.dtype, device=x.device).reshape(T * d, T, d)
    tangent = einops.repeat(basis, "m t d -> (c m) t d", c=c)
    tangents = capture_tangents(model, primal, tangent, names)
    return [
        einops.reduce(tangents[name].double().pow(2), "(c s k) p e -> c p s", "sum", c=c, s=T, k=d)
        for name in names
    ]


def block_draws(plan: FlowPlan, block: int) -> np.ndarray | None:
    """The random draws of block ``block`` from ``default_rng([seed, block])``.

    fd: directions u float64 [b, T, K, d]; resample: partner sample indices int64
    [b, T, R] (never the sample itself); Jacobian: None (nothing random).
    """
    s = plan.settings
    start, stop = plan.block_range(block)
    rng = np.random.default_rng([s.seed, block])
    if s.method == "resample":
        partners = rng.integers(0, plan.n - 1, size=(stop - start, plan.T, s.resamples))
        own = np.arange(start, stop)[:, None, None]
        return partners + (partners >= own)
    if s.estimator == "fd":
        return rng.standard_normal((stop - start, plan.T, s.directions, plan.d))
    return None


def samples_per_forward(plan: FlowPlan) -> int:
    """Samples whose sequences share one forward (≥ 1, ≤ max_sequences sequences if possible)."""
    s = plan.settings
    if s.method == "local" and s.estimator == "jacobian":
        per_sample = plan.T * plan.d  # one dual sequence per basis direction, no base
    else:
        per_sample = 1 + plan.T * s.draws(plan.d)  # the base sequence + T·K (or T·R)
    return max(1, s.max_sequences // per_sample)


def block_scores(model: HookedRootModule, x: np.ndarray, plan: FlowPlan, block: int) -> np.ndarray:
    """Flow scores g of block ``block``: float32 [L+1, b, T+1, T].

    ``x`` is all n samples [n, T, d] (resample ablation draws partners from all of them).
    """
    s = plan.settings
    start, stop = plan.block_range(block)
    draws = block_draws(plan, block)
    device = model_device(model)
    xs = torch.as_tensor(x[start:stop], dtype=torch.float32, device=device)
    chunk = samples_per_forward(plan)
    if s.method == "resample":
        norm = 2.0
    elif s.estimator == "fd":
        norm = s.epsilon**2 * plan.input_scale**2
    else:
        norm = 1.0 / plan.input_scale**2
    parts: list[list[torch.Tensor]] = []
    for a in range(0, stop - start, chunk):
        xc = xs[a : a + chunk]
        if s.method == "resample":
            j = draws[a : a + chunk]
            donors = torch.as_tensor(x[j, np.arange(plan.T)[None, :, None]], device=device)
            parts.append(_moved(model, list(plan.hook_names), xc, donors))
        elif s.estimator == "fd":
            delta = s.epsilon * plan.input_scale * draws[a : a + chunk]
            delta = torch.as_tensor(delta.astype(np.float32), device=device)
            parts.append(_moved(model, list(plan.hook_names), xc, xc[:, :, None] + delta))
        else:
            parts.append(_jacobian_norms(model, list(plan.hook_names), xc))
    moved = np.stack([torch.cat(p, dim=0).cpu().numpy() for p in zip(*parts, strict=True)])
    v = plan.state_variance
    inverse = np.divide(1.0, norm * v, out=np.zeros_like(v), where=v > 0)  # v = 0 → g = 0
    return (moved * inverse[:, None, :, None]).astype(np.float32)


def influence(
    model: HookedRootModule,
    x: np.ndarray | torch.Tensor,
    settings: InfluenceSettings | None = None,
    *,
    progress: bool = True,
    plan: FlowPlan | None = None,
) -> InfluenceResult:
    """Flow scores of ``model`` on inputs ``x``, in memory.

    Args:
        model: a ``HookedRootModule`` whose forward takes x [b, T, d] and that has the L+1
            layer sites (layer 0 = ``blocks.0.hook_resid_pre``, layer k =
            ``blocks.{k-1}.hook_resid_post``).
        x: float [n, T, d] inputs (e.g. an activation cache's ``/inputs/x``).
        settings: :class:`InfluenceSettings` (defaults if None).
        progress: show tqdm bars (False: quiet).
        plan: a :func:`plan_influence` result for the same model, x and settings (skips
            the first pass).

    Returns:
        :class:`InfluenceResult` with scores g float32 [L+1, n, T+1, T].
    """
    x = check_inputs(x)
    plan = plan or plan_influence(model, x, settings, progress=progress)
    scores = np.empty(plan.score_shape, dtype=np.float32)
    for block, start, stop in iterate_blocks(plan, progress=progress):
        scores[:, start:stop] = block_scores(model, x, plan, block)
    return InfluenceResult(
        scores, plan.state_variance, plan.input_scale, plan.settings, plan.hook_names
    )


def iterate_blocks(
    plan: FlowPlan, *, first: int = 0, progress: bool = True, desc: str = "flow"
) -> Iterator[tuple[int, int, int]]:
    """Yield (block, start, stop) from the block holding sample ``first``; tqdm bar by sample."""
    with tqdm(total=plan.n, initial=first, unit="sample", desc=desc, disable=not progress) as bar:
        for block in range(first // plan.block_size, plan.n_sample_blocks):
            start, stop = plan.block_range(block)
            yield block, start, stop
            bar.update(stop - start)
