"""Extract the joint forward+backward graph of an ``nn.Module`` as a :class:`remat_core.Graph`.

The joint graph comes from AOTAutograd (:func:`torch._functorch.aot_autograd.aot_function`
with a partition function that captures the joint module): functionalized aten
ops, parameters, buffers, inputs and output tangents lifted to placeholders,
buffer mutations (BatchNorm running statistics) turned into explicit outputs.

The aten ops are then grouped into remat nodes:

1. *units*: one aten op together with the ``getitem`` nodes that unpack its
   outputs and every op whose outputs only alias its storage (views,
   ``detach``, ``t``, ``_unsafe_view``...), so that a storage is counted once.
   Aliasing is decided on storages (``StorageWeakRef``) by running the joint
   graph once on fake tensors. Views of parameters, inputs or tangents cost no
   memory and are inlined into every node that reads them.
2. *groups* at the chosen granularity: ``"op"`` (one unit per node),
   ``"module"`` (maximal runs of consecutive units with the same innermost
   module scope and the same forward/backward side) or ``"block"`` (the same,
   with the scope cut at user-given modules). Runs of a topological order are
   convex, so the grouped graph stays acyclic.

A node's ``memory_bytes`` is the size of the distinct storages of the values it
produces for other nodes; ``workspace_bytes`` is how far its internal
temporaries push the peak above that. Parameters, buffers (and the snapshot of
mutated buffers), inputs, output tangents, model outputs and buffer updates
are ``fixed_bytes``, except the outputs traced without a tangent
(``grad_outputs``; the ``logits`` beside a ``loss``), which are node memory
held to the end of the forward pass. Parameter gradients are
the ``memory_bytes`` of the nodes that compute them (above op granularity,
gradient-only ops form a node of their own beside their module's node), and
a last node, ``<gradients>``, reads them all: they are allocated where the
backward computes them and kept to the end of the step, as autograd's
``.grad`` are, so the prediction follows the allocator over the whole step.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

from remat_core import Graph
from remat_core.errors import RematError

__all__ = ["UnsupportedModelError", "ExtractedGraph", "GroupSpec", "extract_graph", "GRANULARITIES"]

log = logging.getLogger(__name__)

GRANULARITIES = ("op", "module", "block")


class UnsupportedModelError(RematError, NotImplementedError):
    """The model uses a construct the PyTorch adapter cannot extract or execute.

    The message names the construct (data-dependent control flow, an in-place
    update of a parameter, an output that aliases an input, ...).
    """


class _Captured(Exception):
    """Raised from the partition function once the joint graph is captured."""


@dataclass
class GroupSpec:
    """How to run one remat node.

    Attributes
    ----------
    name : str
        The node name in the :class:`remat_core.Graph`.
    fn : torch.fx.GraphModule
        Takes ``len(inputs)`` tensors, returns a tuple of ``len(outputs)`` values.
    inputs : list of tuple
        Where each argument comes from: ``("ph", i)`` (joint placeholder ``i``)
        or ``("node", dep_position, output_index)`` (output ``output_index``
        of the node ``graph.deps[k][dep_position]``).
    outputs : list of str
        Names of the FX values it returns.
    joint_outputs : list of tuple
        ``(output_index, joint_output_index)`` for returned values that are
        outputs of the joint graph (buffer updates, model outputs, gradients).
    random : bool
        Whether it contains random ops (its RNG state is replayed on recomputation).
    ops : tuple of str
        The aten ops it runs (inlined views of fixed tensors included).
    scope : str
        Module scope of its first op.
    """

    name: str
    fn: Any
    inputs: list
    outputs: list
    joint_outputs: list
    random: bool
    ops: tuple
    scope: str
    is_backward: bool
    memory_bytes: int = 0
    workspace_bytes: int = 0
    fx_nodes: tuple = ()
    # where ``fn`` is None: builds it (a graph grouped only to choose the granularity builds no module)
    build: Any = None


@dataclass
class ExtractedGraph:
    """A model's training graph and everything needed to execute it.

    Attributes
    ----------
    graph : remat_core.Graph
        The remat graph (forward nodes first; ``meta["n_forward"]`` of them).
    groups : list of GroupSpec
        One per graph node, in graph order.
    joint : torch.fx.GraphModule
        The joint forward+backward graph from AOTAutograd.
    param_names, buffer_names : list of str
        Placeholder order: parameters, buffers, inputs, tangents.
    n_inputs : int
    mutated_buffers : list of int
        Buffer positions (in ``buffer_names``) updated by the forward pass, in
        the order of the joint graph's first outputs.
    n_user_outputs : int
    out_spec : pytree spec of the model output
    tangent_outputs : list of int
        The user outputs that receive a tangent (floating and requiring grad).
    grad_slots : list of int or None
        For each primal (parameters, buffers, inputs), the joint output index
        of its gradient, or ``None``.
    call : CallSpec
        How the tensor inputs sit in the call's ``(args, kwargs)``.
    out_template : list of tuple
        One per leaf of the model output: ``("t", k)`` for the ``k``-th
        tensor output, ``("c", value)`` for a constant passed through.
    value_reads : remat_torch.guards.ValueReads or None
        Values the trace read from tensors and the program that recomputes
        them on a call (the plan holds only while they are the same).
    untraced_outputs : list of int
        User outputs that require grad but were traced without a tangent
        (``grad_outputs``): the graph has no backward for them.
    released_outputs : list of int
        Those of them not in ``kept_outputs``: the graph holds them only to
        the end of the forward pass, as node memory (an ``<outputs>`` node
        reads them), not as fixed bytes.
    trace : object
        The trace the graph was grouped from (to group it again at another
        granularity without tracing).
    """

    graph: Graph
    groups: list
    joint: Any
    param_names: list
    buffer_names: list
    n_inputs: int
    mutated_buffers: list
    n_user_outputs: int
    out_spec: Any
    tangent_outputs: list
    grad_slots: list
    tangent_meta: list = field(default_factory=list)
    input_requires_grad: list = field(default_factory=list)
    autocast_dtype: Any = None
    device_type: str = "cpu"
    granularity: str = "module"
    call: Any = None
    out_template: list = field(default_factory=list)
    value_reads: Any = None
    untraced_outputs: list = field(default_factory=list)
    released_outputs: list = field(default_factory=list)
    trace: Any = field(default=None, repr=False)

    @property
    def n_params(self) -> int:
        return len(self.param_names)

    @property
    def n_forward(self) -> int:
        return int(self.graph.meta["n_forward"])

    def __repr__(self) -> str:
        return (f"<ExtractedGraph {self.graph.name!r}: {self.graph.n} nodes "
                f"({self.n_forward} forward), granularity={self.granularity!r}, "
                f"fixed {self.graph.fixed_bytes} bytes>")


def _storage_bytes(t) -> int:
    return int(t.untyped_storage().nbytes())


def _flat_tensors(val) -> list:
    import torch

    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)):
        out = []
        for v in val:
            out.extend(_flat_tensors(v))
        return out
    return []


def _as_tuple_inputs(example_inputs) -> tuple:
    import torch

    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    raise TypeError(f"`example_inputs` must be a tensor or a tuple of inputs; got {type(example_inputs).__name__}")


_PLAIN_LEAVES = (int, float, bool, str, bytes, type(None))


@dataclass
class CallSpec:
    """A model call ``model(*args, **kwargs)`` flattened into pytree leaves.

    Tensor leaves become graph inputs; the other leaves (numbers, strings,
    ``None``, flags such as ``use_cache=False``) are constants the trace is
    specialized on.

    Attributes
    ----------
    spec : pytree spec of ``(args, kwargs)``
    template : list
        The leaves, with ``None`` where a tensor goes.
    tensor_positions : list of int
        Leaf positions of the tensors, in graph-input order.
    """

    spec: Any
    template: list
    tensor_positions: list

    @classmethod
    def from_call(cls, args, kwargs, argument: str = "example_inputs") -> tuple["CallSpec", list]:
        """Flatten a call; returns ``(spec, tensors)``. Raises TypeError on a leaf that is neither."""
        import torch
        from torch.utils._pytree import tree_flatten

        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise TypeError(f"`example_kwargs` must be a dict with string keys; got {type(kwargs).__name__}")
        leaves, spec = tree_flatten((tuple(args), dict(kwargs)))
        template, positions, tensors = [], [], []
        for i, x in enumerate(leaves):
            if isinstance(x, torch.Tensor):
                template.append(None)
                positions.append(i)
                tensors.append(x)
            elif isinstance(x, _PLAIN_LEAVES):
                template.append(x)
            else:
                raise TypeError(f"`{argument}` must hold tensors, plain values (numbers, strings, None) and "
                                f"tuples, lists or dicts of them; leaf {i} is a {type(x).__name__}")
        return cls(spec, template, positions), tensors

    def rebuild(self, tensors) -> tuple[tuple, dict]:
        """``(args, kwargs)`` with ``tensors`` in the tensor positions."""
        from torch.utils._pytree import tree_unflatten

        leaves = list(self.template)
        for p, t in zip(self.tensor_positions, tensors):
            leaves[p] = t
        return tree_unflatten(leaves, self.spec)


@contextlib.contextmanager
def _quiet_fake_tensor_log():
    """Silence the fake-tensor logger while tracing: a failing shape check logs its whole traceback there
    before raising; the error raised (translated by ``_translate_trace_error``) already says what failed."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _scope_tracking(model, set_meta: bool):
    """Module-path stack while ``model`` runs (forward hooks); optionally tags FX nodes with it."""
    import torch.fx.traceback as fxt

    stack: list[str] = []

    def set_scope():
        if set_meta:
            fxt.current_meta.setdefault("custom", {})["remat_scope"] = stack[-1] if stack else ""

    def pre(name):
        def hook(mod, args):
            stack.append(name)
            set_scope()
        return hook

    def post(name):
        def hook(mod, args, out):
            if stack:
                stack.pop()
            set_scope()
        return hook

    handles = []
    for name, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(pre(name)))
        handles.append(mod.register_forward_hook(post(name)))
    try:
        yield stack
    finally:
        for h in handles:
            h.remove()
        if set_meta:
            fxt.current_meta.pop("custom", None)


