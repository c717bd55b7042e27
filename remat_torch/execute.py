"""Run an execution plan on an extracted graph: one training step.

The :class:`Executor` turns the plan's ``Compute``/``Free`` statements into
two generated Python functions, one for the forward stages and one for the
rest (compiled once, when the executor is built). Every ``Compute`` becomes
the node's aten ops written out inline, each op a direct call of its C++
entry point on local variables; every ``Free`` becomes a ``del`` of the
register's variables, so the storage goes back to the allocator exactly
where the plan frees it, and a value inside a node dies after its last read
there, as in the node's own ``torch.fx.GraphModule``. No per-op dispatch
through Python wrappers, dictionaries or pytrees is left at run time, and a
recomputation runs the same code as the first computation: it costs what
the plan says. The ops run under ``torch.no_grad`` (the joint graph already
contains the backward ops), so nothing else keeps activations alive.

* Model outputs and buffer updates are taken from a node's first
  computation (its own stage) only, so recomputations never update
  BatchNorm statistics twice; gradients from their node's last computation,
  the one the plan keeps to the end of the step.
* Nodes with random ops (dropout) that the plan recomputes save the RNG
  state before their first computation and replay it when recomputed (the
  last replay drops it), so masks are identical, and the global RNG stream
  advances exactly as in eager mode.
* ``peak_bytes`` is the plan's peak in the graph's memory model
  (:func:`remat_core.replay`). With ``track=True`` the executor instead
  interprets the plan statement by statement and tracks the bytes of the
  live storages it holds (views and aliases counted once) plus the fixed
  bytes of the graph; with ``measure=True`` it also runs each node op by op
  and measures the storages of its temporaries, and on CPU the tracked peak
  then equals the simulator's prediction for a non-hoisted plan (and is
  below it for a hoisted one). Both are for checking and are slower.
"""

from __future__ import annotations

import contextlib
import logging
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from remat_core import ExecutionPlan
from remat_core.errors import RematError
from remat_core.plan import Compute, replay

from .extract import ExtractedGraph

__all__ = ["Executor", "StepState"]

log = logging.getLogger(__name__)


@dataclass
class StepState:
    """The executor's state during one training step."""

    values: list  # joint placeholders: params, buffers, inputs, tangents
    joint_values: list  # joint-graph outputs, filled by the first computation of their node
    rng: dict = field(default_factory=dict)  # node -> RNG state before its first computation
    carry: list = field(default_factory=list)  # registers live between the forward and the backward part
    # the tracking interpreter's bookkeeping (``track=True`` only)
    regs: dict = field(default_factory=dict)
    reg_keys: dict = field(default_factory=dict)
    live: dict = field(default_factory=dict)  # storage ptr -> [refcount, nbytes]
    current_bytes: int = 0
    peak_bytes: int = 0
    step_bytes: list = field(default_factory=list)
    fixed_ptrs: set = field(default_factory=set)
    rng_start: Any = None  # RNG states at the start of the forward (for an output's gradient outside the plan)


