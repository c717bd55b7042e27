"""Run an execution plan on an extracted Keras graph: one training step, layer by layer.

:func:`run_plan` walks the plan's ``Compute``/``Free`` statements while a
``tf.function`` is being traced (or eagerly). Each ``Compute`` builds the ops
of one node under ``tf.control_dependencies`` on the previous node's values,
so the TensorFlow runtime runs the nodes in the plan's order (a node's weight
gradient may overlap the next node, which plain TensorFlow does too); a tensor's
buffer goes back to the allocator when its last reader has run, and the plan
puts no reader after the point where it frees a value, so the memory follows
the plan.

* A forward node calls the layer under its own ``tf.GradientTape`` and inside
  a ``keras.StatelessScope``: variable updates (BatchNorm moving statistics,
  the dropout seed generators) are collected instead of applied. The updates
  of a node's first computation are applied once, after the step; a
  recomputation reads the same variable values as the first computation
  (same dropout mask) and its updates are dropped.
* A backward node sums the gradient contributions of the layer's users (and
  the loss) and takes the vector-Jacobian product on the tape of the layer's
  output it reads. That tape's gradient reads the tensors the layer was
  computed from. When the plan recomputed one of them after the layer's output
  (it keeps the output across a recomputed input), reading the old one would
  keep it alive: the layer is traced again on the current inputs and its
  gradient ops are pointed at the kept output and residuals instead of the
  re-traced ones (:func:`_reuse_old_forward`), so the re-traced forward has no
  reader and the runtime prunes it. Where that is not possible (eager
  execution, a layer that traces differently) the forward really re-runs: the
  graph counts that in the backward node's workspace and
  :attr:`RunInfo.forward_reruns` counts it.
* Weight gradients are taken from a backward node's last computation only and
  summed over the calls of a shared layer, in the order of
  ``model.trainable_variables``; each variable is updated right after the
  last statement that reads it (:func:`order_writes_after_reads`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from remat_core import ExecutionPlan
from remat_core.plan import Compute

from .graph import ExtractedGraph, _nbytes

log = logging.getLogger(__name__)

__all__ = ["run_plan", "RunInfo", "StepResult", "order_writes_after_reads", "apply_updates", "executed_peak_bytes"]


@dataclass
class RunInfo:
    """What one trace of a plan did (counted while building the step's ops)."""

    compute_counts: list = field(default_factory=list)
    forward_reruns: int = 0
    rerun_calls: list = field(default_factory=list)
    # graph mode: the operations each Compute statement created, in plan order
    statement_ops: list = field(default_factory=list)
    # write op name -> the last plan statement it waits for (set by order_writes_after_reads)
    write_statements: dict = field(default_factory=dict)

    def executed_cost(self, graph) -> float:
        """Cost of the nodes the step ran, the layers re-run by backward nodes included."""
        return float(sum(graph.cost[k] * n for k, n in enumerate(self.compute_counts))
                     + sum(graph.cost[c] for c in self.rerun_calls))


@dataclass
class StepResult:
    """Tensors of one training step.

    Attributes
    ----------
    loss : tf.Tensor
    grads : list of tf.Tensor
        One per ``eg.variables`` entry (zeros where the loss does not depend on it).
    updates : list of (variable, tensor)
        Non-trainable variable updates of the step (apply with :func:`apply_updates`).
    y_pred : list of tf.Tensor
        The flat model outputs (from their first computation).
    info : RunInfo
    """

    loss: Any
    grads: list
    updates: list
    y_pred: list
    info: RunInfo


@dataclass
class _FwdValue:
    outs: list
    tape: Any
    xs: list
    source: tuple  # registers of the producer values it was computed from
    ops: list = field(default_factory=list)  # graph operations the forward created (graph mode)


def _ops_since(graph, start: int) -> list:
    return graph.get_operations()[start:] if graph is not None else []


def _reuse_old_forward(new_ops: list, old_ops: list, grad_ops: list) -> bool:
    """Point the gradient ops of a re-run forward at the kept forward's tensors; True if the re-run is dead.

    The re-run (same layer, same inputs' values, same variable state) creates
    the same operations as the kept forward. Its tensors that the gradient
    reads (the output, a mask, ...) are replaced by the kept instance's, which
    the plan holds; the layer's inputs stay the current ones. When no op but
    the re-run's own reads it afterwards, the runtime prunes the re-run and
    nothing is computed twice.
    """
    # a variable's first read in the function also creates its capture placeholder: not part of the layer
    new_ops = [op for op in new_ops if op.type != "Placeholder"]
    old_ops = [op for op in old_ops if op.type != "Placeholder"]
    if not new_ops or len(new_ops) != len(old_ops) or any(a.type != b.type for a, b in zip(new_ops, old_ops)):
        return False
    if any(len(a.outputs) != len(b.outputs) for a, b in zip(new_ops, old_ops)):
        return False
    twin = {}
    for a, b in zip(new_ops, old_ops):
        if a.type in ("ReadVariableOp", "Const"):
            continue
        for ta, tb in zip(a.outputs, b.outputs):
            twin[ta.name] = tb
    for op in grad_ops:
        for i, t in enumerate(op.inputs):
            if t.name in twin:
                op._update_input(i, twin[t.name])
    fresh = {op.name for op in new_ops}
    for op in new_ops:
        if op.type in ("ReadVariableOp", "Const"):
            continue
        if any(c.name not in fresh for t in op.outputs for c in t.consumers()):
            return False
        if any(c.name not in fresh for c in op._control_outputs):
            return False
    return True


# producers outside a node whose outputs are weights or constants, not activations
_WEIGHT_OPS = {"ReadVariableOp", "Const", "VarHandleOp"}


def _detach_sources(ops: list, prev_ops: set) -> None:
    """Drop the plan-order control inputs of ``ops`` that read no tensor (weight reads, constants).

    They hold no activation memory, so their order does not matter to the
    plan; and a control edge from the previous node's output into an op
    feeding the next layer becomes a cycle when TensorFlow's CPU (oneDNN)
    rewrite fuses that output's op with its consumer (``ZeroPadding2D`` then
    ``Conv2D``: the fused kernel would wait for its own weight read, which
    waits for the fused kernel: "nodes in a cycle"). Ops that read a tensor
    keep the control inputs that order the plan.
    """
    import tensorflow as tf

    for op in ops:
        if not op.control_inputs or any(t.dtype != tf.resource for t in op.inputs):
            continue
        keep = [c for c in op.control_inputs if c not in prev_ops]
        if len(keep) == len(op.control_inputs):
            continue
        op._remove_all_control_inputs()
        if keep:
            op._add_control_inputs(keep)
    # ``tf.control_dependencies`` gives no control input to an op that reads an op made in the same block (it
    # counts as ordered through it); when that op is a detached weight read or constant, the op (a BatchNorm's
    # moments reading an earlier node's output and a constant axis) could run before the previous node and
    # allocate early (measured: recomputed BatchNorm products alive 250 statements early on ResNet50). Every
    # op that reads an activation and is not ordered through another such op of this node waits for ``prev``.
    inside = {op.name for op in ops}
    weight_only: set = set()
    for op in ops:
        srcs = [t.op for t in op.inputs if t.dtype != tf.resource]
        if all(p.name in weight_only or (p.name not in inside and p.type in _WEIGHT_OPS) for p in srcs):
            weight_only.add(op.name)
            continue
        if any(p.name in inside and p.name not in weight_only for p in srcs):
            continue  # ordered through an activation op of this node
        need = [c for c in prev_ops if c not in srcs and c not in op.control_inputs]
        if need:
            op._add_control_inputs(need)


def _forward(eg: ExtractedGraph, c: int, xs: list, state: list):
    """Run call ``c`` on ``xs`` under a tape; returns (flat outputs, tape, collected variable updates)."""
    import keras
    import tensorflow as tf
    from keras import tree

    call = eg.calls[c]
    args, kwargs = call.node.arguments.fill_in(dict(zip(call.input_ids, xs)))
    if call.training_arg:
        kwargs["training"] = True
    with tf.GradientTape(persistent=True) as tape:
        for i in call.grad_inputs:
            tape.watch(xs[i])
        with keras.StatelessScope(state_mapping=state) as scope:
            out = call.operation(*args, **kwargs)
    updates = []
    for v in call.state_variables:
        new = scope.get_current_value(v)
        if new is not None:
            updates.append((v, new))
    return list(tree.flatten(out)), tape, updates


def _vjp(eg: ExtractedGraph, c: int, fv: _FwdValue, dys: list, extra: list = ()):
    """Gradients of call ``c`` w.r.t. its differentiable inputs and its weights.

    ``dys`` seeds the outputs; ``extra`` holds more ``(tensor, seed)`` pairs
    for tensors recorded on the call's tape (a softmax output's logits).
    """
    import tensorflow as tf

    call = eg.calls[c]
    targets, seeds = [], []
    for out, dy in [*zip(fv.outs, dys), *extra]:
        if dy is not None and out.dtype.is_floating:
            targets.append(out)
            seeds.append(dy)
    sources = [fv.xs[i] for i in call.grad_inputs] + [eg.variables[v] for v in call.variables]
    if not targets:
        grads = [tf.zeros_like(s) for s in sources]
    else:
        grads = fv.tape.gradient(targets, sources, output_gradients=seeds,
                                 unconnected_gradients=tf.UnconnectedGradients.ZERO)
    grads = [tf.convert_to_tensor(g) for g in grads]
    n = len(call.grad_inputs)
    return grads[:n], grads[n:]


def _sum(ts: list):
    import tensorflow as tf

    ts = [t for t in ts if t is not None]
    if not ts:
        return None
    return ts[0] if len(ts) == 1 else tf.add_n(ts)


def total_loss(eg: ExtractedGraph, flat_pred: list, targets: list):
    """The training loss as ``compile(loss=...)`` computes it.

    A loss given by name or as a ``keras.losses.Loss`` for a model with
    several outputs (and one target each) applies to every output and the
    values are summed in output order, as Keras's ``CompileLoss`` does
    (packing the outputs into one tensor fails when their shapes differ). A
    plain function receives the structures of targets and outputs.
    """
    import keras

    per_output = isinstance(eg.loss_spec, (str, keras.losses.Loss))
    if per_output and len(flat_pred) > 1 and len(targets) == len(flat_pred):
        values = [eg.loss_fn(t, p) for t, p in zip(targets, flat_pred)]
        return sum(values[1:], values[0])
    return eg.loss_fn(*loss_structs(eg, flat_pred, targets))


def loss_structs(eg: ExtractedGraph, flat_pred: list, targets: list) -> tuple:
    """``(y_true, y_pred)`` as the loss takes them: the model's output structure (a tensor for one output)."""
    from keras import tree

    struct = eg.functional._outputs_struct
    y_pred = tree.pack_sequence_as(struct, flat_pred)
    if len(targets) == 1:
        return targets[0], y_pred
    if len(targets) == len(flat_pred):
        return tree.pack_sequence_as(struct, targets), y_pred
    return list(targets), y_pred


def run_plan(eg: ExtractedGraph, plan: ExecutionPlan, inputs: list, targets: list,
             record: Callable | None = None) -> StepResult:
    """Build (in a ``tf.function``) or run (eagerly) one training step that follows ``plan``.

    Parameters
    ----------
    eg : ExtractedGraph
    plan : remat_core.ExecutionPlan
        A plan for ``eg.graph``.
    inputs, targets : list of tf.Tensor
        The flat model inputs and targets.
    record : callable, optional
        ``record(node, first_op, stop_op, value_tensors, fixed_tensors)`` after
        each computation, with the range of graph operations it created (used
        by :func:`remat_tf.graph.extract_graph` to size nodes).

    Returns
    -------
    StepResult
    """
    import tensorflow as tf
    from keras import tree

    if plan.num_nodes != eg.graph.n:
        raise ValueError(f"`plan` has {plan.num_nodes} nodes but the graph has {eg.graph.n}")
    graph = eg.graph
    deps = graph.deps
    calls = eg.calls
    loss_k = eg.loss_index
    out_calls = {c for c, _ in eg.outputs}
    regs: dict[int, Any] = {}
    state: dict[int, tuple] = {}  # id(variable) -> (variable, value) after the first computations so far
    pre_state: dict[int, list] = {}
    acc: list = [None] * len(eg.variables)
    info = RunInfo(compute_counts=[0] * graph.n)
    loss_value = None
    y_pred = None
    prev: list = []
    prev_fixed: list = []
    tf_graph = tf.compat.v1.get_default_graph() if record is not None else None
    graph_ops = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()

    def value_of(ref, dep_reg):
        if ref[0] == "input":
            return inputs[ref[1]]
        return regs[dep_reg[ref[1]]].outs[ref[2]]

    # a backward node's weight gradients are taken from its last computation: the update right after it can
    # then free them (a recomputation after the first would read the weights and keep them waiting)
    last_compute = {s.node: i for i, s in enumerate(plan.statements) if isinstance(s, Compute)}
    for si, s in enumerate(plan.statements):
        if not isinstance(s, Compute):
            regs.pop(s.register, None)
            continue
        k = s.node
        first = s.stage == k
        dep_reg = dict(zip(deps[k], s.inputs))
        start = len(tf_graph.get_operations()) if tf_graph is not None else 0
        node_start = len(graph_ops.get_operations()) if graph_ops is not None else 0
        fixed_out: list = []
        with tf.control_dependencies(prev):
            kind, c = eg.kind(k)
            if kind == "forward":
                call = calls[c]
                xs = [value_of(ref, dep_reg) for ref in call.inputs]
                if first:
                    pre_state[c] = list(state.values())
                op_start = len(graph_ops.get_operations()) if graph_ops is not None else 0
                outs, tape, updates = _forward(eg, c, xs, pre_state[c])
                if first:
                    for v, val in updates:
                        state[id(v)] = (v, val)
                source = tuple(dep_reg[p] for p in call.producers)
                regs[s.register] = _FwdValue(outs, tape, xs, source, _ops_since(graph_ops, op_start))
                value = outs
            elif kind == "loss":
                flat = [regs[dep_reg[oc]].outs[o] for oc, o in eg.outputs]
                # a softmax output carries its logits and Keras's cross-entropies read those: the loss
                # gradient then enters the output layer at its logits
                logits = [getattr(t, "_keras_logits", None) for t in flat]
                with tf.GradientTape() as tape:
                    for t in flat + [t for t in logits if t is not None]:
                        tape.watch(t)
                    loss = total_loss(eg, flat, targets)
                sources = flat + [t for t in logits if t is not None]
                grads = tape.gradient(loss, sources, unconnected_gradients=tf.UnconnectedGradients.ZERO)
                dys, dlogits = grads[:len(flat)], iter(grads[len(flat):])
                seeds: dict = {}
                for (oc, o), dy, lg in zip(eg.outputs, dys, logits):
                    seeds[("out", oc, o)] = dy if ("out", oc, o) not in seeds else seeds[("out", oc, o)] + dy
                    if lg is not None:
                        dl = next(dlogits)
                        seeds[("logits", oc, o)] = dl if ("logits", oc, o) not in seeds else \
                            seeds[("logits", oc, o)] + dl
                regs[s.register] = (loss, seeds)
                if first:
                    loss_value, y_pred = loss, flat
                dys = list(grads)
                value = [loss, *dys]
            else:
                call = calls[c]
                fv: _FwdValue = regs[dep_reg[c]]
                source = tuple(dep_reg[p] for p in call.producers)
                old = None
                if fv.source != source:
                    # the output's tape reads inputs the plan has recomputed since (reading the old ones would
                    # keep them alive): trace the layer again on the current inputs, then let its gradient read
                    # the kept forward's tensors where it can (see _reuse_old_forward)
                    old = fv
                    xs = [value_of(ref, dep_reg) for ref in call.inputs]
                    op_start = len(graph_ops.get_operations()) if graph_ops is not None else 0
                    outs, tape, _ = _forward(eg, c, xs, pre_state[c])
                    fv = _FwdValue(outs, tape, xs, source, _ops_since(graph_ops, op_start))
                    grad_start = len(graph_ops.get_operations()) if graph_ops is not None else 0
                dys, extra = [], []
                for o in range(call.n_outputs):
                    parts = [regs[dep_reg[eg.backward_index[u]]].get((c, o)) for u in call.users]
                    if c in out_calls:
                        seeds = regs[dep_reg[loss_k]][1]
                        parts.append(seeds.get(("out", c, o)))
                        if ("logits", c, o) in seeds:
                            extra.append((fv.outs[o]._keras_logits, seeds[("logits", c, o)]))
                    dys.append(_sum(parts))
                in_grads, w_grads = _vjp(eg, c, fv, dys, extra)
                if old is not None and not (graph_ops is not None and _reuse_old_forward(
                        fv.ops, old.ops, _ops_since(graph_ops, grad_start))):
                    info.forward_reruns += 1
                    info.rerun_calls.append(c)
                regs[s.register] = {(call.inputs[i][1], call.inputs[i][2]): g
                                    for i, g in zip(call.grad_inputs, in_grads)}
                if si == last_compute[k]:
                    for v, g in zip(call.variables, w_grads):
                        acc[v] = g if acc[v] is None else acc[v] + g
                    fixed_out = list(w_grads)
                value = list(in_grads)
        if graph_ops is not None and prev:
            _detach_sources(_ops_since(graph_ops, node_start), {t.op for t in prev})
        info.compute_counts[k] += 1
        if graph_ops is not None:
            info.statement_ops.append(_ops_since(graph_ops, node_start))
        # the next node waits for this node's values and the previous node's weight gradients, so that a
        # weight gradient (a filter backprop) may overlap one node but not run late
        prev = [t for t in value + prev_fixed if t is not None]
        prev_fixed = fixed_out
        if record is not None:
            record(k, start, len(tf_graph.get_operations()), value, fixed_out)
    grads = [g if g is not None else tf.zeros_like(v) for g, v in zip(acc, eg.variables)]
    return StepResult(loss=loss_value, grads=grads, updates=list(state.values()), y_pred=y_pred, info=info)


def _bypass_identity_n(ops: list) -> None:
    """Let the readers of each ``IdentityN`` among ``ops`` read its inputs instead.

    Keras's optimizer passes all gradients through one ``IdentityN`` (the
    gradient all-reduce of the default distribution strategy), which waits
    for every gradient, so none is freed before the last one exists. In plain
    ``fit`` Grappler's dependency optimizer bypasses it (measured: ResNet50
    32x32 batch 8, peak 47 MiB with it on, 108 MiB without); it does not in a
    planned step, so it is bypassed here. An output of ``IdentityN`` is its
    input, so this changes no value; its control inputs go to the readers.
    """
    for op in ops:
        if op.type != "IdentityN":
            continue
        for i, out in enumerate(op.outputs):
            for consumer in list(out.consumers()):
                for j, t in enumerate(consumer.inputs):
                    if t is out:
                        consumer._update_input(j, op.inputs[i])
                if op.control_inputs:
                    consumer._add_control_inputs([c for c in op.control_inputs if c not in consumer.control_inputs])


def order_writes_after_reads(r: StepResult, write_ops: list) -> int:
    """Order the variable writes built after a step (optimizer, state updates) into the step's plan.

    ``r`` is the step (graph mode: :attr:`RunInfo.statement_ops` holds its
    operations per plan statement), ``write_ops`` the operations built after
    it. A variable is known by its resource handle (a ``tf.function``
    captures each variable once). Every write op of a variable waits for the
    step's reads of that variable and for the ops that read those reads'
    values (so a read buffer is dropped before the write, and TensorFlow has
    no reason to copy the variable); and the plan statement after the last of
    those and of the write's own inputs from the step (its gradient) waits for
    the write. So each layer's weights are updated, and their gradient freed,
    right after the statement that finishes with them, as plain ``fit`` does
    (TensorFlow's executor otherwise runs such an update when its queue
    drains, at the end of the step: measured on ResNet50, every gradient
    alive at the end). A whole-step barrier (every write after every tensor
    the step returns) would keep every weight gradient alive to the end.
    Keras's ``IdentityN`` over all gradients is bypassed
    (:func:`_bypass_identity_n`). Returns the number of control edges added.
    """
    import tensorflow as tf

    _bypass_identity_n(write_ops)
    where: dict[str, int] = {}
    for i, ops in enumerate(r.info.statement_ops):
        for op in ops:
            where[op.name] = i
    holders: dict[str, list] = {}  # resource tensor name -> step ops that read it or hold a read of it
    for ops in r.info.statement_ops:
        for op in ops:
            res = [t for t in op.inputs if t.dtype == tf.resource]
            if not res:
                continue
            readers = [op] + [c for t in op.outputs for c in t.consumers() if c.name in where]
            for t in res:
                holders.setdefault(t.name, []).extend(readers)
    in_write = {op.name for op in write_ops}
    # the writes' own ops per variable: a read of an optimizer slot is ordered after the slot's update only by
    # the automatic control dependencies tf.function adds later, so the walk below follows them itself
    by_resource: dict[str, list] = {}
    for op in write_ops:
        for t in op.inputs:
            if t.dtype == tf.resource:
                by_resource.setdefault(t.name, []).append(op)
    added = 0
    gates: dict[int, list] = {}
    controlled = [any(op.control_inputs for op in ops) for ops in r.info.statement_ops]
    for op in write_ops:
        if op.type == "ReadVariableOp" or not any(t.dtype == tf.resource for t in op.inputs):
            continue
        need = list(dict.fromkeys(h for t in op.inputs if t.dtype == tf.resource for h in holders.get(t.name, [])
                                  if h is not op))
        have = set(op.control_inputs)
        new = [h for h in need if h not in have]
        if new:
            op._add_control_inputs(new)
            added += len(new)
        # the last statement this write waits for: its gating reads and its data inputs from the step
        last = max([where[h.name] for h in need] + [-1])
        stack, seen = [op], set()
        while stack:
            cur = stack.pop()
            same = [q for t in cur.inputs if t.dtype == tf.resource for q in by_resource.get(t.name, [])]
            for p in [t.op for t in cur.inputs] + list(cur.control_inputs) + same:
                if p.name in seen:
                    continue
                seen.add(p.name)
                if p.name in where:
                    last = max(last, where[p.name])
                elif p.name in in_write:
                    stack.append(p)
        r.info.write_statements[op.name] = last
        # the first statement after ``last`` with plan-order control inputs waits for the write: a statement
        # whose ops all read the previous statement's values has none (``tf.control_dependencies`` adds none to
        # such an op) and was left ungated, so its update ran whenever TensorFlow's queue got to it (measured on
        # ResNet50: a ReluGrad statement after a filter backprop; the replay then held every weight gradient to
        # the end). Gating such an op directly makes a cycle where Grappler fuses it with the read it waits for.
        gate = next((j for j in range(last + 1, len(r.info.statement_ops)) if controlled[j]), None)
        if last >= 0 and gate is not None:
            gates.setdefault(gate, []).append(op)
    gated = []
    for i, ws in gates.items():
        for op in r.info.statement_ops[i]:
            if op.control_inputs:
                new = [w for w in ws if w not in op.control_inputs]
                op._add_control_inputs(new)
                gated.append((op, new))
                added += len(new)
    all_ops = [op for ops in r.info.statement_ops for op in ops] + list(write_ops)
    if gated and _has_cycle(all_ops):
        # a dependency this walk did not foresee: keep the writes after the reads, drop the early updates
        log.warning("remat_tf: updating weights inside the step would make a cycle; they run at its end")
        for op, new in gated:
            keep = [c for c in op.control_inputs if c not in new]
            op._remove_all_control_inputs()
            if keep:
                op._add_control_inputs(keep)
        added -= sum(len(new) for _, new in gated)
    return added


def _has_cycle(ops: list) -> bool:
    """Whether ``ops`` depend on each other in a cycle, counting data and control inputs and, per variable,
    the program order that ``tf.function``'s automatic control dependencies will add."""
    import tensorflow as tf

    order = {op.name: i for i, op in enumerate(ops)}
    previous_on: dict[str, Any] = {}
    extra: dict[str, list] = {}
    for op in ops:
        for t in op.inputs:
            if t.dtype == tf.resource:
                if t.name in previous_on:
                    extra.setdefault(op.name, []).append(previous_on[t.name])
                previous_on[t.name] = op
    state: dict[str, int] = {}
    for root in ops:
        if root.name in state:
            continue
        stack = [(root, iter([t.op for t in root.inputs] + list(root.control_inputs) + extra.get(root.name, [])))]
        state[root.name] = 1
        while stack:
            op, it = stack[-1]
            for p in it:
                if p.name not in order:
                    continue
                st = state.get(p.name)
                if st == 1:
                    return True
                if st is None:
                    state[p.name] = 1
                    stack.append((p, iter([t.op for t in p.inputs] + list(p.control_inputs)
                                          + extra.get(p.name, []))))
                    break
            else:
                state[op.name] = 2
                stack.pop()
    return False


def apply_updates(updates: list) -> None:
    """Assign the collected non-trainable variable updates (once per step)."""
    for v, val in updates:
        v.assign(val)


def executed_peak_bytes(eg: ExtractedGraph, plan: ExecutionPlan) -> int:
    """The simulator's peak of ``plan`` plus the weight gradients the training step must hold longer.

    The step updates a variable (and frees its gradient) right after the
    last statement that reads it (:func:`order_writes_after_reads`). The
    graph counts a weight gradient only while its backward node runs; when
    the plan recomputes a forward node (or a backward node of another call
    of a shared layer) that reads the same weights after that, the gradient
    stays until then. This adds those gradients to every compute statement
    in between, on top of :func:`remat_core.plan.replay`'s memory.
    """
    import numpy as np

    from remat_core.plan import replay

    steps = replay(eg.graph, plan).step_memory_bytes.astype(np.int64).copy()
    computes = [s.node for s in plan.statements if isinstance(s, Compute)]
    reads: dict[int, list] = {}
    for i, k in enumerate(computes):
        kind, c = eg.kind(k)
        if kind != "loss":
            reads.setdefault(c, []).append((i, kind))
    for v, var in enumerate(eg.variables):
        calls = [c for c, call in enumerate(eg.calls) if v in call.variables]
        grad_at = max((i for c in calls for i, kind in reads.get(c, []) if kind == "backward"), default=-1)
        last_read = max((i for c in calls for i, _ in reads.get(c, [])), default=-1)
        if 0 <= grad_at < last_read:
            steps[grad_at + 1:last_read + 1] += _nbytes(var.shape, var.dtype)
    return int(steps.max()) if steps.size else int(eg.graph.fixed_bytes)