def _select_outputs(out, clone: frozenset, detach: frozenset = frozenset()):
    """The tensor leaves of a model output, those in ``clone`` copied (outputs that alias), those in
    ``detach`` detached (outputs traced without a tangent: the joint graph gets no backward for them)."""
    import torch
    from torch.utils._pytree import tree_flatten

    flat = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    flat = [o.clone() if i in clone else o for i, o in enumerate(flat)]
    return tuple(o.detach() if i in detach else o for i, o in enumerate(flat))


def _trace_joint(model, call: CallSpec, tensors: tuple, autocast_dtype, clone: frozenset, reads,
                 detach: frozenset = frozenset()):
    """Capture AOTAutograd's joint graph; returns (joint, n_fwd_outputs, param names, buffer names, mutated)."""
    import torch
    import torch.fx.traceback as fxt
    from torch._functorch.aot_autograd import aot_function
    from torch.func import functional_call

    from .guards import replaying_reads

    param_names = [k for k, _ in model.named_parameters()]
    buffer_names = [k for k, _ in model.named_buffers()]
    params = [p for _, p in model.named_parameters()]
    buffers = [b for _, b in model.named_buffers()]
    n_p, n_b = len(params), len(buffers)
    captured: dict[str, Any] = {}

    def partition(joint_module, joint_inputs, **kw):
        import sys

        captured["joint"] = joint_module
        captured["num_fwd_outputs"] = kw["num_fwd_outputs"]
        # AOTAutograd's view-and-mutation metadata lives in the caller's frame
        frame = sys._getframe(1)
        for _ in range(6):
            if frame is None:
                break
            meta = frame.f_locals.get("fw_metadata")
            if meta is not None and hasattr(meta, "input_info"):
                captured["fw_metadata"] = meta
                break
            frame = frame.f_back
        raise _Captured

    def fn(*args):
        if reads:
            reads.reset()
        state = {**dict(zip(param_names, args[:n_p])), **dict(zip(buffer_names, args[n_p:n_p + n_b]))}
        a, k = call.rebuild(args[n_p + n_b:])
        return _select_outputs(functional_call(model, state, a, k), clone, detach)

    compiled = aot_function(fn, fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g, partition_fn=partition)
    # clones: nothing is mutated or run for real (we stop inside the partitioner)
    buffer_copies = [b.detach().clone() for b in buffers]
    device_type = tensors[0].device.type if tensors else "cpu"
    with _scope_tracking(model, set_meta=True) as stack, _quiet_fake_tensor_log():
        try:
            with torch.random.fork_rng(devices=[]), fxt.preserve_node_meta(), replaying_reads(reads):
                if autocast_dtype is not None:
                    with torch.autocast(device_type=device_type, dtype=autocast_dtype):
                        compiled(*params, *buffer_copies, *tensors)
                else:
                    compiled(*params, *buffer_copies, *tensors)
        except _Captured:
            pass
        except Exception as exc:  # translate tracing failures into a named construct
            raise _translate_trace_error(exc, stack) from exc
    if "joint" not in captured:
        raise UnsupportedModelError(
            "AOTAutograd produced no joint graph: the model output does not require grad "
            "(no parameter or input with requires_grad reaches it)"
        )
    meta = captured.get("fw_metadata")
    if meta is None:
        raise UnsupportedModelError("could not read AOTAutograd's mutation metadata (unsupported torch version)")
    mutated_inputs = [i for i, info in enumerate(meta.input_info) if info.mutates_data or info.mutates_metadata]
    if getattr(meta, "num_intermediate_bases", 0):
        raise UnsupportedModelError("model outputs that are views of intermediates are not supported "
                                    "(return a `.clone()` instead)")
    for i in mutated_inputs:
        if i < n_p:
            raise UnsupportedModelError(f"the forward pass updates parameter {param_names[i]!r} in place")
        if i >= n_p + n_b:
            raise UnsupportedModelError(f"the forward pass updates input {i - n_p - n_b} in place")
    mutated = [i - n_p for i in mutated_inputs]
    return captured["joint"], captured["num_fwd_outputs"], param_names, buffer_names, mutated


def _is_data_dependent(exc: Exception) -> bool:
    name = type(exc).__name__
    text = str(exc)
    return ("DataDependent" in name or "DynamicOutputShape" in name
            or "data-dependent" in text.lower() or "data dependent" in text.lower()
            or "_local_scalar_dense" in text)


def _translate_trace_error(exc: Exception, stack: Sequence[str] = ()) -> Exception:
    import traceback

    from .guards import source_location

    if isinstance(exc, RematError):
        return exc
    name = type(exc).__name__
    text = str(exc)
    first = text.splitlines()[0] if text else ""
    where = source_location(traceback.extract_tb(exc.__traceback__))
    scope = stack[-1] if stack else ""
    if _is_data_dependent(exc):
        return UnsupportedModelError(
            f"data-dependent control flow or a tensor-to-Python conversion (`.item()`, `bool(tensor)`, "
            f"`if tensor:`, an output whose shape depends on values) in module {scope or '<root>'!r} at {where} "
            f"cannot be traced into a static training graph ({name}: {first}). Train this model under the live "
            "runtime instead (`with remat_torch.dtr(budget=...):`, which needs no plan), or make that code "
            "independent of tensor values")
    return UnsupportedModelError(
        f"AOTAutograd could not trace the model in module {scope or '<root>'!r} at {where}: {name}: {first}")


