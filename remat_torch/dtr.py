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
  backward pass create): bytes (an ``int`` or a size string, see
  :func:`remat_core.units.parse_bytes`), or a fraction of eager's activation
  memory, measured by the runtime's first block (run with tracking only).
* **Cost.** By default (``cost="model"``) an estimate from the operator and
  the shapes of its arguments: the floating-point operations of matrix
  products, convolutions and attention (PyTorch's FLOP-counter formulas) or
  the bytes the call reads and writes, at fixed rates, plus a fixed time per
  call (a view costs that alone). It is deterministic: the same budget gives
  the same evictions on any machine and under any load (measured wall
  times, even their minimum, differ between processes, and the eviction
  choices of a recursive network are sensitive to them: the tree net of
  ``benchmarks/bench_dtr.py`` at 0.3 replayed 2,712 operators in one process
  and 11,087 in another, 724 with the estimate). ``cost="measured"``: the
  smallest wall time measured for the same operator on arguments of the
  same shapes in this process (load only adds time).
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
  (and, where CUDA is in use, the current CUDA device's) generator state
  saved when they first ran, so a recomputed mask is the same mask; the
  generators' current states are restored afterwards.
* Operators that write into a tensor that is not the runtime's (BatchNorm's
  running statistics) write into a copy when replayed: the running
  statistics are updated once per step, as in eager.
* An in-place operator on a runtime tensor gives its storage a new value:
  the value before the write stays recomputable by its old recipe for the
  tensors computed from it, and the new value's recipe replays the write on
  a copy of the old one. A write into a view (``shifted[..., 1:] = x``)
  replays the write into the same view of a copy of the owner, and every
  live view of the owner is re-derived from the new value. Writes the
  runtime cannot replay (several outputs at once, ``_foreach_*_`` lists)
  give a value that is never evicted.
* An operator that writes into a tensor outside the runtime that recipes
  read (an optimizer step updating a parameter inside the block) first
  keeps a copy of that tensor's data, used by later replays of what was
  computed from it; the copies are released when the block ends.
* Collectives (``c10d``: FSDP2's all-gather and reduce-scatter, DDP's
  all-reduce) are never replayed: run again on one rank alone they would
  put the ranks' collectives out of step. Their schemas mark no argument
  as written, yet they write (asynchronously) into the tensors they are
  given, so those get new values with no recipe, never evicted and kept
  while a value computed from them lives. A storage that shrinks under
  plain tensors that recipes read (FSDP2 frees the parameters it gathered
  with ``untyped_storage().resize_(0)``, no operator, no version change) is
  copied first, like a tensor about to be written; a replay never reads
  freed memory.
* When the block ends, normally or by an exception, every tensor the block
  made that is still referred to (returned tensors, ``.grad``, optimizer
  state) becomes a plain ``torch.Tensor`` holding its data (a tensor with
  autograd history keeps it), and the runtime lets go of everything else.

Outputs are recomputed with the same kernels on the same inputs, so on CPU
the gradients are those of eager execution bit for bit (the tests compare
them).

This is the runtime for models that :func:`remat_torch.rematerialize`
cannot trace. It is a Python-level prototype: each operator pays
interpreter overhead (about tens of microseconds), which matters for small
operators; see ``benchmarks/README.md`` (section ``dtr``).
"""

from __future__ import annotations

import gc
import logging
import math
import sys
import time
import weakref
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from remat_core.errors import BudgetInfeasibleError
from remat_core.units import _as_fraction, format_bytes, parse_bytes
from remat_torch.meter import AllocatorMeter, _native_stderr_silenced

__all__ = ["dtr", "DTRRuntime", "DTRTensor", "activation_peak_bytes", "HEURISTICS"]

HEURISTICS = ("h_dtr", "h_dtr_local", "lru", "largest")
COST_MODES = ("model", "measured")
_aten = torch.ops.aten
_log = logging.getLogger(__name__)


def _nbytes(t: torch.Tensor) -> int:
    """Bytes of the storage ``t`` lives in."""
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return int(t.numel() * t.element_size())


class _Value:
    """One tensor value the runtime manages: its data (or ``None`` when evicted) and how to recompute it."""

    __slots__ = ("tensor", "func", "args", "kwargs", "index", "siblings", "rng_state", "cost_s", "nbytes",
                 "base", "views", "last_access", "pins", "wrappers", "refs", "unevictable", "stuck", "readers", "versions",
                 "scratch", "parents_", "children", "__weakref__")

    def __init__(self, func: Callable | None, args: Any, kwargs: Any, index: int, rng_state: Any, cost_s: list,
                 base: "_Value | None"):
        self.tensor: torch.Tensor | None = None
        self.func, self.args, self.kwargs, self.index = func, args, kwargs, index
        self.siblings: list[weakref.ref] = []   # the other outputs of the same call (refilled by one replay)
        self.rng_state = rng_state
        self.cost_s = cost_s         # [count, seconds]: the smoothed cost's table entry (shared, live)
        self.nbytes = 0              # counted on the storage owner only (base is None)
        self.base = base             # the value whose storage this one views (its owner), or None
        self.views: Any = _NO_VIEWS  # the values viewing its storage: a WeakSet once there is one (most have none)
        self.last_access = 0
        self.pins = 0
        self.wrappers = 0            # live DTRTensor objects pointing at this value
        self.refs: list[weakref.ref] = []   # weak references to those wrappers (retargeted by in-place writes)
        self.unevictable = func is None   # no recipe: its data cannot be recomputed
        # no recipe (written by an operator that cannot be replayed, a collective among them): never evicted, and
        # its data kept while a value whose recipe reads it lives (``readers``), so that one stays recomputable
        self.stuck = func is None
        self.readers: list | None = None
        self.versions: tuple = ()    # (tensor, version) of the plain tensors its recipe reads
        self.scratch = 0             # bytes its operator allocates and frees while it runs (measured)
        self.parents_: list | None = None
        self.children: list | None = None   # weak references to the values whose recipes read it (its storage)

    def parents(self) -> list:
        """The runtime values its recipe reads (found once: the eviction score walks them for every candidate)."""
        if self.parents_ is None:
            self.parents_ = [a for a in _flat(self.args, self.kwargs) if isinstance(a, _Value)]
        return self.parents_


_NO_VIEWS = ()   # a value's views until it has one (a WeakSet costs Python calls to make, test and walk)


def _read_by_evicted(children: list) -> bool:
    """Whether a value that a tensor refers to and that is evicted would be recomputed through one of
    ``children`` (weak references): one of them, or, through values without data that no tensor refers to
    (freed intermediates), one of theirs (the first ``_HOLD_LIMIT`` values looked at: it runs at every free)."""
    stack, seen = [children], set()
    while stack and len(seen) < _HOLD_LIMIT:
        for ref in stack.pop():
            c = ref()
            if c is None or c.tensor is not None or id(c) in seen:
                continue
            seen.add(id(c))
            if c.wrappers or (c.base is not None and c.base.wrappers):
                return True
            if c.children:
                stack.append(c.children)
    return False


def _note_children(made: list, read: list) -> None:
    """Link the values ``made`` by a call to the storage owners of the values it ``read``."""
    for p in read:
        o = p.base or p
        if o.children is None:
            o.children = []
        o.children.extend(weakref.ref(v) for v in made)


def _add_view(owner: _Value, v: _Value) -> None:
    if owner.views is _NO_VIEWS:
        owner.views = weakref.WeakSet()
    owner.views.add(v)


def _note_readers(made: list, read: list) -> None:
    """Values ``made`` by recipes that read ``read``: each value there that cannot be recomputed keeps its data
    while one of them lives."""
    for p in read:
        o = p.base or p
        if o.stuck:
            if o.readers is None:
                o.readers = []
            o.readers.extend(weakref.ref(v) for v in made)


class _Cell:
    """What a wrapper's finalizer decrements: the wrapper's current value (an in-place write moves it)."""

    __slots__ = ("v",)

    def __init__(self, v: _Value):
        self.v = v


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
        cell = r._cell = _Cell(value)
        value.wrappers += 1
        # one weak reference, with a callback when the wrapper dies (a weakref.finalize per wrapper cost more
        # than the rest of the wrapper); the runtime keeps it alive, mapped to the wrapper's cell
        ref = weakref.ref(r, runtime._ref_died)
        value.refs.append(ref)
        runtime._cells[id(ref)] = (ref, cell)   # keyed by id: hashing the reference hashes the tensor in Python
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"DTRTensor({self._rt.materialize(self._v)!r})"

    # methods that read the data directly (not through an operator): on the data itself
    def tolist(self) -> Any:
        """The values as (nested) Python lists, materialized first if evicted."""
        return self._rt.materialize(self._v).tolist()

    def numpy(self, *, force: bool = False) -> Any:
        """The values as a NumPy array, materialized first if evicted (``force`` as in ``torch.Tensor.numpy``)."""
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return self._rt.materialize(self._v).detach().numpy(force=force)

    def __reduce_ex__(self, protocol: int) -> Any:   # torch.save / pickle / deepcopy: a plain tensor
        return self._rt.materialize(self._v).detach().clone().__reduce_ex__(protocol)

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
    """The leaves of an operator's arguments (tensor lists opened; deeper nesting through :func:`tree_map`)."""
    out: list = []
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, (list, tuple, dict)):
                    tree_map(out.append, x)
                else:
                    out.append(x)
        elif isinstance(a, dict):
            tree_map(out.append, a)
        else:
            out.append(a)
    return out


