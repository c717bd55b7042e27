"""The user-facing API: :func:`rematerialize`, :class:`RematModule`, :func:`train_step`."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import inspect
import json
import logging
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from remat_core import RematResult, Schedule, SolveStatus, make_plan, simulate, solve
from remat_core.errors import BudgetInfeasibleError, RematError, UnknownMethodError
from remat_core.units import budget_fraction, format_bytes, min_budget_bytes
from remat_core.units import resolve_budget as _resolve_budget

from .execute import Executor, _get_rng
from .extract import GRANULARITIES, CallSpec, ExtractedGraph, UnsupportedModelError, _as_tuple_inputs, extract_graph
from .guards import AttributeSnapshot, call_signature, tensor_signature
from .offload import OffloadExecutor

__all__ = ["rematerialize", "RematModule", "train_step", "resolve_budget", "BudgetInfeasibleError",
           "InputMismatchError", "PLAN_FORMAT", "clear_graph_cache"]

log = logging.getLogger(__name__)

#: The ``format`` field of a saved plan file.
PLAN_FORMAT = "remat-torch-plan"
_PLAN_VERSION = 1
#: With ``granularity="auto"``, the op-level graph is used when ``auto``'s size rule gives it to a
#: formulation-based method (``ilp`` or ``lp-rounding``); otherwise the module-level graph.
AUTO_GRANULARITIES = ("op", "module")
#: ``patience_s`` given to ``method="auto"`` (:func:`remat_core.solvers.auto.solve_auto`): the search stops this
#: many seconds in once its plan is within ``stop_gap`` (5%) of its lower bound. The core's default (8 s) suits
#: a plan made once; here a plan is made for every new kind of call, while training waits (4-layer GPT-2 at
#: 0.5: 2.2 s at 1.6% over the bound, against 10.3 s at 3.3% with 8 s, under load). 0.5 s: on the 4-layer
#: GPT-2 and Llama graphs at 0.5 and 0.3, patience 0.25/0.5/1/2 s ended at the same cost but in one case
#: (GPT-2 at 0.3: 1.66% over the bound at 0.5 s, 1.25% at 1-2 s).
AUTO_PATIENCE_S = 0.5
#: ``stop_gap`` given to ``method="auto"``: the 5% above (the core's default is 1% since issue 37, so that a
#: plan made once uses its whole limit when further from its bound).
AUTO_STOP_GAP = 0.05


class InputMismatchError(RematError, ValueError):
    """A training call whose tensors do not fit the model (a wrong input width): the message names the
    input, its shape and the shape the model was planned with."""


def resolve_budget(graph, budget: Any) -> int:
    """Total device bytes for ``budget`` on ``graph``: :func:`remat_core.units.resolve_budget`.

    An ``int`` or a size string (``"8GiB"``) is total bytes, fixed bytes
    included; a ``float`` in ``[0, 1]`` is a fraction of *activation* memory
    (``fixed + f * (checkpoint-all peak - fixed)``).

    Examples
    --------
    >>> from remat_core.zoo import linear_graph
    >>> resolve_budget(linear_graph(3), 5), resolve_budget(linear_graph(3), 1.0)
    (5, 5)
    """
    return _resolve_budget(graph, budget)


@dataclass
class _Settings:
    budget: Any
    method: str
    granularity: str
    blocks: Any
    cost_model: str
    autocast_dtype: Any
    hoist: bool
    measure: bool
    solver_options: dict
    time_limit_s: float | None
    workspace: str | None
    max_plans: int


#: Traced and profiled graphs per model (weakly: they go with the model), most recently used last: a
#: second ``rematerialize`` of the same model and call (another budget or method) plans without tracing.
_GRAPHS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_GRAPHS_PER_MODEL = 8


class _Specialization:
    """One plan: the graph traced for one kind of call, its schedule and executor."""

    def __init__(self, eg: ExtractedGraph, result: RematResult, plan, measure: bool, attrs: tuple):
        self.eg = eg
        self.result = result
        self.plan = plan
        host_plan = getattr(result, "host_plan", None)
        # a plan with a host tier (remat_core.host: solve with host_bandwidth) runs its copies to host memory too
        self.executor = OffloadExecutor(eg, host_plan) if host_plan is not None else Executor(eg, plan, measure=measure)
        self.attrs = attrs
        self.sig = None  # the call signature it was made for
        self.fingerprint = graph_fingerprint(eg)


def graph_fingerprint(eg: ExtractedGraph) -> str:
    """SHA-256 of what a plan depends on: the graph's structure, sizes, ops, dtypes and shapes.

    Costs and measured workspaces are left out (they vary between runs), so a
    plan made in one process is recognised in another.
    """
    g = eg.graph
    h = hashlib.sha256()

    def put(x):
        h.update(repr(x).encode())
        h.update(b"\0")

    put((PLAN_FORMAT, _PLAN_VERSION, g.meta.get("model"), eg.granularity, g.n, int(g.fixed_bytes)))
    put([list(map(int, d)) for d in g.deps])
    put(np.asarray(g.memory_bytes, dtype=np.int64).tolist())
    put(np.asarray(g.is_backward, dtype=bool).tolist())
    put([grp.ops for grp in eg.groups])
    put(eg.param_names)
    put(eg.buffer_names)
    put(eg.tangent_meta)
    put((list(eg.tangent_outputs), list(eg.untraced_outputs), list(eg.released_outputs)))
    put([str(t) for t in eg.input_requires_grad])
    put([j is not None for j in eg.grad_slots])
    put(g.meta.get("input_shapes"))
    put(repr(eg.call.spec) if eg.call is not None else None)
    put(eg.call.template if eg.call is not None else None)
    put(eg.out_template)
    put(str(eg.autocast_dtype))
    return h.hexdigest()


def _describe(eg: ExtractedGraph) -> str:
    shapes = eg.graph.meta.get("input_shapes")
    return (f"{eg.graph.meta.get('model')} with tensor inputs of shapes {shapes}, "
            f"granularity {eg.granularity!r}, {eg.graph.n} nodes")


class _RematFunction:
    """Holder of the autograd.Function (created once)."""

    cls = None

    @classmethod
    def get(cls):
        if cls.cls is not None:
            return cls.cls

        class RematFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, owner, spec, n_params, *tensors):
                ex: Executor = spec.executor
                params, inputs = tensors[:n_params], tensors[n_params:]
                buffers = [b for _, b in owner.module.named_buffers()]
                st = ex.begin(params, buffers, inputs)
                # the forward's random numbers, to differentiate outside the plan: outputs traced without a
                # tangent, and a backward that must itself be differentiable (create_graph=True)
                st.rng_start = _get_rng()
                ex.run_forward(st)
                ex.apply_buffer_updates(owner.module, st)
                outs = ex.user_outputs(st)
                ex.release_outputs(st)
                ctx.released = [(i, StorageWeakRef(outs[i].untyped_storage()), outs[i].untyped_storage().nbytes())
                                for i in ex.eg.released_outputs]
                ctx.owner = owner
                ctx.spec = spec
                ctx.state = st
                ctx.n_params = n_params
                ctx.primals = tensors   # the same storages as the step's values; for a create_graph backward
                ctx.input_needs = [x.requires_grad for x in inputs]
                ctx.set_materialize_grads(False)  # no zeros allocated for outputs that get no gradient
                tangent = set(ex.eg.tangent_outputs) | set(ex.eg.untraced_outputs)
                nondiff = [o for i, o in enumerate(outs) if i not in tangent]
                if nondiff:
                    ctx.mark_non_differentiable(*nondiff)
                return tuple(outs)

            @staticmethod
            def backward(ctx, *grad_outputs):
                spec = ctx.spec
                ex: Executor = spec.executor
                st = ctx.state
                ctx.state = None
                if st is None:
                    raise RematError("backward through a rematerialized step twice is not supported "
                                     "(its activations are freed); run the forward again")
                if torch.is_grad_enabled():   # create_graph=True: a gradient penalty, a Hessian-vector product
                    pg, ig = _differentiable_grads(ctx.owner, spec, st, ctx.primals, grad_outputs,
                                                   ctx.input_needs, ctx.needs_input_grad[3:3 + ctx.n_params])
                    ctx.state = st   # create_graph retains the graph, as in eager: a later backward may come
                    return (None, None, None, *pg, *ig)
                tangents = [grad_outputs[i] for i in ex.eg.tangent_outputs]
                extra = [(i, grad_outputs[i]) for i in ex.eg.untraced_outputs if grad_outputs[i] is not None]
                ex.run_backward(st, tangents)
                _note_kept_outputs(ctx.owner, spec, ctx.released, {i for i, _ in extra})
                grads = ex.primal_grads(st)
                if extra:
                    grads = _add_untraced_grads(ctx.owner, spec, st, extra, grads, ctx.input_needs)
                n_b = len(ex.eg.buffer_names)
                pg = grads[:ctx.n_params]
                ig = grads[ctx.n_params + n_b:]
                ig = [g if need else None for g, need in zip(ig, ctx.input_needs)]
                ctx.owner.last_peak_bytes = ex.peak_bytes
                return (None, None, None, *pg, *ig)

        cls.cls = RematFunction
        return RematFunction


def _note_kept_outputs(owner, spec, released, skip) -> None:
    """Note the outputs the plan released after the forward pass that the caller still holds after backward.

    The plan counts such an output (the ``logits`` beside a ``loss``) only
    to the end of the forward pass; a caller that keeps it through backward
    (``out = model(**batch); out.loss.backward()``) holds its bytes on top
    of the plan. That is logged, and later calls of this kind get a plan
    that counts it as fixed memory. Checked once the plan's backward has
    run, when the plan holds nothing but gradients.
    """
    if not released:
        return
    kept = [(i, nb) for i, ref, nb in released if i not in skip and not ref.expired()]
    if not kept:
        return
    log.warning("the caller keeps model output(s) %s (%s) through the backward pass, beyond this plan, which "
                "frees them after the forward pass: this step uses that much more memory; the next calls of "
                "this kind get a plan that counts them (to save the memory, drop them before backward, e.g. "
                "`loss = model(**batch).loss`)", [i for i, _ in kept], format_bytes(sum(nb for _, nb in kept)))
    owner._learned.setdefault(spec.sig, {"grad": set(), "kept": set()})["kept"].update(i for i, _ in kept)


def _eager_rerun(owner, spec, st, params, inputs) -> tuple:
    """Run the step's forward once more in eager PyTorch with grad on: ``params`` and ``inputs`` as given, a
    copy of the step's buffers, the forward's random numbers and autocast setting. Returns the tensor outputs
    (flattened) and the buffer copies."""
    from torch.func import functional_call
    from torch.utils._pytree import tree_flatten

    from .execute import _replay_rng

    eg = spec.executor.eg
    n_p, n_b = eg.n_params, len(eg.buffer_names)
    buffers = [b.detach().clone() for b in st.values[n_p:n_p + n_b]]
    state = {**dict(zip(eg.param_names, params)), **dict(zip(eg.buffer_names, buffers))}
    args, kwargs = eg.call.rebuild(inputs)
    autocast = (torch.autocast(device_type=eg.device_type, dtype=eg.autocast_dtype)
                if eg.autocast_dtype is not None else contextlib.nullcontext())
    with torch.enable_grad(), _replay_rng(st.rng_start), autocast:
        out = functional_call(owner.module, state, args, kwargs)
    return [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)], buffers


def _add_untraced_grads(owner, spec, st, extra, grads, input_needs) -> list:
    """Add the gradients that reach outputs the plan was traced without a tangent for.

    The plan is traced for the loss alone when the model returns one (the
    ``logits`` beside it get no backward and are not held); if the caller's
    loss uses such an output after all, this step differentiates it outside
    the plan (one more forward and backward in eager PyTorch, with the
    forward's random numbers and the step's buffers) and later calls of this
    kind get a plan that includes it: the gradients are always complete.
    """
    eg = spec.executor.eg
    names = [i for i, _ in extra]
    log.warning("model output(s) %s got a gradient that the plan did not expect (it was made for the loss "
                "alone): this step differentiates them outside the plan, beyond its memory budget; the next "
                "calls of this kind get a plan that includes them", names)
    owner._learned.setdefault(spec.sig, {"grad": set(), "kept": set()})["grad"].update(i for i, _ in extra)
    vals = st.values
    n_p, n_b, n_in = eg.n_params, len(eg.buffer_names), eg.n_inputs
    params = [v.detach().requires_grad_(p.requires_grad) for v, p in zip(vals[:n_p], owner.module.parameters())]
    inputs = [x.detach().requires_grad_(need) for x, need in zip(vals[n_p + n_b:n_p + n_b + n_in], input_needs)]
    flat, buffers = _eager_rerun(owner, spec, st, params, inputs)
    wrt = [(k, t) for k, t in enumerate(params + buffers + inputs) if t.requires_grad]
    got = torch.autograd.grad([flat[i] for i, _ in extra], [t for _, t in wrt], [g for _, g in extra],
                              allow_unused=True)
    grads = list(grads)
    for (k, _), g in zip(wrt, got):
        if g is not None:
            grads[k] = g if grads[k] is None else grads[k] + g
    return grads


def _differentiable_grads(owner, spec, st, primals, grad_outputs, input_needs, param_needs) -> tuple:
    """The gradients of a backward that must itself be differentiable (``create_graph=True``).

    The plan's backward runs outside autograd, so its gradients could not be
    differentiated again (a gradient penalty would silently add nothing). Here
    the step runs once more in eager PyTorch on the parameters and inputs
    themselves, with the forward's random numbers and a copy of the step's
    buffers, and is differentiated with ``create_graph=True``: the returned
    gradients carry their own graph. This step holds eager's activations,
    beyond the plan's budget (logged).
    """
    eg = spec.executor.eg
    log.warning("a backward with create_graph=True (e.g. a gradient penalty) runs this step again in eager "
                "PyTorch to differentiate it twice: its activations are held beyond the plan's budget")
    # the parameters and inputs the forward was called with (not the step's detached values): the gradients'
    # own graph leads back to them
    params, inputs = list(primals[:eg.n_params]), list(primals[eg.n_params:])
    flat, _ = _eager_rerun(owner, spec, st, params, inputs)
    pairs = [(o, g) for o, g in zip(flat, grad_outputs) if g is not None and o.requires_grad]
    want = [t for t, need in zip(params, param_needs) if need and t.requires_grad]
    want += [x for x, need in zip(inputs, input_needs) if need and x.requires_grad]
    got = iter(torch.autograd.grad([o for o, _ in pairs], want, [g for _, g in pairs], create_graph=True,
                                   allow_unused=True) if pairs and want else [None] * len(want))
    pg = [next(got) if need and t.requires_grad else None for t, need in zip(params, param_needs)]
    ig = [next(got) if need and x.requires_grad else None for x, need in zip(inputs, input_needs)]
    owner.last_peak_bytes = None
    return pg, ig


def _defaults_for(model) -> dict:
    """Keyword arguments added to every call: ``use_cache=False`` where ``forward`` takes ``use_cache``.

    A key/value cache is for generation; in training it only keeps every
    layer's keys and values alive, and Hugging Face's own gradient
    checkpointing turns it off the same way.
    """
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"use_cache": False} if "use_cache" in params else {}


class RematModule(torch.nn.Module):
    """A module whose training forward and backward follow a rematerialization plan.

    In training mode with grad enabled, ``forward(*args, **kwargs)`` runs the
    plan's forward stages inside a ``torch.autograd.Function`` and
    ``backward`` runs the remaining stages; parameter gradients reach
    ``.grad`` through autograd, so any optimizer works unchanged. It returns
    the wrapped model's own output structure (a tuple, a dict, a Hugging Face
    ``ModelOutput``...). In ``eval()`` mode or under ``torch.no_grad()`` it
    calls the wrapped module directly.

    A plan is specialized to what tracing saw; each call is checked against it
    and gets the plan made for it: the structure of the call and the shapes,
    dtypes, devices and ``requires_grad`` flags of its tensors, which of the
    model's parameters require grad (freezing or unfreezing a layer gets a
    plan of its own), the values of its non-tensor arguments, the autocast setting, every submodule's
    ``training`` flag and plain attributes, and the values that tracing read
    from tensors (see :mod:`remat_torch.guards`). A call that matches no plan
    is traced and planned on first sight (a smaller last batch just works:
    where its graph is that of an earlier plan at another batch size and the
    earlier schedule fits its budget, re-simulated, that schedule is used
    without solving);
    plans are kept in a least-recently-used cache of ``max_plans`` entries.

    Attributes of the wrapped model that this module does not have
    (``config``, ``generate``...) are forwarded to it.

    Attributes
    ----------
    module : torch.nn.Module
        The wrapped model (its parameters are this module's parameters).
    extracted : ExtractedGraph
        The graph of the last plan used (or made).
    result : remat_core.RematResult
    plan : remat_core.ExecutionPlan
    predicted_peak_bytes : int
        The peak of that plan in the memory model (at most the simulator's
        peak of its schedule, ``result.peak_memory_bytes``): total bytes, the
        resident parameters and batch included. A meter started at the step
        (:class:`remat_torch.meter.AllocatorMeter`) sees only the rise above
        them: compare its ``peak_bytes`` plus those resident bytes.
    last_peak_bytes : int or None
        The executor's tracked peak of the last training step.
    num_plans : int
        Plans in the cache.
    solves : int
        Plans made by solving.
    derived : int
        Plans for a new call whose graph is that of an earlier plan at other
        shapes (another batch size) and that took its schedule, re-simulated
        within the budget, instead of solving (``result.method == "derived"``).
    """

    def __init__(self, module, settings: _Settings, first: _Specialization | None = None,
                 loaded: dict | None = None, call_defaults: dict | None = None):
        super().__init__()
        self.module = module
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_plans", collections.OrderedDict())
        object.__setattr__(self, "_loaded", dict(loaded or {}))
        object.__setattr__(self, "_attr_snapshot", AttributeSnapshot(module))
        object.__setattr__(self, "_call_defaults", dict(call_defaults or {}))
        object.__setattr__(self, "_current", None)
        # call signature -> {"grad": outputs seen getting a gradient beyond the ones a plan was traced for,
        # "kept": outputs the caller was seen keeping through backward}
        object.__setattr__(self, "_learned", {})
        self.last_peak_bytes = None
        self.solves = 0
        self.derived = 0
        # state_dict() has the wrapped model's own keys (no `module.` prefix), so it loads into the model
        # itself; load_state_dict() takes those keys (and the prefixed ones of older checkpoints)
        self.register_state_dict_post_hook(_strip_module_prefix)
        self.register_load_state_dict_pre_hook(_add_module_prefix)
        try:  # callers that read the signature (HF Trainer drops unused dataset columns) see the model's
            sig = inspect.signature(module.forward)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            self.__dict__["forward"] = _Forward(self, sig)
        self.__class__ = _remat_class_for(type(module))

    # ---------------------------------------------------------------- attributes
    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            pass
        if name.startswith("__") or name in ("module", "_modules", "_parameters", "_buffers"):
            raise AttributeError(name)
        module = self._modules.get("module")
        if module is None:
            raise AttributeError(name)
        return getattr(module, name)

    def _cur(self) -> _Specialization:
        cur = self.__dict__.get("_current")
        if cur is None:
            raise RematError("no plan yet: call the module once in training mode (or pass example inputs to "
                             "rematerialize)")
        return cur

    @property
    def extracted(self) -> ExtractedGraph:
        return self._cur().eg

    @property
    def result(self) -> RematResult:
        return self._cur().result

    @property
    def plan(self):
        return self._cur().plan

    @property
    def executor(self) -> Executor:
        return self._cur().executor

    @property
    def predicted_peak_bytes(self) -> int | None:
        # the executed plan's peak in the memory model: the schedule's simulated peak where the plan frees
        # where the simulator does, lower where it frees earlier (hoisting)
        return int(self._cur().executor.predicted_peak_bytes)

    @property
    def num_plans(self) -> int:
        return sum(len(v) for v in self._plans.values())

    # ---------------------------------------------------------------- plans
    def _autocast_state(self, device_type: str):
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
        return None

    def _insert(self, key, spec: _Specialization) -> None:
        plans = self._plans
        plans.setdefault(key, [])
        plans[key] = [s for s in plans[key] if s is not spec] + [spec]
        plans.move_to_end(key)
        while sum(len(v) for v in plans.values()) > self._settings.max_plans:
            k0 = next(iter(plans))
            plans[k0].pop(0)
            if not plans[k0]:
                del plans[k0]

    def _lookup(self, key, tensors, attrs) -> _Specialization | None:
        cands = self._plans.get(key)
        if not cands:
            return None
        named = None
        for spec in reversed(cands):
            if spec.attrs != attrs:
                continue
            reads = spec.eg.value_reads
            if reads:
                if named is None:
                    named = {**dict(self.module.named_parameters()), **dict(self.module.named_buffers())}
                if not reads.matches(named, list(tensors)):
                    continue
            self._plans.move_to_end(key)
            return spec
        return None

    def _make(self, args, kwargs, grad_outputs="loss", kept_outputs=(), autocast_dtype=None) -> _Specialization:
        # traced under the call's own autocast setting (part of the plan's key), as eager would run it
        s = dataclasses.replace(self._settings, autocast_dtype=autocast_dtype)
        previous = [sp for lst in reversed(self._plans.values()) for sp in reversed(lst)]
        spec = _build(self.module, args, kwargs, s, self._loaded, grad_outputs=grad_outputs,
                      kept_outputs=kept_outputs, rescue=True, previous=previous)
        self.solves += int(spec.result.method not in ("loaded", "derived"))
        self.derived += int(spec.result.method == "derived")
        return spec

    def forward(self, *args, **kwargs):
        return self._forward(*args, **kwargs)

    @torch.compiler.disable
    def _forward(self, *args, **kwargs):
        if not (self.training and torch.is_grad_enabled()):
            return self.module(*args, **kwargs)
        if not self.module.training:
            raise RematError("the wrapped module is in eval mode but the RematModule is in train mode; "
                             "call .train() or .eval() on the RematModule")
        for k, v in self._call_defaults.items():
            kwargs.setdefault(k, v)
        call, tensors = CallSpec.from_call(args, kwargs, argument="inputs")
        device_type = tensors[0].device.type if tensors else "cpu"
        attrs = self._attr_snapshot.take()
        sig = _signature_key(call, tensors)
        learned = self._learned.get(sig, {})
        extra, kept = frozenset(learned.get("grad", ())), frozenset(learned.get("kept", ()))
        key = ("plan", sig, _grad_flags(self.module), str(self._autocast_state(device_type)), hash(attrs), extra,
               kept)
        spec = self._lookup(key, tensors, attrs)
        if spec is None:
            if self._plans:
                log.info("no plan for this call yet (new shapes, dtypes, flags or attribute values): solving one")
            try:
                spec = self._make(args, kwargs, self._grad_outputs_for(sig, extra), sorted(kept),
                                  self._autocast_state(device_type))
            except UnsupportedModelError as exc:
                mismatch = self._input_mismatch(call, tensors, exc)
                if mismatch is None:
                    raise
                raise mismatch from exc
            spec.attrs = attrs
            spec.sig = sig
            self._insert(key, spec)
        object.__setattr__(self, "_current", spec)
        eg = spec.eg
        if eg.autocast_dtype != self._autocast_state(device_type):
            raise RematError(  # pragma: no cover - part of the key
                f"the graph was traced with autocast_dtype={eg.autocast_dtype}; call the module under the same "
                "autocast setting (pass `autocast_dtype=` to rematerialize)")
        params = [p for _, p in self.module.named_parameters()]
        sharded = next((n for n, p in self.module.named_parameters() if type(p).__name__ == "DTensor"), None)
        if sharded is not None:  # the plan never calls the submodules' forward, so their FSDP hooks never gather
            raise RematError(
                f"parameter {sharded!r} is still sharded (a DTensor) when the plan runs: fully_shard (FSDP2) on "
                "submodules of a rematerialized module is not supported, since the plan runs the whole step as "
                "one graph and never calls their forward; use remat_torch.distributed.fully_shard_blocks(rm, "
                "blocks) instead of fully_shard on the blocks, or fully_shard on the RematModule itself "
                "(docs: Training on GPUs and across devices)")
        flat = _RematFunction.get().apply(self, spec, len(params), *params, *tensors)
        return _unflatten_outputs(eg, flat)

    def _input_mismatch(self, call, tensors, exc) -> "InputMismatchError | None":
        """A clear error for a call whose tensors have other shapes than planned and that cannot be traced."""
        if not isinstance(exc.__cause__, RuntimeError) or not self._plans:
            return None
        planned = [sp.eg for lst in self._plans.values() for sp in lst
                   if sp.eg.call is not None and repr(sp.eg.call.spec) == repr(call.spec)]
        if not planned:
            return None
        shapes = planned[-1].graph.meta.get("input_shapes") or []
        if len(shapes) != len(tensors):
            return None
        diff = [(i, list(t.shape), list(s)) for i, (t, s) in enumerate(zip(tensors, shapes)) if list(t.shape) != list(s)]
        # a dimension other than the first (the batch) is the likelier culprit
        diff.sort(key=lambda d: len(d[1]) == len(d[2]) and d[1][1:] == d[2][1:])
        if not diff:
            return None
        i, got, want = diff[0]
        cause = str(exc.__cause__).splitlines()[0] if str(exc.__cause__) else ""
        return InputMismatchError(
            f"input {i} has shape {tuple(got)}, the model expects {tuple(want)} (the shape it was planned "
            f"with; other batch sizes are planned on first sight, but this call cannot be traced: "
            f"{type(exc.__cause__).__name__}: {cause})")

    def _grad_outputs_for(self, sig, extra):
        """``grad_outputs`` for a new plan: the loss, plus the outputs seen getting a gradient."""
        if not extra:
            return "loss"
        traced = set(extra)
        for lst in self._plans.values():
            for sp in lst:
                if getattr(sp, "sig", None) == sig:
                    traced.update(sp.eg.tangent_outputs)
        return sorted(traced)

    def replan(self, budget: Any = None, method: str | None = None, time_limit_s: Any = "same",
               solver_options: dict | None = None) -> "RematModule":
        """A new module for the same model with the current graph solved again (no re-tracing).

        Parameters left out keep this module's settings. Useful to compare
        budgets or methods on one traced graph.

        Raises
        ------
        BudgetInfeasibleError
            As :func:`rematerialize`.
        """
        cur = self._cur()
        s = self._settings
        settings = _Settings(**{**s.__dict__})
        if budget is not None:
            settings.budget = budget
        if method is not None:
            settings.method = method
        if time_limit_s != "same":
            settings.time_limit_s = time_limit_s
        if solver_options is not None:
            settings.solver_options = dict(solver_options)
        eg = cur.eg
        budget_bytes = _resolve_budget(eg.graph, settings.budget)
        result = _solve(eg.graph, budget_bytes, settings)
        if not result.success:
            raise _infeasible(eg, budget_bytes, result, settings)
        spec = _Specialization(eg, result, make_plan(eg.graph, _planned(result), hoist=settings.hoist),
                               settings.measure, attrs=cur.attrs)
        spec.sig = cur.sig
        rm = RematModule(self.module, settings, None, None, call_defaults=self._call_defaults)
        key = next((k for k, lst in self._plans.items() if cur in lst), None)
        rm._insert(key, spec)
        object.__setattr__(rm, "_current", spec)
        rm.solves = 1
        return rm

    # ---------------------------------------------------------------- pickling
    def __reduce_ex__(self, protocol):
        """Rebuild through the wrapped model's class: the per-class subclass (see :func:`_remat_class_for`) is
        made at run time and cannot be found by name."""
        func, args, *rest = super().__reduce_ex__(protocol)
        return (_new_remat_module, (type(self.module),), *rest)

    def __getstate__(self):
        """Pickle (``torch.save``) the model, the settings and every plan's schedule, not the traced graphs.

        Compiled plans and traced graphs hold generated code that does not
        pickle; an unpickled module traces each kind of call again on first
        sight and uses the saved schedule without solving (as ``plan=``).
        """
        state = dict(self.__dict__)
        loaded = dict(self._loaded)
        for e in self._plan_entries():
            loaded[e["fingerprint"]] = e
        state["_loaded"] = loaded
        state["_plans"] = collections.OrderedDict()
        state["_current"] = None
        state.pop("_attr_snapshot", None)
        state.pop("forward", None)
        return state

    def __setstate__(self, state):
        state.setdefault("derived", 0)
        self.__dict__.update(state)
        object.__setattr__(self, "_attr_snapshot", AttributeSnapshot(self.module))
        try:
            sig = inspect.signature(self.module.forward)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            self.__dict__["forward"] = _Forward(self, sig)

    # ---------------------------------------------------------------- saving
    def _plan_entries(self) -> list:
        return [{
            "fingerprint": s.fingerprint, "description": _describe(s.eg),
            "granularity": s.eg.granularity, "blocks": s.eg.graph.meta.get("blocks"),
            "budget_bytes": int(s.result.budget_bytes), "method": s.result.method,
            "objective": s.result.objective, "peak_memory_bytes": s.result.peak_memory_bytes,
            "hoist": bool(self._settings.hoist),
            "schedule": s.result.schedule.to_dict() if s.result.schedule is not None else None,
            # a DTR run recorded only as it ran (no stage schedule)
            "sequence": (s.result.sequence.to_dict() if s.result.schedule is None and s.result.sequence is not None
                         else None),
            # a plan with a host tier keeps its copies (remat_core.host.host_result_from_dict reads them back)
            **({"host_plan": s.result.host_plan.to_dict(), "host_bandwidth": s.result.host_bandwidth}
               if getattr(s.result, "host_plan", None) is not None else {}),
        } for lst in self._plans.values() for s in lst]

    def save_plan(self, path) -> None:
        """Write every cached plan to ``path`` (JSON), for ``rematerialize(..., plan=path)``.

        The file holds, per plan, the schedule and a fingerprint of the graph
        it was made for (structure, sizes, ops, dtypes, shapes): a later
        process traces the model, and uses a saved schedule without solving
        when its fingerprint matches.

        Raises
        ------
        RematError
            If there is no plan yet.
        """
        entries = self._plan_entries()
        if not entries:
            raise RematError("no plan to save yet: call the module once in training mode first")
        data = {"format": PLAN_FORMAT, "version": _PLAN_VERSION, "torch": torch.__version__, "plans": entries}
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _strip_module_prefix(module, state_dict, prefix, local_metadata) -> None:
    inner = prefix + "module."
    keys = list(state_dict)
    for k in keys:
        v = state_dict.pop(k)
        state_dict[prefix + k[len(inner):] if k.startswith(inner) else k] = v
    meta = getattr(state_dict, "_metadata", None)
    if meta is not None:
        for k in [k for k in meta if (k + ".").startswith(inner)]:
            meta[prefix + k[len(inner):]] = meta.pop(k)


def _add_module_prefix(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) -> None:
    inner = prefix + "module."
    for k in [k for k in list(state_dict) if k.startswith(prefix) and not k.startswith(inner)]:
        state_dict[inner + k[len(prefix):]] = state_dict.pop(k)


_REMAT_CLASSES: dict = {}


def _remat_class_for(model_class: type) -> type:
    """The subclass of :class:`RematModule` for models of ``model_class``, named after it and with its
    ``forward`` signature on the class: callers that read the class (Hugging Face ``Trainer`` finds a model's
    label names and whether it can return a loss from ``type(model).forward``) see the wrapped model's."""
    cls = _REMAT_CLASSES.get(model_class)
    if cls is None:
        def forward(self, *args, **kwargs):
            return RematModule._forward(self, *args, **kwargs)

        try:
            forward.__signature__ = inspect.signature(model_class.forward)
        except (TypeError, ValueError, AttributeError):
            pass
        forward.__doc__ = RematModule.forward.__doc__
        name = f"RematModule[{model_class.__name__}]"
        cls = type(name, (RematModule,), {"forward": forward, "__module__": RematModule.__module__,
                                          "__qualname__": name})
        _REMAT_CLASSES[model_class] = cls
    return cls


def _new_remat_module(model_class: type):
    """An empty RematModule of ``model_class``'s subclass, for unpickling (``__setstate__`` fills it)."""
    cls = _remat_class_for(model_class)
    return cls.__new__(cls)


class _Forward:
    """``RematModule.forward`` bound to one module, carrying the wrapped model's signature."""

    def __init__(self, owner, signature):
        self.owner = owner
        self.__signature__ = signature

    def __call__(self, *args, **kwargs):
        return self.owner._forward(*args, **kwargs)


def _signature_key(call: CallSpec, tensors) -> tuple:
    try:
        spec_key = hash(call.spec)
        spec_key = call.spec
    except TypeError:
        spec_key = repr(call.spec)
    return (spec_key, call_signature(call.template), tuple(tensor_signature(t) for t in tensors))


def _grad_flags(module) -> tuple:
    """Which parameters require grad: part of a plan's key, since the traced graph computes gradients only
    for those (a parameter unfrozen after planning would otherwise silently get none)."""
    return tuple(bool(p.requires_grad) for p in module.parameters())


def _unflatten_outputs(eg: ExtractedGraph, flat):
    from torch.utils._pytree import tree_unflatten

    leaves = [flat[v] if kind == "t" else v for kind, v in eg.out_template]
    return tree_unflatten(leaves, eg.out_spec)


def _load_plans(path) -> dict:
    """``{fingerprint: entry}`` from a plan file; RematError if it is not one."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"`plan`: no such file {os.fspath(path)!r}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RematError(f"`plan`: {os.fspath(path)!r} is not a readable plan file ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT or not isinstance(data.get("plans"), list):
        raise RematError(f"`plan`: {os.fspath(path)!r} is not a remat_torch plan file (saved by RematModule.save_plan)")
    if data.get("version") != _PLAN_VERSION:
        raise RematError(f"`plan`: {os.fspath(path)!r} has format version {data.get('version')}; "
                         f"this remat_torch reads version {_PLAN_VERSION}")
    out = {}
    for e in data["plans"]:
        if not isinstance(e, dict) or "fingerprint" not in e or "schedule" not in e:
            raise RematError(f"`plan`: {os.fspath(path)!r} holds a malformed plan entry")
        out[e["fingerprint"]] = e
    return out


def _accepts_time_limit(method: str) -> bool:
    from remat_core.solvers import get_method

    try:
        return "time_limit_s" in inspect.signature(get_method(method)).parameters
    except (UnknownMethodError, TypeError, ValueError):
        return False


def _solve(graph, budget_bytes: int, s: _Settings) -> RematResult:
    """``solve`` with the settings' method and time limit (``auto`` falls back to ilp / lp-rounding by size
    where it is not registered)."""
    from remat_core import available_methods

    opts = dict(s.solver_options)
    method = s.method
    if method == "auto" and "auto" not in available_methods():
        method = "ilp" if graph.n <= 150 else "lp-rounding"
    if s.time_limit_s is not None and _accepts_time_limit(method):
        opts.setdefault("time_limit_s", s.time_limit_s)
    if method == "auto":
        opts.setdefault("patience_s", AUTO_PATIENCE_S)
        opts.setdefault("stop_gap", AUTO_STOP_GAP)
    # where nothing fits, auto's feasibility phase runs to its end whatever the time left: the smallest budget it
    # reports, and a plan at that budget, do not depend on the machine's load (remat_core.solvers.auto._min_peak)
    return solve(graph, budget_bytes, method=method, **opts)


def _infeasible(eg: ExtractedGraph, budget_bytes: int, result: RematResult, s: _Settings) -> BudgetInfeasibleError:
    g = eg.graph
    stats = result.stats or {}
    lb, node = min_budget_bytes(g)
    exact = stats.get("min_budget_bytes")
    if exact is not None:
        need, how = int(exact), "the smallest budget at which a method found a plan is"
    else:
        need = max(int(stats.get("min_budget_lower_bound_bytes") or 0), lb)
        how = "no plan exists below"
    k = list(g.names).index(node) if node in list(g.names) else None
    scope = eg.groups[k].scope if k is not None else ""
    frac = budget_fraction(g, need)
    return BudgetInfeasibleError(
        f"method {result.method or s.method!r} found no plan within {format_bytes(budget_bytes)} "
        f"({budget_fraction(g, budget_bytes):.3f} of activation memory; {result.status.value}): "
        f"{how} {format_bytes(need)} ({need} bytes, {frac:.3f} of activation memory), set by node {node!r} "
        f"of module {scope or '<root>'!r} (its inputs, output and workspace must be resident at once). "
        f"Fixed memory (parameters, buffers, inputs, outputs) is {format_bytes(g.fixed_bytes)}; give a larger "
        "`budget`",
        result, budget_bytes=budget_bytes, min_budget_bytes=need, culprit=scope or node)


def _extract(model, args, kwargs, s: _Settings, granularity: str, blocks, grad_outputs="loss",
             kept_outputs=(), pick=None) -> ExtractedGraph:
    """:func:`extract_graph` with the settings (``pick``: see :func:`remat_torch.extract._extract`)."""
    from . import extract
    from .guards import refusing_side_effect_hooks

    hf = next((n or "<root>" for n, m in model.named_modules() if getattr(m, "gradient_checkpointing", None) is True),
              None)
    if hf is not None:   # its checkpoint calls and input hook would be traced into the plan, on placeholders
        raise RematError(
            f"transformers' gradient checkpointing is on (module {hf!r}): remat plans the recomputation itself, "
            "so use one or the other. Call model.gradient_checkpointing_disable() (with the Trainer: "
            "TrainingArguments(gradient_checkpointing=False)) before the rematerialized model is called")
    with refusing_side_effect_hooks(model):
        return extract._extract(model, args, granularity, blocks, s.cost_model, s.autocast_dtype, None,
                                s.workspace, kwargs, grad_outputs, kept_outputs, {}, pick=pick)


def _check_input_dtypes(model, args, kwargs, s: _Settings) -> None:
    """Refuse, before planning, a floating input of a dtype no parameter has that the model cannot run on.

    Fake tensors do not check every kernel's dtype rules (``addmm`` of float16 by float32 traces), so such
    a call would otherwise be planned and fail at its first step. Only in that suspicious case the
    forward runs once, without grad, on cloned buffers.
    """
    from torch.func import functional_call

    call, tensors = CallSpec.from_call(args, kwargs)
    param_dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    odd = [(i, t.dtype) for i, t in enumerate(tensors) if t.is_floating_point() and t.dtype not in param_dtypes]
    if not odd or not param_dtypes or s.autocast_dtype is not None:
        return
    state = {**{k: p for k, p in model.named_parameters()},
             **{k: b.detach().clone() for k, b in model.named_buffers()}}
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            functional_call(model, state, args, kwargs)
    except Exception as exc:
        i, dt = odd[0]
        raise RematError(
            f"tensor input {i} is {dt} but the model's parameters are "
            f"{', '.join(sorted(str(d) for d in param_dtypes))}, and the model does not run on it "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); cast the input, convert the "
            "model (model.to(dtype)), or train under autocast (`autocast_dtype=`)") from exc


def _rescue(eg: ExtractedGraph, budget_bytes: int, result: RematResult, s: _Settings):
    """A plan for a call after the first (a smaller last batch) whose budget has none: at the smallest
    budget a method found, else at checkpoint-all's peak, with a warning. Returns ``(result, budget_bytes)``;
    the original pair when neither works.

    A fraction of activation memory is resolved per shape, and the part that
    no plan can go below (parameter gradients, the largest node's inputs
    and outputs) weighs more in a small batch: a fraction that the full
    batch meets can be infeasible for the last one. Failing there would
    stop training in the middle of an epoch.
    """
    from remat_core import checkpoint_all_peak_bytes

    g = eg.graph
    need = int((result.stats or {}).get("min_budget_bytes") or 0)
    for b in dict.fromkeys(x for x in (need, int(checkpoint_all_peak_bytes(g))) if x > budget_bytes):
        r = _solve(g, b, s)
        if r.success:
            log.warning("no plan for %s within the budget %s (%.3f of its activation memory): planned at %s "
                        "(%.3f), the smallest budget found for it, instead of failing in the middle of training",
                        _describe(eg), format_bytes(budget_bytes), budget_fraction(g, budget_bytes), format_bytes(b),
                        budget_fraction(g, b))
            return r, b
    return result, budget_bytes


def _extract_for(model, args, kwargs, s: _Settings, loaded: dict, grad_outputs, kept_outputs) -> ExtractedGraph:
    """The graph of this call at the settings' granularity (``auto``: by the solver's size rule, traced once;
    the loaded plans' granularity where they all have one)."""
    from remat_core.solvers.auto import choose_path

    gran = s.granularity
    blocks = s.blocks
    if loaded:
        grans = {e["granularity"] for e in loaded.values()}
        if gran == "auto" and len(grans) == 1:
            gran = grans.pop()
    if gran == "auto":
        rule = {}

        def pick(op_level: ExtractedGraph) -> str:
            # the op-level graph's structure decides; the chosen one is grouped from the same trace
            rule.update(op_nodes=int(op_level.graph.n), op_path=choose_path(op_level.graph, s.time_limit_s))
            if rule["op_path"] != "large":
                return "op"
            log.info("granularity auto: %d op-level nodes is beyond the solver's size; using module level",
                     op_level.graph.n)
            return "module"

        eg = _extract(model, args, kwargs, s, "op", None, grad_outputs, kept_outputs, pick=pick)
        meta = eg.graph.meta
        meta["granularity_auto"] = rule
        eg.graph = eg.graph.replace(meta=meta)
    else:
        eg = _extract(model, args, kwargs, s, gran, blocks, grad_outputs, kept_outputs)
    return eg


