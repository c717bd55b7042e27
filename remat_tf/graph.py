"""Extract the layer-level training graph of a Keras 3 model (TensorFlow backend).

A functional or ``Sequential`` model is a DAG of *calls*: one call per time a
Keras operation (a layer, or a ``keras.ops`` function applied to symbolic
tensors) is called in the model. :func:`extract_graph` turns it into a
:class:`remat_core.Graph` with

* one forward node per call (a layer called twice, a shared layer, gives two
  nodes), in the order Keras runs them;
* a ``loss`` node: the loss and its gradient with respect to every model output;
* one backward node ``grad/<call>`` per call that has trainable weights or
  reads a value that depends on one. It computes the call's vector-Jacobian
  product: the gradients with respect to the call's inputs (its value) and to
  the layer's weights (accumulated into the always-resident weight gradients).

Edges of a backward node (what reverse-mode autodiff reads, kept conservative):
the call's own forward node (its outputs and the tensors its gradient saves),
the forward nodes of its inputs, the backward nodes of its users (the
gradient contributions to its outputs) and the loss when it produces a model
output.

Memory comes from one symbolic run of the checkpoint-all program on the
example inputs' shapes (nothing is computed), where every op is attributed to
the node that created it:

* ``memory_bytes`` of a forward node = its outputs plus the *residuals*: the
  tensors created inside the layer that its gradient reads (a fused
  activation's output, a dropout mask, attention probabilities...);
* of a backward node = the gradients with respect to its inputs;
* ``workspace_bytes`` of a forward node = the other tensors the layer creates
  (an upper bound on its temporaries); of a backward node = the gradient's own
  temporaries plus a re-run of the layer's forward (kept conservative: the
  executor normally avoids the re-run, see :mod:`remat_tf.execute`);
* ``fixed_bytes`` = every weight, the example inputs and targets. A weight
  gradient is not always resident: the training step updates each layer's
  weights right after the backward node that finishes their gradient (see
  :func:`remat_tf.execute.order_writes_after_reads`), so a backward node's
  weight gradients are counted in its workspace (as plain ``fit`` does,
  after Grappler: measured ResNet50 32x32 batch 8, 34-47 MiB peak for 90 MiB
  of gradients).

Costs are FLOPs (the zoo's cost model, :mod:`remat_tf.extract`; a backward
node costs twice its forward) or measured wall-clock seconds
(:mod:`remat_tf.profile`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from remat_core import Graph
from remat_core.errors import RematError

__all__ = ["UnsupportedModelError", "Call", "ExtractedGraph", "extract_graph", "COST_MODELS"]

log = logging.getLogger(__name__)

COST_MODELS = ("flops", "profile", "unit")
# op types whose outputs are weights, constants or model inputs: fixed memory, never residuals
_FIXED_OPS = {"ReadVariableOp", "Const", "Placeholder", "VarHandleOp", "Identity"}
# Scratch buffers TensorFlow's Eigen CPU kernels allocate beyond their outputs (measured with the allocator's
# statistics, TensorFlow 2.21): the convolution backprops take a working buffer of up to 32 MiB each. Used only
# where scratch cannot be measured (remat_tf.memory): an upper bound, far above oneDNN's float32 kernels.
CPU_KERNEL_SCRATCH_BYTES = {"Conv2DBackpropInput": 32 << 20, "Conv2DBackpropFilter": 32 << 20}


class UnsupportedModelError(RematError, NotImplementedError):
    """The model uses a construct the Keras adapter cannot extract or execute.

    The message names the layer (or the model) and the construct.
    """


@dataclass
class Call:
    """One call of a Keras operation in the functional graph (one forward node).

    Attributes
    ----------
    index : int
        Forward node index (Keras execution order).
    name : str
        Node name: the layer name, ``"<layer>@<k>"`` for the k-th call of a shared layer.
    operation : keras.Operation
    node : keras Node
        The functional graph's record of this call (its arguments).
    inputs : list of tuple
        One entry per distinct symbolic input tensor: ``("input", j)`` (model
        input ``j``) or ``("call", c, o)`` (output ``o`` of call ``c``).
    input_ids : list of int
        ``id`` of those symbolic tensors (for ``node.arguments.fill_in``).
    n_outputs : int
    variables : list of int
        Positions of the layer's trainable weights in ``model.trainable_variables``.
    producers, users : list of int
        Distinct calls it reads / that read it.
    needs_grad : bool
        Whether it has a backward node.
    grad_inputs : list of int
        Positions in ``inputs`` whose gradient the backward node returns.
    """

    index: int
    name: str
    operation: Any
    node: Any
    inputs: list
    input_ids: list
    n_outputs: int
    variables: list
    state_variables: list
    training_arg: bool
    producers: list = field(default_factory=list)
    users: list = field(default_factory=list)
    needs_grad: bool = False
    grad_inputs: list = field(default_factory=list)


@dataclass
class ExtractedGraph:
    """A model's layer-level training graph and what the executor needs to run its nodes.

    Attributes
    ----------
    graph : remat_core.Graph
    calls : list of Call
    model : keras.Model
        The model given to :func:`extract_graph`.
    functional : keras.Model
        Its functional graph (``model`` itself, or a ``Sequential``'s).
    loss_fn : keras.losses.Loss
    loss_index : int
        Node index of the loss (= number of calls).
    backward_index : dict
        Call index -> node index of its backward node.
    outputs : list of tuple
        ``(call, output)`` of each flat model output.
    variables : list
        ``model.trainable_variables`` (weight gradients come in this order).
    input_specs, target_specs : list of (shape, dtype)
        Of the flat example inputs and targets the graph was built for.
    """

    graph: Graph
    calls: list
    model: Any
    functional: Any
    loss_fn: Any
    loss_index: int
    backward_index: dict
    outputs: list
    variables: list
    input_specs: list
    target_specs: list
    loss_spec: Any = None

    @property
    def n_forward(self) -> int:
        return len(self.calls)

    def kind(self, k: int) -> tuple[str, int]:
        """``("forward", call)``, ``("loss", -1)`` or ``("backward", call)`` for node ``k``."""
        if k < self.loss_index:
            return "forward", k
        if k == self.loss_index:
            return "loss", -1
        return "backward", self._call_of_backward[k]

    def __post_init__(self):
        self._call_of_backward = {v: c for c, v in self.backward_index.items()}


def functional_of(model: Any) -> Any:
    """The functional graph of ``model`` or :class:`UnsupportedModelError` naming what is missing."""
    import keras

    if not isinstance(model, keras.Model):
        raise TypeError(f"`model` must be a keras.Model; got {type(model).__name__}")
    if isinstance(model, keras.Sequential):
        fn = getattr(model, "_functional", None)
        if fn is None:
            raise UnsupportedModelError(
                f"Sequential model {model.name!r} has no functional graph yet; start it with keras.Input(shape=...) "
                "or call model.build(input_shape) before rematerializing")
        return fn
    if not hasattr(model, "_nodes_by_depth") or not hasattr(model, "_outputs_struct"):
        raise UnsupportedModelError(
            f"model {model.name!r} ({type(model).__name__}) is a subclassed model without a functional graph; "
            "build it with the functional API (keras.Model(inputs, outputs)) or as a keras.Sequential")
    return model


def _nbytes(shape, dtype) -> int:
    import tensorflow as tf

    dims = list(shape)
    if any(d is None for d in dims):
        return 0
    return int(math.prod(int(d) for d in dims)) * tf.as_dtype(dtype).size


def _check_layer(op: Any) -> None:
    for attr in ("kernel_regularizer", "bias_regularizer", "activity_regularizer", "depthwise_regularizer",
                 "pointwise_regularizer", "beta_regularizer", "gamma_regularizer"):
        if getattr(op, attr, None) is not None:
            raise UnsupportedModelError(
                f"layer {op.name!r} has a {attr}: regularization losses are not part of the rematerialized "
                "step; add the penalty to the loss instead")
    if getattr(op, "stateful", False):
        raise UnsupportedModelError(f"layer {op.name!r} is stateful (carries state across batches)")


def _calls(functional: Any) -> tuple[list[Call], list[tuple]]:
    """The calls of a functional model in Keras execution order, and the flat model outputs."""
    input_ref = {id(t): ("input", j) for j, t in enumerate(functional.inputs)}
    produced: dict[int, tuple] = dict(input_ref)
    trainable = functional.trainable_variables
    var_pos = {id(v): i for i, v in enumerate(trainable)}
    times_called: dict[int, int] = {}
    nodes = []
    for depth in sorted(functional._nodes_by_depth, reverse=True):
        for node in functional._nodes_by_depth[depth]:
            if node.operation is None or node.is_input:
                continue
            nodes.append(node)
            times_called[id(node.operation)] = times_called.get(id(node.operation), 0) + 1
    calls: list[Call] = []
    seen_calls: dict[int, int] = {}
    for node in nodes:
        op = node.operation
        _check_layer(op)
        k = seen_calls.get(id(op), 0)
        seen_calls[id(op)] = k + 1
        name = op.name if times_called[id(op)] == 1 else f"{op.name}@{k}"
        inputs, input_ids = [], []
        for t in node.input_tensors:
            if id(t) in input_ids:
                continue
            if id(t) not in produced:
                raise UnsupportedModelError(f"layer {name!r} reads a tensor that no earlier layer produced")
            inputs.append(produced[id(t)])
            input_ids.append(id(t))
        c = len(calls)
        outs = list(node.outputs)
        for o, t in enumerate(outs):
            produced[id(t)] = ("call", c, o)
        own_vars = getattr(op, "trainable_variables", []) if hasattr(op, "weights") else []
        state_vars = [v for v in getattr(op, "variables", []) if id(v) not in var_pos] if hasattr(op, "weights") else []
        missing = [v.path for v in own_vars if id(v) not in var_pos]
        if missing:
            raise UnsupportedModelError(f"layer {name!r} has trainable weights outside the model: {missing}")
        calls.append(Call(
            index=c, name=name, operation=op, node=node, inputs=inputs, input_ids=input_ids, n_outputs=len(outs),
            variables=[var_pos[id(v)] for v in own_vars], state_variables=state_vars,
            training_arg=bool(getattr(op, "_call_has_training_arg", False)),
        ))
    outputs = []
    for t in functional.outputs:
        ref = produced.get(id(t))
        if ref is None or ref[0] != "call":
            raise UnsupportedModelError(f"model output {t.name!r} is a model input; it has no layer")
        outputs.append((ref[1], ref[2]))
    for call in calls:
        for ref in call.inputs:
            if ref[0] == "call" and ref[1] not in call.producers:
                call.producers.append(ref[1])
    for call in calls:
        for p in call.producers:
            calls[p].users.append(call.index)
        call.needs_grad = bool(call.variables) or any(calls[p].needs_grad for p in call.producers)
        call.grad_inputs = [i for i, ref in enumerate(call.inputs) if ref[0] == "call" and calls[ref[1]].needs_grad]
    return calls, outputs


def _skeleton_deps(calls: list[Call], outputs: list[tuple]) -> tuple[list[list[int]], list[str], dict[int, int]]:
    m = len(calls)
    deps: list[list[int]] = [list(c.producers) for c in calls]
    names = [c.name for c in calls]
    # the loss reads the outputs, and a softmax output's logits (the output layer's input, at most)
    deps.append(sorted({c for c, _ in outputs} | {p for c, _ in outputs for p in calls[c].producers}))
    names.append("loss")
    backward_index: dict[int, int] = {}
    out_calls = {c for c, _ in outputs}
    for call in reversed(calls):
        if not call.needs_grad:
            continue
        backward_index[call.index] = len(names)
        d = {call.index, *call.producers}
        d.update(backward_index[u] for u in call.users if calls[u].needs_grad)
        if call.index in out_calls:
            d.add(m)
        deps.append(sorted(d))
        names.append(f"grad/{call.name}")
    return deps, names, backward_index


def _flat(x: Any, what: str) -> list:
    import tensorflow as tf
    from keras import tree

    flat = tree.flatten(x)
    out = []
    for i, v in enumerate(flat):
        if v is None:
            raise ValueError(f"`{what}` has a None at position {i}")
        out.append(tf.convert_to_tensor(v))
    return out


def extract_graph(model: Any, example_inputs: Any, example_targets: Any, loss: Any,
                  cost_model: str = "flops", warmup: int = 2, repeats: int = 5,
                  kernel_scratch: Any = "auto") -> ExtractedGraph:
    """The layer-level training graph of a Keras model (see the module docstring).

    Parameters
    ----------
    model : keras.Model
        Functional or ``Sequential`` (with a known input shape), built.
    example_inputs, example_targets : tensor or nested structure of tensors
        One batch as training will feed it; the graph is specialized to its shapes.
    loss : str, callable or keras.losses.Loss
        The training loss, as ``model.compile(loss=...)`` takes it.
    cost_model : {"flops", "profile", "unit"}
        FLOPs (multiply-accumulate = 1; backward = 2 x forward), measured
        wall-clock seconds (``warmup`` untimed then the median of ``repeats``
        timed runs per node), or 1 per node.
    kernel_scratch : "auto" or dict
        Scratch bytes of the kernels, counted in the workspace of the node
        running them. ``"auto"``: measured per op signature on the device in
        use (``remat_tf.memory.measure_scratch``); where the allocator
        keeps no statistics, :data:`CPU_KERNEL_SCRATCH_BYTES` on CPU and none
        on a GPU. A dict gives bytes per TensorFlow op type instead.

    Returns
    -------
    ExtractedGraph

    Raises
    ------
    UnsupportedModelError
        For a subclassed model without a functional graph, a regularized or
        stateful layer (the message names the layer).
    ValueError
        On a bad ``cost_model``, inputs of the wrong arity or a None in them.

    Examples
    --------
    >>> import keras, numpy as np
    >>> from remat_tf import extract_graph
    >>> net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="a"), keras.layers.Dense(2, name="b")])
    >>> eg = extract_graph(net, np.ones((3, 4), "float32"), np.ones((3, 2), "float32"), loss="mse")
    >>> eg.graph.names
    ('a', 'b', 'loss', 'grad/b', 'grad/a')
    """
    import keras

    if cost_model not in COST_MODELS:
        raise ValueError(f"`cost_model` must be one of {COST_MODELS}; got {cost_model!r}")
    functional = functional_of(model)
    loss_fn = loss_object(loss)
    xs = _flat(example_inputs, "example_inputs")
    ys = _flat(example_targets, "example_targets")
    if len(xs) != len(functional.inputs):
        raise ValueError(f"`example_inputs` must hold {len(functional.inputs)} tensors (the model's inputs); "
                         f"got {len(xs)}")
    calls, outputs = _calls(functional)
    if not calls:
        raise UnsupportedModelError(f"model {model.name!r} has no layers")
    deps, names, backward_index = _skeleton_deps(calls, outputs)
    skeleton = Graph.from_arrays(deps, names=names, is_backward=[k > len(calls) for k in range(len(names))])
    eg = ExtractedGraph(
        graph=skeleton, calls=calls, model=model, functional=functional, loss_fn=loss_fn, loss_index=len(calls),
        backward_index=backward_index, outputs=outputs, variables=list(functional.trainable_variables),
        input_specs=[(tuple(x.shape), x.dtype) for x in xs], target_specs=[(tuple(y.shape), y.dtype) for y in ys],
        loss_spec=loss,
    )
    if not (kernel_scratch == "auto" or kernel_scratch is None or isinstance(kernel_scratch, dict)):
        raise ValueError(f"`kernel_scratch` must be 'auto' or a dict of bytes per op type; got {kernel_scratch!r}")
    sizes = _measure_sizes(eg, xs, ys, kernel_scratch)
    if cost_model == "flops":
        cost = _flop_costs(eg)
    elif cost_model == "profile":
        from .profile import profile_costs

        cost = profile_costs(eg, xs, ys, warmup=warmup, repeats=repeats)
    else:
        cost = np.ones(len(names))
    weights = sum(_nbytes(v.shape, v.dtype) for v in functional.weights)
    grads = sum(_nbytes(v.shape, v.dtype) for v in functional.trainable_variables)
    batch = sum(_nbytes(x.shape, x.dtype) for x in xs + ys)
    eg.graph = Graph.from_arrays(
        deps, names=names, cost=cost, memory_bytes=sizes["memory"], workspace_bytes=sizes["workspace"],
        is_backward=[k > len(calls) for k in range(len(names))], fixed_bytes=weights + batch,
        name=f"{model.name}-b{int(xs[0].shape[0]) if xs[0].shape.rank else 1}",
        meta={"kind": "training", "framework": f"keras {keras.__version__}", "cost_unit":
              {"flops": "flop", "profile": "s", "unit": "unit"}[cost_model], "n_forward": len(calls),
              "loss": len(calls), "residual_bytes": [int(r) for r in sizes["residual"]],
              "weight_bytes": int(weights), "weight_grad_bytes": int(grads), "batch_bytes": int(batch)},
    )
    eg.__post_init__()
    return eg


def loss_object(loss: Any) -> Any:
    """A ``keras.losses.Loss`` for ``loss`` (a name, a function of ``(y_true, y_pred)`` or a Loss)."""
    import keras

    if loss is None:
        raise ValueError("`loss` is required (a name such as 'mse', a function of (y_true, y_pred) or a "
                         "keras.losses.Loss)")
    if isinstance(loss, keras.losses.Loss):
        return loss
    fn = keras.losses.get(loss) if isinstance(loss, str) else loss
    if isinstance(fn, keras.losses.Loss):
        return fn
    if not callable(fn):
        raise ValueError(f"`loss` must be a loss name, a function or a keras.losses.Loss; got {loss!r}")
    from keras.src.losses.losses import LossFunctionWrapper

    return LossFunctionWrapper(fn, name=getattr(fn, "__name__", None))


def _scratch_of(ops: list, kernel_scratch: Any) -> dict[str, int]:
    """Scratch bytes per op name: measured (``"auto"``, see :mod:`remat_tf.memory`) or from a per-type dict."""
    import tensorflow as tf

    from .memory import measure_scratch

    if kernel_scratch == "auto":
        measured = measure_scratch(ops)
        if measured is not None:
            return measured
        kernel_scratch = {} if tf.config.list_logical_devices("GPU") else CPU_KERNEL_SCRATCH_BYTES
    per_type = dict(kernel_scratch or {})
    return {op.name: int(per_type[op.type]) for op in ops if op.type in per_type}


def _measure_sizes(eg: ExtractedGraph, xs: list, ys: list, kernel_scratch: Any) -> dict[str, np.ndarray]:
    """Trace the checkpoint-all program once (no compute) and size every node from its ops."""
    import tensorflow as tf

    from remat_core import Schedule, make_plan

    from .execute import run_plan

    g = eg.graph
    plan = make_plan(g, Schedule.checkpoint_all(g))
    ranges: dict[int, tuple[int, int]] = {}
    values: dict[int, list] = {}

    fixed: dict[int, list] = {}

    def record(node, start, stop, value_tensors, fixed_tensors):
        ranges[node] = (start, stop)
        values[node] = value_tensors
        fixed[node] = fixed_tensors

    def program(*args):
        run_plan(eg, plan, list(args[:len(xs)]), list(args[len(xs):]), record=record)
        return tf.constant(0.0)

    specs = [tf.TensorSpec(x.shape, x.dtype) for x in xs + ys]
    graph = tf.function(program, autograph=False).get_concrete_function(*specs).graph
    ops = graph.get_operations()
    owner = {}
    for node, (a, b) in ranges.items():
        for op in ops[a:b]:
            owner[op.name] = node
    n = g.n
    memory = np.zeros(n, dtype=np.int64)
    workspace = np.zeros(n, dtype=np.int64)
    residual = np.zeros(n, dtype=np.int64)
    created = np.zeros(n, dtype=np.int64)
    value_names = {k: {t.name for t in v} for k, v in values.items()}
    fixed_names = {t.name for v in fixed.values() for t in v}
    for k in range(n):
        memory[k] = sum(_nbytes(t.shape, t.dtype) for t in values.get(k, []))
    # residuals: tensors a forward node creates that its backward node reads
    residual_names: set = set()
    for c, b in eg.backward_index.items():
        start, stop = ranges[b]
        seen = set()
        for op in ops[start:stop]:
            for t in op.inputs:
                if owner.get(t.op.name) == c and t.name not in value_names[c] and t.name not in seen \
                        and t.op.type not in _FIXED_OPS:
                    seen.add(t.name)
                    residual_names.add(t.name)
                    residual[c] += _nbytes(t.shape, t.dtype)
    kept = {t for v in value_names.values() for t in v} | fixed_names | residual_names
    scratch = _scratch_of(ops, kernel_scratch)
    for k, (start, stop) in ranges.items():
        created[k] = _transient_peak(ops[start:stop], kept, scratch)
    for c in range(eg.n_forward):
        memory[c] += residual[c]
        workspace[c] = created[c]
    for c, b in eg.backward_index.items():
        # the gradient's temporaries; when the plan recomputed an input after this layer's output, the
        # executor re-runs the layer's forward first and its outputs stay live through the gradient
        workspace[b] = memory[c] + max(created[c], created[b])
        # the weight gradients it takes live until the update right after it (a shared layer's partial sums
        # between its calls are not counted)
        workspace[b] += sum(_nbytes(t.shape, t.dtype) for t in fixed.get(b, []))
    workspace[eg.loss_index] = created[eg.loss_index]
    return {"memory": memory, "workspace": workspace, "residual": residual[:eg.n_forward]}


def _transient_peak(ops: list, kept: set, scratch: dict) -> int:
    """Peak bytes of the temporaries among ``ops`` run in creation order.

    A tensor created by one of ``ops`` is live from its op until the last of
    ``ops`` that reads it; tensors named in ``kept`` (node values, residuals,
    weight gradients: counted elsewhere) and fixed ones are left out. An op
    named in ``scratch`` adds that many bytes while it runs (a kernel's
    working buffer is freed when it returns; measured: two 32 MiB backprops
    of one node did not overlap).
    """
    import tensorflow as tf

    last: dict[str, int] = {}
    for i, op in enumerate(ops):
        for t in op.inputs:
            last[t.name] = i
    live: dict[str, int] = {}
    current = peak = 0
    for i, op in enumerate(ops):
        if op.type not in _FIXED_OPS:
            for t in op.outputs:
                if t.name not in kept and t.dtype != tf.resource:
                    nb = _nbytes(t.shape, t.dtype)
                    live[t.name] = nb
                    current += nb
        peak = max(peak, current + scratch.get(op.name, 0))
        for name in [n for n in live if last.get(n, i) <= i]:
            current -= live.pop(name)
    return int(peak)


def _flop_costs(eg: ExtractedGraph) -> np.ndarray:
    """FLOPs of every node: the zoo's per-layer rule times the batch; backward = 2 x forward."""
    from .extract import _layer_flops

    n = eg.graph.n
    cost = np.zeros(n)
    batch = int(eg.input_specs[0][0][0]) if eg.input_specs[0][0] else 1
    out_elems = 0
    for call in eg.calls:
        node = call.node
        in_shapes = [tuple(t.shape) for t in node.input_tensors]
        shapes = [tuple(t.shape) for t in node.outputs]
        try:
            flops = _layer_flops(call.operation, in_shapes or shapes, shapes[0])
        except (ValueError, TypeError, AttributeError):
            flops = sum(int(math.prod(d or 1 for d in s[1:])) for s in shapes)
        cost[call.index] = float(flops) * batch
    for c, o in eg.outputs:
        out_elems += int(math.prod(d or 1 for d in eg.calls[c].node.outputs[o].shape[1:]))
    cost[eg.loss_index] = float(out_elems * batch)
    for c, b in eg.backward_index.items():
        cost[b] = 2.0 * cost[c]
    return cost
