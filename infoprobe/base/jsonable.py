"""JSON-able values: numpy to plain Python, NaN and Inf to None (JSON has no NaN); a
stable hash of a JSON value."""

from __future__ import annotations

import hashlib
import json
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


def json_sha256(value: Any) -> str:
    """Hex SHA-256 of ``value`` as JSON with sorted keys (values JSON cannot hold are
    written with ``str``): equal settings give equal hashes on every machine."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