def _fake_metadata(model, call: CallSpec, tensors, autocast_dtype, reads):
    """Run the forward once on fake tensors.

    Returns ``(out_spec, out_template, tangent_outputs, clone, scalars, view_only)``:
    the output's pytree spec; one entry per output leaf, ``("t", k)`` for the
    ``k``-th tensor or ``("c", value)`` for a constant; the tensor outputs
    that need a tangent; the tensor outputs that alias an input or another
    output (or are views), which the traced function returns as copies; the
    0-dim ones among those that need a tangent; the views among the copies
    that alias nothing else.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call
    from torch.utils._pytree import tree_flatten

    from .guards import replaying_reads

    mode = FakeTensorMode(allow_non_fake_inputs=False)
    named_p = list(model.named_parameters())
    named_b = list(model.named_buffers())
    fp = {k: mode.from_tensor(v) for k, v in named_p}
    fb = {k: mode.from_tensor(v) for k, v in named_b}
    fx_in = [mode.from_tensor(x) for x in tensors]
    device_type = tensors[0].device.type if tensors else "cpu"
    if reads:
        reads.reset()
    with _scope_tracking(model, set_meta=False) as stack, _quiet_fake_tensor_log():
        try:
            with torch.random.fork_rng(devices=[]), replaying_reads(reads), mode:
                a, k = call.rebuild(fx_in)
                if autocast_dtype is not None:
                    with torch.autocast(device_type=device_type, dtype=autocast_dtype):
                        out = functional_call(model, {**fp, **fb}, a, k)
                else:
                    out = functional_call(model, {**fp, **fb}, a, k)
        except Exception as exc:
            raise _translate_trace_error(exc, stack) from exc

    flat, spec = tree_flatten(out)
    template, touts = [], []
    for i, o in enumerate(flat):
        if isinstance(o, torch.Tensor):
            template.append(("t", len(touts)))
            touts.append(o)
        elif isinstance(o, _PLAIN_LEAVES):
            template.append(("c", o))
        else:
            raise UnsupportedModelError(
                f"model output leaf {i} is a {type(o).__name__}, neither a tensor nor a plain value: it cannot be "
                "passed through a rematerialized step (for a cache object, call the model with `use_cache=False`, "
                "as training does)")
    seen = {x.untyped_storage()._cdata for x in fx_in}
    clone, view_only = set(), set()
    for j, o in enumerate(touts):
        key = o.untyped_storage()._cdata
        if o._is_view() or key in seen:
            clone.add(j)
            if key not in seen:
                view_only.add(j)
        seen.add(key)
    tangent_outputs = [i for i, o in enumerate(touts) if o.requires_grad and (o.is_floating_point() or o.is_complex())]
    scalars = [i for i in tangent_outputs if touts[i].dim() == 0]
    return spec, template, tangent_outputs, frozenset(clone), scalars, frozenset(view_only)


def _reads_a_value(exc) -> bool:
    """Whether a fake-tensor trace failed on ``aten._local_scalar_dense`` (a value read)."""
    import torch
    from torch._subclasses.fake_tensor import DataDependentOutputException

    return (isinstance(exc, DataDependentOutputException)
            and getattr(exc, "func", None) is torch.ops.aten._local_scalar_dense.default)


def _record_reads(model, call: CallSpec, inputs, autocast_dtype, stop_after: int | None = None):
    """Run the forward for real and record the values it reads (see :mod:`remat_torch.guards`), up to
    ``stop_after`` of them."""
    import torch
    from torch.func import functional_call

    from .guards import record_value_reads

    device_type = inputs[0].device.type if inputs else "cpu"

    def run(state, ins):
        a, k = call.rebuild(ins)
        if autocast_dtype is not None:
            with torch.autocast(device_type=device_type, dtype=autocast_dtype):
                return functional_call(model, state, a, k)
        return functional_call(model, state, a, k)

    with _scope_tracking(model, set_meta=False) as stack:
        return record_value_reads(model, run, list(inputs), stack, stop_after=stop_after)


def _scope_key(scope: str, granularity: str, blocks: Sequence[str]) -> str:
    if granularity == "block":
        for b in blocks:
            if b == "" or scope == b or scope.startswith(b + "."):
                return b
    return scope


def extract_graph(
    model,
    example_inputs,
    granularity: str = "module",
    blocks: Sequence[Any] | None = None,
    cost_model: str = "unit",
    autocast_dtype: Any = None,
    name: str | None = None,
    workspace: str | None = None,
    example_kwargs: dict | None = None,
    grad_outputs: Any = "all",
    kept_outputs: Sequence[int] = (),
    **profile_options: Any,
) -> ExtractedGraph:
    """Extract the training graph of ``model`` at a chosen granularity.

    Parameters
    ----------
    model : torch.nn.Module
        Traced in its current mode (``train()`` for training). Not modified:
        buffers are cloned and the random number generator state is restored.
    example_inputs : torch.Tensor or tuple
        Positional inputs; the graph is specialized to their shapes, dtypes
        and ``requires_grad`` flags (and to the values of non-tensor leaves).
    granularity : {"op", "module", "block"}
        One node per aten op, per run of ops of the same innermost module,
        or per run of ops inside the same module of ``blocks``.
    blocks : sequence of str or torch.nn.Module, optional
        For ``granularity="block"``: submodules (qualified names or
        instances) whose ops form one forward and one backward node each;
        ops outside them are grouped by module.
    cost_model : {"unit", "flops", "profile"}
        See :func:`remat_torch.profile.node_costs`.
    autocast_dtype : torch.dtype, optional
        Trace under ``torch.autocast(dtype=...)`` (dtype casts become ops).
    name : str, optional
        Graph name (default: the model's class name).
    workspace : {"estimate", "measure"}, optional
        How each node's ``workspace_bytes`` is found: ``"estimate"`` from the
        traced graph (the temporaries passed between the ops inside a node),
        or ``"measure"`` by running every node once on the example inputs and
        watching the allocator (:func:`remat_torch.profile.measure_workspace`;
        it also sees the temporaries allocated inside operators, such as
        ``convolution_backward``'s on CPU). Default: ``"measure"`` on CPU
        or with ``cost_model="profile"`` (the nodes run on the device
        anyway), ``"estimate"`` otherwise.
    example_kwargs : dict, optional
        Keyword arguments of the call. Positional and keyword inputs may be
        tuples, lists and dicts of tensors and plain values: tensors become
        graph inputs, the other leaves constants the graph is specialized on.
    grad_outputs : "all", "loss" or sequence of int
        Which tensor outputs the backward pass starts from (get a tangent):
        ``"all"`` (default) every output that requires grad; ``"loss"`` the
        scalar outputs that require grad when there are any (a Hugging Face
        model's ``loss`` beside its ``logits``), else all; or the positions
        of the chosen outputs among the tensor outputs. The other outputs
        are not differentiated and are not fixed memory: they are held to the
        end of the forward pass only (``ExtractedGraph.released_outputs``),
        unless they are in ``kept_outputs``.
    kept_outputs : sequence of int
        Outputs traced without a tangent that the caller keeps through the
        backward pass (``out = model(**batch); out.loss.backward()`` keeps
        ``out.logits``): fixed bytes, as the outputs with a tangent.
    **profile_options
        Passed to :func:`remat_torch.profile.node_costs` (``warmup``, ``repeats``).

    Returns
    -------
    ExtractedGraph

    Raises
    ------
    UnsupportedModelError
        Data-dependent control flow that cannot be specialized safely (see
        :mod:`remat_torch.guards`), in-place updates of parameters or inputs,
        or other constructs the adapter cannot run; the message names the
        construct, the module path and the source line.
    TypeError, ValueError
        On bad arguments (the message names the argument).

    Examples
    --------
    >>> import torch
    >>> from remat_torch import extract_graph
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> eg = extract_graph(net, torch.randn(3, 4))
    >>> eg.graph.n, eg.n_forward
    (8, 3)
    >>> eg.graph.names[-1]  # reads the parameter gradients, kept to the end of the step as .grad is
    'bwd7:<gradients>'
    """
    return _extract(model, example_inputs, granularity, blocks, cost_model, autocast_dtype, name, workspace,
                    example_kwargs, grad_outputs, kept_outputs, profile_options)


def _extract(model, example_inputs, granularity, blocks, cost_model, autocast_dtype, name, workspace,
             example_kwargs, grad_outputs, kept_outputs, profile_options, pick=None) -> ExtractedGraph:
    """:func:`extract_graph`'s work. With ``pick``, a function of the graph grouped at ``granularity`` (unit
    costs, no workspace) that returns the granularity to use instead: the model is traced once and grouped
    again from the same joint graph, and only the chosen graph is profiled."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"`granularity` must be one of {GRANULARITIES}; got {granularity!r}")
    from .profile import COST_MODELS, WORKSPACE_MODELS

    if cost_model not in COST_MODELS:
        raise ValueError(f"`cost_model` must be one of {COST_MODELS}; got {cost_model!r}")
    if workspace is None:
        # measured on CPU (operators such as dropout and attention backward allocate temporaries that the
        # traced graph cannot see: without them the prediction falls short of the allocator by several
        # percent); elsewhere only with profiled costs, since measuring runs the whole step on the device
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        workspace = "measure" if (cost_model == "profile" or on_cpu) else "estimate"
    if workspace not in WORKSPACE_MODELS:
        raise ValueError(f"`workspace` must be one of {WORKSPACE_MODELS} or None; got {workspace!r}")
    block_names = _block_names(model, granularity, blocks)
    call, tensors = CallSpec.from_call(_as_tuple_inputs(example_inputs), example_kwargs)
    inputs = tuple(tensors)
    tr = _trace(model, call, inputs, autocast_dtype, grad_outputs, kept_outputs)
    # a graph grouped only for `pick` to look at builds no module (Llama 4 x 128: 513 of 741 modules, the
    # op-level graph not used; their fx graphs and code were 0.5-0.7 of its 5-7 CPU s of planning)
    eg = _graph_at(tr, model, inputs, granularity, block_names, name, cost_model, build=pick is None)
    if pick is not None:
        chosen = pick(eg)
        if chosen != granularity:
            eg = _graph_at(tr, model, inputs, chosen, _block_names(model, chosen, None), name, cost_model)
        else:   # used after all: built now
            for spec in eg.groups:
                if spec.fn is None:
                    spec.fn, spec.build = spec.build(), None
    _profile_graph(eg, model, inputs, cost_model, workspace, profile_options)
    log.info("extracted %r", eg)
    return eg


def _block_names(model, granularity: str, blocks) -> list:
    """The qualified names of ``blocks`` (modules or names), innermost first; checks them."""
    import torch

    block_names: list[str] = []
    if granularity == "block":
        if not blocks:
            raise ValueError("`blocks` must name at least one submodule when `granularity` is 'block'")
        by_id = {id(m): n for n, m in model.named_modules()}
        names_all = set(by_id.values())
        for b in blocks:
            if isinstance(b, torch.nn.Module):
                if id(b) not in by_id:
                    raise ValueError(f"`blocks` holds a module that is not a submodule of `model`: {type(b).__name__}")
                block_names.append(by_id[id(b)])
            elif isinstance(b, str):
                if b not in names_all:
                    raise ValueError(f"`blocks` names unknown submodule {b!r}")
                block_names.append(b)
            else:
                raise TypeError(f"`blocks` must hold module names or modules; got {type(b).__name__}")
        block_names.sort(key=len, reverse=True)  # innermost first
    elif blocks:
        raise ValueError(f"`blocks` is only used with granularity='block'; got granularity={granularity!r}")
    return block_names


@dataclass
class _Trace:
    """What one trace of a model gives, whatever the granularity it is grouped at afterwards."""

    call: Any
    out_spec: Any
    out_template: list
    tangent_outputs: list
    untraced: list
    released: list
    joint: Any
    param_names: list
    buffer_names: list
    mutated: list
    reads: Any
    grad_slots: list
    placeholders: list
    outs: list
    n_primals: int
    n_user: int
    autocast_dtype: Any
    regrouped: dict = field(default_factory=dict)   # granularity -> ExtractedGraph made by `regroup`


def _trace(model, call: CallSpec, inputs: tuple, autocast_dtype, grad_outputs, kept_outputs) -> _Trace:
    """Trace the joint graph once (again, specialized on the values read, if a trace read one).

    A trace that stops at a value read gets the values from a real forward that stops at as many reads as
    the trace made (Hugging Face's mask check reads one before the first layer: GPT-2 4 x 128, 8 x 256 tokens,
    1.6 CPU s for a recording of the whole forward); a trace that reads further than that recording gets one
    of the whole forward."""
    reads = None
    for attempt in range(3):
        try:
            out_spec, out_template, tangent_outputs, clone, scalars, view_only = _fake_metadata(
                model, call, inputs, autocast_dtype, reads)
            traced = _traced_grad_outputs(grad_outputs, tangent_outputs, scalars)
            untraced = [i for i in tangent_outputs if i not in traced]
            released = [i for i in untraced if i not in set(kept_outputs)]
            # a detached view of an intermediate needs no copy (AOTAutograd makes no base output for it)
            clone = clone - (view_only & frozenset(untraced))
            joint, n_fwd_out, param_names, buffer_names, mutated = _trace_joint(
                model, call, inputs, autocast_dtype, clone, reads, detach=frozenset(untraced))
            tangent_outputs = traced
            break
        except UnsupportedModelError as exc:
            if attempt == 2 or (reads is not None and reads.complete) or not _reads_a_value(exc.__cause__):
                raise
            # a value read (`mask.all()`): specialize on the example's values, keep a guard program; first
            # only as far as this trace read, then the whole forward
            reads = _record_reads(model, call, inputs, autocast_dtype, stop_after=1 if attempt == 0 else None)
    if reads is not None:   # the trace read exactly these: a later replay that reads more is not reproducible
        reads.complete = True
    n_user = sum(1 for kind, _ in out_template if kind == "t")
    n_primals = len(param_names) + len(buffer_names) + len(inputs)
    out_node = next(n for n in joint.graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    if len(outs) != n_fwd_out + n_primals:
        raise UnsupportedModelError(
            f"unexpected joint graph layout: {len(outs)} outputs for {n_fwd_out} forward outputs and {n_primals} primals"
        )
    if n_fwd_out != len(mutated) + n_user:
        raise UnsupportedModelError(
            f"the joint graph has {n_fwd_out} forward outputs but the model has {n_user} outputs and mutates "
            f"{len(mutated)} buffers: outputs that alias inputs or intermediates (views returned by forward) "
            "are not supported"
        )
    grad_slots = [n_fwd_out + i if outs[n_fwd_out + i] is not None else None for i in range(n_primals)]
    _drop_identity_clones(joint)
    _drop_unread_running_stats(joint)
    _views_as_reshapes(joint)
    placeholders = [n for n in joint.graph.nodes if n.op == "placeholder"]
    n_tangents = len(placeholders) - n_primals
    if n_tangents != len(tangent_outputs):
        raise UnsupportedModelError(
            f"the joint graph has {n_tangents} tangents but {len(tangent_outputs)} model outputs require grad"
        )
    return _Trace(call=call, out_spec=out_spec, out_template=out_template, tangent_outputs=tangent_outputs,
                  untraced=untraced, released=released, joint=joint, param_names=param_names,
                  buffer_names=buffer_names, mutated=mutated, reads=reads, grad_slots=grad_slots,
                  placeholders=placeholders, outs=outs, n_primals=n_primals, n_user=n_user,
                  autocast_dtype=autocast_dtype)


def _graph_at(tr: _Trace, model, inputs, granularity: str, block_names, name, cost_model,
              build: bool = True) -> ExtractedGraph:
    """The trace grouped at ``granularity``: an ExtractedGraph with unit costs and estimated workspaces
    (``build=False``: its nodes' modules are not built, see :class:`GroupSpec`'s ``build``)."""
    import torch

    mutated = tr.mutated
    groups, tangent_meta, fixed_extra = _group(tr.joint, tr.placeholders, tr.outs, tr.n_primals, granularity,
                                               block_names, untraced={len(mutated) + i for i in tr.released},
                                               build=build)
    # fixed bytes: parameters, buffers, mutated-buffer snapshots, inputs, tangents, joint outputs
    fixed = 0
    seen: set = set()
    for t in [p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()] + list(inputs):
        key = (t.untyped_storage().data_ptr(), t.device)
        if key not in seen:
            seen.add(key)
            fixed += _storage_bytes(t)
    bufs = [b for _, b in model.named_buffers()]
    fixed += sum(_storage_bytes(bufs[j]) for j in mutated)
    fixed += fixed_extra
    for shape, stride, dtype in tangent_meta:  # output tangents arrive with backward
        numel = 1 + sum((d - 1) * st for d, st in zip(shape, stride)) if all(shape) else 0
        fixed += numel * torch.empty((), dtype=dtype).element_size()
    n_forward = sum(1 for g in groups if not g.is_backward)
    nodes_deps = [sorted({src[1] for src in g.inputs if src[0] == "node"}) for g in groups]
    # remap ("node", group_index, out) to ("node", dep_position, out)
    for g, deps in zip(groups, nodes_deps):
        pos = {d: i for i, d in enumerate(deps)}
        g.inputs = [("node", pos[s[1]], s[2]) if s[0] == "node" else s for s in g.inputs]
    graph = Graph.from_arrays(
        nodes_deps,
        cost=[1.0] * len(groups),
        memory_bytes=[g.memory_bytes for g in groups],
        workspace_bytes=[g.workspace_bytes for g in groups],
        is_backward=[g.is_backward for g in groups],
        names=[g.name for g in groups],
        fixed_bytes=int(fixed),
        name=name or type(model).__name__,
        meta={"kind": "torch", "granularity": granularity, "n_forward": n_forward,
              "model": type(model).__name__, "cost_model": cost_model, "cost_unit": "node",
              "input_shapes": [list(x.shape) for x in inputs],
              # parameter gradients are node memory here; budgets as fractions leave them out (remat_core.units)
              # (the nodes the last `<gradients>` node reads: holders and gradient-only nodes, not the fused
              # backward ops that holders take parameter gradients from, whose other output is no gradient)
              "gradient_nodes": sorted({groups[d].name for g, deps in zip(groups, nodes_deps)
                                        if g.name.endswith("<gradients>") and not g.outputs for d in deps})},
    )
    if list(graph.names) != [g.name for g in groups]:
        raise RematError("internal error: grouped nodes are not in topological order")  # pragma: no cover
    return ExtractedGraph(
        graph=graph, groups=groups, joint=tr.joint, param_names=tr.param_names, buffer_names=tr.buffer_names,
        n_inputs=len(inputs), mutated_buffers=mutated, n_user_outputs=tr.n_user, out_spec=tr.out_spec,
        tangent_outputs=tr.tangent_outputs, grad_slots=tr.grad_slots, tangent_meta=tangent_meta,
        input_requires_grad=[bool(x.requires_grad) for x in inputs], autocast_dtype=tr.autocast_dtype,
        device_type=inputs[0].device.type if inputs else "cpu", granularity=granularity,
        call=tr.call, out_template=tr.out_template, value_reads=tr.reads, untraced_outputs=tr.untraced,
        released_outputs=tr.released, trace=tr,
    )


def regroup(eg: ExtractedGraph, model, inputs, granularity: str, blocks=None, profile_options=None) -> ExtractedGraph:
    """``eg``'s trace grouped at another ``granularity``, with the same cost and workspace models (no tracing)."""
    if eg.trace is None:
        raise ValueError("`eg` holds no trace to group again")
    key = (granularity, repr(blocks))
    if key in eg.trace.regrouped:
        return eg.trace.regrouped[key]
    out = _graph_at(eg.trace, model, inputs, granularity, _block_names(model, granularity, blocks), eg.graph.name,
                    eg.graph.meta.get("cost_model", "unit"))
    _profile_graph(out, model, inputs, eg.graph.meta.get("cost_model", "unit"),
                   eg.graph.meta.get("workspace", "estimate"), dict(profile_options or {}))
    eg.trace.regrouped[key] = out
    return out


def _profile_graph(eg: ExtractedGraph, model, inputs, cost_model: str, workspace: str, profile_options) -> None:
    """Give ``eg`` its node costs under ``cost_model`` and, with ``workspace="measure"``, measured workspaces."""
    from .profile import measure_workspace, node_costs

    meta = eg.graph.meta
    meta["workspace"] = workspace
    if cost_model != "unit":
        costs, unit = node_costs(eg, model, inputs, cost_model, **profile_options)
        meta["cost_unit"] = unit
        eg.graph = eg.graph.replace(cost=costs, meta=meta)
    else:
        eg.graph = eg.graph.replace(meta=meta)
    if workspace == "measure":
        ws = measure_workspace(eg, model, inputs, progress=bool(profile_options.get("progress", False)))
        for spec, w in zip(eg.groups, ws):
            spec.workspace_bytes = int(w)   # the executor's step accounting reads it from here
        eg.graph = eg.graph.replace(workspace_bytes=ws)


def _drop_identity_clones(joint) -> int:
    """Remove the ``clone`` ops that only stand for "no op" in the joint graph; returns how many.

    PyTorch's decomposition of ``dropout`` with ``p=0`` (or outside
    training) is ``input.clone()``, where eager ATen returns the input
    itself: the traced step would copy every such tensor (Hugging Face
    attention weights with ``attention_dropout=0``) and keep both copies for
    the backward, above eager's peak. A ``clone`` without a memory format of
    an intermediate whose layout is dense (the copy has the same strides) is
    replaced by its input, unless either is a graph output (outputs must not
    alias each other). The graph is functional, so nothing writes to either.
    """
    import torch

    out_node = next(n for n in joint.graph.nodes if n.op == "output")
    returned = set(out_node.all_input_nodes)
    removed = 0
    for n in list(joint.graph.nodes):
        if n.op != "call_function" or n.target is not torch.ops.aten.clone.default or n.kwargs:
            continue
        src = n.args[0]
        if len(n.args) != 1 or src.op != "call_function" or n in returned or src in returned:
            continue
        val, sval = n.meta.get("val"), src.meta.get("val")
        if not (isinstance(val, torch.Tensor) and isinstance(sval, torch.Tensor)):
            continue
        if tuple(val.stride()) != tuple(sval.stride()) or val.dtype != sval.dtype:
            continue
        n.replace_all_uses_with(src)
        joint.graph.erase_node(n)
        removed += 1
    if removed:
        joint.recompile()
    return removed


def _views_as_reshapes(joint) -> int:
    """Run every ``view`` of the joint graph as ``reshape``; returns how many.

    Some fake kernels give strides that the real kernel does not: the
    training-mode batch norm of a transposed input is laid out like its input
    when traced and contiguous when run, so a traced ``view`` of its
    transposed-back output fails at run time ("view size is not compatible").
    ``reshape`` is the same view wherever the traced strides hold (the plan's
    aliasing is unchanged), and copies only where they do not. The graph is
    functional, so nothing writes through either.
    """
    import torch

    n = 0
    for node in joint.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
            n += 1
    if n:
        joint.recompile()
    return n


def _drop_unread_running_stats(joint) -> int:
    """Pass ``None`` for the running statistics of a training-mode ``native_batch_norm_backward``; returns how
    many were changed.

    In training mode that backward reads the saved batch statistics, not the running ones, but the
    functional joint graph passes it the updated running statistics (the forward's outputs 3 and 4). Read
    there, those copies stayed alive until the backward, where eager autograd holds the buffers themselves:
    192 B above eager's peak on a tiny ResNet (three batch norms), more with wider ones.
    """
    import torch

    bn_backward = torch.ops.aten.native_batch_norm_backward.default
    changed = 0
    for n in joint.graph.nodes:
        if (n.op == "call_function" and n.target is bn_backward and len(n.args) >= 8 and n.args[7] is True
                and not n.kwargs and (n.args[3] is not None or n.args[4] is not None)):
            n.args = (*n.args[:3], None, None, *n.args[5:])
            changed += 1
    if changed:   # nothing else changes: the statistics stay outputs of the step (the buffer updates)
        joint.recompile()
    return changed


def _traced_grad_outputs(grad_outputs, differentiable: list, scalars: list) -> list:
    """The outputs traced with a tangent, for ``extract_graph``'s ``grad_outputs``."""
    if isinstance(grad_outputs, str):
        if grad_outputs == "all":
            return list(differentiable)
        if grad_outputs == "loss":
            return list(scalars) or list(differentiable)
        raise ValueError(f"`grad_outputs` must be 'all', 'loss' or a sequence of output positions; "
                         f"got {grad_outputs!r}")
    try:
        chosen = {int(i) for i in grad_outputs}
    except (TypeError, ValueError):
        raise TypeError(f"`grad_outputs` must be 'all', 'loss' or a sequence of output positions; "
                        f"got {grad_outputs!r}") from None
    traced = [i for i in differentiable if i in chosen]
    return traced or list(differentiable)


def _group(joint, placeholders, outs, n_primals, granularity, block_names, untraced=frozenset(), build=True):
    """Units, groups, memory and workspace. Returns (groups, tangent_meta, fixed_extra_bytes).

    ``untraced``: joint output positions of user outputs without a tangent; they are node memory, held
    to the end of the forward pass by an ``<outputs>`` node. ``build=False``: each group's module is left
    to its ``build()``.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    env: dict[Any, Any] = {}
    for ph in placeholders:
        val = ph.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise UnsupportedModelError(f"joint-graph input {ph.name} has no tensor metadata")
        with mode:
            env[ph] = torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device=val.device)
    tangent_meta = [(tuple(env[ph].shape), tuple(env[ph].stride()), env[ph].dtype) for ph in placeholders[n_primals:]]

    def key(t):
        return StorageWeakRef(t.untyped_storage())

    owner: dict[Any, Any] = {}  # storage -> unit head (fx node) or "fixed"
    nbytes: dict[Any, int] = {}
    for ph in placeholders:
        k = key(env[ph])
        owner[k] = "fixed"
        nbytes[k] = _storage_bytes(env[ph])
    unit_of: dict[Any, Any] = {}  # fx node -> unit head
    fixed_view: set = set()
    heads: list = []
    members: dict[Any, list] = {}
    value_keys: dict[Any, list] = {}
    pos = {n: i for i, n in enumerate(joint.graph.nodes)}
    const_bytes = 0
    with mode:
        for node in joint.graph.nodes:
            if node.op != "call_function":
                if node.op == "get_attr":  # a constant tensor made during tracing: fixed memory, inlined
                    const = getattr(joint, node.target)
                    if not isinstance(const, torch.Tensor):
                        raise UnsupportedModelError(f"joint graph reads non-tensor attribute {node.target!r}")
                    env[node] = torch.empty_strided(const.shape, const.stride(), dtype=const.dtype,
                                                    device=const.device)
                    k = key(env[node])
                    owner[k] = "fixed"
                    nbytes[k] = _storage_bytes(const)
                    const_bytes += _storage_bytes(const)
                continue
            args = torch.fx.node.map_arg(node.args, lambda a: env[a])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: env[a])
            val = node.target(*args, **kwargs)
            env[node] = val
            ts = _flat_tensors(val)
            ks = [key(t) for t in ts]
            value_keys[node] = [(k, _storage_bytes(t)) for k, t in zip(ks, ts) if _storage_bytes(t) > 0]
            if node.target is operator.getitem:
                parent = node.args[0]
                if parent in fixed_view:
                    fixed_view.add(node)
                else:
                    unit_of[node] = unit_of[parent]
                    members[unit_of[parent]].append(node)
                continue
            real = [(k, b) for k, b in value_keys[node]]
            known = [k for k, _ in real if k in owner]
            if real and len(known) == len(real):
                owners = {owner[k] if owner[k] == "fixed" else id(owner[k]) for k in known}
                if len(owners) != 1:
                    raise UnsupportedModelError(f"op {node.format_node()} returns aliases of several tensors")
                o = owner[known[0]]
                if o == "fixed":
                    fixed_view.add(node)
                else:
                    unit_of[node] = o
                    members[o].append(node)
                    for a in node.all_input_nodes:
                        if a not in fixed_view and a.op not in ("placeholder", "get_attr") and unit_of.get(a) is not o:
                            raise UnsupportedModelError(
                                f"op {node.format_node()} aliases one tensor but reads others")
                continue
            if known:
                raise UnsupportedModelError(f"op {node.format_node()} returns both new tensors and aliases")
            for k, b in real:
                owner[k] = node
                nbytes[k] = b
            unit_of[node] = node
            members[node] = [node]
            heads.append(node)

    # joint outputs: model outputs and buffer updates are fixed memory (handed over in the forward);
    # gradients are the memory of the node that computes them, kept to the end of the step (the
    # `<gradients>` node below reads them all), since autograd allocates them one by one in the backward
    joint_out_index: dict[Any, list] = {}
    fixed_keys = {k for k, o in owner.items() if o == "fixed"}
    extra_fixed = const_bytes
    first_grad = len(outs) - n_primals
    for j, o in enumerate(outs):
        if o is None:
            continue
        if o.op == "placeholder" or o in fixed_view:
            raise UnsupportedModelError(
                f"joint output {j} ({o.name}) aliases a parameter, input or tangent "
                "(a model output or gradient that is a view of an input is not supported)")
        joint_out_index.setdefault(o, []).append(j)
    for j, o in enumerate(outs[:first_grad]):
        if j in untraced:
            continue
        for k, b in value_keys.get(o, ()):
            if k not in fixed_keys:
                fixed_keys.add(k)
                extra_fixed += b

    def grad_only(h):
        """Whether unit ``h`` computes gradients and nothing that another op reads."""
        unit = set(members[h])
        return (any(j >= first_grad for m in unit for j in joint_out_index.get(m, ()))
                and all(u.op == "output" or u in unit for m in unit for u in m.users))

    # groups: runs of consecutive units with the same key
    def tag(n):
        return n.meta.get("partitioner_tag") == "is_backward"

    def scope(n):
        return (n.meta.get("custom") or {}).get("remat_scope", "")

    # Above op granularity, the units that only compute gradients leave their run for a group of their
    # own beside it (one per run), placed at its last unit: gradients are kept to the end of the step,
    # and a run's other outputs must not be kept with them.
    runs: list[list] = []
    grad_run: list[bool] = []
    last_key = None
    cur = None  # the open run of ordinary units
    grads_of_run: dict[int, int] = {}  # run -> its gradient group
    pending: dict[Any, int] = {}  # key -> gradient group of units met before a run of that key opened
    for h in heads:  # heads are in FX (topological) order
        if granularity == "op":
            k = (id(h),)
        else:
            k = (_scope_key(scope(h), granularity, block_names), tag(h))
        if granularity != "op" and grad_only(h):
            table, key = (grads_of_run, cur) if (cur is not None and k == last_key) else (pending, k)
            if key not in table:
                table[key] = len(runs)
                runs.append([])
                grad_run.append(True)
            runs[table[key]].append(h)
            continue
        if cur is not None and k == last_key:
            runs[cur].append(h)
        else:
            cur = len(runs)
            runs.append([h])
            grad_run.append(False)
            if k in pending:  # gradient units of this key came just before the run opened
                grads_of_run[cur] = pending.pop(k)
            pending.clear()
        last_key = k
    group_of_unit = {}
    for gi, run in enumerate(runs):
        for h in run:
            group_of_unit[h] = gi
    group_nodes: list[list] = [[] for _ in runs]
    for h in heads:
        group_nodes[group_of_unit[h]].extend(members[h])
    for lst in group_nodes:
        lst.sort(key=lambda n: pos[n])
    group_of = {n: group_of_unit[unit_of[n]] for n in unit_of}
    # a gradient group only has inputs: placed at its last unit, every edge goes forward
    order = sorted(range(len(runs)), key=lambda g: (tag(runs[g][0]), pos[runs[g][-1 if grad_run[g] else 0]]))
    rank = {g: r for r, g in enumerate(order)}
    ph_index = {ph: i for i, ph in enumerate(placeholders)}

    groups: list[GroupSpec] = []
    grad_bytes: list[dict] = []  # per group: output index -> bytes, of its gradient outputs
    out_bytes: list[list] = []  # per group: bytes of each output (non-fixed storages)
    out_lists: dict[int, list] = {}
    # outputs of each group: values read by other groups or returned by the joint graph
    for g in range(len(runs)):
        olist = []
        for n in group_nodes[g]:
            if isinstance(env[n], (tuple, list)) and not isinstance(env[n], torch.Tensor):
                continue  # multi-output op: its getitems are the values
            used_outside = any(u.op == "call_function" and u not in fixed_view and group_of.get(u) != g
                               for u in n.users)
            if used_outside or n in joint_out_index:
                olist.append(n)
        out_lists[g] = olist
    out_pos = {gid: {n: i for i, n in enumerate(lst)} for gid, lst in out_lists.items()}
    for g in order:
        nodes = group_nodes[g]
        is_bwd = tag(runs[g][0])
        if build:
            gm, inputs, ops = _build_group_module(joint, nodes, fixed_view, group_of, g, ph_index, out_lists,
                                                  out_pos)
            later = None
        else:
            gm, (inputs, ops) = None, _group_sources(nodes, fixed_view, group_of, ph_index, out_pos)
            later = functools.partial(_built_module, joint, nodes, fixed_view, group_of, g, ph_index, out_lists,
                                      out_pos)
        olist = out_lists[g]
        jouts = [(i, j) for i, n in enumerate(olist) for j in joint_out_index.get(n, [])]
        # memory: distinct non-fixed storages of the outputs
        out_keys: dict[Any, int] = {}
        for n in olist:
            for k, b in value_keys[n]:
                if k not in fixed_keys:
                    out_keys[k] = b
        mem = sum(out_keys.values())
        ws = _internal_peak(nodes, olist, value_keys, fixed_keys) - mem
        out_bytes.append([sum(b for k, b in value_keys[n] if k not in fixed_keys) for n in olist])
        grad_bytes.append({i: sum(b for k, b in value_keys[olist[i]] if k not in fixed_keys)
                           for i, j in jouts if j >= first_grad})
        head = runs[g][0]
        name = f"{'bwd' if is_bwd else 'fwd'}{len(groups)}:{scope(head) or '<root>'}:{head.name}"
        random = any(torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()) for n in nodes
                     if callable(n.target))
        groups.append(GroupSpec(
            name=name, fn=gm, inputs=inputs, outputs=[n.name for n in olist], joint_outputs=jouts,
            random=random, ops=ops, scope=_scope_key(scope(head), granularity, block_names), is_backward=is_bwd,
            memory_bytes=int(mem), workspace_bytes=int(max(ws, 0)), fx_nodes=tuple(n.name for n in nodes),
            build=later))
    # translate ("node", group_id, out) with group ids -> graph positions
    for spec in groups:
        spec.inputs = [("node", rank[s[1]], s[2]) if s[0] == "node" else s for s in spec.inputs]
    sizes = {spec.name: b for spec, b in zip(groups, out_bytes)}
    groups = _hold_gradients(groups, grad_bytes, first_grad)
    groups = _hold_kept_outputs(groups, sizes)
    producers = [k for k, spec in enumerate(groups) if any(j >= first_grad for _, j in spec.joint_outputs)]
    if producers:
        groups.append(_gradients_node(len(groups), producers, groups))
    if untraced:
        groups = _insert_outputs_node(groups, untraced)
    return groups, tangent_meta, extra_fixed


def _insert_outputs_node(groups, untraced):
    """Insert, after the last forward node, a node that reads the outputs traced without a tangent.

    The executor holds them from their computation until the forward pass
    returns them to the caller; this node keeps them resident in the memory
    model until then. After it they are ordinary values, freed after their
    last reader: what the caller keeps (the ``logits`` beside a ``loss``) is
    the caller's memory, as in eager PyTorch.
    """
    import torch
    import torch.fx as fx

    at = sum(1 for g in groups if not g.is_backward)
    sources = [(k, i) for k, spec in enumerate(groups) for i, j in spec.joint_outputs if j in untraced]
    sources = list(dict.fromkeys(sources))
    graph = fx.Graph()
    for n, _ in enumerate(sources):
        graph.placeholder(f"in_{n}")
    graph.output(())
    node = GroupSpec(name=f"fwd{at}:<outputs>", fn=fx.GraphModule(torch.nn.Module(), graph),
                     inputs=[("node", k, i) for k, i in sources], outputs=[], joint_outputs=[], random=False,
                     ops=(), scope="", is_backward=False, memory_bytes=0, workspace_bytes=0)
    out = groups[:at] + [node] + groups[at:]
    for spec in out[at + 1:]:
        spec.inputs = [("node", s[1] + (s[1] >= at), s[2]) if s[0] == "node" else s for s in spec.inputs]
    return out


def _identity_module(n: int):
    """An fx.GraphModule returning its ``n`` arguments."""
    import torch
    import torch.fx as fx

    graph = fx.Graph()
    graph.output(tuple(graph.placeholder(f"in_{i}") for i in range(n)))
    return fx.GraphModule(torch.nn.Module(), graph)


def _hold_kept_outputs(groups, out_bytes):
    """Give the outputs of a forward node that are read later than its largest output a holder node of
    their own, so that the node is freed after the last reader of that output.

    A node's outputs live and die together. ``_native_batch_norm_legit_functional``
    returns the normalized tensor (read once, by the ReLU after it) with the
    batch statistics (a few bytes, read by the backward); ``native_layer_norm``
    returns its output (read by the next projections and, for their weight
    gradients, by their backward ops) with the mean and reciprocal standard
    deviation (read by its own backward, later still). Kept as one value, the
    large output would stay until the last of those readers, which eager
    autograd never does. The holder (no ops) takes the outputs read after the
    largest output's last reader, their readers read them from it, and the
    node is freed after the largest output's last reader. This is done when
    the held outputs are smaller than the rest. The holder's bytes are counted
    again while both are live: a slight overestimate. ``out_bytes`` maps a
    group's name to the bytes of each of its outputs.
    """
    readers: dict[int, list] = {}  # group -> [(reader, input position, output index)]
    for j, spec in enumerate(groups):
        for p, src in enumerate(spec.inputs):
            if src[0] == "node":
                readers.setdefault(src[1], []).append((j, p, src[2]))
    out: list = []
    new_pos: dict[int, int] = {}
    moved: dict[tuple, tuple] = {}  # (group, output index) -> (holder group in `out`, its output index)
    for k, spec in enumerate(groups):
        new_pos[k] = len(out)
        out.append(spec)
        if spec.is_backward or not spec.ops or len(spec.outputs) < 2 or spec.name not in out_bytes:
            continue
        last: dict[int, int] = {}
        for j, _, i in readers.get(k, []):
            last[i] = max(last.get(i, -1), j)
        joint = {i for i, _ in spec.joint_outputs}
        sizes = out_bytes[spec.name]
        free = [i for i in range(len(spec.outputs)) if i not in joint]
        if not free:
            continue
        big = max(free, key=lambda i: (sizes[i], -last.get(i, -1)))
        held = [i for i in range(len(spec.outputs)) if last.get(i, -1) > last.get(big, -1)]
        rest = [i for i in free if i not in held]
        if not held or sum(sizes[i] for i in held) >= sum(sizes[i] for i in rest):
            continue
        h = len(out)
        for n, i in enumerate(held):
            moved[k, i] = (h, n)
        out.append(GroupSpec(
            name=f"{spec.name}:<kept>", fn=_identity_module(len(held)), inputs=[("node", k, i) for i in held],
            outputs=[spec.outputs[i] for i in held],
            # a joint output (a buffer update read later) stays one on the holder too: fixed memory
            joint_outputs=[(n, j) for n, i in enumerate(held) for oi, j in spec.joint_outputs if oi == i],
            random=False, ops=(), scope=spec.scope, is_backward=False,
            memory_bytes=int(sum(sizes[i] for i in held)), workspace_bytes=0))
    for j, spec in enumerate(out):
        if spec.name.endswith(":<kept>"):
            spec.inputs = [("node", new_pos[s[1]], s[2]) for s in spec.inputs]
            continue
        new = []
        for src in spec.inputs:
            if src[0] != "node":
                new.append(src)
            elif (src[1], src[2]) in moved:
                new.append(("node",) + moved[src[1], src[2]])
            else:
                new.append(("node", new_pos[src[1]], src[2]))
        spec.inputs = new
    return out


def _hold_gradients(groups, grad_bytes, first_grad):
    """Give the gradients of a node that also computes other values a node of their own, right after it.

    An op such as ``convolution_backward`` or ``native_layer_norm_backward``
    returns the input's gradient (read by the next node) with the parameters'
    gradients (kept to the end of the step). If its node were kept to the end,
    the input's gradient would be too; instead a holder node (no ops) takes
    the parameter gradients from it, and the node is freed after its last
    reader. The holder's bytes are counted again while both are live: a
    slight overestimate, never an underestimate.
    """
    out: list = []
    new_pos: dict[int, int] = {}
    for k, spec in enumerate(groups):
        new_pos[k] = len(out)
        out.append(spec)
        held = sorted(grad_bytes[k])
        if not held or len(held) == len(spec.outputs):
            continue
        where = {i: h for h, i in enumerate(held)}
        out.append(GroupSpec(
            name=f"{spec.name}:<gradients>", fn=_identity_module(len(held)), inputs=[("node", k, i) for i in held],
            outputs=[spec.outputs[i] for i in held],
            joint_outputs=[(where[i], j) for i, j in spec.joint_outputs if j >= first_grad],
            random=False, ops=(), scope=spec.scope, is_backward=spec.is_backward,
            memory_bytes=int(sum(grad_bytes[k].values())), workspace_bytes=0))
        spec.joint_outputs = [(i, j) for i, j in spec.joint_outputs if j < first_grad]
    for spec in out:
        spec.inputs = [("node", new_pos[s[1]], s[2]) if s[0] == "node" else s for s in spec.inputs]
    return out


def _gradients_node(index, producers, groups):
    """The last node: reads one output of every node that computes gradients and runs no op.

    It keeps the gradients in memory to the end of the step, where the
    optimizer reads them, as autograd's ``.grad`` does.
    """
    import torch
    import torch.fx as fx

    graph = fx.Graph()
    for k in producers:
        graph.placeholder(f"in_{k}")
    graph.output(())
    gm = fx.GraphModule(torch.nn.Module(), graph)
    inputs = [("node", k, next(i for i, _ in groups[k].joint_outputs)) for k in producers]
    return GroupSpec(name=f"bwd{index}:<gradients>", fn=gm, inputs=inputs, outputs=[], joint_outputs=[],
                     random=False, ops=(), scope="", is_backward=True, memory_bytes=0, workspace_bytes=0)


def _internal_peak(nodes, outputs, value_keys, fixed_keys) -> int:
    """Largest sum of live non-fixed storages created inside a group while it runs.

    Same rule as the executor's measuring mode: after each op its new values
    are live; a value dies after its last read inside the group unless it is
    an output; a storage counts while any live value references it.
    """
    inside = set(nodes)
    out_set = set(outputs)
    last_use = {}
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:
            if a in inside:
                last_use[a] = i
    live: dict[Any, int] = {}  # value -> index
    peak = 0
    for i, n in enumerate(nodes):
        live[n] = i
        cur: dict[Any, int] = {}
        for v in live:
            for k, b in value_keys.get(v, ()):
                if k not in fixed_keys:
                    cur[k] = b
        peak = max(peak, sum(cur.values()))
        for a in list(live):
            if a not in out_set and last_use.get(a, live[a]) <= i:
                del live[a]
    return peak


def _constant(value):
    """A function returning ``value``: a constant tensor made during tracing, as a call in a node's graph."""
    def remat_constant():
        return value
    return remat_constant


def _group_sources(nodes, fixed_view, group_of, ph_index, out_pos):
    """The input sources and op names of :func:`_build_group_module`'s module, in the same order, without
    building it."""
    seen: set = set()
    inputs: list = []
    ops: list[str] = []

    def load(a):
        if a not in seen:
            seen.add(a)
            if a.op == "placeholder":
                inputs.append(("ph", ph_index[a]))
            elif a.op != "get_attr" and a in fixed_view:
                _map_arg((a.args, a.kwargs), load)
                ops.append(str(a.target))
            elif a.op != "get_attr":
                inputs.append(("node", group_of[a], out_pos[group_of[a]][a]))
        return a

    for n in nodes:
        _map_arg((n.args, n.kwargs), load)   # node_copy's order: args, then kwargs
        seen.add(n)
        if n.target is not operator.getitem:
            ops.append(str(n.target))
    return inputs, tuple(ops)


def _map_arg(a, fn):
    import torch.fx

    return torch.fx.node.map_arg(a, fn)


def _built_module(*args):
    """:func:`_build_group_module`'s module alone (a group's deferred ``build``)."""
    return _build_group_module(*args)[0]


def _build_group_module(joint, nodes, fixed_view, group_of, g, ph_index, out_lists, out_pos):
    """An fx.GraphModule computing one group; returns (gm, input sources, op names)."""
    import torch
    import torch.fx as fx

    graph = fx.Graph()
    env: dict[Any, Any] = {}
    inputs: list = []
    ops: list[str] = []

    def new_placeholder(label):
        first = next((x for x in graph.nodes if x.op != "placeholder"), None)
        if first is None:
            return graph.placeholder(label)
        with graph.inserting_before(first):
            return graph.placeholder(label)

    def load(a):
        if a in env:
            return env[a]
        if a.op == "placeholder":
            p = new_placeholder(f"in{len(inputs)}_{a.name}")
            inputs.append(("ph", ph_index[a]))
            env[a] = p
            return p
        if a.op == "get_attr":  # a constant: a call that returns it (the executor runs calls only)
            v = graph.call_function(_constant(getattr(joint, a.target)), ())
            env[a] = v
            return v
        if a in fixed_view:
            v = graph.node_copy(a, load)
            ops.append(str(a.target))
            env[a] = v
            return v
        src = group_of[a]
        if src == g:  # pragma: no cover - nodes are copied in order
            raise RematError(f"internal error: {a.name} read before it is computed")
        p = new_placeholder(f"in{len(inputs)}_{a.name}")
        inputs.append(("node", src, out_pos[src][a]))
        env[a] = p
        return p

    for n in nodes:
        env[n] = graph.node_copy(n, load)
        if n.target is not operator.getitem:
            ops.append(str(n.target))
    graph.output(tuple(env[n] for n in out_lists[g]))
    return fx.GraphModule(torch.nn.Module(), graph), inputs, tuple(ops)