def _extract_cached(model, args, kwargs, s: _Settings, loaded: dict, grad_outputs, kept_outputs) -> ExtractedGraph:
    """:func:`_extract_for`, from the cache of graphs of ``model`` when the same kind of call was extracted
    with the same settings before (another ``rematerialize`` of the model at another budget or method)."""
    key = _graph_key(model, args, kwargs, s, loaded, grad_outputs, kept_outputs)
    per_model = _GRAPHS.get(model) if key is not None else None
    eg = per_model.get(key) if per_model is not None else None
    if eg is not None and eg.value_reads:   # the values the trace read must be the same
        named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        if not eg.value_reads.matches(named, CallSpec.from_call(args, kwargs)[1]):
            eg = None
    if eg is not None:
        per_model.move_to_end(key)
        log.info("graph of %s taken from the cache of traced graphs", _describe(eg))
        return eg
    eg = _extract_for(model, args, kwargs, s, loaded, grad_outputs, kept_outputs)
    if key is not None:
        per_model = _GRAPHS.setdefault(model, collections.OrderedDict())
        per_model[key] = eg
        while len(per_model) > _GRAPHS_PER_MODEL:
            per_model.popitem(last=False)
    return eg


def _graph_key(model, args, kwargs, s: _Settings, loaded: dict, grad_outputs, kept_outputs):
    """What an extracted graph depends on: the call (structure, tensor layouts, plain values), the module
    tree (its modules, parameters and buffers by identity, layout and ``requires_grad``, and the plain
    attributes ``forward`` may read), the autocast state and the extraction settings. None where something
    in it cannot be hashed (then nothing is cached)."""
    call, tensors = CallSpec.from_call(args, kwargs)
    try:
        key = (
            _signature_key(call, tensors),
            tuple((t.stride(), t.storage_offset()) for t in tensors),
            # (ids, not objects: a key holding the model, or a bound method of it, would keep it alive)
            tuple((n, type(m), id(m), id(m.__dict__.get("forward"))) for n, m in model.named_modules()),
            tuple((n, id(p), tuple(p.shape), p.dtype, p.device, p.requires_grad)
                  for n, p in model.named_parameters()),
            tuple((n, id(b), tuple(b.shape), b.dtype, b.device) for n, b in model.named_buffers()),
            AttributeSnapshot(model).take(),
            str(torch.get_autocast_dtype(tensors[0].device.type) if tensors and torch.is_autocast_enabled(
                tensors[0].device.type) else None),
            s.granularity, repr(s.blocks), s.cost_model, str(s.autocast_dtype), s.workspace,
            s.time_limit_s if s.granularity == "auto" else None,
            tuple(sorted({e["granularity"] for e in loaded.values()})) if loaded else (),
            repr(grad_outputs), tuple(kept_outputs),
        )
        hash(key)
    except TypeError:
        return None
    return key


