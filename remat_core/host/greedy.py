"""Offloads added to a remat plan until it fits a budget; the offload-everything plan.

:func:`offload_to_budget` starts from any schedule (a remat plan, or
checkpoint-all) and its hoisted execution plan. While some computation is over
the budget, it takes the one with the most excess memory and, among the values
resident there but not read there, offloads the one whose copies are best
hidden per byte freed: the value is dropped from the device for the stretch of
its idle interval that is over the budget and prefetched right after it. The
memory effect of each choice is exact (device memory is counted along the
statements); the copies' overlap is estimated while choosing and the plan is
then judged by :func:`~remat_core.host.simulate_host`.

With ``partial=True``, an activation larger than what the budget needs
around that computation may go to the host in part: only a chunk of the
bytes needed there is copied out, freed for the stretch and copied back
(``OffloadPart`` / ``DropPart`` / ``RestorePart``).

With a :class:`~remat_core.host.state.StateLayout`, the training state's
blocks are candidates too: a parameter or input block can leave the device
for any stretch between its readers (a fetch brings it back; after its last
reader it never comes back), a gradient block before its first writer (its
writer allocates it) and after its last (saved to the host, then dropped).

:func:`offload_all_plan` is what ``torch.autograd.graph.save_on_cpu`` does:
every forward value a backward node reads is copied to the host when it is
computed (the compute stream waits for the copy), dropped after its last
forward reader, and copied back right before its first backward reader.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np

from ..graph import Graph
from ..plan import Compute, ExecutionPlan, Free, make_plan, replay
from ..schedule import Schedule
from .plan import DropPart, DropState, FetchState, HostPlan, Offload, OffloadPart, Prefetch, RestorePart, SaveState, Wait
from .simulate import cost_per_second, simulate_host, validate_bandwidth

__all__ = ["offload_to_budget", "offload_all_plan", "checkpoint_all", "plan_from_sequence"]

#: Candidates scored per step of :func:`offload_to_budget` (the largest values that could leave the device there).
MAX_CANDIDATES = 64
#: Candidates judged by the simulator per step (the best by the estimate), on plans of at most
#: ``LOOKAHEAD_MAX_COMPUTES`` computations; larger plans use the estimate alone.
LOOKAHEAD = 6
LOOKAHEAD_MAX_COMPUTES = 1000
#: Weight of a copy's own length in a candidate's score: fewer bytes on the copy stream leave room for others.
COPY_WEIGHT = 0.05


# the checkpoint-all plan of the last few graphs (a pure function of the immutable graph; planning a
# 5,000-node graph takes seconds, and every solve_offload call starts from it)
_CHECKPOINT_ALL: dict[int, tuple[Graph, Schedule, ExecutionPlan]] = {}
_CACHE_SIZE = 4


def checkpoint_all(graph: Graph) -> tuple[Schedule, ExecutionPlan]:
    """Checkpoint-all's schedule and hoisted execution plan (cached for the last few graphs)."""
    hit = _CHECKPOINT_ALL.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1], hit[2]
    sched = Schedule.checkpoint_all(graph)
    plan = make_plan(graph, sched, hoist=True)
    if len(_CHECKPOINT_ALL) >= _CACHE_SIZE:
        _CHECKPOINT_ALL.pop(next(iter(_CHECKPOINT_ALL)))
    _CHECKPOINT_ALL[id(graph)] = (graph, sched, plan)
    return sched, plan


def plan_from_sequence(graph: Graph, sequence: Any) -> ExecutionPlan:
    """The execution plan of a remat run recorded as events (:class:`remat_core.sequence.OpSequence`, what
    ``dtr`` returns when it has no stage schedule): a register per computation, reads of a node's newest
    copy, a free of its oldest, the values still resident freed at the end. A computation's stage is the
    largest node computed so far (the frontier).

    Examples
    --------
    >>> from remat_core import Schedule, make_plan
    >>> from remat_core.sequence import from_schedule
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(3)
    >>> ck = Schedule.checkpoint_all(g)
    >>> plan_from_sequence(g, from_schedule(g, ck)).computes() == make_plan(g, ck).computes()
    True
    """
    from ..sequence import COMPUTE

    regs: dict[int, list[int]] = {}
    out: list = []
    frontier = -1
    nxt = 0
    for kind, node in zip(sequence.kind.tolist(), sequence.node.tolist()):
        if kind == COMPUTE:
            frontier = max(frontier, node)
            out.append(Compute(node, nxt, tuple(regs[i][-1] for i in graph.deps[node]), frontier))
            regs.setdefault(node, []).append(nxt)
            nxt += 1
        else:
            out.append(Free(regs[node].pop(0), node))
    out += [Free(r, node) for node, rs in sorted(regs.items()) for r in rs]
    return ExecutionPlan(out, graph.n, hoisted=False)


