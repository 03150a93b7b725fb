"""The InfoFlow cost law: each operation's exponent alpha (parameters ~ eps^-alpha) as a
function of the sequence length T.

Every law here is affine in T, so a program's exponent (the max over its operations) is
a max of affine functions: :class:`Exponent`. It is bounded in T iff no term has a
positive slope; that is the verdict rule (efficient iff bounded).
"""

from collections.abc import Callable, Mapping, Sequence
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


SEPARATION_SEARCH = 100_000
"""Largest T searched for the first length at which two exponents differ."""


def alpha_text(exponent: Exponent, T: int, E: int | None = None) -> str:
    """InfoFlow's exponent evaluated at the run's own size, e.g. ``"α = 1 at T=16, E=32"``."""
    at = f"T={T}" if E is None else f"T={T}, E={E}"
    return f"α = {exponent(T):.3g} at {at}"


def separation_length(exponents: Sequence[Exponent], T: int) -> int | None:
    """The smallest integer T' > T at which the exponents are not all equal; None if they
    agree at every T' up to :data:`SEPARATION_SEARCH` (they never separate)."""
    laws = list(exponents)
    for t in range(T + 1, SEPARATION_SEARCH + 1):
        if len({round(e(t), 9) for e in laws}) > 1:
            return t
    return None


def rate_comparison(named: Mapping[str, Exponent], T: int) -> str:
    """In words, whether the law predicts the same rate for these architectures at length
    T, e.g. ``"at T=16 the law predicts the same rate for (2,2) and (1,2) (α = 1); it
    separates for T > 16"`` or ``"at T=32 the law predicts different rates: (2,2) α = 1,
    (1,2) α = 3"``."""
    names = list(named)
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    values = {name: e(T) for name, e in named.items()}
    if len({round(v, 9) for v in values.values()}) > 1:
        each = ", ".join(f"{name} α = {v:.3g}" for name, v in values.items())
        return f"at T={T} the law predicts different rates: {each}"
    same = f"at T={T} the law predicts the same rate for {listed} (α = {values[names[0]]:.3g})"
    where = separation_length(list(named.values()), T)
    tail = "; it never separates them" if where is None else f"; it separates for T > {where - 1}"
    return same + tail
