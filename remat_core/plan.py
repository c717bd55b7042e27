"""Execution plans: a schedule turned into compute/free statements.

:func:`make_plan` implements Checkmate's Algorithm 1. Every computation gets a
fresh virtual register; a ``Free`` statement releases a register. Without
hoisting, frees happen exactly where the simulator frees (after the last user
in a stage of a value not kept into the next stage, and at the end of each
stage), so :func:`replay` reproduces the simulator's timeline step for step.
With hoisting (the default), each register is freed right after its last
read (or right after it is computed, if nothing reads it), which can only
lower memory; :func:`replay` of a hoisted plan is never above the simulator at
any step.

Executors (``remat_torch``, ``remat_tf``) run these statements in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Union

import numpy as np

from .errors import RematError, ScheduleVerificationError
from .graph import Graph
from .schedule import RematResult, Schedule
from .simulate import simulate

if TYPE_CHECKING:  # pragma: no cover
    from .sequence import OpSequence

__all__ = ["Compute", "Free", "ExecutionPlan", "ReplayResult", "InvalidPlanError", "make_plan", "replay"]


class InvalidPlanError(RematError, ValueError):
    """An execution plan reads a dead register, frees one twice, or leaks one."""


@dataclass(frozen=True)
class Compute:
    """Compute ``node`` into a new ``register`` from the registers ``inputs``.

    ``inputs`` follows ``graph.deps[node]`` order.
    """

    node: int
    register: int
    inputs: tuple[int, ...]
    stage: int


@dataclass(frozen=True)
class Free:
    """Release ``register`` (which holds the value of ``node``)."""

    register: int
    node: int


Statement = Union[Compute, Free]


class StatementList:
    """What every plan form shares: its ``statements`` in order over ``num_nodes`` nodes (the host tier's
    ``remat_core.host.HostPlan`` adds copy statements to the same list)."""

    statements: tuple
    num_nodes: int

    def __iter__(self) -> Iterator[Statement]:
        return iter(self.statements)

    def __len__(self) -> int:
        return len(self.statements)

    def computes(self) -> list[Compute]:
        """The compute statements, in order."""
        return [s for s in self.statements if isinstance(s, Compute)]

    def compute_counts(self) -> np.ndarray:
        """How many times the plan computes each node."""
        return np.bincount([s.node for s in self.computes()], minlength=self.num_nodes).astype(np.int64)


class ExecutionPlan(StatementList):
    """An ordered list of :class:`Compute` and :class:`Free` statements.

    Attributes
    ----------
    statements : tuple of Compute or Free
    num_registers : int
    hoisted : bool
    """

    def __init__(self, statements: list[Statement], num_nodes: int, hoisted: bool):
        self.statements = tuple(statements)
        self.num_nodes = num_nodes
        self.num_registers = sum(1 for s in self.statements if isinstance(s, Compute))
        self.hoisted = hoisted


    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: a list of ``["compute", node, register, inputs, stage]`` / ``["free", register, node]``."""
        return {
            "num_nodes": self.num_nodes,
            "hoisted": self.hoisted,
            "statements": [
                ["compute", s.node, s.register, list(s.inputs), s.stage] if isinstance(s, Compute)
                else ["free", s.register, s.node]
                for s in self.statements
            ],
        }

    def __repr__(self) -> str:
        frees = len(self.statements) - self.num_registers
        return f"<ExecutionPlan: {self.num_registers} computes, {frees} frees, hoisted={self.hoisted}>"


