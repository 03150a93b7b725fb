"""JSON-able values: numpy to plain Python, NaN and Inf to None (JSON has no NaN)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    """numpy → plain Python, NaN/Inf → None (JSON has no NaN); objects with to_dict() → dict."""
    if hasattr(value, "to_dict") and not isinstance(value, np.ndarray | Mapping):
        return jsonable(value.to_dict())
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