class _Mode(TorchDispatchMode):
    def __init__(self, runtime: "DTRRuntime"):
        super().__init__()
        self.runtime = runtime

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No ``torch._disable_dynamo`` wrapper around every operator call (three Python frames each; nothing
        here is compiled)."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.runtime.call(func, args, kwargs or {})


class DTRRuntime:
    """The live DTR runtime: a context manager, entered once per block (it can be entered again).

    Attributes
    ----------
    budget_bytes : int or None
        The budget of the block being run; ``None``: track only, never evict
        (also during the first block of a fractional budget, which measures
        the baseline).
    baseline_bytes : int or None
        For a fractional budget: the activation memory that the first block
        (run with tracking only) reached; later blocks get
        ``int(fraction * baseline_bytes)``.
    stats : dict
        Of the last block: ``peak_bytes`` (the largest tracked resident bytes),
        ``current_bytes``, ``evictions``, ``rematerializations`` (operator
        replays), ``operators`` (first-time operator calls), ``compute_s``
        and ``recompute_s`` (the operators' costs, first runs and replays:
        estimated seconds with ``cost="model"``, the smallest measured with
        ``cost="measured"``).
    """

    def __init__(self, budget: Any = None, heuristic: str = "h_dtr", max_replay_factor: float = 50.0,
                 cost: str = "model"):
        if heuristic not in HEURISTICS:
            raise ValueError(f"`heuristic` must be one of {', '.join(HEURISTICS)}; got {heuristic!r}")
        if cost not in COST_MODES:
            raise ValueError(f"`cost` must be one of {', '.join(COST_MODES)}; got {cost!r}")
        self.cost = cost
        if isinstance(max_replay_factor, bool) or not isinstance(max_replay_factor, (int, float)) \
                or not max_replay_factor > 0:
            raise ValueError(f"`max_replay_factor` must be a positive number; got {max_replay_factor!r}")
        self.fraction: float | None = None
        self.baseline_bytes: int | None = None
        self._fixed_budget: int | None = None
        if budget is not None:
            f = _as_fraction(budget, "budget")   # one meaning everywhere (remat_core.units)
            if f is None:
                self._fixed_budget = parse_bytes(budget, "budget")
            else:
                self.fraction = f
        self.max_replay_factor = float(max_replay_factor)
        self.heuristic = heuristic
        self.budget_bytes: int | None = self._fixed_budget
        self._active = False
        self._closed = True
        self._mode = _Mode(self)
        self._reset()

    def _reset(self) -> None:
        self.clock = 0
        self.current = 0
        self.resident: dict[int, _Value] = {}   # id -> storage owners holding data
        self.leaves: dict[int, weakref.ref] = {}   # the leaf tensors read in the block (for their .grad)
        self._cells: dict = {}   # id -> (weak reference to a live wrapper, its cell: what its death decrements)
        self._hooks: list = []   # on the leaves read: their accumulated .grad is never evicted
        self._unbounded = False  # bringing data back at the block's end past the budget
        self._read_plain: dict[int, tuple] = {}   # id -> (plain tensor recipes read, the last version read)
        self._snapshots: dict[tuple, tuple] = {}   # (id, version) -> (tensor, copy of its data at that version)
        self._kept: list[_Value] = []
        self.stats = dict(peak_bytes=0, current_bytes=0, evictions=0, rematerializations=0, operators=0,
                          compute_s=0.0, recompute_s=0.0)

    # ------------------------------------------------------------------ accounting
    def _charge(self, v: _Value) -> None:
        self.current += v.nbytes
        self.resident[id(v)] = v
        if self.current > self.stats["peak_bytes"] and not self._closed:
            self.stats["peak_bytes"] = self.current
        self.stats["current_bytes"] = self.current

    def _note_peak(self, nbytes: int) -> None:
        """An instant's resident bytes (an operator's outputs and scratch included)."""
        if nbytes > self.stats["peak_bytes"] and not self._closed:
            self.stats["peak_bytes"] = nbytes

    def _drop(self, owner: _Value) -> None:
        """Free the data of ``owner`` and of every view of it."""
        for w in list(owner.views):
            w.tensor = None
        owner.tensor = None
        if self.resident.pop(id(owner), None) is not None:
            self.current -= owner.nbytes
            self.stats["current_bytes"] = self.current

    def _ref_died(self, ref: weakref.ref) -> None:
        """A wrapper died (the callback of its weak reference); after the block's end nothing is counted."""
        got = self._cells.pop(id(ref), None)
        if got is not None:
            cell = got[1]
            cell.v.wrappers -= 1
            self._free_if_dead(cell.v)

    def _free_if_dead(self, v: _Value) -> None:
        """Free the storage of ``v`` when no tensor refers to it or to a view of it (DTR's eager eviction: it
        can still be recomputed for a value computed from it), unless an evicted value that a tensor refers to
        would be recomputed from it: then it stays, as an eviction candidate like any other (the core
        simulator's ``hold``), so that the replay that needs it does not replay it again first. Without this,
        GPT-2 at 0.3 replayed the same parents once per evicted value reading them."""
        owner = v.base or v
        if owner.tensor is not None and owner.wrappers == 0 and owner.pins == 0 \
                and not (owner.views is not _NO_VIEWS and any(w.wrappers or w.pins for w in owner.views)) \
                and not (owner.readers and any(r() is not None for r in owner.readers)) \
                and not (owner.children and self.stats["evictions"] and _read_by_evicted(owner.children)):
            self._drop(owner)

    def _lowest_score(self, candidates: list) -> "_Value | None":
        """The candidate with the lowest score (the first one on ties). For ``h_dtr``, whose score adds the cost
        of the evicted ancestors to ``h_dtr_local``'s (so it is never lower), the candidates are walked by their
        local score and the walk stops once that alone reaches the best full score found: the same choice as
        scoring all of them, with the ancestor search (most of an eviction's cost) made for a few."""
        best, best_score = None, 0.0
        if self.heuristic == "h_dtr" and len(candidates) > 1:
            clock = self.clock
            local = [v.cost_s[1] / (float(max(v.nbytes, 1)) * float(clock - v.last_access + 1)) for v in candidates]
            for i in sorted(range(len(candidates)), key=local.__getitem__):
                if best is not None and local[i] > best_score:
                    break
                s = self._score(candidates[i])
                if best is None or s < best_score or (s == best_score and i < best_i):
                    best, best_score, best_i = candidates[i], s, i
            return best
        for v in candidates:
            s = self._score(v)
            if best is None or s < best_score:
                best, best_score = v, s
        return best

    def _score(self, v: _Value) -> float:
        stale = float(self.clock - v.last_access + 1)
        m = float(max(v.nbytes, 1))
        if self.heuristic == "lru":
            return float(v.last_access)
        if self.heuristic == "largest":
            return -m
        cost = v.cost_s[1]
        if self.heuristic == "h_dtr":
            cost += self._evicted_ancestor_cost(v)
        return cost / (m * stale)

    def _evicted_ancestor_cost(self, v: _Value) -> float:
        """The cost of the evicted values that recomputing ``v`` would replay too (the first
        ``_ANCESTOR_LIMIT`` found: the search is made for every candidate of every eviction, and an unbounded
        one made the evictions quadratic in the number of evicted values on Whisper)."""
        seen, total, stack = {id(v)}, 0.0, [v]
        while stack and len(seen) < _ANCESTOR_LIMIT:
            x = stack.pop()
            for a in x.parents():
                if id(a) not in seen and a.tensor is None:
                    seen.add(id(a))
                    total += a.cost_s[1]
                    stack.append(a)
        return total

    def _make_room(self, need: int) -> None:
        if self.budget_bytes is None or self._closed or self._unbounded:
            return
        while self.current + need > self.budget_bytes:
            candidates = [v for v in self.resident.values() if not (
                v.pins or v.unevictable or (v.views is not _NO_VIEWS and any(w.pins for w in v.views)))]
            best = self._lowest_score(candidates)
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
        if v.func is None:
            raise RuntimeError(
                "remat_torch.dtr: a value was evicted whose recipe is gone (it was overwritten in place by an "
                "operator the runtime cannot replay, or read after the block ended)")
        subs = None
        for t, version in v.versions:
            root = t if t._base is None else t._base
            # the copy kept when it was written in place since (an optimizer step) or its storage was freed
            # (FSDP2 frees the parameters it gathered once a block is done, and gathers them again later)
            snap = self._snapshots.get((id(root), version)) if self._snapshots else None
            if snap is None and t._version != version:
                raise RuntimeError(
                    f"remat_torch.dtr: cannot recompute a value from {v.func}: a tensor outside the runtime "
                    "that it reads was modified in place since, and no copy of its old data was kept")
            if snap is None and t.numel() and t.untyped_storage().nbytes() == 0:   # never read freed memory
                raise RuntimeError(
                    f"remat_torch.dtr: cannot recompute a value from {v.func}: the storage of a tensor outside "
                    "the runtime that it reads was freed, and no copy of its data was kept")
            if snap is not None:
                subs = subs or {}
                subs[id(t)] = snap[1].as_strided(t.size(), t.stride(), t.storage_offset() - root.storage_offset())
        parents = v.parents()
        done = []
        try:
            for p in parents:
                if p.tensor is None:
                    self._remat(p)
                self._pin(p, 1)
                done.append(p)
            if v.base is None:
                self._make_room(v.nbytes + v.scratch)
                self._note_peak(self.current + v.nbytes + v.scratch)
            elif v.base.tensor is None:   # the owner was evicted too: recompute it first (counted there)
                self._remat(v.base)
            out = self._run(v.func, v.args, v.kwargs, v.rng_state, replay=True, subs=subs)[0]
        finally:
            for p in done:
                self._pin(p, -1)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.stats["rematerializations"] += 1
        self.stats["recompute_s"] += v.cost_s[1]
        if self.budget_bytes is not None and not self._closed and not self._unbounded and \
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
                    self.budget_bytes is None or self._closed or self.current + s.nbytes <= self.budget_bytes):
                s.tensor = outs[s.index]
                self._charge(s)
        # a parent no tensor refers to was only needed for this one: free it again (unless v views its storage);
        # at the block's end the parents stay until all is done (the tensors brought back share ancestors)
        if not self._closed:
            for p in done:
                if v.base is None or (p.base or p) is not v.base:
                    self._free_if_dead(p)

    def _unwrap(self, a: Any) -> Any:
        """The data of a value (materialized) in an argument; tensor lists item by item."""
        if type(a) is _Value:
            return self.materialize(a)
        if isinstance(a, (list, tuple)):
            out = [self._unwrap(x) for x in a]
            return out if isinstance(a, list) else tuple(out)
        return a

    def _run(self, func, vargs, vkwargs, rng_state, replay: bool, subs: dict | None = None, key: Any = None,
             need: int = 0) -> tuple[Any, float]:
        """Run ``func`` on the data of ``vargs``; on a replay, from the saved generator state and without
        writing into tensors that are not the runtime's (``subs``: old copies of tensors written since)."""
        args = tuple([self._unwrap(a) for a in vargs])
        kwargs = {k: self._unwrap(a) for k, a in vkwargs.items()} if vkwargs else {}
        if subs:
            args, kwargs = tree_map(lambda a: subs.get(id(a), a) if isinstance(a, torch.Tensor) else a,
                                    (args, kwargs))
        if replay:
            args, kwargs = _copy_written(func, args, kwargs)
        saved = None
        if replay and rng_state is not None:
            saved = _rng_state()
            _set_rng_state(rng_state)
        try:
            if key is not None and key not in _SCRATCH and _can_meter(args):
                # the first call of an operator on arguments of this signature: measure what it allocates
                # beyond its outputs (convolution's reordered copies, a reduction's buffers), which is
                # counted from here on (allocated memory must stay within the budget, not only outputs)
                # (the allocator warns on C-level stderr when the call frees a block from before the meter)
                with _native_stderr_silenced(), AllocatorMeter() as meter:
                    start = time.perf_counter()
                    out = func(*args, **kwargs)
                    elapsed = time.perf_counter() - start
                _remember_scratch(key, max(0, meter.peak_bytes - need))
                return out, elapsed
            start = time.perf_counter()
            out = func(*args, **kwargs)
            return out, time.perf_counter() - start
        finally:
            if saved is not None:
                _set_rng_state(saved)

    # ------------------------------------------------------------------ the operator hook
    def call(self, func, args: Any, kwargs: dict) -> Any:
        """Run one operator call: pin and materialize the inputs, make room, run, wrap the outputs."""
        if self._closed:   # after the block: the data itself, plain tensors out
            a, k = tree_map(self._materialize_arg, (args, kwargs))
            return func(*a, **k)
        info = _OP_INFO.get(id(func)) or _op_info(func)
        if info.passthrough:
            a, k = tree_map(self._materialize_arg, (args, kwargs))
            return func(*a, **k)
        # one walk over the arguments: the runtime's values in them, and the plain tensors
        in_values: list = []
        plain: list = []
        vargs = _scan(args, in_values, plain)
        vkwargs = {k: _scan_one(a, in_values, plain) for k, a in kwargs.items()} if kwargs else {}
        leaves = self.leaves
        for a in plain:
            if id(a) not in leaves and a.is_leaf:
                leaves[id(a)] = weakref.ref(a)
                if a.requires_grad:
                    self._hooks.append(a.register_post_accumulate_grad_hook(_keep_grad))
        if info.collective:   # it may write into any tensor it is given (asynchronously): all count as written
            targets, plain_written = [a for a in _flat(args, kwargs) if type(a) is DTRTensor], plain
        elif info.written:
            targets, plain_written = _write_targets(info.schema, args, kwargs)
        else:
            targets = plain_written = ()
        for v in in_values:
            self.materialize(v)
            self._pin(v, 1)
        try:
            if info.collective:   # not even on meta tensors: the outputs are the tensors it is given
                key, need, scratch = None, 0, 0
            else:
                key = _key(func, args, kwargs)
                need = _new_bytes(func, args, kwargs, info.schema, key)
                scratch = _SCRATCH.get(key, 0)
            if self.budget_bytes is not None and self.current + need + scratch > self.budget_bytes:
                self._make_room(need + scratch)
            self._note_peak(self.current + need + scratch)
            rng_state = _rng_state() if info.random else None
            if plain_written:
                self._before_plain_write(plain_written)
            if info.collective:   # no recipe, no scratch measured (a profiler must not start beside gloo's threads)
                return self._call_inplace(func, args, kwargs, vargs, vkwargs, None, info.schema, (), targets, None)
            if targets:
                return self._call_inplace(func, args, kwargs, vargs, vkwargs, rng_state, info.schema, info.written,
                                          targets, key)
            out, cost = self._run(func, vargs, vkwargs, rng_state, replay=False, key=key, need=need)
        finally:
            for v in in_values:
                self._pin(v, -1)
        self.stats["operators"] += 1
        return self._wrap_outputs(func, vargs, vkwargs, out, rng_state,
                                  self._cost(key, cost, info, args, kwargs, out), info.schema,
                                  args, info.written, key, bool(plain),
                                  [v for v in in_values if v.stuck or (v.base is not None and v.base.stuck)],
                                  in_values)

    def _cost(self, key: Any, measured_s: float, info: "_OpInfo", args: tuple, kwargs: dict, out: Any) -> list:
        """The cost table entry ``[count, seconds]`` of a call: :func:`_model_cost` or :func:`_smoothed_cost`."""
        if self.cost == "model":
            return _model_cost(key, info, args, kwargs, out)
        return _smoothed_cost(key, measured_s)

    def _before_plain_write(self, tensors: list) -> None:
        """An operator is about to write into a tensor that is not the runtime's and that recipes read (an
        optimizer step updating the parameters): keep a copy of its data as the recipes read it, for the
        replays of values computed from it (the gradients the step reads next may be evicted). The copies
        live until the block ends; they are outside the budget, like the tensors they copy."""
        for t in tensors:
            root = t if t._base is None else t._base
            got = self._read_plain.get(id(root))
            if got is None or got[1] != root._version or (id(root), root._version) in self._snapshots:
                continue
            with torch.utils._python_dispatch._disable_current_modes(), torch.no_grad():
                copy = torch.empty_strided(root.size(), root.stride(), dtype=root.dtype, device=root.device)
                copy.copy_(root)
            self._snapshots[(id(root), root._version)] = (root, copy)

    def _before_storage_freed(self, storage: Any) -> None:
        """A storage is about to shrink under its tensors (``untyped_storage().resize_(0)``: FSDP2 frees the
        parameters it gathered once a block is done, without an operator and without changing their version):
        keep a copy of what the plain tensors on it that recipes read hold, as for a write. A replay would
        otherwise read freed memory (a rank died with SIGSEGV under FSDP2 in the suite, issue 39)."""
        if self._closed or not self._read_plain:
            return
        try:
            address = storage.data_ptr()
        except (RuntimeError, NotImplementedError):
            return
        if not address:
            return
        roots = [root for root, _ in self._read_plain.values() if _storage_address(root) == address]
        if roots:
            self._before_plain_write(roots)

    def _call_inplace(self, func, args, kwargs, vargs, vkwargs, rng_state, schema, written, targets, key) -> Any:
        """An operator that writes into runtime tensors: each owner written into gets a new value (the old
        value stays recomputable by its recipe for what was computed from it), and every tensor viewing it
        is moved to a view of the new value. The new value's recipe replays the write on a copy of the old
        value when the operator writes into one positional argument; otherwise it cannot be evicted."""
        owners: dict[int, _Value] = {}
        for t in targets:
            o = t._v.base or t._v
            owners.setdefault(id(o), o)
        pos = written[0] if written and written[0] < len(args) else None
        single = len(owners) == 1 and pos is not None and isinstance(args[pos], DTRTensor) \
            and sum(1 for i in written if i < len(args) and args[i] is not None) == 1 and len(targets) == 1
        # the geometry of every live view of the owners, read before the write
        views: dict[int, list] = {}
        for k, old in owners.items():
            views[k] = [(w, _geometry(w, old)) for w in list(old.views) if w.wrappers]
            for w, g in views[k]:
                if g is None:
                    self.materialize(w)
        fn = None
        if single and not any((t._v.base or t._v).stuck for t in targets):   # the replay reads the old value
            tv, old = args[pos]._v, next(iter(owners.values()))
            if tv.base is None:
                fn = _InplaceReplay(func, pos)
            else:
                g = _geometry(tv, old)
                fn = None if g is None else _ViewWriteReplay(func, pos, *g)
        versions = self._versions(vargs, vkwargs, written)
        out, cost = self._run(func, vargs, vkwargs, rng_state, replay=False, key=key, need=0)
        cost = self._cost(key, cost, _OP_INFO.get(id(func)) or _op_info(func), args, kwargs, out)
        self.stats["operators"] += 1
        self.stats["compute_s"] += cost[1]
        for k, old in owners.items():
            if fn is not None:
                fargs = tuple(old if i == pos else a for i, a in enumerate(vargs))
                new = _Value(fn, fargs, vkwargs, 0, rng_state, cost, None)
                new.versions = versions
                _note_readers([new], [t._v for t in _flat(args, kwargs) if type(t) is DTRTensor])
            else:
                new = _Value(None, None, None, 0, None, cost, None)
            new.nbytes, new.last_access, new.tensor = old.nbytes, self.clock, old.tensor
            # the storage now holds the new value; the old one is evicted (recomputable by its recipe)
            old.tensor = None
            if self.resident.pop(id(old), None) is not None:
                self.resident[id(new)] = new
            self._move_wrappers(old, new)
            for w, g in views[k]:
                data, w.tensor = w.tensor, None
                if g is None:   # a view that changes the dtype: it cannot be re-derived, so the owner stays
                    new.unevictable = True
                    nv = _Value(None, None, None, 0, None, [1, 0.0], new)
                    nv.tensor = data
                else:
                    nv = _Value(_AsStrided(*g), (new,), {}, 0, None, [1, 0.0], new)
                    nv.tensor = nv.func(new.tensor)
                nv.last_access = self.clock
                _add_view(new, nv)
                self._move_wrappers(w, nv)
        # what an in-place operator returns is the tensor it wrote into
        outs = out if isinstance(out, (tuple, list)) else (out,)
        res = []
        for idx, o in enumerate(outs):
            arg = _aliased_argument(schema, idx, args, kwargs)
            if arg is None and isinstance(o, torch.Tensor):   # unannotated (a collective's output): the same tensor?
                arg = next((t for t in targets if t._v.tensor is not None and _same_storage(t._v.tensor, o)
                            and t.size() == o.size() and t.stride() == o.stride()
                            and t.storage_offset() == o.storage_offset()), None)
            res.append(arg if arg is not None else o)
        if isinstance(out, tuple):
            return tuple(res)
        if isinstance(out, list):
            return res
        return res[0] if res else out

    def _move_wrappers(self, old: _Value, new: _Value) -> None:
        """Point every live wrapper of ``old`` at ``new``."""
        for ref in old.refs:
            w = ref()
            if w is not None and w._v is old:
                w._v = new
                w._cell.v = new
                old.wrappers -= 1
                new.wrappers += 1
                new.refs.append(ref)
        old.refs = [r for r in old.refs if r() is not None and r()._v is old]

    def _versions(self, vargs: Any, vkwargs: Any, written: list[int]) -> tuple:
        """The plain tensors a recipe reads, with their versions (the operator's own writes excluded)."""
        out = []
        for i, a in enumerate(vargs):
            if i in written:
                continue
            if isinstance(a, torch.Tensor):
                out.append((a, a._version))
            elif isinstance(a, (list, tuple)):
                out.extend((x, x._version) for x in a if isinstance(x, torch.Tensor))
        for a in vkwargs.values():
            if isinstance(a, torch.Tensor):
                out.append((a, a._version))
        for t, version in out:   # keyed by the tensor that owns the storage (a view shares its version counter)
            root = t if t._base is None else t._base
            self._read_plain[id(root)] = (root, version)
        return tuple(out)

    def _materialize_arg(self, a: Any) -> Any:
        return self.materialize(a._v) if isinstance(a, DTRTensor) else a

    def _wrap_outputs(self, func, vargs, vkwargs, out, rng_state, cost, schema, args, written, key=None,
                      reads_plain: bool = True, stuck_in: list = (), read: list = ()) -> Any:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        scratch = _SCRATCH.get(key, 0) if key is not None else 0
        self.stats["compute_s"] += cost[1]
        info = _OP_INFO.get(id(func)) or _op_info(func)
        made: list[_Value] = []
        wrapped = []
        versions = None if reads_plain else ()
        for idx, o in enumerate(outs):
            if not isinstance(o, torch.Tensor):
                wrapped.append(o)
                continue
            base_wrapper = None
            if idx < len(info.alias_returns) and info.alias_returns[idx]:
                base_wrapper = next((a for a in _flat(args, {}) if isinstance(a, DTRTensor)
                                     and a._v.tensor is not None and _same_storage(a._v.tensor, o)), None)
                if base_wrapper is None:   # it aliases a tensor that is not ours: return it as it is
                    wrapped.append(o)
                    continue
            if versions is None:
                versions = self._versions(vargs, vkwargs, written)
            owner = None if base_wrapper is None else (base_wrapper._v.base or base_wrapper._v)
            v = _Value(func, vargs, vkwargs, idx, rng_state, cost, owner)
            v.versions = versions
            v.scratch = scratch
            v.tensor = o
            v.last_access = self.clock
            if owner is None:
                v.nbytes = _nbytes(o)
                self._charge(v)
            else:
                _add_view(owner, v)
            made.append(v)
            wrapped.append(DTRTensor(v, self, o))
        if len(made) > 1:
            for v in made:
                v.siblings = [weakref.ref(s) for s in made if s is not v]
        if stuck_in:
            _note_readers(made, stuck_in)
        if read and made:
            _note_children(made, read)
        if isinstance(out, tuple):
            return tuple(wrapped)
        if isinstance(out, list):
            return wrapped
        return wrapped[0]

    # ------------------------------------------------------------------ block
    def __enter__(self) -> "DTRRuntime":
        if self._active:
            raise RuntimeError("this DTR runtime is already running a block (blocks do not nest)")
        self._reset()
        if self.fraction is not None:
            self.budget_bytes = None if self.baseline_bytes is None else max(1, int(self.fraction *
                                                                                     self.baseline_bytes))
        else:
            self.budget_bytes = self._fixed_budget
        self._closed = False
        self._active = True
        _watch_storage_frees(self, True)
        try:
            self._mode.__enter__()
        except BaseException:
            _watch_storage_frees(self, False)
            self._active = False
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._mode.__exit__(exc_type, exc, tb)
        finally:
            _watch_storage_frees(self, False)
            self._active = False
            try:
                self._finish()
            except Exception:   # never hide the block's own exception behind a clean-up failure
                if exc_type is None:
                    raise
                _log.exception("remat_torch.dtr: clean-up after an exception in the block failed")
        if self.fraction is not None and self.baseline_bytes is None and exc_type is None:
            self.baseline_bytes = int(self.stats["peak_bytes"])

    def _finish(self) -> None:
        """End of the block (also after an exception): every tensor the runtime made that is still referred to
        becomes a plain tensor holding its data, and the runtime lets go of everything else."""
        if any(w is not None and w._v.tensor is None for w in (r() for r, _ in list(self._cells.values()))):
            gc.collect()   # wrappers only a reference cycle holds (a model's output object) need no data back
        live = [w for w in (r() for r, _ in list(self._cells.values())) if w is not None]
        self._cells = {}   # wrappers that die from here on change nothing
        # bring back the data of what is still referred to (.grad among it), within the budget while that is
        # possible (each value kept once back), past it otherwise: nothing may be lost
        for w in live:
            v = w._v if isinstance(w, DTRTensor) else None
            if v is None or v.unevictable and v.tensor is not None:
                continue
            try:
                self.materialize(v)
            except BudgetInfeasibleError:   # past the budget from here (recorded in stats["peak_bytes"])
                self._unbounded = True
                self.materialize(v)
            except RuntimeError as e:   # its recipe is gone: it stays a wrapper without data
                _log.warning("remat_torch.dtr: a tensor of the block could not be recomputed at its end: %s", e)
                continue
            v.unevictable = True
            if v.base is not None:
                v.base.unevictable = True
        self._closed = True   # from here on nothing is evicted and operators return plain tensors
        self._unbounded = False
        for ref in self.leaves.values():
            leaf = ref()
            g = None if leaf is None else leaf.grad
            if isinstance(g, DTRTensor) and g._v.tensor is not None:
                leaf.grad = g._v.tensor.detach()
        self.leaves.clear()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        kept = []
        for v in list(self.resident.values()):
            v.refs = []
        for w in live:
            if not isinstance(w, DTRTensor):
                continue
            w._v.refs = []
            if w._v.tensor is not None:
                if w.grad_fn is None:
                    plain = w._v.tensor.detach()
                    if w.requires_grad:
                        plain.requires_grad_(True)
                else:   # the same data with the same history: backward through it still reaches the graph
                    plain = _Plain.apply(w)
                try:
                    torch.utils.swap_tensors(w, plain)
                    continue
                except RuntimeError:   # referred to from C++ (autograd's saved tensors): stays a wrapper
                    pass
                finally:
                    plain = None
            kept.append(w)
        live = None
        # the remaining wrappers hold their data; nothing is recomputed after the block
        self.resident = {}
        self.current = 0
        keep_values = {}
        for w in kept:
            v = w._v
            keep_values[id(v)] = v
            if v.base is not None:
                keep_values[id(v.base)] = v.base
        for v in keep_values.values():
            v.args = v.kwargs = v.versions = v.parents_ = None
            v.func, v.unevictable, v.siblings = None, True, []
        self._kept = list(keep_values.values())
        self._read_plain, self._snapshots = {}, {}
        self.stats["current_bytes"] = 0