def clear_graph_cache(model=None) -> None:
    """Forget the traced graphs kept for ``model``, so that the next :func:`rematerialize` traces again.

    :func:`rematerialize` keeps each model's traced and profiled graphs (weakly:
    they go with the model) and reuses them for the same call at another
    budget or method. Clear them to time a first call, or after changing the
    model in a way that its modules, parameters, buffers and plain
    attributes do not show.

    Parameters
    ----------
    model : torch.nn.Module, optional
        The model whose graphs are forgotten; ``None`` (default): every model's.

    Examples
    --------
    >>> import torch
    >>> from remat_torch import clear_graph_cache, rematerialize
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> x = torch.randn(3, 4)
    >>> a = rematerialize(net, x, budget=1.0, cost_model="unit")
    >>> rematerialize(net, x, budget=1.0, cost_model="unit").extracted is a.extracted   # from the cache
    True
    >>> clear_graph_cache(net)
    >>> rematerialize(net, x, budget=1.0, cost_model="unit").extracted is a.extracted   # traced again
    False
    """
    if model is None:
        _GRAPHS.clear()
    else:
        _GRAPHS.pop(model, None)


#: A plan above op granularity that recomputes at a budget of at least this fraction of its graph's
#: checkpoint-all peak is replaced by the op-level plan without recomputation where that one fits: a node's
#: grouping (its outputs held together) is what put the no-recomputation plan over such a budget.
_NO_REMAT_WINDOW = 0.95


