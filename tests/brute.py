"""Plain-Python references the tests compare against (no numpy, no infoprobe)."""


def first_argmax(values) -> int:
    """Index of the largest value, ties to the lowest index (plain Python)."""
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best