class _Plain(torch.autograd.Function):
    """Identity from a wrapper to a plain tensor holding its data, with the wrapper's history behind it."""

    @staticmethod
    def forward(ctx: Any, w: DTRTensor) -> torch.Tensor:
        return w._v.tensor.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def _rng_state() -> tuple:
    """The CPU generator's state, and the current CUDA device's where CUDA is in use (dropout on a GPU draws
    from that one), so that a replayed random operator draws what it drew first on either device."""
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda)


def _written_positions(func, schema) -> list[int]:
    """Positions of the arguments the operator's schema marks as written (``Tensor(a!)``)."""
    got = _WRITTEN.get(func)
    if got is None:
        got = _WRITTEN[func] = [i for i, a in enumerate(schema.arguments)
                                if a.alias_info is not None and a.alias_info.is_write]
    return got


_WRITTEN: dict = {}


def _write_targets(schema, args: tuple, kwargs: dict) -> tuple[list, list]:
    """The runtime tensors and the plain tensors an operator writes into (lists such as ``_foreach_add_``'s
    included)."""
    targets: list = []
    plain: list = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        x = args[i] if i < len(args) else kwargs.get(a.name)
        for t in (x if isinstance(x, (list, tuple)) else (x,)):
            if isinstance(t, DTRTensor):
                targets.append(t)
            elif isinstance(t, torch.Tensor):
                plain.append(t)
    return targets, plain