def _no_remat_at_op_level(eg: ExtractedGraph, model, args, kwargs, result: RematResult, budget_bytes: int,
                          hoist: bool):
    """For a plan above op granularity that recomputes nothing: the same trace at op level without
    recomputation, where it peaks lower, as ``(graph, result)``; else the pair given. For one that recomputes
    at a budget within :data:`_NO_REMAT_WINDOW` of its checkpoint-all peak (at any granularity the caller
    chose): the op-level plan without recomputation where it fits the budget (a budget between eager's peak
    and the module-level model's then gets a plan that recomputes nothing and measures at most eager's).

    A node of several ops keeps its inputs until its last op has run and
    holds all its outputs as long as any is needed, where eager PyTorch frees
    each tensor after its own last use: a module-level plan without
    recomputation can peak above eager (tiny Qwen2: 8 KiB, 1.2%). At op
    level each value is freed after its own last use, so the plan that keeps
    everything there peaks at most at eager's peak (below it where the step
    does not keep the model outputs), and it costs the same: nothing is
    recomputed in either. It needs the op-level workspaces, measured here.
    """
    from remat_core.plan import replay

    from .extract import regroup

    from remat_core import checkpoint_all_peak_bytes

    if (eg.granularity == "op" or eg.trace is None or getattr(result, "host_plan", None) is not None
            or result.schedule is None):
        return eg, result
    recomputes = int(result.schedule.compute_counts().max()) > 1
    if recomputes and budget_bytes < _NO_REMAT_WINDOW * checkpoint_all_peak_bytes(eg.graph):
        return eg, result
    op_eg = regroup(eg, model, CallSpec.from_call(args, kwargs)[1], "op")
    op_result = solve(op_eg.graph, budget_bytes, method="checkpoint-all")
    if op_result.schedule is None:
        return eg, result
    peaks = [replay(g.graph, make_plan(g.graph, r.schedule, hoist=hoist)).peak_memory_bytes
             for g, r in ((eg, result), (op_eg, op_result))]
    if peaks[1] >= peaks[0] and not recomputes:
        return eg, result
    log.info("the %s-level plan %s: planned at op level without recomputation instead, where each value is freed "
             "after its own last use (predicted peak %s instead of %s)", eg.granularity,
             "recomputes to fit a budget the op-level graph fits without" if recomputes else "recomputes nothing",
             format_bytes(peaks[1]), format_bytes(peaks[0]))
    meta = op_eg.graph.meta
    meta["no_remat_from"] = {"granularity": eg.granularity, "predicted_peak_bytes": int(peaks[0])}
    if "granularity_auto" in eg.graph.meta:
        meta["granularity_auto"] = eg.graph.meta["granularity_auto"]
    op_eg.graph = op_eg.graph.replace(meta=meta)
    return op_eg, op_result


