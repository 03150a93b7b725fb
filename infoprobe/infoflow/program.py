"""Programs: for each layer, the operation every head performs for each query group.

A head acts on all query tokens at once, but CLS has its own embedding, so a head may do
one operation for the data tokens and another for CLS (:class:`Head`). Operations:
:class:`Retrieve` (max or k-th retrieval for one stage of one comparison),
:class:`AggregateAll` (global aggregation), :class:`AggregatePositions` (position-specific
aggregation over a fixed set P). The residual is always on. FFN decode steps change no
set and are listed as :class:`Decode` entries, charged by the size of what they couple.
"""

from dataclasses import dataclass, field

from infoprobe.tasks import ComparisonStructure

from .arch import Architecture
from .cost import RETRIEVAL_ALPHA, Affine, Exponent, KthLaw, decode_alpha
from .errors import ProgramError


@dataclass(frozen=True)
class Retrieve:
    """Max (rank 1) or k-th (rank k >= 2) retrieval: stage ``stage`` of comparison
    ``comparison`` (indices into the task's structure)."""

    comparison: int
    stage: int
    rank: int = 1


@dataclass(frozen=True)
class AggregateAll:
    """Global aggregation: I(q, l) = I(q, l-1) | union over all tokens s of I(s, l-1)."""


@dataclass(frozen=True)
class AggregatePositions:
    """Position-specific aggregation: I(q, l) = I(q, l-1) | union_{s in P} I(s, l-1)."""

    positions: tuple[int, ...]


Operation = Retrieve | AggregateAll | AggregatePositions


@dataclass(frozen=True)
class Head:
    """What one head does for the data-token queries and for the CLS query (None: idle)."""

    data: Operation | None = None
    cls: Operation | None = None

    def op(self, group: str) -> Operation | None:
        return self.data if group == "data" else self.cls


@dataclass(frozen=True)
class Decode:
    """An FFN/readout decode at ``group`` tokens after layer ``layer`` (L = the readout),
    coupling ``coupled`` input tokens (affine in T: all T tokens after an aggregation)."""

    layer: int
    group: str
    coupled: Affine
    what: str


@dataclass(frozen=True)
class Program:
    """layers[l-1] = the heads of layer l (1-based layer l = block l-1); decodes;
    ``aggregated`` = indices of comparisons resolved by global aggregation."""

    layers: tuple[tuple[Head, ...], ...]
    decodes: tuple[Decode, ...]
    aggregated: tuple[int, ...]
    structure: ComparisonStructure = field(compare=False, repr=False)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def check(self, arch: Architecture) -> None:
        """Raise ProgramError if the program does not fit ``arch``."""
        if self.n_layers != arch.n_layers:
            raise ProgramError(
                f"program has {self.n_layers} layer(s) but the architecture has "
                f"{arch.n_layers} (heads {list(arch.heads)})"
            )
        for layer, (heads, budget) in enumerate(zip(self.layers, arch.heads, strict=True), 1):
            if len(heads) > budget:
                raise ProgramError(
                    f"program uses {len(heads)} heads at layer {layer} but the architecture "
                    f"field 'heads' gives that layer {budget}"
                )
            for head in heads:
                for group in ("data", "cls"):
                    self._check_op(head.op(group), group, layer, arch)

    def _check_op(self, op: Operation | None, group: str, layer: int, arch: Architecture) -> None:
        if isinstance(op, AggregatePositions) and not arch.positions:
            raise ProgramError(
                f"layer {layer}: position-specific aggregation needs a positional encoding "
                "(architecture field 'pos_encoding' is none)"
            )
        if isinstance(op, Retrieve):
            comparisons = self.structure.comparisons
            if not 0 <= op.comparison < len(comparisons) or not (
                0 <= op.stage < len(comparisons[op.comparison].stages)
            ):
                raise ProgramError(f"layer {layer}: {op} names no stage of the task's structure")
            stage = comparisons[op.comparison].stages[op.stage]
            if stage.group != group:
                raise ProgramError(
                    f"layer {layer}: stage {op.stage + 1} of {comparisons[op.comparison].label} "
                    f"runs at '{stage.group}' queries but is placed in the '{group}' slot"
                )

    # ---- cost -----------------------------------------------------------------------
    def exponent(self, arch: Architecture, d: int, kth_law: KthLaw) -> Exponent:
        """alpha(T) = max over operations (a floor of 0: decodes count only when positive)."""
        terms: list[tuple[str, Affine]] = [("nothing to pay", Affine(0.0))]
        for layer, heads in enumerate(self.layers, 1):
            for head in heads:
                for group in ("data", "cls"):
                    op = head.op(group)
                    if isinstance(op, Retrieve) and op.rank > 1:
                        law = kth_law(op.rank, arch.d_heads[layer - 1])
                        terms.append((f"layer {layer}: {op_kind(op)}", law))
                    elif op is not None:
                        terms.append((f"layer {layer}: {op_kind(op)}", Affine(RETRIEVAL_ALPHA)))
        for dec in self.decodes:
            terms.append((f"decode of {dec.what}", decode_alpha(dec.coupled, d, arch.d_model)))
        return Exponent(tuple(terms))

    # ---- words ----------------------------------------------------------------------
    def describe_op(self, op: Operation | None) -> str:
        if op is None:
            return "idle"
        if isinstance(op, AggregateAll):
            return "global aggregation over all tokens"
        if isinstance(op, AggregatePositions):
            return f"position-specific aggregation over positions {list(op.positions)}"
        comparison = self.structure.comparisons[op.comparison]
        stage = comparison.stages[op.stage]
        kind = op_kind(op)
        return f"{stage.description} [{comparison.label}, stage {op.stage + 1}, {kind}]"

    def describe(self, arch: Architecture | None = None) -> str:
        """The program layer by layer in words: layers 1-based as in the paper (layer k is
        block k-1), heads 0-based within a layer as in TransformerLens and the reports."""
        lines = []
        for layer, heads in enumerate(self.layers, 1):
            budget = f" of {arch.heads[layer - 1]}" if arch is not None else ""
            lines.append(f"layer {layer} (block {layer - 1}), {len(heads)} head(s){budget} used:")
            for i, head in enumerate(heads):
                lines.append(f"  head {i}: data tokens: {self.describe_op(head.data)}")
                lines.append(f"          CLS: {self.describe_op(head.cls)}")
        for dec in self.decodes:
            where = "readout" if dec.layer == self.n_layers else f"FFN after layer {dec.layer}"
            lines.append(f"{where}: {dec.group} decodes {dec.what} (couples {dec.coupled} tokens)")
        return "\n".join(lines)


def op_kind(op: Operation) -> str:
    if isinstance(op, AggregateAll):
        return "global aggregation"
    if isinstance(op, AggregatePositions):
        return "position-specific aggregation"
    return "max retrieval" if op.rank == 1 else f"k-th retrieval (k={op.rank})"
