"""The user-facing API: :func:`rematerialize` and :class:`RematModel`."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import keras

from remat_core import make_plan, solve
from remat_core.errors import BudgetInfeasibleError, RematError
from remat_core.solvers import available_methods
from remat_core.units import budget_fraction, format_bytes, min_budget_bytes, resolve_budget

from .execute import apply_updates, executed_peak_bytes, order_writes_after_reads, run_plan
from .graph import ExtractedGraph, _flat, extract_graph

__all__ = ["rematerialize", "RematModel", "Specialization", "AUTO_FALLBACK_TIME_LIMIT_S"]

log = logging.getLogger(__name__)

# method="auto" before remat_core has it: the MILP under this time limit
AUTO_FALLBACK_TIME_LIMIT_S = 60.0


@dataclass
class Specialization:
    """The plan of one batch shape (inputs and targets) and the step functions traced for it."""

    eg: ExtractedGraph
    result: Any
    plan: Any
    train_fn: Any = None
    grad_fn: Any = None
    train_spec: Any = None  # the TensorSpecs train_fn was traced for

    budget_bytes = property(lambda self: int(self.result.budget_bytes))
    predicted_peak_bytes = property(lambda self: _predicted(self.result))

    def replayed_peak_bytes(self) -> int | None:
        """Peak of the traced training step (optimizer included), replayed op by op over its graph.

        Weights and the batch (``eg.graph.fixed_bytes``) plus the peak of
        :func:`remat_tf.memory.replay_peak_bytes` over the ``tf.function``
        that ``fit`` runs for this shape, with kernel scratch measured per op
        signature. ``None`` until a step of this shape has been traced.
        """
        if self.train_fn is None or self.train_spec is None:
            return None
        from .memory import measure_scratch, replay_peak_bytes

        graph = self.train_fn.get_concrete_function(self.train_spec).graph
        scratch = measure_scratch(graph.get_operations()) or {}
        return int(self.eg.graph.fixed_bytes) + replay_peak_bytes(graph, scratch)


def _predicted(result) -> int:
    return int(max(result.peak_memory_bytes, result.stats.get("executed_peak_bytes", 0)))


def _key(xs: list, ys: list) -> tuple:
    return (tuple((tuple(t.shape), t.dtype.name) for t in xs), tuple((tuple(t.shape), t.dtype.name) for t in ys))


def _key_of_specs(eg: ExtractedGraph) -> tuple:
    import tensorflow as tf

    return (tuple((tuple(s), tf.as_dtype(d).name) for s, d in eg.input_specs),
            tuple((tuple(s), tf.as_dtype(d).name) for s, d in eg.target_specs))


def _describe(key: tuple) -> str:
    return "inputs " + ", ".join(str(s) for s, _ in key[0]) + " and targets " + ", ".join(str(s) for s, _ in key[1])


class RematModel(keras.Model):
    """A ``keras.Model`` whose training step follows a rematerialization plan.

    ``compile`` and ``fit`` work as for the wrapped model; ``train_step`` runs
    the plan (layer by layer inside a ``tf.function``) and the optimizer, and
    updates BatchNorm statistics once. ``predict``, ``evaluate`` and
    ``__call__`` run the wrapped model unchanged.

    A plan is specialized to a batch shape. ``fit``, ``train_on_batch`` and
    :meth:`compute_gradients` look at each batch before it runs: a shape seen
    for the first time (another batch size, the last partial batch of an
    epoch) is extracted and solved with the same ``budget`` (a fraction of
    activation memory is resolved for that shape, a byte count stays the same),
    and gets its own traced step; up to ``max_plans`` shapes are kept (least
    recently used first out). A shape no plan fits is refused with
    :class:`remat_core.errors.BudgetInfeasibleError` at every call; a fraction that a smaller
    batch cannot meet is planned at that batch's smallest feasible budget
    (with a warning) when that is within the first plan's budget bytes. Each
    step is traced for one fully known shape, so Keras never runs a plan on
    a batch it was not made for.

    Attributes
    ----------
    inner : keras.Model
        The wrapped model; its weights are this model's weights.
    extracted : ExtractedGraph
    result : remat_core.RematResult
    plan : remat_core.ExecutionPlan
    budget_bytes, predicted_peak_bytes : int
        Of the first plan (the example batch's shape); see :meth:`specialization` for the others.
    """

    def __init__(self, extracted: ExtractedGraph, result, plan, settings: dict | None = None, **kwargs):
        super().__init__(name=kwargs.pop("name", f"remat_{extracted.model.name}"), **kwargs)
        self.inner = extracted.model
        first = Specialization(extracted, result, plan)
        self._remat = {"eg": extracted, "result": result, "plan": plan, "settings": dict(settings or {}),
                       "plans": OrderedDict([(_key_of_specs(extracted), first)]), "refused": OrderedDict()}
        self.built = True

    extracted = property(lambda self: self._remat["eg"])
    result = property(lambda self: self._remat["result"])
    plan = property(lambda self: self._remat["plan"])
    budget_bytes = property(lambda self: int(self._remat["result"].budget_bytes))
    predicted_peak_bytes = property(lambda self: _predicted(self._remat["result"]),
                                    doc="Peak of the executed step: the simulator's, plus weight gradients held "
                                        "until a later read of their weights (remat_tf.execute.executed_peak_bytes).")
    run_info = property(lambda self: self._remat.get("info"), doc="RunInfo of the last traced step (or None).")
    replayed_peak_bytes = property(
        lambda self: self._remat["plans"][_key_of_specs(self._remat["eg"])].replayed_peak_bytes()
        if _key_of_specs(self._remat["eg"]) in self._remat["plans"] else None,
        doc="Peak of the first plan's traced training step replayed op by op over its graph (optimizer included; "
            "see Specialization.replayed_peak_bytes), or None before fit or train_on_batch traced it.")
    plans = property(lambda self: dict(self._remat["plans"]),
                     doc="The cached specializations: ``(input shapes/dtypes, target shapes/dtypes) -> Specialization``.")

    @classmethod
    def from_extracted(cls, eg: ExtractedGraph, budget: Any = 1.0, method: str = "auto", hoist: bool = True,
                       solver_options: dict | None = None, max_plans: int = 8) -> "RematModel":
        """Solve for a plan on an already extracted graph (see :func:`rematerialize` for the arguments).

        Extract once, then try several budgets or methods without tracing the model again.
        """
        if not isinstance(method, str):
            raise TypeError(f"`method` must be a string; got {method!r}")
        if isinstance(max_plans, bool) or not isinstance(max_plans, int) or max_plans < 1:
            raise ValueError(f"`max_plans` must be a positive integer; got {max_plans!r}")
        result, plan = _solve_plan(eg, resolve_budget(eg.graph, budget), method, hoist, solver_options)
        settings = {"budget": budget, "method": method, "hoist": hoist, "solver_options": dict(solver_options or {}),
                    "max_plans": max_plans,
                    "cost_model": {"flop": "flops", "s": "profile", "unit": "unit"}.get(eg.graph.meta.get("cost_unit"),
                                                                                         "flops")}
        return cls(eg, result, plan, settings=settings)

    # Saving: a plan belongs to a model and its batch shapes, not to a file. What is saved (``save``, Keras'
    # ModelCheckpoint, ``save_weights``) is the wrapped model, so a file reloads as the plain Keras model with the
    # trained weights; ``load_weights`` loads such a file (or the plain model's) into the wrapped model.
    def save(self, filepath, *args, **kwargs):
        """Save the wrapped model (``self.inner``), which reloads as the plain Keras model with these weights."""
        return self.inner.save(filepath, *args, **kwargs)

    def save_weights(self, filepath, *args, **kwargs):
        """Save the wrapped model's weights: the plain model loads them."""
        return self.inner.save_weights(filepath, *args, **kwargs)

    def load_weights(self, filepath, *args, **kwargs):
        """Load weights saved from the wrapped model (or by :meth:`save_weights`) into it."""
        return self.inner.load_weights(filepath, *args, **kwargs)

    def call(self, inputs, training=None):
        return self.inner(inputs, training=training)

    def compile(self, optimizer="rmsprop", loss=None, **kwargs):
        """As ``keras.Model.compile``; ``loss`` defaults to (and must be) the loss given to :func:`rematerialize`."""
        eg = self.extracted
        if loss is not None and loss is not eg.loss_fn and loss != eg.loss_spec:
            raise ValueError(f"`loss` must be the loss the plan was made for ({eg.loss_spec!r}); got {loss!r} "
                             "(re-run rematerialize with the new loss)")
        if kwargs.get("jit_compile") not in (None, False, "auto"):
            raise ValueError("`jit_compile` must be False: XLA reorders the step and would not follow the plan")
        if kwargs.get("run_eagerly"):
            log.info("run_eagerly=True: the plan runs op by op in Python (slow, for debugging)")
        kwargs["jit_compile"] = False
        super().compile(optimizer=optimizer, loss=eg.loss_fn, **kwargs)

    def specialization(self, x, y, plan_new: bool = True) -> Specialization:
        """The plan this batch runs under (solved now if its shape is new and ``plan_new``).

        Raises
        ------
        RematError
            Wrong number of inputs or targets, or a shape that is not fully
            known (inside a trace Keras relaxed to an unknown batch size).
        BudgetInfeasibleError
            No plan fits the budget for this shape (raised again at every call).
        """
        import tensorflow as tf

        xs, ys = _flat(x, "x"), _flat(y, "y")
        eg = self.extracted
        for what, got, want in (("inputs", xs, eg.input_specs), ("targets", ys, eg.target_specs)):
            if len(got) != len(want):
                raise RematError(f"the plan was made for {len(want)} {what}; got {len(got)}")
        if not all(t.shape.is_fully_defined() for t in xs + ys):
            raise RematError(
                f"a rematerialized step needs fully known shapes; got {[tuple(t.shape) for t in xs + ys]} (a plan is "
                "made per batch shape: fit, train_on_batch and compute_gradients trace one step per shape)")
        key = _key(xs, ys)
        plans, refused = self._remat["plans"], self._remat["refused"]
        if key in plans:
            plans.move_to_end(key)
            return plans[key]
        if key in refused:
            raise refused[key]
        if not plan_new or not tf.executing_eagerly():
            raise RematError(f"no plan for {_describe(key)} (shapes are planned before a step is traced: use fit, "
                             "train_on_batch or compute_gradients)")
        try:
            spec = self._plan_shape(xs, ys, key)
        except BudgetInfeasibleError as exc:
            refused[key] = exc
            while len(refused) > 64:
                refused.popitem(last=False)
            raise
        plans[key] = spec
        while len(plans) > self._remat["settings"].get("max_plans", 8):
            plans.popitem(last=False)
        return spec

    def _plan_shape(self, xs: list, ys: list, key: tuple) -> Specialization:
        st = self._remat["settings"]
        eg = extract_graph(self.inner, xs, ys, self.extracted.loss_spec, cost_model=st.get("cost_model", "flops"))
        budget = st.get("budget", 1.0)
        budget_bytes = resolve_budget(eg.graph, budget)
        log.info("new batch shape (%s): solving a plan at %s", _describe(key), format_bytes(budget_bytes))
        args = (st.get("method", "auto"), st.get("hoist", True), st.get("solver_options"))
        try:
            result, plan = _solve_plan(eg, budget_bytes, *args)
        except BudgetInfeasibleError as exc:
            # a fraction weighs the always-resident part more in a small (last) batch: plan it at its own smallest
            # budget as long as that stays within the first plan's bytes, which the user accepted
            lower = int(exc.min_budget_bytes or 0)
            if not isinstance(budget, float) or not lower or lower > self.budget_bytes:
                raise BudgetInfeasibleError(f"batch of {_describe(key)} refused: {exc}", exc.result,
                                            budget_bytes=exc.budget_bytes, min_budget_bytes=exc.min_budget_bytes,
                                            culprit=exc.culprit) from None
            log.warning("no plan for %s at %.3f of its activation memory; planned at its smallest feasible budget "
                        "%s, within the first plan's %s", _describe(key), budget, format_bytes(lower),
                        format_bytes(self.budget_bytes))
            best = getattr(exc, "best_plan", None)
            if best is not None and int(best[0].budget_bytes) == lower:
                result, plan = best   # the plan found over `budget` needs exactly `lower`: solving again there
                # could find another plan, over `lower` again (NASNetMobile's last batch of 1 was refused so)
            else:
                result, plan = _solve_plan(eg, lower, *args)
        return Specialization(eg, result, plan)

    def _step(self, x, y):
        spec = self.specialization(x, y, plan_new=False)
        r = run_plan(spec.eg, spec.plan, _flat(x, "x"), _flat(y, "y"))
        self._remat["info"] = r.info
        return r, spec

    def make_train_function(self, force=False):
        """A train function that plans each new batch shape and runs a step traced for exactly that shape.

        Keras's own traces relax to an unknown batch size after a few shapes,
        and a plan cannot be chosen for a batch of unknown size; here every
        batch is looked at eagerly before its (cached) traced step runs.
        """
        if self.train_function is not None and not force:
            return self.train_function
        import tensorflow as tf
        from keras import tree

        # a traced step holds the optimizer and metrics of the compile it was traced under: drop them all
        for spec in self._remat["plans"].values():
            spec.train_fn = None
        from keras.src.trainers.data_adapters.data_adapter_utils import unpack_x_y_sample_weight

        def one_step(data):
            data = tree.map_structure(lambda t: t if t is None else tf.convert_to_tensor(t), data)
            x, y, _ = unpack_x_y_sample_weight(data)
            spec = self.specialization(x, y)
            if self.run_eagerly:
                return self.train_step(data)
            if spec.train_fn is None:
                spec.train_fn = tf.function(self.train_step, autograph=False, jit_compile=False)
                spec.train_spec = tree.map_structure(lambda t: t if t is None else tf.TensorSpec.from_tensor(t), data)
            return spec.train_fn(data)

        def function(iterator):
            outputs = None
            for _ in range(self.steps_per_execution):
                if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
                    nxt = iterator.get_next_as_optional()
                    if not nxt.has_value():
                        break
                    data = nxt.get_value()
                else:
                    try:
                        data = next(iterator)
                    except StopIteration:
                        break
                outputs = one_step(data)
            if outputs is None:
                raise StopIteration
            return outputs

        self.train_function = function
        return function

    def train_step(self, data):
        import tensorflow as tf
        from keras import tree
        from keras.src.trainers.data_adapters.data_adapter_utils import unpack_x_y_sample_weight

        x, y, sample_weight = unpack_x_y_sample_weight(data)
        if sample_weight is not None:
            raise RematError("`sample_weight` is not supported by the rematerialized training step (nor "
                             "`class_weight`, which Keras turns into sample weights); weight the loss instead")
        graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        r, spec = self._step(x, y)
        self._loss_tracker.update_state(r.loss, sample_weight=tf.shape(_flat(x, "x")[0])[0])
        eg = spec.eg
        if graph is None:
            # eagerly every op of the step has run already
            self.optimizer.apply_gradients(zip(r.grads, eg.variables))
            apply_updates(r.updates)
        else:
            # a variable changes only after every read of it in the step ran, and each variable as soon as
            # that holds (see order_writes_after_reads: a whole-step barrier kept every gradient alive)
            mid = len(graph.get_operations())
            self.optimizer.apply_gradients(zip(r.grads, eg.variables))
            apply_updates(r.updates)
            order_writes_after_reads(r, graph.get_operations()[mid:])
        y_pred = tree.pack_sequence_as(eg.functional._outputs_struct, r.y_pred)
        return self.compute_metrics(x, y, y_pred, sample_weight=None)

    def compute_gradients(self, x, y):
        """Loss and weight gradients of one batch under the plan for its shape: ``(loss, grads)``.

        ``grads`` follows ``self.trainable_variables``. Like a training step,
        it updates non-trainable state (BatchNorm statistics, dropout seeds) once.
        A new batch shape is planned first (see the class docstring).

        Examples
        --------
        >>> loss, grads = rm.compute_gradients(x, y)                            # doctest: +SKIP
        >>> optimizer.apply_gradients(zip(grads, rm.trainable_variables))       # doctest: +SKIP
        """
        import tensorflow as tf
        from keras import tree

        x = tree.map_structure(tf.convert_to_tensor, x)
        y = tree.map_structure(tf.convert_to_tensor, y)
        spec = self.specialization(x, y)
        if spec.grad_fn is None:
            def fn(x, y):
                graph = tf.compat.v1.get_default_graph()
                r, _ = self._step(x, y)
                mid = len(graph.get_operations())
                apply_updates(r.updates)
                order_writes_after_reads(r, graph.get_operations()[mid:])
                return r.loss, r.grads

            spec.grad_fn = tf.function(fn, autograph=False, jit_compile=False)
        return spec.grad_fn(x, y)


def _solve_plan(eg: ExtractedGraph, budget_bytes: int, method: str, hoist: bool, solver_options: dict | None):
    """``(result, plan)`` for ``eg`` within ``budget_bytes``, or :class:`BudgetInfeasibleError`."""
    graph = eg.graph
    options = dict(solver_options or {})
    if method == "auto" and "auto" not in available_methods():
        method = "ilp"
        options.setdefault("time_limit_s", AUTO_FALLBACK_TIME_LIMIT_S)
    lower, culprit = min_budget_bytes(graph)
    result = None
    over = 0
    best = None   # (executed peak, result, plan) of the plan found with the smallest executed peak
    if budget_bytes >= lower:
        # the step holds a weight gradient until the last statement reading its weights (executed_peak_bytes):
        # a plan over the budget with that counted is solved again on a budget lowered by the excess
        target = budget_bytes
        for _ in range(4):
            result = solve(graph, target, method=method, **options)
            if not result.success:
                break
            plan = make_plan(graph, result, hoist=hoist)   # its sequence where DTR recorded only the run
            peak = executed_peak_bytes(eg, plan)
            result.stats["executed_peak_bytes"] = peak
            if peak <= budget_bytes:
                if target != budget_bytes:
                    # solved on a lowered budget to leave room for what the step holds beyond the graph: the
                    # plan answers the user's budget (the lowered one is kept in stats)
                    result.stats["solved_budget_bytes"] = int(target)
                    result.budget_bytes = int(budget_bytes)
                log.info("plan for %s: %s, predicted peak %s of budget %s", graph.name, plan,
                         format_bytes(peak), format_bytes(budget_bytes))
                return result, plan
            if best is None or peak < best[0]:
                best = (peak, result, plan)
            over = peak - budget_bytes
            target -= over
            if target < lower:
                break
        if best is not None:
            # not a proven bound: the budget at which the best plan found fits
            over = best[0] - budget_bytes
            lower = max(lower, best[0])
        else:
            lower = max(lower, int(result.stats.get("min_budget_bytes", 0) or 0))
    layer = culprit[len("grad/"):] if culprit.startswith("grad/") else culprit
    names = [graph.node(k).name for k in range(graph.n)]
    scratch = int(graph.workspace_bytes[names.index(culprit)]) if culprit in names else 0
    # the scratch is what the kernel allocated when run alone (remat_tf.memory): on CPU, TensorFlow's Eigen
    # convolution backprops (float64, or oneDNN off) take a ~30 MiB working buffer whatever the layer's size
    why = (f"; its kernels take {format_bytes(scratch)} of scratch beyond their tensors (TensorFlow's Eigen "
           "convolution backprops, which CPU float64 uses, take up to ~32 MiB each whatever the layer's size)"
           if scratch >= (1 << 20) else "")
    status = result.status.value if result is not None else "infeasible"
    detail = f" ({result.message})" if result is not None and result.message else ""
    if over:
        status, detail = "over budget", (f" (the best plan found needs {format_bytes(budget_bytes + over)} with the "
                                         "weight gradients the step holds until their weights' last read)")
    exc = BudgetInfeasibleError(
        f"method {method!r} found no plan for model {eg.model.name!r} within `budget` {format_bytes(budget_bytes)} "
        f"({budget_fraction(graph, budget_bytes):.3f} of activation memory): {status}{detail}. The smallest "
        f"feasible budget is at least {format_bytes(lower)} ({budget_fraction(graph, lower):.3f} of activation "
        f"memory), set by layer {layer!r} (node {culprit!r}){why}",
        result, budget_bytes=budget_bytes, min_budget_bytes=lower, culprit=layer)
    if best is not None:
        # the plan that needs `min_budget_bytes`: a caller that accepts that budget takes it without solving again
        # (a new solve there may find another plan, over it again)
        peak, res, plan = best
        res.budget_bytes = int(peak)
        exc.best_plan = (res, plan)
    raise exc


def rematerialize(
    model: Any,
    example_inputs: Any,
    example_targets: Any,
    loss: Any,
    budget: Any = 1.0,
    method: str = "auto",
    cost_model: str = "flops",
    hoist: bool = True,
    solver_options: dict | None = None,
    max_plans: int = 8,
) -> RematModel:
    """Make a Keras model train inside a memory budget.

    Parameters
    ----------
    model : keras.Model
        Functional or ``Sequential`` (with a known input shape).
    example_inputs, example_targets : tensor or structure of tensors
        One batch as training feeds it; the plan is specialized to its shapes.
    loss : str, callable or keras.losses.Loss
        The training loss (as ``compile(loss=...)`` takes it).
    budget : int, str or float
        Total device bytes (an ``int`` or a size such as ``"2GiB"``, weights,
        gradients and the batch included), or a fraction in ``[0, 1]`` of
        activation memory (see :func:`remat_core.units.resolve_budget`).
    method : str
        A method of :func:`remat_core.available_methods`; ``"auto"`` (default)
        picks one (where remat_core has no ``"auto"``, the MILP ``"ilp"``
        with a ``time_limit_s`` of :data:`AUTO_FALLBACK_TIME_LIMIT_S`).
    cost_model : {"flops", "profile", "unit"}
        See :func:`remat_tf.extract_graph`.
    hoist : bool
        Free every value right after its last use (default).
    solver_options : dict, optional
        Passed to :func:`remat_core.solve` (for example ``{"time_limit_s": 30}``).
    max_plans : int
        Batch shapes whose plans (and traced steps) are kept; each new shape
        is planned on first sight (see :class:`RematModel`).

    Returns
    -------
    RematModel

    Raises
    ------
    BudgetInfeasibleError
        If no plan fits the budget; the message gives the smallest feasible
        budget known (bytes and fraction of activation memory) and the layer
        that sets it.
    UnsupportedModelError
        If the model cannot be extracted (the message names the layer).

    Examples
    --------
    >>> import keras, numpy as np
    >>> import remat_tf
    >>> net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(2)])
    >>> x, y = np.ones((3, 4), "float32"), np.ones((3, 2), "float32")
    >>> rm = remat_tf.rematerialize(net, x, y, loss="mse", budget=1.0, method="checkpoint-all")
    >>> rm.compile(optimizer="sgd")
    >>> len(rm.fit(x, y, epochs=2, verbose=0).history["loss"])
    2
    """
    eg = extract_graph(model, example_inputs, example_targets, loss, cost_model=cost_model)
    return RematModel.from_extracted(eg, budget=budget, method=method, hoist=hoist, solver_options=solver_options,
                                     max_plans=max_plans)
