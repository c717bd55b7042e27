"""The user-facing API: :func:`rematerialize`, :class:`RematModule`, :func:`train_step`."""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import torch

from remat_core import RematResult, checkpoint_all_peak_bytes, make_plan, solve
from remat_core.errors import BudgetInfeasibleError, RematError

from .execute import Executor
from .extract import ExtractedGraph, _as_tuple_inputs, extract_graph

__all__ = ["rematerialize", "RematModule", "train_step", "resolve_budget", "BudgetInfeasibleError"]

log = logging.getLogger(__name__)


def resolve_budget(graph, budget: Any) -> int:
    """Turn ``budget`` into bytes.

    An ``int`` is a number of bytes (total, fixed bytes included); a ``float``
    in ``(0, 1]`` is a fraction of the checkpoint-all peak of ``graph``.

    Raises
    ------
    TypeError, ValueError
        If ``budget`` is neither.

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> resolve_budget(linear_graph(3), 5), resolve_budget(linear_graph(3), 1.0)
    (5, 5)
    """
    import numbers

    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise TypeError(f"`budget` must be bytes (int) or a fraction (float in (0, 1]); got {budget!r}")
    if isinstance(budget, numbers.Integral):
        if budget <= 0:
            raise ValueError(f"`budget` must be positive; got {budget}")
        return int(budget)
    if not 0.0 < float(budget) <= 1.0:
        raise ValueError(f"`budget` as a fraction of the checkpoint-all peak must be in (0, 1]; got {budget}")
    return max(1, int(float(budget) * checkpoint_all_peak_bytes(graph)))


class _RematFunction:
    """Holder of the autograd.Function (created lazily: torch is imported on use)."""

    cls = None

    @classmethod
    def get(cls):
        if cls.cls is not None:
            return cls.cls
        import torch

        class RematFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, module, n_params, *tensors):
                ex: Executor = module._executor
                params, inputs = tensors[:n_params], tensors[n_params:]
                buffers = [b for _, b in module.module.named_buffers()]
                st = ex.begin(params, buffers, inputs)
                ex.run_forward(st)
                ex.apply_buffer_updates(module.module, st)
                outs = ex.user_outputs(st)
                ctx.module = module
                ctx.state = st
                ctx.n_params = n_params
                ctx.input_needs = [x.requires_grad for x in inputs]
                tangent = set(ex.eg.tangent_outputs)
                nondiff = [o for i, o in enumerate(outs) if i not in tangent]
                if nondiff:
                    ctx.mark_non_differentiable(*nondiff)
                return tuple(outs)

            @staticmethod
            def backward(ctx, *grad_outputs):
                module = ctx.module
                ex: Executor = module._executor
                st = ctx.state
                ctx.state = None
                if st is None:
                    raise RematError("backward through a rematerialized step twice is not supported "
                                     "(its activations are freed); run the forward again")
                tangents = [grad_outputs[i] for i in ex.eg.tangent_outputs]
                ex.run_backward(st, tangents)
                grads = ex.primal_grads(st)
                n_b = len(ex.eg.buffer_names)
                pg = grads[:ctx.n_params]
                ig = grads[ctx.n_params + n_b:]
                ig = [g if need else None for g, need in zip(ig, ctx.input_needs)]
                module.last_peak_bytes = ex.peak_bytes
                return (None, None, *pg, *ig)

        cls.cls = RematFunction
        return RematFunction


class RematModule(torch.nn.Module):
    """A module whose training forward and backward follow a rematerialization plan.

    In training mode with grad enabled, ``forward`` runs the plan's forward
    stages inside a ``torch.autograd.Function`` and ``backward`` runs the
    remaining stages; parameter gradients reach ``.grad`` through autograd,
    so any optimizer works unchanged. In ``eval()`` mode or under
    ``torch.no_grad()`` it calls the wrapped module directly.

    Attributes
    ----------
    module : torch.nn.Module
        The wrapped model (its parameters are this module's parameters).
    extracted : ExtractedGraph
    result : remat_core.RematResult
    plan : remat_core.ExecutionPlan
    predicted_peak_bytes : int
        The simulator's peak for the schedule.
    last_peak_bytes : int or None
        The executor's tracked peak of the last training step.
    """

    def __init__(self, module, extracted: ExtractedGraph, result: RematResult, plan, measure: bool = False):
        super().__init__()
        self.module = module
        self.extracted = extracted
        self.result = result
        self.plan = plan
        self._executor = Executor(extracted, plan, measure=measure)
        self.predicted_peak_bytes = int(result.peak_memory_bytes) if result.peak_memory_bytes is not None else None
        self.last_peak_bytes = None
        self._shapes = [tuple(s) for s in extracted.graph.meta["input_shapes"]]

    @property
    def executor(self) -> Executor:
        return self._executor

    def forward(self, *inputs):
        import torch
        from torch.utils._pytree import tree_unflatten

        if not (self.training and torch.is_grad_enabled()):
            return self.module(*inputs)
        if not self.module.training:
            raise RematError("the wrapped module is in eval mode but the RematModule is in train mode; "
                             "call .train() or .eval() on the RematModule")
        eg = self.extracted
        shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs]
        if shapes != self._shapes:
            raise RematError(f"the plan was made for input shapes {self._shapes}; got {shapes} "
                             "(re-run rematerialize for new shapes)")
        active = torch.is_autocast_enabled(eg.device_type)
        if active != (eg.autocast_dtype is not None) or (
                active and torch.get_autocast_dtype(eg.device_type) != eg.autocast_dtype):
            raise RematError(
                f"the graph was traced with autocast_dtype={eg.autocast_dtype}; call the module under the same "
                "autocast setting (pass `autocast_dtype=` to rematerialize)")
        params = [p for _, p in self.module.named_parameters()]
        flat = _RematFunction.get().apply(self, len(params), *params, *inputs)
        return tree_unflatten(list(flat), eg.out_spec)


