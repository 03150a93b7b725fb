"""Hook sites: presets, resolution against ``model.hook_dict``, axis names, layer convention.

A *site* is a TransformerLens hook name, verbatim (``blocks.0.hook_resid_post``). Users
name sites with presets, exact names or regular expressions; :func:`resolve_sites` turns
that into the list of hook names, validated against the model up front.

Layer convention (docs/conventions.md): layer 0 is ``blocks.0.hook_resid_pre`` (the
embedding); layer k ≥ 1 is ``blocks.{k-1}.hook_resid_post``. :func:`layer_sites` and
:func:`layer_of_site` map between the two.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from infoprobe.hooks.errors import UnknownSiteError

_BLOCK = re.compile(r"^blocks\.(\d+)\.")
_HOOK_NAME = re.compile(r"^(\w+\.)*hook_\w+$")

PRESET_PATTERNS: dict[str, tuple[str, ...]] = {
    "residual": (
        r"^blocks\.0\.hook_resid_pre$",
        r"^blocks\.\d+\.hook_resid_mid$",
        r"^blocks\.\d+\.hook_resid_post$",
    ),
    "attention": (
        r"^blocks\.\d+\.attn\.hook_pattern$",
        r"^blocks\.\d+\.attn\.hook_z$",
        r"^blocks\.\d+\.hook_attn_out$",
    ),
    "layers": (r"^blocks\.0\.hook_resid_pre$", r"^blocks\.\d+\.hook_resid_post$"),
    "all": (r".",),
}
"""Preset name → regexes; a preset selects every hook name matching any of its patterns.

``residual``: resid_pre of block 0 and resid_mid / resid_post of every block.
``attention``: pattern, z and attn_out of every block. ``layers``: the L+1 layer sites of
the project's layer convention. ``all``: every hook point of the model.
"""

REGEX_PREFIX = "re:"

_TOKEN_MODEL = ("sample", "token", "d_model")
_TOKEN_HEAD = ("sample", "token", "head", "d_head")
_HEAD_QK = ("sample", "head", "query", "key")
AXES_BY_HOOK: dict[str, tuple[str, ...]] = {
    "hook_embed": _TOKEN_MODEL,
    "hook_pos_embed": _TOKEN_MODEL,
    "hook_resid_pre": _TOKEN_MODEL,
    "hook_resid_mid": _TOKEN_MODEL,
    "hook_resid_post": _TOKEN_MODEL,
    "hook_attn_out": _TOKEN_MODEL,
    "hook_mlp_out": _TOKEN_MODEL,
    "hook_normalized": _TOKEN_MODEL,
    "hook_scale": ("sample", "token", "one"),
    "hook_q": _TOKEN_HEAD,
    "hook_k": _TOKEN_HEAD,
    "hook_v": _TOKEN_HEAD,
    "hook_z": _TOKEN_HEAD,
    "hook_result": ("sample", "token", "head", "d_model"),
    "hook_attn_scores": _HEAD_QK,
    "hook_pattern": _HEAD_QK,
    "hook_pre": ("sample", "token", "d_mlp"),
    "hook_mid": ("sample", "token", "d_mlp"),
    "hook_post": ("sample", "token", "d_mlp"),
}
"""Last component of a TransformerLens hook name → the axis names of its activation."""


def layer_sites(n_layers: int) -> list[str]:
    """The L+1 residual sites of a model with ``n_layers`` = L blocks, indexed by layer.

    ``layer_sites(2) == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post",
    "blocks.1.hook_resid_post"]``: entry l is the residual stream after layer l.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{k}.hook_resid_post" for k in range(n_layers)]


def layer_of_site(name: str) -> int | None:
    """Layer index l of a layer site (inverse of :func:`layer_sites`); None for other sites."""
    if name == "blocks.0.hook_resid_pre":
        return 0
    match = re.fullmatch(r"blocks\.(\d+)\.hook_resid_post", name)
    return int(match.group(1)) + 1 if match else None


def block_index(name: str) -> int | None:
    """Block number of a ``blocks.{i}.…`` hook name; None for hooks outside the blocks."""
    match = _BLOCK.match(name)
    return int(match.group(1)) if match else None


def count_blocks(hook_names: Iterable[str]) -> int:
    """Number of blocks L implied by hook names (1 + the largest block index; 0 if none)."""
    indices = [i for i in map(block_index, hook_names) if i is not None]
    return max(indices) + 1 if indices else 0


