"""Run an execution plan on an extracted graph: one training step, op by op.

The :class:`Executor` walks the plan's ``Compute``/``Free`` statements. A
``Compute`` runs the node's aten ops (a small ``torch.fx.GraphModule``) on the
values held in its input registers; a ``Free`` drops the register, and with it
the only reference the executor holds, so the storage goes back to the
allocator. Nothing else keeps activations alive: the ops run under
``torch.no_grad`` (the joint graph already contains the backward ops).

* Gradients, model outputs and buffer updates are taken from a node's first
  computation (its own stage) only; recomputations never update BatchNorm
  statistics twice.
* Nodes with random ops (dropout) save the RNG state before their first
  computation and replay it when recomputed, so masks are identical, and the
  global RNG stream advances exactly as in eager mode.
* The executor tracks the bytes of the live storages it holds (views and
  aliases counted once) plus the fixed bytes of the graph. With
  ``measure=True`` it also runs each node op by op and measures the storages
  of its temporaries; on CPU the tracked peak then equals the simulator's
  prediction for a non-hoisted plan (and is below it for a hoisted one).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from remat_core import ExecutionPlan
from remat_core.errors import RematError
from remat_core.plan import Compute

from .extract import ExtractedGraph

__all__ = ["Executor", "StepState"]

log = logging.getLogger(__name__)


@dataclass
class StepState:
    """The executor's state during one training step."""

    values: list  # joint placeholders: params, buffers, inputs, tangents
    regs: dict = field(default_factory=dict)
    reg_keys: dict = field(default_factory=dict)
    live: dict = field(default_factory=dict)  # storage ptr -> [refcount, nbytes]
    current_bytes: int = 0
    peak_bytes: int = 0
    step_bytes: list = field(default_factory=list)
    fixed_ptrs: set = field(default_factory=set)
    rng: dict = field(default_factory=dict)
    joint_values: dict = field(default_factory=dict)
    counts: Any = None
    ops_run: int = 0
    pos: int = 0