def make_plan(graph: Graph, schedule: "Schedule | OpSequence | RematResult", hoist: bool = True) -> ExecutionPlan:
    """Turn a schedule or an operation sequence into an execution plan (Checkmate Algorithm 1).

    Parameters
    ----------
    graph : Graph
    schedule : Schedule, OpSequence or RematResult
        A valid stage schedule for ``graph`` (checked by the simulator
        first), an :class:`~remat_core.sequence.OpSequence` (checked by
        :func:`~remat_core.sequence.simulate_sequence`), or a solver's
        result: its ``sequence`` when it has one (a DTR run recorded as it
        ran: the run its ``objective`` and ``peak_memory_bytes`` describe;
        for the stage run alone it is that schedule's events, whose plan is
        the schedule's), else its :attr:`~RematResult.schedule`. A result's
        plan is replayed and must be within its ``budget_bytes``.
    hoist : bool
        Free each register right after its last read (default). ``False``
        frees exactly where the simulator does (for a sequence: at its free
        events, so :func:`replay` gives the sequence's simulated timeline).

    Returns
    -------
    ExecutionPlan
        For a sequence, a compute's ``stage`` is its node for the node's
        first computation; a recomputation belongs to the stage of the next
        first computation (as in a Checkmate stage, recomputations come
        before the stage's new node), or to ``graph.n`` after the last one.
        So ``stage == node`` exactly on first computations, as executors
        assume.

    Raises
    ------
    InvalidScheduleError
        If the schedule or sequence is invalid for ``graph`` (naming the
        stage or event).
    InvalidPlanError
        If a sequence computes a backward node before the first computation
        of every forward node, on a graph whose adapter marked them
        (:func:`remat_core.sequence.two_phases`): the executors run the forward
        part, hand out the loss, then the backward part.
    ScheduleVerificationError
        If a result's plan replays above its ``budget_bytes`` (a bug).
    RematError
        If ``schedule`` is a result with neither a schedule nor a sequence
        (the solve failed).

    Examples
    --------
    >>> from remat_core import Schedule
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(1)
    >>> plan = make_plan(g, Schedule.checkpoint_all(g))
    >>> [type(s).__name__ for s in plan][:4]
    ['Compute', 'Compute', 'Compute', 'Free']
    >>> from remat_core import solve
    >>> res = solve(linear_graph(8), 6, method="dtr", order="given")
    >>> replay(linear_graph(8), make_plan(linear_graph(8), res.sequence)).peak_memory_bytes <= 6
    True
    """
    from .sequence import OpSequence

    budget = None
    if isinstance(schedule, RematResult):
        res = schedule
        if res.sequence is not None and res.success:   # the run that objective and peak_memory_bytes describe
            schedule = res.sequence
        elif res.schedule is not None:
            schedule = res.schedule
        else:
            raise RematError(f"no schedule to plan: status is {res.status.value} ({res.message})")
        budget = int(res.budget_bytes) if res.budget_bytes else None
    if isinstance(schedule, OpSequence):
        plan = _plan_sequence(graph, schedule, hoist)
    elif isinstance(schedule, Schedule):
        plan = _plan_schedule(graph, schedule, hoist)
    else:
        raise TypeError(f"`schedule` must be a Schedule, an OpSequence or a RematResult; got "
                        f"{type(schedule).__name__}")
    if budget is not None:
        peak = replay(graph, plan).peak_memory_bytes
        if peak > budget:
            raise ScheduleVerificationError(f"the plan of this result replays at {peak} bytes, over its budget "
                                            f"{budget} bytes")
    return plan


def _plan_schedule(graph: Graph, schedule: Schedule, hoist: bool) -> ExecutionPlan:
    """Algorithm 1 over the stages of ``schedule``."""
    simulate(graph, schedule, timeline=False)  # validates; raises InvalidScheduleError
    n = graph.n
    deps = graph.deps
    users = graph.users
    stmts: list[Statement] = []
    live: dict[int, list[int]] = {}  # node -> registers holding it (newest last)
    next_reg = 0
    for t in range(n):
        computed = schedule.R_row(t)
        in_stage = set(computed.tolist())
        keep_next = set(schedule.S_row(t + 1).tolist()) if t + 1 < n else set()
        for k in computed.tolist():
            inputs = tuple(live[i][-1] for i in deps[k])
            stmts.append(Compute(node=k, register=next_reg, inputs=inputs, stage=t))
            live.setdefault(k, []).append(next_reg)
            next_reg += 1
            for i in deps[k]:
                if i in keep_next:
                    continue
                if any(j > k and j in in_stage for j in users[i]):
                    continue
                stmts.append(Free(register=live[i].pop(), node=i))
                if not live[i]:
                    del live[i]
        for i in sorted(live):
            regs = live[i]
            keep = 1 if i in keep_next else 0
            while len(regs) > keep:
                stmts.append(Free(register=regs.pop(0), node=i))
            if not regs:
                del live[i]
    if hoist:
        stmts = _hoist(stmts)
    return ExecutionPlan(stmts, n, hoisted=hoist)