def axis_names(name: str, ndim: int) -> tuple[str, ...]:
    """Axis names of the activation at hook ``name`` with ``ndim`` axes (batch included).

    Known TransformerLens hooks get their documented axes (resid: sample, token, d_model;
    pattern: sample, head, query, key; ...); anything else ``("sample", "dim_1", ...)``.
    """
    known = AXES_BY_HOOK.get(name.rsplit(".", 1)[-1])
    if known is not None and len(known) == ndim:
        return known
    return ("sample", *(f"dim_{i}" for i in range(1, ndim)))


def _split_spec(sites: str | Sequence[str]) -> list[str]:
    tokens = sites.split(",") if isinstance(sites, str) else list(sites)
    tokens = [t.strip() for t in tokens if t.strip()]
    if not tokens:
        raise UnknownSiteError(f"no hook sites requested (got {sites!r}); {_valid_help()}")
    return tokens


def _valid_help(valid: Sequence[str] = ()) -> str:
    text = f"use a preset {sorted(PRESET_PATTERNS)}, '{REGEX_PREFIX}<regex>' or hook names"
    return f"{text}; valid hook names: {list(valid)}" if valid else text


def _match(patterns: Sequence[str], valid: Sequence[str]) -> list[str]:
    compiled = [re.compile(p) for p in patterns]
    return [name for name in valid if any(c.search(name) for c in compiled)]


def check_site_spec(sites: str | Sequence[str]) -> None:
    """Refuse, without a model, a site spec no model could resolve: a token that is not a
    preset, a valid ``re:<regex>`` or a hook name (a dotted name ending in ``hook_...``)
    raises :class:`UnknownSiteError`. :func:`resolve_sites` still checks the names
    against the model."""
    if not isinstance(sites, str | Sequence):
        raise UnknownSiteError(f"sites: expected a string or a list of tokens, got {sites!r}")
    for token in _split_spec(sites):
        if token in PRESET_PATTERNS:
            continue
        if token.startswith(REGEX_PREFIX):
            try:
                re.compile(token[len(REGEX_PREFIX) :])
            except re.error as err:
                raise UnknownSiteError(
                    f"hook site regex {token!r} is invalid: {err}; {_valid_help()}"
                ) from None
        elif not _HOOK_NAME.match(token):
            raise UnknownSiteError(f"unknown hook site {token!r}: {_valid_help()}")


def resolve_sites(valid: Iterable[str], sites: str | Sequence[str]) -> list[str]:
    """Hook names selected by ``sites``, in the order of ``valid`` (e.g. ``model.hook_dict``).

    Args:
        valid: every hook name of the model (``model.hook_dict`` or its keys).
        sites: comma-separated string or list of tokens; each token is a preset
            (``residual``, ``attention``, ``layers``, ``all``), ``re:<regex>`` (every hook
            whose name contains a match) or an exact hook name. A preset may select nothing
            (``attention`` on a model that hides its attention weights); a regex or a name
            must select something, and so must the whole spec.

    Raises:
        UnknownSiteError: a token is not a preset or valid name, or selects nothing; the
            message lists the valid names.
    """
    valid = list(valid)
    chosen: set[str] = set()
    for token in _split_spec(sites):
        if token in PRESET_PATTERNS:
            found = _match(PRESET_PATTERNS[token], valid)
            what = f"preset {token!r}"
        elif token.startswith(REGEX_PREFIX):
            try:
                found = _match([token[len(REGEX_PREFIX) :]], valid)
            except re.error as err:
                raise UnknownSiteError(
                    f"hook site regex {token!r} is invalid: {err}; {_valid_help()}"
                ) from None
            what = f"regex {token!r}"
        elif token in valid:
            found, what = [token], token
        else:
            raise UnknownSiteError(f"unknown hook site {token!r}: {_valid_help(valid)}")
        if not found and token not in PRESET_PATTERNS:
            raise UnknownSiteError(f"{what} selects no hook of this model: {_valid_help(valid)}")
        chosen.update(found)
    if not chosen:
        raise UnknownSiteError(
            f"sites {sites!r} select no hook of this model: {_valid_help(valid)}"
        )
    return [name for name in valid if name in chosen]