def _planned(result: RematResult):
    """What :func:`make_plan` plans for ``result``: the result itself (its ``sequence`` when it has one, the
    run its cost and peak describe; a DTR run recorded only as it ran has no stage schedule), or the stage
    schedule of a plan with copies to host memory."""
    return result.schedule if getattr(result, "host_plan", None) is not None else result


def _same_structure(a, b) -> bool:
    """Whether two graphs are the same up to sizes and costs (one model traced at two batch sizes)."""
    return (a.n == b.n and list(a.names) == list(b.names) and list(map(list, a.deps)) == list(map(list, b.deps))
            and np.array_equal(a.is_backward, b.is_backward))


def _derive(eg: ExtractedGraph, budget_bytes: int, previous) -> RematResult | None:
    """The schedule of an earlier plan of the same graph at other shapes (another batch size), re-simulated
    on this graph, when it fits ``budget_bytes``: a plan for a new batch shape without solving. None if no
    earlier plan has this graph's structure or none fits."""
    for sp in previous:
        old = sp.result
        if (old.schedule is None or getattr(old, "host_plan", None) is not None
                or not _same_structure(sp.eg.graph, eg.graph)):
            continue
        sim = simulate(eg.graph, old.schedule)
        if sim.peak_memory_bytes > budget_bytes:
            continue
        shapes = sp.eg.graph.meta.get("input_shapes")
        log.info("plan for %s: the schedule of the plan for shapes %s fits its budget (re-simulated): not solved",
                 _describe(eg), shapes)
        return RematResult(status=SolveStatus.FEASIBLE, schedule=old.schedule, objective=float(sim.total_cost),
                           peak_memory_bytes=int(sim.peak_memory_bytes), budget_bytes=int(budget_bytes),
                           method="derived", message=f"derived: the schedule of the plan for shapes {shapes} "
                           f"({old.method}), re-simulated on these shapes",
                           stats={"derived_from": shapes, "derived_method": old.method})
    return None