class Executor:
    """Executes an :class:`~remat_core.ExecutionPlan` on an :class:`ExtractedGraph`.

    Parameters
    ----------
    extracted : ExtractedGraph
    plan : remat_core.ExecutionPlan
        A plan for ``extracted.graph`` (from :func:`remat_core.make_plan`).
    measure : bool
        Also run every node op by op and measure its temporaries (slower; for
        checking memory against the simulator).

    Attributes
    ----------
    peak_bytes : int
        Tracked peak of the last step (fixed bytes included).
    compute_counts : numpy.ndarray
        How many times each node ran in the last step.
    ops_run : int
        Aten ops run in the last step.

    Raises
    ------
    TypeError
        If ``plan`` is not an ExecutionPlan for this graph.
    """

    def __init__(self, extracted: ExtractedGraph, plan: ExecutionPlan, measure: bool = False):
        if not isinstance(extracted, ExtractedGraph):
            raise TypeError(f"`extracted` must be an ExtractedGraph; got {type(extracted).__name__}")
        if not isinstance(plan, ExecutionPlan):
            raise TypeError(f"`plan` must be a remat_core.ExecutionPlan; got {type(plan).__name__}")
        if plan.num_nodes != extracted.graph.n:
            raise ValueError(f"`plan` has {plan.num_nodes} nodes but the graph has {extracted.graph.n}")
        self.eg = extracted
        self.plan = plan
        self.measure = bool(measure)
        n_fwd = extracted.n_forward
        stmts = plan.statements
        split = next((i for i, s in enumerate(stmts) if isinstance(s, Compute) and s.stage >= n_fwd), len(stmts))
        self._split = split
        self._stmts = stmts
        self._fns = [g.fn.forward for g in extracted.groups]
        self.peak_bytes = 0
        self.step_bytes = np.zeros(0, dtype=np.int64)
        self.compute_counts = np.zeros(extracted.graph.n, dtype=np.int64)
        self.ops_run = 0
        n_mut = len(extracted.mutated_buffers)
        self._n_mut = n_mut
        self._n_fwd_out = n_mut + extracted.n_user_outputs

    # ------------------------------------------------------------------ steps
    def begin(self, params: Sequence, buffers: Sequence, inputs: Sequence) -> StepState:
        """Start a step: snapshot mutated buffers, collect the fixed storages."""
        import torch

        eg = self.eg
        if len(params) != eg.n_params or len(buffers) != len(eg.buffer_names) or len(inputs) != eg.n_inputs:
            raise ValueError(
                f"expected {eg.n_params} parameters, {len(eg.buffer_names)} buffers and {eg.n_inputs} inputs; "
                f"got {len(params)}, {len(buffers)} and {len(inputs)}")
        bufs = list(buffers)
        for j in eg.mutated_buffers:
            bufs[j] = bufs[j].detach().clone()  # the step reads the old statistics, even on recomputation
        values = [p.detach() for p in params] + [b.detach() for b in bufs] + [x.detach() for x in inputs]
        values += [None] * len(eg.tangent_outputs)
        st = StepState(values=values, counts=np.zeros(eg.graph.n, dtype=np.int64))
        st.fixed_ptrs = {v.untyped_storage().data_ptr() for v in values if v is not None}
        st.current_bytes = 0
        return st

    def run_forward(self, st: StepState) -> None:
        """Run the statements of the forward stages."""
        self._run(st, 0, self._split)

    def run_backward(self, st: StepState, tangents: Sequence) -> None:
        """Set the output tangents and run the remaining statements."""
        import torch

        eg = self.eg
        base = len(eg.param_names) + len(eg.buffer_names) + eg.n_inputs
        for i, t in enumerate(tangents):
            shape, stride, dtype = eg.tangent_meta[i]
            if t is None:
                t = torch.zeros(shape, dtype=dtype, device=self._device(st))
            elif tuple(t.stride()) != stride:
                t = t.contiguous() if torch.empty(shape).as_strided(shape, stride).is_contiguous() else \
                    torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)
            st.values[base + i] = t.detach()
            st.fixed_ptrs.add(t.untyped_storage().data_ptr())
        self._run(st, self._split, len(self._stmts))
        self._finish(st)

    def _device(self, st):
        for v in st.values:
            if v is not None:
                return v.device
        return "cpu"

    def _finish(self, st: StepState) -> None:
        if st.regs:
            raise RematError(f"plan left {len(st.regs)} registers live")  # pragma: no cover - plans are checked
        self.peak_bytes = int(st.peak_bytes)
        self.step_bytes = np.asarray(st.step_bytes, dtype=np.int64)
        self.compute_counts = st.counts.copy()
        self.ops_run = st.ops_run

    # -------------------------------------------------------- joint outputs
    def user_outputs(self, st: StepState) -> list:
        return [st.joint_values.get(self._n_mut + i) for i in range(self.eg.n_user_outputs)]

    def buffer_updates(self, st: StepState) -> dict:
        """``{buffer position: new value}`` of the mutated buffers."""
        return {b: st.joint_values[j] for j, b in enumerate(self.eg.mutated_buffers) if j in st.joint_values}

    def primal_grads(self, st: StepState) -> list:
        """Gradient of every primal (parameters, buffers, inputs), ``None`` where there is none."""
        return [st.joint_values.get(j) if j is not None else None for j in self.eg.grad_slots]

    # ------------------------------------------------------------ the loop
    def _run(self, st: StepState, start: int, stop: int) -> None:
        import torch

        groups = self.eg.groups
        fns = self._fns
        values = st.values
        regs = st.regs
        fixed_base = self.eg.graph.fixed_bytes
        ac = (torch.autocast(device_type=self.eg.device_type, enabled=False)
              if torch.is_autocast_enabled(self.eg.device_type) else contextlib.nullcontext())
        with torch.no_grad(), ac:
            for s in self._stmts[start:stop]:
                if isinstance(s, Compute):
                    k = s.node
                    spec = groups[k]
                    args = [values[src[1]] if src[0] == "ph" else regs[s.inputs[src[1]]][src[2]]
                            for src in spec.inputs]
                    if spec.random:
                        if k in st.rng:
                            with _replay_rng(st.rng[k]):
                                outs, internal = self._call(k, args, st)
                        else:
                            st.rng[k] = _get_rng()
                            outs, internal = self._call(k, args, st)
                    else:
                        outs, internal = self._call(k, args, st)
                    st.counts[k] += 1
                    st.ops_run += len(spec.ops)
                    fixed = st.fixed_ptrs
                    jptrs = set()
                    for oi, j in spec.joint_outputs:
                        t = outs[oi]
                        jptrs.add(t.untyped_storage().data_ptr())
                        if s.stage == k:
                            st.joint_values[j] = t
                    keys = []
                    seen = set()
                    new_bytes = 0
                    live = st.live
                    for t in outs:
                        if not isinstance(t, torch.Tensor):
                            continue
                        stg = t.untyped_storage()
                        p = stg.data_ptr()
                        nb = stg.nbytes()
                        if nb == 0 or p in fixed or p in jptrs or p in seen:
                            continue
                        seen.add(p)
                        keys.append(p)
                        ent = live.get(p)
                        if ent is None:
                            live[p] = [1, nb]
                            new_bytes += nb
                        else:
                            ent[0] += 1
                    before = st.current_bytes
                    st.current_bytes += new_bytes
                    if internal is None:
                        step = fixed_base + st.current_bytes + spec.workspace_bytes
                    else:
                        step = fixed_base + before + internal
                    st.step_bytes.append(step)
                    if step > st.peak_bytes:
                        st.peak_bytes = step
                    regs[s.register] = outs
                    st.reg_keys[s.register] = keys
                else:
                    del regs[s.register]
                    live = st.live
                    for p in st.reg_keys.pop(s.register):
                        ent = live[p]
                        ent[0] -= 1
                        if ent[0] == 0:
                            st.current_bytes -= ent[1]
                            del live[p]

    def _call(self, k: int, args: list, st: StepState):
        if not self.measure:
            return self._fns[k](*args), None
        return _run_measured(self.eg.groups[k], args, st.fixed_ptrs)

    # ------------------------------------------------------- one-call step
    def step(self, model, inputs: Sequence, tangents: Sequence | None = None, accumulate: bool = True):
        """Run a whole training step: forward, backward, gradients into ``.grad``.

        Parameters
        ----------
        model : torch.nn.Module
            The model the graph was extracted from.
        inputs : sequence of torch.Tensor
        tangents : sequence of torch.Tensor, optional
            Gradient of the loss with respect to each output that requires
            grad (default: ones, i.e. the loss is the sum of the outputs).
        accumulate : bool
            Add to existing ``.grad`` (as autograd does) instead of replacing.

        Returns
        -------
        list of torch.Tensor
            The model outputs (flat).
        """
        import torch

        params = [p for _, p in model.named_parameters()]
        buffers = [b for _, b in model.named_buffers()]
        st = self.begin(params, buffers, list(inputs))
        self.run_forward(st)
        outs = self.user_outputs(st)
        self.apply_buffer_updates(model, st)
        if tangents is None:
            tangents = [torch.ones_like(outs[i]) for i in self.eg.tangent_outputs]
        self.run_backward(st, tangents)
        grads = self.primal_grads(st)
        with torch.no_grad():
            for p, g in zip(params, grads[:len(params)]):
                if g is None or not p.requires_grad:
                    continue
                if p.grad is None or not accumulate:
                    p.grad = g.detach()
                else:
                    p.grad.add_(g)
        return outs

    def apply_buffer_updates(self, model, st: StepState) -> None:
        """Copy the new buffer values (BatchNorm statistics) into ``model``, once."""
        import torch

        buffers = [b for _, b in model.named_buffers()]
        with torch.no_grad():
            for b, v in self.buffer_updates(st).items():
                buffers[b].copy_(v)


