"""The user-facing API: :func:`rematerialize` and :class:`RematModel`."""

from __future__ import annotations

import logging
from typing import Any

import keras

from remat_core import make_plan, solve
from remat_core.errors import BudgetInfeasibleError, RematError
from remat_core.solvers import available_methods
from remat_core.units import budget_fraction, format_bytes, min_budget_bytes, resolve_budget

from .execute import apply_updates, run_plan, step_barrier
from .graph import ExtractedGraph, _flat, extract_graph

__all__ = ["rematerialize", "RematModel", "AUTO_FALLBACK_TIME_LIMIT_S"]

log = logging.getLogger(__name__)

# method="auto" before remat_core has it: the MILP under this time limit
AUTO_FALLBACK_TIME_LIMIT_S = 60.0


class RematModel(keras.Model):
    """A ``keras.Model`` whose training step follows a rematerialization plan.

    ``compile`` and ``fit`` work as for the wrapped model; ``train_step`` runs
    the plan (layer by layer inside the ``tf.function`` Keras builds) and the
    optimizer, and updates BatchNorm statistics once. ``predict``, ``evaluate``
    and ``__call__`` run the wrapped model unchanged. The plan is specialized
    to the example batch's shapes.

    Attributes
    ----------
    inner : keras.Model
        The wrapped model; its weights are this model's weights.
    extracted : ExtractedGraph
    result : remat_core.RematResult
    plan : remat_core.ExecutionPlan
    budget_bytes, predicted_peak_bytes : int
    """

    def __init__(self, extracted: ExtractedGraph, result, plan, **kwargs):
        super().__init__(name=kwargs.pop("name", f"remat_{extracted.model.name}"), **kwargs)
        self.inner = extracted.model
        self._remat = {"eg": extracted, "result": result, "plan": plan}
        self._grad_fn = None
        self.built = True

    extracted = property(lambda self: self._remat["eg"])
    result = property(lambda self: self._remat["result"])
    plan = property(lambda self: self._remat["plan"])
    budget_bytes = property(lambda self: int(self._remat["result"].budget_bytes))
    predicted_peak_bytes = property(lambda self: int(self._remat["result"].peak_memory_bytes))
    run_info = property(lambda self: self._remat.get("info"), doc="RunInfo of the last traced step (or None).")

    @classmethod
    def from_extracted(cls, eg: ExtractedGraph, budget: Any = 1.0, method: str = "auto", hoist: bool = True,
                       solver_options: dict | None = None) -> "RematModel":
        """Solve for a plan on an already extracted graph (see :func:`rematerialize` for the arguments).

        Extract once, then try several budgets or methods without tracing the model again.
        """
        if not isinstance(method, str):
            raise TypeError(f"`method` must be a string; got {method!r}")
        graph = eg.graph
        budget_bytes = resolve_budget(graph, budget)
        options = dict(solver_options or {})
        if method == "auto" and "auto" not in available_methods():
            method = "ilp"
            options.setdefault("time_limit_s", AUTO_FALLBACK_TIME_LIMIT_S)
        lower, culprit = min_budget_bytes(graph)
        result = None
        if budget_bytes >= lower:
            result = solve(graph, budget_bytes, method=method, **options)
            if result.schedule is not None:
                plan = make_plan(graph, result.schedule, hoist=hoist)
                log.info("plan for %s: %s, predicted peak %s of budget %s", eg.model.name, plan,
                         format_bytes(result.peak_memory_bytes), format_bytes(budget_bytes))
                return cls(eg, result, plan)
            lower = max(lower, int(result.stats.get("min_budget_bytes", 0) or 0))
        layer = culprit[len("grad/"):] if culprit.startswith("grad/") else culprit
        status = result.status.value if result is not None else "infeasible"
        detail = f" ({result.message})" if result is not None and result.message else ""
        raise BudgetInfeasibleError(
            f"method {method!r} found no plan for model {eg.model.name!r} within `budget` {format_bytes(budget_bytes)} "
            f"({budget_fraction(graph, budget_bytes):.3f} of activation memory): {status}{detail}. The smallest "
            f"feasible budget is at least {format_bytes(lower)} ({budget_fraction(graph, lower):.3f} of activation "
            f"memory), set by layer {layer!r} (node {culprit!r})",
            result, budget_bytes=budget_bytes, min_budget_bytes=lower, culprit=layer)

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

    def _check(self, xs, ys):
        eg = self.extracted
        for what, got, want in (("inputs", xs, eg.input_specs), ("targets", ys, eg.target_specs)):
            if len(got) != len(want):
                raise RematError(f"the plan was made for {len(want)} {what}; got {len(got)}")
            for t, (shape, _) in zip(got, want):
                if t.shape.is_fully_defined() and tuple(t.shape) != tuple(shape):
                    raise RematError(f"the plan was made for {what} of shape {tuple(shape)}; got {tuple(t.shape)} "
                                     "(re-run rematerialize for this batch shape, or drop the last partial batch)")

    def _step(self, x, y):
        xs, ys = _flat(x, "x"), _flat(y, "y")
        self._check(xs, ys)
        r = run_plan(self.extracted, self.plan, xs, ys)
        self._remat["info"] = r.info
        return r

    def train_step(self, data):
        import tensorflow as tf
        from keras import tree
        from keras.src.trainers.data_adapters.data_adapter_utils import unpack_x_y_sample_weight

        x, y, sample_weight = unpack_x_y_sample_weight(data)
        if sample_weight is not None:
            raise RematError("sample weights are not supported by the rematerialized training step")
        r = self._step(x, y)
        self._loss_tracker.update_state(r.loss, sample_weight=tf.shape(_flat(x, "x")[0])[0])
        eg = self.extracted
        # the weights change only after every op of the step ran (see step_barrier)
        with tf.control_dependencies(step_barrier(r)):
            self.optimizer.apply_gradients(zip(r.grads, eg.variables))
            apply_updates(r.updates)
        y_pred = tree.pack_sequence_as(eg.functional._outputs_struct, r.y_pred)
        return self.compute_metrics(x, y, y_pred, sample_weight=None)

    def compute_gradients(self, x, y):
        """Loss and weight gradients of one batch under the plan: ``(loss, grads)``.

        ``grads`` follows ``self.trainable_variables``. Like a training step,
        it updates non-trainable state (BatchNorm statistics, dropout seeds) once.

        Examples
        --------
        >>> loss, grads = rm.compute_gradients(x, y)                            # doctest: +SKIP
        >>> optimizer.apply_gradients(zip(grads, rm.trainable_variables))       # doctest: +SKIP
        """
        import tensorflow as tf

        if self._grad_fn is None:
            def fn(x, y):
                r = self._step(x, y)
                with tf.control_dependencies(step_barrier(r)):
                    apply_updates(r.updates)
                return r.loss, r.grads

            self._grad_fn = tf.function(fn, autograph=False, jit_compile=False)
        return self._grad_fn(x, y)


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
    return RematModel.from_extracted(eg, budget=budget, method=method, hoist=hoist, solver_options=solver_options)