def _aliased_argument(schema, idx: int, args: tuple, kwargs: dict) -> Any:
    """The argument that return ``idx`` of an operator is (``Tensor(a!)`` in and out), or ``None``."""
    if idx >= len(schema.returns):
        return None
    ret = schema.returns[idx].alias_info
    if ret is None or not ret.is_write:
        return None
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write and set(a.alias_info.before_set) == \
                set(ret.before_set):
            return args[i] if i < len(args) else kwargs.get(a.name)
    return None


def _geometry(v: _Value, owner: _Value) -> tuple | None:
    """Size, strides and offset (relative to the owner's) of the view value ``v``, read from a live wrapper
    or its data; ``None`` when it has another dtype than its owner (``as_strided`` cannot re-derive it)."""
    like = v.tensor
    if like is None:
        like = next((r() for r in v.refs if r() is not None), None)
    if like is None or owner.tensor is None or like.dtype != owner.tensor.dtype:
        return None
    return tuple(like.size()), tuple(like.stride()), like.storage_offset() - owner.tensor.storage_offset()


class _OpInfo:
    """What the runtime reads from an operator's schema, read once per operator (pybind attribute reads are
    slow next to a small operator)."""

    __slots__ = ("func", "schema", "written", "alias_returns", "random", "passthrough", "collective", "flops")

    def __init__(self, func):
        self.func = func   # held: the table is keyed by id (an operator's own __hash__ is Python code)
        self.schema = func._schema
        self.written = _written_positions(func, self.schema)
        self.alias_returns = tuple(r.alias_info is not None for r in self.schema.returns)
        self.random = torch.Tag.nondeterministic_seeded in func.tags
        self.passthrough = func is _aten._local_scalar_dense.default or func.overloadpacket in _PASSTHROUGH
        self.collective = getattr(func, "namespace", None) in _COLLECTIVE_NAMESPACES
        self.flops = _flop_formula(func)