def _build(model, args, kwargs, s: _Settings, loaded: dict, require_loaded: bool = False,
           grad_outputs: Any = "loss", kept_outputs=(), rescue: bool = False, previous=()) -> _Specialization:
    """Trace, then reuse a loaded schedule or solve one: a specialization for this call.

    ``previous``: earlier plans of the module, most recent first; a new batch shape whose graph has the
    structure of one of them takes its schedule when that fits the budget (:func:`_derive`).

    With ``rescue`` (calls after the first), a budget without a plan is replaced by the smallest one a
    method finds (:func:`_rescue`, with a warning) instead of raising.

    With ``require_loaded`` (the call given to ``rematerialize(..., plan=)``) a call no saved plan fits is
    an error; later calls (a smaller last batch) are solved.
    """
    _check_input_dtypes(model, args, kwargs, s)
    t0 = time.perf_counter()
    eg = _extract_cached(model, args, kwargs, s, loaded, grad_outputs, kept_outputs)
    t1 = time.perf_counter()
    fp = graph_fingerprint(eg)
    entry = loaded.get(fp) if loaded else None
    if loaded and entry is None and require_loaded:
        known = "; ".join(sorted({e.get("description", "?") for e in loaded.values()}))
        raise RematError(
            f"`plan`: the saved plans were made for another model, shape or dtype ({known}); this call is "
            f"{_describe(eg)} (graph fingerprint {fp[:12]}). Solve a new plan (omit `plan=`) or save one "
            "for these inputs")
    if entry is not None and entry.get("host_plan") is not None:   # a saved plan with copies to host memory
        from remat_core.host import host_result_from_dict

        result = host_result_from_dict(eg.graph, entry, argument="plan")   # re-simulated; errors name `plan`
        budget_bytes, hoist = result.budget_bytes, bool(entry.get("hoist", s.hoist))
    elif entry is not None and entry.get("schedule") is None and entry.get("sequence") is not None:
        from remat_core.sequence import OpSequence, simulate_sequence

        seq = OpSequence.from_dict(entry["sequence"])   # InvalidScheduleError on a malformed one
        sim = simulate_sequence(eg.graph, seq)          # names the event of an invalid sequence
        budget_bytes = int(entry["budget_bytes"])
        if sim.peak_memory_bytes > budget_bytes:
            raise RematError(f"`plan`: the saved sequence peaks at {format_bytes(sim.peak_memory_bytes)} on this "
                             f"graph, over its budget {format_bytes(budget_bytes)}")
        result = RematResult(status=SolveStatus.FEASIBLE, message=f"loaded ({entry.get('method')})", sequence=seq,
                             objective=float(sim.total_cost), peak_memory_bytes=int(sim.peak_memory_bytes),
                             budget_bytes=budget_bytes, method="loaded", stats={"saved_method": entry.get("method")})
        hoist = bool(entry.get("hoist", s.hoist))
    elif entry is not None:
        schedule = Schedule.from_dict(entry["schedule"])
        sim = simulate(eg.graph, schedule)
        budget_bytes = int(entry["budget_bytes"])
        if sim.peak_memory_bytes > budget_bytes:
            raise RematError(f"`plan`: the saved schedule peaks at {format_bytes(sim.peak_memory_bytes)} on this "
                             f"graph, over its budget {format_bytes(budget_bytes)}")
        result = RematResult(status=SolveStatus.FEASIBLE, message=f"loaded ({entry.get('method')})",
                             schedule=schedule, objective=float(sim.total_cost),
                             peak_memory_bytes=int(sim.peak_memory_bytes), budget_bytes=budget_bytes,
                             method="loaded", stats={"saved_method": entry.get("method")})
        hoist = bool(entry.get("hoist", s.hoist))
    else:
        if loaded:
            log.info("no saved plan fits %s: solving one", _describe(eg))
        budget_bytes = _resolve_budget(eg.graph, 1.0 if s.budget is None else s.budget)
        result = _derive(eg, budget_bytes, previous)
        if result is None:
            result = _solve(eg.graph, budget_bytes, s)
        if not result.success and rescue:
            result, budget_bytes = _rescue(eg, budget_bytes, result, s)
        if not result.success:
            raise _infeasible(eg, budget_bytes, result, s)
        if s.granularity == "auto" or (s.method == "auto" and result.schedule is not None
                                       and int(result.schedule.compute_counts().max()) > 1):
            # a granularity the caller chose is kept, unless auto recomputes there for what its grouping costs
            eg, result = _no_remat_at_op_level(eg, model, args, kwargs, result, budget_bytes, s.hoist)
        hoist = s.hoist
    if entry is not None and s.budget is not None:   # a budget given beside `plan` still holds
        wanted = _resolve_budget(eg.graph, s.budget)
        if result.peak_memory_bytes > wanted:
            raise RematError(
                f"`plan`: the saved plan for {_describe(eg)} peaks at {format_bytes(result.peak_memory_bytes)} "
                f"(made for a budget of {format_bytes(result.budget_bytes)}), over `budget` {s.budget!r} = "
                f"{format_bytes(wanted)}; omit `plan` to solve within this budget, or omit `budget` to use the "
                "saved plan")
    plan = make_plan(eg.graph, _planned(result), hoist=hoist)
    log.info("plan for %s: %s, predicted peak %s, cost %s (trace %.1f s, plan %.1f s)", _describe(eg), result.method,
             format_bytes(result.peak_memory_bytes), result.objective, t1 - t0, time.perf_counter() - t1)
    return _Specialization(eg, result, plan, s.measure, attrs=None)