def _get_rng():
    import torch

    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


@contextlib.contextmanager
def _replay_rng(state):
    import torch

    saved = _get_rng()
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])
    try:
        yield
    finally:
        torch.set_rng_state(saved["cpu"])
        if "cuda" in saved:
            torch.cuda.set_rng_state(saved["cuda"])


def _run_measured(spec, args, fixed_ptrs):
    """Run a group op by op; returns (outputs, internal peak bytes).

    The rule matches :func:`remat_torch.extract._internal_peak`: after each op
    its values are live; a value dies after its last read in the group unless
    it is returned; a storage counts while a live value references it. Storages
    of joint outputs (gradients, model outputs, buffer updates) and of inputs
    are fixed memory and not counted.
    """
    import torch

    g = spec.fn.graph
    nodes = list(g.nodes)
    out_node = nodes[-1]
    last_use: dict = {}
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:
            last_use[a] = i
    out_set = set(out_node.all_input_nodes)
    env: dict = {}
    it = iter(args)
    hold = []  # keep storages alive so pointers are unique during the measurement
    steps: list[dict] = []
    live: dict = {}
    for i, n in enumerate(nodes):
        if n.op == "placeholder":
            env[n] = next(it)
            continue
        if n.op == "output":
            break
        a = torch.fx.node.map_arg(n.args, lambda x: env[x])
        kw = torch.fx.node.map_arg(n.kwargs, lambda x: env[x])
        env[n] = n.target(*a, **kw)
        live[n] = True
        cur = {}
        for v in live:
            for t in _tensors(env[v]):
                stg = t.untyped_storage()
                hold.append(stg)
                if stg.nbytes():
                    cur[stg.data_ptr()] = stg.nbytes()
        steps.append(cur)
        for v in list(live):
            if v not in out_set and last_use.get(v, i) <= i:
                del live[v]
    outs = tuple(env[a] if isinstance(a, torch.fx.Node) else a for a in out_node.args[0])
    excluded = set(fixed_ptrs)
    for oi, _ in spec.joint_outputs:
        excluded.add(outs[oi].untyped_storage().data_ptr())
    for x in args:
        if isinstance(x, torch.Tensor):
            excluded.add(x.untyped_storage().data_ptr())
    peak = max((sum(b for p, b in cur.items() if p not in excluded) for cur in steps), default=0)
    return outs, int(peak)


def _tensors(v):
    import torch

    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (tuple, list)):
        return [x for x in v if isinstance(x, torch.Tensor)]
    return []
