"""The training graph: an immutable, validated DAG in topological order.

A :class:`Graph` holds forward nodes, the loss and backward nodes of one
training step. Node ``k`` produces one value of ``memory_bytes[k]`` bytes,
costs ``cost[k]`` to compute from its inputs ``deps[k]`` and may need
``workspace_bytes[k]`` of scratch memory while it runs. ``fixed_bytes``
(parameters, their gradients, inputs) is always resident.

Nodes may be given in any order; they are stored in a topological order (a
stable one: if the input already is topological, it is kept) and
``original_index`` maps each stored node back to its input position.
"""

from __future__ import annotations

import heapq
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .errors import GraphValidationError

__all__ = ["Node", "Graph", "load_dtr_dag", "dtr_dag_from_dict", "infer_loss_index", "GRAPH_FORMAT",
           "GRAPH_FORMAT_VERSION", "MAX_BYTES"]

GRAPH_FORMAT = "remat-graph"
GRAPH_FORMAT_VERSION = 1
#: The largest size, and the largest sum of sizes (``fixed_bytes`` + every value + the largest workspace), a
#: graph may hold: every schedule's peak then fits in an int64 with room to spare.
MAX_BYTES = 2 ** 62


@dataclass(frozen=True)
class Node:
    """One operation of a training graph (the input form of :class:`Graph`).

    Parameters
    ----------
    name : str
        Unique name.
    cost : float
        Cost of computing the node once (any unit: seconds, FLOPs, ...), ``>= 0``.
    memory_bytes : int
        Size of the value it produces, ``>= 0``.
    workspace_bytes : int
        Scratch memory needed while it runs, ``>= 0``.
    is_backward : bool
        Whether the node belongs to the backward pass.
    deps : sequence of str
        Names of the nodes whose values it reads.
    """

    name: str
    cost: float = 1.0
    memory_bytes: int = 1
    workspace_bytes: int = 0
    is_backward: bool = False
    deps: tuple[str, ...] = field(default_factory=tuple)


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _check_number(value: Any, what: str, integer: bool) -> float | int:
    """Validate one non-negative finite number (an integer of at most :data:`MAX_BYTES` if ``integer``);
    ``what`` names it in the error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise GraphValidationError(f"{what} must be a non-negative number; got {value!r}")
    if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
        raise GraphValidationError(f"{what} must be finite; got {value!r}")
    if value < 0:
        raise GraphValidationError(f"{what} must be >= 0; got {value!r}")
    if integer:
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise GraphValidationError(f"{what} must be an integer number of bytes; got {value!r}")
        if int(value) > MAX_BYTES:
            raise GraphValidationError(f"{what} must be at most 2**62 bytes; got {value!r}")
        return int(value)
    return float(value)


def _check_flag(value: Any, what: str) -> bool:
    """A true/false value: ``bool`` (or numpy's), never a string such as ``"false"``."""
    if not isinstance(value, (bool, np.bool_)):
        raise GraphValidationError(f"{what} must be true or false; got {value!r}")
    return bool(value)


def _number_array(values: Any, n: int, what: str, integer: bool, names: Sequence[str]) -> np.ndarray:
    """Vectorized validation of a per-node array (the fast path for large graphs).

    Integers are read exactly (not through float64, which rounds above 2**53)
    and must be at most :data:`MAX_BYTES`; booleans and strings are refused.
    """
    try:
        raw = np.asarray(values)
    except (OverflowError, ValueError):   # an int beyond 64 bits, or a ragged list: checked entry by entry
        raw = np.asarray(values, dtype=object)
    if raw.ndim == 0:
        raw = np.full(n, raw.item(), dtype=raw.dtype if raw.dtype.kind in "iuf" else object)
    if raw.shape != (n,):
        raise GraphValidationError(f"`{what}` must have one entry per node ({n}); got shape {raw.shape}")
    if raw.dtype.kind in "iuf" and isinstance(values, (list, tuple)) and any(
            isinstance(v, (bool, np.bool_)) for v in values):
        raw = np.asarray(values, dtype=object)   # True among numbers: found and named below
    if raw.dtype.kind in "iuf":
        arr = raw
    else:   # check each entry's type: a bool, a string or None is no number (float64 would take True and "3")
        for k, v in enumerate(raw):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise GraphValidationError(f"{what} of node {names[k]!r} must be a non-negative number; got {v!r}")
        if integer and all(isinstance(v, (int, np.integer)) for v in raw):
            big = [k for k, v in enumerate(raw) if not 0 <= int(v) <= MAX_BYTES]
            if big:
                k = big[0]
                raise GraphValidationError(f"{what} of node {names[k]!r} must be an integer in [0, 2**62]; "
                                           f"got {raw[k]!r}")
            return np.asarray([int(v) for v in raw], dtype=np.int64)
        arr = np.asarray(raw, dtype=np.float64)
    if arr.dtype.kind in "iu":
        bad = np.flatnonzero((arr < 0) | (arr > MAX_BYTES)) if integer else np.flatnonzero(arr < 0)
        if bad.size:
            k = int(bad[0])
            raise GraphValidationError(f"{what} of node {names[k]!r} must be a number in [0, 2**62]; got {arr[k]!r}")
        return arr.astype(np.int64) if integer else arr.astype(np.float64)
    arr = arr.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        k = int(bad[0])
        raise GraphValidationError(
            f"{what} of node {names[k]!r} must be a finite number >= 0; got {arr[k]!r}"
        )
    if integer:
        nonint = np.flatnonzero(arr != np.floor(arr))
        if nonint.size:
            k = int(nonint[0])
            raise GraphValidationError(f"{what} of node {names[k]!r} must be an integer; got {arr[k]!r}")
        big = np.flatnonzero(arr > MAX_BYTES)
        if big.size:
            k = int(big[0])
            raise GraphValidationError(f"{what} of node {names[k]!r} must be at most 2**62 bytes; got {arr[k]!r}")
        return arr.astype(np.int64)
    return arr


_EMPTY_GRAPH = "a graph needs at least one node; got none (`nodes` is empty)"


class Graph:
    """An immutable training graph stored in topological order.

    Parameters
    ----------
    nodes : iterable of Node or mapping
        The nodes, in any order. Mappings take the fields of :class:`Node`.
    fixed_bytes : int, optional
        Always-resident bytes (parameters, parameter gradients, inputs).
    name : str, optional
        A label for reports.
    meta : mapping, optional
        JSON-serializable extra information (kept by :meth:`save`).

    Raises
    ------
    GraphValidationError
        On a cycle, a self-loop, an unknown or duplicate name, or a negative,
        NaN or infinite number; the message names the node or edge.

    Examples
    --------
    >>> from remat_core import Graph, Node
    >>> g = Graph([Node("b", deps=("a",)), Node("a")])
    >>> g.names
    ('a', 'b')
    >>> g.deps
    ((), (0,))
    """

    __slots__ = (
        "_names", "_index", "_cost", "_memory_bytes", "_workspace_bytes", "_is_backward",
        "_deps", "_users", "_dep_ptr", "_dep_idx", "_user_ptr", "_user_idx",
        "_original_index", "_fixed_bytes", "_name", "_meta",
    )

    def __init__(
        self,
        nodes: Iterable[Node | Mapping[str, Any]],
        fixed_bytes: int = 0,
        name: str = "",
        meta: Mapping[str, Any] | None = None,
    ):
        nodes = [self._as_node(x, i) for i, x in enumerate(nodes)]
        if not nodes:
            raise GraphValidationError(_EMPTY_GRAPH)
        names = [x.name for x in nodes]
        index: dict[str, int] = {}
        for i, nm in enumerate(names):
            if nm in index:
                raise GraphValidationError(f"duplicate node name {nm!r} (positions {index[nm]} and {i})")
            index[nm] = i
        deps: list[list[int]] = []
        for x in nodes:
            d = []
            for dn in x.deps:
                if dn == x.name:
                    raise GraphValidationError(f"self-loop on node {x.name!r}")
                if dn not in index:
                    raise GraphValidationError(f"node {x.name!r} depends on unknown node {dn!r}")
                d.append(index[dn])
            deps.append(d)
        cost = [_check_number(x.cost, f"cost of node {x.name!r}", False) for x in nodes]
        mem = [_check_number(x.memory_bytes, f"memory_bytes of node {x.name!r}", True) for x in nodes]
        ws = [_check_number(x.workspace_bytes, f"workspace_bytes of node {x.name!r}", True) for x in nodes]
        bwd = [_check_flag(x.is_backward, f"is_backward of node {x.name!r}") for x in nodes]
        self._build(names, deps, np.asarray(cost, float), np.asarray(mem, np.int64),
                    np.asarray(ws, np.int64), np.asarray(bwd, bool), fixed_bytes, name, meta)

    @staticmethod
    def _as_node(x: Node | Mapping[str, Any], position: int) -> Node:
        if isinstance(x, Node):
            node = x
        elif isinstance(x, Mapping):
            unknown = set(x) - set(Node.__dataclass_fields__)
            if unknown:
                raise GraphValidationError(f"node at position {position} has unknown fields {sorted(unknown)}")
            if "name" not in x:
                raise GraphValidationError(f"node at position {position} has no `name`")
            node = Node(**{**x, "deps": tuple(x.get("deps", ()))})
        else:
            raise GraphValidationError(f"`nodes` must hold Node objects or mappings; got {type(x).__name__} at position {position}")
        if not isinstance(node.name, str) or not node.name:
            raise GraphValidationError(f"node name must be a non-empty string; got {node.name!r} at position {position}")
        if isinstance(node.deps, str):
            raise GraphValidationError(f"deps of node {node.name!r} must be a sequence of names, not a string")
        return node

    @classmethod
    def from_arrays(
        cls,
        deps: Sequence[Sequence[int]],
        cost: Any = 1.0,
        memory_bytes: Any = 1,
        workspace_bytes: Any = 0,
        is_backward: Any = False,
        names: Sequence[str] | None = None,
        fixed_bytes: int = 0,
        name: str = "",
        meta: Mapping[str, Any] | None = None,
    ) -> "Graph":
        """Build a graph from per-node arrays; ``deps[k]`` lists input positions of node ``k``.

        The vectorized constructor for large graphs. Positions may be in any
        order (a topological order is computed, as in the main constructor).

        Examples
        --------
        >>> g = Graph.from_arrays([[], [0], [0, 1]], cost=[1, 2, 3], memory_bytes=4)
        >>> g.n, float(g.cost.sum()), int(g.memory_bytes.sum())
        (3, 6.0, 12)
        """
        if len(deps) == 0:
            raise GraphValidationError(_EMPTY_GRAPH)
        n = len(deps)
        if names is None:
            names = [str(i) for i in range(n)]
        else:
            names = list(names)
            if len(names) != n:
                raise GraphValidationError(f"`names` must have one entry per node ({n}); got {len(names)}")
            seen: dict[str, int] = {}
            for i, nm in enumerate(names):
                if not isinstance(nm, str) or not nm:
                    raise GraphValidationError(f"node name must be a non-empty string; got {nm!r} at position {i}")
                if nm in seen:
                    raise GraphValidationError(f"duplicate node name {nm!r} (positions {seen[nm]} and {i})")
                seen[nm] = i
        dl: list[list[int]] = []
        for k, d in enumerate(deps):
            row = []
            for i in d:
                if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) or not 0 <= i < n:
                    raise GraphValidationError(f"node {names[k]!r} depends on unknown node position {i!r}")
                if i == k:
                    raise GraphValidationError(f"self-loop on node {names[k]!r}")
                row.append(int(i))
            dl.append(row)
        c = _number_array(cost, n, "cost", False, names)
        m = _number_array(memory_bytes, n, "memory_bytes", True, names)
        w = _number_array(workspace_bytes, n, "workspace_bytes", True, names)
        b = np.asarray(is_backward)
        if b.ndim == 0:
            b = np.full(n, b.item(), dtype=b.dtype)
        if b.shape != (n,):
            raise GraphValidationError(f"`is_backward` must have one entry per node ({n}); got shape {b.shape}")
        if b.dtype.kind != "b":   # 0/1 integers are fine; "false" is not (as bool it would read True)
            if b.dtype.kind not in "iu" or not np.all((b == 0) | (b == 1)):
                k = 0 if b.dtype.kind not in "iu" else int(np.flatnonzero((b != 0) & (b != 1))[0])
                raise GraphValidationError(f"is_backward of node {names[k]!r} must be true or false; got {b[k]!r}")
            b = b.astype(bool)
        self = cls.__new__(cls)
        self._build(names, dl, c, m, w, b, fixed_bytes, name, meta)
        return self

    def _build(self, names, deps, cost, mem, ws, bwd, fixed_bytes, name, meta) -> None:
        n = len(names)
        fixed = _check_number(fixed_bytes, "`fixed_bytes`", True)
        total = float(fixed) + float(np.sum(mem, dtype=np.float64)) + (float(np.max(ws)) if n else 0.0)
        if total > MAX_BYTES / 2:   # near the limit: the exact sum, in Python ints
            total = fixed + sum(int(v) for v in mem) + (int(np.max(ws)) if n else 0)
        if total > MAX_BYTES:
            raise GraphValidationError(f"the sizes add up to {total} bytes (fixed_bytes, every value and the "
                                       f"largest workspace), more than 2**62: schedules' peaks would overflow")
        # de-duplicate repeated inputs of one node (x * x reads x once), keeping order
        deps = [list(dict.fromkeys(d)) for d in deps]
        order = _stable_toposort(deps, names)
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        self._names = tuple(names[i] for i in order)
        self._index = {nm: k for k, nm in enumerate(self._names)}
        new_deps = tuple(tuple(sorted(int(pos[i]) for i in deps[o])) for o in order)
        self._deps = new_deps
        users: list[list[int]] = [[] for _ in range(n)]
        for k, d in enumerate(new_deps):
            for i in d:
                users[i].append(k)
        self._users = tuple(tuple(u) for u in users)
        self._dep_ptr, self._dep_idx = _csr(new_deps)
        self._user_ptr, self._user_idx = _csr(self._users)
        self._cost = _readonly(np.ascontiguousarray(cost[order], dtype=np.float64))
        self._memory_bytes = _readonly(np.ascontiguousarray(mem[order], dtype=np.int64))
        self._workspace_bytes = _readonly(np.ascontiguousarray(ws[order], dtype=np.int64))
        self._is_backward = _readonly(np.ascontiguousarray(bwd[order], dtype=bool))
        self._original_index = _readonly(np.asarray(order, dtype=np.int64))
        self._fixed_bytes = int(fixed)
        self._name = str(name)
        meta = dict(meta or {})
        try:
            json.dumps(meta)
        except TypeError as exc:
            raise GraphValidationError(f"`meta` must be JSON-serializable: {exc}") from None
        self._meta = meta

    # ------------------------------------------------------------------ access
    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self._names)

    def __len__(self) -> int:
        return self.n

    names = property(lambda self: self._names, doc="Node names in topological order.")
    cost = property(lambda self: self._cost, doc="Per-node cost (float64, read-only).")
    memory_bytes = property(lambda self: self._memory_bytes, doc="Per-node output size (int64, read-only).")
    workspace_bytes = property(lambda self: self._workspace_bytes, doc="Per-node scratch memory (int64, read-only).")
    is_backward = property(lambda self: self._is_backward, doc="Per-node backward flag (bool, read-only).")
    deps = property(lambda self: self._deps, doc="Input indices of each node (sorted tuples).")
    users = property(lambda self: self._users, doc="Indices of the nodes reading each node (sorted tuples).")
    fixed_bytes = property(lambda self: self._fixed_bytes, doc="Always-resident bytes.")
    name = property(lambda self: self._name, doc="Graph label.")
    original_index = property(lambda self: self._original_index, doc="Input position of each stored node.")

    @property
    def meta(self) -> dict[str, Any]:
        """A copy of the extra JSON-serializable information."""
        return json.loads(json.dumps(self._meta))

    @property
    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(dep_ptr, dep_idx, user_ptr, user_idx)``: int64 CSR adjacency for kernels."""
        return self._dep_ptr, self._dep_idx, self._user_ptr, self._user_idx

    @property
    def edges(self) -> np.ndarray:
        """All edges ``i -> k`` as an ``(E, 2)`` int64 array, sorted by ``(k, i)``."""
        counts = np.diff(self._dep_ptr)
        return np.column_stack([self._dep_idx, np.repeat(np.arange(self.n, dtype=np.int64), counts)]).astype(np.int64)

    def index(self, name: str) -> int:
        """Topological index of the node called ``name``."""
        try:
            return self._index[name]
        except KeyError:
            raise GraphValidationError(f"no node named {name!r}") from None

    def node(self, k: int) -> Node:
        """The :class:`Node` stored at topological index ``k``."""
        return Node(
            name=self._names[k], cost=float(self._cost[k]), memory_bytes=int(self._memory_bytes[k]),
            workspace_bytes=int(self._workspace_bytes[k]), is_backward=bool(self._is_backward[k]),
            deps=tuple(self._names[i] for i in self._deps[k]),
        )

    def nodes(self) -> list[Node]:
        """All nodes, in topological order."""
        return [self.node(k) for k in range(self.n)]

    @property
    def forward_indices(self) -> np.ndarray:
        """Indices of the nodes that are not backward nodes."""
        return np.flatnonzero(~self._is_backward)

    @property
    def backward_indices(self) -> np.ndarray:
        """Indices of backward nodes."""
        return np.flatnonzero(self._is_backward)

    def min_budget_lower_bound_bytes(self) -> int:
        """A budget below this value is infeasible for every schedule.

        Computing node ``k`` needs its inputs and its own output resident at
        once, plus its workspace and the fixed bytes:
        ``fixed + max_k (m_k + ws_k + sum_{i in deps(k)} m_i)``. It is a bound,
        not always attained.
        """
        if self.n == 0:
            return self._fixed_bytes
        return int(self._fixed_bytes + self.node_need_bytes().max())

    def node_need_bytes(self) -> np.ndarray:
        """Bytes each node needs resident while it runs: ``m_k + ws_k + sum_{i in deps(k)} m_i``."""
        counts = np.diff(self._dep_ptr)
        dep_sum = np.zeros(self.n, dtype=np.int64)
        np.add.at(dep_sum, np.repeat(np.arange(self.n), counts), self._memory_bytes[self._dep_idx])
        return self._memory_bytes + self._workspace_bytes + dep_sum

    def replace(self, **changes: Any) -> "Graph":
        """A new graph with some per-node arrays or graph fields replaced.

        ``cost``, ``memory_bytes``, ``workspace_bytes``, ``is_backward`` take a
        per-node array in this graph's (topological) order; ``fixed_bytes``,
        ``name`` and ``meta`` take a value.

        Examples
        --------
        >>> from remat_core.zoo import linear_graph
        >>> g = linear_graph(2).replace(fixed_bytes=10)
        >>> g.fixed_bytes
        10
        """
        allowed = {"cost", "memory_bytes", "workspace_bytes", "is_backward", "fixed_bytes", "name", "meta"}
        unknown = set(changes) - allowed
        if unknown:
            raise TypeError(f"replace() got unknown fields {sorted(unknown)}; allowed: {sorted(allowed)}")
        kw = dict(
            cost=self._cost, memory_bytes=self._memory_bytes, workspace_bytes=self._workspace_bytes,
            is_backward=self._is_backward, fixed_bytes=self._fixed_bytes, name=self._name, meta=self._meta,
        )
        kw.update(changes)
        return Graph.from_arrays(self._deps, names=self._names, **kw)

    # ----------------------------------------------------------- comparison
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self._names == other._names and self._deps == other._deps
            and np.array_equal(self._cost, other._cost)
            and np.array_equal(self._memory_bytes, other._memory_bytes)
            and np.array_equal(self._workspace_bytes, other._workspace_bytes)
            and np.array_equal(self._is_backward, other._is_backward)
            and self._fixed_bytes == other._fixed_bytes
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        label = f" {self._name!r}" if self._name else ""
        return (
            f"<Graph{label}: {self.n} nodes ({int(self._is_backward.sum())} backward), "
            f"{len(self._dep_idx)} edges, fixed_bytes={self._fixed_bytes}>"
        )

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON-ready form used by :meth:`save`."""
        return {
            "format": GRAPH_FORMAT,
            "version": GRAPH_FORMAT_VERSION,
            "name": self._name,
            "fixed_bytes": self._fixed_bytes,
            "meta": self._meta,
            "nodes": [
                {
                    "name": self._names[k],
                    "cost": float(self._cost[k]),
                    "memory_bytes": int(self._memory_bytes[k]),
                    "workspace_bytes": int(self._workspace_bytes[k]),
                    "is_backward": bool(self._is_backward[k]),
                    "deps": [self._names[i] for i in self._deps[k]],
                }
                for k in range(self.n)
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | None = None) -> "Graph":
        """Inverse of :meth:`to_dict`: the remat graph format, validated field by field.

        ``source`` (a file name) starts every error message. The format
        (``docs/reliability.rst``): an object with ``"format": "remat-graph"``,
        ``"version": 1``, ``"nodes"`` (a list), and optionally ``fixed_bytes``
        (integer >= 0), ``name`` (string) and ``meta`` (object); each node an
        object with ``name`` (non-empty string, unique), and optionally
        ``cost`` (finite number >= 0, default 1), ``memory_bytes`` and
        ``workspace_bytes`` (integers >= 0, defaults 1 and 0; ``10.0`` is
        read as 10, ``10.7`` is refused), ``is_backward`` (``true`` or
        ``false``) and ``deps`` (a list of node names). No other keys.

        Raises
        ------
        GraphValidationError
            Naming the source, the node and the field.
        """
        where = f"{source}: " if source else ""
        try:
            return cls._from_checked_dict(data, where)
        except GraphValidationError as exc:
            if where and not str(exc).startswith(where):
                raise GraphValidationError(f"{where}{exc}") from None
            raise

    @classmethod
    def _from_checked_dict(cls, data: Any, where: str) -> "Graph":
        if not isinstance(data, Mapping):
            raise GraphValidationError(f"{where}a remat graph is a JSON object; got {_json_type(data)}")
        if data.get("format") != GRAPH_FORMAT:
            raise GraphValidationError(f"{where}not a remat graph: expected \"format\": {GRAPH_FORMAT!r}")
        version = data.get("version")
        if isinstance(version, bool) or version != GRAPH_FORMAT_VERSION:
            raise GraphValidationError(
                f"{where}unsupported graph format version {version!r}; this remat reads version "
                f"{GRAPH_FORMAT_VERSION}")
        unknown = sorted(set(data) - set(_GRAPH_KEYS))
        if unknown:
            raise GraphValidationError(f"{where}unknown keys {unknown}; a remat graph has {list(_GRAPH_KEYS)}")
        if "nodes" not in data:
            raise GraphValidationError(f"{where}graph JSON has no `nodes`")
        nodes = data["nodes"]
        if not isinstance(nodes, list):
            raise GraphValidationError(f"{where}`nodes` must be a list; got {_json_type(nodes)}")
        name = data.get("name", "")
        if not isinstance(name, str):
            raise GraphValidationError(f"{where}`name` must be a string; got {name!r}")
        meta = data.get("meta")
        if meta is not None and not isinstance(meta, Mapping):
            raise GraphValidationError(f"{where}`meta` must be an object; got {_json_type(meta)}")
        checked = []
        for i, nd in enumerate(nodes):
            if not isinstance(nd, Mapping):
                raise GraphValidationError(f"{where}node at position {i} must be an object; got {_json_type(nd)}")
            label = f"node {nd.get('name')!r}" if isinstance(nd.get("name"), str) else f"node at position {i}"
            deps = nd.get("deps", [])
            if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
                raise GraphValidationError(f"{where}{label}: `deps` must be a list of node names; got {deps!r}")
            for key in ("cost", "memory_bytes", "workspace_bytes"):
                if key in nd:
                    _check_number(nd[key], f"{label}: `{key}`", key != "cost")
            if "is_backward" in nd:
                _check_flag(nd["is_backward"], f"{label}: `is_backward`")
            checked.append(nd)
        return cls(checked, fixed_bytes=data.get("fixed_bytes", 0), name=name, meta=meta)

    def save(self, path: str | os.PathLike) -> None:
        """Write the graph as versioned JSON (atomically: a temporary file then a rename)."""
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.to_dict(), f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Graph":
        """Read a graph written by :meth:`save` (the format: :meth:`from_dict`).

        Raises
        ------
        GraphValidationError
            If the file is a directory, not UTF-8, not JSON, not a JSON object,
            or breaks the format (the message names the file, node and field).
        OSError
            If the file cannot be read (missing, no permission).
        """
        return cls.from_dict(_read_json_object(path, "remat graph"), source=repr(os.fspath(path)))


_GRAPH_KEYS = ("format", "version", "name", "fixed_bytes", "meta", "nodes")


def _json_type(value: Any) -> str:
    """How JSON calls ``value``'s type (for messages)."""
    for kind, name in ((bool, "a boolean"), (str, "a string"), ((int, float), "a number"), (list, "a list"),
                       (Mapping, "an object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _read_json_object(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """The JSON object in the file ``path``; ``GraphValidationError`` naming the file otherwise."""
    where = repr(os.fspath(path))
    if os.path.isdir(path):
        raise GraphValidationError(f"{where} is a directory, not a {what} file")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GraphValidationError(f"{where} is not UTF-8 text (byte {exc.start}); a {what} file is JSON") from None

    def constant(name: str) -> None:
        raise ValueError(f"{name} is not a JSON number")

    try:
        data = json.loads(text, parse_constant=constant)
    except ValueError as exc:   # json.JSONDecodeError, and NaN / Infinity above
        raise GraphValidationError(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:   # arrays or objects nested thousands deep: no graph looks like that
        raise GraphValidationError(f"{where} is JSON nested too deeply to be a {what} file") from None
    if not isinstance(data, dict):
        raise GraphValidationError(f"{where}: a {what} file holds a JSON object; got {_json_type(data)}")
    return data


def _csr(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    idx = np.fromiter((i for r in rows for i in r), dtype=np.int64, count=int(ptr[-1]))
    return _readonly(ptr), _readonly(idx)


def _stable_toposort(deps: Sequence[Sequence[int]], names: Sequence[str]) -> list[int]:
    """Kahn's algorithm, always taking the ready node of smallest input position."""
    n = len(deps)
    indeg = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in range(n)]
    for k, d in enumerate(deps):
        for i in d:
            users[i].append(k)
    if all(i < k for k, d in enumerate(deps) for i in d):
        return list(range(n))  # already topological: keep it
    ready = [k for k in range(n) if indeg[k] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < n:
        left = {k for k in range(n) if indeg[k] > 0}
        cycle = _find_cycle(deps, left)
        path = " -> ".join(repr(names[k]) for k in cycle)
        raise GraphValidationError(f"graph has a cycle: {path}")
    return order


def _find_cycle(deps: Sequence[Sequence[int]], left: set[int]) -> list[int]:
    """A cycle among the nodes Kahn's algorithm could not order (walk inputs until one repeats)."""
    k = min(left)
    seen: dict[int, int] = {}
    walk: list[int] = []
    while k not in seen:
        seen[k] = len(walk)
        walk.append(k)
        k = next(i for i in deps[k] if i in left)
    cyc = walk[seen[k]:]
    cyc.reverse()  # report in edge direction (input -> user)
    return cyc + [cyc[0]]


def infer_loss_index(graph: Graph) -> int:
    """Guess where the forward pass ends in a training graph without backward flags.

    In a training step every forward activation stays alive until the
    backward pass reads it, so the number of values that checkpoint-all keeps
    from one stage to the next grows through the forward pass and peaks right
    after the loss. The loss is taken as the node computed just before the
    stage that keeps the most values (the first such stage on ties).

    This is a heuristic. It returns the true loss on every graph built by
    :func:`remat_core.zoo.training_graph` and :func:`remat_core.zoo.linear_graph`
    that the tests try, and on the Keras zoo graphs.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(5)
    >>> infer_loss_index(g.replace(is_backward=[False] * g.n)) == g.meta["loss"]
    True
    """
    n = graph.n
    if n < 2:
        return 0
    # checkpoint-all keeps value i from stage i+1 through its last use: count per stage
    _, _, user_ptr, user_idx = graph.csr
    has_users = np.diff(user_ptr) > 0
    last_use = np.arange(n)
    last_use[has_users] = user_idx[user_ptr[1:][has_users] - 1]
    change = np.zeros(n + 1, dtype=np.int64)
    np.add.at(change, np.arange(n) + 1, 1)
    np.add.at(change, last_use + 1, -1)
    kept = np.cumsum(change)[:n]
    return max(0, int(np.argmax(kept)) - 1)


def load_dtr_dag(path: str | os.PathLike, infer_backward: bool = True) -> Graph:
    """Load a training graph in the format of ``shared/data/dtr_dags``.

    The file holds ``nodes`` (``id``, ``cost_cpu`` in ns, ``cost_ram`` in
    bytes), ``args`` (node id -> list of input ids) and
    ``cost_ram_parameters`` (bytes of parameters, taken as ``fixed_bytes``).
    The recordings do not say which operators belong to the backward pass.
    With ``infer_backward`` (the default) the split is guessed by
    ``infer_loss_index``: nodes after the inferred loss are marked
    backward, and ``meta`` records ``"loss"`` and ``"backward_inferred": True``.
    Without it, ``is_backward`` is all false. The format is checked by
    ``dtr_dag_from_dict``.

    Raises
    ------
    GraphValidationError
        If the file is a directory, not UTF-8, not a JSON object, or a key is
        missing or a value is invalid (the message names the file, the node
        and the field).
    OSError
        If the file cannot be read (missing, no permission).
    """
    data = _read_json_object(path, "DTR graph")
    return dtr_dag_from_dict(data, source=repr(os.fspath(path)), infer_backward=infer_backward,
                             default_name=os.path.basename(os.fspath(path)))


def dtr_dag_from_dict(data: Mapping[str, Any], source: str | None = None, infer_backward: bool = True,
                      default_name: str = "") -> Graph:
    """A graph from the DTR DAG format, validated field by field (see :func:`load_dtr_dag`).

    The format (``docs/reliability.rst``): an object with ``nodes``, a list of
    objects each with ``id`` (an integer, unique), ``cost_cpu`` (a finite
    number >= 0) and ``cost_ram`` (an integer >= 0: ``8.0`` is read as 8,
    ``10.7`` is refused); ``args``, an object from a node id written as a
    string to the list of the ids it reads (a node without an entry reads
    nothing); optionally ``cost_ram_parameters`` (an integer >= 0, the fixed
    bytes), ``name``, ``source``, ``cost_cpu_units`` and ``cost_ram_units``
    (strings). Other keys are ignored (the recordings carry some).

    Raises
    ------
    GraphValidationError
        Naming ``source``, the node and the field.
    """
    where = f"{source}: " if source else ""
    if not isinstance(data, Mapping):
        raise GraphValidationError(f"{where}a DTR graph is a JSON object; got {_json_type(data)}")
    for key in ("nodes", "args"):
        if key not in data:
            raise GraphValidationError(f"{where}missing key {key!r} of the DTR DAG format")
    nodes, args = data["nodes"], data["args"]
    if not isinstance(nodes, list):
        raise GraphValidationError(f"{where}`nodes` must be a list; got {_json_type(nodes)}")
    if not isinstance(args, Mapping):
        raise GraphValidationError(f"{where}`args` must be an object (node id -> list of ids); got {_json_type(args)}")
    for key in ("name", "source", "cost_cpu_units", "cost_ram_units"):
        if key in data and not isinstance(data[key], str):
            raise GraphValidationError(f"{where}`{key}` must be a string; got {data[key]!r}")
    ids, cost, mem = [], [], []
    for p, nd in enumerate(nodes):
        if not isinstance(nd, Mapping):
            raise GraphValidationError(f"{where}node at position {p} must be an object; got {_json_type(nd)}")
        for key in ("id", "cost_cpu", "cost_ram"):
            if key not in nd:
                label = f"node {nd['id']!r}" if "id" in nd else f"node at position {p}"
                raise GraphValidationError(f"{where}{label} has no `{key}`")
        i = nd["id"]
        if isinstance(i, bool) or not isinstance(i, int):
            raise GraphValidationError(f"{where}node at position {p}: `id` must be an integer; got {i!r}")
        ids.append(i)
        cost.append(_check_number(nd["cost_cpu"], f"{where}node {i}: `cost_cpu`", False))
        mem.append(_check_number(nd["cost_ram"], f"{where}node {i}: `cost_ram`", True))
    pos = {i: p for p, i in enumerate(ids)}
    if len(pos) != len(ids):
        dup = next(i for p, i in enumerate(ids) if pos[i] != p)
        raise GraphValidationError(f"{where}duplicate node id {dup}")
    stray = sorted(k for k in args if not (isinstance(k, str) and k.lstrip("-").isdigit() and int(k) in pos))
    if stray:
        raise GraphValidationError(f"{where}`args` has entries for unknown node ids {stray[:5]}")
    deps = []
    for i in ids:
        reads = args.get(str(i), [])
        if not isinstance(reads, list):
            raise GraphValidationError(f"{where}node {i}: `args` must be a list of node ids; got {reads!r}")
        row = []
        for a in reads:
            if isinstance(a, bool) or not isinstance(a, int):
                raise GraphValidationError(f"{where}node {i}: `args` must be a list of node ids; got {a!r} in it")
            if a not in pos:
                raise GraphValidationError(f"{where}node {i} reads unknown node id {a}")
            if a == i:
                raise GraphValidationError(f"{where}node {i} reads itself")
            row.append(pos[a])
        deps.append(row)
    fixed = _check_number(data.get("cost_ram_parameters", 0), f"{where}`cost_ram_parameters`", True)
    try:
        graph = Graph.from_arrays(
            deps, cost=np.asarray(cost, dtype=np.float64), memory_bytes=np.asarray(mem, dtype=np.int64),
            names=[str(i) for i in ids], fixed_bytes=fixed, name=data.get("name", default_name),
            meta={"source": data.get("source", ""), "cost_unit": data.get("cost_cpu_units", "ns")},
        )
    except GraphValidationError as exc:   # a cycle, or sizes that add up past 2**62
        raise GraphValidationError(f"{where}{exc}") from None
    if not infer_backward:
        return graph
    loss = infer_loss_index(graph)
    return graph.replace(is_backward=np.arange(graph.n) > loss,
                         meta={**graph.meta, "loss": loss, "backward_inferred": True})
