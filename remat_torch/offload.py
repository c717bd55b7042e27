"""Run a host plan (:mod:`remat_core.host`): remat with values offloaded to host memory.

:class:`OffloadExecutor` is an :class:`~remat_torch.Executor` that interprets
a :class:`~remat_core.host.HostPlan` statement by statement:

* ``Offload`` copies a register's tensors to the *host pool*; ``Free`` drops
  the device tensors (after the copy); ``Prefetch`` copies a host slot back
  into a new register; ``Wait`` waits for a register's copy; a host slot is
  dropped after its last prefetch.
* On CUDA the host pool is pinned memory, copies run on one copy stream (the
  copy stream waits for the compute stream before copying out; the compute
  stream waits on the copy's event before a read, a ``Wait`` or a ``Free``),
  as the simulator models. This path is written but not tested here (no GPU
  in CI).
* On CPU the host pool is a separate set of tensors (clones), copies are
  synchronous, and the order of copies is recorded in ``copy_log``, so that
  gradients and the copy order are tested without a GPU.

Gradients, model outputs, BatchNorm statistics and dropout masks follow the
same rules as the base executor (outputs from a node's first computation,
gradients from its last, RNG replayed for recomputed random nodes).

This module imports torch, :mod:`remat_core` and the executor of this package.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from remat_core.host import HostPlan, Offload, Prefetch, Wait, simulate_host
from remat_core.plan import Compute, ExecutionPlan, Free, InvalidPlanError

from .execute import Executor, StepState
from .extract import ExtractedGraph

__all__ = ["OffloadExecutor", "strip_copies"]

log = logging.getLogger(__name__)


def strip_copies(plan: HostPlan) -> ExecutionPlan:
    """The remat plan under a host plan: copies removed, each offloaded value kept on the device instead.

    A prefetched register is renamed to the register it was copied from, and
    only the last ``Free`` of that register is kept.
    """
    alias: dict[int, int] = {}
    stmts = plan.statements
    orig = [None] * len(stmts)
    last_free: dict[int, int] = {}
    for pos, s in enumerate(stmts):
        if isinstance(s, Prefetch):
            alias[s.register] = alias.get(s.host, s.host)
        elif isinstance(s, Free):
            r = alias.get(s.register, s.register)
            orig[pos] = r
            last_free[r] = pos
    out: list = []
    for pos, s in enumerate(stmts):
        if isinstance(s, Compute):
            out.append(Compute(s.node, s.register, tuple(alias.get(r, r) for r in s.inputs), s.stage))
        elif isinstance(s, Free) and last_free[orig[pos]] == pos:
            out.append(Free(orig[pos], s.node))
    return ExecutionPlan(out, plan.num_nodes, hoisted=True)


class OffloadExecutor(Executor):
    """Executes a :class:`~remat_core.host.HostPlan` on an :class:`~remat_torch.ExtractedGraph`.

    Parameters
    ----------
    extracted : remat_torch.ExtractedGraph
    plan : remat_core.host.HostPlan
    host_bandwidth : float, optional
        For ``predicted_time`` from :func:`~remat_core.host.simulate_host`
        (default: copies taken as free; the predicted peak does not depend on it).
    cost_per_s : float, optional
        The graph's cost units per second (see :func:`~remat_core.host.cost_per_second`).

    Attributes
    ----------
    host_plan : HostPlan
    predicted_peak_bytes : int
        The host plan's simulated device peak (fixed bytes included).
    peak_bytes : int
        Tracked peak of the last step: live device storages the plan holds
        plus fixed bytes plus the running node's workspace, as in the simulator.
    peak_host_bytes : int
        Largest host pool of the last step.
    copy_log : list of tuple
        ``("offload" | "prefetch", node)`` in the order the last step issued them.
    """

    def __init__(self, extracted: ExtractedGraph, plan: HostPlan, host_bandwidth: Any = None,
                 cost_per_s: float | None = None):
        if not isinstance(plan, HostPlan):
            raise TypeError(f"`plan` must be a remat_core.host.HostPlan; got {type(plan).__name__}")
        if plan.layout is not None:   # parameters and gradients live in the module; moving them is not built here
            raise ValueError("`plan` moves the training state (it has a state layout); the offload executor runs "
                             "plans that offload activations only")
        super().__init__(extracted, strip_copies(plan), track=True)
        self.host_plan = plan
        # without a bandwidth, the prediction is memory only (copies taken as free)
        sim = simulate_host(extracted.graph, plan, math.inf if host_bandwidth is None else host_bandwidth, cost_per_s)
        self.predicted_peak_bytes = int(sim.peak_device_bytes)
        self.predicted_time = float(sim.time)
        self.peak_bytes = self.predicted_peak_bytes
        n_fwd = extracted.n_forward
        hs = plan.statements
        self._hsplit = next((i for i, s in enumerate(hs) if isinstance(s, Compute) and s.stage >= n_fwd), len(hs))
        self._prefetches_left = {}
        for s in hs:
            if isinstance(s, Prefetch):
                self._prefetches_left[s.host] = self._prefetches_left.get(s.host, 0) + 1
        self.copy_log: list[tuple[str, int]] = []
        self.peak_host_bytes = 0
        self._copy_stream = None

    def begin(self, params, buffers, inputs) -> StepState:
        st = super().begin(params, buffers, inputs)
        st.host = {}           # host slot -> tensors
        st.host_left = dict(self._prefetches_left)
        st.events = {}         # register -> CUDA event of its copy
        st.host_bytes = 0
        self.copy_log = []
        self.peak_host_bytes = 0
        return st

    # the base class runs its (copy-free) statements [0, split) then [split, end): run the host plan's instead
    def _run_tracked(self, st: StepState, start: int, stop: int) -> None:
        hs = self.host_plan.statements
        a, b = (0, self._hsplit) if start == 0 else (self._hsplit, len(hs))
        self._run_host(st, hs[a:b])

    def _run_host(self, st: StepState, stmts) -> None:
        import torch

        cuda = self._device(st).type == "cuda"
        if cuda and self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream()
        stream = self._copy_stream
        with torch.no_grad(), self._autocast_off():
            for s in stmts:
                if isinstance(s, Compute):
                    self._compute(st, s, cuda)
                elif isinstance(s, Free):
                    self._wait(st, s.register, cuda)
                    if s.register not in st.regs:
                        raise InvalidPlanError(f"the plan frees register {s.register}, which is not live")
                    self._base_statement(st, s)
                elif isinstance(s, Offload):
                    self._offload(st, s, cuda, stream)
                elif isinstance(s, Prefetch):
                    self._prefetch(st, s, cuda, stream)
                elif isinstance(s, Wait):
                    self._wait(st, s.register, cuda)
                else:  # pragma: no cover - HostPlan checks its statements
                    raise InvalidPlanError(f"not a host plan statement: {s!r}")

    # ------------------------------------------------------------ statements
    def _compute(self, st: StepState, s: Compute, cuda: bool) -> None:
        if cuda:
            for r in s.inputs:
                self._wait(st, r, cuda, out=False)
        self._base_statement(st, s)

    def _base_statement(self, st: StepState, s) -> None:
        """Run one ``Compute`` or ``Free`` with the base class's tracked loop (the node call, the RNG replay of
        a recomputation, the model outputs, the device bytes), which reads its statements from ``_stmts``."""
        saved = self._stmts
        self._stmts = (s,)
        try:
            Executor._run_tracked(self, st, 0, 1)
        finally:
            self._stmts = saved

    def _hold(self, st: StepState, r: int, outs, skip=()) -> None:
        """Register ``r`` holds ``outs``; count the device storages it adds."""
        import torch

        keys = []
        seen = set()
        for t in outs:
            if not isinstance(t, torch.Tensor):
                continue
            stg = t.untyped_storage()
            p, nb = stg.data_ptr(), stg.nbytes()
            if nb == 0 or p in st.fixed_ptrs or p in skip or p in seen:
                continue
            seen.add(p)
            keys.append(p)
            ent = st.live.get(p)
            if ent is None:
                st.live[p] = [1, nb]
                st.current_bytes += nb
            else:
                ent[0] += 1
        st.regs[r] = outs
        st.reg_keys[r] = keys

    def _wait(self, st: StepState, r: int, cuda: bool, out: bool = True) -> None:
        ev = st.events.get(r)
        if ev is None or not cuda:
            return
        kind, event = ev
        if kind == "in" or out:
            import torch

            torch.cuda.current_stream().wait_event(event)
            del st.events[r]

    def _offload(self, st: StepState, s: Offload, cuda: bool, stream) -> None:
        """Copy the register's storages (each once: views of one storage stay views of one copy) to the host."""
        import torch

        outs = st.regs[s.register]
        storages: dict[int, Any] = {}
        layout = []   # per output: a non-tensor, or (storage key, offset, shape, stride, dtype)
        if cuda:
            stream.wait_stream(torch.cuda.current_stream())   # the value must be computed before it is copied
        ctx = torch.cuda.stream(stream) if cuda else _null()
        with ctx:
            for t in outs:
                if not isinstance(t, torch.Tensor):
                    layout.append(t)
                    continue
                stg = t.untyped_storage()
                key = stg.data_ptr()
                if key not in storages:
                    if cuda:
                        host = torch.empty(stg.nbytes(), dtype=torch.uint8, pin_memory=True).untyped_storage()
                        host.copy_(stg, non_blocking=True)
                    else:
                        host = stg.clone()
                    storages[key] = host
                layout.append((key, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype))
            if cuda:
                event = torch.cuda.Event()
                event.record(stream)
                st.events[s.register] = ("out", event)
        st.host[s.register] = (storages, layout)
        st.host_bytes += sum(h.nbytes() for h in storages.values())
        self.peak_host_bytes = max(self.peak_host_bytes, st.host_bytes)
        self.copy_log.append(("offload", s.node))
        if not st.host_left.get(s.register):
            self._release(st, s.register)

    def _prefetch(self, st: StepState, s: Prefetch, cuda: bool, stream) -> None:
        import torch

        storages, layout = st.host[s.host]
        device = self._device(st)
        if cuda:   # allocated on the compute stream: the simulator counts a prefetch from its start
            dev = {k: torch.empty(h.nbytes(), dtype=torch.uint8, device=device).untyped_storage()
                   for k, h in storages.items()}
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for k, h in storages.items():
                    dev[k].copy_(h, non_blocking=True)
                event = torch.cuda.Event()
                event.record(stream)
            st.events[s.register] = ("in", event)
        else:
            dev = {k: h.clone() for k, h in storages.items()}
        outs = [x if not isinstance(x, tuple) else
                torch.empty(0, dtype=x[4], device=dev[x[0]].device).set_(dev[x[0]], x[1], x[2], x[3])
                for x in layout]
        self._hold(st, s.register, outs)
        st.peak_bytes = max(st.peak_bytes, self.eg.graph.fixed_bytes + st.current_bytes)
        self.copy_log.append(("prefetch", s.node))
        st.host_left[s.host] -= 1
        if st.host_left[s.host] == 0:
            self._release(st, s.host)

    def _release(self, st: StepState, slot: int) -> None:
        storages, _ = st.host.pop(slot)
        st.host_bytes -= sum(h.nbytes() for h in storages.values())


def _null():
    import contextlib

    return contextlib.nullcontext()
