"""What a plan was specialized on, and how a call is checked against it.

Tracing turns one call of the model into a static graph. Whatever the trace
saw and the graph cannot express is a *specialization*; a plan is only valid
for calls that agree with it:

* the structure of the call: positional and keyword arguments, the shapes,
  dtypes, devices and ``requires_grad`` flags of its tensors and the values of
  its non-tensor arguments (:func:`call_signature`);
* the module tree's Python-level state: every submodule's ``training`` flag
  and its plain attributes (numbers, strings, ``None``, tuples of them), one
  level into plain attribute objects such as a Hugging Face ``config``
  (:class:`AttributeSnapshot`), since ``forward`` may branch on them;
* the values that tracing *read* from tensors (``aten._local_scalar_dense``:
  ``.item()``, ``bool(tensor)``, ``mask.all()``), which a static graph cannot
  depend on (:class:`ValueReads`).

A value read is handled by specializing the trace on the value it had on the
example inputs and keeping a *guard program*: the aten ops that computed the
value, replayed on each call's inputs (usually a few mask ops), so a call
whose value differs gets its own plan. Reads that depend on trainable
parameters (their value changes every step), on random ops, or that are not
reproducible are refused with the module path and source line that made them.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

from .extract import UnsupportedModelError

__all__ = ["call_signature", "AttributeSnapshot", "ValueReads", "record_value_reads", "replaying_reads",
           "source_location"]

_PLAIN = (int, float, bool, str, bytes, type(None))
_TORCH_DIR = os.path.dirname(os.path.dirname(__import__("torch").__file__))
_HERE = os.path.dirname(__file__)


def _plain(v) -> bool:
    if isinstance(v, _PLAIN):
        return True
    if isinstance(v, (tuple, frozenset)) and len(v) <= 64:
        return all(_plain(x) for x in v)
    return False


def tensor_signature(t) -> tuple:
    """What a plan depends on in one tensor: shape, strides, dtype, device, requires_grad (the traced graph's
    views are specialized on the example's strides: a channels_last batch of the same shape is another plan)."""
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device, bool(t.requires_grad))


def call_signature(leaves) -> tuple:
    """Hashable description of a flattened call (tensors by signature, other leaves by value)."""
    import torch

    out = []
    for x in leaves:
        if isinstance(x, torch.Tensor):
            out.append(("T",) + tensor_signature(x))
        else:
            try:
                hash(x)
                out.append(("C", type(x).__name__, x))
            except TypeError:
                out.append(("C", type(x).__name__, repr(x)))
    return tuple(out)