def _base_plan(graph: Graph, base: Any) -> ExecutionPlan:
    if isinstance(base, ExecutionPlan):
        return base
    if isinstance(base, Schedule):
        return make_plan(graph, base, hoist=True)
    raise TypeError(f"`base` must be a remat_core.Schedule or ExecutionPlan; got {type(base).__name__}")


def offload_to_budget(graph: Graph, base: Any, budget_bytes: int, host_bandwidth: Any,
                      cost_per_s: float | None = None, layout: Any = None, partial: bool = False) -> HostPlan | None:
    """Add offloads to ``base`` until its device peak is within ``budget_bytes``.

    Parameters
    ----------
    graph : Graph
    base : Schedule or ExecutionPlan
        The remat plan to start from (a schedule is planned with hoisting).
    budget_bytes : int
        Device bytes, fixed bytes included.
    host_bandwidth : float or str
        Bytes per second (``math.inf``: free copies).
    cost_per_s : float, optional
        Cost units per second (see :func:`~remat_core.host.cost_per_second`).
    layout : StateLayout, optional
        Blocks of the training state that may live on the host too
        (``remat_core.host.state``).
    partial : bool
        Also offload a chunk of an activation (the bytes the budget needs
        where it leaves the device), not only whole values.

    Returns
    -------
    HostPlan or None
        ``None`` when some computation stays over the budget with every value
        (and state block) it does not read offloaded.

    Examples
    --------
    >>> from remat_core import Schedule, checkpoint_all_peak_bytes
    >>> from remat_core.host import simulate_host
    >>> from remat_core.zoo import linear_graph
    >>> g = linear_graph(6).replace(meta={"cost_unit": "s"})
    >>> checkpoint_all_peak_bytes(g)
    8
    >>> plan = offload_to_budget(g, Schedule.checkpoint_all(g), 5, host_bandwidth=2.0)
    >>> sim = simulate_host(g, plan, host_bandwidth=2.0)
    >>> sim.peak_device_bytes, sim.recompute_count, sim.stall
    (5, 0, 0.0)
    """
    bw = validate_bandwidth(host_bandwidth)
    if bw is None:
        raise ValueError("`host_bandwidth` must be a positive number of bytes/s to offload")
    plan = _base_plan(graph, base)
    cps = 1.0 if bw == math.inf else cost_per_second(graph, cost_per_s)
    computes = plan.computes()
    P = len(computes)
    if layout is not None and (getattr(layout, "num_nodes", None) != graph.n
                               or layout.fixed_bytes != graph.fixed_bytes):
        raise ValueError(f"`layout` must be a StateLayout of this graph; got {layout!r}")
    if P == 0:
        return HostPlan(list(plan.statements), plan.num_nodes, layout=layout)  # nothing computed: nothing moves
    excess = replay(graph, plan).step_memory_bytes.astype(np.int64) - int(budget_bytes)
    cost_at = np.array([float(graph.cost[c.node]) for c in computes])
    csum = np.concatenate([[0.0], np.cumsum(cost_at)])
    mem = graph.memory_bytes
    nreg = max(c.register for c in computes) + 1
    uses: list[list[int]] = [[] for _ in range(nreg)]
    node_of = np.zeros(nreg, dtype=np.int64)
    for p, c in enumerate(computes):
        uses[c.register].append(p)
        node_of[c.register] = c.node
        for r in c.inputs:
            if uses[r][-1] != p:
                uses[r].append(p)
    blocks = layout.blocks if layout is not None else ()
    kind = [""] * nreg + [b.kind for b in blocks]
    # a state block is pseudo-register nreg + j, resident from before the first computation to after the last
    # (uses bracketed by -1 and P); its uses are the computations of the nodes that read or write it
    for j, b in enumerate(blocks):
        at = set(b.nodes)
        uses.append([-1] + [p for p, c in enumerate(computes) if c.node in at] + [P])
    first = np.array([u[0] if u else 0 for u in uses], dtype=np.int64)
    last = np.array([u[-1] if u else 0 for u in uses], dtype=np.int64)
    nbytes = np.concatenate([mem[node_of].astype(np.int64),
                             np.array([b.nbytes for b in blocks], dtype=np.int64)])

    def ctime(b: int) -> float:
        return 0.0 if bw == math.inf else b / bw * cps

    windows: dict[int, list[tuple[int, int]]] = {}   # register -> [(lo, hi)] stretches off the device
    chunks: dict[int, int] = {}                       # register -> bytes of its chunk on the host (partial)
    state = (layout, uses, csum, ctime) if blocks else None
    simulated = P <= LOOKAHEAD_MAX_COMPUTES
    now_time = float(csum[-1])
    for j, blk in enumerate(blocks):
        # a gradient is off the device before its first writer for free (no copy; its writer allocates it):
        # taken at once wherever that stretch is over the budget
        r, w1 = nreg + j, uses[nreg + j][1]
        if blk.kind == "grad" and w1 > 0 and (excess[:w1] > 0).any():
            excess[:w1] -= nbytes[r]
            windows[r] = [(0, w1 - 1)]
    while True:
        p = int(np.argmax(excess))
        if excess[p] <= 0:
            break
        cand = np.flatnonzero((first < p) & (last > p) & (nbytes > 0))
        cand = cand[np.argsort(-nbytes[cand], kind="stable")]
        scoredlist: list = []
        scored = 0
        for r in cand.tolist():
            if scored == MAX_CANDIDATES:
                break
            u = uses[r]
            i = bisect.bisect_left(u, p)
            if u[i] == p or any(lo <= p <= hi for lo, hi in windows.get(r, ())) or r in chunks:
                continue   # read here, already off the device here, or offloaded in part (its chunk is fixed)
            a, b = u[i - 1], u[i]
            k = kind[r]
            if k == "grad" and a >= 0 and b < P:
                continue   # between two writes: a gradient holding writes cannot leave
            if k == "input" and (a < 0 or b == P):
                continue   # the batch is on the device between steps (the data pipeline loads the next one)
            # the stretch around p clear of this register's other windows (one statement apart from them)
            left, right = a + 1, b - 1
            for wlo, whi in windows.get(r, ()):
                if whi < p:
                    left = max(left, whi + 2)
                elif wlo > p:
                    right = min(right, wlo - 2)
            if not left <= p <= right:
                continue
            scored += 1
            nz = np.flatnonzero(excess[left:right + 1] > 0)
            lo, hi = left + int(nz[0]), left + int(nz[-1])
            nb = int(nbytes[r])
            chunk = 0
            if not k and partial and r not in windows and int(excess[lo:hi + 1].max()) < nb:
                chunk = nb = int(excess[lo:hi + 1].max())   # what the stretch needs, not the whole value
            if not k:       # an activation: copied out once, back before its reader
                c_in = ctime(nb)
                c_out = 0.0 if r in windows else c_in
            elif k == "grad":   # before its first write: off from the start (its writer allocates it); after
                if a < 0:       # its last: saved to the host
                    lo, hi = left, right
                c_in, c_out = 0.0, (ctime(nb) if a >= 0 else 0.0)
            else:           # a parameter or input block: dropped for free from the start of the stretch, fetched
                lo = left   # before its next reader, never copied out
                c_in, c_out = (ctime(nb) if b < P else 0.0), 0.0
            if k and b == P:
                hi = right  # never comes back
            lead_out = csum[lo] - csum[(first[r] if not k else a) + 1] if c_out else 0.0
            lead_in = csum[b] - csum[hi + 1] if c_in else 0.0
            est = max(0.0, c_out - lead_out) + max(0.0, c_in - lead_in)
            benefit = min(nb, int(excess[p]))
            extra = 0.0
            if k == "param" or (k == "grad" and a >= 0):
                # the first move of a parameter or of its saved gradient brings the other copies of the layer
                # (see _close_state): the weight fetched each step, the gradient saved
                jp = r - nreg if k == "param" else layout.param_index[r - nreg]
                jg = layout.grad_index[jp] if jp >= 0 else r - nreg
                if not (jp >= 0 and nreg + jp in windows) and not (jg >= 0 and any(
                        lo_ > uses[nreg + jg][-2] for lo_, _ in windows.get(nreg + jg, ()))):
                    extra = (ctime(int(nbytes[nreg + jp])) if jp >= 0 else 0.0) + (
                        ctime(int(nbytes[nreg + jg])) if jg >= 0 else 0.0)
            key = ((est + COPY_WEIGHT * (c_in + c_out + extra)) / benefit, -int(nbytes[r]), r)
            scoredlist.append((key, r, lo, hi, benefit, chunk))
        if not scoredlist:
            return None
        scoredlist.sort(key=lambda x: x[0])
        if simulated and len(scoredlist) > 1 and bw != math.inf and scoredlist[0][0][0] > 0.0:
            # the estimate ignores the copy queue and the reader's wait: judge the best few by the simulator
            best = None
            for key, r, lo, hi, benefit, chunk in scoredlist[:LOOKAHEAD]:
                trial = {k: list(v) for k, v in windows.items()}
                trial.setdefault(r, []).append((lo, hi))
                tchunks = {**chunks, r: chunk} if chunk else chunks
                t = simulate_host(graph, _emit(plan, computes, trial, node_of, nreg, state, tchunks), bw, cps).time
                k2 = ((t - now_time) / benefit, key)
                if best is None or k2 < best[0]:
                    best = (k2, r, lo, hi, t, chunk)
        else:   # one candidate, free copies, or a move without copies (key 0: the time does not change)
            best = scoredlist[0][:4] + (now_time, scoredlist[0][5])
        _, r, lo, hi, now_time, chunk = best
        excess[lo:hi + 1] -= chunk or nbytes[r]
        windows.setdefault(r, []).append((lo, hi))
        if chunk:
            chunks[r] = chunk
    return _emit(plan, computes, windows, node_of, nreg, state, chunks)