class Executor:
    """Executes an :class:`~remat_core.ExecutionPlan` on an :class:`ExtractedGraph`.

    Parameters
    ----------
    extracted : ExtractedGraph
    plan : remat_core.ExecutionPlan
        A plan for ``extracted.graph`` (from ``make_plan`` or ``RematResult.plan``).
    measure : bool
        Interpret the plan, track live storages and run every node op by op to
        measure its temporaries (slower; for checking memory against the
        simulator). Implies ``track``.
    track : bool
        Interpret the plan and track the live storages it holds (slower; for
        checking); default: the generated code, and ``peak_bytes`` from the
        memory model.

    Attributes
    ----------
    predicted_peak_bytes : int
        The plan's peak in the graph's memory model (:func:`remat_core.replay`;
        fixed bytes included).
    peak_bytes : int
        Peak of the last step (fixed bytes included): tracked with ``track``
        or ``measure``, else the plan's peak in the memory model.
    step_bytes : numpy.ndarray
        Memory at each compute statement of the last step, in the same sense.
    compute_counts : numpy.ndarray
        How many times the plan computes each node in a step.
    ops_run : int
        Aten ops a step runs.
    source : tuple of str
        The generated code of the forward and backward parts (empty when
        interpreting).

    Raises
    ------
    TypeError
        If ``plan`` is not an ExecutionPlan for this graph.
    """

    def __init__(self, extracted: ExtractedGraph, plan: ExecutionPlan, measure: bool = False,
                 track: bool = False):
        if not isinstance(extracted, ExtractedGraph):
            raise TypeError(f"`extracted` must be an ExtractedGraph; got {type(extracted).__name__}")
        if not isinstance(plan, ExecutionPlan):
            raise TypeError(f"`plan` must be a remat_core.ExecutionPlan; got {type(plan).__name__}")
        if plan.num_nodes != extracted.graph.n:
            raise ValueError(f"`plan` has {plan.num_nodes} nodes but the graph has {extracted.graph.n}")
        import torch

        self.eg = extracted
        self.plan = plan
        self.measure = bool(measure)
        self.track = bool(track) or self.measure
        n_fwd = extracted.n_forward
        stmts = plan.statements
        split = next((i for i, s in enumerate(stmts) if isinstance(s, Compute) and s.stage >= n_fwd), len(stmts))
        self._split = split
        self._stmts = stmts
        self._fns = [g.fn.forward for g in extracted.groups]
        self._n_mut = len(extracted.mutated_buffers)
        self._n_fwd_out = self._n_mut + extracted.n_user_outputs
        self._n_joint = self._n_fwd_out + len(extracted.grad_slots)
        # joint outputs held as fixed bytes: buffer updates and the model outputs traced with a tangent
        self._fixed_joint = frozenset(range(self._n_fwd_out)) - {self._n_mut + i for i in extracted.released_outputs}
        self._tangent_base = len(extracted.param_names) + len(extracted.buffer_names) + extracted.n_inputs
        self._tangent_contiguous = [torch.empty(0).new_empty_strided(shape, stride, device="meta").is_contiguous()
                                    for shape, stride, _ in extracted.tangent_meta]
        # gradients are taken from their node's last computation (the plan keeps that one to the end of
        # the step); model outputs and buffer updates from the first (RNG and statistics as in eager)
        self._last_register = {s.node: s.register for s in stmts if isinstance(s, Compute)}
        self.compute_counts = plan.compute_counts()
        # a mutated buffer (BatchNorm's statistics) is updated in place after the forward part: the step
        # works on a copy of it only where a node that runs after that (in the backward part; any node when
        # an output outside the plan may be differentiated again from the start) has a result other than a
        # buffer update that depends on it; eager PyTorch makes no copy, and one puts the plan above eager
        n_before = len(extracted.param_names)
        late = {s.node for s in stmts[split:] if isinstance(s, Compute)}
        n_mut = len(extracted.mutated_buffers)
        again = range(len(extracted.groups)) if extracted.untraced_outputs else late
        read_late = {src[1] - n_before for k in again for src in _value_inputs(extracted.groups[k], n_mut)
                     if src[0] == "ph"}
        self._cloned_buffers = [j for j in extracted.mutated_buffers if j in read_late]
        self.ops_run = int(sum(int(c) * len(g.ops) for c, g in zip(self.compute_counts, extracted.groups)))
        rep = replay(extracted.graph, plan)
        self.predicted_peak_bytes = int(rep.peak_memory_bytes)
        self.peak_bytes = self.predicted_peak_bytes
        self.step_bytes = rep.step_memory_bytes
        self.source: tuple = ()
        if not self.track:
            self._forward_part, self._backward_part, self.source = _compile_plan(extracted, plan, split,
                                                                                 self._n_fwd_out)

    # ------------------------------------------------------------------ steps
    def begin(self, params: Sequence, buffers: Sequence, inputs: Sequence) -> StepState:
        """Start a step: snapshot mutated buffers, collect the fixed storages."""
        eg = self.eg
        if len(params) != eg.n_params or len(buffers) != len(eg.buffer_names) or len(inputs) != eg.n_inputs:
            raise ValueError(
                f"expected {eg.n_params} parameters, {len(eg.buffer_names)} buffers and {eg.n_inputs} inputs; "
                f"got {len(params)}, {len(buffers)} and {len(inputs)}")
        bufs = list(buffers)
        for j in self._cloned_buffers:
            bufs[j] = bufs[j].detach().clone()  # the step reads the old statistics, even on recomputation
        values = [p.detach() for p in params] + [b.detach() for b in bufs] + [x.detach() for x in inputs]
        values += [None] * len(eg.tangent_outputs)
        st = StepState(values=values, joint_values=[None] * self._n_joint)
        if self.track:
            st.fixed_ptrs = {v.untyped_storage().data_ptr() for v in values if v is not None}
        return st

    def run_forward(self, st: StepState) -> None:
        """Run the statements of the forward stages."""
        if self.track:
            self._run_tracked(st, 0, self._split)
            return
        import torch

        with torch.no_grad(), self._autocast_off():
            st.carry = self._forward_part(st.values, st.joint_values, st.rng, None)

    def run_backward(self, st: StepState, tangents: Sequence) -> None:
        """Set the output tangents and run the remaining statements."""
        import torch

        eg = self.eg
        base = self._tangent_base
        for i, t in enumerate(tangents):
            shape, stride, dtype = eg.tangent_meta[i]
            if t is None:
                t = torch.zeros(shape, dtype=dtype, device=self._device(st))
            elif tuple(t.stride()) != stride:
                t = t.contiguous() if self._tangent_contiguous[i] else \
                    torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device).copy_(t)
            st.values[base + i] = t.detach()
            if self.track:
                st.fixed_ptrs.add(t.untyped_storage().data_ptr())
        if self.track:
            self._run_tracked(st, self._split, len(self._stmts))
            self._finish(st)
            return
        with torch.no_grad(), self._autocast_off():
            carry, st.carry = st.carry, []
            self._backward_part(st.values, st.joint_values, st.rng, carry)

    def _autocast_off(self):
        import torch

        if torch.is_autocast_enabled(self.eg.device_type):
            return torch.autocast(device_type=self.eg.device_type, enabled=False)
        return contextlib.nullcontext()

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

    # -------------------------------------------------------- joint outputs
    def user_outputs(self, st: StepState) -> list:
        return st.joint_values[self._n_mut:self._n_fwd_out]

    def release_outputs(self, st: StepState) -> None:
        """Drop the step's references to the model outputs once they are handed over: from then on they
        live as long as the caller keeps them (the ``logits`` beside a ``loss`` are not held to the end)."""
        for j in range(self._n_mut, self._n_fwd_out):
            st.joint_values[j] = None

    def buffer_updates(self, st: StepState) -> dict:
        """``{buffer position: new value}`` of the mutated buffers."""
        jv = st.joint_values
        return {b: jv[j] for j, b in enumerate(self.eg.mutated_buffers) if jv[j] is not None}

    def primal_grads(self, st: StepState) -> list:
        """Gradient of every primal (parameters, buffers, inputs), ``None`` where there is none."""
        jv = st.joint_values
        return [jv[j] if j is not None else None for j in self.eg.grad_slots]

    # ------------------------------------------- the tracking interpreter
    def _run_tracked(self, st: StepState, start: int, stop: int) -> None:
        import torch

        groups = self.eg.groups
        values = st.values
        regs = st.regs
        fixed_base = self.eg.graph.fixed_bytes
        with torch.no_grad(), self._autocast_off():
            for s in self._stmts[start:stop]:
                if isinstance(s, Compute):
                    k = s.node
                    spec = groups[k]
                    args = [values[src[1]] if src[0] == "ph" else regs[s.inputs[src[1]]][src[2]]
                            for src in spec.inputs]
                    if spec.random and k in st.rng:
                        state = st.rng.pop(k) if s.register == self._last_register[k] else st.rng[k]
                        with _replay_rng(state):
                            outs, internal = self._call(k, args, st)
                    else:
                        if spec.random and self.compute_counts[k] > 1:
                            st.rng[k] = _get_rng()
                        outs, internal = self._call(k, args, st)
                    fixed = st.fixed_ptrs
                    jptrs = set()  # model outputs and buffer updates: fixed bytes
                    for oi, j in spec.joint_outputs:
                        t = outs[oi]
                        if j in self._fixed_joint:
                            jptrs.add(t.untyped_storage().data_ptr())
                        if j < self._n_fwd_out:
                            if s.stage == k:
                                st.joint_values[j] = t
                        elif s.register == self._last_register[k]:
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
        # with workspaces measured on the allocator, the graph already has what the op-by-op run would find
        if not self.measure or self.eg.graph.meta.get("workspace") == "measure":
            return self._fns[k](*args), None
        return _run_measured(self.eg.groups[k], args, st.fixed_ptrs, self._fixed_joint)

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
        if not self.eg.mutated_buffers:
            return
        import torch

        buffers = [b for _, b in model.named_buffers()]
        with torch.no_grad():
            for b, v in self.buffer_updates(st).items():
                buffers[b].copy_(v)
        for j in range(len(self.eg.mutated_buffers)):   # the model's buffers hold them now
            st.joint_values[j] = None


