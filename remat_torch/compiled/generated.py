"""Peak memory of the code Inductor generated: a replay of its Python wrapper's allocations.

Inductor's wrapper (the ``call`` function of the module it writes for each
graph) allocates every buffer itself: ``bufN = empty_strided_cpu(...)``, frees
it with ``del bufN``, hands a dead buffer to a new one (``bufM = bufN; del bufN
# reuse``), views one (``reinterpret_tensor(...)  # alias``), and calls extern
kernels that allocate their own outputs (``bufN = torch.ops.aten...(...)``,
then ``bufM = bufN[i]``). :func:`simulate` replays those lines with a
reference count per storage and returns the peak of live bytes. Extern ops'
scratch memory (measured once per shape, see ``remat_torch.compiled._workspace``)
is added while they run. On tiny GPT-2 the replay of the forward and backward
matched the allocator meter within 0.3%.

:func:`recording` captures, while it is active, the wrapper source of every
graph Inductor generates in this thread together with each buffer's storage
size and each extern op's scratch bytes (:func:`capture`). Nothing is captured
when Inductor reuses cached code (the wrapper is then not generated).

This module imports torch and Inductor (lazily, in :func:`recording`) and
``remat_torch.compiled`` for the scratch measurement; nothing else of remat.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
import re
import threading

__all__ = ["recording", "capture", "simulate", "step_peak", "lowered"]

log = logging.getLogger(__name__)
_local = threading.local()

_ALLOC = re.compile(r"^(\w+) = empty_strided(?:_\w+)?\((\(.*?\)), (\(.*?\)), (?:device=\S+, )?(?:dtype=)?torch\.(\w+)")
_REUSE = re.compile(r"^(\w+) = (?:reinterpret_tensor\()?(\w+)\b.*; del (\w+)\s+# reuse")
_ALIAS = re.compile(r"^(\w+) = reinterpret_tensor\((\w+),.*# alias")
_ITEM = re.compile(r"^(\w+) = (\w+)\[(\d+)\]$")
_EXTERN = re.compile(r"^(\w+) = torch\.ops\.")
_DEL = re.compile(r"^del (\w+)$")
_ARGS = re.compile(r"^(.*) = args$")
_RETURN = re.compile(r"^return \((.*)\)")
_ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


def _install() -> None:
    """Wrap ``GraphLowering.codegen`` once so that an active :func:`recording` sees each generated wrapper."""
    import torch._inductor.graph as inductor_graph

    if getattr(inductor_graph.GraphLowering.codegen, "_remat_recording", False):
        return
    original = inductor_graph.GraphLowering.codegen

    @functools.wraps(original)
    def codegen(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        rec = getattr(_local, "records", None)
        if rec is not None:
            try:
                rec.append(capture(self, out[0]))
            except Exception as exc:    # an unexpected wrapper: no replay for this graph (logged)
                log.warning("remat: the generated code could not be captured for its memory replay: %s", exc)
        return out

    codegen._remat_recording = True
    inductor_graph.GraphLowering.codegen = codegen


@contextlib.contextmanager
def recording():
    """Collect :func:`capture` results of the graphs Inductor generates in this thread inside the block (an
    enclosing recording sees them too)."""
    _install()
    previous = getattr(_local, "records", None)
    _local.records = records = []
    try:
        yield records
    finally:
        _local.records = previous
        if previous is not None:
            previous.extend(records)


def capture(graph, wrapper_code) -> dict:
    """The wrapper source of one lowered graph, each buffer's storage bytes and each extern op's scratch bytes."""
    from torch._inductor import ir

    from . import _workspace

    source = getattr(wrapper_code, "value", wrapper_code)
    sizes = {}
    for name, buf in graph.name_to_buffer.items():
        try:
            layout = buf.get_layout()
            if isinstance(layout, (ir.MultiOutputLayout, ir.NoneLayout)):
                continue
            sizes[name] = int(graph.sizevars.optimization_hint(layout.storage_size(), fallback=0)) \
                * layout.dtype.itemsize
        except (AttributeError, NotImplementedError, TypeError):
            continue
    scratch = {}
    for op in getattr(graph, "operations", ()):
        target = getattr(op, "op_overload", None)
        if target is None:
            continue
        for origin in getattr(op, "origins", None) or ():
            if getattr(origin, "target", None) is target:
                scratch[op.get_name()] = _workspace(origin)
                break
    inputs = {}
    for name, box in getattr(graph, "graph_inputs", {}).items():
        try:
            hint = graph.sizevars.optimization_hint
            inputs[name] = _storage_bytes([int(hint(d, fallback=0)) for d in box.get_size()],
                                          [int(hint(d, fallback=0)) for d in box.get_stride()],
                                          box.get_dtype().itemsize)
        except (AttributeError, NotImplementedError, TypeError):    # a symbol or an opaque input: no tensor
            continue
    return {"source": str(source), "sizes": sizes, "workspace": scratch, "inputs": inputs}


def lowered(gm, is_backward: bool) -> dict:
    """:func:`capture` of the code Inductor generates for ``gm``, without compiling or running it.

    The same steps as Inductor's ``compile_fx_inner`` up to the wrapper code
    (views to reshapes, fake-tensor propagation, the post-grad passes,
    lowering, scheduling with fusion and reordering, and the generation of the
    wrapper and kernel sources), with the Inductor settings in effect; the
    kernels are not compiled. ``gm`` is not modified; its placeholders'
    ``meta["val"]`` are the example inputs. About as slow as the Python part of
    a compile (seconds on a small model).
    """
    import torch
    from torch._inductor.debug import DebugContext

    example_inputs = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    previous, _local.records = getattr(_local, "records", None), None    # not one of the compiled graphs
    try:
        with torch.utils._python_dispatch._disable_current_modes(), DebugContext():
            return _lowered(gm, example_inputs, is_backward)
    finally:
        _local.records = previous


def _lowered(gm, example_inputs, is_backward: bool) -> dict:
    import copy

    import torch
    from torch._inductor.compile_fx import (_recursive_post_grad_passes, _recursive_record_original_output_strides,
                                            fake_tensor_prop, shape_env_from_inputs, view_to_reshape)
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    gm = copy.deepcopy(gm)     # the passes below rewrite it
    view_to_reshape(gm)
    with torch.no_grad():
        fake_mode = fake_tensor_prop(gm, example_inputs)
    _recursive_record_original_output_strides(gm)
    shape_env = getattr(gm, "shape_env", None) or shape_env_from_inputs(example_inputs)
    with V.set_fake_mode(fake_mode):
        _recursive_post_grad_passes(gm, is_inference=False)
        graph = GraphLowering(gm, example_inputs=example_inputs, shape_env=shape_env, is_inference=False,
                              is_backward=is_backward)
        with V.set_graph_handler(graph), V.set_extern_kernel_nodes([]), _scalar_cpu_kernels():
            graph.run(*example_inputs)
            code, _ = graph.codegen()
            return capture(graph, code)


@contextlib.contextmanager
def _scalar_cpu_kernels():
    """Inside the block, Inductor's C++ backend writes only the scalar version of each kernel.

    The scalar version is generated first and alone decides what the wrapper
    allocates (the buffers a kernel keeps local, those it writes in place);
    the vectorized versions generated after it are written with in-place
    updates off and change nothing in the wrapper. Skipping them takes about
    a third off a lowering (tiny Llama: 2.6 -> 1.7 s of CPU per forward and
    backward, the replayed peak equal on every candidate).
    """
    try:
        from torch._inductor.codegen import cpp
    except ImportError:     # pragma: no cover - a torch without the C++ backend: nothing to skip
        yield
        return

    class ScalarProxy(cpp.CppKernelProxy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.picked_vec_isa = None      # codegen_functions stops after the scalar kernel

    previous = cpp.CppScheduling.kernel_proxy_cls
    cpp.CppScheduling.kernel_proxy_cls = ScalarProxy
    try:
        yield
    finally:
        cpp.CppScheduling.kernel_proxy_cls = previous


def _storage_bytes(shape, stride, itemsize: int) -> int:
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(shape, stride))) * itemsize


def simulate(code: dict, inputs: dict | None = None, trace: list | None = None) -> tuple[int, int, list]:
    """Replay one captured wrapper: ``(peak bytes, bytes live at return, [(storage, bytes) per returned value])``.

    ``inputs`` maps argument names to ``(storage key, bytes)``: those are live
    at entry and freed where the wrapper drops its last reference (a backward's
    saved tensors); other arguments (parameters, the user's inputs) are the
    caller's and not counted. Returned storages are ``None`` for uncounted
    arguments. ``trace``, when given, receives ``(line, live bytes after it)``
    for every line replayed (to find where the peak is).
    """
    lines = code["source"].split("\n")
    sizes, scratch = code["sizes"], code.get("workspace", {})
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("def call(self, args)"))
    indent = None
    body = []
    for raw in lines[start + 1:]:
        if not raw.strip():
            continue
        ind = len(raw) - len(raw.lstrip())
        indent = ind if indent is None else indent
        if ind < indent:
            break
        body.append(raw.strip())
    items: dict = {}
    for line in body:
        m = _ITEM.match(line)
        if m:
            items.setdefault(m.group(2), []).append(m.group(1))
    refs, nbytes, var = {}, {}, {}
    live = 0
    counter = [0]
    for key, size in dict((("in", k), b) for k, b in (inputs or {}).values()).items():
        nbytes[key], refs[key] = size, 0
        live += size
    peak = live
    pending: dict = {}

    def new(size: int):
        nonlocal live
        counter[0] += 1
        key = ("new", counter[0])
        nbytes[key], refs[key] = size, 0
        live += size
        return key

    def bind(name, key):
        var[name] = key
        refs[key] += 1

    def drop(name):
        nonlocal live
        key = var.pop(name, None)
        if key is not None:
            refs[key] -= 1
            if refs[key] == 0:
                live -= nbytes[key]

    returned: list = []
    for line in body:
        if line.startswith("#"):
            continue
        if m := _ARGS.match(line):
            for name in (x.strip() for x in m.group(1).split(",")):
                if name and name in (inputs or {}):
                    bind(name, ("in", inputs[name][0]))
        elif m := _ALLOC.match(line):
            name, shape, stride, dtype = m.groups()
            size = sizes.get(name)
            if size is None:
                size = _storage_bytes(ast.literal_eval(shape), ast.literal_eval(stride), _ITEMSIZE.get(dtype, 4))
            bind(name, new(size))
            peak = max(peak, live)
        elif m := _REUSE.match(line):
            name, source, dead = m.groups()
            if source in var:
                bind(name, var[source])
            drop(dead)
        elif m := _ALIAS.match(line):
            name, source = m.groups()
            if source in var:
                bind(name, var[source])
        elif m := _ITEM.match(line):
            name, tup, _ = m.groups()
            if name in pending.get(tup, {}):
                bind(name, pending[tup][name])
        elif m := _EXTERN.match(line):
            name = m.group(1)
            if name in sizes:       # an extern op with one output
                bind(name, new(sizes[name]))
            else:                   # several outputs, all allocated by the op, taken out by the items after it
                pending[name] = {item: new(sizes.get(item, 0)) for item in items.get(name, [])}
            peak = max(peak, live + scratch.get(name, 0))
        elif m := _DEL.match(line):
            drop(m.group(1))
        elif m := _RETURN.match(line):
            returned = [_base(x) for x in _split_top(m.group(1)) if x.strip()]
            break
        if trace is not None:
            trace.append((line, live))
    outs = [(var.get(name), nbytes.get(var.get(name), 0)) for name in returned]
    return peak, live, outs


def _split_top(text: str) -> list:
    """``text`` split at the commas outside parentheses (a return tuple may hold ``reinterpret_tensor(...)``)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        depth += (ch in "([") - (ch in ")]")
        cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def _base(expr: str) -> str:
    """The variable a returned expression reads: ``bufN`` of ``reinterpret_tensor(bufN, ...)``, else itself."""
    m = re.match(r"^reinterpret_tensor\((\w+),", expr.strip())
    return m.group(1) if m else expr.strip()


def step_peak(forward: dict, backward: dict, num_fwd_outputs: int) -> int:
    """Peak bytes of one training step running the captured forward then backward (above the level before it).

    The backward's leading arguments are the forward's saved values in order
    (after its ``num_fwd_outputs`` user outputs): they are live when it starts,
    shared storages counted once, and freed where it drops them. The forward's
    user outputs (the loss) stay alive through the backward.
    """
    fw_peak, fw_end, fw_outs = simulate(forward)
    src = backward["source"]
    args_line = next(line.strip() for line in src.split("\n") if line.strip().endswith("= args"))
    names = [a.strip() for a in args_line[:-len("= args")].split(",") if a.strip()]
    inputs = {}
    for i, name in enumerate(names):
        j = num_fwd_outputs + i
        if name.startswith(("tangents", "primals")) or j >= len(fw_outs):
            continue
        key, size = fw_outs[j]
        if key is not None:
            inputs[name] = (key, size)
    saved = sum(dict(inputs.values()).values())
    bw_peak, _, _ = simulate(backward, inputs)
    # the gradients of the outputs (autograd's ones for a loss, zeros for an output the loss does not read, such as
    # logits) are allocated before the backward and held by autograd's call until it returns
    tangents = sum(b for name, b in backward.get("inputs", {}).items() if name.startswith("tangents"))
    return max(fw_peak, fw_end - saved + bw_peak + tangents)