def _close_state(windows: dict, nreg: int, P: int, state: tuple) -> dict:
    """``windows`` with the state moves that keep the state coherent between steps (see
    :mod:`remat_core.host.state`): a parameter block that leaves the device at all lies on the host
    between steps (dropped before the first computation, fetched before its first reader, dropped after its
    last), and a parameter's gradient goes with it (off the device before its first write, saved after its
    last). A window ``(P, P - 1)`` of a gradient is a save without a drop."""
    layout, uses, csum, ctime = state
    out = {r: list(ws) for r, ws in windows.items()}
    moved = {r - nreg for r in windows if r >= nreg and layout.blocks[r - nreg].kind == "param"}
    for j, b in enumerate(layout.blocks):   # a gradient saved: its parameter is updated on the host
        g = layout.grad_index[j]
        if g >= 0 and any(lo > uses[nreg + g][-2] for lo, _ in windows.get(nreg + g, ())):
            moved.add(j)
    for j in sorted(moved):
        r = nreg + j
        u = uses[r]
        ws = out.setdefault(r, [])
        if not any(lo == 0 for lo, _ in ws):
            # off from the start; fetched as late as its copy is still hidden by the computations before the reader
            # (the block was on the device there, so the memory is no higher than before)
            hi = u[1] - 1
            while hi >= 0 and csum[u[1]] - csum[hi + 1] < ctime(layout.blocks[j].nbytes):
                hi -= 1
            ws.append((0, hi))
        if u[-2] + 1 <= P - 1 and not any(lo > u[-2] for lo, _ in ws):
            ws.append((u[-2] + 1, P - 1))   # after its last reader: dropped (the host copy is current)
        g = layout.grad_index[j]
        if g >= 0:
            rg = nreg + g
            ug = uses[rg]
            wg = out.setdefault(rg, [])
            if not any(lo == 0 for lo, _ in wg):
                wg.append((0, ug[1] - 1))   # allocated by its first writer
            if not any(lo > ug[-2] for lo, _ in wg):
                wg.append((P, P - 1))       # saved after its last write, kept to the end
    return out