def _parallel_wrappers() -> tuple:
    """Module wrappers whose ``forward`` does the parallelism (DDP's reduction set-up, DataParallel's scatter,
    FSDP1's unshard): a planned step never calls it."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    out = [DataParallel, DistributedDataParallel]
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        out.append(FullyShardedDataParallel)
    except ImportError:   # a torch built without distributed
        pass
    return tuple(out)


def rematerialize(
    model,
    example_inputs=(),
    budget: Any = None,
    method: str = "auto",
    granularity: str = "auto",
    blocks: Sequence[Any] | None = None,
    cost_model: str = "flops",
    autocast_dtype: Any = None,
    hoist: bool = True,
    measure: bool = False,
    solver_options: dict | None = None,
    workspace: str | None = None,
    *,
    example_kwargs: dict | None = None,
    time_limit_s: float | None = 60.0,
    plan: Any = None,
    max_plans: int = 8,
    host_bandwidth: Any = None,
):
    """Make ``model`` train inside a memory budget with a plan from ``method``.

    Parameters
    ----------
    model : torch.nn.Module
        In training mode.
    example_inputs : tensor or tuple
        Positional arguments of a typical call (the first plan is made for
        them; other shapes get their own plans on first sight). Tuples, lists
        and dicts of tensors and plain values are accepted.
    budget : int, str or float, optional
        Default: 1.0, or with ``plan`` the saved plan's budget. Total device bytes (fixed bytes included) as an ``int`` or a size
        string (``"8GiB"``, ``"800MB"``); or a fraction in ``[0, 1]`` of
        *activation* memory (``fixed + f * (checkpoint-all peak - fixed)``,
        PyTorch's ``activation_memory_budget``). A fraction is resolved per
        plan, so a smaller batch gets the same fraction of its own memory;
        where that fraction has no plan for a later call's shape (the
        gradients weigh more in a small last batch), the call is planned at
        the smallest budget a method finds for it, with a warning, instead of
        failing in the middle of training.
    method : str
        ``"auto"`` (default: the best plan found within ``time_limit_s``,
        the method chosen by problem size) or any method of
        :func:`remat_core.available_methods`.
    granularity : {"auto", "op", "module", "block"}
        ``"auto"`` (default) plans at op level when ``auto``'s size rule gives
        the op-level graph to a formulation (``ilp`` or ``lp-rounding``,
        :func:`remat_core.solvers.auto.choose_path`), and at module level
        otherwise: op-level plans can express every module-level plan, so
        they are at least as cheap whenever the solver can handle the graph.
        With ``"auto"``, a module-level plan that recomputes nothing is made
        at op level when it peaks lower there (as eager PyTorch, each value
        is freed after its own last use; a node of several ops frees its
        inputs after its last op).
    blocks : sequence of str or torch.nn.Module, optional
        For ``granularity="block"``.
    cost_model : {"flops", "profile", "unit"}
    autocast_dtype : torch.dtype, optional
        Train under ``torch.autocast(dtype=autocast_dtype)``.
    hoist : bool
        Free each tensor right after its last use (default).
    measure : bool
        Measure node temporaries op by op (slower; for checking).
    solver_options : dict, optional
        Passed to :func:`remat_core.solve`.
    workspace : {"estimate", "measure"}, optional
        How node temporaries are found; see :func:`remat_torch.extract_graph`.
    example_kwargs : dict, optional
        Keyword arguments of a typical call (``model(**batch)``).
    time_limit_s : float or None
        Solver time per plan for ``"auto"`` and ``"ilp"`` (default 60 s).
        ``"auto"`` stops sooner, 2 s in (``AUTO_PATIENCE_S``), once its plan
        is within 5% of its lower bound; ``solver_options={"patience_s": 8}``
        searches longer.
    plan : str or os.PathLike, optional
        A file written by :meth:`RematModule.save_plan`: its schedules are
        used without solving for calls whose graph matches one of them; a
        call it does not fit raises :class:`RematError`.
    max_plans : int
        Plans kept (least recently used dropped first).
    host_bandwidth : float or str, optional
        Also offload activations to host memory over a link of this many
        bytes/s (``"16GB/s"``): the plan keeps, offloads or recomputes each
        value (:func:`remat_core.host.solve_offload`; see :doc:`/offload`).
        ``None`` (default) or ``0``: remat alone.

    Returns
    -------
    RematModule

    Raises
    ------
    BudgetInfeasibleError
        No plan fits the budget; the message gives the smallest feasible
        budget (bytes and activation fraction) and the module that sets it.
    UnsupportedModelError
        The model cannot be traced (the message names the module and source
        line, and suggests :func:`remat_torch.dtr` for data-dependent models).
    RematError
        Called under ``torch.no_grad()``, or a ``plan`` that does not fit.
    TypeError, ValueError
        On bad arguments (naming the argument).

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
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}")
    wrappers = _parallel_wrappers()
    wrapper = next((n or "<root>" for n, m in model.named_modules() if isinstance(m, wrappers)), None)
    if wrapper is not None:   # its forward (bucketed gradient reduction, scatter) would run only while traced
        raise RematError(
            f"`model` holds a {type(model.get_submodule('' if wrapper == '<root>' else wrapper)).__name__} "
            f"(module {wrapper!r}): its forward, which sets up the gradient reduction or the scatter, would run "
            "only while the model is traced, never in the planned steps, so gradients would silently stop being "
            "reduced. Rematerialize the bare model and wrap the result instead: "
            "DistributedDataParallel(remat_torch.rematerialize_shared(model, batch, budget=...))")
    sharded = next((n for n, p in model.named_parameters() if type(p).__name__ == "DTensor"), None)
    if sharded is not None:   # tracing would fail deep inside with "mixed torch.Tensor and DTensor"
        raise RematError(f"parameter {sharded!r} of `model` is already sharded (a DTensor, FSDP2): rematerialize "
                         "the model first, then shard it (fully_shard on the RematModule, or "
                         "remat_torch.distributed.fully_shard_blocks for per-block sharding)")
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        raise RematError("rematerialize traces the training step (forward and backward), which needs autograd: "
                         "call it outside `torch.no_grad()` / `torch.inference_mode()`")
    if granularity not in GRANULARITIES + ("auto",):
        raise ValueError(f"`granularity` must be 'auto' or one of {GRANULARITIES}; got {granularity!r}")
    if not isinstance(method, str):
        raise TypeError(f"`method` must be a string; got {type(method).__name__}")
    if isinstance(max_plans, bool) or not isinstance(max_plans, int) or max_plans < 1:
        raise ValueError(f"`max_plans` must be a positive integer; got {max_plans!r}")
    if time_limit_s is not None and (isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float))
                                     or not time_limit_s > 0):
        raise ValueError(f"`time_limit_s` must be a positive number or None; got {time_limit_s!r}")
    if solver_options is not None and not isinstance(solver_options, dict):
        raise TypeError(f"`solver_options` must be a dict; got {type(solver_options).__name__}")
    if host_bandwidth is not None:   # solve routes it to remat_core.host (None or 0: remat alone)
        from remat_core.host import validate_bandwidth

        if validate_bandwidth(host_bandwidth) is not None:   # only plans with a schedule: plan files save those
            solver_options = {**(solver_options or {}), "host_bandwidth": host_bandwidth, "schedule_required": True}
    loaded = _load_plans(plan) if plan is not None else {}
    if budget is None and not loaded:
        budget = 1.0
    if budget is not None:  # check the budget's form before tracing
        from remat_core.units import _as_fraction, parse_bytes

        try:  # remat_core.units names the argument in its errors (newer signature)
            f = _as_fraction(budget, "budget")
        except TypeError:
            f = _as_fraction(budget)
        if f is None:
            parse_bytes(budget, "budget")
        elif not 0.0 <= f <= 1.0:
            raise ValueError(f"`budget` as a fraction of activation memory must be in [0, 1]; got {budget!r} "
                             "(give bytes as an int or a size such as '8GiB')")
    settings = _Settings(budget=budget, method=method, granularity=granularity, blocks=blocks,
                         cost_model=cost_model, autocast_dtype=autocast_dtype, hoist=hoist, measure=measure,
                         solver_options=dict(solver_options or {}), time_limit_s=time_limit_s,
                         workspace=workspace, max_plans=max_plans)
    defaults = _defaults_for(model)
    args = _as_tuple_inputs(example_inputs)
    kwargs = dict(example_kwargs or {})
    for k, v in defaults.items():
        kwargs.setdefault(k, v)
    first = _build(model, args, kwargs, settings, loaded, require_loaded=bool(loaded))
    if settings.budget is None:  # later plans get the loaded plan's fraction of activation memory
        settings.budget = (min(1.0, max(0.0, budget_fraction(first.eg.graph, first.result.budget_bytes)))
                           if loaded else 1.0)
    rm = RematModule(model, settings, None, loaded, call_defaults=defaults)
    call, tensors = CallSpec.from_call(args, kwargs)
    attrs = rm._attr_snapshot.take()
    first.attrs = attrs
    device_type = tensors[0].device.type if tensors else "cpu"
    first.sig = _signature_key(call, tensors)
    # the first plan was traced under `autocast_dtype` (the call's autocast setting later picks the plan)
    key = ("plan", first.sig, _grad_flags(model), str(settings.autocast_dtype), hash(attrs), frozenset(),
           frozenset())
    rm._insert(key, first)
    object.__setattr__(rm, "_current", first)
    rm.solves = int(first.result.method != "loaded")
    return rm


def train_step(model, inputs, loss_fn: Callable, optimizer=None, zero_grad: bool = True):
    """One training step: forward, ``loss_fn(output)``, backward, optimizer step.

    Parameters
    ----------
    model : RematModule or torch.nn.Module
    inputs : torch.Tensor, tuple or dict
        Positional inputs, or a dict of keyword inputs (``model(**inputs)``).
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
    if optimizer is not None and zero_grad:
        optimizer.zero_grad(set_to_none=True)
    if isinstance(inputs, dict):
        out = model(**inputs)
    else:
        out = model(*_as_tuple_inputs(inputs))
    loss = loss_fn(out)
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    return loss.detach()
