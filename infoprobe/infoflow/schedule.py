"""Derive programs from a task's comparison structure under an architecture's head budget.

Rules (no task is special-cased; only the declared structure is read):

* Stage j of a retrieval chain goes to the earliest layer after stage j-1's layer with a
  free slot in its query group. Each head has one data slot and one CLS slot per layer.
  Longer chains are placed first.
* A positional comparison takes one CLS slot for position-specific aggregation, if the
  architecture has a positional encoding.
* Whatever cannot be placed (no free slot, too few layers, order >= 3 without a chain, a
  positional comparison without positional encoding, or a k-th retrieval the caller
  chose to avoid) is resolved by global aggregation at CLS; one such head suffices. If no
  CLS slot is free, the last placed comparison with a CLS stage is evicted to make room.
* Decodes: a stage whose score reads more than one input of a chain charges a decode
  coupling that many tokens at the reading tokens before that layer; the readout
  charges the largest set any comparison couples at CLS (all T tokens after an
  aggregation).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from infoprobe.tasks import Comparison, ComparisonStructure

from .arch import Architecture
from .cost import Affine
from .program import AggregateAll, AggregatePositions, Decode, Head, Operation, Program, Retrieve


@dataclass
class _Slots:
    """Operations placed so far, per layer (0-based) and query group, with their owner
    (the comparison index; -1 for the shared global aggregation)."""

    heads: tuple[int, ...]

    def __post_init__(self) -> None:
        self.ops: list[dict[str, list[tuple[int, Operation]]]] = [
            {"data": [], "cls": []} for _ in self.heads
        ]

    def free(self, layer: int, group: str) -> bool:
        return len(self.ops[layer][group]) < self.heads[layer]

    def first_free(self, group: str, after: int = -1) -> int | None:
        return next((la for la in range(after + 1, len(self.heads)) if self.free(la, group)), None)

    def place(self, layer: int, group: str, owner: int, op: Operation) -> None:
        self.ops[layer][group].append((owner, op))

    def remove(self, owner: int) -> None:
        for layer in self.ops:
            for group in layer:
                layer[group] = [(o, op) for o, op in layer[group] if o != owner]

    def heads_of(self, layer: int) -> tuple[Head, ...]:
        data = [op for _, op in self.ops[layer]["data"]]
        cls = [op for _, op in self.ops[layer]["cls"]]
        width = max(len(data), len(cls))
        return tuple(
            Head(data=data[i] if i < len(data) else None, cls=cls[i] if i < len(cls) else None)
            for i in range(width)
        )


def chain_layers(comparison: Comparison, slots: _Slots) -> list[int] | None:
    """Earliest-fit layers (0-based) for each stage of a chain, or None if it cannot fit."""
    layers, after = [], -1
    for stage in comparison.stages:
        layer = slots.first_free(stage.group, after)
        if layer is None:
            return None
        layers.append(layer)
        after = layer
    return layers


def cls_chain_length(comparison: Comparison) -> int:
    """How many input positions the comparison's chain holds at CLS once resolved."""
    if comparison.positions is not None:
        return len(comparison.positions)
    data_len, cls_len = 1, 0
    for stage in comparison.stages:
        if stage.group == "data":
            data_len += data_len
        else:
            cls_len += data_len
    return cls_len


def derive_program(
    structure: ComparisonStructure,
    arch: Architecture,
    *,
    use_retrieval: bool = True,
    use_kth: bool = True,
) -> Program:
    """The program this module's rules give for ``structure`` on ``arch``.

    ``use_retrieval=False`` gives the generic fallback (everything by global aggregation);
    ``use_kth=False`` resolves comparisons with a k-th (rank >= 2) stage by aggregation.
    """
    comps = structure.comparisons
    slots = _Slots(arch.heads)
    placed: dict[int, list[int]] = {}
    aggregated: list[int] = []

    order = sorted(range(len(comps)), key=lambda i: -len(comps[i].stages))
    for i in order:
        comp = comps[i]
        retrievable = comp.stages and (use_kth or all(s.rank == 1 for s in comp.stages))
        if use_retrieval and retrievable:
            layers = chain_layers(comp, slots)
            if layers is not None:
                for j, (stage, layer) in enumerate(zip(comp.stages, layers, strict=True)):
                    slots.place(layer, stage.group, i, Retrieve(i, j, stage.rank))
                placed[i] = layers
                continue
        elif use_retrieval and comp.positions is not None and arch.positions:
            layer = slots.first_free("cls")
            if layer is not None:
                slots.place(layer, "cls", i, AggregatePositions(comp.positions))
                placed[i] = [layer]
                continue
        aggregated.append(i)

    if aggregated:
        layer = slots.first_free("cls")
        if layer is None:  # every CLS slot is taken: evict the last placed comparison
            victim = max(placed, key=lambda i: (placed[i][-1], i))
            slots.remove(victim)
            del placed[victim]
            aggregated.append(victim)
            layer = slots.first_free("cls")
        slots.place(layer, "cls", -1, AggregateAll())

    decodes = list(_chain_decodes(comps, placed))
    decodes.extend(_readout_decode(comps, placed, aggregated, len(arch.heads)))
    return Program(
        layers=tuple(slots.heads_of(la) for la in range(len(arch.heads))),
        decodes=tuple(decodes),
        aggregated=tuple(sorted(aggregated)),
        structure=structure,
    )


def _chain_decodes(comps: Sequence[Comparison], placed: dict[int, list[int]]):
    for i, layers in sorted(placed.items()):
        for stage, layer in zip(comps[i].stages, layers, strict=False):
            reads = max(stage.reads_key, stage.reads_query)
            if reads > 1:
                yield Decode(
                    layer=layer,  # 1-based: the FFN after layer `layer`, before the stage
                    group="data",
                    coupled=Affine(reads),
                    what=f"the {comps[i].label} value its score reads",
                )


def _readout_decode(
    comps: Sequence[Comparison], placed: dict[int, list[int]], aggregated: list[int], L: int
):
    if aggregated:
        labels = ", ".join(comps[i].label for i in sorted(aggregated))
        yield Decode(L, "cls", Affine(0.0, 1.0), f"{labels} from the aggregated state")
    if placed:
        widest = max(placed, key=lambda i: cls_chain_length(comps[i]))
        yield Decode(
            L, "cls", Affine(cls_chain_length(comps[widest])), f"{comps[widest].label} (widest)"
        )