# ---------------------------------------------------------------- codegen
def _compile_plan(eg: ExtractedGraph, plan: ExecutionPlan, split: int, n_fixed_joint: int):
    """Generate and compile the forward and backward parts of ``plan``.

    Each part is ``part(V, J, RNG, C)``: ``V`` the joint placeholders,
    ``J`` the joint outputs (filled), ``RNG`` the saved RNG states of random
    nodes, ``C`` the registers carried from the forward part (the forward
    part returns them as a list; the backward part takes and empties it).
    """
    stmts = plan.statements
    gen = _Codegen(eg, n_fixed_joint, {s.node: s.register for s in stmts if isinstance(s, Compute)})
    live: dict[int, int] = {}  # register -> node
    for s in stmts[:split]:
        if isinstance(s, Compute):
            live[s.register] = s.node
        else:
            del live[s.register]
    carry = [(r, live[r]) for r in sorted(live)]
    # the backward part first: the carried values it never reads are dropped in the forward part
    per_value = int(plan.compute_counts().max(initial=0)) <= 1
    bwd_src, needed = gen.part("_remat_backward", stmts[split:], carry, [], set(), per_value)
    fwd_src, _ = gen.part("_remat_forward", stmts[:split], [], carry, needed, per_value)
    namespace = dict(gen.globals)
    code = compile(fwd_src + "\n" + bwd_src, f"<remat plan of {eg.graph.name}>", "exec")
    exec(code, namespace)
    return namespace["_remat_forward"], namespace["_remat_backward"], (fwd_src, bwd_src)


