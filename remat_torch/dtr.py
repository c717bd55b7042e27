"""Dynamic Tensor Rematerialization live in PyTorch: train under a byte budget with no plan.

:func:`dtr` is a context manager. Inside it every ATen operator call goes
through a ``TorchDispatchMode``; each tensor an operator produces is returned
as a :class:`DTRTensor`, a wrapper whose storage the runtime may free at any
time (eviction) and recompute when it is read again (rematerialization, by
replaying the operator that produced it, recursively). It works below
autograd, so the model's code, its control flow (which may depend on the
data, such as a tree-structured network built from the input) and
``loss.backward()`` run unchanged:

>>> import torch
>>> import remat_torch
>>> model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
>>> x = torch.randn(32, 64)
>>> with remat_torch.dtr(budget="64KiB") as rt:
...     loss = model(x).square().mean()
...     loss.backward()
>>> rt.stats["peak_bytes"] <= 64 * 1024
True

What the runtime tracks
-----------------------
* **Memory.** The bytes of every storage an operator produced inside the
  block and that is resident (views share their base's storage and are
  counted once). Parameters, the inputs given to the model, and tensors made
  outside the block are fixed bytes: never evicted, not counted. So
  ``budget`` is a budget on activation memory (the tensors the forward and
  backward pass create), in bytes (an ``int`` or a size string, see
  :func:`remat_core.units.parse_bytes`). A fraction of the activation memory
  needs that memory first: :func:`activation_peak_bytes` runs a step with
  tracking only and returns it, so ``budget=int(0.5 *
  activation_peak_bytes(step))`` is half of eager's activation memory.
* **Cost.** Each operator's wall time, measured when it first runs.
* **Staleness.** A logical clock advanced by every operator call; a value's
  staleness is the time since it was last read or written.

Before an operator runs, the bytes of its new outputs are found by running
it on meta tensors, and values are evicted until they fit: the tracked peak
stays within the budget. The value evicted is the resident, evictable one
with the lowest score (``heuristic``): ``"h_dtr"`` (the default) ``(cost + cost of its
evicted ancestors) / (bytes * staleness)``, ``"h_dtr_local"`` ``cost /
(bytes * staleness)``, ``"lru"`` or ``"largest"``. The inputs of the operator
being run (and those of a recomputation in progress) are pinned. When no
value can be evicted and the new outputs still do not fit,
:class:`~remat_core.errors.BudgetInfeasibleError` is raised naming the
bytes needed.

Training semantics (as in eager)
--------------------------------
* Operators that draw random numbers (dropout) are replayed from the CPU
  generator state saved when they first ran, so a recomputed mask is the
  same mask; the generator's current state is restored afterwards.
* Operators that write into a tensor that is not the runtime's (BatchNorm's
  running statistics) write into a copy when replayed: the running
  statistics are updated once per step, as in eager.
* An in-place operator on a runtime tensor gives it a new identity: the
  value before the write stays recomputable by its old recipe for the
  tensors computed from it, and the new value's recipe replays the write on
  a copy of the old one. In-place writes into views of runtime tensors are
  refused (``NotImplementedError``).
* When the block exits, the ``.grad`` of every leaf tensor the block read
  becomes a plain tensor. Tensors returned from the block stay usable.

Outputs are recomputed with the same kernels on the same inputs, so on CPU
the gradients are those of eager execution bit for bit (the tests compare
them).

This is the runtime for models that :func:`remat_torch.rematerialize`
cannot trace. It is a Python-level prototype: each operator pays
interpreter overhead (about tens of microseconds), which matters for small
operators; see ``benchmarks/README.md`` (section ``dtr``).
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from remat_core.errors import BudgetInfeasibleError
from remat_core.units import format_bytes, parse_bytes

__all__ = ["dtr", "DTRRuntime", "DTRTensor", "activation_peak_bytes", "HEURISTICS"]

HEURISTICS = ("h_dtr", "h_dtr_local", "lru", "largest")
_aten = torch.ops.aten


def _nbytes(t: torch.Tensor) -> int:
    """Bytes of the storage ``t`` lives in."""
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return int(t.numel() * t.element_size())


class _Value:
    """One tensor value the runtime manages: its data (or ``None`` when evicted) and how to recompute it."""

    __slots__ = ("tensor", "func", "args", "kwargs", "index", "siblings", "rng_state", "cost_s", "nbytes",
                 "base", "views", "last_access", "pins", "wrappers", "unevictable", "__weakref__")

    def __init__(self, func: Callable, args: Any, kwargs: Any, index: int, rng_state: Any, cost_s: float,
                 base: "_Value | None"):
        self.tensor: torch.Tensor | None = None
        self.func, self.args, self.kwargs, self.index = func, args, kwargs, index
        self.siblings: list[weakref.ref] = []   # the other outputs of the same call (refilled by one replay)
        self.rng_state = rng_state
        self.cost_s = cost_s
        self.nbytes = 0              # counted on the storage owner only (base is None)
        self.base = base             # the value whose storage this one views (its owner), or None
        self.views: weakref.WeakSet = weakref.WeakSet()
        self.last_access = 0
        self.pins = 0
        self.wrappers = 0            # live DTRTensor objects pointing at this value
        self.unevictable = False


class DTRTensor(torch.Tensor):
    """A tensor whose data the DTR runtime may evict and recompute (see :mod:`remat_torch.dtr`)."""

    _v: _Value
    _rt: "DTRRuntime"

    @staticmethod
    def __new__(cls, value: _Value, runtime: "DTRRuntime", like: torch.Tensor):
        r = torch.Tensor._make_wrapper_subclass(
            cls, like.size(), strides=like.stride(), storage_offset=like.storage_offset(), dtype=like.dtype,
            device=like.device, layout=like.layout, requires_grad=False)
        r._v = value
        r._rt = runtime
        value.wrappers += 1
        weakref.finalize(r, runtime._wrapper_died, weakref.ref(value))
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"DTRTensor({self._rt.materialize(self._v)!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        rt = next(a._rt for a in _flat(args, kwargs) if isinstance(a, DTRTensor))
        return rt.call(func, args, kwargs or {})


def tree_map(fn: Callable, obj: Any) -> Any:
    """``fn`` applied to every leaf of nested tuples, lists and dicts (operator arguments are no deeper)."""
    if isinstance(obj, tuple):
        return tuple([tree_map(fn, a) for a in obj])
    if isinstance(obj, list):
        return [tree_map(fn, a) for a in obj]
    if isinstance(obj, dict):
        return {k: tree_map(fn, a) for k, a in obj.items()}
    return fn(obj)


def _flat(args: Any, kwargs: Any) -> list:
    out: list = []
    tree_map(out.append, (args, kwargs))
    return out


class _Mode(TorchDispatchMode):
    def __init__(self, runtime: "DTRRuntime"):
        super().__init__()
        self.runtime = runtime

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.runtime.call(func, args, kwargs or {})


class DTRRuntime:
    """The state of one :func:`dtr` block: resident values, clock, budget and counters.

    Attributes
    ----------
    budget_bytes : int or None
        ``None``: track only, never evict.
    stats : dict
        ``peak_bytes`` (the largest tracked resident bytes), ``current_bytes``,
        ``evictions``, ``rematerializations`` (operator replays),
        ``operators`` (first-time operator calls).
    """

    def __init__(self, budget_bytes: int | None, heuristic: str = "h_dtr", max_replay_factor: float = 50.0):
        if heuristic not in HEURISTICS:
            raise ValueError(f"`heuristic` must be one of {', '.join(HEURISTICS)}; got {heuristic!r}")
        if isinstance(max_replay_factor, bool) or not isinstance(max_replay_factor, (int, float)) \
                or not max_replay_factor > 0:
            raise ValueError(f"`max_replay_factor` must be a positive number; got {max_replay_factor!r}")
        self.max_replay_factor = float(max_replay_factor)
        self.budget_bytes = budget_bytes
        self.heuristic = heuristic
        self.clock = 0
        self.current = 0
        self.resident: dict[int, _Value] = {}   # id -> storage owners holding data
        self.leaves: dict[int, weakref.ref] = {}   # the leaf tensors read in the block (for their .grad)
        self.stats = dict(peak_bytes=0, current_bytes=0, evictions=0, rematerializations=0, operators=0)
        self._mode = _Mode(self)

    # ------------------------------------------------------------------ accounting
    def _charge(self, v: _Value) -> None:
        self.current += v.nbytes
        self.resident[id(v)] = v
        self.stats["peak_bytes"] = max(self.stats["peak_bytes"], self.current)
        self.stats["current_bytes"] = self.current

    def _drop(self, owner: _Value) -> None:
        """Free the data of ``owner`` and of every view of it."""
        for w in list(owner.views):
            w.tensor = None
        owner.tensor = None
        if self.resident.pop(id(owner), None) is not None:
            self.current -= owner.nbytes
            self.stats["current_bytes"] = self.current

    def _wrapper_died(self, ref: weakref.ref) -> None:
        v = ref()
        if v is None:
            return
        v.wrappers -= 1
        self._free_if_dead(v)

    def _free_if_dead(self, v: _Value) -> None:
        """Free the storage of ``v`` when no tensor refers to it or to a view of it (DTR's eager eviction: it
        can still be recomputed for a value computed from it)."""
        owner = v.base or v
        if owner.tensor is not None and owner.wrappers == 0 and owner.pins == 0 \
                and not any(w.wrappers or w.pins for w in owner.views):
            self._drop(owner)

    def _score(self, v: _Value) -> float:
        stale = float(self.clock - v.last_access + 1)
        m = float(max(v.nbytes, 1))
        if self.heuristic == "lru":
            return float(v.last_access)
        if self.heuristic == "largest":
            return -m
        cost = v.cost_s
        if self.heuristic == "h_dtr":
            cost += self._evicted_ancestor_cost(v)
        return cost / (m * stale)

    def _evicted_ancestor_cost(self, v: _Value) -> float:
        seen, total, stack = {id(v)}, 0.0, [v]
        while stack:
            x = stack.pop()
            for a in _flat(x.args, x.kwargs):
                if isinstance(a, _Value) and id(a) not in seen and a.tensor is None:
                    seen.add(id(a))
                    total += a.cost_s
                    stack.append(a)
        return total

    def _make_room(self, need: int) -> None:
        if self.budget_bytes is None:
            return
        while self.current + need > self.budget_bytes:
            best, best_score = None, 0.0
            for v in self.resident.values():
                if v.pins or v.unevictable or any(w.pins for w in v.views):
                    continue
                s = self._score(v)
                if best is None or s < best_score:
                    best, best_score = v, s
            if best is None:
                raise BudgetInfeasibleError(
                    f"the DTR budget {format_bytes(self.budget_bytes)} is too small: an operator needs "
                    f"{format_bytes(self.current + need)} resident at once (its inputs and outputs and "
                    f"what is pinned), with nothing left to evict",
                    budget_bytes=self.budget_bytes, min_budget_bytes=self.current + need)
            self._drop(best)
            self.stats["evictions"] += 1

    # ------------------------------------------------------------------ values
    def materialize(self, v: _Value) -> torch.Tensor:
        """The data of ``v``, recomputed if it was evicted."""
        if v.tensor is None:
            limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(limit, 20000))
            try:
                self._remat(v)
            finally:
                sys.setrecursionlimit(limit)
        self.clock += 1
        v.last_access = self.clock
        if v.base is not None:
            v.base.last_access = self.clock
        return v.tensor

    def _pin(self, v: _Value, delta: int) -> None:
        v.pins += delta
        if v.base is not None:
            v.base.pins += delta

    def _remat(self, v: _Value) -> None:
        parents = [a for a in _flat(v.args, v.kwargs) if isinstance(a, _Value)]
        done = []
        try:
            for p in parents:
                if p.tensor is None:
                    self._remat(p)
                self._pin(p, 1)
                done.append(p)
            if v.base is None:
                self._make_room(v.nbytes)
            elif v.base.tensor is None:   # the owner was evicted too: recompute it first (counted there)
                self._remat(v.base)
            out = self._run(v.func, v.args, v.kwargs, v.rng_state, replay=True)[0]
        finally:
            for p in done:
                self._pin(p, -1)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.stats["rematerializations"] += 1
        if self.budget_bytes is not None and \
                self.stats["rematerializations"] > self.max_replay_factor * max(self.stats["operators"], 100):
            raise BudgetInfeasibleError(
                f"the DTR budget {format_bytes(self.budget_bytes)} thrashes: {self.stats['rematerializations']} "
                f"replays for {self.stats['operators']} operators (more than {self.max_replay_factor:g} per "
                "operator); give it more memory", budget_bytes=self.budget_bytes)
        v.tensor = outs[v.index]
        if v.base is None:
            self._charge(v)
        # the call produced the siblings too: keep those that were evicted while there is room
        for ref in v.siblings:
            s = ref()
            if s is not None and s.tensor is None and s.base is None and (
                    self.budget_bytes is None or self.current + s.nbytes <= self.budget_bytes):
                s.tensor = outs[s.index]
                self._charge(s)
        # a parent no tensor refers to was only needed for this one: free it again (unless v views its storage)
        for p in done:
            if v.base is None or (p.base or p) is not v.base:
                self._free_if_dead(p)

    def _unwrap(self, a: Any) -> Any:
        return self.materialize(a) if isinstance(a, _Value) else a

    def _run(self, func, vargs, vkwargs, rng_state, replay: bool) -> tuple[Any, float]:
        """Run ``func`` on the data of ``vargs``; on a replay, from the saved generator state and without
        writing into tensors that are not the runtime's."""
        args, kwargs = tree_map(self._unwrap, (vargs, vkwargs))
        if replay:
            args, kwargs = _copy_written(func, args, kwargs)
        saved = None
        if replay and rng_state is not None:
            saved = torch.get_rng_state()
            torch.set_rng_state(rng_state)
        try:
            start = time.perf_counter()
            out = func(*args, **kwargs)
            return out, time.perf_counter() - start
        finally:
            if saved is not None:
                torch.set_rng_state(saved)

    # ------------------------------------------------------------------ the operator hook
    def call(self, func, args: Any, kwargs: dict) -> Any:
        """Run one operator call: pin and materialize the inputs, make room, run, wrap the outputs."""
        if func is _aten._local_scalar_dense.default or func.overloadpacket in _PASSTHROUGH:
            a, k = tree_map(self._materialize_arg, (args, kwargs))
            return func(*a, **k)
        schema = func._schema
        written = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
        for a in _flat(args, kwargs):
            if isinstance(a, torch.Tensor) and not isinstance(a, DTRTensor) and a.is_leaf:
                self.leaves.setdefault(id(a), weakref.ref(a))
        vargs, vkwargs = tree_map(lambda a: a._v if isinstance(a, DTRTensor) else a, (args, kwargs))
        in_values = [a for a in _flat(vargs, vkwargs) if isinstance(a, _Value)]
        inplace_targets = [args[i] for i in written if i < len(args) and isinstance(args[i], DTRTensor)]
        for t in inplace_targets:
            if t._v.base is not None or any(w.wrappers for w in t._v.views):
                raise NotImplementedError(
                    f"remat_torch.dtr: in-place operator {func} writes into a view of a tensor the DTR runtime "
                    "manages (or a tensor with live views); this is not supported")
        for v in in_values:
            self.materialize(v)
            self._pin(v, 1)
        try:
            self._make_room(_new_bytes(func, args, kwargs, schema) if self.budget_bytes is not None else 0)
            rng_state = torch.get_rng_state() if torch.Tag.nondeterministic_seeded in func.tags else None
            if inplace_targets:
                # the write gets a value of its own; the old value stays recomputable by its recipe
                target = inplace_targets[0]
                old = target._v
                pos = next(i for i in written if i < len(args) and args[i] is target)
                fn = _InplaceReplay(func, pos)
                vargs = tuple(old if i == pos else a for i, a in enumerate(vargs))
                new = _Value(fn, vargs, vkwargs, 0, rng_state, 0.0, None)
                new.nbytes, new.last_access = old.nbytes, self.clock
                new.tensor = old.tensor
                out, cost = self._run(func, vargs, vkwargs, rng_state, replay=False)
                new.cost_s = cost
                # the old storage now holds the new value
                old.tensor = None
                self.resident.pop(id(old), None)
                self.resident[id(new)] = new
                self._retarget(target, new)
                self.stats["operators"] += 1
                return target if out is new.tensor or not isinstance(out, torch.Tensor) else \
                    self._wrap_outputs(func, vargs, vkwargs, out, rng_state, cost, schema, args)
            out, cost = self._run(func, vargs, vkwargs, rng_state, replay=False)
        finally:
            for v in in_values:
                self._pin(v, -1)
        self.stats["operators"] += 1
        return self._wrap_outputs(func, vargs, vkwargs, out, rng_state, cost, schema, args)

    def _retarget(self, wrapper: DTRTensor, new: _Value) -> None:
        old = wrapper._v
        old.wrappers -= 1
        wrapper._v = new
        new.wrappers += 1
        weakref.finalize(wrapper, self._wrapper_died, weakref.ref(new))

    def _materialize_arg(self, a: Any) -> Any:
        return self.materialize(a._v) if isinstance(a, DTRTensor) else a

    def _wrap_outputs(self, func, vargs, vkwargs, out, rng_state, cost, schema, args) -> Any:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        plain_in = [a for a in _flat(args, {}) if isinstance(a, torch.Tensor)]
        made: list[_Value] = []
        wrapped = []
        for idx, o in enumerate(outs):
            if not isinstance(o, torch.Tensor):
                wrapped.append(o)
                continue
            alias = idx < len(schema.returns) and schema.returns[idx].alias_info is not None
            base_wrapper = None
            if alias:
                base_wrapper = next((a for a in plain_in if isinstance(a, DTRTensor) and a._v.tensor is not None
                                     and _same_storage(a._v.tensor, o)), None)
                if base_wrapper is None:   # it aliases a tensor that is not ours: return it as it is
                    wrapped.append(o)
                    continue
            owner = None if base_wrapper is None else (base_wrapper._v.base or base_wrapper._v)
            v = _Value(func, vargs, vkwargs, idx, rng_state, cost, owner)
            v.tensor = o
            v.last_access = self.clock
            if owner is None:
                v.nbytes = _nbytes(o)
                self._charge(v)
            else:
                owner.views.add(v)
            made.append(v)
            wrapped.append(DTRTensor(v, self, o))
        for v in made:
            v.siblings = [weakref.ref(s) for s in made if s is not v]
        if isinstance(out, tuple):
            return tuple(wrapped)
        if isinstance(out, list):
            return wrapped
        return wrapped[0]

    # ------------------------------------------------------------------ block
    def __enter__(self) -> "DTRRuntime":
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        if exc[0] is not None:
            return
        for ref in self.leaves.values():
            leaf = ref()
            g = None if leaf is None else leaf.grad
            if isinstance(g, DTRTensor):
                leaf.grad = self.materialize(g._v).clone()
        for v in list(self.resident.values()):
            self._free_if_dead(v)
        self.budget_bytes = None   # what the block returns is read without a budget from here on


