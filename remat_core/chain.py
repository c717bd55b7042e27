"""Recognize chain training graphs (the shape the chain-only methods need).

A *chain training graph* with ``n`` forward layers has ``2n + 1`` nodes in this
topological order:

* forward nodes ``f_0 .. f_{n-1}`` at indices ``0 .. n-1``: ``f_0`` reads
  nothing (the network input is part of ``fixed_bytes``), ``f_j`` reads
  ``f_{j-1}``;
* the loss at index ``n``, reading ``f_{n-1}``;
* backward nodes ``b_{n-1} .. b_0`` at indices ``n+1 .. 2n`` (``b_j`` at
  ``2n - j``): ``b_j`` reads the previous backward node (the loss for
  ``b_{n-1}``), the forward value ``f_j`` and optionally ``f_{j-1}``.

Nodes ``0..n`` must have ``is_backward`` false and nodes ``n+1..2n`` true.
Both :func:`remat_core.zoo.linear_graph` (``b_j`` reads ``f_j``) and
:func:`remat_core.zoo.training_graph` of a chain (``grad/f_j`` reads
``f_{j-1}`` and ``f_j``) have this shape.

``chen-sqrtn``, ``chen-greedy``, ``griewank-logn`` and ``rotor`` need it; on any
other graph they raise :class:`~remat_core.errors.GraphValidationError` naming
the method and the DAG variant to use instead (``linearized-*`` / ``ap-*``).
There is no silent fallback: a user asking for REVOLVE gets REVOLVE or an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import GraphValidationError
from .graph import Graph

__all__ = ["ChainInfo", "is_chain", "as_chain", "chain_reason"]

_ALTERNATIVES = {
    "chen-sqrtn": "'linearized-sqrtn' or 'ap-sqrtn'",
    "chen-greedy": "'linearized-greedy' or 'ap-greedy'",
    "griewank-logn": "'linearized-sqrtn', 'linearized-greedy' or 'ilp'",
    "rotor": "'linearized-greedy', 'ap-greedy' or 'ilp'",
}


@dataclass(frozen=True)
class ChainInfo:
    """Where the parts of a chain training graph are.

    Attributes
    ----------
    n_forward : int
        Number of forward layers ``n``.
    forward : numpy.ndarray
        Index of ``f_j`` (``forward[j] == j``).
    loss : int
        Index of the loss (``n``).
    backward : numpy.ndarray
        Index of ``b_j`` (``backward[j] == 2n - j``).
    reads_input : numpy.ndarray
        ``reads_input[j]``: whether ``b_j`` also reads ``f_{j-1}`` (always
        false for ``j = 0``).
    """

    n_forward: int
    forward: np.ndarray
    loss: int
    backward: np.ndarray
    reads_input: np.ndarray


def chain_reason(graph: Graph) -> str | None:
    """Why ``graph`` is not a chain training graph, or ``None`` if it is one.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph, random_training_graph
    >>> chain_reason(linear_graph(3)) is None
    True
    >>> chain_reason(random_training_graph(4, seed=0)) is not None
    True
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    N = graph.n
    if N < 3 or N % 2 == 0:
        return f"a chain training graph has 2n+1 nodes with n >= 1; this graph has {N}"
    n = (N - 1) // 2
    bwd = graph.is_backward
    if bwd[: n + 1].any() or not bwd[n + 1:].all():
        return (f"nodes 0..{n} must be forward (the layers and the loss) and nodes {n + 1}..{N - 1} backward; "
                f"this graph has {int(bwd.sum())} backward nodes"
                + (" (is_backward is all false: the graph does not say which nodes are backward)" if not bwd.any() else ""))
    deps = graph.deps
    if deps[0]:
        return f"the first forward node {graph.names[0]!r} must have no inputs"
    for j in range(1, n + 1):
        if deps[j] != (j - 1,):
            return f"forward node {graph.names[j]!r} must read exactly the previous node; it reads {list(deps[j])}"
    for j in range(n):
        k = 2 * n - j
        need = {j, k - 1}
        allowed = need | ({j - 1} if j >= 1 else set())
        d = set(deps[k])
        if not need <= d or not d <= allowed:
            return (f"backward node {graph.names[k]!r} must read the previous backward node (or the loss) and "
                    f"forward node {graph.names[j]!r} (optionally {graph.names[j - 1]!r} too); it reads "
                    f"{[graph.names[i] for i in deps[k]]}")
    return None


def is_chain(graph: Graph) -> bool:
    """Whether ``graph`` is a chain training graph (see the module docstring).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> is_chain(linear_graph(4))
    True
    """
    return chain_reason(graph) is None


def as_chain(graph: Graph, method: str | None = None) -> ChainInfo:
    """The :class:`ChainInfo` of a chain training graph.

    Parameters
    ----------
    graph : Graph
    method : str, optional
        The method asking, named in the error message.

    Returns
    -------
    ChainInfo

    Raises
    ------
    GraphValidationError
        If ``graph`` is not a chain training graph; the message says why and,
        for a known ``method``, which DAG method to use instead.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> info = as_chain(linear_graph(2))
    >>> info.n_forward, info.loss, info.backward.tolist()
    (2, 2, [4, 3])
    """
    reason = chain_reason(graph)
    if reason is not None:
        who = f"method {method!r} applies" if method else "this applies"
        alt = _ALTERNATIVES.get(method or "", "'linearized-sqrtn', 'linearized-greedy', 'ap-sqrtn' or 'ap-greedy'")
        raise GraphValidationError(
            f"{who} to chain training graphs only, and graph {graph.name!r} is not one: {reason}. "
            f"For general DAGs use {alt}."
        )
    n = (graph.n - 1) // 2
    reads = np.array([j >= 1 and (j - 1) in graph.deps[2 * n - j] for j in range(n)], dtype=bool)
    return ChainInfo(
        n_forward=n, forward=np.arange(n, dtype=np.int64), loss=n,
        backward=np.array([2 * n - j for j in range(n)], dtype=np.int64), reads_input=reads,
    )