class _Codegen:
    """Writes plan statements as straight-line Python over local variables.

    Register ``r`` of node ``k`` is held in variables ``r{r}_{i}``, one per
    output ``i`` of the node; a node's internal values are ``t{r}_{j}`` and are
    deleted after their last read inside the node (or right away if nothing
    reads them), as ``torch.fx`` code does. In a plan that recomputes
    nothing, each ``r{r}_{i}`` is deleted after its own last read in the part
    (or right away if nothing reads it), not where the plan frees the whole
    register: a node's input dies after the node's last op that reads it and
    each output after its own last reader, as autograd frees what it saved,
    so such a plan measures at most eager's peak at any granularity (the
    memory model, in which a node's outputs live together, is then above
    the measurement: +1.2% on tiny Qwen2 at module level). Other plans free
    whole registers where the plan says, as the model predicts (per value,
    BERT at module level at 0.5 measured 5.7% below its prediction).
    """

    def __init__(self, eg: ExtractedGraph, n_fixed_joint: int, last_register: dict):
        self.eg = eg
        self.n_fixed_joint = n_fixed_joint
        self.last_register = last_register
        self.globals: dict[str, Any] = {"_get_rng": _get_rng, "_replay_rng": _replay_rng}
        self._names: dict[Any, str] = {}  # id of a callable/constant -> global name
        self._keep: list = []  # keeps constants alive so their ids stay unique

    def _global(self, obj, prefix: str) -> str:
        key = (prefix, id(obj))
        name = self._names.get(key)
        if name is None:
            name = f"_{prefix}{len(self._names)}"
            self._names[key] = name
            self.globals[name] = obj
            self._keep.append(obj)
        return name

    def _callable(self, target) -> str:
        import torch

        fn = target._op if isinstance(target, torch._ops.OpOverload) else target
        return self._global(fn, "f")

    def _render(self, a, names: dict) -> str:
        import torch.fx as fx

        if isinstance(a, fx.Node):
            return names[a]
        if isinstance(a, (list, tuple)):
            inner = ", ".join(self._render(x, names) for x in a)
            if isinstance(a, tuple):
                return f"({inner},)" if len(a) == 1 else f"({inner})"
            return f"[{inner}]"
        if a is None or type(a) in (bool, int, str):
            return repr(a)
        if type(a) is float and math.isfinite(a):
            return repr(a)
        return self._global(a, "c")

    def part(self, fname: str, stmts, carry_in: list, carry_out: list, live_out: set,
             per_value: bool = True) -> tuple[str, set]:
        """The source of one part, and the carried-in variables it reads. ``live_out``: the carried-out
        variables the next part reads (the others are returned as ``None``). ``per_value``: each register
        variable deleted after its own last read; else whole registers where the plan frees them."""
        eg = self.eg
        groups = eg.groups
        deps = eg.graph.deps
        body: list[tuple] = []   # (indent, line, variables read, variables written)
        used_ph: set[int] = set()
        carried = [f"r{r}_{i}" for r, k in carry_in for i in range(len(groups[k].outputs))]
        if carried:
            body.append(("", f"{', '.join(carried)}, = C", (), tuple(carried)))
            body.append(("", "C.clear()", (), ()))
        reg_outputs: dict[int, int] = {r: len(groups[k].outputs) for r, k in carry_in}  # register -> outputs
        for s in stmts:
            if not isinstance(s, Compute):
                n_out = reg_outputs.pop(s.register)
                if n_out and not per_value:   # else freed per variable after its last read (below)
                    body.append(("", "del " + ", ".join(f"r{s.register}_{i}" for i in range(n_out)), (), ()))
                continue
            k = s.node
            reg_outputs[s.register] = len(groups[k].outputs)
            spec = groups[k]
            lines = self._node(spec, s, deps[k], used_ph)
            if spec.random and s.stage != k:  # a recomputation: the first one's random numbers
                get = "pop" if s.register == self.last_register[k] else "__getitem__"
                body.append(("", f"with _replay_rng(RNG.{get}({k})):", (), ()))
                body.extend(("    ",) + ln for ln in lines)
            else:
                if spec.random and s.register != self.last_register[k]:  # recomputed later
                    body.append(("", f"RNG[{k}] = _get_rng()", (), ()))
                body.extend(("",) + ln for ln in lines)
            for oi, j in spec.joint_outputs:
                if (s.stage == k) if j < self.n_fixed_joint else (s.register == self.last_register[k]):
                    body.append(("", f"J[{j}] = r{s.register}_{oi}", (f"r{s.register}_{oi}",), ()))
        out_vars = [f"r{r}_{i}" for r, k in carry_out for i in range(len(groups[k].outputs))]
        # liveness, last line first: a register variable is deleted after its last read, or right after it
        # is written if nothing reads it
        if not per_value:
            lines = [indent + line for indent, line, _, _ in body]
            ret = [f"return [{', '.join(out_vars)}]"] if carry_out else ["return None"]
            loads = [f"v{i} = V[{i}]" for i in sorted(used_ph)]
            src = "\n".join([f"def {fname}(V, J, RNG, C):"] + ["    " + ln for ln in loads + lines + ret]) + "\n"
            return src, set(carried)
        live = {v for v in out_vars if v in live_out}
        lines: list[str] = []
        needed: set[str] = set()
        for i in range(len(body) - 1, -1, -1):
            indent, line, reads, writes = body[i]
            if i == 0 and carried:   # the carried-in variables read in this part
                needed = {v for v in carried if v in live}
            dead = [v for v in writes if v.startswith("r") and v not in live]
            live.difference_update(writes)
            for v in reads:
                if v.startswith("r") and v not in live:
                    dead.append(v)
                    live.add(v)
            if dead:
                lines.append(indent + "del " + ", ".join(dict.fromkeys(dead)))
            lines.append(indent + line)
        lines.reverse()
        loads = [f"v{i} = V[{i}]" for i in sorted(used_ph)]
        ret = ([f"return [{', '.join(v if v in live_out else 'None' for v in out_vars)}]"] if carry_out
               else ["return None"])
        src = "\n".join([f"def {fname}(V, J, RNG, C):"] + ["    " + ln for ln in loads + lines + ret]) + "\n"
        return src, needed

    def _node(self, spec, s: Compute, node_deps, used_ph: set) -> list[tuple]:
        """The node's lines as ``(line, variables read, variables written)``."""
        import torch

        gm_nodes = list(spec.fn.graph.nodes)
        r = s.register
        names: dict[Any, str] = {}
        phs = [n for n in gm_nodes if n.op == "placeholder"]
        for n, src in zip(phs, spec.inputs):
            if src[0] == "ph":
                used_ph.add(src[1])
                names[n] = f"v{src[1]}"
            else:
                names[n] = f"r{s.inputs[src[1]]}_{src[2]}"
        out_node = gm_nodes[-1]
        outs = list(out_node.args[0])
        out_of: dict[Any, int] = {}
        for i, o in enumerate(outs):
            if o.op != "placeholder" and o not in out_of:
                out_of[o] = i
        for n in gm_nodes:
            if n.op == "get_attr":  # a constant tensor of the node's module
                names[n] = self._global(getattr(spec.fn, n.target), "c")
        body = [n for n in gm_nodes if n.op == "call_function"]
        last_use: dict[Any, int] = {}
        for i, n in enumerate(body):
            for a in n.all_input_nodes:
                last_use[a] = i
        lines: list[str] = []
        for i, n in enumerate(body):
            names[n] = f"r{r}_{out_of[n]}" if n in out_of else f"t{r}_{i}"
            if n.target is operator.getitem:
                src, idx = n.args
                rhs = f"{names[src]}[{idx!r}]"
            elif n.target is torch.ops.aten.detach.default and len(n.args) == 1 and not n.kwargs:
                rhs = names[n.args[0]]  # under no_grad a detach is the same tensor
            else:
                args = [self._render(a, names) for a in n.args]
                args += [f"{key}={self._render(v, names)}" for key, v in n.kwargs.items()]
                rhs = f"{self._callable(n.target)}({', '.join(args)})"
            lines.append((f"{names[n]} = {rhs}", tuple(names[a] for a in n.all_input_nodes if a in names),
                          (names[n],)))
            dead = [a for a in n.all_input_nodes
                    if a.op == "call_function" and a not in out_of and last_use[a] == i]
            if n not in out_of and n not in last_use:
                dead.append(n)
            if dead:
                lines.append(("del " + ", ".join(names[a] for a in dict.fromkeys(dead)), (), ()))
        for i, o in enumerate(outs):
            if out_of.get(o) != i:
                lines.append((f"r{r}_{i} = {names[o]}", (names[o],), (f"r{r}_{i}",)))
        return lines


