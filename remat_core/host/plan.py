"""Host plans: execution plans with copies to and from host memory.

A :class:`HostPlan` is an ordered list of statements run by one compute
stream, with copies handed to one copy stream:

* ``Compute(node, register, inputs, stage)`` and ``Free(register, node)`` as in
  :mod:`remat_core.plan` (a ``Free`` waits for a copy still running on its
  register: device memory holds a value being copied out until the copy ends);
* :class:`Offload` starts copying a device register to a host slot (the slot
  is named by the register);
* :class:`Prefetch` allocates a new device register and starts copying a host
  slot into it; a read of that register waits for the copy;
* :class:`Wait` makes the compute stream wait for the copy on a register.

A host slot lives from its ``Offload`` until the copy of its last
``Prefetch`` ends.

Partial offloading (a value split in two chunks, one of which goes to the
host, as in Beaumont et al.'s partial offloading) has three statements on a
register: :class:`OffloadPart` starts copying its first ``nbytes`` to the
host, :class:`DropPart` frees that chunk on the device (the register stays
live with the rest, but cannot be read), and :class:`RestorePart` allocates
the chunk again and copies it back (a read waits for the copy).

With a :class:`~remat_core.host.state.StateLayout` (``HostPlan(...,
layout=...)``), three statements move the training state (parameters, their
gradients, the input batch) named by block index:

* :class:`DropState` frees a block's device copy (after any copy on it);
* :class:`FetchState` allocates a parameter or input block and starts copying
  it from the host;
* :class:`SaveState` starts copying a gradient block to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ..plan import Compute, ExecutionPlan, Free, InvalidPlanError, StatementList

__all__ = ["Offload", "Prefetch", "Wait", "OffloadPart", "DropPart", "RestorePart", "FetchState", "DropState", "SaveState", "HostStatement", "HostPlan",
           "host_plan_from_execution_plan"]


@dataclass(frozen=True)
class Offload:
    """Start copying device ``register`` (the value of ``node``) to the host slot ``register``."""

    register: int
    node: int


@dataclass(frozen=True)
class Prefetch:
    """Allocate device ``register`` and start copying host slot ``host`` (the value of ``node``) into it."""

    node: int
    host: int
    register: int


@dataclass(frozen=True)
class Wait:
    """The compute stream waits until the copy on ``register`` has ended."""

    register: int


@dataclass(frozen=True)
class OffloadPart:
    """Start copying the first ``nbytes`` of device ``register`` (the value of ``node``) to the host."""

    register: int
    node: int
    nbytes: int


@dataclass(frozen=True)
class DropPart:
    """Free the chunk of ``register`` copied to the host (after its copy); the rest stays on the device."""

    register: int


@dataclass(frozen=True)
class RestorePart:
    """Allocate the chunk of ``register`` on the host again and start copying it back."""

    register: int


@dataclass(frozen=True)
class FetchState:
    """Allocate state block ``block`` (a parameter or input block) on the device and start copying it in."""

    block: int


@dataclass(frozen=True)
class DropState:
    """Free the device copy of state block ``block`` (the compute stream waits for a copy still on it)."""

    block: int


@dataclass(frozen=True)
class SaveState:
    """Start copying gradient block ``block`` to the host."""

    block: int


HostStatement = Union[Compute, Free, Offload, Prefetch, Wait, OffloadPart, DropPart, RestorePart, FetchState,
                      DropState, SaveState]
_STATE = (FetchState, DropState, SaveState)
_PART = (OffloadPart, DropPart, RestorePart)


class HostPlan(StatementList):
    """An ordered list of compute, free and copy statements for one training step.

    Attributes
    ----------
    statements : tuple
    num_nodes : int
    layout : StateLayout or None
        The state blocks the ``*State`` statements name (``None``: the
        training state stays on the device).
    """

    def __init__(self, statements: list[HostStatement], num_nodes: int, layout: Any = None):
        self.statements = tuple(statements)
        self.num_nodes = int(num_nodes)
        self.layout = layout
        if layout is not None and getattr(layout, "num_nodes", None) != self.num_nodes:
            raise InvalidPlanError(f"`layout` must be a StateLayout of a graph of {self.num_nodes} nodes; "
                                   f"got {layout!r}")
        for pos, s in enumerate(self.statements):
            if not isinstance(s, (Compute, Free, Offload, Prefetch, Wait) + _STATE + _PART):
                raise InvalidPlanError(f"statement {pos} is not a host plan statement: {s!r}")
            if isinstance(s, _STATE) and (layout is None or not 0 <= s.block < len(layout.blocks)):
                raise InvalidPlanError(f"statement {pos} names state block {s.block}, which the plan's layout "
                                       f"does not have")

    @property
    def num_state_copies(self) -> int:
        """Copies of state blocks (fetches and saves)."""
        return sum(1 for s in self.statements if isinstance(s, (FetchState, SaveState)))

    def dropped_blocks(self) -> list[int]:
        """State blocks the plan takes off the device at least once, sorted."""
        return sorted({s.block for s in self.statements if isinstance(s, DropState)})

    @property
    def num_offloads(self) -> int:
        """Copies to the host (whole values and chunks)."""
        return sum(1 for s in self.statements if isinstance(s, (Offload, OffloadPart)))

    @property
    def num_partial_offloads(self) -> int:
        """Copies of a chunk of a value to the host."""
        return sum(1 for s in self.statements if isinstance(s, OffloadPart))

    @property
    def num_prefetches(self) -> int:
        """Copies back to the device (whole values and chunks)."""
        return sum(1 for s in self.statements if isinstance(s, (Prefetch, RestorePart)))

    def offloaded_nodes(self) -> list[int]:
        """Nodes copied to the host at least once, sorted."""
        return sorted({s.node for s in self.statements if isinstance(s, (Offload, OffloadPart))})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``["compute", node, register, inputs, stage]``, ``["free", register, node]``,
        ``["offload", register, node]``, ``["prefetch", node, host, register]``, ``["wait", register]``,
        ``["offload_part", register, node, nbytes]``, ``["drop_part", register]``, ``["restore_part", register]``,
        ``["fetch_state", block]``, ``["drop_state", block]``, ``["save_state", block]``; with a layout, also
        ``"layout"``."""
        out = []
        for s in self.statements:
            if isinstance(s, Compute):
                out.append(["compute", s.node, s.register, list(s.inputs), s.stage])
            elif isinstance(s, Free):
                out.append(["free", s.register, s.node])
            elif isinstance(s, Offload):
                out.append(["offload", s.register, s.node])
            elif isinstance(s, Prefetch):
                out.append(["prefetch", s.node, s.host, s.register])
            elif isinstance(s, Wait):
                out.append(["wait", s.register])
            elif isinstance(s, OffloadPart):
                out.append(["offload_part", s.register, s.node, s.nbytes])
            elif isinstance(s, DropPart):
                out.append(["drop_part", s.register])
            elif isinstance(s, RestorePart):
                out.append(["restore_part", s.register])
            else:
                out.append([_STATE_NAMES[type(s)], s.block])
        d = {"num_nodes": self.num_nodes, "statements": out}
        if self.layout is not None:
            d["layout"] = self.layout.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any], graph: Any = None) -> "HostPlan":
        """Inverse of :meth:`to_dict` (a plan with a state layout needs the ``graph`` it was made for)."""
        makers = {"compute": lambda a: Compute(int(a[0]), int(a[1]), tuple(int(i) for i in a[2]), int(a[3])),
                  "free": lambda a: Free(int(a[0]), int(a[1])), "offload": lambda a: Offload(int(a[0]), int(a[1])),
                  "prefetch": lambda a: Prefetch(int(a[0]), int(a[1]), int(a[2])), "wait": lambda a: Wait(int(a[0])),
                  "fetch_state": lambda a: FetchState(int(a[0])), "drop_state": lambda a: DropState(int(a[0])),
                  "save_state": lambda a: SaveState(int(a[0])),
                  "offload_part": lambda a: OffloadPart(int(a[0]), int(a[1]), int(a[2])),
                  "drop_part": lambda a: DropPart(int(a[0])), "restore_part": lambda a: RestorePart(int(a[0]))}
        try:
            stmts = [makers[s[0]](s[1:]) for s in data["statements"]]
            layout = None
            if data.get("layout") is not None:
                if graph is None:
                    raise ValueError("the plan has a state layout: pass the graph")
                from .state import StateLayout

                layout = StateLayout.from_dict(graph, data["layout"])
            return cls(stmts, int(data["num_nodes"]), layout=layout)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise InvalidPlanError(f"not a host plan: {exc!r}") from None

    def __repr__(self) -> str:
        state = f", {len(self.dropped_blocks())} state blocks moved" if self.layout is not None else ""
        return (f"<HostPlan: {sum(1 for s in self.statements if isinstance(s, Compute))} computes, "
                f"{self.num_offloads} offloads, {self.num_prefetches} prefetches{state}>")


_STATE_NAMES = {FetchState: "fetch_state", DropState: "drop_state", SaveState: "save_state"}


def host_plan_from_execution_plan(plan: ExecutionPlan) -> HostPlan:
    """The same statements as a host plan (no copies).

    Examples
    --------
    >>> from remat_core import Schedule, make_plan
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(2)
    >>> host_plan_from_execution_plan(make_plan(g, Schedule.checkpoint_all(g)))
    <HostPlan: 5 computes, 0 offloads, 0 prefetches>
    """
    if not isinstance(plan, ExecutionPlan):
        raise TypeError(f"`plan` must be a remat_core.ExecutionPlan; got {type(plan).__name__}")
    return HostPlan(list(plan.statements), plan.num_nodes)
