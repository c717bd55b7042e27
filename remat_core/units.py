"""Byte sizes and budgets as users write them: one meaning everywhere.

A budget is either

* a fraction of *activation* memory: a number in ``(0, 1]``, whether written
  ``1``, ``0.5``, ``"0.5"`` or ``"0.5x"`` (the meaning of PyTorch's
  ``activation_memory_budget``: ``1`` keeps every activation, ``0.5``
  half of that memory; ``0``, which leaves nothing for the activations and
  so fits no schedule, is an error naming the least any schedule needs). The budget is then checkpoint-all's peak less
  ``1 - f`` of the activation memory (what checkpoint-all keeps beyond
  parameters, gradients and inputs); where gradients are fixed bytes this is
  ``fixed_bytes + f * (checkpoint-all peak - fixed_bytes)``;
* total device bytes, fixed bytes (parameters, gradients, inputs) included:
  a whole number above 1 (``123456``, ``"123456"``, ``8e9``) or a size with a
  unit (``"8GiB"``, ``"800MB"``, ``"1B"``). Binary units are powers of 1024
  (``KiB``, ``MiB``, ``GiB``, ``TiB``, and the short ``K``, ``M``, ``G``,
  ``T``, ``Ki``, ``Mi``, ``Gi``, ``Ti``: ``8G`` is 8 GiB, as for ``docker
  --memory``); decimal units are powers of 1000 (``KB``, ``MB``, ``GB``,
  ``TB``: ``8GB`` is 8e9 bytes, as disk and GPU vendors write it).

So a bare ``1`` is all of activation memory, not one byte (write ``"1B"``);
a number above 1 that is not whole (``1.5``) is neither, and an error; so are
zero (``0``, ``"0x"``, ``"0B"``), negative numbers, infinity and NaN.

The Python API, the adapters, the CLI and the demo all go through
:func:`resolve_budget`; errors, reprs, plot titles and the CLI print sizes with
:func:`format_bytes`. :func:`remat_core.solve` itself takes bytes only
(``budget_bytes``).
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

__all__ = [
    "parse_bytes", "format_bytes", "resolve_budget", "activation_bytes", "budget_fraction",
    "min_budget_bytes",
]

# binary units first so that "GiB" is not read as "B" after "Gi"
_UNITS = {
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "b": 1, "": 1,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_NUMBER_RE = re.compile(r"^\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*(x?)\s*$")
# the largest size we accept: sums of a few of these still fit in int64
_MAX_BYTES = 2**62
#: Every form a budget takes, for error messages (the module docstring has the details).
BUDGET_FORMS = ("a fraction of activation memory in (0, 1] (0.5 or '0.5x'), a whole number of bytes above 1 "
                "(123456) or a size with a unit ('8GiB', '800MB', '1B')")


def parse_bytes(value: Any, argument: str = "size") -> int:
    """Bytes from an ``int`` or a size string (``"8GiB"``, ``"800MB"``, ``"1.5 GiB"``, ``"4096"``).

    Binary units (KiB, MiB, GiB, TiB, and the short K, M, G, T) are powers of
    1024; decimal units (KB, MB, GB, TB) powers of 1000; case is ignored.

    Raises
    ------
    TypeError, ValueError
        Naming ``argument``: not a size, not finite, below 1 byte or above 2**62.

    Examples
    --------
    >>> parse_bytes("8GiB"), parse_bytes("800MB"), parse_bytes(4096), parse_bytes("1.5 KiB")
    (8589934592, 800000000, 4096, 1536)
    """
    if isinstance(value, bool):
        raise TypeError(f"`{argument}` must be bytes (an int or a size such as '8GiB'); got {value!r}")
    if isinstance(value, numbers.Integral):
        n = int(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"`{argument}` must be a size such as '8GiB', '800MB' or '4096'; got {value!r}")
        x = float(m.group(1)) * _UNITS[unit]
        if not math.isfinite(x) or x > _MAX_BYTES:
            raise ValueError(f"`{argument}` must be at most 4 EiB; got {value!r}")
        n = int(x)
    else:
        raise TypeError(f"`{argument}` must be bytes (an int or a size such as '8GiB'); got {value!r}")
    if n < 1:
        raise ValueError(f"`{argument}` must be at least 1 byte; got {value!r}")
    if n > _MAX_BYTES:
        raise ValueError(f"`{argument}` must be at most 4 EiB; got {value!r}")
    return n


def format_bytes(n: float | None, digits: int = 3) -> str:
    """A byte count for people: ``"1.50 GiB"``, ``"12.0 MiB"``, ``"512 B"``; ``None`` is ``"-"``.

    ``digits`` is the number of significant digits.

    Examples
    --------
    >>> format_bytes(3 * 2**29), format_bytes(12 * 2**20), format_bytes(512), format_bytes(None)
    ('1.50 GiB', '12.0 MiB', '512 B', '-')
    """
    if n is None:
        return "-"
    x = float(n)
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(x) >= scale:
            v = x / scale
            decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
            return f"{v:.{decimals}f} {unit}"
    return f"{int(round(x))} B"


def _peaks(graph) -> tuple[int, int]:
    """``(checkpoint-all peak, activation bytes)`` of ``graph``.

    Activation memory is the most checkpoint-all keeps beyond the fixed bytes
    and the parameter gradients. An adapter that models parameter gradients as
    nodes (allocated where the backward computes them, as remat_torch does)
    names them in ``graph.meta["gradient_nodes"]``; their bytes are left out of
    the activation measure, so a fraction means the same whichever way the
    gradients are modelled.
    """
    import numpy as np

    from .simulate import checkpoint_all_peak_bytes

    peak = checkpoint_all_peak_bytes(graph)
    grads = graph.meta.get("gradient_nodes") or ()
    if not grads:
        return int(peak), int(peak - graph.fixed_bytes)
    mem = np.array(graph.memory_bytes, dtype=np.int64)
    mem[[graph.index(name) for name in grads]] = 0
    return int(peak), int(checkpoint_all_peak_bytes(graph.replace(memory_bytes=mem)) - graph.fixed_bytes)


def activation_bytes(graph) -> int:
    """Activation memory of ``graph``: what checkpoint-all keeps beyond parameters, gradients and inputs.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> activation_bytes(linear_graph(4))
    6
    """
    return _peaks(graph)[1]


def budget_fraction(graph, budget_bytes: int) -> float:
    """``budget_bytes`` as a fraction of activation memory (the inverse of :func:`resolve_budget`).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> budget_fraction(linear_graph(4), 3)
    0.5
    """
    peak, act = _peaks(graph)
    return 1.0 - (peak - budget_bytes) / act if act > 0 else float("inf")


def _as_fraction(budget: Any, argument: str) -> float | None:
    """The activation fraction ``budget`` stands for, or ``None`` when it is a byte count (see the module).

    Raises
    ------
    ValueError
        Naming ``argument``: a number that is neither a fraction in (0, 1] nor a whole number of bytes.
    """
    if isinstance(budget, bool):
        return None   # parse_bytes refuses it
    if isinstance(budget, numbers.Real):
        x, text, suffix = float(budget), repr(budget), ""
    elif isinstance(budget, str) and _NUMBER_RE.match(budget):
        m = _NUMBER_RE.match(budget)
        x, text, suffix = float(m.group(1)), repr(budget), m.group(2)
    else:
        return None   # a size with a unit, or not a budget at all: parse_bytes says which
    if not math.isfinite(x):
        raise ValueError(f"`{argument}` must be finite; got {text} (1.0 is all of activation memory)")
    if 0.0 <= x <= 1.0:
        return x
    if suffix:
        raise ValueError(f"`{argument}` as a fraction of activation memory must be in (0, 1]; got {text}")
    if x < 0:
        raise ValueError(f"`{argument}` must be above 0: {BUDGET_FORMS}; got {text}")
    if not x.is_integer():
        raise ValueError(f"`{argument}` must be a fraction of activation memory in (0, 1] or a whole number of "
                         f"bytes (or a size such as '8GiB'); got {text}")
    return None


def _whole_bytes(budget: Any) -> Any:
    """A number of bytes written as a float or a bare number string (``8e9``, ``"123456"``) as an ``int``."""
    if isinstance(budget, numbers.Real) and not isinstance(budget, (bool, numbers.Integral)):
        return int(budget)
    if isinstance(budget, str):
        m = _NUMBER_RE.match(budget)
        if m and not m.group(2):
            x = float(m.group(1))
            if x > _MAX_BYTES:
                raise ValueError(f"must be at most 4 EiB; got {budget!r}")
            return int(x)
    return budget


def resolve_budget(graph, budget: Any, argument: str = "budget") -> int:
    """Total device bytes for ``budget`` on ``graph`` (see the module docstring for the forms).

    A number in ``(0, 1]`` (``1``, ``0.5``, ``"0.5x"``) is a fraction of
    activation memory; a whole number above 1 or a size with a unit is total
    bytes.

    Raises
    ------
    TypeError, ValueError
        Naming ``argument`` (and every accepted form): neither a fraction nor
        bytes (``1.5``, ``-1``, ``inf``, ``"0B"``, ``"50%"``), zero (``0``,
        ``"0x"``: the message names the least any schedule needs), or
        ``graph`` has no activation memory to take a fraction of.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(4)          # fixed 0 bytes, checkpoint-all peak 6 bytes
    >>> resolve_budget(g, 1), resolve_budget(g, 0.5), resolve_budget(g, "0.5x"), resolve_budget(g, "1KiB")
    (6, 3, 3, 1024)
    >>> resolve_budget(g, 4096), resolve_budget(g, "1B")
    (4096, 1)
    """
    f = _as_fraction(budget, argument)
    if f is None:
        try:
            return parse_bytes(_whole_bytes(budget), argument)
        except ValueError as exc:
            if str(exc).startswith("must be"):
                raise ValueError(f"`{argument}` {exc}") from None
            if "must be a size such as" in str(exc):   # neither form: name both, not sizes alone ("50%")
                raise ValueError(f"`{argument}` must be {BUDGET_FORMS}; got {budget!r}") from None
            raise
    if f == 0.0:   # "0", "0.0", "0x", "-0": nothing left for the activations (it was clamped to 1 byte)
        need, node = min_budget_bytes(graph)
        raise ValueError(f"`{argument}` must be above 0; got {budget!r}: no schedule fits without memory for the "
                         f"activations (computing {node!r} alone needs {format_bytes(need)}, "
                         f"{budget_fraction(graph, need):.2f} of activation memory)")
    peak, act = _peaks(graph)
    return max(1, int(peak - (1.0 - f) * act))


def min_budget_bytes(graph) -> tuple[int, str]:
    """A budget below which no schedule exists, and the node that sets it.

    Computing a node needs its inputs, its output and its workspace resident at
    once, on top of the fixed bytes; the largest such need over the nodes is a
    lower bound on every schedule's peak (not always attained).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> min_budget_bytes(linear_graph(4))
    (3, 'g3')
    """
    if graph.n == 0:
        return int(graph.fixed_bytes), ""
    need = graph.node_need_bytes()
    k = int(need.argmax())
    return int(graph.fixed_bytes + need[k]), graph.node(k).name
