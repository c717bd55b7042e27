"""The host-tier simulator: the judge of every host plan.

Model (``docs/offload.rst``):

* one compute stream runs the statements in order; a ``Compute`` of node ``k``
  takes ``cost[k]`` (the graph's cost unit);
* one copy stream runs the copies first in, first out; a copy of ``b`` bytes
  takes ``b / host_bandwidth`` seconds, converted to cost units with
  :func:`cost_per_second`; it starts when it is issued or when the previous
  copy ends, whichever is later;
* a ``Compute`` reading a prefetched register, a ``Wait`` on it, and a ``Free``
  of a register with a copy still running (in either direction) make the
  compute stream wait for that copy: these waits are the *stalls*;
* device memory is counted along the statements, as in
  :func:`remat_core.replay`: a ``Compute`` adds its value (the peak at that
  instant adds the node's workspace), a ``Prefetch`` adds its value when it is
  issued (the buffer is allocated then), a ``Free`` removes one after any copy
  on it has ended. So a value being copied out counts until the copy ends and
  a value being copied back counts from the start of the copy;
* host memory counts a slot from its ``Offload`` until the copy of its last
  ``Prefetch`` ends (a slot never read back: until its own copy ends);
* partial offloading: an ``OffloadPart`` copies a chunk of a register to the
  host, a ``DropPart`` removes the chunk from device memory once that copy
  has ended (the register stays live but cannot be read), a ``RestorePart``
  adds it back when issued and copies it in (a read waits for it); a
  ``Free`` removes what of the register is on the device. The host holds the
  chunk from its ``OffloadPart`` until its ``RestorePart`` copy ends.

* with a state layout (:mod:`remat_core.host.state`), every block starts on
  the device (inside ``fixed_bytes``, as without a host tier). A
  ``DropState`` removes a block after any copy on it has ended; a
  ``FetchState`` adds it when issued and copies it in (the drops before the
  first computation place a block on the host between steps: the device peak
  is taken from the first allocation on); a ``Compute`` needs
  the blocks its node reads or writes on the device (it waits for a fetch); a
  gradient block off the device is allocated by its writer's compute (counted
  at that instant); a ``SaveState`` copies a gradient to the host. A
  gradient may only be dropped before its first write or once saved after
  its last write. Host memory holds every parameter and input block the
  plan drops (their master copies) for the whole step and each saved
  gradient from its save on.

Without copies the device peak is :func:`remat_core.replay`'s and the time is
the plan's compute cost.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..graph import Graph
from ..plan import Compute, Free, InvalidPlanError
from .plan import DropPart, DropState, FetchState, HostPlan, Offload, OffloadPart, Prefetch, RestorePart, SaveState, Wait

__all__ = ["HostSimulation", "simulate_host", "cost_per_second", "validate_bandwidth", "DEFAULT_HOST_BANDWIDTH",
           "DEFAULT_FLOPS_PER_S"]

#: Host <-> device bandwidth used when none is measured: 16 GB/s, a PCIe 4.0 x16 link in one direction.
DEFAULT_HOST_BANDWIDTH = 16e9
#: Device throughput assumed for graphs whose cost unit is ``"flop"``: 20 TFLOP/s, about an A100's FP32 peak.
DEFAULT_FLOPS_PER_S = 20e12

_UNIT_PER_S = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
_BW_RE = re.compile(r"^\s*(.+?)\s*(/\s*s)?\s*$", re.IGNORECASE)


def validate_bandwidth(host_bandwidth: Any, argument: str = "host_bandwidth") -> float | None:
    """``None`` (no host tier) or a bandwidth in bytes/s.

    Accepts a number of bytes/s, ``math.inf`` (free copies), a string such as
    ``"16GB/s"`` or ``"16GiB"``, ``None`` or ``0`` (both: no host tier).

    Raises
    ------
    TypeError, ValueError
        Naming ``argument``.

    Examples
    --------
    >>> validate_bandwidth("16GB/s"), validate_bandwidth(0), validate_bandwidth(None)
    (16000000000.0, None, None)
    """
    if host_bandwidth is None:
        return None
    if isinstance(host_bandwidth, str):
        from ..units import parse_bytes

        m = _BW_RE.match(host_bandwidth)
        text = m.group(1) if m else host_bandwidth
        if text.strip().lower() in ("inf", "infinite"):
            return math.inf
        try:
            return float(parse_bytes(text, argument))
        except (TypeError, ValueError):
            raise ValueError(f"`{argument}` must be bytes per second such as '16GB/s' or 16e9; "
                             f"got {host_bandwidth!r}") from None
    if isinstance(host_bandwidth, bool) or not isinstance(host_bandwidth, numbers.Real):
        raise TypeError(f"`{argument}` must be bytes per second (a number or a string such as '16GB/s'); "
                        f"got {host_bandwidth!r}")
    bw = float(host_bandwidth)
    if bw != bw or bw < 0:
        raise ValueError(f"`{argument}` must be >= 0 bytes per second; got {host_bandwidth!r}")
    return None if bw == 0 else bw


def cost_per_second(graph: Graph, cost_per_s: float | None = None) -> float:
    """How many of the graph's cost units one second holds.

    From ``graph.meta["cost_unit"]``: ``"s"``, ``"ms"``, ``"us"``, ``"ns"``, or
    ``"flop"`` (at ``DEFAULT_FLOPS_PER_S``). ``cost_per_s`` overrides it and
    is required for any other unit.

    Raises
    ------
    ValueError
        If the unit is unknown and ``cost_per_s`` is not given, or
        ``cost_per_s`` is not a positive finite number.
    """
    if cost_per_s is not None:
        if isinstance(cost_per_s, bool) or not isinstance(cost_per_s, numbers.Real) or not (
                0 < float(cost_per_s) < math.inf):
            raise ValueError(f"`cost_per_s` must be a positive finite number; got {cost_per_s!r}")
        return float(cost_per_s)
    unit = str(graph.meta.get("cost_unit", "")).lower()
    if unit in _UNIT_PER_S:
        return _UNIT_PER_S[unit]
    if unit == "flop":
        return DEFAULT_FLOPS_PER_S
    raise ValueError(f"graph {graph.name!r} has cost unit {unit or 'unknown'!r}: pass `cost_per_s` (cost units per "
                     f"second) so that a copy's time can be compared with compute")


@dataclass(frozen=True)
class HostSimulation:
    """What :func:`simulate_host` found.

    Attributes
    ----------
    time : float
        Compute plus stalls, in the graph's cost unit.
    compute_cost : float
        Sum of the costs of every computation.
    stall : float
        Time the compute stream waited for copies.
    peak_device_bytes, peak_host_bytes : int
        Fixed bytes included in the device peak.
    copied_bytes : int
        Bytes moved in both directions.
    compute_counts : numpy.ndarray
    step_memory_bytes : numpy.ndarray
        Device memory at each computation (its workspace included).
    step_start : numpy.ndarray
        When each computation starts.
    copies : list of tuple
        ``(kind, node, start, end)`` per copy, ``kind`` ``"offload"`` or ``"prefetch"``.
    host_timeline : list of tuple
        ``(time, host bytes from then on)``, in time order.
    """

    time: float
    compute_cost: float
    stall: float
    peak_device_bytes: int
    peak_host_bytes: int
    copied_bytes: int
    compute_counts: np.ndarray
    step_memory_bytes: np.ndarray
    step_start: np.ndarray
    copies: list = field(default_factory=list)
    host_timeline: list = field(default_factory=list)

    @property
    def recompute_count(self) -> int:
        """Computations beyond the first of each node."""
        return int((self.compute_counts - 1).clip(min=0).sum())


def simulate_host(graph: Graph, plan: HostPlan, host_bandwidth: Any = None, cost_per_s: float | None = None,
                  ) -> HostSimulation:
    """Simulate a host plan: device and host peaks, and time with stalls.

    Parameters
    ----------
    graph : Graph
    plan : HostPlan
    host_bandwidth : float or str, optional
        Bytes per second (see :func:`validate_bandwidth`); required when the
        plan copies anything.
    cost_per_s : float, optional
        Cost units per second (default: from the graph's cost unit, see
        :func:`cost_per_second`).

    Returns
    -------
    HostSimulation

    Raises
    ------
    InvalidPlanError
        If a statement reads a register that is not live, prefetches a slot
        that was never offloaded, frees twice, or leaves registers live.

    Examples
    --------
    >>> from remat_core import Graph, Node
    >>> from remat_core.host import HostPlan, Offload, Prefetch
    >>> from remat_core.plan import Compute, Free
    >>> g = Graph([Node("a", 2.0, 4), Node("b", 2.0, 4, deps=("a",)), Node("c", 2.0, 4, deps=("a", "b"))],
    ...           meta={"cost_unit": "s"})
    >>> plan = HostPlan([Compute(0, 0, (), 0), Offload(0, 0), Compute(1, 1, (0,), 1), Free(0, 0),
    ...                  Prefetch(0, 0, 2), Compute(2, 3, (2, 1), 2), Free(2, 0), Free(1, 1), Free(3, 2)], 3)
    >>> sim = simulate_host(g, plan, host_bandwidth=4.0)   # a copy of 4 bytes takes 1 s
    >>> sim.time, sim.stall, sim.peak_device_bytes, sim.peak_host_bytes
    (7.0, 1.0, 12, 4)
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    if not isinstance(plan, HostPlan):
        raise TypeError(f"`plan` must be a remat_core.host.HostPlan; got {type(plan).__name__}")
    if plan.num_nodes != graph.n:
        raise InvalidPlanError(f"the plan has {plan.num_nodes} nodes but the graph has {graph.n}")
    layout = plan.layout
    if layout is not None and layout.fixed_bytes != graph.fixed_bytes:
        raise InvalidPlanError(f"the plan's state layout is for {layout.fixed_bytes} fixed bytes; the graph has "
                               f"{graph.fixed_bytes}")
    bw = validate_bandwidth(host_bandwidth)
    has_copies = any(isinstance(s, (Offload, Prefetch, FetchState, SaveState, OffloadPart, RestorePart))
                     for s in plan.statements)
    if has_copies and bw is None:
        raise ValueError("`host_bandwidth` must be a positive number of bytes/s for a plan that copies to the host")
    cps = cost_per_second(graph, cost_per_s) if has_copies and bw != math.inf else 1.0

    def copy_time(nbytes: int) -> float:
        return 0.0 if bw is None or bw == math.inf else nbytes / bw * cps

    mem = graph.memory_bytes
    ws = graph.workspace_bytes
    cost = graph.cost
    deps = graph.deps
    holds: dict[int, int] = {}          # live device register -> node
    used: set[int] = set()
    pending_in: dict[int, float] = {}   # device register -> end of the prefetch filling it
    pending_out: dict[int, float] = {}  # device register -> end of its copy to the host
    slots: dict[int, int] = {}          # host slot -> node
    slot_end: dict[int, float] = {}     # host slot -> end of its offload copy
    remaining = {}                      # host slot -> prefetches still to come
    part: dict[int, int] = {}           # register -> bytes of its chunk on the host
    dropped: dict[int, int] = {}        # register -> bytes of its chunk off the device
    restores: dict[int, int] = {}       # register -> RestorePart statements still to come
    for s in plan.statements:
        if isinstance(s, Prefetch):
            remaining[s.host] = remaining.get(s.host, 0) + 1
        elif isinstance(s, RestorePart):
            restores[s.register] = restores.get(s.register, 0) + 1
    host_events: list[tuple[float, int]] = []
    copies: list[tuple[str, int, float, float]] = []
    current = graph.fixed_bytes
    # with a state layout, the drops before the first computation say where the state lies between steps: the
    # peak is taken from the first allocation on
    peak = current if layout is None else 0
    tc = tx = 0.0
    compute_cost = 0.0
    copied = 0
    steps: list[int] = []
    starts: list[float] = []

    def wait(r: int, now: float, out: bool = True) -> float:
        ends = [pending_in.pop(r, now)] + ([pending_out.pop(r, now)] if out else [])
        return max([now] + ends)

    blocks = layout.blocks if layout is not None else ()
    on_device = [True] * len(blocks)    # every block starts inside fixed_bytes
    state_pending: dict[int, float] = {}   # block -> end of the copy on it
    written = [False] * len(blocks)        # a gradient holds writes
    saved = [False] * len(blocks)          # ... all of them copied to the host
    for j in sorted({s.block for s in plan.statements if isinstance(s, DropState)}):
        if blocks[j].kind != "grad":       # the master copy of a dropped parameter or input lives on the host
            host_events.append((0.0, blocks[j].nbytes))
    # blocks on the host between steps: dropped before the first computation
    first_compute = next((i for i, s in enumerate(plan.statements) if isinstance(s, Compute)), len(plan.statements))
    between_host = {s.block for s in plan.statements[:first_compute] if isinstance(s, DropState)}

    for pos, s in enumerate(plan.statements):
        if isinstance(s, Compute):
            k = s.node
            if not 0 <= k < graph.n:
                raise InvalidPlanError(f"statement {pos} computes unknown node {k}")
            if len(s.inputs) != len(deps[k]):
                raise InvalidPlanError(f"statement {pos}: node {k} needs {len(deps[k])} inputs")
            for r, i in zip(s.inputs, deps[k]):
                if holds.get(r) != i:
                    raise InvalidPlanError(f"statement {pos}: node {k} reads register {r}, "
                                           f"which does not hold live node {i}")
                if r in dropped:
                    raise InvalidPlanError(f"statement {pos}: node {k} reads register {r}, part of which is on "
                                           f"the host (RestorePart it first)")
                if r in pending_in:   # a prefetch still running (a copy out does not block reads)
                    tc = wait(r, tc, out=False)
            grown = 0
            for j in (layout.need_indices(k) if layout is not None else ()):
                b = blocks[j]
                if b.kind == "grad":
                    if not on_device[j]:
                        if written[j]:
                            raise InvalidPlanError(f"statement {pos}: node {k} writes gradient block {j} "
                                                   f"({b.name!r}), which was dropped after earlier writes")
                        on_device[j] = True
                        grown += b.nbytes
                    if state_pending.get(j, -1.0) > tc:   # its save must end before it is written again
                        tc = state_pending.pop(j)
                    written[j], saved[j] = True, False
                else:
                    if not on_device[j]:
                        raise InvalidPlanError(f"statement {pos}: node {k} reads state block {j} ({b.name!r}), "
                                               f"which is not on the device")
                    if j in state_pending:
                        tc = max(tc, state_pending.pop(j))
            current += grown
            if s.register in used:
                raise InvalidPlanError(f"statement {pos} writes register {s.register} a second time")
            used.add(s.register)
            holds[s.register] = k
            current += int(mem[k])
            step = current + int(ws[k])
            peak = max(peak, step)
            steps.append(step)
            starts.append(tc)
            tc += float(cost[k])
            compute_cost += float(cost[k])
        elif isinstance(s, Free):
            if s.register not in holds:
                raise InvalidPlanError(f"statement {pos} frees register {s.register}, which is not live")
            tc = wait(s.register, tc)
            current -= int(mem[holds.pop(s.register)]) - dropped.pop(s.register, 0)
        elif isinstance(s, Offload):
            node = holds.get(s.register)
            if node is None:
                raise InvalidPlanError(f"statement {pos} offloads register {s.register}, which is not live")
            if s.register in slots:
                raise InvalidPlanError(f"statement {pos} offloads register {s.register} a second time")
            if node != s.node:
                raise InvalidPlanError(f"statement {pos}: register {s.register} holds node {node}, not {s.node}")
            start = max(tc, tx)
            tx = start + copy_time(int(mem[node]))
            pending_out[s.register] = tx
            slots[s.register] = node
            slot_end[s.register] = tx
            copied += int(mem[node])
            copies.append(("offload", node, start, tx))
            host_events.append((tc, int(mem[node])))
            if not remaining.get(s.register):
                host_events.append((tx, -int(mem[node])))
        elif isinstance(s, Prefetch):
            if slots.get(s.host) != s.node:
                raise InvalidPlanError(f"statement {pos} prefetches node {s.node} from host slot {s.host}, "
                                       f"which does not hold it")
            if remaining.get(s.host, 0) <= 0:
                raise InvalidPlanError(f"statement {pos} prefetches from host slot {s.host} after its last prefetch")
            if s.register in used:
                raise InvalidPlanError(f"statement {pos} writes register {s.register} a second time")
            used.add(s.register)
            holds[s.register] = s.node
            current += int(mem[s.node])
            peak = max(peak, current)
            start = max(tc, tx)
            tx = start + copy_time(int(mem[s.node]))
            pending_in[s.register] = tx
            copied += int(mem[s.node])
            copies.append(("prefetch", s.node, start, tx))
            remaining[s.host] -= 1
            if remaining[s.host] == 0:
                host_events.append((tx, -int(mem[s.node])))
        elif isinstance(s, OffloadPart):
            node = holds.get(s.register)
            if node is None or node != s.node:
                raise InvalidPlanError(f"statement {pos} offloads part of register {s.register}, which does not hold "
                                       f"live node {s.node}")
            if s.register in part or not 0 < s.nbytes < int(mem[node]):
                raise InvalidPlanError(f"statement {pos} offloads {s.nbytes} of the {int(mem[node])} bytes of "
                                       f"register {s.register} (a chunk of 1 to {int(mem[node]) - 1} bytes, once)")
            start = max(tc, tx)
            tx = start + copy_time(s.nbytes)
            pending_out[s.register] = tx
            part[s.register] = s.nbytes
            copied += s.nbytes
            copies.append(("offload", node, start, tx))
            host_events.append((tc, s.nbytes))
            if not restores.get(s.register):
                host_events.append((tx, -s.nbytes))
        elif isinstance(s, DropPart):
            if s.register not in part or s.register in dropped or s.register not in holds:
                raise InvalidPlanError(f"statement {pos} drops the chunk of register {s.register}, which has no "
                                       f"chunk on the host or has dropped it already")
            tc = max(tc, pending_out.pop(s.register, tc))
            dropped[s.register] = part[s.register]
            current -= part[s.register]
        elif isinstance(s, RestorePart):
            if s.register not in dropped:
                raise InvalidPlanError(f"statement {pos} restores register {s.register}, which has no chunk off the "
                                       f"device")
            nb = dropped.pop(s.register)
            current += nb
            peak = max(peak, current)
            start = max(tc, tx)
            tx = start + copy_time(nb)
            pending_in[s.register] = tx
            copied += nb
            copies.append(("prefetch", holds[s.register], start, tx))
            restores[s.register] -= 1
            if restores[s.register] == 0:
                host_events.append((tx, -nb))
        elif isinstance(s, DropState):
            j = s.block
            b = blocks[j]
            if not on_device[j]:
                raise InvalidPlanError(f"statement {pos} drops state block {j} ({b.name!r}), which is not on "
                                       f"the device")
            if b.kind == "grad" and written[j] and not saved[j]:
                raise InvalidPlanError(f"statement {pos} drops gradient block {j} ({b.name!r}) with writes not "
                                       f"saved to the host")
            if j in state_pending:
                tc = max(tc, state_pending.pop(j))
            on_device[j] = False
            current -= b.nbytes
        elif isinstance(s, FetchState):
            j = s.block
            b = blocks[j]
            if b.kind == "grad":
                raise InvalidPlanError(f"statement {pos} fetches gradient block {j} ({b.name!r}): a gradient is "
                                       f"allocated by its writer, not fetched")
            if on_device[j]:
                raise InvalidPlanError(f"statement {pos} fetches state block {j} ({b.name!r}), which is already "
                                       f"on the device")
            on_device[j] = True
            current += b.nbytes
            peak = max(peak, current)
            start = max(tc, tx)
            tx = start + copy_time(b.nbytes)
            state_pending[j] = tx
            copied += b.nbytes
            copies.append(("fetch", -1 - j, start, tx))
        elif isinstance(s, SaveState):
            j = s.block
            b = blocks[j]
            if b.kind != "grad" or not on_device[j] or not written[j] or saved[j]:
                raise InvalidPlanError(f"statement {pos} saves state block {j} ({b.name!r}): only a gradient "
                                       f"on the device with unsaved writes can be saved")
            start = max(tc, tx)
            tx = start + copy_time(b.nbytes)
            state_pending[j] = tx
            saved[j] = True
            copied += b.nbytes
            copies.append(("save", -1 - j, start, tx))
            host_events.append((tc, b.nbytes))
        else:  # Wait
            if s.register not in holds:
                raise InvalidPlanError(f"statement {pos} waits on register {s.register}, which is not live")
            tc = wait(s.register, tc)
    if holds:
        raise InvalidPlanError(f"registers still live at the end of the plan: {sorted(holds)[:10]}")
    for j, b in enumerate(blocks):   # the state lies where the next step expects it
        if b.kind != "grad" and j not in between_host and not on_device[j]:
            raise InvalidPlanError(f"state block {j} ({b.name!r}) is on the device between steps (not dropped before "
                                   f"the first computation) but off it at the end of the plan")
        g = layout.grad_index[j]
        if g >= 0 and (j in between_host) != (written[g] and saved[g]):
            raise InvalidPlanError(f"parameter block {j} ({b.name!r}) is on the "
                                   f"{'host' if j in between_host else 'device'} between steps but its gradient "
                                   f"block {g} ({blocks[g].name!r}) is {'' if saved[g] else 'not '}saved to the host: "
                                   f"the optimizer updates a parameter where its gradient is")
    if state_pending:   # the step ends when the last copy of the state does
        tc = max([tc] + list(state_pending.values()))
    # host peak: allocations before releases at the same instant (the conservative order)
    host_peak = host_now = 0
    host_timeline = []
    for when, delta in sorted(host_events, key=lambda e: (e[0], -e[1])):
        host_now += delta
        host_peak = max(host_peak, host_now)
        host_timeline.append((when, host_now))
    counts = np.bincount([s.node for s in plan.statements if isinstance(s, Compute)],
                         minlength=graph.n).astype(np.int64)
    return HostSimulation(
        time=tc, compute_cost=compute_cost, stall=max(0.0, tc - compute_cost), peak_device_bytes=int(peak),
        peak_host_bytes=int(host_peak), copied_bytes=int(copied), compute_counts=counts,
        step_memory_bytes=np.asarray(steps, dtype=np.int64), step_start=np.asarray(starts, dtype=float),
        copies=copies, host_timeline=host_timeline,
    )
