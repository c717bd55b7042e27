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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ..plan import Compute, ExecutionPlan, Free, InvalidPlanError, StatementList

__all__ = ["Offload", "Prefetch", "Wait", "HostStatement", "HostPlan", "host_plan_from_execution_plan"]


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


HostStatement = Union[Compute, Free, Offload, Prefetch, Wait]


class HostPlan(StatementList):
    """An ordered list of compute, free and copy statements for one training step.

    Attributes
    ----------
    statements : tuple
    num_nodes : int
    """

    def __init__(self, statements: list[HostStatement], num_nodes: int):
        self.statements = tuple(statements)
        self.num_nodes = int(num_nodes)
        for pos, s in enumerate(self.statements):
            if not isinstance(s, (Compute, Free, Offload, Prefetch, Wait)):
                raise InvalidPlanError(f"statement {pos} is not a host plan statement: {s!r}")

    @property
    def num_offloads(self) -> int:
        """Copies to the host."""
        return sum(1 for s in self.statements if isinstance(s, Offload))

    @property
    def num_prefetches(self) -> int:
        """Copies back to the device."""
        return sum(1 for s in self.statements if isinstance(s, Prefetch))

    def offloaded_nodes(self) -> list[int]:
        """Nodes copied to the host at least once, sorted."""
        return sorted({s.node for s in self.statements if isinstance(s, Offload)})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``["compute", node, register, inputs, stage]``, ``["free", register, node]``,
        ``["offload", register, node]``, ``["prefetch", node, host, register]``, ``["wait", register]``."""
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
            else:
                out.append(["wait", s.register])
        return {"num_nodes": self.num_nodes, "statements": out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HostPlan":
        """Inverse of :meth:`to_dict`."""
        makers = {"compute": lambda a: Compute(int(a[0]), int(a[1]), tuple(int(i) for i in a[2]), int(a[3])),
                  "free": lambda a: Free(int(a[0]), int(a[1])), "offload": lambda a: Offload(int(a[0]), int(a[1])),
                  "prefetch": lambda a: Prefetch(int(a[0]), int(a[1]), int(a[2])), "wait": lambda a: Wait(int(a[0]))}
        try:
            stmts = [makers[s[0]](s[1:]) for s in data["statements"]]
            return cls(stmts, int(data["num_nodes"]))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise InvalidPlanError(f"not a host plan: {exc!r}") from None

    def __repr__(self) -> str:
        return (f"<HostPlan: {sum(1 for s in self.statements if isinstance(s, Compute))} computes, "
                f"{self.num_offloads} offloads, {self.num_prefetches} prefetches>")


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
