"""The architecture facts the engine needs: heads per layer, widths, positional encoding."""

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ArchitectureError


@dataclass(frozen=True)
class Architecture:
    """heads: (h_1, ..., h_L); d_model: E; d_heads: n per layer; positions: whether the
    model has a positional encoding (position-specific aggregation needs one)."""

    heads: tuple[int, ...]
    d_model: int
    d_heads: tuple[int, ...]
    positions: bool

    @property
    def n_layers(self) -> int:
        return len(self.heads)

    def with_heads(self, heads: tuple[int, ...]) -> "Architecture":
        """The same widths with other head counts (n = E / h where it was derived)."""
        return Architecture(
            heads=heads,
            d_model=self.d_model,
            d_heads=tuple(max(1, self.d_model // h) for h in heads),
            positions=self.positions,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "heads": list(self.heads),
            "d_model": self.d_model,
            "d_heads": list(self.d_heads),
            "positions": self.positions,
        }


def _positive_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ArchitectureError(
            f"architecture field '{field}' must be an integer >= 1, got {value!r}"
        )
    return int(value)


def as_architecture(
    arch: Any,
    *,
    d_model: int | None = None,
    d_head: int | None = None,
    pos_encoding: str | bool | None = None,
    n_layers: int | None = None,
) -> Architecture:
    """Normalise ``arch`` into an :class:`Architecture`.

    ``arch`` is an ``infoprobe.model.ModelConfig`` (anything with ``heads``, ``d_model``,
    ``pos_encoding`` and ``d_head_of(l)``), an :class:`Architecture`, or a plain sequence of
    heads per layer; for a sequence, ``d_model`` defaults to 32, ``d_head`` to E / h and
    ``pos_encoding`` to none (``"learned"``/``"sinusoidal"``/True mean present).
    ``n_layers``, if given, must equal the number of head counts.
    """
    if isinstance(arch, Architecture):
        result = arch
    elif hasattr(arch, "heads") and hasattr(arch, "d_model"):
        heads = tuple(_positive_int(h, "heads") for h in arch.heads)
        result = Architecture(
            heads=heads,
            d_model=_positive_int(arch.d_model, "d_model"),
            d_heads=tuple(_positive_int(arch.d_head_of(b), "d_head") for b in range(len(heads))),
            positions=str(getattr(arch, "pos_encoding", "none")) != "none",
        )
    elif isinstance(arch, Sequence) and not isinstance(arch, str):
        if len(arch) == 0:
            raise ArchitectureError("architecture field 'heads' must list >= 1 layer, got []")
        heads = tuple(_positive_int(h, "heads") for h in arch)
        width = _positive_int(32 if d_model is None else d_model, "d_model")
        per_head = [d_head if d_head is not None else width // h for h in heads]
        if d_head is None and any(width % h for h in heads):
            raise ArchitectureError(
                f"architecture: d_model E={width} is not divisible by heads {list(heads)}; "
                "choose E = n*h or pass d_head"
            )
        pos = pos_encoding if isinstance(pos_encoding, bool) else (pos_encoding or "none") != "none"
        result = Architecture(
            heads=heads,
            d_model=width,
            d_heads=tuple(_positive_int(n, "d_head") for n in per_head),
            positions=pos,
        )
    else:
        raise ArchitectureError(
            f"architecture must be a ModelConfig or a sequence of heads per layer, got {arch!r}"
        )
    if n_layers is not None and n_layers != result.n_layers:
        raise ArchitectureError(
            f"architecture field 'heads' lists {result.n_layers} layer(s) {list(result.heads)} "
            f"but n_layers={n_layers}; give one head count per layer"
        )
    return result
