"""Graph generators (no framework needed)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import GraphValidationError
from ..graph import Graph

__all__ = ["linear_graph", "random_layered_dag", "training_graph", "random_training_graph"]


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}; got {value!r}")
    return int(value)


def linear_graph(n_forward: int, cost: Any = 1.0, memory_bytes: Any = 1, fixed_bytes: int = 0) -> Graph:
    """The paper's linear training graph with ``2 * n_forward + 1`` nodes.

    A chain ``0 -> 1 -> ... -> 2n``: nodes ``0..n-1`` are forward layers, node
    ``n`` is the loss and node ``2n - i`` is the gradient of forward node ``i``,
    which also reads node ``i`` (edge ``i -> 2n - i``).

    Parameters
    ----------
    n_forward : int
        Number of forward layers, ``>= 1``.
    cost, memory_bytes : scalar or sequence of length ``2 * n_forward + 1``
        Per-node cost and size (unit by default).
    fixed_bytes : int

    Examples
    --------
    >>> g = linear_graph(2)
    >>> g.names
    ('f0', 'f1', 'loss', 'g1', 'g0')
    >>> g.deps
    ((), (0,), (1,), (1, 2), (0, 3))
    """
    n = _positive_int(n_forward, "n_forward")
    total = 2 * n + 1
    deps: list[list[int]] = [[]] + [[k - 1] for k in range(1, total)]
    for i in range(n):
        deps[2 * n - i].append(i)
    names = [f"f{i}" for i in range(n)] + ["loss"] + [f"g{n - 1 - j}" for j in range(n)]
    return Graph.from_arrays(
        deps, cost=cost, memory_bytes=memory_bytes, is_backward=[k > n for k in range(total)],
        names=names, fixed_bytes=fixed_bytes, name=f"linear-{n}",
        meta={"kind": "linear", "n_forward": n, "loss": n,
              "grad_of": {f"g{i}": f"f{i}" for i in range(n)}},
    )


def random_layered_dag(
    n_layers: int,
    max_width: int = 3,
    seed: int = 0,
    skip_prob: float = 0.2,
    random_costs: bool = True,
) -> Graph:
    """A seeded random forward DAG made of layers of 1..``max_width`` nodes.

    Every node reads one or two nodes of the previous layer and, with
    probability ``skip_prob``, one node of an earlier layer (a skip
    connection). Costs and sizes are random integers in 1..10 when
    ``random_costs`` (else 1).

    Examples
    --------
    >>> g = random_layered_dag(4, seed=1)
    >>> g == random_layered_dag(4, seed=1)
    True
    """
    n_layers = _positive_int(n_layers, "n_layers")
    max_width = _positive_int(max_width, "max_width")
    if not 0.0 <= float(skip_prob) <= 1.0:
        raise ValueError(f"`skip_prob` must be in [0, 1]; got {skip_prob!r}")
    rng = np.random.default_rng(seed)
    layers: list[list[int]] = []
    deps: list[list[int]] = []
    for layer in range(n_layers):
        width = int(rng.integers(1, max_width + 1)) if layer else 1
        ids = []
        for _ in range(width):
            k = len(deps)
            d: set[int] = set()
            if layers:
                prev = layers[-1]
                d.update(int(x) for x in rng.choice(prev, size=min(len(prev), int(rng.integers(1, 3))), replace=False))
                if len(layers) > 1 and rng.random() < skip_prob:
                    earlier = [x for lay in layers[:-1] for x in lay]
                    d.add(int(rng.choice(earlier)))
            deps.append(sorted(d))
            ids.append(k)
        layers.append(ids)
    # make every node of the last layers reach the end: join all sinks in one output node
    users = {i for d in deps for i in d}
    sinks = [k for k in range(len(deps)) if k not in users]
    if len(sinks) > 1:
        deps.append(sorted(sinks))
    n = len(deps)
    cost = rng.integers(1, 11, size=n) if random_costs else 1
    mem = rng.integers(1, 11, size=n) if random_costs else 1
    return Graph.from_arrays(deps, cost=cost, memory_bytes=mem, names=[f"v{k}" for k in range(n)],
                             name=f"random-{n_layers}x{max_width}-s{seed}")


def training_graph(
    forward: Graph,
    loss_cost: float = 1.0,
    loss_memory_bytes: int = 1,
    backward_cost_factor: float = 1.0,
) -> Graph:
    """Append a loss and reverse-mode backward nodes to a forward DAG.

    The loss reads every forward node that has no user. The backward node
    ``grad/v`` of forward node ``v`` reads ``v``'s inputs, ``v`` itself and the
    gradients flowing from all users of ``v`` (``grad/u`` for each user ``u``;
    the loss for a node without users). Backward nodes come in reverse
    topological order, have ``v``'s size and ``backward_cost_factor`` times its
    cost. ``fixed_bytes`` and workspace are carried over (backward workspace
    equals forward workspace).

    Raises
    ------
    GraphValidationError
        If ``forward`` already contains backward nodes.

    Examples
    --------
    >>> from remat_core import Graph
    >>> fwd = Graph.from_arrays([[], [0]], names=["a", "b"])
    >>> tg = training_graph(fwd)
    >>> tg.names
    ('a', 'b', 'loss', 'grad/b', 'grad/a')
    >>> [tg.names[i] for i in tg.deps[tg.index("grad/a")]]
    ['a', 'grad/b']
    """
    if not isinstance(forward, Graph):
        raise TypeError(f"`forward` must be a remat_core.Graph; got {type(forward).__name__}")
    if forward.is_backward.any():
        raise GraphValidationError("`forward` already has backward nodes; pass a forward-only graph")
    if backward_cost_factor < 0:
        raise ValueError(f"`backward_cost_factor` must be >= 0; got {backward_cost_factor!r}")
    m = forward.n
    if "loss" in forward.names:
        raise GraphValidationError("`forward` already has a node called 'loss'")
    loss = m
    deps: list[list[int]] = [list(d) for d in forward.deps]
    sinks = [v for v in range(m) if not forward.users[v]]
    deps.append(sinks)
    grad = {v: m + 1 + j for j, v in enumerate(range(m - 1, -1, -1))}
    for v in range(m - 1, -1, -1):
        d = set(forward.deps[v]) | {v}
        d.update(grad[u] for u in forward.users[v])
        if not forward.users[v]:
            d.add(loss)
        deps.append(sorted(d))
    rev = list(range(m - 1, -1, -1))
    cost = np.concatenate([forward.cost, [loss_cost], forward.cost[rev] * backward_cost_factor])
    mem = np.concatenate([forward.memory_bytes, [loss_memory_bytes], forward.memory_bytes[rev]])
    ws = np.concatenate([forward.workspace_bytes, [0], forward.workspace_bytes[rev]])
    names = list(forward.names) + ["loss"] + [f"grad/{forward.names[v]}" for v in rev]
    return Graph.from_arrays(
        deps, cost=cost, memory_bytes=mem, workspace_bytes=ws,
        is_backward=[False] * (m + 1) + [True] * m, names=names, fixed_bytes=forward.fixed_bytes,
        name=f"{forward.name or 'graph'}-train",
        meta={**forward.meta, "kind": "training", "n_forward": m, "loss": loss,
              "grad_of": {f"grad/{forward.names[v]}": forward.names[v] for v in range(m)}},
    )


def random_training_graph(n_layers: int, max_width: int = 3, seed: int = 0, **kwargs: Any) -> Graph:
    """:func:`training_graph` of :func:`random_layered_dag` (keyword options go to the latter)."""
    return training_graph(random_layered_dag(n_layers, max_width, seed, **kwargs))