def _value_inputs(spec, n_mut: int) -> list:
    """The inputs of a group whose values its results depend on, leaving out those that reach only the
    group's buffer updates (joint outputs below ``n_mut``): the running statistics given to a training-mode
    batch norm (they feed only its updated statistics) or to its backward (it reads the saved batch
    statistics instead), and a counter that is only incremented."""
    import torch

    bn = torch.ops.aten._native_batch_norm_legit_functional.default
    bn_backward = torch.ops.aten.native_batch_norm_backward.default
    updates = {oi for oi, j in spec.joint_outputs if j < n_mut}
    nodes = list(spec.fn.graph.nodes)
    out_node = nodes[-1]
    phs = [n for n in nodes if n.op == "placeholder"]
    result = []
    for n, src in zip(phs, spec.inputs):
        matters, seen, stack = False, set(), [n]
        while stack and not matters:
            v = stack.pop()
            for u in v.users:
                if u is out_node:
                    outs = list(out_node.args[0])
                    matters = any(o is v and i not in updates for i, o in enumerate(outs))
                elif u.target is bn and u.args[5] is True and all(a is not v for a in u.args[:3]):
                    # running statistics in: only its outputs 3 and 4 (the updated statistics) depend on them
                    stack.extend(w for w in u.users if w.target is operator.getitem and w.args[1] in (3, 4)
                                 and w not in seen and not seen.add(w))
                elif u.target is bn_backward and u.args[7] is True and all(a is not v for a in u.args[:3] + u.args[5:]):
                    pass   # a training-mode backward reads the saved batch statistics, not the running ones
                elif u not in seen:
                    seen.add(u)
                    stack.append(u)
                if matters:
                    break
        if matters:
            result.append(src)
    return result


def _get_rng():
    """The RNG states, held in generator objects: only a transient state tensor is allocated, so a
    saved state takes no allocator memory while the plan runs (the memory model counts none)."""
    import torch

    cpu = torch.Generator()
    cpu.set_state(torch.get_rng_state())
    state = {"cpu": cpu}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # a host tensor: no device memory
    return state


def _set_rng(state):
    import torch

    torch.set_rng_state(state["cpu"].get_state())
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


@contextlib.contextmanager
def _replay_rng(state):
    saved = _get_rng()
    _set_rng(state)
    try:
        yield
    finally:
        _set_rng(saved)


def _run_measured(spec, args, fixed_ptrs, fixed_joint):
    """Run a group op by op; returns (outputs, internal peak bytes).

    The rule matches :func:`remat_torch.extract._internal_peak`: after each op
    its values are live; a value dies after its last read in the group unless
    it is returned; a storage counts while a live value references it. Storages
    of inputs and of the joint outputs in ``fixed_joint`` (model outputs,
    buffer updates) are fixed memory and not counted.
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
    for oi, j in spec.joint_outputs:
        if j in fixed_joint:
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
