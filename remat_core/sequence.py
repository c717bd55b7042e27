"""Schedules as operation sequences: an explicit list of compute and free events, judged directly.

A stage schedule ``(R, S)`` fixes when each value is computed and which values
cross each stage boundary; the executors run it as a sequence of "compute node
k" and "free node i" events anyway. This room holds that sequence form:

* :class:`OpSequence` -- two parallel arrays, ``kind`` (``COMPUTE`` or
  ``FREE``) and ``node``; a node may be computed many times (recomputation)
  and freed many times, in any order a valid run allows, so a plan such as
  DTR's depth-first recomputation with short pins is expressed as it ran;
* :func:`from_schedule` -- the sequence a stage schedule stands for, with the
  frees placed exactly where the simulator's accounting frees (so the two
  forms simulate equal: one judge);
* :func:`two_phases` -- whether a run of the graph must compute every
  forward node before any backward node (the adapters' graphs: executors
  hand out the loss between the two parts), which sequence plans and the
  memory-aware order respect;
* :func:`simulate_sequence` -- the judge of a sequence, with the same memory
  accounting as :func:`remat_core.simulate`: a compute allocates the value
  (the instant's peak adds the node's workspace), a free releases one copy.

Imports: numpy, and the core's graph, schedule and simulator types only.

Examples
--------
>>> from remat_core import Schedule, simulate
>>> from remat_core.zoo import linear_graph
>>> g = linear_graph(3)
>>> seq = from_schedule(g, Schedule.checkpoint_all(g))
>>> sim = simulate_sequence(g, seq)
>>> (sim.total_cost, sim.peak_memory_bytes) == (simulate(g, Schedule.checkpoint_all(g)).total_cost,
...                                              simulate(g, Schedule.checkpoint_all(g)).peak_memory_bytes)
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InvalidScheduleError
from .graph import Graph
from .schedule import Schedule
from .simulate import SimulationResult

__all__ = ["COMPUTE", "FREE", "OpSequence", "from_schedule", "simulate_sequence", "two_phases"]

COMPUTE = 0
FREE = 1


@dataclass(frozen=True)
class OpSequence:
    """A run as events: ``kind[e]`` is ``COMPUTE`` or ``FREE`` of ``node[e]``.

    Values not freed by the end stay resident (they do not change the peak).
    """

    kind: np.ndarray
    node: np.ndarray

    def __post_init__(self) -> None:
        kind = np.ascontiguousarray(self.kind, dtype=np.int8)
        node = np.ascontiguousarray(self.node, dtype=np.int64)
        if kind.ndim != 1 or node.shape != kind.shape:
            raise ValueError(f"`kind` and `node` must be 1-d arrays of one length; got {kind.shape} and "
                             f"{node.shape}")
        if kind.size and not np.isin(kind, (COMPUTE, FREE)).all():
            raise ValueError("`kind` must hold only COMPUTE (0) and FREE (1)")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "node", node)

    def __len__(self) -> int:
        return int(self.kind.size)

    def computations(self) -> np.ndarray:
        """The nodes computed, in order."""
        return self.node[self.kind == COMPUTE]

    def to_dict(self) -> dict:
        """JSON-ready form: ``{"kind": [0 compute / 1 free, ...], "node": [...]}``.

        Examples
        --------
        >>> seq = OpSequence([COMPUTE, COMPUTE, FREE], [0, 1, 0])
        >>> OpSequence.from_dict(seq.to_dict()) == seq
        True
        """
        return {"kind": self.kind.tolist(), "node": self.node.tolist()}

    @classmethod
    def from_dict(cls, data) -> "OpSequence":
        """Inverse of :meth:`to_dict` (judge the result with :func:`simulate_sequence` before use).

        Raises
        ------
        InvalidScheduleError
            If ``kind`` or ``node`` is missing, not a list of integers, or
            the two differ in length.
        """
        try:
            kind, node = data["kind"], data["node"]
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in list(kind) + list(node)):
                raise TypeError("entries must be integers")
            return cls(np.asarray(kind, dtype=np.int64), np.asarray(node, dtype=np.int64))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidScheduleError(f"sequence JSON needs `kind` and `node`, lists of integers of one length "
                                       f"(`kind` 0 compute / 1 free): {exc}") from None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OpSequence):
            return NotImplemented
        return np.array_equal(self.kind, other.kind) and np.array_equal(self.node, other.node)

    __hash__ = None  # type: ignore[assignment]


def from_schedule(graph: Graph, schedule: Schedule) -> OpSequence:
    """The sequence of events a stage schedule stands for.

    Within stage ``t`` the computations run in ascending node order; after
    computing ``k``, each input whose last reader in the stage is ``k`` and
    that is not kept into stage ``t + 1`` is freed (the simulator's rule). At
    the stage's end every value resident beyond what ``S[t + 1]`` keeps is
    freed, so that stage ``t + 1`` starts with exactly its kept values.

    Raises
    ------
    InvalidScheduleError
        If the schedule has the wrong number of stages.
    """
    if schedule.n != graph.n:
        raise InvalidScheduleError(f"schedule has {schedule.n} stages but the graph has {graph.n} nodes")
    n = graph.n
    dep_ptr, dep_idx = graph.csr[0], graph.csr[1]
    R_ptr, R_idx, S_ptr, S_idx = schedule.csr
    kinds: list[int] = []
    nodes: list[int] = []
    count = [0] * n   # resident copies (the simulator counts a kept and recomputed value twice)
    resident: set[int] = set()   # count > 0, and count > 1: the stage boundary looks only at these (not all n)
    multi: set[int] = set()
    S_list = [S_idx[S_ptr[t]:S_ptr[t + 1]].tolist() for t in range(n)]
    R_list = [R_idx[R_ptr[t]:R_ptr[t + 1]].tolist() for t in range(n)]
    deps = [dep_idx[dep_ptr[k]:dep_ptr[k + 1]].tolist() for k in range(n)]
    for t in range(n):
        kept_next = set(S_list[t + 1]) if t + 1 < n else set()
        computed = R_list[t]
        last_user: dict[int, int] = {}
        for k in computed:
            for i in deps[k]:
                last_user[i] = k
        for k in computed:
            kinds.append(COMPUTE)
            nodes.append(k)
            count[k] += 1
            resident.add(k)
            if count[k] > 1:
                multi.add(k)
            for i in deps[k]:
                if last_user[i] == k and i not in kept_next and count[i] > 0:
                    kinds.append(FREE)
                    nodes.append(i)
                    count[i] -= 1
                    if count[i] < 2:
                        multi.discard(i)
                    if count[i] == 0:
                        resident.discard(i)
        # the stage boundary: keep exactly S[t + 1] (frees in ascending node order)
        for i in sorted((resident - kept_next) | multi):
            extra = count[i] - (1 if i in kept_next else 0)
            if extra > 0:
                kinds.extend([FREE] * extra)
                nodes.extend([i] * extra)
                count[i] -= extra
            multi.discard(i)
            if count[i] == 0:
                resident.discard(i)
    return OpSequence(np.asarray(kinds, dtype=np.int8), np.asarray(nodes, dtype=np.int64))


def simulate_sequence(graph: Graph, sequence: OpSequence, timeline: bool = True) -> SimulationResult:
    """Cost and peak memory of ``sequence`` on ``graph`` (the accounting of :func:`remat_core.simulate`).

    Memory starts at ``graph.fixed_bytes``; computing ``k`` needs every input
    resident, adds ``memory_bytes[k]`` and the instant's memory is that plus
    ``workspace_bytes[k]``; freeing ``i`` removes one resident copy. Every
    node must be computed at least once. ``peak_stage`` of the result is the
    event index of the peak.

    Raises
    ------
    InvalidScheduleError
        Naming the event: an input not resident, a free of a value not
        resident, a node out of range, or a node never computed.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    if not isinstance(sequence, OpSequence):
        raise TypeError(f"`sequence` must be an OpSequence; got {type(sequence).__name__}")
    n = graph.n
    if len(sequence) and (sequence.node.min() < 0 or sequence.node.max() >= n):
        bad = int(np.flatnonzero((sequence.node < 0) | (sequence.node >= n))[0])
        raise InvalidScheduleError(f"event {bad} names node {int(sequence.node[bad])}, outside 0..{n - 1}")
    dep_ptr, dep_idx = graph.csr[0], graph.csr[1]
    mem, ws = graph.memory_bytes.tolist(), graph.workspace_bytes.tolist()
    count = [0] * n
    computed = np.zeros(n, dtype=np.int64)
    current = int(graph.fixed_bytes)
    peak, peak_event, peak_node = current, -1, -1
    steps: list[int] = []
    for e, (kind, k) in enumerate(zip(sequence.kind.tolist(), sequence.node.tolist())):
        if kind == COMPUTE:
            for i in dep_idx[dep_ptr[k]:dep_ptr[k + 1]].tolist():
                if count[i] == 0:
                    raise InvalidScheduleError(
                        f"event {e} computes node {k} ({graph.names[k]!r}) but its input {i} "
                        f"({graph.names[i]!r}) is not resident", node=k)
            count[k] += 1
            computed[k] += 1
            current += mem[k]
            at = current + ws[k]
            steps.append(at)
            if at > peak:
                peak, peak_event, peak_node = at, e, k
        else:
            if count[k] == 0:
                raise InvalidScheduleError(f"event {e} frees node {k} ({graph.names[k]!r}), which is not resident",
                                           node=k)
            count[k] -= 1
            current -= mem[k]
    missing = np.flatnonzero(computed == 0)
    if missing.size:
        k = int(missing[0])
        raise InvalidScheduleError(f"node {k} ({graph.names[k]!r}) is never computed", node=k)
    extra = {}
    if timeline:
        comp = sequence.kind == COMPUTE
        extra = dict(step_stage=np.flatnonzero(comp).astype(np.int64), step_node=sequence.node[comp].copy(),
                     step_memory_bytes=np.asarray(steps, dtype=np.int64))
    return SimulationResult(total_cost=float(graph.cost @ computed) if n else 0.0, peak_memory_bytes=int(peak),
                            peak_stage=int(peak_event), peak_node=int(peak_node), compute_counts=computed,
                            **extra)


def two_phases(graph: Graph) -> bool:
    """Whether a run of ``graph`` must compute every forward node before any backward node: the graph marks both
    kinds (``graph.is_backward``) as recorded by its adapter. A split only guessed from the numbering
    (``graph.meta["backward_inferred"]``, the DTR recordings) is not enforced."""
    bwd = graph.is_backward
    return bool(bwd.any() and not bwd.all() and not graph.meta.get("backward_inferred"))
