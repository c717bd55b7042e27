"""Training state on the host: parameters, their gradients and the input batch (ZeRO-Offload style).

A graph's ``fixed_bytes`` are always resident in the remat model. With a host
tier, part of them need not be: a :class:`StateLayout` names the blocks of
``fixed_bytes`` that may live on the host between their uses:

* ``"param"`` and ``"input"`` blocks (a layer's weights; the input batch) have
  their master copy on the host for the whole step. They start on the device
  (today's model) and a plan may drop one (no copy: the host copy is current)
  and fetch it back (a host-to-device copy) before a node that reads it;
  :func:`~remat_core.host.offload_to_budget` keeps the input batch on the
  device between steps (the data pipeline loads the next batch during the
  previous step, as the remat model assumes) and drops it only between two
  of its readers;
* ``"grad"`` blocks (a layer's parameter gradients) are written by their
  nodes. A plan may leave one off the device until its first writer (which
  then allocates it) and, after its last writer, copy it to the host
  (``SaveState``) and drop it: the optimizer step then runs on the host, as in
  ZeRO-Offload. A gradient is never dropped with unsaved writes.

Between two training steps a block is on the device or on the host, the same
at the end of a step as at its start: the drops before a plan's first
computation put a block on the host between steps, and the simulator checks
that any other block is on the device at the end. A parameter block's
gradient block (``StateBlock.grad``) follows it: the optimizer updates a
parameter where its gradient is, so a parameter on the host between steps
needs its gradient saved to the host, and a saved gradient needs its
parameter on the host between steps (ZeRO-Offload: the optimizer step of
those layers runs on the host, the updated weights are fetched in the next
step).

The bytes of ``fixed_bytes`` not in any block stay resident. A node that reads
or writes a block needs it on the device while it runs; its data, then, count
in the lower bound of what any plan needs (:func:`state_floor_bytes`).

:func:`zoo_state_layout` builds the layout of a ``remat-zoo-model`` graph from
its per-layer parameter counts (:mod:`remat_core.zoo.models`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..graph import Graph

__all__ = ["StateBlock", "StateLayout", "zoo_state_layout", "state_floor_bytes", "STATE_KINDS"]

STATE_KINDS = ("param", "input", "grad")


@dataclass(frozen=True)
class StateBlock:
    """One movable piece of ``fixed_bytes``.

    Attributes
    ----------
    name : str
    nbytes : int
    kind : {"param", "input", "grad"}
    nodes : tuple of int
        The nodes that read it (``param``, ``input``) or write it (``grad``).
    grad : str
        For a parameter block, the name of its gradient block ("" if none).
    """

    name: str
    nbytes: int
    kind: str
    nodes: tuple
    grad: str = ""


class StateLayout:
    """The blocks of a graph's ``fixed_bytes`` that may live on the host.

    Parameters
    ----------
    graph : Graph
        The graph the layout describes (checked: nodes in range, blocks within
        ``fixed_bytes``).
    blocks : iterable of StateBlock or tuple
        ``StateBlock`` or ``(name, nbytes, kind, nodes[, grad])``; blocks of 0
        bytes or without nodes are dropped (they never matter).

    Raises
    ------
    ValueError
        Naming the block that is malformed, or when the blocks add up to more
        than ``graph.fixed_bytes``.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(2).replace(fixed_bytes=6)
    >>> lay = StateLayout(g, [("w0", 2, "param", (0, 4), "dw0"), ("dw0", 2, "grad", (4,))])
    >>> lay.movable_bytes, lay.resident_bytes, [b.name for b in lay.needs(4)]
    (4, 2, ['w0', 'dw0'])
    """

    def __init__(self, graph: Graph, blocks: Iterable[Any]):
        if not isinstance(graph, Graph):
            raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
        out: list[StateBlock] = []
        for j, b in enumerate(blocks):
            if not isinstance(b, StateBlock):
                try:
                    name, nbytes, kind, nodes, *grad = b
                    grad = str(grad[0]) if grad else ""
                    b = StateBlock(str(name), nbytes, kind, tuple(nodes), grad)
                except (TypeError, ValueError, IndexError):
                    raise ValueError(f"`blocks[{j}]` must be a StateBlock or (name, nbytes, kind, nodes[, grad]); "
                                     f"got {b!r}") from None
            if isinstance(b.nbytes, bool) or not isinstance(b.nbytes, numbers.Integral) or b.nbytes < 0:
                raise ValueError(f"`blocks[{j}]` ({b.name!r}): nbytes must be an integer >= 0; got {b.nbytes!r}")
            if b.kind not in STATE_KINDS:
                raise ValueError(f"`blocks[{j}]` ({b.name!r}): kind must be one of {STATE_KINDS}; got {b.kind!r}")
            nodes = tuple(sorted({int(k) for k in b.nodes}))
            if any(not 0 <= k < graph.n for k in nodes):
                raise ValueError(f"`blocks[{j}]` ({b.name!r}): nodes must be in [0, {graph.n}); got {b.nodes!r}")
            if b.grad and b.kind != "param":
                raise ValueError(f"`blocks[{j}]` ({b.name!r}): only a parameter block has a gradient block")
            if b.nbytes and nodes:
                out.append(StateBlock(b.name, int(b.nbytes), b.kind, nodes, b.grad))
        total = sum(b.nbytes for b in out)
        if total > graph.fixed_bytes:
            raise ValueError(f"`blocks` add up to {total} bytes, more than the graph's fixed_bytes "
                             f"{graph.fixed_bytes}")
        index = {b.name: j for j, b in enumerate(out)}
        if len(index) != len(out):
            raise ValueError("`blocks` have duplicate names")
        #: for each block, the index of its gradient block (parameters with one) or -1
        self.grad_index = tuple(index.get(b.grad, -1) if b.grad else -1 for b in out)
        for b, g in zip(out, self.grad_index):
            if b.grad and (g < 0 or out[g].kind != "grad"):
                raise ValueError(f"block {b.name!r} names gradient block {b.grad!r}, which is not a gradient block")
        #: for each gradient block, the index of its parameter block or -1
        self.param_index = tuple(next((i for i, g in enumerate(self.grad_index) if g == j), -1)
                                 for j in range(len(out)))
        self.blocks = tuple(out)
        self.num_nodes = graph.n
        self.fixed_bytes = graph.fixed_bytes
        self._needs: dict[int, list[int]] = {}
        for j, b in enumerate(self.blocks):
            for k in b.nodes:
                self._needs.setdefault(k, []).append(j)

    @property
    def movable_bytes(self) -> int:
        """Bytes of every block."""
        return sum(b.nbytes for b in self.blocks)

    @property
    def resident_bytes(self) -> int:
        """``fixed_bytes`` that stay on the device whatever the plan."""
        return self.fixed_bytes - self.movable_bytes

    def needs(self, node: int) -> list[StateBlock]:
        """The blocks ``node`` reads or writes."""
        return [self.blocks[j] for j in self._needs.get(int(node), ())]

    def need_indices(self, node: int) -> list[int]:
        """Indices of :meth:`needs`."""
        return list(self._needs.get(int(node), ()))

    def to_dict(self) -> dict[str, Any]:
        return {"num_nodes": self.num_nodes, "fixed_bytes": self.fixed_bytes,
                "blocks": [[b.name, b.nbytes, b.kind, list(b.nodes), b.grad] for b in self.blocks]}

    @classmethod
    def from_dict(cls, graph: Graph, data: Mapping[str, Any]) -> "StateLayout":
        """Inverse of ``to_dict()``, checked against ``graph``."""
        if int(data.get("num_nodes", -1)) != graph.n or int(data.get("fixed_bytes", -1)) != graph.fixed_bytes:
            raise ValueError(f"the state layout is for a graph of {data.get('num_nodes')} nodes and "
                             f"{data.get('fixed_bytes')} fixed bytes; this one has {graph.n} and {graph.fixed_bytes}")
        return cls(graph, [tuple(b) for b in data["blocks"]])

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, StateLayout) and self.blocks == other.blocks
                and self.num_nodes == other.num_nodes and self.fixed_bytes == other.fixed_bytes)

    def __hash__(self) -> int:
        return hash((self.blocks, self.num_nodes, self.fixed_bytes))

    def __repr__(self) -> str:
        return (f"<StateLayout: {len(self.blocks)} blocks, {self.movable_bytes} of {self.fixed_bytes} fixed bytes "
                f"movable>")


def state_floor_bytes(graph: Graph, layout: StateLayout | None = None) -> int:
    """The smallest device budget any plan can have when the layout's blocks may live on the host.

    ``resident bytes + max_k (inputs, output and workspace of k + the blocks k
    reads or writes)``; without a layout, ``Graph.min_budget_lower_bound_bytes()``.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(2).replace(fixed_bytes=6)
    >>> g.min_budget_lower_bound_bytes()
    9
    >>> state_floor_bytes(g, StateLayout(g, [("w0", 2, "param", (0, 4)), ("dw0", 2, "grad", (4,))]))
    9
    >>> state_floor_bytes(g, StateLayout(g, [("w1", 6, "param", (1,))]))   # node 4 needs 3 values
    8
    """
    if layout is None or not layout.blocks:
        return graph.min_budget_lower_bound_bytes()
    need = graph.node_need_bytes()
    best = 0
    for k in range(graph.n):
        best = max(best, int(need[k]) + sum(b.nbytes for b in layout.needs(k)))
    return layout.resident_bytes + best


def zoo_state_layout(graph: Graph) -> StateLayout:
    """The state layout of a ``remat-zoo-model`` training graph (``remat_core.zoo.zoo_graph``).

    Per layer with parameters: its weights (read by the layer's forward and
    backward nodes) and their gradients (written by the backward node), 4
    bytes per parameter each. The input batch is read by the layers that
    read the model input and by their backward nodes (a convolution's weight
    gradient needs its input). Together they are the graph's ``fixed_bytes``.

    Raises
    ------
    ValueError
        If ``graph`` is not a zoo model graph, or its sizes do not match the
        spec it names.

    Examples
    --------
    >>> from remat_core.zoo import zoo_graph
    >>> g = zoo_graph("vgg19", batch_size=2)
    >>> lay = zoo_state_layout(g)
    >>> lay.movable_bytes == g.fixed_bytes, len(lay.blocks)
    (True, 39)
    """
    from ..zoo.models import load_spec

    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    meta = graph.meta
    if not meta.get("zoo") or "n_forward" not in meta or "batch_size" not in meta:
        raise ValueError(f"`graph` {graph.name!r} is not a zoo model graph (built by remat_core.zoo.zoo_graph)")
    spec = load_spec(str(meta["zoo"]))
    layers = spec.get("layers", [])
    m = int(meta["n_forward"])
    if len(layers) != m or graph.n != 2 * m + 1:
        raise ValueError(f"`graph` {graph.name!r} does not match the zoo spec {meta['zoo']!r}")
    bpe = int(spec.get("bytes_per_element", 4))
    batch = int(meta["batch_size"])

    def grad_node(v: int) -> int:
        return m + 1 + (m - 1 - v)

    blocks: list[tuple] = []
    for v, layer in enumerate(layers):
        p = int(layer.get("params", 0))
        if p:
            blocks.append((f"{layer['name']}/w", bpe * p, "param", (v, grad_node(v)), f"{layer['name']}/dw"))
            blocks.append((f"{layer['name']}/dw", bpe * p, "grad", (grad_node(v),)))
    readers = [v for v, layer in enumerate(layers) if not layer["deps"]]
    inputs = bpe * int(spec.get("input_elements", 0)) * batch
    blocks.append(("input", inputs, "input", tuple(readers) + tuple(grad_node(v) for v in readers)))
    lay = StateLayout(graph, blocks)
    expected = 2 * bpe * int(spec.get("params", 0)) + inputs
    if expected != graph.fixed_bytes or lay.movable_bytes != expected:
        raise ValueError(f"`graph` {graph.name!r}: the layers' parameters and the input add up to "
                         f"{lay.movable_bytes} bytes, not the graph's fixed_bytes {graph.fixed_bytes}")
    return lay