def _emit(plan: ExecutionPlan, computes: list[Compute], windows: dict, node_of: np.ndarray, nreg: int,
          state: Any = None, chunks: dict | None = None) -> HostPlan:
    """The base plan's statements with the offloads, frees and prefetches of ``windows`` inserted (registers
    from ``nreg`` on are the layout's state blocks: drops, fetches and saves, made coherent by
    :func:`_close_state`)."""
    before: dict[int, list[tuple[str, int]]] = {}
    after: dict[int, list[Any]] = {}
    first = {c.register: p for p, c in enumerate(computes)}
    P = len(computes)
    layout, uses = (state[0], state[1]) if state is not None else (None, None)
    if state is not None:
        windows = _close_state(windows, nreg, P, state)
    for r, ws in windows.items():
        if r >= nreg:
            j = r - nreg
            grad = layout.blocks[j].kind == "grad"
            for lo, hi in ws:
                if lo < P:
                    before.setdefault(lo, []).append(("drop_state", j))
                if grad and lo > uses[r][-2]:   # after the last write: saved first
                    after.setdefault(uses[r][-2], []).append(("save_state", j))
                if not grad and hi + 1 < P:
                    before.setdefault(hi + 1, []).append(("fetch_state", j))
            continue
        if chunks and r in chunks:   # a chunk: out once, dropped and restored in the same register
            after.setdefault(first[r], []).append(("offload_part", r))
            for lo, hi in ws:
                before.setdefault(lo, []).append(("drop_part", r))
                before.setdefault(hi + 1, []).append(("restore_part", r))
            continue
        after.setdefault(first[r], []).append(r)
        for lo, hi in ws:
            before.setdefault(lo, []).append(("free", r))
            before.setdefault(hi + 1, []).append(("prefetch", r))
    cur = {}
    next_reg = nreg
    out: list = []
    p = 0
    for s in plan.statements:
        if isinstance(s, Compute):
            acts = sorted(before.get(p, ()), key=lambda a: a[0] not in ("free", "drop_state", "drop_part"))
            for kind, r in acts:
                if kind == "drop_part":
                    out.append(DropPart(r))
                elif kind == "restore_part":
                    out.append(RestorePart(r))
                elif kind == "free":
                    out.append(Free(cur.get(r, r), int(node_of[r])))
                elif kind == "drop_state":
                    out.append(DropState(r))
                elif kind == "fetch_state":
                    out.append(FetchState(r))
                else:
                    out.append(Prefetch(int(node_of[r]), r, next_reg))
                    cur[r] = next_reg
                    next_reg += 1
            out.append(Compute(s.node, s.register, tuple(cur.get(r, r) for r in s.inputs), s.stage))
            for r in after.get(p, ()):
                if isinstance(r, tuple) and r[0] == "offload_part":
                    out.append(OffloadPart(r[1], int(node_of[r[1]]), chunks[r[1]]))
                else:
                    out.append(SaveState(r[1]) if isinstance(r, tuple) else Offload(r, int(node_of[r])))
            p += 1
        else:
            out.append(Free(cur.get(s.register, s.register), s.node))
    return HostPlan(out, plan.num_nodes, layout=layout)


