"""Strict JSON text for what remat writes: files (sweep rows) and the CLI's ``--json``.

Python's ``json`` writes ``Infinity`` and ``NaN``, which are not JSON (other
parsers refuse them); a sum of costs of 1e300 overflows to infinity. Here a
non-finite number is the string ``"inf"``, ``"-inf"`` or ``"nan"``, which
``float()`` reads back, and any other value JSON lacks is its ``str``.

This module imports nothing of remat_core (the bottom layer).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["json_ready", "dumps", "NON_FINITE"]

#: The strings that stand for non-finite numbers.
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def json_ready(value: Any) -> Any:
    """``value`` with every non-finite float (in nested dicts, lists and tuples) as its string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def dumps(value: Any, indent: int | None = None) -> str:
    """Strict JSON text for ``value``.

    Examples
    --------
    >>> dumps({"objective": float("inf"), "gap": 0.5})
    '{"objective": "inf", "gap": 0.5}'
    """
    return json.dumps(json_ready(value), indent=indent, default=str, allow_nan=False)