# operators that communicate with other processes: never replayed (running one again on one rank alone would
# desynchronise the ranks' collectives), and their schemas do not mark the tensors they write into
_COLLECTIVE_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd"})
_OP_INFO: dict = {}   # id(operator) -> _OpInfo (which holds the operator, so the id stays its own)


def _op_info(func) -> _OpInfo:
    got = _OP_INFO[id(func)] = _OpInfo(func)
    return got


def _scan_one(a: Any, values: list, plain: list) -> Any:
    """``a`` with each runtime tensor replaced by its value; the values go to ``values``, the plain tensors to
    ``plain`` (operator arguments nest one level: tensor lists)."""
    if type(a) is DTRTensor:
        v = a._v
        values.append(v)
        return v
    if isinstance(a, torch.Tensor):
        plain.append(a)
        return a
    if isinstance(a, (list, tuple)):
        out = [_scan_one(x, values, plain) for x in a]
        return out if isinstance(a, list) else tuple(out)
    return a


def _scan(args: tuple, values: list, plain: list) -> tuple:
    return tuple([_scan_one(a, values, plain) for a in args])


_PASSTHROUGH = {_aten.is_same_size, _aten.sym_size, _aten.sym_stride, _aten.sym_numel, _aten.sym_storage_offset,
                _aten.equal, _aten.allclose, _aten.is_nonzero}