class AttributeSnapshot:
    """The Python-level state of a module tree that ``forward`` may read.

    For every submodule: its ``training`` flag and its plain attributes
    (``int``, ``float``, ``bool``, ``str``, ``None`` and tuples of them), and
    the plain attributes of plain attribute objects one level down (a Hugging
    Face ``config``, for instance). Taking a snapshot is a few dictionary
    lookups per module, so it is checked on every call.
    """

    def __init__(self, model):
        self._model = model
        self._collect()
        self.value = self.take()

    def _collect(self) -> None:
        import torch

        items = []
        seen: set = set()  # an attribute object shared by many modules (a config) is read once
        self._modules = [mod for _, mod in self._model.named_modules()]
        self._ids = self._tree_ids()
        for mod in self._modules:
            items.append((mod, None))
            for k, v in vars(mod).items():
                if k.startswith("_") and k != "_attn_implementation":
                    continue
                if _plain(v):
                    items.append((mod, k))
                elif (hasattr(v, "__dict__") and not isinstance(v, (torch.nn.Module, torch.Tensor, type))
                      and not callable(v) and id(v) not in seen):
                    seen.add(id(v))
                    items.append((v, "__dict__"))
        self._items = items

    def _tree_ids(self) -> tuple:
        """The module objects of the tree and their children (a submodule replaced after planning is another
        object, even of the same class)."""
        return tuple((id(mod), tuple(map(id, mod._modules.values()))) for mod in self._modules)

    def structure(self) -> tuple:
        """The module tree by class, a ``forward`` assigned to a module object, the shapes and dtypes of each
        module's own parameters and buffers, and the forward hooks that user code registered on each module
        and globally (each changes what ``forward`` computes); hooks defined inside torch (FSDP2's, for
        instance) are left out. Classes, not objects: a copy or a reloaded model has the same."""
        from torch.nn.modules import module as _m

        return (tuple((_user_class(mod), _forward_override(mod), _user_hooks(mod._forward_hooks),
                       _user_hooks(mod._forward_pre_hooks), _tensor_shapes(mod)) for mod in self._modules),
                _user_hooks(_m._global_forward_hooks), _user_hooks(_m._global_forward_pre_hooks))

    def take(self) -> tuple:
        if self._tree_ids() != self._ids:   # the tree changed: read the attributes of the modules it has now
            self._collect()
        out = [self.structure()]
        for obj, k in self._items:
            if k is None:
                out.append(obj.training)
            elif k == "__dict__":
                out.append(tuple((a, b) for a, b in vars(obj).items() if _plain(b)))
            else:
                out.append(obj.__dict__.get(k, _MISSING))
        return tuple(out)

    def changed(self) -> bool:
        return self.take() != self.value

    def diff(self) -> str:
        """The first attribute that differs from the snapshot, for messages."""
        now = self.take()
        if now[0] != self.value[0]:
            return "the module tree or its forward hooks changed"
        for (obj, k), a, b in zip(self._items, self.value[1:], now[1:]):
            if a != b:
                name = "training" if k is None else k
                if k == "__dict__":
                    da, db = dict(a), dict(b)
                    keys = [x for x in set(da) | set(db) if da.get(x, _MISSING) != db.get(x, _MISSING)]
                    name = f"{type(obj).__name__}.{keys[0] if keys else '?'}"
                    return f"{name} changed"
                return f"{type(obj).__name__}.{name} changed from {a!r} to {b!r}"
        return "nothing changed"


_MISSING = object()


def _user_class(mod) -> str:
    """The module's class, past classes that torch.distributed makes at run time (FSDP2's ``fully_shard`` swaps
    a block's class for an ``FSDP<Name>`` subclass, which changes nothing the plan computes)."""
    for cls in type(mod).__mro__:
        if not str(cls.__module__).startswith("torch.distributed"):
            return f"{cls.__module__}.{cls.__qualname__}"
    return type(mod).__qualname__


def _forward_override(mod):
    """The function that runs as the module's ``forward``: one assigned to the module object itself
    (``mod.forward = fn``), else its class's, which kernel libraries patch (``LlamaRMSNorm.forward = ...``). A
    deep copy keeps the same function object (a bound method: the same ``__func__``)."""
    f = mod.__dict__.get("forward")
    if f is None:
        f = getattr(type(mod), "forward", None)
    f = getattr(f, "__func__", f)
    return (getattr(f, "__qualname__", type(f).__name__), id(f))


def _tensor_shapes(mod) -> tuple:
    """Shape and dtype of the module's own parameters and buffers (a Parameter replaced by one of another shape
    needs another trace; one of the same shape and dtype is read at each step and needs none)."""
    return tuple((k, tuple(t.shape), t.dtype) for d in (mod._parameters, mod._buffers) for k, t in d.items()
                 if t is not None)


def _user_hooks(hooks) -> tuple:
    """The handles of the hooks in ``hooks`` (a module's hook dict) whose function is not defined in torch or
    remat_torch."""
    out = []
    for k, fn in hooks.items():
        f = getattr(fn, "func", fn)   # a functools.partial
        f = getattr(f, "__func__", f)   # a bound method
        if not str(getattr(f, "__module__", "") or "").startswith(("torch.", "remat_torch.")):
            out.append(k)
    return tuple(out)