def rematerialize(
    model,
    example_inputs,
    budget: Any = 1.0,
    method: str = "checkpoint-all",
    granularity: str = "module",
    blocks: Sequence[Any] | None = None,
    cost_model: str = "flops",
    autocast_dtype: Any = None,
    hoist: bool = True,
    measure: bool = False,
    solver_options: dict | None = None,
    workspace: str | None = None,
):
    """Make ``model`` train inside a memory budget with a plan from ``method``.

    Parameters
    ----------
    model : torch.nn.Module
        In training mode.
    example_inputs : torch.Tensor or tuple of torch.Tensor
        Inputs of the shapes used in training (the plan is specialized to them).
    budget : int or float
        Total bytes (fixed bytes included) if an ``int``; a fraction of the
        checkpoint-all peak if a ``float`` in ``(0, 1]``.
    method : str
        Any method of :func:`remat_core.available_methods`.
    granularity : {"op", "module", "block"}
    blocks : sequence of str or torch.nn.Module, optional
        For ``granularity="block"``.
    cost_model : {"flops", "profile", "unit"}
    autocast_dtype : torch.dtype, optional
        Train under ``torch.autocast(dtype=autocast_dtype)``.
    hoist : bool
        Free each tensor right after its last use (default) instead of where
        the simulator frees it.
    measure : bool
        Measure node temporaries op by op (slower; for checking).
    solver_options : dict, optional
        Passed to :func:`remat_core.solve` (e.g. ``{"time_limit_s": 60}``).
    workspace : {"estimate", "measure"}, optional
        How node temporaries are found; see :func:`remat_torch.extract_graph`
        (default: measured with ``cost_model="profile"``).

    Returns
    -------
    RematModule

    Raises
    ------
    BudgetInfeasibleError
        If ``method`` finds no plan within the budget.
    UnsupportedModelError
        If the model cannot be extracted (the message names the construct).

    Examples
    --------
    >>> import torch
    >>> from remat_torch import rematerialize
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> x = torch.randn(3, 4)
    >>> rm = rematerialize(net, x, budget=1.0, method="checkpoint-all", cost_model="unit")
    >>> rm(x).sum().backward()
    >>> net[0].weight.grad.shape
    torch.Size([8, 4])
    """
    eg = extract_graph(model, example_inputs, granularity=granularity, blocks=blocks,
                       cost_model=cost_model, autocast_dtype=autocast_dtype, workspace=workspace)
    budget_bytes = resolve_budget(eg.graph, budget)
    result = solve(eg.graph, budget_bytes, method=method, **(solver_options or {}))
    if result.schedule is None:
        raise BudgetInfeasibleError(
            f"method {method!r} found no plan within {budget_bytes} bytes: {result.status.value}"
            f"{' (' + result.message + ')' if result.message else ''}", result)
    plan = make_plan(eg.graph, result.schedule, hoist=hoist)
    log.info("plan: %s, predicted peak %s bytes, cost %s", plan, result.peak_memory_bytes, result.objective)
    return RematModule(model, eg, result, plan, measure=measure)


def train_step(model, inputs, loss_fn: Callable, optimizer=None, zero_grad: bool = True):
    """One training step: forward, ``loss_fn(output)``, backward, optimizer step.

    Parameters
    ----------
    model : RematModule or torch.nn.Module
    inputs : torch.Tensor or tuple of torch.Tensor
    loss_fn : callable
        Maps the model output to a scalar loss.
    optimizer : torch.optim.Optimizer, optional
        Stepped after backward (and its gradients zeroed first if ``zero_grad``).
    zero_grad : bool

    Returns
    -------
    torch.Tensor
        The loss (detached).

    Examples
    --------
    >>> import torch
    >>> from remat_torch import rematerialize, train_step
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> x = torch.randn(3, 4)
    >>> rm = rematerialize(net, x, budget=1.0, cost_model="unit")
    >>> opt = torch.optim.SGD(rm.parameters(), lr=0.1)
    >>> float(train_step(rm, x, lambda y: y.pow(2).mean(), opt)) >= 0
    True
    """
    if not callable(loss_fn):
        raise TypeError(f"`loss_fn` must be callable; got {type(loss_fn).__name__}")
    inputs = _as_tuple_inputs(inputs)
    if optimizer is not None and zero_grad:
        optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(*inputs))
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    return loss.detach()
