"""The compiled path: a ``torch.compile`` backend whose AOTAutograd partitioner is remat's solver.

One line for the user::

    compiled = torch.compile(model, backend=remat_torch.backend(budget=0.5))

:func:`backend` returns a Dynamo backend. It hands each captured graph to
Inductor (``torch._inductor.compile_fx.compile_fx``) with
``custom_partitioner_fn`` set to a :class:`RematPartitioner`; Inductor runs its
joint-graph passes, then calls the partitioner on the joint forward+backward
graph, and compiles the two halves it returns. With ``inductor=False`` the
same partitioner runs under AOTAutograd and the two halves run as plain FX
graphs (no fusion; fast to compile, used by quick tests).

What the partitioner does, per joint graph:

1. the same preparation as PyTorch's ``min_cut_rematerialization_partition``
   (dead code, CSE, recompute tags, forced saves, node classification);
2. a memory model of what the compiled code really allocates
   (:func:`module_peak_bytes`): views alias their base; with Inductor, a
   pointwise node whose users all fuse with it is never materialized; buffers
   are freed after their last reader; a pointwise kernel whose input dies
   there writes in place;
3. a :class:`remat_core.Graph` of the joint graph's materialized nodes (fused
   pointwise chains folded into the node that consumes them, their cost
   added), solved with :func:`remat_core.solve` under the budget; the values
   the schedule keeps into the backward become the saved set, everything
   else the backward needs is recomputed there;
4. the forward and backward graphs built from the saved set
   (``_extract_fwd_bwd_modules``), their peak re-checked; a plan over budget is
   never returned. The plans PyTorch's own partitioner makes
   (``activation_memory_budget`` knapsack levels) are candidates too; among the
   plans within budget the one with the least estimated recomputation wins.
   With Inductor the check is the code Inductor generates for the halves
   (lowered, scheduled and generated without compiling the kernels, then
   replayed: ``remat_torch.compiled.generated.lowered``), because the memory
   model of step 2 under-counts fused code by up to 39%: candidates are
   checked in order of recomputation, and the first that fits is chosen
   (see ``RematPartitioner._choose_by_generated_code``).

Budgets: a float in [0, 1] is a fraction of activation memory (0 = the
memory the step always holds: the gradients and outputs; 1 = the peak of
``torch.compile``'s own default plan, with Inductor the peak of the code it
generates for that plan); an int or a size string such as
``"64MiB"`` is total bytes above what was allocated before the step. An
infeasible budget raises :class:`CompiledBudgetError` naming the smallest
budget at which a plan was found.

This module imports torch (AOTAutograd's partitioner helpers, Inductor),
``remat_core`` (graphs, :func:`remat_core.solve`, byte parsing) and the
allocator meter :mod:`remat_torch.meter` (extern ops' scratch memory is
measured once per shape); nothing else from ``remat_torch``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import operator
import os
import time
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from remat_core import Graph, RematError, solve
from remat_core.units import format_bytes, parse_bytes

from .generated import lowered, step_peak

__all__ = ["backend", "RematPartitioner", "CompiledPlan", "CompiledBudgetError", "module_peak_bytes"]

log = logging.getLogger(__name__)
aten = torch.ops.aten


class CompiledBudgetError(RematError, ValueError):
    """The budget is below the smallest one at which a plan was found (both forms in the message)."""

    def __init__(self, message: str, smallest_bytes: int | None = None, smallest_fraction: float | None = None):
        super().__init__(message)
        self.smallest_bytes = smallest_bytes
        self.smallest_fraction = smallest_fraction


@dataclasses.dataclass
class CompiledPlan:
    """What the partitioner chose for one joint graph (kept in ``RematPartitioner.plans``).

    Byte counts are above the level before the step (parameters and inputs not
    counted). ``budget_bytes`` is the promise. ``model_peak_bytes`` is the
    planning model's peak of the forward and backward graphs
    (:func:`module_peak_bytes`), within ``model_budget_bytes`` (the budget,
    lowered after a compiled step measured over it). ``code_peak_bytes`` is the
    replay of the code Inductor generated for the plan
    (``remat_torch.compiled.generated``; ``None`` until the backward is
    compiled, without Inductor, or when Inductor reused cached code).
    ``predicted_peak_bytes`` is the replay when there is one, else the
    planning model's peak. ``planned_peak_bytes`` is the peak the plan was
    chosen on: with Inductor below budget 1.0, the replay of the code Inductor
    generates for it before it is compiled
    (``remat_torch.compiled.generated.lowered``), else the planning
    model's. ``candidates`` lists ``(source, model peak, recomputation cost,
    generated-code peak or None)``. ``measured_peak_bytes`` is the compile-time
    check's measurement (``None`` when not verified); ``attempts`` the
    compiles it took. ``inductor_patches`` are the Inductor settings both
    halves are compiled with beyond Inductor's and the user's: empty for
    compile's own plan (compiled as plain ``torch.compile`` compiles it),
    else ``RematPartitioner.plan_patches`` and, for a plan found only under
    one of ``_ALTERNATIVE_PATCHES``, that one.
    """

    budget_bytes: int
    model_budget_bytes: int
    predicted_peak_bytes: int
    fixed_bytes: int
    default_peak_bytes: int
    saved_bytes: int
    recompute_cost: float
    source: str
    n_saved: int
    n_recomputed: int
    plan_time_s: float
    candidates: list = dataclasses.field(default_factory=list)
    measured_peak_bytes: int | None = None
    attempts: int = 1
    model_peak_bytes: int = 0
    code_peak_bytes: int | None = None
    num_fwd_outputs: int = 1
    planned_peak_bytes: int = 0
    inductor_patches: dict = dataclasses.field(default_factory=dict)


# ---------------------------------------------------------------- op classes

def _op_types():
    from torch._functorch.partitioners import get_default_op_list

    return get_default_op_list()


_OPS = None


def _ops():
    global _OPS
    if _OPS is None:
        _OPS = _op_types()
    return _OPS


# Views and reshapes that Inductor never materializes (the result aliases or re-indexes its input).
_ALIAS_TARGETS = None


def _alias_targets():
    global _ALIAS_TARGETS
    if _ALIAS_TARGETS is None:
        prims = torch.ops.prims
        _ALIAS_TARGETS = {aten.view, aten._unsafe_view, aten.reshape, aten.t, aten.transpose, aten.permute,
                          aten.expand, aten.squeeze, aten.unsqueeze, aten.alias, aten.slice, aten.select,
                          aten.as_strided, aten.split, aten.split_with_sizes, aten.unbind, aten.view_as_real,
                          aten.view_as_complex, aten.diagonal, aten.narrow, aten.detach, prims.broadcast_in_dim}
    return _ALIAS_TARGETS


def _packet(node: fx.Node):
    t = node.target
    return getattr(t, "overloadpacket", t)


def _is_alias(node: fx.Node) -> bool:
    """A view (or a getitem of a multi-output node): owns no storage of its own."""
    if node.op != "call_function":
        return False
    return node.target is operator.getitem or _packet(node) in _alias_targets()


def _is_random(node: fx.Node) -> bool:
    """An op that draws from the RNG: torch's own list (dropout, ``rand_like``) and every op tagged
    ``nondeterministic_seeded`` (``bernoulli``, ``rand``; Inductor's ``inductor_seeds``, which the partitioner
    sees once Inductor has replaced dropout's random draws). Recomputed in the backward, it would draw again: a
    new dropout mask, silently other gradients. Such nodes are always saved."""
    if node.op != "call_function":
        return False
    return _ops().is_random(node) or torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


def _is_pointwise(node: fx.Node) -> bool:
    """Fusible by Inductor (pointwise ops and reductions, not random ops: their masks are saved)."""
    return node.op == "call_function" and _ops().is_fusible(node) and not _is_alias(node)


def _nbytes(node: fx.Node) -> int:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return _hint(val.numel()) * val.dtype.itemsize
    if isinstance(val, (list, tuple)):
        return sum(_hint(v.numel()) * v.dtype.itemsize for v in val if isinstance(v, torch.Tensor))
    return 0


def _hint(x) -> int:
    if isinstance(x, int):
        return x
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    return int(optimization_hint(x, fallback=4096))


def _numel(node: fx.Node) -> int:
    val = node.meta.get("val")
    return _hint(val.numel()) if isinstance(val, torch.Tensor) else 0


def _cost(node: fx.Node) -> float:
    """Estimated time of ``node`` when it runs as a kernel of its own, in flop-equivalents.

    Matrix products count 2 flops per multiply-add; every other op is
    memory-bound: 4 flop-equivalents per byte it reads and writes.
    """
    if node.op != "call_function" or _is_alias(node):
        return 0.0
    p = _packet(node)
    args = [a for a in node.args if isinstance(a, fx.Node)]
    moved = _nbytes(node) + sum(_nbytes(a) for a in args)
    flops = 0.0
    try:
        if p in (aten.mm, aten.addmm, aten.bmm, aten.baddbmm):
            a, b = (node.args[1], node.args[2]) if p in (aten.addmm, aten.baddbmm) else (node.args[0], node.args[1])
            k = a.meta["val"].shape[-1]
            flops = 2.0 * _numel(node) * _hint(k)
        elif p is aten.convolution or p is aten.convolution_backward:
            w = node.args[1].meta["val"]
            flops = 2.0 * _hint(sum(_hint(o.numel()) for o in ([node.meta["val"]] if p is aten.convolution
                                                                 else [node.args[0].meta["val"]]))) \
                * _hint(w.numel()) / max(1, _hint(w.shape[0]))
            if p is aten.convolution_backward:
                flops *= 2
    except (AttributeError, KeyError, IndexError, TypeError):
        flops = 0.0
    return max(flops, 4.0 * moved, 1.0)


# ---------------------------------------------------------------- memory model

_TRACE = None   # a list to record module_peak_bytes's kernels into (debugging), or None
_WORKSPACE: dict = {}   # (op, argument signature) -> bytes an extern op allocates beyond its outputs


def _real(x):
    """A real tensor like fake tensor ``x`` (random floats, zero integers: valid indices)."""
    shape = [_hint(d) for d in x.shape]
    stride = [_hint(d) for d in x.stride()]
    t = torch.empty_strided(shape, stride, dtype=x.dtype, device=x.device)
    if t.is_floating_point():
        t.normal_()
    else:
        t.zero_()
    return t


def _workspace(node: fx.Node) -> int:
    """Scratch bytes ``node`` allocates while it runs, beyond its outputs (measured once per signature).

    Fused pointwise kernels allocate nothing beyond their outputs; extern ops
    (attention's CPU kernels, embedding backward, ...) do. The op runs once on
    random tensors of the node's shapes under the allocator meter (on CUDA,
    the caching allocator's peak).
    """
    if node.op != "call_function" or _is_alias(node) or _is_pointwise(node) or _is_random(node):
        return 0
    if not isinstance(node.target, torch._ops.OpOverload):
        return 0
    import torch.utils._pytree as pytree

    def sig(a):
        if isinstance(a, fx.Node):
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor):
                return ("T", tuple(_hint(d) for d in v.shape), tuple(_hint(d) for d in v.stride()), str(v.dtype),
                        v.device.type)
            return ("V", repr(v))
        return ("C", repr(a))

    key = (str(node.target), tuple(sig(a) for a in pytree.tree_leaves((node.args, node.kwargs))))
    if key in _WORKSPACE:
        return _WORKSPACE[key]
    ws = 0
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily(), torch.no_grad():
            def real(a):
                if isinstance(a, fx.Node):
                    v = a.meta.get("val")
                    return _real(v) if isinstance(v, torch.Tensor) else _hint(v) if isinstance(v, torch.SymInt) else v
                return a

            args, kwargs = pytree.tree_map(real, (node.args, node.kwargs))
            out_bytes = _nbytes(node)
            if any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in pytree.tree_leaves(args)):
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                out = node.target(*args, **kwargs)
                torch.cuda.synchronize()
                ws = torch.cuda.max_memory_allocated() - base - out_bytes
            else:
                from ..meter import AllocatorMeter

                with AllocatorMeter() as m:
                    out = node.target(*args, **kwargs)
                ws = m.peak_bytes - out_bytes
            del out
    except Exception as exc:    # an op that cannot run on made-up inputs: no workspace assumed, logged
        log.debug("workspace of %s not measured: %s", node.target, exc)
    _WORKSPACE[key] = max(0, int(ws))
    return _WORKSPACE[key]


_REDUCTIONS = None
# ops whose reuse Inductor's CPU lowering never inlines (``StorageBox.should_realize_on_reuse``)
_HEAVY = ("exp", "log", "log10", "log1p", "log2", "sigmoid", "tanh")


def _is_reduction(node: fx.Node) -> bool:
    """A reduction: Inductor always gives its result a buffer."""
    global _REDUCTIONS
    if _REDUCTIONS is None:
        _REDUCTIONS = {aten.sum, aten.mean, aten.var_mean, aten.var, aten.std, aten.amax, aten.amin, aten.max,
                       aten.min, aten.prod, aten.argmax, aten.argmin, aten.any, aten.all, aten.logsumexp,
                       aten.native_layer_norm, aten.native_layer_norm_backward, aten._softmax,
                       aten._log_softmax, aten._softmax_backward_data, aten._log_softmax_backward_data}
    return _packet(node) in _REDUCTIONS


def _realized_on_reuse(node: fx.Node, inlined: dict) -> bool:
    """Whether Inductor's lowering gives pointwise ``node`` a buffer although its readers could fuse it.

    Inductor inlines a pointwise expression into its readers, but realizes it
    when it has several readers and its inlined expression is heavy on CPU
    (exp, log, tanh, sigmoid), reads more than ``realize_reads_threshold`` (4)
    buffers or has more than ``realize_opcount_threshold`` (30) ops; and
    whatever its readers, when it reads more than
    ``realize_acc_reads_threshold`` (8) buffers (``GraphLowering.run_node``).
    ``inlined`` accumulates each inlined node's buffers read, op count and
    heaviness (the caller drops the nodes it materializes).
    """
    reads, ops, heavy = set(), 1, str(_packet(node)).split(".")[-1] in _HEAVY
    for a in node.all_input_nodes:
        while _is_alias(a) and a.all_input_nodes and a.target is not operator.getitem:
            a = a.all_input_nodes[0]
        if a in inlined:
            r, o, h = inlined[a]
            reads |= r
            ops += o
            heavy = heavy or h
        else:
            reads.add(a)
    inlined[node] = (frozenset(reads), ops, heavy)
    users = set()
    stack = list(node.users)
    while stack:
        u = stack.pop()
        if _is_alias(u) and u.target is not operator.getitem:
            stack.extend(u.users)
        users.add(u)
    val = node.meta.get("val")
    cpu = isinstance(val, torch.Tensor) and val.device.type == "cpu"
    if len(reads) > 8:
        return True
    return len(users) > 1 and ((cpu and heavy) or len(reads) > 4 or ops > 30)


def _materialized_in(graph: fx.Graph, fused: bool, keep: set | None = None) -> set:
    """The call_function nodes of ``graph`` that own a buffer when compiled.

    Without fusion every non-alias op allocates. With Inductor a reduction
    always has a buffer; a pointwise node has one when a reader cannot fuse
    it (an extern kernel such as a matrix product, through views too), when
    it leaves the graph, or when Inductor's lowering realizes it
    (:func:`_realized_on_reuse`).
    """
    out_node = next(n for n in reversed(graph.nodes) if n.op == "output")
    outputs = {a for a in out_node.all_input_nodes}
    mat = set()
    inlined: dict = {}    # a pointwise node Inductor would inline -> (buffers it reads, op count, heavy op in it)
    for n in graph.nodes:
        if n.op != "call_function" or _is_alias(n):
            continue
        if not fused or not _is_pointwise(n) or n in outputs or (keep and n.name in keep):
            mat.add(n)
            continue
        if _is_reduction(n) or _realized_on_reuse(n, inlined):
            mat.add(n)
            inlined.pop(n, None)
            continue
        stack, seen = [n], set()
        while stack:
            cur = stack.pop()
            for u in cur.users:
                if u in seen:
                    continue
                seen.add(u)
                if u.op == "output":
                    mat.add(n)
                elif _is_alias(u):
                    if u in outputs:
                        mat.add(n)
                    stack.append(u)
                elif not _is_pointwise(u):
                    mat.add(n)
            if n in mat:
                break
        if n in mat:
            inlined.pop(n, None)    # its readers read its buffer
    return mat


def module_peak_bytes(graph: fx.Graph, fused: bool, counted_inputs: set | None = None,
                      keep: set | None = None, input_bytes: dict | None = None,
                      alias_of: dict | None = None) -> tuple[int, int, dict]:
    """Liveness simulation of one compiled graph: ``(peak, bytes held at exit, outputs' bytes by node)``.

    Inputs in ``counted_inputs`` are live at entry and freed after their last
    reader; other inputs are the caller's (not counted). The graph runs as a
    sequence of kernels: without fusion one per node; with Inductor each
    extern op (matrix product, convolution, attention) is a kernel and each
    run of pointwise and reduction nodes between two of them is one fused
    kernel, which allocates all its materialized outputs before it runs and
    frees the buffers whose last reader it was after. A kernel output of the
    same size as a buffer dying in that kernel is written in place of it
    (Inductor's buffer reuse). ``input_bytes`` gives a counted input's size
    when it differs from its value's (a view keeps its whole base alive);
    ``alias_of`` maps an input to another input sharing its storage (counted
    once, alive until the last reader of either). Nodes named in ``keep`` are taken as
    materialized even where fusion could inline them: forward values
    recomputed in a backward are, in what Inductor generates, often computed
    in kernels of their own, earlier than their readers.
    """
    counted_inputs = counted_inputs or set()
    mat = _materialized_in(graph, fused, keep)
    nodes = list(graph.nodes)
    step: dict = {}
    k = -1
    open_run = False
    for n in nodes:
        if n.op != "call_function":
            continue
        pointwise = fused and (_is_pointwise(n) or _is_alias(n))
        if not (pointwise and open_run):
            k += 1
        step[n] = k
        open_run = pointwise
    out_node = nodes[-1]
    step[out_node] = k + 1
    input_bytes = input_bytes or {}
    alias_of = alias_of or {}

    def size(n) -> int:
        return input_bytes.get(n, _nbytes(n)) if n.op == "placeholder" else _nbytes(n)

    storage: dict = {}   # node -> frozenset of buffer-owning nodes its value reads
    for n in nodes:
        if n.op == "placeholder":
            storage[n] = frozenset([alias_of.get(n, n)])
        elif n in mat:
            storage[n] = frozenset([n])
        elif n.op == "call_function":
            storage[n] = frozenset().union(*[storage.get(a, frozenset()) for a in n.all_input_nodes])
    last: dict = {}
    for n in nodes:
        if n in mat or n is out_node:
            for a in n.all_input_nodes:
                for s in storage.get(a, ()):
                    last[s] = max(last.get(s, -1), step[n])
    held = set()
    for a in out_node.all_input_nodes:
        held |= storage.get(a, frozenset())
    alive = {p for p in nodes if p.op == "placeholder" and p in counted_inputs and p not in alias_of}
    live = sum(size(p) for p in alive)
    peak = live
    by_step: dict = {}
    for n in nodes:
        if n in mat:
            by_step.setdefault(step[n], []).append(n)
    for k in sorted(by_step):
        outs = by_step[k]
        dying = [s for s in alive if last.get(s, -1) == k and s not in held]
        free_sizes = sorted((size(s) for s in dying if s.op != "placeholder" or fused), reverse=True)
        new = 0
        for n in outs:
            nb = _nbytes(n)
            if fused and nb in free_sizes:
                free_sizes.remove(nb)     # written in place of a dying buffer
            else:
                new += nb
        peak = max(peak, live + new + max(_workspace(n) for n in outs))
        if _TRACE is not None:
            _TRACE.append((k, live + new, [(n.name, _nbytes(n)) for n in outs], [(d.name, _nbytes(d)) for d in dying]))
        for n in outs:
            alive.add(n)
            live += _nbytes(n)
        for s in dying:
            alive.discard(s)
            live -= size(s)
        for n in outs:
            if last.get(n, -1) <= k and n not in held:   # nobody reads it after this kernel
                alive.discard(n)
                live -= _nbytes(n)
    out_bytes = {}
    for a in out_node.all_input_nodes:
        # an output viewing an uncounted input (a parameter's transpose) costs nothing here
        out_bytes[a.name] = (sum(size(s) for s in storage.get(a, ())
                                 if s.op != "placeholder" or s in counted_inputs), frozenset(storage.get(a, ())))
    return peak, live, out_bytes


# ---------------------------------------------------------------- partitioning helpers

def _prepare(joint_module: fx.GraphModule, num_fwd_outputs: int, static_lifetime_input_indices):
    """The preparation ``min_cut_rematerialization_partition`` does before choosing what to save."""
    from torch._functorch import config as fconfig
    from torch._functorch import partitioners as P
    from torch._functorch.compile_utils import fx_graph_cse

    joint_module.graph.eliminate_dead_code()
    joint_module.recompile()
    if fconfig.cse:
        joint_module.graph = fx_graph_cse(joint_module.graph)
    has_tags = P.has_recomputable_ops(joint_module)
    has_rng_tags = P.has_recomputable_rng_ops(joint_module)
    if has_tags:
        joint_module = P.cleanup_recompute_tags(joint_module, is_default_partition=False)
    if not fconfig.unsafe_allow_optimization_of_collectives:
        P.force_save_collectives(joint_module)
    P.force_save_effectful_ops(joint_module)
    P.force_save_bw_mutation_src(joint_module)
    node_info = P.classify_nodes(joint_module, static_lifetime_input_indices or [], num_fwd_outputs)
    for node in reversed(joint_module.graph.nodes):   # what solve_min_cut reads
        if node.op == "output" or node_info.is_required_fw(node):
            node.dist_from_bw = int(1e9)
            if node.op != "output":
                for user in node.users:
                    node.dist_from_bw = min(node.dist_from_bw, user.dist_from_bw + 1)
        else:
            node.dist_from_bw = 0
    return joint_module, node_info, has_tags, has_rng_tags


def _split(joint_module, saved: Sequence[fx.Node], node_info, num_fwd_outputs: int, finish: bool = False,
           has_tags: bool = False, has_rng_tags: bool = False):
    """Forward and backward modules for the saved set, as ``min_cut_rematerialization_partition`` builds them."""
    from torch._functorch import partitioners as P
    from torch._functorch._aot_autograd.graph_compile import is_opaque_node
    from torch.fx.experimental.proxy_tensor import is_sym_node

    saved = list(dict.fromkeys(saved))
    sym = [n for n in saved if is_sym_node(n) and not P._is_assert_only_symbool(n)]
    opaque = [n for n in saved if is_opaque_node(n)]
    values = [n for n in saved if not is_sym_node(n) and not is_opaque_node(n)]
    fw, bw = P._extract_fwd_bwd_modules(joint_module, values, saved_sym_nodes=sym, saved_opaque_nodes=opaque,
                                        num_fwd_outputs=num_fwd_outputs,
                                        static_lifetime_input_nodes=node_info.static_lifetime_input_nodes)
    if finish and has_tags and has_rng_tags:
        fw, bw = P.functionalize_rng_ops(joint_module, fw, bw, len(sym))
    bw = P.reordering_to_mimic_autograd_engine(bw)
    if finish:
        fw = P.raise_getitems(fw)
        bw = P.raise_getitems(bw)
        fw = P.thread_graphsafe_rng_from_hops(fw, is_backward=False)
        bw = P.thread_graphsafe_rng_from_hops(bw, is_backward=True)
    return fw, bw, values


def _tensors(nodes: list) -> list:
    """Multi-output nodes replaced by their ``getitem`` users (only single values can be saved)."""
    out = []
    for n in nodes:
        if isinstance(n.meta.get("val"), (list, tuple)):
            out.extend(u for u in n.users if u.target is operator.getitem)
        else:
            out.append(n)
    return out


@dataclasses.dataclass
class _Eval:
    peak: int
    fixed: int
    saved_bytes: int
    cost: float
    n_saved: int
    n_recomputed: int


def _evaluate(fw: fx.GraphModule, bw: fx.GraphModule, num_fwd_outputs: int, fw_names: set, fused: bool) -> _Eval:
    """Predicted peak of running ``fw`` then ``bw`` (above the level before the step) and the recomputation's cost."""
    fw_peak, fw_end, fw_out = module_peak_bytes(fw.graph, fused)
    fw_outputs = next(n for n in reversed(fw.graph.nodes) if n.op == "output").all_input_nodes
    primals = {n.name for n in fw.graph.nodes if n.op == "placeholder"}
    bw_inputs = [n for n in bw.graph.nodes if n.op == "placeholder"]
    saved_names = {n.name for n in bw_inputs}
    bw_inputs = [n for n in bw_inputs if n.name not in primals]   # parameters and inputs: already resident
    # saved values sharing a forward buffer (a value and its views or detach) hold that buffer once, whole
    first_by_storage: dict = {}
    alias_of, input_bytes = {}, {}
    for n in bw_inputs:
        nbytes, key = fw_out.get(n.name, (_nbytes(n), frozenset([n.name])))
        input_bytes[n] = nbytes
        if key and len(key) == 1 and key in first_by_storage:
            alias_of[n] = first_by_storage[key]
        elif key and len(key) == 1:
            first_by_storage[key] = n
    saved_bytes = sum(input_bytes[n] for n in bw_inputs if n not in alias_of and not n.name.startswith("tangents"))
    # what the caller holds through the backward: the forward's own outputs that are not also saved
    user_only = sum(fw_out[n.name][0] for n in fw_outputs[:num_fwd_outputs]
                    if n.name not in saved_names and n.name in fw_out)
    bw_peak, bw_end, bw_out = module_peak_bytes(bw.graph, fused, counted_inputs=set(bw_inputs),
                                                input_bytes=input_bytes, alias_of=alias_of)
    grads = sum(v[0] for v in bw_out.values())
    recomputed = [n for n in bw.graph.nodes if n.op == "call_function" and n.name in fw_names]
    mat = _materialized_in(bw.graph, fused)
    cost = sum(_cost(n) if (n in mat or not fused) else float(_numel(n)) for n in recomputed)
    return _Eval(peak=max(fw_peak, user_only + bw_peak), fixed=user_only + grads, saved_bytes=saved_bytes,
                 cost=cost, n_saved=len(bw_inputs), n_recomputed=len(recomputed))


def _joint_graph(joint: fx.Graph, node_info, fused: bool, fixed_bytes: int, grads: set):
    """A :class:`remat_core.Graph` of the joint graph's materialized nodes and the fx node behind each.

    Fused pointwise chains are folded into the node that reads them (their
    cost added to it); views read their base. Random ops get a prohibitive
    cost (their masks cannot be recomputed). Gradients are fixed memory.
    """
    mat = _materialized_in(joint, fused)
    order = [n for n in joint.nodes if n in mat]
    feeds: dict = {}     # node -> (materialized nodes it reads, fused cost folded in)
    for n in joint.nodes:
        if n.op == "placeholder":
            feeds[n] = (frozenset(), 0.0)
        elif n in mat:
            feeds[n] = (frozenset([n]), 0.0)
        elif n.op == "call_function":
            srcs, c = frozenset(), 0.0 if _is_alias(n) else float(_numel(n))
            for a in n.all_input_nodes:
                s, ca = feeds.get(a, (frozenset(), 0.0))
                srcs |= s
                c += ca
            feeds[n] = (srcs, c)
    total = sum(_cost(n) for n in order) or 1.0
    last_fw = max((i for i, n in enumerate(order) if node_info.is_required_fw(n)), default=-1)
    names, deps, cost, mem, bwd, wss = [], [], [], [], [], []
    index = {n: i for i, n in enumerate(order)}
    for n in order:
        d, c = set(), _cost(n)
        for a in n.all_input_nodes:
            s, ca = feeds.get(a, (frozenset(), 0.0))
            d |= {index[x] for x in s if x is not n}
            c += ca
        if _is_random(n):
            c = 1000.0 * total
        names.append(n.name)
        wss.append(_workspace(n))
        deps.append(sorted(d))
        cost.append(c)
        mem.append(0 if n in grads else _nbytes(n))
        bwd.append(index[n] > last_fw)
    g = Graph.from_arrays(deps, cost=cost, memory_bytes=mem, workspace_bytes=wss, is_backward=bwd, names=names,
                          fixed_bytes=int(fixed_bytes), name="joint")
    return g, order


def _project(graph: Graph, order: list, schedule=None, sequence=None) -> list:
    """The forward values a plan keeps into the backward: the saved set.

    For a stage schedule, the values kept into the first backward stage; for
    an operation sequence (:mod:`remat_core.sequence`), the forward values
    live when the first backward node is computed.
    """
    import numpy as np

    by_name = {n.name: n for n in order}
    bwd = np.flatnonzero(graph.is_backward)
    if not len(bwd):
        return []
    t = int(bwd[0])
    if schedule is not None:
        return [by_name[graph.names[int(i)]] for i in schedule.S_row(t) if i < t]
    from remat_core.sequence import COMPUTE

    copies = np.zeros(graph.n, dtype=np.int64)
    for kind, node in zip(sequence.kind.tolist(), sequence.node.tolist()):
        if kind == COMPUTE and graph.is_backward[node]:
            break
        copies[node] += 1 if kind == COMPUTE else -1
    return [by_name[graph.names[int(i)]] for i in np.flatnonzero(copies > 0) if i < t]


# ---------------------------------------------------------------- the partitioner

def _fraction(budget) -> float | None:
    if isinstance(budget, bool):
        return None
    if isinstance(budget, float):
        return budget
    return None


def _check_budget(budget) -> None:
    f = _fraction(budget)
    if f is not None:
        if not (math.isfinite(f) and 0.0 <= f <= 1.0):
            raise ValueError(f"`budget` as a fraction of activation memory must be in [0, 1]; got {budget!r} "
                             "(give bytes as an int or a size such as '64MiB')")
    else:
        parse_bytes(budget, "budget")


# compile's own knapsack levels tried as candidate plans (activation_memory_budget values), most memory first;
# the first level whose plan fits ends the search (lower levels recompute more)
_KNAPSACK_LEVELS = (0.8, 0.6, 0.4, 0.2, 0.1, 0.0)
# solver budgets (fractions of the joint graph's activation memory) whose schedules' saved sets are candidates
_SOLVER_FRACTIONS = (0.9, 0.75, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.0)

# Inductor settings under which the smallest candidates are lowered again when none fits under the backend's own:
# ``realize_reads_threshold=1`` gives a pointwise result with several readers a buffer instead of inlining it into
# every reader (which keeps what it reads alive until the last reader). On tiny Llama it lowered the recomputing
# candidates' generated code by 10-13% (smallest plan 0.777 -> 0.664 of activation memory); on ViT it raised it
# (0.508 -> 0.580), so it is tried per graph, only where the defaults find no plan, and the plan records it.
_ALTERNATIVE_PATCHES: tuple = ({"realize_reads_threshold": 1},)
# how many candidates (smallest model peak first) are lowered again under each of them
_ALTERNATIVE_LOWERINGS = 2
# Under Inductor, at most this many candidates are examined (lowered, or their replay read from a cache) in search
# of the smallest plan after none fitted the budget (each lowering takes a second or two); candidates are taken in
# order of the planning model's peak.
_SMALLEST_LOWERINGS = 4
# Solver methods that search until a time limit: the sweep of solver budgets stops at ``time_limit_s`` for them only.
_TIMED_METHODS = ("auto", "ilp", "lp-rounding")
# Planning results per joint graph, so that re-planning the same graph (the compile-time check's retries, a second
# budget for the same model) does not repeat the knapsack solves, the splits and the solver:
# (graph key, what) -> saved node names, an _Eval, or a remat_core Graph. Oldest entries go first past the bound.
_PLAN_CACHE: dict = {}
_PLAN_CACHE_SIZE = 512
# The compile-time check's measured peak of each saved set compiled (graph key, saved names) -> bytes: a plan
# measured before is judged by its measurement, not by the model.
_MEASURED: dict = {}
# The peak of the code Inductor generates for a saved set, replayed (graph key, saved names, settings) -> bytes.
_EXACT: dict = {}
# Inductor settings that change what the generated code allocates (part of _EXACT's key).
_MEMORY_SETTINGS = ("allow_buffer_reuse", "inplace_buffers", "reorder_for_peak_memory", "reorder_for_locality",
                    "aggressive_fusion", "max_fusion_size", "realize_reads_threshold", "realize_opcount_threshold",
                    "realize_acc_reads_threshold", "epilogue_fusion", "pattern_matcher", "memory_planning",
                    "score_fusion_memory_threshold", "comprehensive_padding")


def _inductor_settings() -> tuple:
    from torch._inductor import config

    return tuple((name, repr(getattr(config, name, None))) for name in _MEMORY_SETTINGS)


def _graph_key(joint_module: fx.GraphModule, fused: bool) -> str:
    """A hash of the prepared joint graph: its code, its inputs' shapes, dtypes and devices, and the fusion setting."""
    h = hashlib.sha256(joint_module.code.encode())
    for n in joint_module.graph.nodes:
        if n.op == "placeholder":
            v = n.meta.get("val")
            h.update(repr((n.name, tuple(getattr(v, "shape", ())), str(getattr(v, "dtype", "")),
                           str(getattr(v, "device", "")))).encode())
    h.update(repr(bool(fused)).encode())
    return h.hexdigest()


def _exact_path(key: tuple) -> str | None:
    """The file of Inductor's cache directory holding ``_EXACT[key]`` across processes, or ``None`` when Inductor's
    own on-disk cache is off (``torch._inductor.config.fx_graph_cache``).

    The name hashes the key (graph, saved set, memory settings), torch's version and the source of the split and
    the replay (this file and ``generated.py``), so a change to any of them is a new entry.
    """
    try:
        from torch._inductor import config
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        if not config.fx_graph_cache:
            return None
        global _REPLAY_SOURCE_HASH
        if _REPLAY_SOURCE_HASH is None:
            from . import generated

            h = hashlib.sha256()
            for name in (__file__, generated.__file__):
                with open(name, "rb") as f:
                    h.update(f.read())
            _REPLAY_SOURCE_HASH = h.hexdigest()
        gkey, saved, settings = key
        h = hashlib.sha256(repr((gkey, sorted(saved), settings, torch.__version__, _REPLAY_SOURCE_HASH)).encode())
        return os.path.join(cache_dir(), "remat_generated_peak", h.hexdigest())
    except (ImportError, AttributeError, OSError, ValueError):     # no usable cache directory: memory only
        return None


_REPLAY_SOURCE_HASH = None


def _known_exact(key: tuple) -> int | None:
    """``_EXACT[key]``, from this process or from the on-disk cache (:func:`_exact_path`), or ``None``."""
    if key in _EXACT:
        return _EXACT[key]
    path = _exact_path(key)
    if path is None:
        return None
    try:
        with open(path) as f:
            value = int(f.read().strip())
    except (OSError, ValueError):
        return None
    _store_exact(key, value, disk=False)
    return value


def _store_exact(key: tuple, value: int, disk: bool = True) -> None:
    """Records ``_EXACT[key]`` in this process (oldest entries dropped past the bound) and on disk."""
    if len(_EXACT) >= _PLAN_CACHE_SIZE:
        _EXACT.pop(next(iter(_EXACT)))
    _EXACT[key] = int(value)
    path = _exact_path(key) if disk else None
    if path is None:
        return
    try:    # written whole, then renamed: a reader never sees half a number
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(str(int(value)))
        os.replace(tmp, path)
    except OSError as exc:     # a read-only cache directory: this process keeps it in memory only
        log.debug("remat: the generated code's peak could not be cached on disk: %s", exc)


def _cached(key, make: Callable):
    if key in _PLAN_CACHE:
        return _PLAN_CACHE[key]
    value = make()
    while len(_PLAN_CACHE) >= _PLAN_CACHE_SIZE:
        _PLAN_CACHE.pop(next(iter(_PLAN_CACHE)))
    _PLAN_CACHE[key] = value
    return value


def _patch_key(c) -> tuple:
    """Candidate ``c``'s Inductor setting patches as a sorted tuple (empty for a candidate under the defaults)."""
    return tuple(sorted(c[3].items())) if len(c) > 3 and c[3] else ()


@contextlib.contextmanager
def _patched(c):
    """Candidate ``c``'s Inductor setting patches applied inside the block."""
    if not _patch_key(c):
        yield
        return
    from torch._inductor import config

    with config.patch(dict(c[3])):
        yield


try:
    from torch._inductor.custom_graph_pass import CustomPartitionerFn as _PartitionerBase
except ImportError:    # pragma: no cover - torch versions without custom partitioners are refused at import
    _PartitionerBase = object


class RematPartitioner(_PartitionerBase):
    """AOTAutograd partitioner choosing the saved set with :func:`remat_core.solve` under ``budget``.

    Called like ``min_cut_rematerialization_partition`` (joint module, joint
    inputs, ``num_fwd_outputs=``, ``static_lifetime_input_indices=``) and returns
    the forward and backward modules. Every plan it chose is appended to
    ``plans`` (a :class:`CompiledPlan`).

    Parameters
    ----------
    budget : float, int or str
        A fraction of activation memory in [0, 1], or bytes (int or size string).
    method : str
        The :func:`remat_core.solve` method.
    time_limit_s : float
        The solver's time limit per call.
    fused : bool
        Whether the halves are compiled by Inductor (pointwise chains fused).
    knapsack : bool
        Whether compile's own ``activation_memory_budget`` plans are candidates too.
    cache : bool
        Whether Inductor may reuse this partitioner's plans across processes (see :meth:`uuid`).
    """

    def __init__(self, budget=0.5, *, method: str = "auto", time_limit_s: float = 5.0, fused: bool = True,
                 knapsack: bool = True, cache: bool = False):
        _check_budget(budget)
        if not isinstance(time_limit_s, (int, float)) or not time_limit_s > 0:
            raise ValueError(f"`time_limit_s` must be a positive number of seconds; got {time_limit_s!r}")
        self.budget = budget
        self.method = method
        self.time_limit_s = float(time_limit_s)
        self.fused = bool(fused)
        self.knapsack = bool(knapsack)
        self.cache = bool(cache)
        self.scale = 1.0     # the backend lowers it when a compiled step measured over budget
        self.force_smallest = False  # the backend sets it to compile and measure the smallest plan found
        self.last_key = None         # (graph key, saved names) of the last plan, for _MEASURED
        # Inductor settings of remat's own plans (not of compile's own, which compiles as plain torch.compile):
        # the backend leaves out those the user's ``config_patches`` set
        self.plan_patches: dict = dict(_INDUCTOR_PATCHES) if self.fused else {}
        self._nonce = os.urandom(16)
        self.plans: list[CompiledPlan] = []

    def uuid(self) -> Any:
        """Inductor's cache key for graphs partitioned here.

        With ``cache=False`` (the default) it is unique to this partitioner, so
        every compile plans afresh and records its plan in ``plans``
        (compiled kernels are still cached). With ``cache=True`` it is a hash
        of this file and the settings: a later process compiling the same graph
        reuses the plan and the compiled code without calling the partitioner.
        (``None`` would make the key equal to that of compile's own partitioner.)
        """
        h = hashlib.sha256(open(__file__, "rb").read())
        h.update(repr((self.budget, self.method, self.time_limit_s, self.fused, self.knapsack)).encode())
        if not self.cache:
            h.update(self._nonce)
        return h.hexdigest()

    def __call__(self, joint_module: fx.GraphModule, joint_inputs: Any = None, *, num_fwd_outputs: int,
                 static_lifetime_input_indices: list | None = None, **_: Any):
        from torch._functorch import partitioners as P

        start = time.perf_counter()
        fraction = _fraction(self.budget)
        if fraction is not None and fraction >= 1.0 and self.scale >= 1.0 and not self.force_smallest:
            return self._compiles_own(joint_module, joint_inputs, num_fwd_outputs, static_lifetime_input_indices,
                                      start)
        joint_module, node_info, has_tags, has_rng = _prepare(joint_module, num_fwd_outputs,
                                                              static_lifetime_input_indices)
        if not node_info.required_bw_nodes:
            return P.default_partition(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs,
                                       static_lifetime_input_indices=static_lifetime_input_indices or [],
                                       static_lifetime_input_nodes=node_info.static_lifetime_input_nodes)
        joint = joint_module.graph
        fw_names = {n.name for n in node_info.required_fw_nodes}
        from torch.utils.checkpoint import CheckpointPolicy

        forced = [n for n in node_info.required_fw_nodes
                  if _is_random(n) or n.meta.get("recompute") == CheckpointPolicy.MUST_SAVE]
        forced += [n for n in node_info.required_fw_nodes if n.op == "placeholder"]
        candidates: list = []   # (source, saved, _Eval)
        gkey = _graph_key(joint_module, self.fused)
        by_name = {n.name: n for n in joint.nodes}

        def evaluate(saved) -> _Eval:
            fw, bw, _ = _split(joint_module, saved, node_info, num_fwd_outputs)
            return _evaluate(fw, bw, num_fwd_outputs, fw_names, self.fused)

        def consider(source: str, saved):
            saved = list(dict.fromkeys(_tensors(list(saved) + forced)))
            ev = _cached((gkey, "eval", frozenset(n.name for n in saved)), lambda: evaluate(saved))
            # compile's own plan is compiled as plain torch.compile compiles it; the others under plan_patches
            candidates.append((source, saved, ev, {} if source == "compile-default" else dict(self.plan_patches)))
            return ev

        def knapsack(level: float) -> list:
            names = _cached((gkey, "knapsack", level), lambda: [
                n.name for n in P.choose_saved_values_set(joint, node_info, memory_budget=level)])
            return [by_name[x] for x in names]

        def key_of(c) -> tuple:
            """What identifies candidate ``c``'s compiled code: the graph, its saved set and its Inductor patches."""
            return (gkey, frozenset(n.name for n in c[1])) + ((_patch_key(c),) if _patch_key(c) else ())

        def ekey(c) -> tuple:
            """``_EXACT``'s key of candidate ``c``: the graph, its saved set and the memory settings it compiles
            under (its patches applied)."""
            with _patched(c):
                return (gkey, frozenset(n.name for n in c[1]), _inductor_settings())

        def exact(c, cached_only: bool = False) -> int | None:
            """The peak of the code Inductor generates for candidate ``c`` under its settings (replayed; cached per
            saved set and Inductor settings); with ``cached_only``, ``None`` unless it was computed before."""
            if cached_only:
                return _known_exact(ekey(c))
            with _patched(c):
                return _exact_under(c, ekey(c))

        def _exact_under(c, k: tuple) -> int:
            if _known_exact(k) is None:
                fw, bw, _ = _split(joint_module, c[1], node_info, num_fwd_outputs, finish=True, has_tags=has_tags,
                                   has_rng_tags=has_rng)
                _store_exact(k, step_peak(lowered(fw, False), lowered(bw, True), num_fwd_outputs))
                log.debug("remat partitioner: %s: planning model %d, generated code %d bytes", c[0], c[2].peak,
                          _EXACT[k])
            return _EXACT[k]

        def peak_of(c) -> int:
            """The measured peak of a plan compiled before (the compile-time check), else the generated code's
            (Inductor, when known), else the planning model's."""
            known = _MEASURED.get(key_of(c))
            if known is None and self.fused:
                known = _EXACT.get(ekey(c))
            return c[2].peak if known is None else known

        def fits(c) -> bool:
            known = _MEASURED.get(key_of(c))
            return c[2].peak <= budget_bytes if known is None else known <= promised

        default = consider("compile-default", knapsack(1.0))
        # with Inductor is the peak of the code it generates for its own plan under its own settings
        default_peak = exact(candidates[0]) if self.fused and (fraction is None or fraction < 1.0) \
            else default.peak
        budget_bytes = self._resolve(default, default_peak)
        promised = budget_bytes     # what the step must measure within
        budget_bytes = int(budget_bytes * self.scale)    # what the model must predict within
        if budget_bytes < default_peak:
            self._solve(joint, node_info, default, consider, gkey, by_name)
        # compile's own knapsack plans, most memory first, until one fits (with Inductor: all of them, the model
        # fitting is not enough there, and whatever the time taken, so that the candidates and hence the plan and
        # the smallest budget named do not depend on the machine's load: 0.6 s for all levels on tiny Llama);
        # without Inductor, once a plan fits and the time limit has passed, not at all
        if self.knapsack and budget_bytes < default_peak:
            for level in _KNAPSACK_LEVELS:
                if not self.fused and any(fits(c) for c in candidates) \
                        and time.perf_counter() - start > self.time_limit_s:
                    break
                try:
                    consider(f"compile-knapsack-{level}", knapsack(level))
                except Exception as exc:    # a knapsack level the partitioner cannot build is skipped
                    log.debug("compile's knapsack at %s failed: %s", level, exc)
                    continue
                if fits(candidates[-1]) and not self.fused:
                    break
        if self.fused and budget_bytes < default_peak:
            fitting = self._choose_by_generated_code(candidates, exact, peak_of, budget_bytes,
                                                     search_smallest=self.force_smallest)
            if not fitting and not self.force_smallest:
                # none of the candidates taken by cost fits under Inductor's settings: the same saved sets, smallest
                # model peak first, under settings that change what the generated code keeps alive (see
                # _ALTERNATIVE_PATCHES); tried before the search for the smallest plan under the defaults, whose
                # lowerings are then saved where one fits (tiny Llama at 0.7: 6 candidates lowered -> 5, same plan)
                stock = list(candidates)
                base = sorted(candidates, key=lambda c: (c[2].peak, c[2].cost))[:_ALTERNATIVE_LOWERINGS]
                alternatives = [(f"{c[0]} " + " ".join(f"{k}={v}" for k, v in patches.items()), c[1], c[2],
                                 {**self.plan_patches, **patches}) for patches in _ALTERNATIVE_PATCHES for c in base]
                candidates.extend(alternatives)
                fitting = self._choose_by_generated_code(alternatives, exact, peak_of, budget_bytes)
                if not fitting:     # the smallest plan under the defaults (it may fit: returned), for the refusal
                    fitting = self._choose_by_generated_code(stock, exact, peak_of, budget_bytes, cost_pass=False)
        else:
            fitting = [c for c in candidates if fits(c)]
            if self.force_smallest:     # the backend asks for the smallest plan found, to compile and measure it
                fitting = [min(candidates, key=lambda c: (peak_of(c), c[2].cost))]
        if not fitting:
            # with Inductor, only plans whose generated code was replayed (or measured) count as found
            found = [c for c in candidates if not self.fused or _MEASURED.get(key_of(c)) is not None
                     or exact(c, cached_only=True) is not None] or candidates

            def expected(c) -> int:
                """What ``c``'s step would measure: its measurement, else its peak scaled up by the margin a
                compiled step showed over its prediction (``self.scale``, 1.0 before any)."""
                known = _MEASURED.get(key_of(c))
                return known if known is not None else int(math.ceil(peak_of(c) / self.scale))

            best = min(found, key=lambda c: (expected(c), c[2].cost))
            smallest = expected(best)
            frac = (smallest - default.fixed) / max(1, default_peak - default.fixed)
            what = "the code Inductor generates for it" if self.fused else "the planning model"
            if self.scale < 1.0:
                what += (f", scaled by 1/{self.scale:.3f}: a compiled step measured that much over its "
                         "prediction")
            raise CompiledBudgetError(
                f"`budget` {self._describe(promised, default, default_peak)} is below the smallest budget at "
                f"which a plan was found: {format_bytes(smallest)} ({smallest} bytes, {frac:.3f} of activation "
                f"memory; {what}; compile's own plan peaks at {format_bytes(default_peak)}, the gradients and "
                f"outputs alone take {format_bytes(default.fixed)})", smallest_bytes=smallest,
                smallest_fraction=frac)
        chosen = min(fitting, key=lambda c: (c[2].cost, c[2].peak))
        source, saved, ev = chosen[:3]
        fw, bw, _ = _split(joint_module, saved, node_info, num_fwd_outputs, finish=True, has_tags=has_tags,
                           has_rng_tags=has_rng)
        final = _evaluate(fw, bw, num_fwd_outputs, fw_names, self.fused)
        # re-checked on the finished halves (the finishing passes only reorder getitems): with Inductor the
        # generated code's peak (the same split, cached), else the planning model's
        predicted = exact(chosen) if self.fused and budget_bytes < default_peak else final.peak
        if predicted > budget_bytes and not self.force_smallest and key_of(chosen) not in _MEASURED:
            raise RematError(f"the chosen plan ({source}) peaks at {predicted} bytes after finishing, over the "
                             f"budget of {budget_bytes} bytes (a bug)")
        self.last_saved = frozenset(n.name for n in saved)
        self.last_key = key_of(chosen)
        plan = CompiledPlan(budget_bytes=promised, model_budget_bytes=budget_bytes, predicted_peak_bytes=predicted,
                            fixed_bytes=default.fixed,
                            default_peak_bytes=default_peak, saved_bytes=final.saved_bytes,
                            recompute_cost=final.cost, source=source, n_saved=final.n_saved,
                            n_recomputed=final.n_recomputed, plan_time_s=time.perf_counter() - start,
                            candidates=[(c[0], c[2].peak, c[2].cost, _EXACT.get(ekey(c)))
                                        for c in candidates],
                            model_peak_bytes=final.peak, num_fwd_outputs=num_fwd_outputs,
                            planned_peak_bytes=predicted, inductor_patches=dict(_patch_key(chosen)))
        self.plans.append(plan)
        log.info("remat partitioner: %s, predicted peak %s of budget %s (planning model %s), %d saved, "
                 "%d recomputed, %.1f s", source, format_bytes(predicted), format_bytes(budget_bytes),
                 format_bytes(final.peak), final.n_saved, final.n_recomputed, plan.plan_time_s)
        return fw, bw

    def _compiles_own(self, joint_module, joint_inputs, num_fwd_outputs: int, static_lifetime_input_indices,
                      start: float):
        """Budget 1.0: ``torch.compile``'s own halves, made by its own partitioner
        (``min_cut_rematerialization_partition`` at ``activation_memory_budget=1.0``), so that they and the code
        Inductor generates for them (under Inductor's settings: no ``plan_patches``) are plain torch.compile's;
        recorded as the plan ``compile-default`` (the planning model's peak until the generated code is replayed)."""
        from torch._functorch import config as fconfig
        from torch._functorch import partitioners as P

        with fconfig.patch(activation_memory_budget=1.0):
            fw, bw = P.min_cut_rematerialization_partition(
                joint_module, joint_inputs, compiler="inductor", num_fwd_outputs=num_fwd_outputs,
                static_lifetime_input_indices=static_lifetime_input_indices)
        fw_names = {n.name for n in fw.graph.nodes if n.op == "call_function"}
        ev = _evaluate(fw, bw, num_fwd_outputs, fw_names, self.fused)
        self.last_saved = frozenset(n.name for n in bw.graph.nodes
                                    if n.op == "placeholder" and not n.name.startswith("tangents"))
        self.last_key = None
        plan = CompiledPlan(budget_bytes=ev.peak, model_budget_bytes=ev.peak, predicted_peak_bytes=ev.peak,
                            fixed_bytes=ev.fixed, default_peak_bytes=ev.peak, saved_bytes=ev.saved_bytes,
                            recompute_cost=ev.cost, source="compile-default", n_saved=ev.n_saved,
                            n_recomputed=ev.n_recomputed, plan_time_s=time.perf_counter() - start,
                            candidates=[("compile-default", ev.peak, ev.cost, None)], model_peak_bytes=ev.peak,
                            num_fwd_outputs=num_fwd_outputs, planned_peak_bytes=ev.peak)
        self.plans.append(plan)
        return fw, bw

    def _choose_by_generated_code(self, candidates: list, exact: Callable, peak_of: Callable,
                                  budget_bytes: int, cost_pass: bool = True, search_smallest: bool = True) -> list:
        """Under Inductor: the cheapest candidate whose generated code peaks within ``budget_bytes`` (a list of
        one), or ``[]``.

        The planning model leaves out what fusion does to lifetimes (a fused
        kernel's inputs and outputs live together; Inductor moves extern
        kernels ahead of the kernel that reads them; a cheap recomputed chain
        inlined into several readers keeps its inputs alive until the last), so
        it under-counts: on every candidate measured on tiny GPT-2 and Llama it
        was below the generated code's peak (by 2-39% of it; 6-30% on T5).
        Candidates are therefore taken in order of recomputation cost, those
        whose model peak is already over the budget skipped, and the first
        whose generated code (``remat_torch.compiled.generated.lowered``,
        replayed) fits is chosen. Each lowering costs a second or two, so a
        candidate is not lowered when a cheaper one whose model peak was no
        larger was already found over the budget (it recomputes more and, by
        the model, holds more). When none fits, or the backend asks for the
        smallest plan, the smallest generated-code peak is searched for, in
        order of the model's peak, stopping where the model's peak reaches the
        best found (a bound, since the model under-counts) or after
        ``_SMALLEST_LOWERINGS`` candidates; a plan found there within the
        budget is returned. ``cost_pass=False`` skips the first pass,
        ``search_smallest=False`` the search.
        """
        if cost_pass and not self.force_smallest:
            over: list = []     # candidates lowered and found over the budget
            for c in sorted(candidates, key=lambda c: (c[2].cost, c[2].peak)):
                if c[2].peak > budget_bytes or peak_of(c) > budget_bytes:
                    continue
                if exact(c, cached_only=True) is None and any(r[2].peak <= c[2].peak for r in over):
                    continue
                if exact(c) <= budget_bytes:
                    return [c]
                over.append(c)
        if not search_smallest and not self.force_smallest:
            return []
        best = None
        # the bound counts candidates replayed before too, so that a run whose replays come from the disk cache
        # examines the same candidates as the run that lowered them (and names the same smallest plan)
        for examined, c in enumerate(sorted(candidates, key=lambda c: (c[2].peak, c[2].cost))):
            if best is not None and c[2].peak >= peak_of(best):
                break
            if examined >= _SMALLEST_LOWERINGS:
                break
            exact(c)
            if best is None or (peak_of(c), c[2].cost) < (peak_of(best), best[2].cost):
                best = c
        if best is not None and (self.force_smallest or peak_of(best) <= budget_bytes):
            return [best]
        return []

    def _resolve(self, default: _Eval, default_peak: int) -> int:
        f = _fraction(self.budget)
        if f is None:
            return parse_bytes(self.budget, "budget")
        return int(default.fixed + f * (default_peak - default.fixed))

    @staticmethod
    def _describe(budget_bytes: int, default: _Eval, default_peak: int) -> str:
        frac = (budget_bytes - default.fixed) / max(1, default_peak - default.fixed)
        return f"{format_bytes(budget_bytes)} ({budget_bytes} bytes, {frac:.3f} of activation memory)"

    def _solve(self, joint, node_info, default: _Eval, consider, gkey: str, by_name: dict) -> None:
        """remat's solver on the joint graph at a sweep of solver budgets; each schedule's saved set is a candidate.

        The projection of a schedule to a saved set is lossy (the split
        recomputes whatever is not saved right before its use in the backward),
        so which solver budget gives the best saved set for a given budget is
        not known in advance. The solver runs at the fractions
        ``_SOLVER_FRACTIONS`` of the joint graph's activation memory, most
        first (for the searching methods ``_TIMED_METHODS``, until
        ``time_limit_s``; the heuristics run at every fraction, so the
        candidates do not depend on the machine's load); every projection is re-checked by the
        memory model in ``consider``. The candidates do not depend on the
        budget, and schedules are cached per graph, so a second budget for the
        same graph re-uses them. With ``method="auto"`` the solver is ``dtr``
        (milliseconds per call, and deterministic: the same graph gets the
        same plan in every run).
        """
        out = next(n for n in reversed(joint.nodes) if n.op == "output")
        grads = {a for a in out.all_input_nodes if not node_info.is_required_fw(a)}
        graph, order_names = _cached((gkey, "graph"), lambda: (
            lambda g, o: (g, [n.name for n in o]))(*_joint_graph(joint, node_info, self.fused, default.fixed,
                                                                  grads)))
        order = [by_name[x] for x in order_names]
        method = "dtr" if self.method == "auto" else self.method
        top = _cached((gkey, "checkpoint-all"), lambda: solve(graph, 2 ** 62, method="checkpoint-all")
                      .peak_memory_bytes)
        deadline = time.perf_counter() + self.time_limit_s
        timed = method in _TIMED_METHODS
        for fraction in _SOLVER_FRACTIONS:
            left = deadline - time.perf_counter()
            if left <= 0 and timed:
                return
            target = int(graph.fixed_bytes + fraction * (top - graph.fixed_bytes))
            key = (gkey, "remat", method, target)
            if key in _PLAN_CACHE:
                names = _PLAN_CACHE[key]
            else:
                opts = {"time_limit_s": max(left, 0.1)} if timed else {}
                res = solve(graph, target, method=method, **opts)
                sequence = getattr(res, "sequence", None)
                names = [n.name for n in _project(graph, order, res.schedule, sequence)] \
                    if res.success and (res.schedule is not None or sequence is not None) else None
                if res.success or res.status.name.lower() == "infeasible":    # time-outs are not cached
                    _cached(key, lambda: names)
                if not res.success:
                    log.debug("remat partitioner: %s found no schedule at %s (%s)", method, format_bytes(target),
                              res.message)
            if names is None:
                return      # lower solver budgets are tighter still
            ev = consider(f"remat-{method}-{fraction}", [by_name[x] for x in names])
            log.debug("remat partitioner: %s at %.2f of activation memory -> plan peak %d", method, fraction,
                      ev.peak)


# ---------------------------------------------------------------- the backend

@contextlib.contextmanager
def _fresh_compile_metrics(fresh: bool):
    """Dynamo's per-compile metrics emptied around a second compile of the same graph (each metric may be set
    once per compile), then restored."""
    ctx = None
    if fresh:
        try:
            from torch._dynamo.utils import get_metrics_context

            ctx = get_metrics_context()
        except ImportError:     # pragma: no cover
            ctx = None
    if ctx is None or not hasattr(ctx, "_metrics"):
        yield
        return
    saved, ctx._metrics = ctx._metrics, {}
    try:
        yield
    finally:
        ctx._metrics = saved


def _copy_dynamo_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """A deep copy of a graph Dynamo captured that AOTAutograd still reads as Dynamo's.

    ``copy.deepcopy`` drops the module's ``_param_name_to_source`` and the
    placeholders' ``_dynamo_source``; without them AOTAutograd marks no input
    as static (parameters included), so the partitioner's parameters got
    ``static_lifetime_input_indices=[]`` where plain torch.compile passes them
    (compile's own plan then saved the parameters' transposes instead of the
    parameters, and its code differed).
    """
    import copy

    new = copy.deepcopy(gm)
    if hasattr(gm, "_param_name_to_source"):
        new._param_name_to_source = gm._param_name_to_source
    for a, b in zip(gm.graph.find_nodes(op="placeholder"), new.graph.find_nodes(op="placeholder")):
        if hasattr(a, "_dynamo_source"):
            b._dynamo_source = a._dynamo_source
    return new


def _measure_step(compiled: Callable, example_inputs) -> int | None:
    """Peak bytes of one forward and backward of ``compiled`` on copies of ``example_inputs`` (after one
    unmeasured step).

    Inputs are fresh tensors of the same shapes (random floats, zero
    integers), so nothing the caller owns is read or written. The backward
    starts from the first one-element output that requires a gradient, as
    ``loss.backward()`` does (a model returning its loss and its logits:
    autograd passes zeros for the logits); without one, from ones for every
    output that requires a gradient. (Ones for every output made tiny
    Mistral's step measure 321,800 bytes where ``loss.backward()`` measures
    298,540 and the replay of its code predicts 298,548.)
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        args = []
        for x in example_inputs:
            if isinstance(x, torch.Tensor):
                t = _real(x).requires_grad_(x.requires_grad) if x.is_floating_point() or not x.requires_grad \
                    else _real(x)
                args.append(t)
            elif isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                # a dynamic size (a graph recompiled for a second shape): its value in the traced example (the
                # symbol itself made the compiled step fail with "Expected result >= 0")
                args.append(_hint(x) if isinstance(x, torch.SymInt) else type(x.node.hint)(x.node.hint))
            else:
                args.append(x)
        cuda = any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args)

        def step():
            outs = compiled(*args)
            outs = [o for o in (outs if isinstance(outs, (list, tuple)) else [outs])
                    if isinstance(o, torch.Tensor) and o.requires_grad]
            losses = [o for o in outs if o.numel() == 1]
            if losses:      # a training step: ``loss.backward()`` (autograd passes zeros for the other outputs)
                torch.autograd.backward(losses[:1])
            elif outs:
                torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])

        try:
            step()      # the backward compiles lazily at its first call: not measured
            if cuda:
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                step()
                torch.cuda.synchronize()
                return int(torch.cuda.max_memory_allocated() - base)
            from ..meter import AllocatorMeter

            with AllocatorMeter() as m:
                step()
            return int(m.peak_bytes)
        except Exception as exc:    # a graph that cannot run on made-up inputs is not checked (logged)
            log.warning("remat backend: the compiled step could not be measured at compile time: %s", exc)
            return None


# Inductor settings for remat's plans (``RematPartitioner.plan_patches``, applied to the halves of every plan but
# compile's own, which compiles under Inductor's settings as plain torch.compile does); a user's ``config_patches``
# override them. Without buffer reuse a dead
# buffer is freed where it dies: with it, Inductor keeps a dead buffer alive until a later buffer of the same size
# takes its place, wherever that is within its own estimate of the peak, which under-counts. Tiny Llama at 0.5,
# the code generated for 14 candidate plans: 5 lower by 0.3-12% (dtr-0.4: 488,196 -> 433,284 bytes), none higher.
_INDUCTOR_PATCHES: dict = {"allow_buffer_reuse": False}
def _interpreted(gm: fx.GraphModule, example_inputs) -> Callable:
    """An uncompiled half that takes its arguments boxed and drops every value after its last reader."""
    def run(args: list):
        return fx.Interpreter(gm, garbage_collect_values=True).boxed_run(args)

    run._boxed_call = True
    return run


def _replaying_inner_compile(partitioner: "RematPartitioner") -> Callable:
    """Inductor's ``compile_fx_inner`` for one captured graph, recording the code it generates.

    When the forward and then the backward of a graph the partitioner planned
    are generated, the plan gets ``code_peak_bytes``: the replay of both
    (``remat_torch.compiled.generated.step_peak``), which becomes its
    ``predicted_peak_bytes``.
    """
    from torch._inductor.compile_fx import compile_fx_inner

    from .generated import recording, step_peak

    state: dict = {"n_plans": len(partitioner.plans)}

    def inner(gm, example_inputs, **kwargs):
        from torch._inductor import config

        if not kwargs.get("is_backward"):   # the partitioner has just planned this forward and its backward
            new_plan = len(partitioner.plans) > state["n_plans"]
            state["plan"] = partitioner.plans[-1] if new_plan else None
        patches = getattr(state.get("plan"), "inductor_patches", None) or {}
        with recording() as records, config.patch(patches):     # both halves under the settings planned for
            out = compile_fx_inner(gm, example_inputs, **kwargs)
        if not records:     # cached code, or nothing generated
            return out
        if not kwargs.get("is_backward"):
            state["forward"] = records[-1]
        elif state.get("plan") is not None and state.get("forward") is not None:
            plan = state["plan"]
            try:
                plan.code_peak_bytes = step_peak(state["forward"], records[-1], plan.num_fwd_outputs)
                plan.predicted_peak_bytes = plan.code_peak_bytes
            except (StopIteration, ValueError, IndexError, SyntaxError) as exc:  # an unexpected wrapper (logged)
                log.warning("remat backend: the generated code's memory replay failed: %s", exc)
        return out

    return inner


def backend(budget=0.5, *, method: str = "auto", time_limit_s: float = 5.0, inductor: bool = True,
            knapsack: bool = True, cache: bool = False, config_patches: dict | None = None,
            verify: bool = True) -> Callable:
    """A ``torch.compile`` backend that trains within ``budget``: ``torch.compile(model, backend=backend(0.5))``.

    Parameters
    ----------
    budget : float, int or str
        A float in [0, 1] is a fraction of activation memory (1.0: the peak of
        ``torch.compile``'s own plan; 0.0: the gradients and outputs alone); an
        int or a size string (``"64MiB"``) is bytes above what was allocated
        before the step.
    method : str
        The :func:`remat_core.solve` method (``"auto"`` by default).
    time_limit_s : float
        Time limit of each solver call.
    inductor : bool
        Compile the halves with Inductor (default); ``False`` runs them as FX
        graphs (no fusion, quick to compile).
    knapsack : bool
        Also consider ``torch.compile``'s own ``activation_memory_budget`` plans.
    cache : bool
        Let Inductor's on-disk cache reuse the plan and compiled code in a later
        process (the partitioner is then not called and records no plan).
    config_patches : dict, optional
        More Inductor settings (``torch._inductor.config`` names).
    verify : bool
        Run the compiled step twice at compile time on random inputs of the
        traced shapes (copies; the model is not touched) and measure the second's peak
        (CPU: the allocator meter; CUDA: ``max_memory_allocated``). Over
        budget, the partitioner plans again for proportionally less, up to
        three times. The measurement is ``plan.measured_peak_bytes``. Not done
        for compile's own plan (budget 1.0), which is plain torch.compile's.

    Returns
    -------
    callable
        The backend; its ``partitioner`` attribute is the :class:`RematPartitioner`
        (``backend.partitioner.plans`` lists the plans made).

    Raises
    ------
    ValueError
        On a bad ``budget`` or ``time_limit_s`` (at once); :class:`CompiledBudgetError`
        at the first step when the budget is below every plan found.

    Examples
    --------
    >>> import torch, remat_torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    >>> be = remat_torch.backend(budget=1.0, inductor=False)
    >>> step = torch.compile(model, backend=be)
    >>> step(torch.randn(4, 8)).sum().backward()
    >>> len(be.partitioner.plans)
    1
    """
    partitioner = RematPartitioner(budget, method=method, time_limit_s=time_limit_s, fused=inductor,
                                   knapsack=knapsack, cache=cache)

    # Inductor runs under its own settings and the user's; remat's plans add theirs per plan (the inner compile)
    patches = {**(config_patches or {}), "custom_partitioner_fn": partitioner}
    partitioner.plan_patches = {k: v for k, v in partitioner.plan_patches.items() if k not in (config_patches or {})}

    def compile_once(gm: fx.GraphModule, example_inputs):
        if inductor:
            from torch._inductor.compile_fx import compile_fx

            return compile_fx(gm, example_inputs, config_patches=patches,
                              inner_compile=_replaying_inner_compile(partitioner))
        from torch._dynamo.backends.common import aot_autograd

        # as the "aot_eager" backend does, with this partitioner and an interpreter that frees each value
        # (inputs included) after its last use, as compiled code does
        return aot_autograd(fw_compiler=_interpreted, bw_compiler=_interpreted, partition_fn=partitioner,
                            keep_inference_input_mutations=True)(gm, example_inputs)

    def remat_backend(gm: fx.GraphModule, example_inputs):
        if not verify:
            return compile_once(gm, example_inputs)
        pristine = _copy_dynamo_graph(gm)
        partitioner.scale = 1.0
        tried: list = []
        first_error = None
        try:
            for attempt in range(4):
                n_plans = len(partitioner.plans)
                try:
                    with _fresh_compile_metrics(attempt > 0):
                        compiled = compile_once(_copy_dynamo_graph(pristine), example_inputs)
                except CompiledBudgetError as exc:
                    if partitioner.force_smallest or inductor:  # Inductor: the smallest is generated code's peak
                        raise
                    first_error = first_error or exc
                    partitioner.force_smallest = True   # compile and measure the smallest plan found instead
                    continue
                plan = partitioner.plans[-1] if len(partitioner.plans) > n_plans else None
                if plan is None or (plan.source == "compile-default" and not partitioner.force_smallest):
                    # no backward (or a cached plan): nothing to check; or compile's own plan, which is what budget
                    # 1.0 promises (not measured: the first step then costs what plain torch.compile's does)
                    return compiled
                with _fresh_compile_metrics(True):    # the backward compiles lazily, inside this first step
                    plan.measured_peak_bytes = _measure_step(compiled, example_inputs)
                plan.attempts = attempt + 1
                if plan.measured_peak_bytes is None:
                    return compiled     # not measurable
                _MEASURED[partitioner.last_key] = plan.measured_peak_bytes
                if plan.measured_peak_bytes <= plan.budget_bytes:
                    return compiled
                log.info("remat backend: the compiled step measured %s over the budget %s (planning model %s, "
                         "generated code %s); planning again", format_bytes(plan.measured_peak_bytes),
                         format_bytes(plan.budget_bytes), format_bytes(plan.model_peak_bytes),
                         format_bytes(plan.code_peak_bytes or 0))
                tried.append(plan)
                partitioner.plans.pop()
                if partitioner.force_smallest:
                    break
                # the planning model under-counted this plan by measured/model: plan the next one for that much less
                # (under Inductor the plans are chosen on the replay of their generated code: its ratio)
                ratio = (plan.planned_peak_bytes if inductor else plan.model_peak_bytes) / max(
                    1, plan.measured_peak_bytes)
                partitioner.scale = max(0.3, min(partitioner.scale * 0.95, ratio))
        finally:
            partitioner.force_smallest = False
        if not tried:
            raise first_error
        best = min(tried, key=lambda p: p.measured_peak_bytes)
        # as a budget fraction; capped at 1.0, the budget that always gets compile's own plan
        frac = min(1.0, (best.measured_peak_bytes - best.fixed_bytes) / max(1, best.default_peak_bytes
                                                                              - best.fixed_bytes))
        raise CompiledBudgetError(
            f"`budget` {format_bytes(best.budget_bytes)} ({best.budget_bytes} bytes) is below the smallest budget "
            f"at which a plan was found: {format_bytes(best.measured_peak_bytes)} ({best.measured_peak_bytes} "
            f"bytes, {frac:.3f} of activation memory), measured at compile time after {len(tried)} compiles "
            f"(planning model {format_bytes(best.model_peak_bytes)}, generated code "
            f"{format_bytes(best.code_peak_bytes or 0)})" + (f"; the planning model: {first_error}" if first_error
                                                               else ""),
            smallest_bytes=best.measured_peak_bytes, smallest_fraction=frac)

    remat_backend.partitioner = partitioner
    return remat_backend