@contextlib.contextmanager
def refusing_side_effect_hooks(model):
    """Refuse forward hooks that have side effects, while ``model`` is traced.

    A forward hook that returns a new output is traced into the graph and is
    part of the plan, and so is one that changes its output in place. A hook
    runs on the trace's placeholder values only, never during the planned
    steps, so one whose effect is outside the graph would silently do nothing:
    a forward hook that returns ``None`` and changes no tensor it is given
    (logging, capturing a feature for another loss), and any forward or
    pre-forward hook that keeps a tensor it was given or made (``feats.append(out)``,
    ``self.act = out.detach()``), found by the tensor still being alive once
    tracing is over. Such hooks are refused, with the module that holds them.
    Hooks defined in torch or remat_torch are left alone.
    """
    import gc
    import weakref

    import torch
    from remat_core.errors import RematError

    silent: list = []    # forward hooks that returned None and changed nothing
    keeping: list = []   # hooks that kept a tensor
    seen: list = []      # (module name, weak references to the tensors a hook was given, made or returned)
    wrapped: list = []

    def tensors(tree):
        return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]

    class _Made(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.made = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.made.extend(weakref.ref(t) for t in tensors(out))
            return out

    def wrap(name, fn, forward):
        def hook(*args, **kwargs):
            given = tensors(args)
            before = [t._version for t in given]
            with _Made() as mode:
                out = fn(*args, **kwargs)
            seen.append((name, [weakref.ref(t) for t in given + tensors(out)] + mode.made))
            # A hook that changes the output in place (``out.mul_(2)``) returns None too, but what it does is
            # traced into the graph.
            if forward and out is None and [t._version for t in given] == before and name not in silent:
                silent.append(name)
            return out
        return hook

    from torch.nn.modules import module as _m

    places = [(name or type(model).__name__, mod._forward_hooks, mod._forward_pre_hooks)
              for name, mod in model.named_modules()]
    places.append(("<global: torch.nn.modules.module.register_module_forward_hook>", _m._global_forward_hooks,
                   _m._global_forward_pre_hooks))
    for name, fwd, pre in places:
        for hooks, forward in ((fwd, True), (pre, False)):
            for k in _user_hooks(hooks):
                fn = hooks[k]
                hooks[k] = wrap(name, fn, forward)
                wrapped.append((hooks, k, fn))
    try:
        yield
    finally:
        for hooks, k, fn in wrapped:
            if k in hooks:
                hooks[k] = fn
    if seen:
        gc.collect()   # the trace's own values are garbage now; a tensor still alive is held by a hook
        for name, refs in seen:
            if name not in keeping and any(r() is not None for r in refs):
                keeping.append(name)
    if keeping:
        raise RematError(
            f"forward hook(s) on module(s) {keeping} keep a tensor they were given or made: hooks run while the "
            "model is traced, on placeholder values, and never during the planned steps, so what they keep would "
            "be a placeholder and never a step's value. Remove them before rematerialize and read the value from "
            "the model's outputs instead (a hook that only returns a changed output is traced into the plan and "
            "runs every step)")
    if silent:
        raise RematError(
            f"forward hook(s) on module(s) {silent} return nothing: a hook with only side effects (logging, "
            "capturing an output for another loss) would run while the model is traced, on placeholder values, "
            "and never during the planned steps. Remove it before rematerialize (a hook that returns the output, "
            "changed or not, is traced into the plan and runs every step), or read the value from the model's "
            "outputs instead")


def source_location(frames=None) -> str:
    """``file:line: code`` of the innermost frame outside torch and remat_torch."""
    if frames is None:
        frames = traceback.extract_stack()
    for fr in reversed(frames):
        f = os.path.abspath(fr.filename)
        if f.startswith(_TORCH_DIR + os.sep + "torch" + os.sep) or f.startswith(_HERE) or "<frozen" in f:
            continue
        if os.sep + "contextlib.py" in f:
            continue
        return f"{fr.filename}:{fr.lineno}: {(fr.line or '').strip()}"
    return "<unknown location>"


@dataclass
class _Ref:
    kind: str  # "op" (index, output), "input" (leaf index), "state" (param/buffer name), "const" (tensor)
    key: Any


@dataclass
class ValueReads:
    """Values that tracing read from tensors, and the program that recomputes them.

    Attributes
    ----------
    values : list
        The values read, in the order the forward read them.
    locations : list of str
        ``file:line: code`` of each read.
    scopes : list of str
        The module path (``named_modules`` name) that made each read.
    """

    values: list = field(default_factory=list)
    locations: list = field(default_factory=list)
    scopes: list = field(default_factory=list)
    program: list = field(default_factory=list)  # (op index, func, args, kwargs) in order
    outputs: list = field(default_factory=list)  # op index of each read
    clone_sources: bool = False
    #: False when the recording stopped at its ``stop_after``-th read: a trace that reads further asks for more
    complete: bool = True
    _cursor: int = 0

    def __bool__(self) -> bool:
        return bool(self.values)

    def reset(self) -> None:
        self._cursor = 0

    def evaluate(self, named_state: dict, inputs: list) -> list:
        """The values the reads take on a call with ``inputs`` (and the model's current state)."""
        import torch
        from torch.utils._pytree import tree_flatten, tree_map

        results: dict = {}

        def resolve(x):
            if not isinstance(x, _Ref):
                return x
            if x.kind == "op":
                return results[x.key[0]][x.key[1]]
            if x.kind == "input":
                t = inputs[x.key]
            elif x.kind == "state":
                t = named_state[x.key]
            else:
                return x.key
            return t.detach().clone() if self.clone_sources else t.detach()

        with torch.no_grad():
            for idx, func, args, kwargs in self.program:
                a, k = tree_map(resolve, (args, kwargs))
                out = func(*a, **k)
                results[idx] = tree_flatten(out)[0]
        return [results[i][0] for i in self.outputs]

    def matches(self, named_state: dict, inputs: list) -> bool:
        return self.evaluate(named_state, inputs) == self.values


def _is_mutating(func) -> bool:
    schema = getattr(func, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def record_value_reads(model, call_fn, inputs: list, scope_stack: list, stop_after: int | None = None) -> ValueReads:
    """Run the forward once for real and record every value it reads from a tensor.

    ``call_fn(state, inputs)`` runs the model with the parameter/buffer dict
    ``state`` on the tensor leaves ``inputs``. Buffers are cloned and the RNG
    state is restored, so the model is not changed. With ``stop_after``, the
    run stops at that many reads (Hugging Face's mask check reads one value
    before the first layer: the rest of the forward need not run) and the
    result is marked incomplete if it got there.
    """
    import torch
    from torch.utils._pytree import tree_flatten, tree_map
    from torch.utils._python_dispatch import TorchDispatchMode

    local_scalar = torch.ops.aten._local_scalar_dense.default
    state = {k: p.detach() for k, p in model.named_parameters()}
    state.update({k: b.detach().clone() for k, b in model.named_buffers()})
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    sources = {id(t): _Ref("state", k) for k, t in state.items()}
    ins = [x.detach() if isinstance(x, torch.Tensor) else x for x in inputs]
    sources.update({id(x): _Ref("input", i) for i, x in enumerate(ins) if isinstance(x, torch.Tensor)})
    ops: list = []
    producer: dict = {}
    keep: list = []
    reads: list = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)

            def ref(x):
                if isinstance(x, torch.Tensor):
                    p = producer.get(id(x))
                    if p is not None:
                        return _Ref("op", p)
                    s = sources.get(id(x))
                    if s is not None:
                        return s
                    keep.append(x)
                    return _Ref("const", x)
                return x

            a, k = tree_map(ref, (args, kwargs))
            idx = len(ops)
            ops.append((idx, func, a, k))
            for j, o in enumerate(tree_flatten(out)[0]):
                if isinstance(o, torch.Tensor):
                    producer[id(o)] = (idx, j)
                    keep.append(o)
            if func is local_scalar:
                reads.append((idx, out, source_location(), scope_stack[-1] if scope_stack else ""))
                if stop_after is not None and len(reads) >= stop_after:
                    raise _StopRecording
            return out

    stopped = False
    with torch.random.fork_rng(devices=[]):
        try:
            with Recorder():
                call_fn(state, ins)
        except _StopRecording:
            stopped = True

    rv = ValueReads(complete=not stopped)
    if not reads:
        return rv
    # backward slice from the reads
    need = set()
    todo = [r[0] for r in reads]
    while todo:
        i = todo.pop()
        if i in need:
            continue
        need.add(i)
        _, func, a, k = ops[i]
        for x in tree_flatten((a, k))[0]:
            if isinstance(x, _Ref) and x.kind == "op":
                todo.append(x.key[0])
    program = []
    for i in sorted(need):
        idx, func, a, k = ops[i]
        where = next(((loc, sc) for (ri, _, loc, sc) in reads if ri >= i), (reads[-1][2], reads[-1][3]))
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            raise _refuse("depends on a random op", *where)
        for x in tree_flatten((a, k))[0]:
            if isinstance(x, _Ref) and x.kind == "state" and x.key in trainable:
                raise _refuse(f"depends on the trainable parameter {x.key!r} (its value changes every step)",
                              *where)
        a, k = tree_map(lambda x: _Ref("const", x.key.detach().clone()) if isinstance(x, _Ref) and x.kind == "const"
                        else x, (a, k))
        program.append((idx, func, a, k))
        rv.clone_sources |= _is_mutating(func)
    rv.program = program
    rv.outputs = [r[0] for r in reads]
    rv.values = [r[1] for r in reads]
    rv.locations = [r[2] for r in reads]
    rv.scopes = [r[3] for r in reads]
    return rv


class _StopRecording(Exception):
    """Raised inside the recorded forward once ``stop_after`` values were read."""


def _refuse(why: str, location: str, scope: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"data-dependent control flow: module {scope or '<root>'!r} reads a tensor's value at {location}, "
        f"and the value {why}, so no static plan can be made for it. Train this model under the live runtime "
        "instead (`with remat_torch.dtr(budget=...):`, which needs no plan), or make that branch independent "
        "of tensor values")


@contextlib.contextmanager
def replaying_reads(reads: ValueReads | None):
    """Inside, fake tensors answer value reads with the recorded values, in order.

    A read at another source line than recorded, or more reads than
    recorded, means the forward's control flow is not reproducible: refused.
    """
    if not reads:
        yield
        return
    import torch
    import torch._subclasses.fake_impls as fi

    key = torch.ops.aten._local_scalar_dense.default
    table = fi.op_implementations_dict
    saved = table.get(key)

    def replay(fake_mode, func, arg):
        i = reads._cursor
        loc = source_location()
        if i >= len(reads.values) and not reads.complete:   # a partial recording: record further
            from torch._subclasses.fake_tensor import DataDependentOutputException

            raise DataDependentOutputException(func)
        if i >= len(reads.values) or loc != reads.locations[i]:
            raise UnsupportedModelError(
                f"data-dependent control flow: a tensor's value is read at {loc}, but the recorded run read "
                f"{'nothing more' if i >= len(reads.values) else 'at ' + reads.locations[i]}; the forward's "
                "control flow is not reproducible. Train this model under `remat_torch.dtr(budget=...)` instead")
        reads._cursor = i + 1
        return reads.values[i]

    table[key] = replay
    try:
        yield
    finally:
        if saved is None:
            table.pop(key, None)
        else:
            table[key] = saved
