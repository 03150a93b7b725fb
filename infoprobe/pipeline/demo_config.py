"""The curated demo's settings as plain data (:class:`DemoConfig`), so the command line
reads them without loading what the demo computes with (:mod:`infoprobe.pipeline.demo`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from infoprobe.pipeline.probe_settings import PROBES


@dataclass(frozen=True)
class DemoConfig:
    """The curated demo: intrinsic-dim D=2, T=16, E=32, (2,2) vs (1,2).

    Args:
        steps: training steps per model
        n_cache: samples cached and probed per model
        seeds: seeds per model, trained together; the best is analysed
        probe: the decodability probe family (critic: whether a state holds the sample's
            own x(s) wherever it came from; the linear probe is fitted beside it)
    """

    D: int = 2
    T: int = 16
    d_model: int = 32
    init_gain: float = 0.5
    steps: int = 10_000
    lr: float = 5e-3
    warmup: int = 1000
    batch_size: int = 256
    n_cache: int = 4096
    seeds: tuple[int, ...] = (0,)
    """Seeds trained per model as one batched ensemble; the best (validation NMSE) is
    analysed and every seed is printed."""
    probe: str = field(default="critic", metadata={"cli": {"choices": PROBES}})

    def heads(self) -> dict[str, tuple[int, int]]:
        return {
            f"heads-{self.D}-{self.D}": (self.D, self.D),
            f"heads-{self.D - 1}-{self.D}": (self.D - 1, self.D),
        }
