"""Where a plain ``torch.nn.Module`` keeps the states infoprobe reads: its site map.

A *site reference* names one tensor inside the user's model by module path (the names of
``model.named_modules()``), with an optional suffix:

* ``layers.0``: the module's output;
* ``layers.0.attn[1]``: element 1 of the module's output (a tuple or list);
* ``layers.0:input``: the module's first positional input (read before it runs).

The site map names three things, ``{l}`` standing for the block index 0..L-1:

* ``embed``: the residual stream entering block 0, ``[b, T+1, E]`` (layer 0);
* ``blocks``: the residual stream after block ``l``, ``[b, T+1, E]`` (layer l+1);
* ``pattern``: the attention pattern of block ``l``, ``[b, h_l, T+1, T+1]`` (rows sum to 1),
  or None where the model does not expose it (a fused attention kernel).

From Python any of the three may also be a list of references, one per layer, and a
reference may be a :class:`SiteRef` whose ``read`` function picks the tensor from the
module's output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infoprobe.foreign.errors import SiteMapError

_REFERENCE = re.compile(r"^(?P<path>[A-Za-z_][\w.]*|)(?P<suffix>\[\d+\]|:input)?$")
FIELDS = ("embed", "blocks", "pattern")


@dataclass(frozen=True)
class SiteRef:
    """One tensor of the user's model: ``path`` (module path, "" = the model itself), the
    output element ``index`` (None: the whole output) or the module's first ``input``.

    From Python, ``read`` (a function of the module's output returning the tensor, e.g.
    ``lambda out: out.attentions``) may pick it instead of ``index``; such a site can be
    read but not replaced by a hook, and a checkpoint cannot store it."""

    path: str
    index: int | None = None
    input: bool = False
    read: Callable[[Any], Any] | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, text: str | SiteRef, field: str) -> SiteRef:
        if isinstance(text, SiteRef):
            return text
        match = _REFERENCE.match(text) if isinstance(text, str) else None
        if match is None:
            raise SiteMapError(
                f"site map field {field!r}: {text!r} is not a module path such as "
                "'layers.0', 'layers.0.attn[1]' or 'layers.0:input'"
            )
        suffix = match["suffix"] or ""
        index = int(suffix[1:-1]) if suffix.startswith("[") else None
        return cls(match["path"], index, suffix == ":input")

    def __str__(self) -> str:
        if self.read is not None:
            return f"{self.path}→{getattr(self.read, '__name__', 'function')}"
        suffix = ":input" if self.input else "" if self.index is None else f"[{self.index}]"
        return f"{self.path}{suffix}"


def _expand(value: Any, field: str, n_layers: int | None) -> tuple[SiteRef, ...]:
    """A template with ``{l}`` (or a list) as one reference per layer."""
    if isinstance(value, str):
        if "{l}" not in value:
            raise SiteMapError(
                f"site map field {field!r}: {value!r} must contain '{{l}}' (the block index) "
                "or be a list of one reference per block"
            )
        if n_layers is None:
            raise SiteMapError(f"site map field {field!r}: a template needs n_layers")
        return tuple(SiteRef.parse(value.replace("{l}", str(i)), field) for i in range(n_layers))
    if isinstance(value, Sequence) and all(isinstance(v, str | SiteRef) for v in value):
        refs = tuple(SiteRef.parse(v, field) for v in value)
        if n_layers is not None and len(refs) != n_layers:
            raise SiteMapError(
                f"site map field {field!r}: expected one reference per block ({n_layers}), "
                f"got {len(refs)}: {list(value)}"
            )
        return refs
    raise SiteMapError(
        f"site map field {field!r}: expected a template with '{{l}}' or a list of module "
        f"paths, got {value!r}"
    )


@dataclass(frozen=True)
class SiteMap:
    """Where the layer states and attention patterns of a plain module live (module doc).

    Args:
        embed: reference to the residual stream entering block 0 (``"embed"``,
            ``"layers.0:input"``).
        blocks: per block, the reference to its output residual stream (template
            ``"layers.{l}"`` or a list).
        pattern: per block, the reference to its attention pattern (template or list), or
            None: the model hides its attention weights.
        n_layers: L; needed with templates (a list gives its length).
    """

    embed: str | SiteRef
    blocks: str | tuple[str | SiteRef, ...]
    pattern: str | tuple[str | SiteRef, ...] | None = None
    n_layers: int | None = None

    def __post_init__(self) -> None:
        for name in ("blocks", "pattern"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        n = self.n_layers
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise SiteMapError(f"site map field 'n_layers': expected an integer >= 1, got {n!r}")
        SiteRef.parse(self.embed, "embed")
        refs = self.block_refs
        if self.pattern is not None and len(self.pattern_refs) != len(refs):
            raise SiteMapError(
                f"site map: 'pattern' names {len(self.pattern_refs)} blocks, 'blocks' {len(refs)}"
            )

    @property
    def layers(self) -> int:
        """L, the number of blocks."""
        return len(self.block_refs)

    @property
    def embed_ref(self) -> SiteRef:
        return SiteRef.parse(self.embed, "embed")

    @property
    def block_refs(self) -> tuple[SiteRef, ...]:
        return _expand(self.blocks, "blocks", self.n_layers)

    @property
    def pattern_refs(self) -> tuple[SiteRef, ...] | None:
        if self.pattern is None:
            return None
        return _expand(self.pattern, "pattern", self.n_layers or len(self.block_refs))

    def to_dict(self) -> dict[str, Any]:
        refs = [self.embed_ref, *self.block_refs, *(self.pattern_refs or ())]
        functions = [str(r) for r in refs if r.read is not None]
        if functions:
            raise SiteMapError(
                f"site map: {functions} are read by Python functions, which a checkpoint "
                "cannot store; name module paths (with [i] or :input) instead"
            )

        def plain(v):
            return [str(r) for r in v] if isinstance(v, tuple) else str(v) if v else v

        return {
            "embed": self.embed,
            "blocks": plain(self.blocks),
            "pattern": plain(self.pattern),
            "n_layers": self.layers,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "site map") -> SiteMap:
        if not isinstance(d, Mapping):
            raise SiteMapError(f"{where}: expected an object with {FIELDS}, got {d!r}")
        unknown = sorted(set(d) - {*FIELDS, "n_layers"})
        missing = [f for f in ("embed", "blocks") if f not in d]
        if unknown or missing:
            raise SiteMapError(
                f"{where}: unknown field(s) {unknown}, missing field(s) {missing}; "
                f"expected {list(FIELDS)} and optionally 'n_layers'"
            )
        return cls(d["embed"], d["blocks"], d.get("pattern"), d.get("n_layers"))
