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

A plan may also move the training state (:mod:`remat_core.host.state`, ZeRO
style) when its layout is :func:`torch_state_layout`'s: one block per
parameter and per input tensor (gradients stay node memory in a PyTorch graph,
held to the end of the step, and buffers stay resident):

* ``DropState`` releases the executor's device copy of a block (a device
  parameter's storage is swapped out of the module, to a host copy made
  then, so that the device memory really goes); ``FetchState`` copies the
  block's host copy into a new device tensor that the nodes read.
* A parameter the plan drops before its first computation lives on the host
  between steps: the module's parameter *is* the host copy (on CUDA it is
  moved to pinned host memory on the first step), its gradient is copied to
  the host after the step, and the optimizer, with its state (momentum,
  Adam's moments), steps it on the host, as in ZeRO-Offload. Build the
  optimizer after the first step on CUDA, or before any step has made
  state, so that its state is created next to the parameter.
* An input the caller still holds is not freed by a drop on CUDA (the
  executor only lets go of its own reference).

Gradients, model outputs, BatchNorm statistics and dropout masks follow the
same rules as the base executor (outputs from a node's first computation,
gradients from its last, RNG replayed for recomputed random nodes).

This module imports torch, :mod:`remat_core` and the executor of this package.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from remat_core.host import (DropState, FetchState, HostPlan, Offload, Prefetch, SaveState, StateLayout, Wait,
                              simulate_host)
from remat_core.plan import Compute, ExecutionPlan, Free, InvalidPlanError

from .execute import Executor, StepState
from .extract import ExtractedGraph

__all__ = ["OffloadExecutor", "strip_copies", "torch_state_layout", "offload_training_state"]


def _placeholder_readers(eg: ExtractedGraph) -> dict:
    """Joint placeholder -> the graph nodes that read it (views of it are inlined into its readers)."""
    out: dict[int, set] = {}
    for k, g in enumerate(eg.groups):
        for src in g.inputs:
            if src[0] == "ph":
                out.setdefault(int(src[1]), set()).add(k)
    return out


def torch_state_layout(extracted: ExtractedGraph, model, inputs) -> StateLayout:
    """The training state of an extracted graph that a plan may keep on the host: its parameters and inputs.

    One ``"param"`` block per parameter (named ``"param:<name>"``) and one
    ``"input"`` block per input tensor (``"input:<i>"``), each read by the
    nodes whose ops read it. A storage shared by two of the graph's fixed
    tensors (or a buffer) stays resident, as do buffers, output tangents and
    model outputs. Parameter gradients are node memory in a PyTorch graph
    (held to the end of the step), so the layout has no gradient blocks.

    Parameters
    ----------
    extracted : ExtractedGraph
    model : torch.nn.Module
        The model ``extracted`` was traced from (for the tensors' sizes).
    inputs : sequence of torch.Tensor
        The inputs it was traced with.

    Returns
    -------
    remat_core.host.StateLayout
        For ``solve(..., host_bandwidth=..., state_layout=...)``; the
        :class:`OffloadExecutor` runs the plans made with it.

    Raises
    ------
    TypeError, ValueError
        If ``extracted`` is not an ExtractedGraph, or ``model`` and
        ``inputs`` do not have its parameters and inputs.

    Examples
    --------
    >>> import torch
    >>> from remat_torch import extract_graph
    >>> model, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), torch.randn(4, 8)
    >>> eg = extract_graph(model, (x,))
    >>> [(b.name, b.nbytes, b.kind) for b in torch_state_layout(eg, model, (x,)).blocks][:2]
    [('param:0.weight', 256, 'param'), ('param:0.bias', 32, 'param')]
    """
    if not isinstance(extracted, ExtractedGraph):
        raise TypeError(f"`extracted` must be an ExtractedGraph; got {type(extracted).__name__}")
    params = [p for _, p in model.named_parameters()]
    buffers = [b for _, b in model.named_buffers()]
    inputs = list(inputs)
    if [n for n, _ in model.named_parameters()] != list(extracted.param_names):
        raise ValueError("`model` does not have the parameters `extracted` was traced with")
    if len(inputs) != extracted.n_inputs:
        raise ValueError(f"`inputs` must hold the {extracted.n_inputs} inputs `extracted` was traced with; "
                         f"got {len(inputs)}")
    tensors = params + buffers + inputs
    owners: dict = {}
    for t in tensors:
        key = (t.untyped_storage().data_ptr(), t.device)
        owners[key] = owners.get(key, 0) + 1
    readers = _placeholder_readers(extracted)
    n_p, n_b = len(params), len(buffers)
    blocks = []
    for i, t in enumerate(tensors):
        if n_p <= i < n_p + n_b or owners[(t.untyped_storage().data_ptr(), t.device)] > 1:
            continue
        name = f"param:{extracted.param_names[i]}" if i < n_p else f"input:{i - n_p - n_b}"
        blocks.append((name, int(t.untyped_storage().nbytes()), "param" if i < n_p else "input",
                       tuple(sorted(readers.get(i, ())))))
    return StateLayout(extracted.graph, blocks)


def _block_placeholders(extracted: ExtractedGraph, layout: StateLayout) -> list[int]:
    """The joint placeholder of each block of a :func:`torch_state_layout` layout.

    Raises
    ------
    ValueError
        If a block is not one of a parameter or input of ``extracted`` read by the nodes it names.
    """
    readers = _placeholder_readers(extracted)
    n_p, n_b = extracted.n_params, len(extracted.buffer_names)
    out = []
    for b in layout.blocks:
        kind, _, name = b.name.partition(":")
        if kind == "param" and b.kind == "param" and name in extracted.param_names:
            i = extracted.param_names.index(name)
        elif kind == "input" and b.kind == "input" and name.isdigit() and int(name) < extracted.n_inputs:
            i = n_p + n_b + int(name)
        else:
            raise ValueError(f"`plan` has state block {b.name!r}, which is not a parameter or input of the graph "
                             f"(plans that move the state must use remat_torch.offload.torch_state_layout)")
        if tuple(sorted(readers.get(i, ()))) != b.nodes:
            raise ValueError(f"`plan` has state block {b.name!r} read by nodes {list(b.nodes)}; the graph's nodes "
                             f"that read it are {sorted(readers.get(i, ()))}")
        out.append(i)
    return out

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
        if plan.num_partial_offloads:   # a storage is one allocation: it cannot be freed in part
            raise ValueError("`plan` offloads chunks of values (OffloadPart), which the PyTorch executor does not run "
                             "(a tensor's storage cannot be freed in part); partial offloading is simulated only")
        self._block_ph = _block_placeholders(extracted, plan.layout) if plan.layout is not None else []
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
        # blocks dropped before the first computation lie on the host between steps
        first = next((i for i, s in enumerate(hs) if isinstance(s, Compute)), len(hs))
        self.host_blocks = sorted({s.block for s in hs[:first] if isinstance(s, DropState)})

    def begin(self, params, buffers, inputs) -> StepState:
        import torch

        layout = self.host_plan.layout
        if layout is not None:
            cuda = any(p.device.type == "cuda" for p in params)
            tensors = list(params) + list(buffers) + list(inputs)
            for j in self.host_blocks:
                t = tensors[self._block_ph[j]]
                # ZeRO-Offload: a parameter on the host between steps lives there (its optimizer state too)
                if cuda and t.device.type == "cuda" and isinstance(t, torch.nn.Parameter):
                    grad, t.grad = t.grad, None   # a gradient must be where its parameter is
                    t.data = t.data.to("cpu").pin_memory()
                    if grad is not None:
                        t.grad = grad.to("cpu")
        st = super().begin(params, buffers, inputs)
        st.host = {}           # host slot -> tensors
        st.host_left = dict(self._prefetches_left)
        st.events = {}         # register -> CUDA event of its copy
        st.host_bytes = 0
        self.copy_log = []
        self.peak_host_bytes = 0
        st.params = list(params)
        # the device: that of a tensor the plan keeps there (a parameter on the host between steps is on the CPU)
        host_ph = {self._block_ph[j] for j in self.host_blocks}
        st.device = next((v.device for i, v in enumerate(st.values) if v is not None and i not in host_ph),
                         torch.device("cpu"))
        st.state_off = 0        # bytes of the state blocks off the device
        st.state_on = [True] * len(self._block_ph)   # every block starts on the device (fixed bytes)
        st.state_host = {}      # block -> its host copy
        st.state_events = {}    # block -> CUDA event of the copy on it
        if layout is not None:
            for j, i in enumerate(self._block_ph):
                t = st.values[i]
                if t.untyped_storage().nbytes() != layout.blocks[j].nbytes:
                    raise ValueError(f"state block {layout.blocks[j].name!r} is {layout.blocks[j].nbytes} bytes in "
                                     f"the plan; the tensor has {t.untyped_storage().nbytes()}")
            for j in self.host_blocks:
                t = st.values[self._block_ph[j]]
                st.state_host[j] = t if t.device.type == "cpu" else t.to("cpu").pin_memory()
            st.host_bytes = sum(layout.blocks[j].nbytes for j in self.host_plan.dropped_blocks())
            self.peak_host_bytes = st.host_bytes
        return st

    def _device(self, st):
        return getattr(st, "device", None) or super()._device(st)

    def _device_bytes(self, st: StepState) -> int:
        """Device bytes the step holds now: fixed bytes (less the state blocks off the device) and registers."""
        return self.eg.graph.fixed_bytes - st.state_off + st.current_bytes

    def primal_grads(self, st: StepState) -> list:
        """As the base class; the gradient of a parameter that lives on the host goes to the host."""
        grads = super().primal_grads(st)
        for j in self.host_blocks:
            i = self._block_ph[j]
            host = st.state_host[j]
            if i < len(grads) and grads[i] is not None and grads[i].device != host.device:
                grads[i] = grads[i].to(host.device)
        return grads

    def run_backward(self, st: StepState, tangents) -> None:
        super().run_backward(st, tangents)
        if st.state_events:   # the step ends when the copies of the state do
            import torch

            for _, ev in st.state_events.values():
                torch.cuda.current_stream().wait_event(ev)
            st.state_events.clear()

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
                elif isinstance(s, DropState):
                    self._drop_state(st, s.block, cuda, stream)
                elif isinstance(s, FetchState):
                    self._fetch_state(st, s.block, cuda, stream)
                elif isinstance(s, SaveState):   # pragma: no cover - torch_state_layout has no gradient blocks
                    raise InvalidPlanError("the PyTorch executor keeps gradients as node memory: no SaveState")
                else:  # pragma: no cover - HostPlan checks its statements
                    raise InvalidPlanError(f"not a host plan statement: {s!r}")

    # ------------------------------------------------------------ statements
    def _compute(self, st: StepState, s: Compute, cuda: bool) -> None:
        layout = self.host_plan.layout
        need = layout.need_indices(s.node) if layout is not None else ()
        for j in need:
            if not st.state_on[j]:
                raise InvalidPlanError(f"node {s.node} reads state block {layout.blocks[j].name!r}, which is not "
                                       f"on the device")
        if cuda:
            import torch

            for r in s.inputs:
                self._wait(st, r, cuda, out=False)
            for j in need:
                ev = st.state_events.pop(j, None)
                if ev is not None:
                    torch.cuda.current_stream().wait_event(ev[1])
        peak = st.peak_bytes
        self._base_statement(st, s)
        if layout is not None:   # the base class counts all fixed bytes: take off the blocks on the host
            st.step_bytes[-1] -= st.state_off
            st.peak_bytes = max(peak, st.step_bytes[-1])

    def _drop_state(self, st: StepState, j: int, cuda: bool, stream) -> None:
        """Release the device copy of state block ``j``; a block on the device between steps gets a host copy
        first (the simulator takes its host copy as current), and a parameter's storage leaves the module."""
        import torch

        if not st.state_on[j]:
            raise InvalidPlanError(f"the plan drops state block {j}, which is not on the device")
        i = self._block_ph[j]
        dev = st.values[i]
        ev = st.state_events.pop(j, None)
        if cuda and ev is not None:
            torch.cuda.current_stream().wait_event(ev[1])
        if j not in st.state_host:
            if cuda:
                host = torch.empty(dev.shape, dtype=dev.dtype, pin_memory=True)
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    host.copy_(dev, non_blocking=True)
                dev.record_stream(stream)   # the allocator reuses the storage only after the copy
            else:
                host = dev.clone()
            st.state_host[j] = host
        if i < len(st.params) and j not in self.host_blocks:
            st.params[i].data = st.state_host[j]   # the module lets go of the device storage
        if dev is not st.state_host[j]:   # its address may be reused by a value the step must count
            st.fixed_ptrs.discard(dev.untyped_storage().data_ptr())
        st.values[i] = None
        st.state_on[j] = False
        st.state_off += self.host_plan.layout.blocks[j].nbytes
        self.copy_log.append(("drop_state", j))

    def _fetch_state(self, st: StepState, j: int, cuda: bool, stream) -> None:
        """Copy state block ``j`` from its host copy into a new device tensor that the nodes read."""
        import torch

        if st.state_on[j] or j not in st.state_host:
            raise InvalidPlanError(f"the plan fetches state block {j}, which is on the device or has no host copy")
        host = st.state_host[j]
        i = self._block_ph[j]
        if cuda:   # allocated on the compute stream (counted from the start of the copy, as simulated)
            dev = torch.empty(host.shape, dtype=host.dtype, device=self._device(st))
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                dev.copy_(host, non_blocking=True)
                event = torch.cuda.Event()
                event.record(stream)
            st.state_events[j] = ("in", event)
        else:
            dev = host.clone()
        st.values[i] = dev
        st.fixed_ptrs.add(dev.untyped_storage().data_ptr())
        if i < len(st.params) and j not in self.host_blocks:
            st.params[i].data = dev   # a parameter on the device between steps goes back into the module
        st.state_on[j] = True
        st.state_off -= self.host_plan.layout.blocks[j].nbytes
        st.peak_bytes = max(st.peak_bytes, self._device_bytes(st))
        self.copy_log.append(("fetch_state", j))

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
        st.peak_bytes = max(st.peak_bytes, self._device_bytes(st))
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


def offload_training_state(model, inputs, budget: Any, host_bandwidth: Any, granularity: str = "module",
                           method: str = "auto", cost_model: str = "unit", cost_per_s: float | None = None,
                           **options: Any) -> "OffloadExecutor":
    """Plan and build a training step that keeps activations, parameters and inputs on the host as needed.

    The model is traced (:func:`~remat_torch.extract_graph`), its parameters
    and inputs become a :func:`torch_state_layout`, and
    :func:`remat_core.solve` with ``host_bandwidth`` and ``state_layout``
    returns the fastest simulated plan within ``budget``; the executor runs
    it: ``executor.step(model, inputs)`` fills ``.grad`` as autograd would,
    then the caller's optimizer steps (on the host for the parameters the plan
    keeps there, ZeRO-Offload style).

    Parameters
    ----------
    model : torch.nn.Module
    inputs : sequence of torch.Tensor
    budget : int, str or float
        Device bytes (``"8GiB"``; may be below the parameters' size) or a
        fraction of activation memory (see ``remat_core.units``).
    host_bandwidth : float or str
        Bytes per second (``"16GB/s"``, ``math.inf``).
    granularity, cost_model : str
        As in :func:`~remat_torch.extract_graph`.
    method : str
        The remat method the joint search starts from (``remat_core.host.solve_offload``).
    cost_per_s : float, optional
        The graph's cost units per second (needed for a finite bandwidth
        when the cost model has no time unit).
    **options
        Passed to the solver.

    Returns
    -------
    OffloadExecutor
        With ``result`` (the :class:`~remat_core.host.HostResult`) and
        ``layout`` set.

    Raises
    ------
    ValueError
        Naming the argument, or when no plan fits ``budget``.

    Examples
    --------
    >>> import math, torch
    >>> layers = [m for _ in range(3) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())]
    >>> model, x = torch.nn.Sequential(*layers, torch.nn.Linear(64, 8)), torch.randn(4, 64)
    >>> ex = offload_training_state(model, (x,), budget=55000, host_bandwidth=math.inf)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> _ = ex.step(model, (x,))    # .grad filled; the weights kept on the host are stepped there
    >>> opt.step()
    >>> ex.peak_bytes <= 55000 < int(ex.eg.graph.min_budget_lower_bound_bytes())   # remat alone: 105280
    True
    """
    from remat_core.host import solve_offload, validate_bandwidth
    from remat_core.units import resolve_budget

    from .extract import extract_graph

    bw = validate_bandwidth(host_bandwidth)
    if bw is None:
        raise ValueError(f"`host_bandwidth` must be a positive number of bytes/s; got {host_bandwidth!r}")
    inputs = tuple(inputs)
    eg = extract_graph(model, inputs, granularity=granularity, cost_model=cost_model)
    layout = torch_state_layout(eg, model, inputs)
    budget_bytes = resolve_budget(eg.graph, budget)
    res = solve_offload(eg.graph, budget_bytes, method=method, host_bandwidth=bw, cost_per_s=cost_per_s,
                        state_layout=layout, **options)
    if not res.success:
        raise ValueError(f"`budget` {budget!r}: {res.message}")
    ex = OffloadExecutor(eg, res.host_plan, host_bandwidth=bw, cost_per_s=cost_per_s)
    ex.result = res
    ex.layout = layout
    return ex