def _plan_sequence(graph: Graph, sequence, hoist: bool) -> ExecutionPlan:
    """The statements of an operation sequence: a compute reads the newest resident copy of each input, a free
    releases the oldest copy (copies hold the same value), and what is resident at the end is freed then."""
    from .sequence import COMPUTE, simulate_sequence, two_phases

    simulate_sequence(graph, sequence, timeline=False)   # validates; raises InvalidScheduleError naming the event
    n = graph.n
    kinds, nodes = sequence.kind.tolist(), sequence.node.tolist()
    is_compute = [kd == COMPUTE for kd in kinds]
    # first computations, and the stage label of every compute (see make_plan)
    first = [False] * len(kinds)
    seen = [False] * n
    for e, k in enumerate(nodes):
        if is_compute[e] and not seen[k]:
            seen[k] = first[e] = True
    label = [n] * len(kinds)
    upcoming = n
    for e in range(len(kinds) - 1, -1, -1):
        if is_compute[e]:
            if first[e]:
                upcoming = nodes[e]
            label[e] = upcoming
    bwd = graph.is_backward
    if two_phases(graph):
        first_pos = {k: e for e, k in enumerate(nodes) if first[e]}
        last_forward = max(first_pos[k] for k in np.flatnonzero(~bwd).tolist())
        early = next((e for e in range(last_forward) if is_compute[e] and bwd[nodes[e]]), None)
        if early is not None:
            late = max((k for k in np.flatnonzero(~bwd).tolist()), key=lambda k: first_pos[k])
            raise InvalidPlanError(
                f"the sequence computes backward node {nodes[early]} ({graph.names[nodes[early]]!r}) at event "
                f"{early}, before the first computation of forward node {late} ({graph.names[late]!r}) at event "
                f"{last_forward}; executors run every forward node's first computation before the backward")
    deps = graph.deps
    stmts: list[Statement] = []
    live: dict[int, list[int]] = {}   # node -> registers holding it (oldest first)
    reg = 0
    for e, k in enumerate(nodes):
        if is_compute[e]:
            stmts.append(Compute(node=k, register=reg, inputs=tuple(live[i][-1] for i in deps[k]), stage=label[e]))
            live.setdefault(k, []).append(reg)
            reg += 1
        else:
            stmts.append(Free(register=live[k].pop(0), node=k))
            if not live[k]:
                del live[k]
    for i in sorted(live):
        for r in live[i]:
            stmts.append(Free(register=r, node=i))
    if hoist:
        stmts = _hoist(stmts)
    return ExecutionPlan(stmts, n, hoisted=hoist)


def _hoist(stmts: list[Statement]) -> list[Statement]:
    """Move every free to right after the last read of its register."""
    computes = [s for s in stmts if isinstance(s, Compute)]
    node_of = {c.register: c.node for c in computes}
    last_read = {c.register: pos for pos, c in enumerate(computes)}  # unread: free after its own compute
    for pos, c in enumerate(computes):
        for r in c.inputs:
            last_read[r] = pos
    frees_after: dict[int, list[int]] = {}
    for r, pos in last_read.items():
        frees_after.setdefault(pos, []).append(r)
    out: list[Statement] = []
    for pos, c in enumerate(computes):
        out.append(c)
        for r in sorted(frees_after.get(pos, ())):
            out.append(Free(register=r, node=node_of[r]))
    return out


@dataclass(frozen=True)
class ReplayResult:
    """Memory of a replayed plan: ``step_memory_bytes`` has one entry per compute."""

    peak_memory_bytes: int
    step_memory_bytes: np.ndarray
    total_cost: float


def replay(graph: Graph, plan: ExecutionPlan) -> ReplayResult:
    """Run a plan on paper, tracking live registers; the plan checker.

    Memory at a compute step is fixed bytes + every live register (the new
    output included) + the node's workspace, as in the simulator.

    Raises
    ------
    InvalidPlanError
        If a statement reads a register that is not live or holds another
        node's value, writes a register twice, frees a dead register, or if
        registers are still live at the end.
    """
    mem = graph.memory_bytes
    ws = graph.workspace_bytes
    holds: dict[int, int] = {}
    used: set[int] = set()
    current = graph.fixed_bytes
    steps: list[int] = []
    cost = 0.0
    for pos, s in enumerate(plan.statements):
        if isinstance(s, Compute):
            if not 0 <= s.node < graph.n:
                raise InvalidPlanError(f"statement {pos} computes unknown node {s.node}")
            if len(s.inputs) != len(graph.deps[s.node]):
                raise InvalidPlanError(f"statement {pos}: node {s.node} needs {len(graph.deps[s.node])} inputs")
            for r, i in zip(s.inputs, graph.deps[s.node]):
                if holds.get(r) != i:
                    raise InvalidPlanError(
                        f"statement {pos}: node {s.node} reads register {r}, which does not hold live node {i}"
                    )
            if s.register in used:
                raise InvalidPlanError(f"statement {pos} writes register {s.register} a second time")
            used.add(s.register)
            holds[s.register] = s.node
            current += int(mem[s.node])
            steps.append(current + int(ws[s.node]))
            cost += float(graph.cost[s.node])
        elif isinstance(s, Free):
            if holds.get(s.register) is None:
                raise InvalidPlanError(f"statement {pos} frees register {s.register}, which is not live")
            current -= int(mem[holds.pop(s.register)])
        else:
            raise InvalidPlanError(f"statement {pos} is not a Compute or Free: {s!r}")
    if holds:
        raise InvalidPlanError(f"registers still live at the end of the plan: {sorted(holds)[:10]}")
    arr = np.asarray(steps, dtype=np.int64)
    return ReplayResult(peak_memory_bytes=int(arr.max()) if arr.size else graph.fixed_bytes,
                        step_memory_bytes=arr, total_cost=cost)