# operators that write into arguments their schema does not mark as written (the running statistics)
_UNANNOTATED_WRITES = {f: {3, 4} for f in (_aten.native_batch_norm.default, _aten.cudnn_batch_norm.default,
                                           _aten.miopen_batch_norm.default)}


class _AsStrided:
    """Re-derives a view from its owner's data (a view whose owner was written into in place)."""

    tags = ()

    def __init__(self, size: tuple, stride: tuple, offset: int):
        self.size, self.stride, self.offset = size, stride, offset

    def __call__(self, base: torch.Tensor) -> torch.Tensor:
        return base.as_strided(self.size, self.stride, base.storage_offset() + self.offset)

    def __repr__(self) -> str:
        return f"as_strided({self.size}, {self.stride}, +{self.offset})"


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


class _ViewWriteReplay:
    """Replays an in-place write into a view (argument ``pos``) on a copy of the view's owner, and returns the
    whole owner: T5's ``shifted[..., 1:] = ids[..., :-1]``."""

    def __init__(self, func, pos: int, size: tuple, stride: tuple, offset: int):
        self.func, self.pos = func, pos
        self.view = _AsStrided(size, stride, offset)
        self.tags = func.tags

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        old = args[self.pos]
        base = torch.empty_strided(old.size(), old.stride(), dtype=old.dtype, device=old.device)
        base.copy_(old)
        args = tuple(self.view(base) if i == self.pos else a for i, a in enumerate(args))
        self.func(*args, **kwargs)
        return base

    def __repr__(self) -> str:
        return f"view_write({self.func})"