_PASSTHROUGH = {_aten.is_same_size, _aten.sym_size, _aten.sym_stride, _aten.sym_numel, _aten.sym_storage_offset,
                _aten.equal, _aten.allclose, _aten.is_nonzero}


# operators that write into arguments their schema does not mark as written (the running statistics)
_UNANNOTATED_WRITES = {f: {3, 4} for f in (_aten.native_batch_norm.default, _aten.cudnn_batch_norm.default,
                                           _aten.miopen_batch_norm.default)}


class _InplaceReplay:
    """Replays an in-place operator on a copy of the value it wrote into (argument ``pos``)."""

    def __init__(self, func, pos: int):
        self.func, self.pos = func, pos
        self.tags = func.tags

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tuple(a.clone() if i == self.pos else a for i, a in enumerate(args))
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"inplace({self.func})"


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False


def _copy_written(func, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` with every tensor the operator writes into copied (the replay must not write twice)."""
    if isinstance(func, _InplaceReplay):
        return args, kwargs
    schema = func._schema
    names = [a.name for a in schema.arguments]
    written = {i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write}
    written |= _UNANNOTATED_WRITES.get(func, set())
    if not written:
        return args, kwargs
    args = tuple(a.clone() if i in written and isinstance(a, torch.Tensor) else a for i, a in enumerate(args))
    kwargs = {k: (a.clone() if k in names and names.index(k) in written and isinstance(a, torch.Tensor) else a)
              for k, a in kwargs.items()}
    return args, kwargs


_NEW_BYTES_CACHE: dict = {}
_NEW_BYTES_CACHE_SIZE = 4096


def _signature(a: Any) -> Any:
    """A hashable key of an operator argument that fixes the sizes of the operator's outputs: a tensor's shape,
    strides and dtype, other values themselves (``TypeError`` for a value that cannot be a key)."""
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.size()), tuple(a.stride()), a.dtype)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__,) + tuple(_signature(x) for x in a)
    if isinstance(a, dict):
        return ("D",) + tuple((k, _signature(v)) for k, v in sorted(a.items()))
    hash(a)
    return (type(a).__name__, a)


def _new_bytes(func, args: tuple, kwargs: dict, schema) -> int:
    """Bytes of the new storages ``func`` will allocate: from a run on meta tensors (0 if it cannot run there),
    remembered per operator and argument signature (the meta run is most of the runtime's cost per small
    operator; benchmarks/README.md, section dtr)."""
    try:
        key = (func, _signature(args), _signature(kwargs))
    except TypeError:
        return _new_bytes_on_meta(func, args, kwargs, schema)
    got = _NEW_BYTES_CACHE.get(key)
    if got is None:
        got = _new_bytes_on_meta(func, args, kwargs, schema)
        if len(_NEW_BYTES_CACHE) >= _NEW_BYTES_CACHE_SIZE:
            _NEW_BYTES_CACHE.pop(next(iter(_NEW_BYTES_CACHE)))
        _NEW_BYTES_CACHE[key] = got
    return got


def _new_bytes_on_meta(func, args: tuple, kwargs: dict, schema) -> int:
    def meta(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device="meta")
        return a

    try:
        with torch.utils._python_dispatch._disable_current_modes():
            out = func(*tree_map(meta, args), **tree_map(meta, kwargs))
    except Exception:   # no meta kernel: no room made beforehand (the charge after the call still counts)
        return 0
    outs = out if isinstance(out, (tuple, list)) else (out,)
    total = 0
    for idx, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and not (idx < len(schema.returns) and schema.returns[idx].alias_info):
            total += int(o.untyped_storage().nbytes()) if o.numel() else 0
    return total


@contextlib.contextmanager
def dtr(budget: Any = None, heuristic: str = "h_dtr", max_replay_factor: float = 50.0) -> Iterator[DTRRuntime]:
    """Run the block under the live DTR runtime with ``budget`` bytes of activation memory.

    Parameters
    ----------
    budget : int, str or None
        Bytes (``4096``, ``"2GiB"``; :func:`remat_core.units.parse_bytes`)
        of activation memory: the storages that operators create inside the
        block (parameters and inputs are not counted). ``None`` tracks only.
        Fractions are not accepted here (use :func:`activation_peak_bytes`
        for the baseline).
    heuristic : str
        ``"h_dtr"`` (default), ``"h_dtr_local"``, ``"lru"`` or ``"largest"``.
        ``h_dtr`` counts the evicted ancestors a value's recomputation would
        replay too, which keeps recursive networks from thrashing at budgets
        where ``h_dtr_local`` does (benchmarks/README.md, section dtr).
    max_replay_factor : float
        More operator replays than this many per operator run (at least 100
        operators counted) is thrashing: ``BudgetInfeasibleError``.

    Yields
    ------
    DTRRuntime
        Its ``stats`` give the tracked peak, evictions and rematerializations.

    Raises
    ------
    TypeError, ValueError
        On a bad ``budget``, ``heuristic`` or ``max_replay_factor`` (naming it).
    BudgetInfeasibleError
        Inside the block, when an operator's inputs and outputs do not fit
        with everything else evicted, or when the run thrashes.
    """
    budget_bytes = None if budget is None else parse_bytes(budget, "budget")
    rt = DTRRuntime(budget_bytes, heuristic, max_replay_factor)
    with rt:
        yield rt


def activation_peak_bytes(step: Callable[[], Any]) -> int:
    """Peak bytes of activation memory that ``step()`` creates, as the DTR runtime counts it (nothing evicted).

    The baseline for a fraction: ``dtr(budget=int(0.5 * activation_peak_bytes(step)))``.
    """
    with dtr(None) as rt:
        step()
    return int(rt.stats["peak_bytes"])
