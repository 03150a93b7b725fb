"""The InfoFlow cost law: each operation's exponent alpha (parameters ~ eps^-alpha) as a
function of the sequence length T.

Every law here is affine in T, so a program's exponent (the max over its operations) is
a max of affine functions: :class:`Exponent`. It is bounded in T iff no term has a
positive slope; that is the verdict rule (efficient iff bounded).
"""

from collections.abc import Callable
from dataclasses import dataclass

RETRIEVAL_ALPHA = 1.0  # max retrieval, position-specific and global aggregation: O(1) eps^-1


@dataclass(frozen=True)
class Affine:
    """alpha(T) = offset + slope * T."""

    offset: float
    slope: float = 0.0

    def __call__(self, T: float) -> float:
        return self.offset + self.slope * T

    def __str__(self) -> str:
        if self.slope == 0:
            return f"{self.offset:.3g}"
        sign = "-" if self.offset < 0 else "+"
        tail = f" {sign} {abs(self.offset):.3g}" if self.offset else ""
        head = "T" if self.slope == 1 else f"{self.slope:.3g}*T"
        return f"{head}{tail}"


@dataclass(frozen=True)
class Exponent:
    """A program's exponent: alpha(T) = max over its operations' terms (label, Affine).

    Call it with T to evaluate. ``grows`` is True when alpha is unbounded in T.
    """

    terms: tuple[tuple[str, Affine], ...]

    def __call__(self, T: float) -> float:
        return max((a(T) for _, a in self.terms), default=0.0)

    @property
    def slope(self) -> float:
        """Asymptotic growth rate d alpha / dT."""
        return max((a.slope for _, a in self.terms), default=0.0)

    @property
    def grows(self) -> bool:
        return self.slope > 0

    def dominant(self, T: float) -> str:
        """Label of the term attaining the max at T (the bottleneck operation)."""
        return max(self.terms, key=lambda term: (term[1].slope > 0, term[1](T)))[0]

    def __str__(self) -> str:
        """E.g. ``1`` or ``max(1, 0.0625*T - 1)`` (dominated constant terms dropped)."""
        constant = max((a.offset for _, a in self.terms if a.slope == 0), default=0.0)
        growing = sorted({str(a) for _, a in self.terms if a.slope != 0})
        return f"max({', '.join([f'{constant:.3g}', *growing])})" if growing else f"{constant:.3g}"

    def sort_key(self, T: float) -> tuple[float, float]:
        """Order programs: bounded before growing, then slower growth, then value at T."""
        return (self.slope, self(T))


KthLaw = Callable[[int, int], Affine]


def kth_law_tail(k: int, n: int) -> Affine:
    """k-th retrieval (Theorem 2), default form: alpha = (T - k - 1) / (n + 1).

    Grows linearly with T: the softmax must separate the k-1 larger keys from the T - k
    smaller ones. ``n`` is the head dimension.
    """
    return Affine(offset=-(k + 1) / (n + 1), slope=1.0 / (n + 1))


def kth_law_rank(k: int, n: int) -> Affine:
    """k-th retrieval, the paper's other statement: alpha = (k - 1) / n (constant in T)."""
    return Affine(offset=(k - 1) / n)


KTH_LAWS: dict[str, KthLaw] = {"tail": kth_law_tail, "rank": kth_law_rank}
DEFAULT_KTH_LAW = "tail"


def decode_alpha(coupled: Affine, d: int, E: int) -> Affine:
    """Decoding a function of a coupled set of ``coupled`` tokens (Theorem 3):
    alpha = T0 * d / E - 1, with T0 possibly growing with T (``coupled`` is affine in T).
    """
    return Affine(offset=coupled.offset * d / E - 1.0, slope=coupled.slope * d / E)