def _storage_address(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


_WATCHERS: list = []   # the runtimes in a block: told before a storage shrinks


def _resize_watched(storage: Any, size: int) -> Any:
    """``UntypedStorage.resize_`` while a DTR block runs: the runtimes keep what recipes read from it first."""
    try:
        if size < storage.nbytes():
            for rt in list(_WATCHERS):
                rt._before_storage_freed(storage)
    finally:
        return torch._C.StorageBase.resize_(storage, size)


def _watch_storage_frees(rt: "DTRRuntime", on: bool) -> None:
    """Install ``_resize_watched`` on ``torch.UntypedStorage`` while some runtime is in a block (only then)."""
    if on:
        if not _WATCHERS:
            torch.UntypedStorage.resize_ = _resize_watched
        _WATCHERS.append(rt)
    elif rt in _WATCHERS:
        _WATCHERS.remove(rt)
        if not _WATCHERS and torch.UntypedStorage.__dict__.get("resize_") is _resize_watched:
            del torch.UntypedStorage.resize_


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False


def _copy_written(func, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` with every tensor the operator writes into copied (the replay must not write twice)."""
    got = _COPY_INFO.get(id(func))
    if got is None:   # read the schema once per operator: every replay comes here
        if isinstance(func, torch._ops.OpOverload):
            schema = func._schema
            written = set(_written_positions(func, schema)) | _UNANNOTATED_WRITES.get(func, set())
            got = (func, [a.name for a in schema.arguments], frozenset(written))
        else:
            got = (func, [], frozenset())
        _COPY_INFO[id(func)] = got   # holds the operator, so the id stays its own
    _, names, written = got
    if not written:
        return args, kwargs

    def copy(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return a.clone()
        if isinstance(a, (list, tuple)):
            return type(a)(x.clone() if isinstance(x, torch.Tensor) else x for x in a)
        return a

    args = tuple(copy(a) if i in written else a for i, a in enumerate(args))
    kwargs = {k: (copy(a) if k in names and names.index(k) in written else a) for k, a in kwargs.items()}
    return args, kwargs


_COPY_INFO: dict = {}   # id(operator) -> (operator, argument names, positions it writes)


_ANCESTOR_LIMIT = 256
_HOLD_LIMIT = 256   # GPT-2 at 0.3: 620 replays with 256, 829 with 64
_SCRATCH: dict = {}   # operator signature -> bytes it allocates beyond its outputs (measured once)
_SCRATCH_SIZE = 8192


def _keep_grad(leaf: torch.Tensor) -> None:
    """After autograd accumulated a leaf's gradient: never evict it. Recomputing a parameter's gradient
    replays the backward pass up to it, and every gradient is read after the block: a ConvNeXt step whose
    evicted gradients were brought back at the block's end allocated 7x its budget (46x without freeing the
    replayed ancestors). Gradients are part of what the budget must hold, as in eager."""
    g = leaf.grad
    if isinstance(g, DTRTensor):
        g._v.unevictable = True
        if g._v.base is not None:
            g._v.base.unevictable = True


def _can_meter(args: Any) -> bool:
    """Whether an operator call's allocations can be measured here: CPU tensors (the allocator meter follows
    the CPU allocator) and no profiler already running (profilers do not nest)."""
    if torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled():
        return False
    return all(t.device.type == "cpu" for t in _flat(args, {}) if isinstance(t, torch.Tensor))


def _remember_scratch(key: Any, nbytes: int) -> None:
    if len(_SCRATCH) >= _SCRATCH_SIZE:
        _SCRATCH.pop(next(iter(_SCRATCH)))
    _SCRATCH[key] = int(nbytes)
_NEW_BYTES_CACHE: dict = {}
_NEW_BYTES_CACHE_SIZE = 4096
_COST_TABLE: dict = {}
_COST_TABLE_SIZE = 8192
_MIN_COST_S = 1e-7


def _key(func, args: tuple, kwargs: dict) -> Any:
    """The operator and the signature of its arguments (:func:`_signature`), or ``None`` if unhashable."""
    if id(func) not in _OP_INFO:
        _op_info(func)   # the table holds the operator, so its id (hashed in C, unlike the operator) stays its own
    try:
        return (id(func), tuple([_signature(a) for a in args]), _signature(kwargs) if kwargs else None)
    except TypeError:
        return None


def _smoothed_cost(key: Any, measured_s: float) -> list:
    """The smallest wall time measured so far for ``key`` (an operator on arguments of one signature), this
    one included: load only ever adds time, so the smallest is the operator's own cost, and it settles within
    a step or two, after which the same budget gives the same evictions run after run (with a running mean,
    the tree net at 0.3 replayed 697 to 20,841 operators in 8 runs of one budget; with the minimum, 2,712 in
    each). Returns the table's entry ``[count, seconds]``: values read it as it is when they are scored."""
    measured_s = max(float(measured_s), _MIN_COST_S)
    if key is None:
        return [1, measured_s]
    got = _COST_TABLE.get(key)
    if got is None:
        if len(_COST_TABLE) >= _COST_TABLE_SIZE:
            _COST_TABLE.pop(next(iter(_COST_TABLE)))
        got = _COST_TABLE[key] = [1, measured_s]
        return got
    got[0] += 1
    got[1] = min(got[1], measured_s)
    return got


#: what an estimated cost (``cost="model"``) assumes: floating-point operations and bytes per second of one CPU
#: core, in order of magnitude, and a fixed time per call (dispatch); only their ratios decide an eviction
MODEL_FLOPS_PER_S = 2e10
MODEL_BYTES_PER_S = 1e10
MODEL_CALL_S = 1e-6
_MODEL_COST: dict = {}


def _flop_formula(func) -> Any:
    """PyTorch's FLOP-counter formula for ``func`` (matrix products, convolutions, attention), or ``None``."""
    from torch.utils.flop_counter import flop_registry

    return flop_registry.get(getattr(func, "overloadpacket", None))


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _model_cost(key: Any, info: "_OpInfo", args: tuple, kwargs: dict, out: Any) -> list:
    """An operator call's estimated cost, ``[1, seconds]`` (remembered per operator and argument signature):
    ``MODEL_CALL_S`` plus its floating-point operations over ``MODEL_FLOPS_PER_S`` or the bytes of its tensor
    arguments and new outputs over ``MODEL_BYTES_PER_S``, whichever is larger; a call whose outputs are all views
    of its inputs moves no data and costs ``MODEL_CALL_S``. Deterministic: it depends on shapes alone."""
    got = _MODEL_COST.get(key) if key is not None else None
    if got is not None:
        return got
    outs = out if isinstance(out, (tuple, list)) else (out,)
    flops = 0
    if info.flops is not None:
        try:
            flops = int(info.flops(*args, out_val=out, **(kwargs or {})))
        except Exception:   # a formula that does not take this overload's arguments: count bytes instead
            flops = 0
    if info.alias_returns and all(info.alias_returns):
        nbytes = 0
    else:
        nbytes = sum(_tensor_bytes(t) for t in _flat(args, kwargs or {}) if isinstance(t, torch.Tensor))
        nbytes += sum(_tensor_bytes(o) for i, o in enumerate(outs) if isinstance(o, torch.Tensor)
                      and not (i < len(info.alias_returns) and info.alias_returns[i]))
    got = [1, MODEL_CALL_S + max(flops / MODEL_FLOPS_PER_S, nbytes / MODEL_BYTES_PER_S)]
    if key is not None:
        if len(_MODEL_COST) >= _COST_TABLE_SIZE:
            _MODEL_COST.pop(next(iter(_MODEL_COST)))
        _MODEL_COST[key] = got
    return got


def _signature(a: Any) -> Any:
    """A hashable key of an operator argument that fixes the sizes of the operator's outputs: a tensor's shape,
    strides and dtype, other values themselves (``TypeError`` for a value that cannot be a key)."""
    if isinstance(a, torch.Tensor):
        return (a.shape, a.stride(), a.dtype)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__,) + tuple(_signature(x) for x in a)
    if isinstance(a, dict):
        return ("D",) + tuple((k, _signature(v)) for k, v in sorted(a.items()))
    hash(a)
    return (type(a).__name__, a)


def _new_bytes(func, args: tuple, kwargs: dict, schema, key: Any = False) -> int:
    """Bytes of the new storages ``func`` will allocate: from a run on meta tensors (0 if it cannot run there),
    remembered per operator and argument signature (the meta run is most of the runtime's cost per small
    operator; benchmarks/README.md, section dtr)."""
    if key is False:
        key = _key(func, args, kwargs)
    if key is None:
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


def dtr(budget: Any = None, heuristic: str = "h_dtr", max_replay_factor: float = 50.0,
        cost: str = "model") -> DTRRuntime:
    """A live DTR runtime with ``budget`` of activation memory: ``with remat_torch.dtr(budget=...) as rt:``.

    Parameters
    ----------
    budget : int, str, float or None
        Bytes (``4096``, ``"64MiB"``; :func:`remat_core.units.parse_bytes`)
        of activation memory: the storages that operators create inside the
        block (parameters and inputs are not counted). A number in ``[0, 1]``
        (``0.5``, ``"0.5x"``) is a fraction of eager's activation memory, measured
        on the runtime's first block: that block runs with tracking only and
        later blocks of the same runtime get the fraction of what it reached,
        so keep the runtime and enter it once per step
        (``rt = remat_torch.dtr(budget=0.5)``, then ``with rt: ...``).
        ``None`` tracks only.
    heuristic : str
        ``"h_dtr"`` (default), ``"h_dtr_local"``, ``"lru"`` or ``"largest"``.
        ``h_dtr`` counts the evicted ancestors a value's recomputation would
        replay too, which keeps recursive networks from thrashing at budgets
        where ``h_dtr_local`` does (benchmarks/README.md, section dtr).
    max_replay_factor : float
        More operator replays than this many per operator run (at least 100
        operators counted) is thrashing: ``BudgetInfeasibleError``.
    cost : str
        How an operator's cost (what recomputing it would take) is known:
        ``"model"`` (default) estimated from its shapes, deterministic, or
        ``"measured"`` its smallest measured wall time (see the module's
        notes).

    Returns
    -------
    DTRRuntime
        A context manager (re-enterable, one block at a time); its ``stats``
        give the tracked peak, evictions and rematerializations of the last
        block.

    Raises
    ------
    TypeError, ValueError
        On a bad ``budget``, ``heuristic``, ``max_replay_factor`` or ``cost`` (naming it).
    BudgetInfeasibleError
        Inside the block, when an operator's inputs and outputs do not fit
        with everything else evicted, or when the run thrashes.
    """
    return DTRRuntime(budget, heuristic, max_replay_factor, cost)


def activation_peak_bytes(step: Callable[[], Any]) -> int:
    """Peak bytes of activation memory that ``step()`` creates, as the DTR runtime counts it (nothing evicted).

    The baseline for a fraction: ``dtr(budget=int(0.5 * activation_peak_bytes(step)))``.
    """
    with dtr(None) as rt:
        step()
    return int(rt.stats["peak_bytes"])