def offload_all_plan(graph: Graph) -> HostPlan:
    """The plan of ``torch.autograd.graph.save_on_cpu``: every value saved for the backward goes to the host.

    Checkpoint-all, where each forward value read by a backward node is
    copied to the host right after it is computed (a synchronous copy: the
    compute stream waits), freed after its last forward reader and copied back
    right before its first backward reader (which waits for the copy).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> offload_all_plan(linear_graph(3))
    <HostPlan: 7 computes, 4 offloads, 4 prefetches>
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"`graph` must be a remat_core.Graph; got {type(graph).__name__}")
    _, plan = checkpoint_all(graph)
    bwd = graph.is_backward
    users = graph.users
    saved = {k for k in range(graph.n) if not bwd[k] and any(bwd[u] for u in users[k])}
    out: list = []
    cur: dict[int, int] = {}
    reg_of_node: dict[int, int] = {}
    next_reg = plan.num_registers
    computes = plan.computes()
    # the last forward read of each saved register, by position among the computes
    last_fwd: dict[int, int] = {}
    for p, c in enumerate(computes):
        if c.node in saved:
            reg_of_node[c.node] = c.register
            last_fwd[c.register] = p
        if not bwd[c.node]:
            for r in c.inputs:
                if r in last_fwd:
                    last_fwd[r] = p
    first_pos = {c.register: q for q, c in enumerate(computes)}
    last_read: dict[int, int] = {}
    for q, c in enumerate(computes):
        for r in c.inputs:
            last_read[r] = q
    free_at: dict[int, list[int]] = {}
    for r, q in last_fwd.items():
        free_at.setdefault(q, []).append(r)
    dropped: set[int] = set()
    p = 0
    for s in plan.statements:
        if isinstance(s, Compute):
            if bwd[s.node]:
                for r in s.inputs:
                    if r in dropped:
                        dropped.discard(r)
                        out.append(Prefetch(int(computes[first_pos[r]].node), r, next_reg))
                        cur[r] = next_reg
                        next_reg += 1
            out.append(Compute(s.node, s.register, tuple(cur.get(r, r) for r in s.inputs), s.stage))
            if s.register in last_fwd:
                out += [Offload(s.register, s.node), Wait(s.register)]
            for r in free_at.get(p, ()):
                if r not in dropped and r not in cur and last_read.get(r, -1) > p:
                    out.append(Free(r, int(computes[first_pos[r]].node)))
                    dropped.add(r)
            p += 1
        else:
            if s.register in dropped:   # never read back (no backward reader after all)
                dropped.discard(s.register)
                out.append(Free(s.register, s.node))
                continue
            out.append(Free(cur.get(s.register, s.register), s.node))
    return HostPlan(out, plan.num_nodes)

